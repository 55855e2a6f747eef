"""fa.tasks.matmul / fa.tasks.dot_general: the product ``x @ w`` whose gradients are the two
products ``g w^T`` and ``x^T g`` with no transposes; values and gradients equal JAX's own up to
float reordering, against numpy's float64 products as the independent reference."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import fedjax_avail as fa

RNG = np.random.default_rng(0)


def _loss(product):
    return lambda x, w, t: jnp.sum(jnp.tanh(product(x, w)) * t)


def test_values_and_gradients_are_the_products_numpy_computes():
    x, w = RNG.normal(size=(7, 5)).astype(np.float32), RNG.normal(size=(5, 3)).astype(np.float32)
    t = RNG.normal(size=(7, 3)).astype(np.float32)
    value, (dx, dw) = jax.value_and_grad(_loss(fa.tasks.matmul), argnums=(0, 1))(x, w, t)
    y = x.astype(np.float64) @ w.astype(np.float64)
    g = t * (1 - np.tanh(y) ** 2)  # d loss / d y
    np.testing.assert_allclose(value, np.sum(np.tanh(y) * t), rtol=1e-5)
    np.testing.assert_allclose(dx, g @ w.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dw, x.T @ g, rtol=1e-5, atol=1e-6)


def test_gradients_under_vmap_and_inside_a_scan_match_jax_s_own_product():
    xs = jnp.asarray(RNG.normal(size=(4, 3, 6, 5)), jnp.float32)  # members x steps x [6, 5]
    w0 = jnp.asarray(RNG.normal(size=(5, 2)), jnp.float32)
    t = jnp.asarray(RNG.normal(size=(6, 2)), jnp.float32)

    def train(product):
        def member(x):
            def step(w, batch):
                return w - 0.1 * jax.grad(_loss(product), argnums=1)(batch, w, t), None
            return jax.lax.scan(step, w0, x)[0]
        return jax.jit(jax.vmap(member))(xs)

    np.testing.assert_allclose(train(fa.tasks.matmul), train(jnp.dot), rtol=1e-5, atol=1e-6)


def test_dot_general_is_flax_dense_s_product_with_the_same_parameters():
    # leading axes flattened as rows: [1024, 1024] inputs, large enough for the custom product
    x = jnp.asarray(RNG.normal(size=(2, 512, 1024)), jnp.float32)
    plain, ours = nn.Dense(4), nn.Dense(4, dot_general=fa.tasks.dot_general)
    params = plain.init(jax.random.PRNGKey(0), x)
    assert jax.tree.structure(params) == jax.tree.structure(ours.init(jax.random.PRNGKey(0), x))

    def loss(module, p):
        return jnp.sum(module.apply(p, x) ** 2)

    assert "name=_matmul" in str(jax.make_jaxpr(lambda p: ours.apply(p, x))(params))
    np.testing.assert_allclose(ours.apply(params, x), plain.apply(params, x), rtol=1e-5,
                               atol=1e-5)
    for a, b in zip(jax.tree.leaves(jax.grad(lambda p: loss(ours, p))(params)),
                    jax.tree.leaves(jax.grad(lambda p: loss(plain, p))(params)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("case", ["batch dims", "contracting the first axis", "integers",
                                  "preferred type", "small"])
def test_other_contractions_are_lax_dot_general_unchanged(case):
    x = jnp.asarray(RNG.normal(size=(4, 512, 512)), jnp.float32)  # M K = 2^20
    w = jnp.asarray(RNG.normal(size=(512, 2)), jnp.float32)
    args = {
        "batch dims": (x, jnp.ones((4, 512, 2)), (((2,), (1,)), ((0,), (0,)))),
        "contracting the first axis": (x, jnp.ones((4, 2)), (((0,), (0,)), ((), ()))),
        "integers": (x.astype(jnp.int32), w.astype(jnp.int32), (((2,), (0,)), ((), ()))),
        "preferred type": (x.astype(jnp.bfloat16), w.astype(jnp.bfloat16),
                           (((2,), (0,)), ((), ()))),
        "small": (x[:, :1], w, (((2,), (0,)), ((), ()))),  # [4, 512] x [512, 2]: 2^11
    }[case]
    kwargs = {"preferred_element_type": jnp.float32} if case == "preferred type" else {}
    jaxpr = jax.make_jaxpr(lambda a, b: fa.tasks.dot_general(a, b, args[2], **kwargs))(*args[:2])
    assert "name=_matmul" not in str(jaxpr)
    np.testing.assert_array_equal(fa.tasks.dot_general(*args, **kwargs),
                                  lax.dot_general(*args, **kwargs))


@pytest.mark.parametrize("x, w", [((4, 512, 512), (512, 2)), ((2, 8), (8, 2**20)),
                                  ((2**20, 2), (2, 3))])
def test_dense_s_contraction_of_a_large_array_is_the_custom_product(x, w):
    # M K, K N or M N at least 2^20 elements
    jaxpr = jax.make_jaxpr(lambda a, b: fa.tasks.dot_general(a, b, (((a.ndim - 1,), (0,)),
                                                                     ((), ()))))
    assert "name=_matmul" in str(jaxpr(jnp.ones(x), jnp.ones(w)))


def test_small_products_keep_jax_s_rule_and_large_ones_do_not(monkeypatch):
    # the forward jaxpr (under jax.grad the custom_vjp call is inlined into its rule), of
    # convolutions as one product each (what a gradient on one device computes)
    monkeypatch.setattr(fa.tasks._conv, "GROUP_BYTES", 2**62)
    lenet = fa.tasks.lenet5((28, 28, 1))
    params = lenet.init(jax.random.PRNGKey(0))
    for batch_size, custom in ((5, False), (64, True)):  # [B 28 28, 25] windows: 2^20 at B = 54
        batch = {"x": jnp.zeros((batch_size, 28, 28, 1), jnp.uint8),
                 "y": jnp.zeros((batch_size,), jnp.int32)}
        assert ("name=_matmul" in str(jax.make_jaxpr(lenet.loss)(params, batch))) == custom
    conv = jax.make_jaxpr(lambda x, k: fa.tasks.conv_general_dilated(
        x, k, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")))
    assert "name=_matmul" in str(conv(jnp.ones((10, 30, 30, 32)), jnp.ones((3, 3, 32, 64))))


@pytest.mark.parametrize("x, w", [((2, 3, 4), (4, 5)), ((3,), (3, 2)), ((2, 3), (4, 2))])
def test_operands_that_are_not_two_chained_matrices_are_refused(x, w):
    with pytest.raises(ValueError, match=r"matmul takes x \[M, K\] and w \[K, N\]"):
        fa.tasks.matmul(jnp.ones(x), jnp.ones(w))
    with pytest.raises(ValueError, match="of one dtype"):
        jax.grad(lambda a: fa.tasks.matmul(a, jnp.ones(w)).sum())(jnp.ones(x))


def test_two_dtypes_are_refused():
    with pytest.raises(ValueError, match="float32.*bfloat16"):
        fa.tasks.matmul(jnp.ones((2, 3)), jnp.ones((3, 2), jnp.bfloat16))


def test_forward_mode_raises_as_documented():
    x, w = jnp.ones((3, 5)), jnp.ones((5, 2))
    with pytest.raises(TypeError):
        jax.jvp(fa.tasks.matmul, (x, w), (x, w))


@pytest.mark.parametrize("precision", [jax.lax.Precision.HIGHEST, "bfloat16"])
def test_precision_applies_to_the_product_and_both_gradients(precision):
    x, w = jnp.ones((4, 5)), jnp.ones((5, 3))

    def loss(x, w):
        return jnp.sum(fa.tasks.matmul(x, w, precision) ** 2)

    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(x, w)
    products = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "dot_general"]
    products += [e for eqn in jaxpr.jaxpr.eqns for sub in fa.memory._sub_jaxprs(
        eqn.params.values()) for e in sub.eqns if e.primitive.name == "dot_general"]
    assert len(products) == 3
    expected = jax.lax.dot_general(x, w, (((1,), (0,)), ((), ())), precision=precision)
    assert all(e.params["precision"] == jax.make_jaxpr(
        lambda a, b: jax.lax.dot_general(a, b, (((1,), (0,)), ((), ())), precision=precision)
    )(x, w).jaxpr.eqns[0].params["precision"] for e in products)
    np.testing.assert_allclose(fa.tasks.matmul(x, w, precision), expected)
    # Dense's product of a large operand passes its precision on
    big = jnp.ones((2**20 // 5 + 1, 5))
    text = str(jax.make_jaxpr(lambda a: fa.tasks.dot_general(
        a, w, (((1,), (0,)), ((), ())), precision=precision))(big))
    assert "custom_vjp_call" in text and str(products[0].params["precision"][0]) in text
