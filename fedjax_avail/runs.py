"""Runs of one configuration in one program: seeds and hyperparameter values on a runs axis.

``simulate`` takes, aligned run by run, a list of seeds, a list of algorithms and/or a list of
availability processes (a single value is shared by every run; :func:`runs_of`). The runs
share one compiled program (the whole state gets a leading runs axis ``[S, ...]``), so they
must share every shape:

* algorithms must be of one class and differ only in real-valued hyperparameters (fields
  annotated ``float``: learning rates, ``mu``, ``alpha``, a ``deadline``...): inside the program
  those become traced per-run values (:func:`swept_values`, :func:`bind`). Integers (K, C, B),
  options (strings, duration models) and the few real fields that size the program (marked
  ``Static``: ``over_selection``, which sets how many clients a round selects) must be equal;
* availability processes must be of one class and differ only in parameters their state holds
  (``Bernoulli.p``, ``Markov.p_on``/``p_off``; a class lists them in ``run_parameters``).

How the S runs share the program is the layout (:func:`runs_layout`): ``"vmap"`` batches them
into every operation, ``"map"`` runs them one after the other inside each compiled round
(:func:`map_runs`), and ``"loop"`` compiles one run's program and runs each run's chunk of
rounds with it, several runs at once on threads (:func:`runs_at_once`).

Example:
  >>> lrs = [0.003, 0.01, 0.03]
  >>> results = fa.simulate(task, fd, [fa.algorithms.FedAvg(clients_per_round=10, client_lr=lr)
  ...                                  for lr in lrs], process, rounds=500, seed=[0, 0, 0])
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from fedjax_avail import mesh as mesh_lib
from fedjax_avail._checks import is_real, real_field, static_reason


def is_runs(value: Any) -> bool:
    """A list or tuple of runs (seeds, algorithms or processes), as opposed to one value."""
    return isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim == 1)


def run_count(*values: Any) -> int | None:
    """The number of runs the list-valued arguments ask for (None: a single run).

    Raises:
      ValueError: lists of different lengths, or an empty list.
    """
    lengths = {len(v) for v in values if is_runs(v)}
    if not lengths:
        return None
    if 0 in lengths:
        raise ValueError("a list of runs (seeds, algorithms or availability processes) must "
                         "not be empty")
    if len(lengths) > 1:
        raise ValueError(f"the lists of seeds, algorithms and availability processes must have "
                         f"one length (one entry a run), got lengths {sorted(lengths)}")
    return lengths.pop()


class Runs(NamedTuple):
    """The runs of one call: one per seed, with its algorithm and availability process."""

    seeds: list[Any]
    algorithms: list[Any]
    processes: list[Any]
    several: bool  # a runs axis (any of the three was a list), even of one run


def runs_of(seed: Any, algorithm: Any, availability: Any) -> Runs:
    """``simulate``'s seed, algorithm and availability arguments as aligned runs (any of them
    may be a list; the others repeat)."""
    count = run_count(seed, algorithm, availability)

    def each(value):
        return list(value) if is_runs(value) else [value] * (count or 1)

    return Runs(each(seed), each(algorithm), each(availability), count is not None)


def same(a: Any, b: Any) -> bool:
    """Whether two field values are equal (arrays by their contents)."""
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b))) if (
            isinstance(a, np.ndarray) or isinstance(b, np.ndarray)) else a == b
    except Exception:
        return a is b


def _check_one_class(objects: Sequence[Any], role: str) -> None:
    first = objects[0]
    if not dataclasses.is_dataclass(first):
        raise ValueError(f"{role} runs must be dataclasses, got {type(first).__name__}")
    for i, obj in enumerate(objects):
        if type(obj) is not type(first):
            raise ValueError(f"{role}[{i}] is a {type(obj).__name__}, but {role}[0] is a "
                             f"{type(first).__name__}: runs in one program share one class")


def _differing(objects: Sequence[Any]) -> dict[str, list[Any]]:
    """``{field: [S] values}`` of the init fields in which ``objects`` differ."""
    out = {}
    for field in dataclasses.fields(objects[0]):
        values = [getattr(obj, field.name) for obj in objects]
        if not all(same(values[0], v) for v in values[1:]):
            out[field.name] = values
    return out


def _shown(values: list[Any]) -> str:
    return f"{values[:3]}{'...' if len(values) > 3 else ''}"


def swept_values(algorithms: Sequence[Any]) -> dict[str, np.ndarray]:
    """The per-run values of the fields in which the runs' ``algorithms`` differ,
    ``{field: [S] float32}``.

    A field may differ when it is annotated as a real number (``float``, ``float | None``
    with every run giving a number) and not marked ``Static``.

    Raises:
      ValueError: algorithms of different classes, or differing in a field that one compiled
        program cannot vary, naming it.
    """
    _check_one_class(algorithms, "algorithm")
    cls, swept = type(algorithms[0]), {}
    for name, values in _differing(algorithms).items():
        why = static_reason(cls, name)
        if why is not None:
            raise ValueError(f"algorithm runs differ in {name} ({_shown(values)}), which sets "
                             f"{why}: one compiled program cannot vary it; run them as "
                             "separate simulate calls")
        if real_field(cls, name) and all(v is None or is_real(v) for v in values):
            if any(v is None for v in values):
                raise ValueError(f"algorithm runs differ in {name} ({_shown(values)}): None in "
                                 "some runs and a number in others; give every run a number "
                                 "(or None to every run)")
            swept[name] = np.asarray(values, np.float32)
            continue
        raise ValueError(f"algorithm runs differ in {name} ({_shown(values)}); only "
                         "real-valued hyperparameters (learning rates, mu, a deadline, ...) "
                         "may differ between runs of one program, not integers (shapes), "
                         "options or duration models")
    return swept


def check_processes(processes: Sequence[Any]) -> None:
    """Raises ValueError unless the runs' availability ``processes`` are of one class and
    differ only in the parameters their state holds (the class's ``run_parameters``)."""
    _check_one_class(processes, "availability")
    allowed = getattr(type(processes[0]), "run_parameters", ())
    for name, values in _differing(processes).items():
        if name not in allowed:
            raise ValueError(
                f"availability runs differ in {name} ({_shown(values)}), which one compiled "
                f"program cannot vary; only {list(allowed) or 'nothing'} may differ between "
                f"runs of a {type(processes[0]).__name__}")


def bind(base: Any, values: dict[str, Any]) -> Any:
    """A copy of ``base`` with ``values`` (traced, one run's) set, without re-validating: every
    run's object was validated on the host."""
    if not values:
        return base
    out = copy.copy(base)
    for name, value in values.items():
        object.__setattr__(out, name, value)
    return out


# --- layouts -------------------------------------------------------------------------------------

RUNS_LAYOUTS = ("auto", "vmap", "map", "loop")


def runs_layout(layout: str = "auto", mesh: Any = None) -> str:
    """The layout of a runs axis: ``"auto"`` is ``"loop"`` on a CPU without a device mesh,
    ``"map"`` on a CPU with one, ``"vmap"`` on accelerators; any other value is checked and
    returned.

    ``"vmap"`` batches the S runs into every operation: on an accelerator S runs cost about
    one's time (H100: 8 seeds 1.00x one seed's wall time). On XLA:CPU it turns each batched
    matmul of the cohort into one with two batch dimensions, and S runs took about S
    separate runs' time (8 seeds: 0.81-1.26x a loop of 8 calls on two 2-core machines).
    ``"loop"`` (:func:`runs_at_once`) compiles one run's program once and runs each run's chunk
    of rounds with it, :func:`loop_workers` runs at a time on threads: a single run's kernels,
    each run's model and per-round metrics bit for bit its separate run's. XLA:CPU runs one
    small-model run on about one core whatever the cores (MNIST logistic regression, K = 100:
    19.7 ms a round on one core, 24 ms on two), so on two cores 8 seeds' rounds ran 2.07x
    faster two at a time than one after the other (2.5-2.8x one seed's wall time, a third of
    8 separate calls).
    ``"map"`` runs them one after the other inside each compiled round (a ``lax.map`` in
    :func:`map_runs`), which copies each run's state in and out every round; it also runs under
    a mesh. Measured side by side in ``benchmarks/run_axis.py``.
    """
    if layout not in RUNS_LAYOUTS:
        raise ValueError(f"runs_layout must be one of {RUNS_LAYOUTS}, got {layout!r}")
    if layout == "loop" and mesh is not None:
        raise ValueError("runs_layout='loop' runs without a mesh; with a mesh use 'vmap' or "
                         "'map' (or 'auto')")
    if layout == "auto":
        if jax.default_backend() != "cpu":
            return "vmap"
        return "loop" if mesh is None else "map"
    return layout


def loop_workers(runs: int) -> int:
    """How many runs of the ``"loop"`` layout train at once: one a CPU core this process may
    use (:func:`fedjax_avail.mesh.cpu_cores`), at most ``runs``. Each holds its own copy of one
    run's state and its own working sets (counted by :func:`fedjax_avail.estimate_memory`)."""
    return max(1, min(int(runs), mesh_lib.cpu_cores()))


def map_runs(fn: Callable[..., Any], in_axes: tuple[int | None, ...],
             layout: str = "vmap") -> Callable[..., Any]:
    """``fn`` over a leading runs axis ``[S, ...]`` (seeds of one configuration).

    Arguments with ``in_axes`` None (the data) are shared by every run, the others (0) carry
    the runs axis. ``layout`` ``"vmap"``: one ``vmap``; ``"map"`` or ``"loop"``: a
    ``lax.map``, one run at a time (:func:`runs_layout`; the engine runs a ``"loop"``'s rounds
    itself and maps only one-off passes here). Either returns every output with a leading
    ``[S]`` axis.
    """
    if layout == "vmap":
        return jax.vmap(fn, in_axes=in_axes)
    if any(axis not in (0, None) for axis in in_axes):
        raise ValueError(f"map_runs maps over axis 0 (or None) only, got in_axes={in_axes}")
    mapped = [i for i, axis in enumerate(in_axes) if axis is not None]

    def one_at_a_time(*args):
        def one(stacked):
            full = list(args)
            for i, value in zip(mapped, stacked, strict=True):
                full[i] = value
            return fn(*full)

        return jax.lax.map(one, tuple(args[i] for i in mapped))

    return one_at_a_time


def run_shapes(stacked: Any) -> Any:
    """The shapes of one run's slice of ``stacked`` (a runs axis ``[S, ...]``), copying
    nothing."""
    return jax.eval_shape(lambda tree: jax.tree.map(lambda a: a[0], tree), stacked)


@functools.partial(jax.jit, donate_argnums=0)
def _put_run(stacked: Any, i: jax.Array, one: Any) -> Any:
    """``stacked`` (a runs axis ``[S, ...]``) with run ``i`` replaced by ``one``, in place."""
    return jax.tree.map(lambda a, b: a.at[i].set(b), stacked, one)


def runs_at_once(stacked: Any, one_run: Callable[[int, Any], tuple[Any, Any]], workers: int,
                 keep: Callable[[Any], None]) -> list[Any]:
    """The ``"loop"`` layout's runs: ``one_run(i, run i's slice of stacked) -> (its new slice,
    extra)`` for each run i of ``stacked`` (a runs axis ``[S, ...]``), ``workers`` at once on
    threads (XLA:CPU runs one small run on about one core: :func:`loop_workers`). At most
    ``workers`` slices are in flight; each new one is written back in place (``stacked`` is
    donated) and released before the next is taken, and ``keep`` gets the updated ``stacked``
    after every write-back, so the caller always holds a live state, also when a run raises.
    Returns the extras in run order."""
    count = len(jax.tree.leaves(stacked)[0])
    extras: list[Any] = [None] * count
    pending = iter(range(count))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        running: dict[concurrent.futures.Future, int] = {}
        while True:
            while len(running) < workers and (i := next(pending, None)) is not None:
                running[pool.submit(one_run, i, jax.tree.map(lambda a, i=i: a[i], stacked))] = i
            if not running:
                return extras
            done, _ = concurrent.futures.wait(running,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                i = running.pop(future)
                new, extras[i] = future.result()
                stacked = _put_run(stacked, i, new)
                keep(stacked)
            del done, future, new  # the finished slices, written back
