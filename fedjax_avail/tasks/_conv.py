"""A 2-D convolution that stays fast inside loops on XLA:CPU.

Local SGD runs inside loops: the local steps' ``lax.scan``, the cohort's ``lax.map`` of chunks
and the rounds' ``lax.scan``. Inside a loop body XLA:CPU compiles a convolution and its two
gradients to its generic emitter instead of Eigen's kernels (layout assignment cannot give
them Eigen's layouts there; jax-ml/jax#12868). pfl's CIFAR-10 CNN (two 3 x 3 convolutions) took
444 ms an SGD step on 10 images in a ``scan`` against 46 ms outside one, on 2 cores. XLA's
kernel-library options do not make them fast there: split over a device per core, a step of
that CNN's local training took 97-164 times this module's under each of six options of JAX
0.10.2 (YNNPACK's default fusions take two of its five convolutions, the others none;
``benchmarks/xla_cpu_options.py --workload cnn``).

:func:`conv_general_dilated` computes a unit-stride NHWC/HWIO convolution as a matrix product
instead: the ``KH x KW`` shifted windows of the (padded) images side by side, ``[B, H', W',
KH KW I]``, times the kernel as a ``[KH KW I, O]`` matrix. Slices, a concatenation and a dot
(and their gradients: pads and dots) keep their fast paths inside loops: the same step took
15-30 ms in a ``scan``, and a FedAvg round of that CNN at K = 10 went from 8.9 s to 0.83 s
(``benchmarks/README.md``). It holds ``KH KW`` copies of each image while it runs. A large
product (``fedjax_avail.tasks._matmul.LARGE``) is :func:`fedjax_avail.tasks.matmul`, whose
gradients need no transposes of the windows or of the output gradient.

A batch whose windows would take more than ``GROUP_BYTES`` (1 MiB, a core's L2 cache on the
AMD EPYC measured) is convolved a group of images at a time (:func:`images_per_group`: the
largest divisor of the batch whose windows fit): a ``lax.map`` of the product over the groups,
which keeps the windows in the cache. Its gradient depends on where it runs. Under a mesh of
several devices (``simulate``'s CPU mesh, a device per core) a ``custom_vjp`` builds each
group's windows again in the backward pass, adds ``g^T windows`` to the kernel's gradient (a
sum in the loop's carry: kept as the loop's outputs and summed after it, the groups' gradients
took a 0.6 ms reduction of a 10 ms step, and FedAvg rounds 1/0.945 the time: median of 4,
``benchmarks/results/before_after_issue36_conv_carry_pfl_cnn.json``) and sends ``g kernel^T``
back onto the group's pixels, so no windows are kept; elsewhere (a program
on one device, whose single large products XLA splits over the cores) the forward and backward
passes of a gradient are one product's. pfl's CIFAR-10 CNN's second convolution (10 images,
9 MB of windows) runs one image at a time: with a device per core a training step took 0.82x
the time of one product (``benchmarks/conv_groups.py``) and a FedAvg round 0.87x (median of 4
runs, ``benchmarks/results/before_after_issue36_grouped_windows_pfl_cnn.json``); on one device
a step with its gradient grouped too took 1.25x; evaluating 5,000 images took 0.39x. The
built-in models train at their papers' batch sizes under the budget, in one product. The
budget is a member's: in a ``vmap`` over several cohort members (an explicit ``client_chunk``)
each group holds every member's windows. An explicit ``preferred_element_type`` other than the
operands' dtype keeps one product. Forward mode (``jax.jvp``) through a grouped convolution
(windows past 1 MiB) or a large product raises JAX's ``TypeError``
(``lax.conv_general_dilated`` supports it).

It applies on the CPU backend to unit-stride, undilated, ungrouped 2-D convolutions in NHWC/
HWIO layout with non-negative padding, operands of one dtype and a non-empty output (flax
``nn.Conv``'s defaults and every convolution of the built-in models); any other convolution, and
every convolution on an accelerator (cuDNN's kernels are fast in loops), is
``lax.conv_general_dilated`` unchanged. Values match up to float reordering. A Flax model of
your own gets it with ``nn.Conv(..., conv_general_dilated=fa.tasks.conv_general_dilated)``
(flax marks that attribute deprecated; a module of your own may call this function instead).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from fedjax_avail.tasks._matmul import dot_general, keeps_dtype, like_primal, varying_like

_NHWC = ("NHWC", "HWIO", "NHWC")
_ONES = (1, 1)
# A batch whose windows take more bytes than this is convolved a group of images at a time
# (images_per_group): a core's L2 cache on the 2-core AMD EPYC measured (1 MiB a core).
GROUP_BYTES = 2**20


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
    kh, kw = rhs.shape[:2]
    if isinstance(padding, str):
        padding = lax.padtype_to_pads(lhs.shape[1:3], (kh, kw), _ONES, padding)
    pads = tuple((int(low), int(high)) for low, high in padding)
    height = lhs.shape[1] + sum(pads[0]) - kh + 1
    width = lhs.shape[2] + sum(pads[1]) - kw + 1
    if any(p < 0 for pair in pads for p in pair) or height < 1 or width < 1:
        return lax.conv_general_dilated(lhs, rhs, **plain)
    images = jnp.pad(lhs, ((0, 0), *pads, (0, 0)))
    group = images_per_group(images.shape, (kh, kw), images.dtype.itemsize)
    # (an explicit result dtype other than the operands' is one product's)
    if group < images.shape[0] and keeps_dtype(preferred_element_type, images.dtype):
        return _grouped(images, rhs, group, precision, _per_core())
    return _one_product(images, rhs, precision, preferred_element_type)


def _per_core() -> bool:
    """Whether this is traced under a mesh of several devices (``simulate``'s CPU mesh splits
    the cohort over a device per core: :func:`fedjax_avail.mesh.mesh_context`), where a
    device's products run on about one core."""
    mesh = jax.sharding.get_abstract_mesh()
    return not mesh.empty and mesh.size > 1


