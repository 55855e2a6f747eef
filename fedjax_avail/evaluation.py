"""Evaluation of a global model over a whole data set (every example, exactly once)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail.tasks import Task


class Evaluator:
    """``params -> {"loss": ..., **metrics}``, example means over a fixed data set.

    ``compile(params)`` compiles ahead of time (so compile time can be reported apart);
    calling compiles on first use otherwise.
    """

    def __init__(self, fn, *data):
        self._fn, self._data, self._compiled = jax.jit(fn), data, None

    def compile(self, params: Any) -> None:
        self._compiled = self._fn.lower(params, *self._data).compile()

    def __call__(self, params: Any) -> dict[str, jax.Array]:
        if self._compiled is None:
            self.compile(params)
        return self._compiled(params, *self._data)


def make_evaluator(
    task: Task, arrays: Mapping[str, np.ndarray], batch_size: int = 4096
) -> Evaluator:
    """Returns an :class:`Evaluator` of example means of loss and metrics over ``arrays``.

    The examples are cut into ``M // batch_size`` full blocks (a ``lax.map``) and one remainder
    block; since ``task.loss`` and ``task.metrics`` are batch means, each block's value is
    weighted by its size, so every example counts exactly once.

    Args:
      task: the task.
      arrays: dict of ``[M, ...]`` arrays (e.g. all clients' training data pooled, or a test set).
      batch_size: examples per block (memory knob).
    """
    size = len(next(iter(arrays.values())))
    batch_size = min(batch_size, size)
    blocks, rest = divmod(size, batch_size)
    full = {k: jnp.asarray(np.asarray(v)[: blocks * batch_size].reshape(
        (blocks, batch_size, *np.shape(v)[1:]))) for k, v in arrays.items()}
    tail = {k: jnp.asarray(np.asarray(v)[blocks * batch_size :]) for k, v in arrays.items()}

    def block_sums(params, block):
        out = {"loss": task.loss(params, block)}
        if task.metrics is not None:
            out.update(task.metrics(params, block))
        n = len(next(iter(block.values())))
        return jax.tree.map(lambda v: v * n, out)

    def evaluate(params, full, tail):
        sums = jax.lax.map(lambda block: block_sums(params, block), full)
        sums = jax.tree.map(lambda s: jnp.sum(s, axis=0), sums)
        if rest:
            sums = jax.tree.map(jnp.add, sums, block_sums(params, tail))
        return jax.tree.map(lambda s: s / size, sums)

    return Evaluator(evaluate, full, tail)
