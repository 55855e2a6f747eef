"""A 2-D convolution that stays fast inside loops on XLA:CPU.

Local SGD runs inside loops: the local steps' ``lax.scan``, the cohort's ``lax.map`` of chunks
and the rounds' ``lax.scan``. Inside a loop body XLA:CPU compiles a convolution and its two
gradients to its generic emitter instead of Eigen's kernels (layout assignment cannot give
them Eigen's layouts there; jax-ml/jax#12868). pfl's CIFAR-10 CNN (two 3 x 3 convolutions) took
444 ms an SGD step on 10 images in a ``scan`` against 46 ms outside one, on 2 cores.

:func:`conv_general_dilated` computes a unit-stride NHWC/HWIO convolution as a matrix product
instead: the ``KH x KW`` shifted windows of the (padded) images side by side, ``[B, H', W',
KH KW I]``, times the kernel as a ``[KH KW I, O]`` matrix. Slices, a concatenation and a dot
(and their gradients: pads and dots) keep their fast paths inside loops: the same step took
15-30 ms in a ``scan``, and a FedAvg round of that CNN at K = 10 went from 8.9 s to 0.83 s
(``benchmarks/README.md``). It holds ``KH KW`` copies of each image while it runs. A large
product (``fedjax_avail.tasks._matmul.LARGE``: pfl's CIFAR-10 CNN's second convolution; the
built-in models' at a few images a batch stay below it) is :func:`fedjax_avail.tasks.matmul`
whose gradients need no transposes of the windows or of the output gradient; forward mode
(``jax.jvp``) through it raises JAX's ``TypeError`` (``lax.conv_general_dilated`` supports it).

It applies on the CPU backend to unit-stride, undilated, ungrouped 2-D convolutions in NHWC/
HWIO layout with non-negative padding, operands of one dtype and a non-empty output (flax
``nn.Conv``'s defaults and every convolution of the built-in models); any other convolution, and
every convolution on an accelerator (cuDNN's kernels are fast in loops), is
``lax.conv_general_dilated`` unchanged. Values match up to float reordering. A Flax model of
your own gets it with ``nn.Conv(..., conv_general_dilated=fa.tasks.conv_general_dilated)``
(flax marks that attribute deprecated; a module of your own may call this function instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from fedjax_avail.tasks._matmul import dot_general

_NHWC = ("NHWC", "HWIO", "NHWC")
_ONES = (1, 1)


def _as_matmul(lhs: jax.Array, rhs: jax.Array, window_strides: Sequence[int],
               lhs_dilation: Sequence[int] | None, rhs_dilation: Sequence[int] | None,
               dimension_numbers: Any, feature_group_count: int,
               batch_group_count: int) -> bool:
    """Whether :func:`conv_general_dilated` computes this convolution as a matrix product."""
    if (jax.default_backend() != "cpu" or lhs.ndim != 4 or rhs.ndim != 4
            or lhs.dtype != rhs.dtype or dimension_numbers is None
            or tuple(window_strides) != _ONES
            or (lhs_dilation is not None and tuple(lhs_dilation) != _ONES)
            or (rhs_dilation is not None and tuple(rhs_dilation) != _ONES)
            or feature_group_count != 1 or batch_group_count != 1):
        return False
    layout = lax.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    return layout == lax.conv_dimension_numbers(lhs.shape, rhs.shape, _NHWC)


def conv_general_dilated(
    lhs: jax.Array, rhs: jax.Array, window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]], lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None, dimension_numbers: Any = None,
    feature_group_count: int = 1, batch_group_count: int = 1, precision: Any = None,
    preferred_element_type: Any = None,
) -> jax.Array:
    """``lax.conv_general_dilated`` (same arguments, same values up to float reordering); on a
    CPU, a unit-stride convolution of images ``lhs [B, H, W, I]`` with a kernel
    ``rhs [KH, KW, I, O]`` is computed as a matrix product (module docstring)."""
    plain = dict(window_strides=window_strides, padding=padding, lhs_dilation=lhs_dilation,
                 rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers,
                 feature_group_count=feature_group_count, batch_group_count=batch_group_count,
                 precision=precision, preferred_element_type=preferred_element_type)
    if not _as_matmul(lhs, rhs, window_strides, lhs_dilation, rhs_dilation, dimension_numbers,
                      feature_group_count, batch_group_count):
        return lax.conv_general_dilated(lhs, rhs, **plain)
    kh, kw, channels, features = rhs.shape
    if isinstance(padding, str):
        padding = lax.padtype_to_pads(lhs.shape[1:3], (kh, kw), _ONES, padding)
    pads = tuple((int(low), int(high)) for low, high in padding)
    height = lhs.shape[1] + sum(pads[0]) - kh + 1
    width = lhs.shape[2] + sum(pads[1]) - kw + 1
    if any(p < 0 for pair in pads for p in pair) or height < 1 or width < 1:
        return lax.conv_general_dilated(lhs, rhs, **plain)
    images = jnp.pad(lhs, ((0, 0), *pads, (0, 0)))
    # one concatenate (the memory estimate counts its output as this layer's windows)
    windows = lax.concatenate([images[:, a:a + height, b:b + width, :]
                               for a in range(kh) for b in range(kw)], 3)
    # windows [B, H', W', KH KW I] x kernel [KH KW I, O]; a large product and its gradients
    # without transposes (fedjax_avail.tasks._matmul)
    return dot_general(windows, rhs.reshape(kh * kw * channels, features),
                       (((3,), (0,)), ((), ())), precision=precision,
                       preferred_element_type=preferred_element_type)
