"""The conformance battery every algorithm passes; run it on your own algorithm too.

    >>> fa.testing.check_algorithm(MyAlgorithm(clients_per_round=4, local_steps=3,
    ...                                        batch_size=2, client_lr=0.02))

Each check raises ``AssertionError`` saying what is wrong:

* :func:`check_traces_once`: ``round`` runs under ``jit`` + ``lax.scan``, is traced once, and keeps
  the state's structure, shapes and dtypes (a scan carry must not change type);
* :func:`check_deterministic`: one seed gives a bit-identical model, another seed another one;
* :func:`check_converges`: on ``f(x) = mean_i ||x - y_i||^2`` over 8 one-point clients, every
  client available, the model reaches the mean point (the optimum);
* :func:`check_cohort_compute`: a round's FLOPs grow by O(1) bookkeeping per extra client,
  never by training all N (DESIGN.md section 4: "gather the cohort").

The two small problems the checks use, :func:`quadratic_task` and :func:`point_clients`, are
public so that tests of closed forms can use them too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail import availability, data
from fedjax_avail.algorithms import Algorithm, RoundInput
from fedjax_avail.callbacks import Callback
from fedjax_avail.data import FederatedData
from fedjax_avail.engine import simulate
from fedjax_avail.local import Problem
from fedjax_avail.run import Run
from fedjax_avail.tasks import Task, logistic_regression

# Fields the convergence check sets so that every client trains every round (no cohort noise).
_FULL_COHORT = (("clients_per_round", 8), ("buffer_size", 8), ("concurrency", None))


def quadratic_task(dim: int = 1) -> Task:
    """``f_i(x) = mean_b ||x - y_b||^2`` over a client's examples ``y``: gradient ``2 (x - y)``.

    The model is a ``[dim]`` vector starting at zero; batches are ``{"y": [B, dim]}``.
    """
    return Task(
        init=lambda key: jnp.zeros((dim,), jnp.float32),
        loss=lambda x, batch: jnp.mean(jnp.sum((x - batch["y"]) ** 2, axis=-1)),
    )


def point_clients(points: Any) -> FederatedData:
    """One client per row of ``points`` ``[N, dim]``, holding exactly that one example."""
    points = np.asarray(points, np.float32)
    return FederatedData.from_client_arrays([{"y": p[None]} for p in points])


def _points(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 3)).astype(np.float32)


def _round(algorithm: Algorithm, state: Any, inputs: RoundInput, problem: Problem):
    """``(state, metrics)`` of one round (an algorithm that moves time also returns its cursor,
    dropped here)."""
    out = algorithm.round(state, inputs, problem)
    return out[:2] if algorithm.moves_time else out


def check_traces_once(algorithm: Algorithm, num_clients: int = 10, rounds: int = 6) -> None:
    """``round`` under ``jit`` + ``lax.scan``: one trace, and the state keeps its type."""
    fd, task = point_clients(_points(num_clients)), quadratic_task(3)
    state = algorithm.init(task.init(jax.random.PRNGKey(0)), fd.num_clients)
    traces = []

    def body(state, r):
        traces.append(1)
        half = jnp.arange(num_clients) % 2 == r % 2  # each client available every other round
        inputs = RoundInput(r, half, jax.random.fold_in(jax.random.PRNGKey(0), r))
        return _round(algorithm, state, inputs, Problem(task, fd))

    run = jax.jit(lambda s: jax.lax.scan(body, s, jnp.arange(rounds)))
    try:
        out, _ = run(state)
    except TypeError as error:  # lax.scan refuses a carry whose type changes
        raise AssertionError(f"the state's shapes or dtypes changed in round: {error}") from None
    run(out)

    def types(tree):
        return jax.tree.map(lambda a: (jnp.shape(a), jnp.result_type(a)), tree)

    assert len(traces) == 1, f"round was traced {len(traces)} times for one program"
    assert jax.tree.structure(out) == jax.tree.structure(state), (
        f"the state's structure changed in round: {jax.tree.structure(state)} -> "
        f"{jax.tree.structure(out)}")
    assert types(out) == types(state), (
        f"the state's shapes or dtypes changed in round: {types(state)} -> {types(out)}")


def check_deterministic(algorithm: Algorithm, rounds: int = 8) -> None:
    """The same seed gives a bit-identical model; another seed gives another one."""
    fd, task = point_clients(_points(10)), quadratic_task(3)
    runs = [simulate(task, fd, algorithm, availability.Bernoulli(0.6), rounds=rounds, seed=s)
            for s in (1, 1, 2)]
    np.testing.assert_array_equal(runs[0].params, runs[1].params,
                                  err_msg="two runs with seed 1 differ")
    assert not np.array_equal(runs[0].params, runs[2].params), (
        "seeds 1 and 2 give the same model: the round ignores its key")


class _Iterates(Callback):
    """Keeps the global model at every chunk's end."""

    def __init__(self):
        self.params: list[np.ndarray] = []

    def on_chunk_end(self, run: Run, metrics: dict[str, np.ndarray]) -> None:
        self.params.append(np.asarray(run.params))


