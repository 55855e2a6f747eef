"""The compiled round program of a run: one round, a chunk of rounds as a ``lax.scan``, and the
one-off pass before round 0.

One round is a pure function ``(algorithm state, availability cursor, health) -> (carry,
metrics)``: the cursor is moved to the slot the round starts in (:mod:`fedjax_avail.timeline`),
the algorithm's ``round`` runs on that slot's mask, a round past the run's virtual-time budget
changes nothing, and a flag in the carry records the first round whose global model was not
finite. Rounds ``[a, b)`` run as one ``jit``-compiled ``lax.scan`` whose state buffers are
donated, so they are updated in place (:class:`RoundProgram`); a runs axis maps it over the runs
by the plan's layout (:mod:`fedjax_avail.runs`).
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from fedjax_avail import _keys, memory
from fedjax_avail import mesh as mesh_lib
from fedjax_avail import runs as runs_lib
from fedjax_avail._host import to_host
from fedjax_avail.algorithms import RoundInput
from fedjax_avail.availability import reports_of
from fedjax_avail.history import IN_BUDGET
from fedjax_avail.local import Problem
from fedjax_avail.plan import HEALTHY, Plan
from fedjax_avail.results import DivergenceError
from fedjax_avail.run import Run
from fedjax_avail.timeline import Timeline, budget_flag

# XLA:CPU hands batched dots to YNNPACK; with two batch dimensions (runs x cohort: several
# seeds in one program) its kernel was measured 20x slower per run than with one (FedAvg on
# MNIST, K = 100, C = 1: 58 ms a round for 8 seeds against 2.5 ms for one; benchmarks/README.md,
# run_axis). Without that fusion XLA's own dot emitter scales linearly in the runs.
_CPU_RUNS_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


def finite(state: Any) -> jax.Array:
    """Whether the model, the optimizer state and the vector server arrays are finite.

    Tables (``[N, P]`` latest updates, an ``[H, P]`` model history) are left out: checking them
    every round would cost more than the round; their running means are vectors and are checked.
    """
    extra = state._replace(params=None, **({"opt_state": None}
                                            if "opt_state" in state._fields else {}))
    leaves = jax.tree.leaves((state.params, getattr(state, "opt_state", None))) + [
        leaf for leaf in jax.tree.leaves(extra) if jnp.ndim(leaf) <= 1]
    checks = [jnp.all(jnp.isfinite(leaf)) for leaf in leaves
              if jnp.issubdtype(jnp.result_type(leaf), jnp.inexact)]
    return jnp.all(jnp.stack(checks)) if checks else jnp.bool_(True)


def _compile(lowered: Any, batched_runs: bool) -> Any:
    """``lowered.compile()``; for vmapped runs on a CPU without the YNNPACK dot fusion, where
    this XLA has the option (else the default compile)."""
    if batched_runs and jax.default_backend() == "cpu":
        try:
            return lowered.compile(compiler_options=_CPU_RUNS_OPTIONS)
        except Exception:  # an XLA without the option: its default is the only choice
            pass
    return lowered.compile()


def _working_set(analysis: Any, *names: str) -> int:
    """The sum of XLA's ``memory_analysis`` fields ``names`` (0 where absent)."""
    return sum(int(getattr(analysis, name, 0) or 0) for name in names)


