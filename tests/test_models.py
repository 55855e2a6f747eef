"""The papers' models: parameter counts from the papers and the authors' code, and the
``initializer="torch"`` start (PyTorch's ``nn.Conv2d``/``nn.Linear`` defaults, what WKAFL's code
trains from): every kernel and bias ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_avail as fa
from fedjax_avail import experiments


def _init(module, shape):
    return module.init(jax.random.PRNGKey(0), jnp.zeros((1, *shape), jnp.float32))["params"]


def _count(params):
    return sum(leaf.size for leaf in jax.tree.leaves(params))


@pytest.mark.parametrize("module, shape, expected", [
    (fa.tasks.CNN(10), (28, 28, 1), 582_026),  # wkafl.md 4.2
    (fa.tasks.CNN(62), (28, 28, 1), 608_702),
    (fa.tasks.CNN(10, "torch"), (28, 28, 1), 582_026),
    (fa.tasks.LeNet5(10, "VALID"), (32, 32, 3), 62_006),  # WKAFL's CIFAR-10 LeNet
    (fa.tasks.CelebACNN(), (84, 84, 3), 1_600_792),
])
def test_parameter_counts_of_the_papers_models(module, shape, expected):
    assert _count(_init(module, shape)) == expected


def test_torch_initializer_draws_every_layer_uniformly_within_one_over_root_fan_in():
    params = _init(fa.tasks.CNN(10, "torch"), (28, 28, 1))
    # fan_in of each layer: channels x kernel area for convolutions, inputs for dense layers
    # (DenseOI kernels are stored [out, in]).
    fan_ins = {"Conv_0": 1 * 25, "Conv_1": 32 * 25, "DenseOI_0": 4 * 4 * 64, "DenseOI_1": 512}
    assert set(params) == set(fan_ins)
    for layer, fan_in in fan_ins.items():
        bound = 1 / math.sqrt(fan_in)
        for name in ("kernel", "bias"):
            values = np.asarray(params[layer][name], np.float64).ravel()
            assert np.abs(values).max() <= bound * (1 + 1e-6), (layer, name)
            if values.size >= 500:  # the largest of n uniform draws is near the bound
                assert np.abs(values).max() > 0.9 * bound, (layer, name)
            if values.size >= 20_000:  # the variance of U(-a, a) is a^2 / 3 (rel. s.e. < 1%)
                assert np.var(values) == pytest.approx(bound**2 / 3, rel=0.03), (layer, name)
                assert abs(np.mean(values)) < 0.02 * bound, (layer, name)
        assert np.abs(np.asarray(params[layer]["bias"])).max() > 0.5 * bound  # not zeros


def test_flax_initializer_is_unchanged_lecun_normal_with_zero_bias():
    params = _init(fa.tasks.CNN(10), (28, 28, 1))
    kernel = np.asarray(params["Conv_1"]["kernel"], np.float64)
    assert kernel.shape == (5, 5, 32, 64)
    # LeCun normal (truncated at 2 sd, rescaled to variance 1 / fan_in), fan_in = 800.
    assert np.var(kernel) == pytest.approx(1 / 800, rel=0.05)
    assert not np.asarray(params["Conv_1"]["bias"]).any()


def test_torch_start_gives_the_small_logits_wkafl_trains_from_on_raw_pixels():
    # WKAFL's code feeds raw 0-255 pixels: Flax's defaults start ~10x larger logits (a loss
    # near 100 at the first evaluation), PyTorch's ~3^(4/2) = 9x smaller (4 layers, each with
    # a third of the variance).
    x = jnp.asarray(np.random.default_rng(0).integers(0, 256, (64, 28, 28, 1)), jnp.float32)
    scale = {}
    for init in fa.tasks.INITS:
        module = fa.tasks.CNN(10, init)
        logits = module.apply(module.init(jax.random.PRNGKey(0), x[:1]), x)
        scale[init] = float(jnp.sqrt(jnp.mean(logits**2)))
    assert 5 < scale["flax"] / scale["torch"] < 16


def test_an_unknown_initializer_is_refused_by_name():
    with pytest.raises(ValueError, match=r"init must be one of \('flax', 'torch'\), got 'kaiming'"):
        fa.tasks.cnn(init="kaiming")
    with pytest.raises(ValueError, match="init must be one of"):
        _init(fa.tasks.CNN(10, "kaiming"), (28, 28, 1))


def test_wkafl_experiments_start_from_the_authors_initialisation():
    experiment = experiments.get("wkafl-mnist")
    assert experiment.defaults["init"] == "torch"
    assert experiment.all_choices()["init"] == fa.tasks.INITS
    with pytest.raises(ValueError, match="init"):
        experiment.config({"init": "kaiming"})
