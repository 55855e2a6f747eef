"""A matrix product whose gradients keep XLA:CPU's fast layouts inside loops.

JAX differentiates ``y = x @ w`` (``x [M, K]``, ``w [K, N]``) with respect to ``w`` as the
product ``g^T x`` (``[N, K]``) followed by a transpose. Inside the local steps' loops XLA:CPU
(JAX 0.10.2) kept that order: in a FedAvg round of pfl's CIFAR-10 CNN (a profile of one
``simulate`` round) the dense layer's ``[12544, 128]`` weight gradient came out
``[128, 12544]`` and the SGD update read it transposed (1.35 ms of a 12.4 ms step), and the
second convolution's weight gradient was a ``[64, 288]`` product of a transposed copy of the
``[7840, 64]`` output gradient (0.25 ms) with the windows, at 98 GFLOP/s against its forward
product's 230 (2.96 ms against 1.26 ms).

:func:`matmul` computes the same product with a ``custom_vjp`` whose backward pass is the two
products in the layouts the weights and inputs have: ``dx = g w^T`` (``[M, N] x [N, K]``,
contracting ``N``) and ``dw = x^T g`` (``[M, K] x [M, N]``, contracting ``M``), each one
``dot_general`` with no transpose. Values and gradients equal ``x @ w``'s up to float
reordering (``tests/test_matmul.py``); the round above took 0.90-0.98x the time with this
product in its large convolution and dense layer (:func:`fedjax_avail.tasks.conv_general_dilated`
uses it), measured side by side (``benchmarks/before_after.py --algorithms fedavg_pfl_cnn``).

:func:`dot_general` is ``lax.dot_general`` with this product for the contraction ``nn.Dense``
makes (the last axis of ``[..., K]`` inputs with the first of a ``[K, N]`` kernel) on a CPU:
``nn.Dense(..., dot_general=fa.tasks.dot_general)``. Any other contraction, a small product
(``LARGE``), and every product on an accelerator, is ``lax.dot_general`` unchanged. Forward
mode (``jax.jvp``, ``jax.jacfwd``) through a ``custom_vjp`` raises JAX's ``TypeError``; use
``nn.Dense``'s default for that. Inside a ``shard_map`` of your own, the gradient of an operand
replicated over its devices is summed over them (:func:`like_primal`), as JAX's own product's.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

_CONTRACT_ROWS = (((0,), (0,)), ((), ()))  # x^T g: both operands' first axes
_CONTRACT_COLUMNS = (((1,), (1,)), ((), ()))  # g w^T: both operands' second axes


def _check(x: jax.Array, w: jax.Array) -> None:
    if (jnp.ndim(x) != 2 or jnp.ndim(w) != 2 or x.shape[1] != w.shape[0]
            or jnp.result_type(x) != jnp.result_type(w)):
        raise ValueError(f"matmul takes x [M, K] and w [K, N] of one dtype, got x "
                         f"{jnp.result_type(x)}{list(jnp.shape(x))} and w "
                         f"{jnp.result_type(w)}{list(jnp.shape(w))}")


def matmul(x: jax.Array, w: jax.Array, precision: Any = None) -> jax.Array:
    """``x [M, K] @ w [K, N] -> [M, N]`` (one dtype), differentiated without transposes
    (module docstring); ``precision`` (``lax.dot_general``'s) applies to the product and to
    both gradients.

    Raises:
      ValueError: operands of other ranks, shapes that do not chain, or two dtypes.
    """
    _check(x, w)
    return _matmul(x, w, precision)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _matmul(x: jax.Array, w: jax.Array, precision: Any) -> jax.Array:
    return jnp.dot(x, w, precision=precision)


def _forward(x: jax.Array, w: jax.Array, precision: Any) -> tuple[jax.Array, tuple]:
    return _matmul(x, w, precision), (x, w)


def _backward(precision: Any, residuals: tuple, g: jax.Array) -> tuple[jax.Array, jax.Array]:
    x, w = residuals
    return (like_primal(lax.dot_general(g, w, _CONTRACT_COLUMNS, precision=precision), x),
            like_primal(lax.dot_general(x, g, _CONTRACT_ROWS, precision=precision), w))


def keeps_dtype(preferred_element_type: Any, dtype: Any) -> bool:
    """Whether a product's ``preferred_element_type`` leaves its result in ``dtype`` (None
    does; ``np.dtype("float64") == None`` is True in NumPy, so None is tested first)."""
    return preferred_element_type is None or jnp.dtype(preferred_element_type) == dtype


def like_primal(cotangent: jax.Array, primal: jax.Array) -> jax.Array:
    """``cotangent`` summed over the ``shard_map`` axes it varies over and ``primal`` does not
    (what JAX's own rules do for an operand replicated over them: the transpose of its
    implicit ``pvary`` is a ``psum``), so that a ``custom_vjp``'s gradients have its inputs'
    types; unchanged outside ``shard_map``."""
    extra = _varying(cotangent) - _varying(primal)
    return lax.psum(cotangent, tuple(sorted(extra))) if extra else cotangent


def varying_like(x: jax.Array, *refs: jax.Array) -> jax.Array:
    """``x`` made to vary over the ``shard_map`` axes any of ``refs`` varies over (a loop
    carry started from constants must have the type of what is added to it); unchanged
    outside ``shard_map``."""
    extra = frozenset().union(*map(_varying, refs)) - _varying(x)
    if not extra:
        return x
    names = tuple(sorted(extra))
    if hasattr(lax, "pcast"):  # where it exists (JAX 0.10 has no pvary)
        return lax.pcast(x, names, to="varying")
    return lax.pvary(x, names)  # JAX 0.7.1, the lowest supported


def _varying(x: jax.Array) -> frozenset:
    """The ``shard_map`` axes ``x`` varies over: its type's ``manual_axis_type.varying``
    (JAX 0.10) or ``vma`` (JAX 0.7-0.9)."""
    aval = jax.typeof(x)
    manual = getattr(aval, "manual_axis_type", None)
    return frozenset(manual.varying if manual is not None else getattr(aval, "vma", ()))


_matmul.defvjp(_forward, _backward)


# The product is replaced when an array JAX's rule would transpose (x [M, K], g [M, N] or the
# weight gradient [K, N]) has at least this many elements (4 MiB of float32). FedAvg rounds of
# pfl's CNN (its second convolution's [7840, 288] windows, its dense [12544, 128] kernel) took
# 0.91x (median of 3; 0.90x of the best) with every product replaced, and 0.98x (0.95x of the
# best; a slower phase of the machine) with this rule, which leaves its first convolution's
# [9000, 27] windows alone (benchmarks/results/before_after_issue36_matmul_pfl_cnn.json). With
# every product replaced (a variant not committed), LeNet-5 on MNIST, whose largest such array
# is a member's [3920, 25] windows, took 1.05-1.09x
# (before_after_issue36_every_product_custom_lenet5_cnn.json), so small products keep JAX's
# own rule.
LARGE = 2**20


def _applies(lhs: jax.Array, rhs: jax.Array) -> bool:
    """Whether :func:`matmul` replaces the product of ``lhs [..., K]`` and ``rhs [K, N]``: on
    the CPU backend, for operands of one floating dtype, when ``M K``, ``M N`` or ``K N`` is
    at least ``LARGE`` (``M``: the rows of ``lhs``)."""
    if not (jax.default_backend() == "cpu" and rhs.ndim == 2 and lhs.ndim >= 1
            and lhs.dtype == rhs.dtype and jnp.issubdtype(lhs.dtype, jnp.floating)):
        return False
    (k, n), m = rhs.shape, math.prod(lhs.shape[:-1])
    return max(m * k, m * n, k * n) >= LARGE


def dot_general(lhs: jax.Array, rhs: jax.Array, dimension_numbers: Any,
                precision: Any = None, preferred_element_type: Any = None,
                **kwargs: Any) -> jax.Array:
    """``lax.dot_general`` (same arguments, same values up to float reordering); on a CPU, the
    contraction of ``lhs [..., K]``'s last axis with ``rhs [K, N]``'s first is
    :func:`matmul` of ``lhs`` as ``[M, K]`` (module docstring)."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    dense = (tuple(lhs_contract) == (lhs.ndim - 1,) and tuple(rhs_contract) == (0,)
             and not lhs_batch and not rhs_batch and not kwargs
             and keeps_dtype(preferred_element_type, lhs.dtype))
    if not (dense and _applies(lhs, rhs)):
        return lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                               preferred_element_type=preferred_element_type, **kwargs)
    out = matmul(lhs.reshape(-1, lhs.shape[-1]), rhs, precision)
    return out.reshape(*lhs.shape[:-1], rhs.shape[1])
