"""Invariants at every seam, on configurations hypothesis draws (issue 35, section 4).

A configuration is an algorithm (synchronous or asynchronous, with or without durations, a
deadline, over-selection), an availability process (drop-outs included), a slot length, a
virtual-time budget, one seed or a runs axis of two, a client chunk, an evaluation cadence and a
checkpoint cadence. For each, on small problems (one-point clients, a quadratic loss):

* virtual time never goes back, in the per-round metrics and in the history;
* counts add up: a synchronous round's kept and late clients are the available ones it
  selected (fewer with drop-outs), never more than K kept; an asynchronous update applies at
  most its K results;
* the history, the live CSV and the TensorBoard events are the same rows;
* the run stopped and resumed at any of its checkpoints equals the whole run;
* each run of a runs axis equals its separate run.

The default tier draws a few configurations (about a minute on 2 cores); the slow tier many
(about 3 minutes). Both draw the same ones every time (``derandomize``), so CI is repeatable;
to explore others, run the slow one with ``settings(derandomize=False)``.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import point_clients, quadratic_task
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jax.flatten_util import ravel_pytree
from test_callbacks import _scalars

import fedjax_avail as fa

A, ALG, C = fa.availability, fa.algorithms, fa.clock
N = 8
QUICK = settings(max_examples=12, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
THOROUGH = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@dataclasses.dataclass
class Config:
    """One drawn configuration and how to run it."""

    algorithm: Any
    availability: Any
    seeds: Any  # an int, or a list of two: a runs axis
    rounds: int
    eval_every: int
    checkpoint_every: int | None
    slot_length: float
    budget: float | None
    client_chunk: Any

    def simulate(self, callbacks=(), seeds=None, rounds=None, directory=None):
        extra = [] if directory is None else [
            fa.callbacks.Checkpointing(directory, every=self.checkpoint_every, keep=100)]
        return fa.simulate(quadratic_task(), point_clients(np.arange(float(N))[:, None]),
                           self.algorithm, self.availability,
                           seed=self.seeds if seeds is None else seeds,
                           rounds=rounds or self.rounds, eval_every=self.eval_every,
                           slot_length=self.slot_length, max_virtual_time=self.budget,
                           client_chunk=self.client_chunk, callbacks=[*callbacks, *extra])


@st.composite
def durations(draw):
    speed = draw(st.sampled_from([None, np.linspace(0.5, 2.0, N)]))
    kind = draw(st.sampled_from(["constant", "exponential", "lognormal"]))
    if kind == "constant":
        return C.Constant(draw(st.sampled_from([0.6, 1.0, 1.7])), speed=speed)
    if kind == "exponential":
        return C.Exponential(draw(st.sampled_from([0.5, 1.0, 2.0])), speed=speed)
    return C.LogNormal(1.0, draw(st.sampled_from([0.3, 1.0])), speed=speed)


@st.composite
def algorithms(draw):
    kind = draw(st.sampled_from(["fedavg", "fedlaavg", "mifa", "fedbuff", "fedasync",
                                 "kasync", "wkafl"]))
    local = dict(batch_size=1, client_lr=0.1)
    if kind in ("fedavg", "fedlaavg", "mifa"):
        timing = {}
        if draw(st.booleans()):
            timing["durations"] = draw(durations())
            if draw(st.booleans()):
                timing["deadline"] = draw(st.sampled_from([0.8, 1.5, 3.0]))
            if draw(st.booleans()):
                timing["over_selection"] = 1.5
        k = draw(st.integers(1, 4))
        make = {"fedavg": ALG.FedAvg, "fedlaavg": ALG.FedLaAvg, "mifa": ALG.MIFA}[kind]
        extra = {"start": draw(st.sampled_from(["after_all_seen", "immediately"]))} if (
            kind == "mifa") else {}
        algorithm = make(clients_per_round=k, local_steps=draw(st.integers(1, 2)), **local,
                         **timing, **extra)
        try:  # a deadline no job can meet is refused (tests/test_seams.py): draw another
            algorithm.validate(N)
        except ValueError:
            assume(False)
        return algorithm
    if kind in ("fedbuff", "fedasync"):
        clock = dict(durations=draw(durations()),
                     concurrency=draw(st.sampled_from([None, 4])),
                     offline=draw(st.sampled_from(["lost", "late"])),
                     history=draw(st.sampled_from([None, 3, 64])))
        if kind == "fedbuff":
            return ALG.FedBuff(buffer_size=draw(st.integers(1, 3)), local_steps=1, **local,
                               **clock)
        return ALG.FedAsync(local_steps=1, **local, **clock)
    make = ALG.KAsyncSGD if kind == "kasync" else ALG.WKAFL
    return make(clients_per_round=draw(st.integers(1, 3)), **local,
                durations=draw(st.sampled_from([C.KofP(), C.KofP(one_per_round=True)])))


@st.composite
def processes(draw):
    kind = draw(st.sampled_from(["on", "bernoulli", "markov", "trace"]))
    if kind == "on":
        process = A.AlwaysOn()
    elif kind == "bernoulli":
        process = A.Bernoulli(draw(st.sampled_from([0.3, 0.7])))
    elif kind == "markov":
        process = A.Markov(p_on=0.4, p_off=0.3)
    else:
        table = np.random.default_rng(draw(st.integers(0, 9))).random((5, N)) < 0.5
        table[:, 0] = True  # someone is always there: a trace played cyclically never stalls
        process = A.Trace(table)
    if draw(st.booleans()):
        process = A.dropout(process, 0.2)
    return process


@st.composite
def configs(draw):
    algorithm = draw(algorithms())
    return Config(
        algorithm=algorithm, availability=draw(processes()),
        seeds=draw(st.sampled_from([3, [3, 4]])), rounds=draw(st.integers(6, 12)),
        eval_every=draw(st.integers(2, 5)), checkpoint_every=draw(st.sampled_from([2, 3])),
        slot_length=draw(st.sampled_from([1.0, 0.5, 0.7])),
        budget=draw(st.sampled_from([None, 4.0, 7.5])),
        client_chunk=draw(st.sampled_from(["auto", 1])))


def _runs(result):
    return result if isinstance(result, list) else [result]


def _flat(result):
    return np.asarray(ravel_pytree(result.params)[0])


def _check_time_and_counts(config: Config, results: list) -> None:
    alg = config.algorithm
    for r in results:
        m = r.round_metrics
        times = m["virtual_time"]
        assert np.all(np.diff(times) >= 0) and (times.size == 0 or times[0] >= 0)
        history_times = r.history["virtual_time"]
        assert np.all(np.diff(history_times[np.isfinite(history_times)]) >= 0)
        assert r.history["round"][-1] == len(times)  # the last row is the last round's
        if isinstance(alg, ALG.AsyncParts):
            assert np.all(m["num_applied"] <= alg.events)
            assert np.all(m["num_applied"] + m["dropped_stale"] <= alg.events)
            continue
        selected = math.ceil(round(alg.over_selection * alg.clients_per_round, 9))
        expected = np.minimum(selected, m["num_available"])
        counted = m["num_selected"] + m.get("num_late", 0)
        dropping = isinstance(config.availability, A.Dropout)
        assert np.all(counted <= expected) if dropping else np.array_equal(counted, expected)
        assert np.all(m["num_selected"] <= alg.clients_per_round)


def _check_outputs(config: Config, results: list, directory: Path) -> None:
    names = [{}] if len(results) == 1 else [{"seed": str(s)} for s in config.seeds]
    with open(directory / "m.csv", newline="") as f:
        written = list(csv.DictReader(f))
    expected = [{**name, **{k: v for k, v in row.items()}} for name, r in zip(
        names, results, strict=True) for row in r.history.rows]
    assert len(written) == len(expected)
    for row, want in zip(written, expected, strict=True):
        assert {k for k, v in row.items() if v != ""} == set(want)
        for k, v in want.items():
            assert (row[k] == v) if isinstance(v, str) else (
                float(row[k]) == pytest.approx(v, nan_ok=True)), k
    for name, r in zip(names, results, strict=True):
        folder = directory / "tb" / "_".join(f"{k}_{v}" for k, v in name.items())
        steps = sorted({s for tag, s, _ in _scalars(folder) if tag == "train_loss"})
        assert steps == r.history["round"].astype(int).tolist()


def _same_rows(a: list[dict], b: list[dict]) -> bool:
    """Rows equal value for value, NaN (a staleness with nothing applied) equal to NaN."""
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(x[k] == y[k] or (x[k] != x[k] and y[k] != y[k]) for k in x)
        for x, y in zip(a, b, strict=True))


def _check_resume(config: Config, whole: list, directory: Path, at: int) -> None:
    saved = sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    if not saved:
        return
    step = saved[at % len(saved)]
    resumed_dir = directory.parent / "resumed"
    shutil.copytree(directory, resumed_dir)
    for later in (s for s in saved if s > step):
        shutil.rmtree(resumed_dir / str(later))
    resumed = _runs(config.simulate(directory=resumed_dir))
    for a, b in zip(whole, resumed, strict=True):
        np.testing.assert_array_equal(_flat(a), _flat(b))
        assert _same_rows(a.history.rows, b.history.rows) and a.stopped == b.stopped
        assert a.round_metrics.keys() == b.round_metrics.keys()
        for k in a.round_metrics:
            np.testing.assert_array_equal(a.round_metrics[k], b.round_metrics[k])


def _check_runs_axis(config: Config, results: list) -> None:
    for seed, result in zip(config.seeds, results, strict=True):
        alone = config.simulate(seeds=seed)
        np.testing.assert_array_equal(_flat(result), _flat(alone))
        for k in alone.round_metrics:
            np.testing.assert_array_equal(result.round_metrics[k], alone.round_metrics[k])
        assert result.history["round"].tolist() == alone.history["round"].tolist()
        np.testing.assert_allclose(result.history["train_loss"], alone.history["train_loss"],
                                   rtol=1e-5)
        assert result.stopped == alone.stopped


def _check(config: Config, directory: Path, resume_at: int) -> None:
    pytest.importorskip("tensorboardX")
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    outputs = [fa.callbacks.CSVLogger(directory / "m.csv"),
               fa.callbacks.TensorBoard(directory / "tb")]
    try:
        results = _runs(config.simulate(outputs, directory=directory / "ckpt"))
    except fa.StalledError:  # e.g. drop-outs starving a K-of-P update: the error is the record
        return
    _check_time_and_counts(config, results)
    _check_outputs(config, results, directory)
    _check_resume(config, results, directory / "ckpt", resume_at)
    if len(results) > 1:
        _check_runs_axis(config, results)


@QUICK
@given(configs(), st.integers(0, 9))
def test_every_seam_holds_on_drawn_configurations(tmp_path_factory, config, resume_at):
    _check(config, tmp_path_factory.mktemp("seams"), resume_at)


@pytest.mark.slow
@THOROUGH
@given(configs(), st.integers(0, 9))
def test_every_seam_holds_on_many_drawn_configurations(tmp_path_factory, config, resume_at):
    _check(config, tmp_path_factory.mktemp("seams"), resume_at)
