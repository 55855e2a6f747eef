"""Evaluation of a global model over a whole data set (every example, exactly once)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail import cohort as cohort_lib
from fedjax_avail.tasks import Task


class Evaluator:
    """``params -> {"loss": ..., **metrics}``, example means over a fixed data set.

    The data set is an argument of the compiled function, not a constant baked into it, so an
    evaluator over the training data reads the very device buffers the rounds train on: the
    data is held once. ``compile(params)`` compiles ahead of time (so compile time can be
    reported apart); calling compiles on first use otherwise. ``runs=True`` evaluates a stack
    of models ``[S, ...]`` at once (every value then has a leading runs axis).
    """

    def __init__(self, fn, arrays: Any, runs: bool = False):
        if runs:
            fn = cohort_lib.map_runs(fn, in_axes=(0, None))
        self._fn, self._arrays, self._compiled = jax.jit(fn), arrays, None

    def compile(self, params: Any) -> None:
        self._compiled = self._fn.lower(params, self._arrays).compile()

    def __call__(self, params: Any) -> dict[str, jax.Array]:
        if self._compiled is None:
            self.compile(params)
        return self._compiled(params, self._arrays)


def make_evaluator(
    task: Task, arrays: Mapping[str, Any], batch_size: int = 4096, runs: bool = False
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
      runs: evaluate stacked models ``[S, ...]`` (see :class:`Evaluator`).
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

    return Evaluator(evaluate, dict(arrays), runs)


def make_client_evaluator(task: Task, data: Any, batch_size: int = 4096,
                          runs: bool = False) -> Evaluator:
    """An :class:`Evaluator` of each client's example means: ``{"loss": [N], **metrics}``.

    Per-example values (the task's batch means on batches of one example, vmapped) are summed
    per client (``segment_sum`` by each row's client) over blocks of ``batch_size`` rows, then
    divided by the client's count.

    Args:
      task: the task.
      data: a ``FederatedData`` of each client's evaluation examples (e.g. its test split).
      batch_size: rows per block.
    """
    counts = np.asarray(data.counts)
    owner = jnp.asarray(np.repeat(np.arange(len(counts)), counts).astype(np.int32))
    arrays = {k: v if isinstance(v, jax.Array) else jnp.asarray(v) for k, v in data.arrays.items()}
    size, num_clients = len(owner), len(counts)
    batch_size = min(batch_size, size)
    blocks, rest = divmod(size, batch_size)
    denominators = jnp.asarray(counts, jnp.float32)

    def per_example(params, block):
        def one(example):
            batch = {k: v[None] for k, v in example.items()}
            out = {"loss": task.loss(params, batch)}
            if task.metrics is not None:
                out.update(task.metrics(params, batch))
            return out

        return jax.vmap(one)(block)

    def sums(params, block, ids):
        values = per_example(params, block)
        return jax.tree.map(lambda v: jax.ops.segment_sum(v, ids, num_clients), values)

    def evaluate(params, arrays_and_owner):
        arrays, owner = arrays_and_owner

        def full_block(i):
            start = i * batch_size
            block = {k: jax.lax.dynamic_slice_in_dim(a, start, batch_size)
                     for k, a in arrays.items()}
            return sums(params, block, jax.lax.dynamic_slice_in_dim(owner, start, batch_size))

        total = jax.tree.map(lambda s: jnp.sum(s, axis=0), jax.lax.map(full_block,
                                                                       jnp.arange(blocks)))
        if rest:
            tail = {k: a[blocks * batch_size:] for k, a in arrays.items()}
            total = jax.tree.map(jnp.add, total, sums(params, tail, owner[blocks * batch_size:]))
        return jax.tree.map(lambda s: s / denominators, total)

    return Evaluator(evaluate, (arrays, owner), runs)
