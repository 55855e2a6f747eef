"""The engine: builds the state, runs rounds as a compiled ``lax.scan`` in chunks, evaluates.

One round is a pure function ``(algorithm state, availability state) -> (states, metrics)``;
rounds ``[a, b)`` run as one ``jit``-compiled ``lax.scan`` whose state buffers are donated, so
they are updated in place. Between chunks (every ``eval_every`` rounds) the host evaluates the
global model and moves the progress bar; nothing else crosses to the host.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from fedjax_avail import _keys
from fedjax_avail.algorithms import Algorithm, RoundInput
from fedjax_avail.availability import AvailabilityProcess
from fedjax_avail.data import FederatedData
from fedjax_avail.evaluation import make_evaluator
from fedjax_avail.history import History
from fedjax_avail.local import Problem
from fedjax_avail.tasks import Task


@dataclasses.dataclass
class Result:
    """What :func:`simulate` returns.

    Attributes:
      params: the final global model.
      history: per-evaluation metrics (round 0 is the initial model).
      round_metrics: per-round metrics, each ``[R]`` (``num_available``, ``num_selected``, ...).
      state: the algorithm's final state.
      timing: seconds: ``compile`` (all compilations), ``run`` (rounds, compile excluded),
        ``eval`` (evaluations), ``total`` (wall time of ``simulate``); ``s_per_round`` = run / R.
    """

    params: Any
    history: History
    round_metrics: dict[str, np.ndarray]
    state: Any
    timing: dict[str, float]


class DivergenceError(RuntimeError):
    """The run produced a NaN or Inf; ``.result`` holds everything recorded up to that point."""

    def __init__(self, message: str, result: Result):
        super().__init__(message)
        self.result = result


def _check_args(fd, rounds, eval_every, client_chunk) -> None:
    if not isinstance(fd, FederatedData):
        raise TypeError(f"data must be a FederatedData, got {type(fd).__name__}")
    for name, value in (("rounds", rounds), ("eval_every", eval_every)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if rounds >= 2**24:
        raise ValueError(f"rounds must be < 2**24 (participation stamps are compared as float32), "
                         f"got {rounds}")
    if client_chunk is not None and (not isinstance(client_chunk, int) or client_chunk < 1):
        raise ValueError(f"client_chunk must be None or an integer >= 1, got {client_chunk!r}")


def _pooled(test_data: FederatedData | Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return test_data.pooled() if isinstance(test_data, FederatedData) else dict(test_data)


def simulate(
    task: Task,
    data: FederatedData,
    algorithm: Algorithm,
    availability: AvailabilityProcess,
    rounds: int,
    seed: int = 0,
    eval_every: int = 20,
    test_data: FederatedData | Mapping[str, np.ndarray] | None = None,
    *,
    client_chunk: int | None = None,
    eval_batch_size: int = 4096,
    progress: bool = False,
    desc: str | None = None,
) -> Result:
    """Runs ``rounds`` rounds of ``algorithm`` under ``availability``; round r uses mask r.

    Args:
      task: model, loss and metrics.
      data: the clients' training data, N clients.
      algorithm: e.g. ``fa.algorithms.FedLaAvg(...)``.
      availability: e.g. ``fa.availability.Bernoulli(0.5)``.
      rounds: R >= 1.
      seed: one seed for everything (model init, availability, selection, batches). Round r's
        randomness depends on (seed, r) only, so results are bit-identical whatever
        ``eval_every`` or ``client_chunk``.
      eval_every: evaluate every this many rounds (and after round 0 and the last round).
      test_data: optional held-out examples (a dict of arrays or FederatedData).
      client_chunk: train the cohort in sequential chunks of this many clients (memory bound).
      eval_batch_size: examples per evaluation block.
      progress: show a tqdm bar over rounds (rounds/s, current training loss).
      desc: the progress bar's label.

    Returns:
      a :class:`Result`. ``history`` holds ``train_loss`` (mean over all clients' examples, the
      quantity the FedLaAvg figures plot) and every task metric as ``train_<name>``, plus
      ``test_loss`` and ``test_<name>`` when ``test_data`` is given.

    Raises:
      ValueError / TypeError: bad arguments, before any compilation.
      DivergenceError: the training loss became NaN/Inf; its ``.result`` keeps the history so far.
    """
    start_time = time.perf_counter()
    _check_args(data, rounds, eval_every, client_chunk)
    num_clients = data.num_clients
    algorithm.validate(num_clients)
    keys = _keys.run_keys(seed)
    avail_state = availability.init(keys.availability_init, num_clients)
    params = task.init(keys.params)
    carry = (algorithm.init(params, num_clients), avail_state)
    device_data = jax.device_put(data)

    evaluators = {"train": make_evaluator(task, data.pooled(), eval_batch_size)}
    if test_data is not None:
        evaluators["test"] = make_evaluator(task, _pooled(test_data), eval_batch_size)

    reports_fn = getattr(availability, "reports", None)  # drop-outs (availability.dropout)

    def run_chunk(carry, data, round_ids):
        problem = Problem(task, data, client_chunk)

        def one_round(carry, r):
            alg_state, avail_state = carry
            avail_key = _keys.availability_key(keys, r)
            avail_state, mask = availability.step(avail_state, r, avail_key)
            reports = reports_fn(mask, r, avail_key) if reports_fn is not None else None
            inputs = RoundInput(r, mask, _keys.algorithm_key(keys, r), reports)
            alg_state, metrics = algorithm.round(alg_state, inputs, problem)
            return (alg_state, avail_state), {"num_available": jnp.sum(mask), **metrics}

        return jax.lax.scan(one_round, carry, round_ids)

    jitted = jax.jit(run_chunk, donate_argnums=0)
    compiled: dict[int, Any] = {}
    timing = {"compile": 0.0, "run": 0.0, "eval": 0.0}
    t0 = time.perf_counter()
    for evaluator in evaluators.values():
        evaluator.compile(params)
    timing["compile"] += time.perf_counter() - t0
    history, per_round = History(), []

    def evaluate(done: int) -> dict[str, float]:
        t0 = time.perf_counter()
        row: dict[str, float] = {"round": done}
        for split, evaluator in evaluators.items():
            values = jax.device_get(evaluator(carry[0].params))
            row[f"{split}_loss"] = float(values.pop("loss"))
            row.update({f"{split}_{k}": float(v) for k, v in values.items()})
        timing["eval"] += time.perf_counter() - t0
        history.append(row)
        return row

    def result() -> Result:
        keys = per_round[0] if per_round else {}
        metrics = {k: np.concatenate([m[k] for m in per_round]) for k in keys}
        timing["total"] = time.perf_counter() - start_time
        timing["s_per_round"] = timing["run"] / max(len(metrics.get("num_available", ())), 1)
        return Result(carry[0].params, history, metrics, carry[0], dict(timing))

    bar = tqdm(total=rounds, disable=not progress, desc=desc, unit="round", mininterval=1.0)
    evaluate(0)
    done = 0
    while done < rounds:
        length = min(eval_every, rounds - done)
        round_ids = jnp.arange(done, done + length, dtype=jnp.int32)
        if length not in compiled:
            t0 = time.perf_counter()
            compiled[length] = jitted.lower(carry, device_data, round_ids).compile()
            timing["compile"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        carry, metrics = compiled[length](carry, device_data, round_ids)
        jax.block_until_ready(carry)
        timing["run"] += time.perf_counter() - t0
        per_round.append(jax.device_get(metrics))
        done += length
        row = evaluate(done)
        bar.update(length)
        bar.set_postfix(train_loss=f"{row['train_loss']:.4f}")
        if not math.isfinite(row["train_loss"]):
            bar.close()
            raise DivergenceError(
                f"training loss is {row['train_loss']} after round {done}: the run diverged "
                "(try a smaller client_lr or server_lr). Error.result holds the history so far.",
                result(),
            )
    bar.close()
    return result()