def _one_product(images: jax.Array, kernel: jax.Array, precision: Any = None,
                 preferred_element_type: Any = None) -> jax.Array:
    """The convolution of padded ``images [B, H, W, I]`` with ``kernel [KH, KW, I, O]`` as one
    product: windows ``[B, H', W', KH KW I]`` x kernel ``[KH KW I, O]``, a large product and
    its gradients without transposes (:mod:`fedjax_avail.tasks._matmul`)."""
    kh, kw, channels, features = kernel.shape
    # one concatenate (the memory estimate counts its output as this layer's windows)
    return dot_general(_windows(images, kh, kw), kernel.reshape(kh * kw * channels, features),
                       (((3,), (0,)), ((), ())), precision=precision,
                       preferred_element_type=preferred_element_type)


def _windows(images: jax.Array, kh: int, kw: int) -> jax.Array:
    """The ``KH x KW`` shifted windows of padded ``images [B, H, W, I]`` side by side:
    ``[B, H - KH + 1, W - KW + 1, KH KW I]``, channels fastest, the kernel's row-major order."""
    height, width = images.shape[1] - kh + 1, images.shape[2] - kw + 1
    return lax.concatenate([images[:, a:a + height, b:b + width, :]
                            for a in range(kh) for b in range(kw)], 3)


