"""2-D max pooling whose gradient stays fast inside loops on XLA:CPU.

``nn.max_pool`` is a ``reduce_window``; its gradient is a ``select_and_scatter_add``, which
XLA:CPU emits as a generic scatter with index tensors (iotas, a concatenation of indices and a
scatter). In one SGD step of pfl's CIFAR-10 CNN (a 2 x 2 pooling of ``[10, 28, 28, 64]``) the
pooling and its gradient took about 4.5 ms of 22-25 ms on 2 cores
(``benchmarks/profile_cnn_step.py``).

:func:`max_pool` computes a pooling whose windows tile the image (strides equal to the window,
no padding: every pooling of the built-in models) from the window's ``KH KW`` strided slices:
the value is their elementwise maximum, and its gradient (a ``custom_vjp``: selects, a stack
and a transpose, no scatter) sends each window's cotangent to its first maximal element in
row-major order, the element ``select_and_scatter_add`` picks. Windows do not overlap, so each
input element receives one window's cotangent or zero: for inputs without NaN, values and
gradients (and gradients of gradients) are ``nn.max_pool``'s bit for bit, ties included, up to
the sign of a zero cotangent (``tests/test_pool.py``). A window holding a NaN passes no
gradient here (``nn.max_pool`` passes it to one of its elements). Rows and columns that no
window covers (an odd size) get zero gradient, as in ``nn.max_pool``.

Forward mode (``jax.jvp``, ``jax.jacfwd``, ``jax.hessian``) through it raises JAX's
``TypeError`` on a CPU; use ``nn.max_pool`` (or ``jax.jacrev`` twice) for that. A
``custom_jvp`` of the same rule supports both modes, but the derivative JAX transposes from it
was slower: an SGD step of LeNet-5 took 1.000 ms with it, 0.929 ms with ``nn.max_pool`` and
0.845 ms with this gradient; WKAFL's CNN 2.515, 2.824 and 2.344 ms (20 clients x 10 steps of
5 images, best of 10 alternating calls in one process, 2-core AVX2 CPU), and FedAvg rounds of
LeNet-5 were no faster than before (``benchmarks/results/before_after_cnn_cpu_jvp.json``).

It applies on the CPU backend to rank-4 ``[B, H, W, C]`` inputs with ``strides`` equal to
``window_shape`` and ``padding="VALID"``; any other pooling, and every pooling on an
accelerator, is ``nn.max_pool`` unchanged. A Flax model of your own gets it by calling
``fa.tasks.max_pool`` where it called ``nn.max_pool``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import linen as nn
from jax import lax


def _windows(x: jax.Array, window: tuple[int, int]) -> list[jax.Array]:
    """The ``KH KW`` strided slices of ``x [B, H, W, C]``, ``[B, H // KH, W // KW, C]`` each,
    in the window's row-major order: slice ``a KW + b`` holds element ``(a, b)`` of every
    window."""
    kh, kw = window
    height, width = x.shape[1] // kh * kh, x.shape[2] // kw * kw
    # lax.slice: JAX 0.7.1 (the lowest supported) wrote a strided index x[:, a::kh] as a gather
    return [lax.slice(x, (0, a, b, 0), (x.shape[0], height, width, x.shape[3]), (1, kh, kw, 1))
            for a in range(kh) for b in range(kw)]


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _tiled_max_pool(x: jax.Array, window: tuple[int, int]) -> jax.Array:
    """``[B, H, W, C] -> [B, H // KH, W // KW, C]``: the maximum of each ``KH x KW`` tile."""
    return functools.reduce(jnp.maximum, _windows(x, window))


def _forward(x: jax.Array, window: tuple[int, int]) -> tuple[jax.Array, tuple]:
    out = _tiled_max_pool(x, window)
    return out, (x, out)


def _backward(window: tuple[int, int], residuals: tuple, g: jax.Array) -> tuple[jax.Array]:
    """Each window's cotangent ``g [B, H // KH, W // KW, C]`` to its first maximal element."""
    x, out = residuals
    kh, kw = window
    taken = jnp.zeros(out.shape, bool)
    parts = []
    for part in _windows(x, window):
        first = (part == out) & ~taken
        taken = taken | first
        parts.append(jnp.where(first, g, jnp.zeros((), g.dtype)))
    b, h, w, c = g.shape
    # [KH KW, B, h, w, C] -> [B, h, KH, w, KW, C] -> [B, h KH, w KW, C]: the tiles in place
    tiles = jnp.stack(parts).reshape(kh, kw, b, h, w, c).transpose(2, 3, 0, 4, 1, 5)
    grad = tiles.reshape(b, h * kh, w * kw, c)
    rest = ((0, 0), (0, x.shape[1] - h * kh), (0, x.shape[2] - w * kw), (0, 0))
    return (jnp.pad(grad, rest),)


_tiled_max_pool.defvjp(_forward, _backward)


def max_pool(inputs: jax.Array, window_shape: Sequence[int],
             strides: Sequence[int] | None = None, padding: str = "VALID") -> jax.Array:
    """``nn.max_pool`` (same arguments; same values and gradients, NaN aside); on a CPU, a
    pooling of ``inputs [B, H, W, C]`` whose windows tile the image is computed from strided
    slices, with a gradient that stays fast inside loops (module docstring)."""
    window = tuple(int(k) for k in window_shape)
    tiled = (jax.default_backend() == "cpu" and inputs.ndim == 4 and len(window) == 2
             and strides is not None and tuple(strides) == window and padding == "VALID"
             and all(k >= 1 for k in window)
             and inputs.shape[1] >= window[0] and inputs.shape[2] >= window[1])
    if not tiled:
        return nn.max_pool(inputs, tuple(window_shape), strides=strides, padding=padding)
    return _tiled_max_pool(inputs, window)
