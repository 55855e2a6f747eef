"""Evaluation of a global model over a whole data set (every example, exactly once)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail import runs as runs_lib
from fedjax_avail._host import to_host
from fedjax_avail.data import FederatedData
from fedjax_avail.mesh import CLIENTS
from fedjax_avail.tasks import Task


class Evaluator:
    """``params -> {"loss": ..., **metrics}``, example means over a fixed data set.

    The data set is an argument of the compiled function, not a constant baked into it, so an
    evaluator over the training data reads the very device buffers the rounds train on: the
    data is held once. ``one_at_a_time``: ``fn`` is a single model's, and a stack of models
    ``[S, ...]`` is evaluated one model at a time (the runs axis's ``"loop"`` layout: each run's
    metrics are bit for bit its separate run's). ``compile(params)`` compiles ahead of time
    (so compile time can be reported apart); calling compiles on first use otherwise. ``fn``
    is a ``jax.jit`` of ``(params, arrays) -> values``: evaluators built from one jitted
    function (one task, the same layout: :func:`_shared`) share its traced, lowered and
    compiled program.
    """

    def __init__(self, fn: Any, arrays: Any, one_at_a_time: bool = False):
        self._fn, self._arrays, self._compiled = fn, arrays, None
        self._one_at_a_time = one_at_a_time

    def compile(self, params: Any) -> None:
        if self._one_at_a_time:
            params = jax.tree.map(lambda a: a[0], params)
        self._compiled = self._fn.lower(params, self._arrays).compile()

    def __call__(self, params: Any) -> dict[str, jax.Array]:
        if self._compiled is None:
            self.compile(params)
        if not self._one_at_a_time:
            return self._compiled(params, self._arrays)
        count = len(jax.tree.leaves(params)[0])
        values = [self._compiled(jax.tree.map(lambda a, i=i: a[i], params), self._arrays)
                  for i in range(count)]
        return jax.tree.map(lambda *v: jnp.stack(v), *values)


def make_evaluator(
    task: Task, arrays: Mapping[str, Any], batch_size: int = 4096, runs: bool = False,
    layout: str = "vmap",
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
      runs: evaluate stacked models ``[S, ...]`` (every value then has a leading runs axis).
      layout: the runs axis's layout (:func:`fedjax_avail.runs.runs_layout`): ``"loop"``
        evaluates the models one at a time with the single model's program, the others in
        one program over the stack.
    """
    arrays = {k: v if isinstance(v, jax.Array) else jnp.asarray(v) for k, v in arrays.items()}
    size = len(next(iter(arrays.values())))
    alone = runs and layout == "loop"
    fn = _shared(task, _example_means, size, min(batch_size, size), runs and not alone)
    return Evaluator(fn, dict(arrays), one_at_a_time=alone)


def _jitted(fn: Callable[..., Any], runs: bool) -> Any:
    """``jax.jit`` of ``fn(params, arrays)``, over a stack of models ``[S, ...]`` if ``runs``."""
    return jax.jit(runs_lib.map_runs(fn, in_axes=(0, None)) if runs else fn)


# task -> {(builder, layout): jitted function}; an entry lives as long as its task
_PROGRAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _shared(task: Task, build: Callable[..., Any], *layout: Any) -> Any:
    """``build(task.loss, task.metrics, *layout)``, one jitted function per task and layout.

    Its programs depend on the task's functions and the block layout besides the arguments'
    shapes, so simulations of one task (a notebook's algorithms, the CLI's) trace, lower and
    compile each evaluator once instead of once a ``simulate`` (0.1-0.3 s each on a 2-core
    CPU, persistent-cache hits included), as ``jax.jit`` reuses a function's traces. Like
    them, this relies on the task's functions being pure (:class:`fedjax_avail.Task`). Tasks
    are matched as dataclasses compare (the same functions); the entry goes with its task.
    A task that cannot be hashed or weakly referenced gets a new function every time.
    """
    try:
        programs = _PROGRAMS.setdefault(task, {})
    except TypeError:
        return build(task.loss, task.metrics, *layout)
    key = (build.__name__, *layout)
    if key not in programs:
        programs[key] = build(task.loss, task.metrics, *layout)
    return programs[key]


def _example_means(loss: Callable[..., Any], metrics: Callable[..., Any] | None, size: int,
                   batch_size: int, runs: bool) -> Any:
    """The jitted evaluation of :func:`make_evaluator` over ``size`` examples
    (:func:`_shared`)."""
    blocks, rest = divmod(size, batch_size)

    def block_sums(params, block):
        out = {"loss": loss(params, block)}
        if metrics is not None:
            out.update(metrics(params, block))
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

    return _jitted(evaluate, runs)


def make_client_evaluator(task: Task, data: Any, batch_size: int = 4096,
                          runs: bool = False, layout: str = "vmap") -> Evaluator:
    """An :class:`Evaluator` of each client's example means: ``{"loss": [N], **metrics}``.

    Per-example values (the task's batch means on batches of one example, vmapped) are summed
    per client (``segment_sum`` by each row's client) over blocks of ``batch_size`` rows, then
    divided by the client's count.

    Args:
      task: the task.
      data: a ``FederatedData`` of each client's evaluation examples (e.g. its test split).
      batch_size: rows per block.
      runs, layout: as :func:`make_evaluator`'s.
    """
    counts = np.asarray(data.counts)
    arrays = {k: v if isinstance(v, jax.Array) else jnp.asarray(v) for k, v in data.arrays.items()}
    # each row's client and the counts, beside examples held whole on each of several devices
    # (a mesh's copies: Evaluators), else on the default device, uncommitted (free to follow
    # the model to its device, as the examples of jnp.asarray are)
    sharding = next(iter(arrays.values())).sharding
    spread = sharding.is_fully_replicated and len(sharding.device_set) > 1
    owner, denominators = jax.device_put(
        (np.repeat(np.arange(len(counts)), counts).astype(np.int32), counts.astype(np.float32)),
        sharding if spread else None)
    size, num_clients = len(owner), len(counts)
    alone = runs and layout == "loop"
    fn = _shared(task, _client_means, size, min(batch_size, size), num_clients,
                 runs and not alone)
    return Evaluator(fn, (arrays, owner, denominators), one_at_a_time=alone)


def _client_means(loss: Callable[..., Any], metrics: Callable[..., Any] | None, size: int,
                  batch_size: int, num_clients: int, runs: bool) -> Any:
    """The jitted evaluation of :func:`make_client_evaluator` (:func:`_shared`)."""
    blocks, rest = divmod(size, batch_size)

    def per_example(params, block):
        def one(example):
            batch = {k: v[None] for k, v in example.items()}
            out = {"loss": loss(params, batch)}
            if metrics is not None:
                out.update(metrics(params, batch))
            return out

        return jax.vmap(one)(block)

    def sums(params, block, ids):
        values = per_example(params, block)
        return jax.tree.map(lambda v: jax.ops.segment_sum(v, ids, num_clients), values)

    def evaluate(params, arrays_owner_counts):
        arrays, owner, denominators = arrays_owner_counts

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

    return _jitted(evaluate, runs)


def _first_copy(tree: Any) -> Any:
    """Each array copied whole on several devices as its first device's copy (no copying)."""
    def one(a):
        if isinstance(a, jax.Array) and len(a.sharding.device_set) > 1:
            return a.addressable_data(0)
        return a
    return jax.tree.map(one, tree)


class Evaluators:
    """The compiled evaluators of a run: the training data, the test data, each client's test
    split (fairness), scored together on one model (or a stack of models ``[S, ...]``).

    Args:
      task: the task.
      train: the clients' training data, on the device.
      test_arrays: held-out examples ``[M, ...]``, or None.
      test_data: ``simulate``'s ``test_data`` (a ``FederatedData`` adds the per-client scores).
      batch_size: examples per evaluation block.
      train_examples: evaluate training metrics on this many evenly spaced examples
        (rows ``floor(i M / n)``, every client's share in proportion; None: all).
      runs: models have a leading runs axis.
      layout: the runs axis's layout (:func:`make_evaluator`).
      mesh: ``simulate``'s device mesh: the test examples are put on its devices once (a copy
        on each, as the models), not sent to them at every evaluation; None: the default
        device. A mesh without a ``"clients"`` axis (the cohort split over devices) holds a
        whole copy of everything on each device: the evaluations run on its first device's
        copies alone (evaluating the copies on every device at once took 2.5x one device's
        time on 2 CPU cores: ``benchmarks/results/peer_comparison.json`` of 2026-11-28).
    """

    def __init__(self, task: Task, train: Any, test_arrays: Mapping[str, Any] | None,
                 test_data: FederatedData | Mapping[str, Any] | None,
                 batch_size: int, train_examples: int | None, runs: bool, mesh: Any = None,
                 layout: str = "vmap"):
        self._one_device = mesh is not None and CLIENTS not in mesh.axis_names
        if self._one_device:
            mesh, train = None, train.replace(arrays=_first_copy(train.arrays))
        if test_arrays is not None:  # once, for both evaluators of a FederatedData test set
            test_arrays = jax.device_put(dict(test_arrays), None if mesh is None else (
                jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())))
            if isinstance(test_data, FederatedData):
                test_data = test_data.replace(arrays=test_arrays)
        arrays, total = train.arrays, train.num_examples
        if train_examples is not None and train_examples < total:
            rows = (np.arange(train_examples) * total) // train_examples
            arrays = {k: v[rows] for k, v in arrays.items()}
        self.splits = {"train": make_evaluator(task, arrays, batch_size, runs, layout)}
        if test_arrays is not None:
            self.splits["test"] = make_evaluator(task, test_arrays, batch_size, runs, layout)
        self.per_client = None  # each client's own test split: fairness at every evaluation
        if isinstance(test_data, FederatedData) and task.metrics is not None:
            self.per_client = make_client_evaluator(task, test_data, batch_size, runs, layout)

    def compile(self, params: Any) -> None:
        params = _first_copy(params) if self._one_device else params
        for evaluator in [*self.splits.values(), *([self.per_client] if self.per_client else [])]:
            evaluator.compile(params)

    def __call__(self, params: Any) -> tuple[dict[str, dict[str, np.ndarray]],
                                             dict[str, np.ndarray] | None]:
        """``({split: {"loss": ..., **metrics}}, per-client values or None)`` on the host,
        each value with a leading runs axis when ``runs``."""
        params = _first_copy(params) if self._one_device else params
        values = {split: to_host(ev(params)) for split, ev in self.splits.items()}
        return values, to_host(self.per_client(params)) if self.per_client else None