def check_converges(algorithm: Algorithm, rounds: int = 400, atol: float = 0.1,
                    average_last: int | None = None) -> None:
    """Every client available, the model reaches the optimum of a quadratic.

    ``clients_per_round`` / ``buffer_size`` are set to all 8 clients (and ``concurrency`` to N)
    where the algorithm has them, so no cohort sampling noise remains. An algorithm that applies
    one client at a time with a constant step (FedAsync) only fluctuates around the optimum
    (measured: 0.1-0.3 from it after 400 updates, whatever the seed): pass ``average_last=A`` to
    judge the mean of the models after each of the last A tenths of the run instead.
    """
    points = _points(8, seed=3)
    fd, task = point_clients(points), quadratic_task(3)
    fields = {f.name for f in dataclasses.fields(algorithm)}
    algorithm = dataclasses.replace(
        algorithm, **{name: value for name, value in _FULL_COHORT if name in fields})
    iterates = _Iterates()
    result = simulate(task, fd, algorithm, availability.AlwaysOn(), rounds=rounds,
                      eval_every=rounds if average_last is None else rounds // 10,
                      callbacks=[iterates])
    model = np.asarray(result.params) if average_last is None else np.mean(
        iterates.params[-average_last:], axis=0)
    # The optimum of the mean of ||x - y_i||^2 is the mean point, where the loss is the spread.
    optimum = points.mean(axis=0)
    np.testing.assert_allclose(model, optimum, atol=atol,
                               err_msg=f"after {rounds} rounds the model is not at the optimum")
    best = np.mean(np.sum((points - optimum) ** 2, axis=1))
    first, last = result.history["train_loss"][0], np.mean(np.sum((points - model) ** 2, axis=1))
    assert last - best < 0.02 * (first - best), (
        f"the training loss went {first:.4f} -> {last:.4f}, optimum {best:.4f}")


def check_cohort_compute(algorithm: Algorithm, max_flops_per_client: float = 1000.0) -> float:
    """A round's FLOPs per extra client (N = 50 -> 5000) stay below ``max_flops_per_client``.

    Training one client costs C * B * (64 * 10) * ~6 FLOPs here (23,040 at C = 3, B = 2);
    bookkeeping over all N (availability draws, selection ranks, the asynchronous clock's slots)
    costs a few hundred at most. The FLOPs are XLA's count of the program as written (no
    compilation); only a program over the bound there, or on a backend that counts only
    compiled programs (GPUs and TPUs: ``Lowered.cost_analysis()`` is None), is compiled and
    counted after XLA's simplifications (FedAsync's as written counts ~5,200 a client, ~270
    compiled).
    Returns the FLOPs per extra client.
    """
    task = logistic_regression(64, 10)

    def lowered(n: int) -> Any:
        rng = np.random.default_rng(0)
        fd = data.iid(rng.integers(0, 255, (n * 4, 8, 8)).astype(np.uint8),
                      rng.integers(0, 10, n * 4), n)
        state = algorithm.init(task.init(jax.random.PRNGKey(0)), n)
        inputs = RoundInput(jnp.int32(0), jnp.ones(n, bool), jax.random.PRNGKey(1))
        step = jax.jit(lambda s, d: _round(algorithm, s, inputs, Problem(task, d)))
        return step.lower(state, jax.device_put(fd))

    def per_client(count: Callable[[Any], Any]) -> float | None:
        """FLOPs per extra client by ``count(lowered)``; None where the backend counts none."""
        costs = [count(program) for program in (small, large)]
        costs = [cost[0] if isinstance(cost, list) else cost for cost in costs]
        if None in costs:
            return None
        return (float(costs[1]["flops"]) - float(costs[0]["flops"])) / 4950

    small, large = lowered(50), lowered(5000)
    per_extra_client = per_client(lambda program: program.cost_analysis())
    if per_extra_client is None or per_extra_client >= max_flops_per_client:
        per_extra_client = per_client(lambda program: program.compile().cost_analysis())
    assert per_extra_client < max_flops_per_client, (
        f"a round costs {per_extra_client:.0f} FLOPs per extra client: it computes on all N "
        "clients instead of gathering the cohort")
    return per_extra_client


def check_algorithm(algorithm: Algorithm) -> None:
    """Runs the whole battery (about 10-30 s on a CPU)."""
    assert isinstance(algorithm, Algorithm), (
        f"{type(algorithm).__name__} must subclass fa.algorithms.Algorithm (the contract: its "
        "defaults for prepare, virtual_time, moves_time and the memory footprint)")
    check_traces_once(algorithm)
    check_deterministic(algorithm)
    check_converges(algorithm)
    check_cohort_compute(algorithm)