class RoundProgram:
    """Rounds ``[run.done, end)`` as one compiled ``lax.scan``, one compilation per length.

    A call records compile and run seconds and XLA's working set in ``run``, the chunk's metrics
    in ``run.chunks``, each run's first non-finite round in ``run.diverged`` and the runs that
    ended on their own (a budget, a stall) in ``run.ended``; it returns the chunk's per-round
    metrics.
    """

    def __init__(self, plan: Plan):
        algorithm, availability = plan.algorithm, plan.runs.processes[0]  # code; values vary
        task, chunks, budget = plan.task, plan.chunks, plan.max_virtual_time
        slot_length = plan.slot_length

        def one_round(carry, r, keys, data, hyper):
            alg_state, cursor, health = carry
            alg = runs_lib.bind(algorithm, hyper)  # this run's hyperparameter values
            timeline = Timeline(availability, keys, slot_length)
            start = alg.virtual_time(alg_state)
            if start is None:  # one slot a round
                slot = r
            elif algorithm.moves_time:  # its clock moves through the slots: its cursor stands
                slot = jnp.where(cursor.slot < 0, timeline.slot_of(start), cursor.slot)
            else:  # a round reads the slot of its start time
                slot = timeline.slot_of(start)
            cursor = timeline.at(cursor, slot)
            now = timeline.start_of(r) if start is None else start  # in slots
            mask = cursor.mask
            reports = reports_of(availability, mask, r, _keys.availability_key(keys, r))
            round_input = RoundInput(r, mask, _keys.algorithm_key(keys, r), reports,
                                     timeline, cursor)
            out = alg.round(alg_state, round_input, Problem(task, data, *chunks))
            (alg_state, metrics), cursor = ((out[:2], out[2]) if algorithm.moves_time
                                            else (out, cursor))
            if "virtual_time" not in metrics:  # one slot a round
                metrics["virtual_time"] = timeline.seconds(r + 1)
            metrics = {"num_available": jnp.sum(mask), **metrics}
            if budget is not None:  # past the budget a round changes nothing
                after = alg.virtual_time(alg_state)
                flag = budget_flag(now, timeline.start_of(r + 1) if after is None else after,
                                   budget, slot_length)
                ran = flag > 0
                alg_state, cursor = jax.tree.map(lambda new, old: jnp.where(ran, new, old),
                                                 (alg_state, cursor), carry[:2])
                metrics = {k: jnp.where(ran, v, timeline.seconds(now) if k == "virtual_time"
                                        else jnp.zeros_like(v)) for k, v in metrics.items()}
                metrics[IN_BUDGET] = flag
            bad = ~finite(alg_state)
            health = jnp.where((health == HEALTHY) & bad, r, health)
            return (alg_state, cursor, health), metrics

        several, layout = plan.runs.several, plan.layout
        # "loop": one single-run program, executed for each run (_each_run)
        self._loop = several and layout == "loop"
        step = (runs_lib.map_runs(one_round, (0, None, 0, None, 0), layout)
                if several and not self._loop else one_round)

        def run_chunk(carry, data, round_ids, keys, hyper):
            return jax.lax.scan(lambda c, r: step(c, r, keys, data, hyper), carry, round_ids)

        shardings = {}
        if plan.mesh is not None:
            replicated = NamedSharding(plan.mesh, PartitionSpec())
            placement = plan.placement
            shardings = dict(in_shardings=(placement.carry_shardings, placement.data_shardings,
                                           replicated, replicated, replicated),
                             out_shardings=(placement.carry_shardings, replicated))
        self._jitted = jax.jit(run_chunk, donate_argnums=0, **shardings)
        self._compiled: dict[int, Any] = {}
        self._args = (plan.placement.data, plan.keys, plan.hyper)
        self._mesh, self._batched = plan.mesh, several and layout == "vmap"
        self._workers = plan.workers  # the runs a "loop" trains at once
        self._plan = plan

    def _executable(self, run: Run, round_ids: jax.Array, carry: Any, keys: Any,
                    hyper: dict[str, jax.Array], in_flight: int = 0) -> Any:
        """The compiled chunk of ``len(round_ids)`` rounds for arguments of these shapes; its
        working set is recorded in ``run.memory`` (times ``in_flight`` runs of a ``"loop"``,
        each also holding its state slice ``carry``)."""
        length = len(round_ids)
        if length not in self._compiled:
            data = self._args[0]
            start = time.perf_counter()
            with mesh_lib.mesh_context(self._mesh):
                self._compiled[length] = _compile(
                    self._jitted.lower(carry, data, round_ids, keys, hyper), self._batched)
            run.timing["compile"] += time.perf_counter() - start
            temp = _working_set(self._compiled[length].memory_analysis(),
                                "temp_size_in_bytes") * mesh_lib.partitions(self._mesh)
            if in_flight:
                temp = in_flight * (temp + memory.tree_bytes(carry))
            run.memory["working_set"] = max(run.memory.get("working_set", 0), temp)
        return self._compiled[length]

    def __call__(self, run: Run, end: int) -> dict[str, np.ndarray]:
        """Runs rounds ``[run.done, end)``; returns their metrics, each ``[length(, S)]``."""
        first = run.done
        round_ids = jnp.arange(first, end, dtype=jnp.int32)
        data, keys, hyper = self._args
        if self._loop:
            metrics = self._each_run(run, round_ids)
        else:
            executable = self._executable(run, round_ids, run.carry, keys, hyper)
            start = time.perf_counter()
            run.carry, metrics = executable(run.carry, data, round_ids, keys, hyper)
            jax.block_until_ready(run.carry)
            run.timing["run"] += time.perf_counter() - start
        run.chunks.append(to_host(metrics))
        run.done = end
        for i, h in enumerate(np.atleast_1d(to_host(run.carry[2]))):
            if h != HEALTHY and run.diverged[i] is None:
                run.diverged[i] = int(h)
        run.record_ends(first)
        return run.chunks[-1]

    def _each_run(self, run: Run, round_ids: jax.Array) -> Any:
        """The ``"loop"`` layout: the single-run program over each run's slice of the stacked
        carry (:func:`fedjax_avail.runs.runs_at_once`), written back in place; the metrics
        stacked as a runs axis ``[length, S]``."""
        data, keys, hyper = self._args
        executable = self._executable(run, round_ids,
                                      *runs_lib.run_shapes((run.carry, keys, hyper)),
                                      in_flight=self._workers)

        def one_run(i: int, carry: Any) -> tuple[Any, Any]:
            run_keys, run_hyper = jax.tree.map(lambda a: a[i], (keys, hyper))
            carry, chunk = executable(carry, data, round_ids, run_keys, run_hyper)
            return jax.block_until_ready(carry), chunk

        def keep(carry: Any) -> None:
            run.carry = carry

        start = time.perf_counter()
        metrics = runs_lib.runs_at_once(run.carry, one_run, self._workers, keep)
        jax.block_until_ready(run.carry)
        run.timing["run"] += time.perf_counter() - start
        return jax.tree.map(lambda *each: jnp.stack(each, axis=1), *metrics)

    @property
    def prepares(self) -> bool:
        """Whether the algorithm has a pass before round 0 (:meth:`prepare`)."""
        return self._plan.algorithm.prepares

    def prepare(self, run: Run) -> None:
        """The algorithm's one-off pass before round 0 (DivFL's gradients of all clients) on
        the state in ``run.carry``, timed as ``prepare`` (compile included).

        Raises:
          DivergenceError: a run's prepared state holds NaN/Inf.
        """
        plan = self._plan
        start = time.perf_counter()

        def prepare_state(state, data):
            return plan.algorithm.prepare(state, Problem(plan.task, data, *plan.chunks))

        loop, mesh, data = self._loop, plan.mesh, plan.placement.data
        prepare_fn = (runs_lib.map_runs(prepare_state, (0, None), plan.layout)
                      if run.several and not loop else prepare_state)
        placed = {} if mesh is None else dict(out_shardings=plan.placement.carry_shardings[0])
        state = run.carry[0]
        with mesh_lib.mesh_context(mesh):
            # donated: the state may hold [N, P] tables, which must not exist twice
            executable = jax.jit(prepare_fn, donate_argnums=0, keep_unused=True,
                                 **placed).lower(runs_lib.run_shapes(state) if loop else state,
                                                 data).compile()
        analysis = executable.memory_analysis()
        run.memory["working_set"] = (
            _working_set(analysis, "temp_size_in_bytes", "output_size_in_bytes")
            - _working_set(analysis, "alias_size_in_bytes")) * mesh_lib.partitions(mesh)
        if loop:
            def keep(stacked: Any) -> None:
                run.carry = (stacked, *run.carry[1:])

            runs_lib.runs_at_once(state, lambda i, one: (
                jax.block_until_ready(executable(one, data)), None), self._workers, keep)
            del state  # donated: run.carry holds the prepared one
        else:
            run.carry = (executable(state, data), *run.carry[1:])
        jax.block_until_ready(run.carry[0])
        run.timing["prepare"] = time.perf_counter() - start
        check = runs_lib.map_runs(finite, (0,)) if run.several else finite
        healthy = np.atleast_1d(to_host(jax.jit(check)(run.carry[0])))
        if not healthy.all():
            bad = int(np.argmin(healthy))
            for i in np.flatnonzero(~healthy.astype(bool)):
                run.diverged[i] = 0
            run.stop("diverged", lambda: DivergenceError(
                f"{run.label(bad)}the state prepared before round 0 (e.g. DivFL's gradients of "
                "all clients) holds NaN/Inf: a client's gradient or loss at the initial model is "
                "not finite (check the model and the data); the run stopped in round 0. "
                "Error.result holds the history so far.", run.result(), 0, run.diverged))
            raise run.error
