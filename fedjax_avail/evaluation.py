"""Evaluation of a global model over a whole data set (every example, exactly once)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from fedjax_avail.tasks import Task


class Evaluator:
    """``params -> {"loss": ..., **metrics}``, example means over a fixed data set.

    The data set is an argument of the compiled function, not a constant baked into it, so an
    evaluator over the training data reads the very device buffers the rounds train on: the
    data is held once. ``compile(params)`` compiles ahead of time (so compile time can be
    reported apart); calling compiles on first use otherwise.
    """

    def __init__(self, fn, arrays: Mapping[str, jax.Array]):
        self._fn, self._arrays, self._compiled = jax.jit(fn), dict(arrays), None

    def compile(self, params: Any) -> None:
        self._compiled = self._fn.lower(params, self._arrays).compile()

    def __call__(self, params: Any) -> dict[str, jax.Array]:
        if self._compiled is None:
            self.compile(params)
        return self._compiled(params, self._arrays)


def make_evaluator(
    task: Task, arrays: Mapping[str, Any], batch_size: int = 4096
) -> Evaluator:
    """Returns an :class:`Evaluator` of example means of loss and metrics over ``arrays``.

    The examples are read in ``M // batch_size`` full blocks (a ``lax.map`` of dynamic slices of
    the arrays, which copies nothing) and one remainder block; since ``task.loss`` and
    ``task.metrics`` are batch means, each block's value is weighted by its size, so every
    example counts exactly once.

    Args:
      task: the task.
      arrays: dict of ``[M, ...]`` arrays (e.g. all clients' training data, or a test set); host
        arrays are put on the device once, device arrays are used as they are.
      batch_size: examples per block (memory knob), >= 1.
    """
    arrays = {k: v if isinstance(v, jax.Array) else jnp.asarray(v) for k, v in arrays.items()}
    size = len(next(iter(arrays.values())))
    batch_size = min(batch_size, size)
    blocks, rest = divmod(size, batch_size)

    def block_sums(params, block):
        out = {"loss": task.loss(params, block)}
        if task.metrics is not None:
            out.update(task.metrics(params, block))
        n = len(next(iter(block.values())))
        return jax.tree.map(lambda v: v * n, out)

    def evaluate(params, arrays):
        def full_block(i):
            start = i * batch_size
            block = {k: jax.lax.dynamic_slice_in_dim(a, start, batch_size)
                     for k, a in arrays.items()}
            return block_sums(params, block)

        sums = jax.lax.map(full_block, jnp.arange(blocks))
        sums = jax.tree.map(lambda s: jnp.sum(s, axis=0), sums)
        if rest:
            tail = {k: a[blocks * batch_size:] for k, a in arrays.items()}
            sums = jax.tree.map(jnp.add, sums, block_sums(params, tail))
        return jax.tree.map(lambda s: s / size, sums)

    return Evaluator(evaluate, arrays)