def images_per_group(shape: Sequence[int], kernel: Sequence[int], itemsize: int) -> int:
    """Images a group of :func:`conv_general_dilated` builds windows for at once: the largest
    divisor of the batch ``B`` of padded images ``shape [B, H, W, I]`` whose windows fit in
    ``GROUP_BYTES`` (at least 1); ``B`` means the whole batch in one product."""
    batch, height, width, channels = shape
    kh, kw = kernel
    per_image = (height - kh + 1) * (width - kw + 1) * kh * kw * channels * itemsize
    fits = max(1, GROUP_BYTES // max(per_image, 1))
    return max((d for d in range(1, batch + 1) if batch % d == 0 and d <= fits), default=batch)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _grouped(images: jax.Array, kernel: jax.Array, group: int, precision: Any,
             per_core: bool) -> jax.Array:
    """The convolution ``[B, H - KH + 1, W - KW + 1, O]`` of padded ``images [B, H, W, I]``
    with ``kernel [KH, KW, I, O]``, the windows of ``group`` images at a time (``lax.map``;
    ``group`` divides ``B``). Differentiated ``per_core`` (under
    ``simulate``'s CPU mesh), the backward pass builds them again a group at a time instead of
    keeping them; else the forward pass for a gradient is :func:`_one_product` (module
    docstring)."""
    out = lax.map(lambda part: _one_product(part, kernel, precision),
                  images.reshape(-1, group, *images.shape[1:]))
    return out.reshape(images.shape[0], *out.shape[2:])


def _grouped_forward(images: jax.Array, kernel: jax.Array, group: int, precision: Any,
                     per_core: bool) -> tuple[jax.Array, Any]:
    """The value and the residuals: ``per_core``, the images and the kernel (the backward
    pass builds the windows again); else one product's pullback (a pytree of its windows and
    kernel)."""
    if per_core:
        return _grouped(images, kernel, group, precision, per_core), (images, kernel)
    return jax.vjp(functools.partial(_one_product, precision=precision), images, kernel)


def _grouped_backward(group: int, precision: Any, per_core: bool, residuals: Any,
                      cotangent: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per group: the kernel's gradient ``g^T windows`` (``[O, KH KW I]``) and the images'
    (``g kernel^T`` back onto the pixels each window read: ``KH KW`` padded slices summed),
    both in float32 or wider until the end. Not ``per_core``: one product's pullback."""
    if not per_core:
        return residuals(cotangent)
    images, kernel = residuals
    kh, kw, channels, features = kernel.shape
    matrix = kernel.reshape(kh * kw * channels, features)
    over_pixels = (((0, 1, 2), (0, 1, 2)), ((), ()))  # the group's images, rows and columns
    wide = jnp.result_type(kernel.dtype, jnp.float32)  # what the sums accumulate in

    def one_group(part: tuple) -> tuple[jax.Array, jax.Array]:
        part_images, part_cotangent = part
        # [O, KH KW I]: in this orientation XLA transposes the (smaller) output gradient.
        # Transposing the batch's output gradient once before the loop instead (0.35 ms of
        # a step's 14 ms of operations, against 0.5-0.6 ms for the loop's transposes in
        # profile_cnn_step.py --trace) did not shorten a round: FedAvg rounds of pfl's CNN
        # took 1.005x (median of 4; 0.968x of the best runs), so it is not kept
        # (benchmarks/results/before_after_issue36_variant_transposed_cotangent_pfl_cnn.json)
        kernel_grad = lax.dot_general(part_cotangent, _windows(part_images, kh, kw),
                                      over_pixels, precision=precision,
                                      preferred_element_type=wide)
        windows_grad = lax.dot_general(part_cotangent, matrix, (((3,), (1,)), ((), ())),
                                       precision=precision, preferred_element_type=wide)
        slices = [jnp.pad(windows_grad[..., (a * kw + b) * channels:(a * kw + b + 1) * channels],
                          ((0, 0), (a, kh - 1 - a), (b, kw - 1 - b), (0, 0)))
                  for a in range(kh) for b in range(kw)]
        return kernel_grad, functools.reduce(operator.add, slices)

    def accumulate(total: jax.Array, part: tuple) -> tuple[jax.Array, jax.Array]:
        kernel_grad, images_grad = one_group(part)
        return total + kernel_grad, images_grad

    # the kernel's gradient summed in the loop's carry (a sum of the groups' gradients kept
    # as the loop's outputs took 0.6 ms of a 10 ms step of pfl's CNN)
    start = varying_like(jnp.zeros((features, kh * kw * channels), wide), images, cotangent)
    kernel_grad, images_grad = lax.scan(
        accumulate, start, (images.reshape(-1, group, *images.shape[1:]),
                            cotangent.reshape(-1, group, *cotangent.shape[1:])))
    kernel_grad = kernel_grad.T.reshape(kernel.shape).astype(kernel.dtype)
    images_grad = images_grad.reshape(images.shape).astype(images.dtype)
    return (like_primal(images_grad, images),
            like_primal(kernel_grad, kernel))


_grouped.defvjp(_grouped_forward, _grouped_backward)
