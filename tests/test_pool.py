"""fa.tasks.max_pool: a pooling whose windows tile the image, from strided slices on a CPU (a
gradient without XLA:CPU's scatter); values and gradients are nn.max_pool's bit for bit."""

import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

import fedjax_avail as fa

CPU = jax.default_backend() == "cpu"


def _reference_gradient(x: np.ndarray, window: tuple[int, int], g: np.ndarray) -> np.ndarray:
    """An independent plain loop: each window's cotangent to its first maximal element in
    row-major order; elements no window covers get zero."""
    kh, kw = window
    out = np.zeros_like(x)
    for b, i, j, c in itertools.product(*map(range, g.shape)):
        tile = x[b, i * kh:(i + 1) * kh, j * kw:(j + 1) * kw, c]
        a, d = np.unravel_index(np.argmax(tile), tile.shape)  # argmax: the first maximum
        out[b, i * kh + a, j * kw + d, c] = g[b, i, j, c]
    return out


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize(("shape", "window"), [((3, 8, 8, 4), (2, 2)), ((2, 9, 7, 3), (2, 2)),
                                               ((2, 9, 11, 5), (3, 2)), ((1, 5, 5, 2), (5, 5))])
def test_values_and_gradients_are_flax_max_pool_bit_for_bit(shape, window, ties):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    if ties:  # few distinct values: most windows hold a tie (ReLU zeros, saturated pixels)
        x = np.maximum(np.round(x), 0.0).astype(np.float32)
    ours, pull_ours = jax.vjp(lambda a: fa.tasks.max_pool(a, window, window), jnp.asarray(x))
    flax, pull_flax = jax.vjp(lambda a: nn.max_pool(a, window, window), jnp.asarray(x))
    g = rng.standard_normal(ours.shape).astype(np.float32)
    np.testing.assert_array_equal(ours, flax)
    np.testing.assert_array_equal(pull_ours(jnp.asarray(g))[0], pull_flax(jnp.asarray(g))[0])
    np.testing.assert_array_equal(pull_ours(jnp.asarray(g))[0], _reference_gradient(x, window, g))


def test_under_vmap_and_jit_it_is_still_flax_max_pool():
    x = jnp.asarray(np.random.default_rng(1).standard_normal((3, 2, 6, 6, 4), np.float32))

    def loss(pool, a):
        return jnp.sum(jnp.sin(pool(a, (2, 2), (2, 2))))

    grads = [jax.jit(jax.vmap(jax.grad(lambda a, pool=pool: loss(pool, a))))(x)
             for pool in (fa.tasks.max_pool, nn.max_pool)]
    np.testing.assert_array_equal(*grads)


@pytest.mark.parametrize(("shape", "window", "strides", "padding"), [
    ((2, 8, 8, 3), (2, 2), None, "VALID"),      # flax: strides None is stride 1 (overlapping)
    ((2, 8, 8, 3), (3, 3), (2, 2), "VALID"),    # overlapping windows
    ((2, 9, 9, 3), (2, 2), (2, 2), "SAME"),     # padded
    ((2, 8, 3), (2,), (2,), "VALID"),           # 1-D
    ((2, 1, 8, 3), (2, 2), (2, 2), "VALID"),    # a window larger than the image
])
def test_other_poolings_are_flax_max_pool_unchanged(shape, window, strides, padding):
    x = jnp.asarray(np.random.default_rng(2).standard_normal(shape, np.float32))

    def pooled(pool):
        return jax.make_jaxpr(lambda a: pool(a, window, strides, padding))(x)

    assert "reduce_window_max" in str(pooled(fa.tasks.max_pool))
    np.testing.assert_array_equal(fa.tasks.max_pool(x, window, strides, padding),
                                  nn.max_pool(x, window, strides, padding))


def test_the_built_in_models_use_it():
    for build in (fa.tasks.lenet5, fa.tasks.cnn):  # LeNet-5 and WKAFL's CNN
        task = build((28, 28, 1))
        params = task.init(jax.random.PRNGKey(0))
        batch = {"x": np.zeros((2, 28, 28, 1), np.float32), "y": np.zeros(2, np.int32)}
        text = str(jax.make_jaxpr(jax.grad(task.loss))(params, batch))
        assert ("select_and_scatter_add" in text) == (not CPU)


# nn.max_pool's scatter is what XLA:CPU's default fusion emitters make of its gradient; the
# default tier's elemental emitters (TEST_XLA_FLAGS, tests/conftest.py) make none: checked in
# the slow tier, which compiles as users do
@pytest.mark.parametrize("pool", [fa.tasks.max_pool,
                                  pytest.param(nn.max_pool, marks=pytest.mark.slow)])
def test_its_gradient_in_a_loop_compiles_without_a_scatter(pool):
    def steps(w, images):  # local SGD's shape: gradients inside a scan
        def step(v, x):
            grad = jax.grad(lambda u: jnp.sum(jnp.sin(pool(x * u, (2, 2), (2, 2)))))(v)
            return v - 0.1 * grad, None
        return jax.lax.scan(step, w, images)[0]

    images = jnp.ones((3, 2, 8, 8, 4))
    compiled = jax.jit(steps).lower(jnp.ones(4), images).compile().as_text()
    scattered = re.findall(r"= \w+\[[\d,]*\]\S* scatter\(", compiled)
    assert (not scattered) == (CPU and pool is fa.tasks.max_pool), scattered


def test_second_derivatives_are_flax_max_pool_and_forward_mode_is_refused_on_a_cpu():
    x = jnp.asarray(np.random.default_rng(4).standard_normal((1, 4, 6, 2), np.float32))

    def loss(pool):
        return lambda a: jnp.sum(jnp.sin(pool(a, (2, 2), (2, 2))) ** 2)

    np.testing.assert_array_equal(jax.jacrev(jax.grad(loss(fa.tasks.max_pool)))(x),
                                  jax.jacrev(jax.grad(loss(nn.max_pool)))(x))
    if CPU:  # a custom_vjp: JAX's own error, not a wrong number
        with pytest.raises(TypeError, match="forward-mode"):
            jax.jvp(loss(fa.tasks.max_pool), (x,), (x,))


@pytest.mark.skipif(not CPU, reason="on accelerators it is nn.max_pool")
def test_a_window_holding_a_nan_passes_no_gradient_on_a_cpu():
    x = jnp.asarray([[1.0, 2.0, 5.0, 3.0], [np.nan, 0.0, 4.0, 4.0]])[None, :, :, None]
    value, pull = jax.vjp(lambda a: fa.tasks.max_pool(a, (2, 2), (2, 2)), x)
    assert np.isnan(value[0, 0, 0, 0]) and value[0, 0, 1, 0] == 5.0
    np.testing.assert_array_equal(pull(jnp.ones_like(value))[0][0, :, :, 0],
                                  [[0, 0, 1, 0], [0, 0, 0, 0]])
