"""Evaluation of a global model over a whole data set (every example, exactly once)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail.tasks import Task


def make_evaluator(
    task: Task, arrays: Mapping[str, np.ndarray], batch_size: int = 4096
) -> Callable[..., dict[str, jax.Array]]:
    """Returns a compiled ``params -> {"loss": ..., **metrics}`` of example means over ``arrays``.

    Examples are evaluated one by one under ``vmap`` (so any batch-mean loss gives per-example
    values), in blocks of ``batch_size`` with the last block padded and masked out.

    Args:
      task: the task.
      arrays: dict of ``[M, ...]`` arrays (e.g. all clients' training data pooled, or a test set).
      batch_size: examples per block (memory knob).
    """
    size = len(next(iter(arrays.values())))
    batch_size = min(batch_size, size)
    blocks = -(-size // batch_size)
    pad = blocks * batch_size - size

    def to_blocks(a):
        a = np.asarray(a)
        a = np.concatenate([a, np.repeat(a[:1], pad, 0)]) if pad else a
        return jnp.asarray(a.reshape((blocks, batch_size, *a.shape[1:])))

    data = {k: to_blocks(v) for k, v in arrays.items()}
    mask = jnp.asarray((np.arange(blocks * batch_size) < size).reshape(blocks, batch_size))

    def per_example(params, example):
        batch = jax.tree.map(lambda a: a[None], example)
        out = {"loss": task.loss(params, batch)}
        if task.metrics is not None:
            out.update(task.metrics(params, batch))
        return out

    @jax.jit
    def evaluate(params, data, mask):
        def block_sums(args):
            block, block_mask = args
            values = jax.vmap(per_example, in_axes=(None, 0))(params, block)
            return jax.tree.map(lambda v: jnp.sum(jnp.where(block_mask, v, 0.0)), values)

        sums = jax.lax.map(block_sums, (data, mask))
        return jax.tree.map(lambda s: jnp.sum(s) / size, sums)

    return lambda params: evaluate(params, data, mask)
