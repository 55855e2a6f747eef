"""Synchronous rounds on the virtual-time axis: stragglers, deadlines, over-selection (issue 16).

The expected times and cohorts come from a plain-Python replay of the rules
(``_least_recent_rounds``), written from the module docstring of ``clock/_rounds.py``, not from
its code.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import point_clients, quadratic_task

import fedjax_avail as fa

AV = fa.availability
SPEED = np.array([1.0, 0.5, 2.0, 1.25, 0.7, 1.6])  # constant 2.0: jobs of 2, 4, 1, 1.6, 2.86, 1.25


def _least_recent_rounds(speed, c, k, rounds, deadline=None, over=1.0, table=None, slot=1.0):
    """Replays FedLaAvg's least-recent selection under constant durations ``c / speed_i``.

    Returns per round ``(virtual time at its end, clients kept, available clients dropped)``.
    """
    n = len(speed)
    stamps, t, rows = [-1] * n, 0.0, []
    for r in range(rounds):
        s = math.floor(t / slot)
        available = [True] * n if table is None else list(table[s])
        candidates = sorted((i for i in range(n) if available[i]), key=lambda i: (stamps[i], i))
        selected = candidates[:math.ceil(round(over * k, 9))]
        if not selected:  # nobody to wait for: the server waits for the next slot
            t = (s + 1) * slot
            rows.append((t, 0, 0))
            continue
        duration = {i: c / speed[i] for i in selected}
        in_time = [i for i in selected if deadline is None or duration[i] <= deadline]
        kept = sorted(in_time, key=lambda i: (duration[i], selected.index(i)))[:k]
        waited_for = min(k, len(selected))
        t += max(duration[i] for i in kept) if len(kept) == waited_for else deadline
        for i in kept:
            stamps[i] = r
        rows.append((t, len(kept), len(selected) - len(kept)))
    return rows


def _fedlaavg(rounds, availability=None, slot_length=1.0, **timing):
    alg = fa.algorithms.FedLaAvg(clients_per_round=2, local_steps=1, batch_size=1,
                                 durations=fa.clock.Constant(2.0, speed=SPEED), **timing)
    return fa.simulate(quadratic_task(), point_clients(np.arange(6.0)[:, None]), alg,
                       availability or AV.AlwaysOn(), rounds=rounds,
                       slot_length=slot_length).round_metrics


def test_a_round_lasts_as_long_as_its_slowest_participant():
    # Least-recent selection cycles through the blocks {0, 1}, {2, 3}, {4, 5}: the round times
    # are the blocks' slowest jobs, 4, 1.6 and 2.86, in closed form.
    m = _fedlaavg(rounds=6)
    per_round = np.tile([4.0, 1.6, 2.0 / 0.7], 2)
    np.testing.assert_allclose(m["virtual_time"], np.cumsum(per_round), rtol=1e-6)
    assert "num_late" not in m  # only with a deadline or over-selection
    rows = _least_recent_rounds(SPEED, 2.0, 2, 6)
    np.testing.assert_allclose(m["virtual_time"], [t for t, _, _ in rows], rtol=1e-6)


@pytest.mark.parametrize("timing", [dict(deadline=2.5), dict(over_selection=2.0),
                                    dict(over_selection=1.5, deadline=1.7)])
def test_exactly_the_clients_that_finish_in_time_count(timing):
    # A late client is dropped and keeps its stamp, so least-recent selection picks it again:
    # the replay follows who counts, round by round.
    rounds = 12
    m = _fedlaavg(rounds=rounds, **timing)
    rows = _least_recent_rounds(SPEED, 2.0, 2, rounds, timing.get("deadline"),
                                timing.get("over_selection", 1.0))
    np.testing.assert_allclose(m["virtual_time"], [t for t, _, _ in rows], rtol=1e-6)
    assert m["num_selected"].tolist() == [kept for _, kept, _ in rows]
    assert m["num_late"].tolist() == [late for _, _, late in rows]
    assert m["num_late"].sum() > 0  # the case is one where someone is late


def test_a_deadline_drops_late_clients_from_the_average():
    # FedAvg, K = N = 6, one local step at lr 1/4 on f_i = ||x - p_i||^2: the server moves to
    # x' = (x + mean_S p) / 2 with S the clients in time (jobs <= 1.7: clients 2, 3, 5); every
    # round lasts the deadline.
    points = np.array([0.0, 10.0, 1.0, 2.0, 30.0, 3.0])
    alg = fa.algorithms.FedAvg(clients_per_round=6, local_steps=1, batch_size=1,
                               client_lr=0.25, durations=fa.clock.Constant(2.0, speed=SPEED),
                               deadline=1.7)
    result = fa.simulate(quadratic_task(), point_clients(points[:, None]), alg, AV.AlwaysOn(),
                         rounds=5)
    m = result.round_metrics
    assert m["num_selected"].tolist() == [3] * 5 and m["num_late"].tolist() == [3] * 5
    np.testing.assert_allclose(m["virtual_time"], 1.7 * np.arange(1, 6), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(result.state.params), [2.0 * (1 - 0.5**5)], rtol=1e-5)


def test_a_round_nobody_can_join_waits_for_the_next_slot():
    # Slots 9-14 ([4.5, 7.5) at slots of 0.5) have nobody on: a round starting in them takes no
    # training time and the server waits for the next slot (the replay's times).
    n, slot = 6, 0.5
    table = np.ones((60, n), bool)
    table[9:15] = False
    m = _fedlaavg(rounds=14, availability=AV.Trace(table), slot_length=slot)
    rows = _least_recent_rounds(SPEED, 2.0, 2, 14, table=table, slot=slot)
    np.testing.assert_allclose(m["virtual_time"], [t for t, _, _ in rows], rtol=1e-6)
    starts = np.concatenate([[0.0], m["virtual_time"][:-1]])
    in_outage = (starts >= 4.5) & (starts < 7.5)
    assert in_outage.sum() >= 3
    assert (m["num_selected"][in_outage] == 0).all() and (m["num_available"][in_outage] == 0).all()
    np.testing.assert_allclose(m["virtual_time"][in_outage][1:], starts[in_outage][1:] + slot)


@pytest.mark.parametrize("make", [
    lambda **kw: fa.algorithms.FedAvg(clients_per_round=2, **kw),
    lambda **kw: fa.algorithms.FedLaAvg(clients_per_round=2, **kw),
    lambda **kw: fa.algorithms.MIFA(clients_per_round=2, **kw),
])
def test_deadline_and_over_selection_need_durations_and_fit(make):
    with pytest.raises(ValueError, match="deadline=3.0 needs a duration model"):
        make(deadline=3.0)
    with pytest.raises(ValueError, match="over_selection=1.5 needs a duration model"):
        make(over_selection=1.5)
    with pytest.raises(ValueError, match="deadline"):
        make(durations=fa.clock.Constant(1.0), deadline=0.0)
    with pytest.raises(ValueError, match="over_selection"):
        make(durations=fa.clock.Constant(1.0), over_selection=0.5)
    alg = make(durations=fa.clock.Constant(1.0), over_selection=2.0)
    with pytest.raises(ValueError, match=r"over_selection=2.0 selects .* = 4 clients, more than "
                                         r"num_clients=3"):
        fa.simulate(quadratic_task(), point_clients(np.arange(3.0)[:, None]), alg,
                    AV.AlwaysOn(), rounds=2)


@pytest.mark.parametrize("make", [
    lambda: fa.algorithms.FedAvg(clients_per_round=2, local_steps=1, batch_size=1,
                                 durations=fa.clock.Exponential(1.0)),
    lambda: fa.algorithms.FedBuff(buffer_size=2, concurrency=3, local_steps=1, batch_size=1,
                                  durations=fa.clock.Exponential(1.0)),
])
def test_a_virtual_time_budget_ends_the_run_after_the_round_that_reaches_it(make):
    fd, budget = point_clients(np.arange(6.0)[:, None]), 10.0
    args = (quadratic_task(), fd, make(), AV.Bernoulli(0.5))
    cut = fa.simulate(*args, rounds=400, eval_every=7, max_virtual_time=budget)
    times = cut.round_metrics["virtual_time"]
    done = len(times)
    assert times[-1] >= budget and (done == 1 or times[-2] < budget)
    assert cut.stopped == "max_virtual_time=10 reached" and "in_budget" not in cut.round_metrics
    # the same rounds as a run of exactly that many rounds, history labelled with its last round
    exact = fa.simulate(*args, rounds=done, eval_every=7)
    for name, values in exact.round_metrics.items():
        np.testing.assert_array_equal(cut.round_metrics[name], values, err_msg=name)
    np.testing.assert_array_equal(np.asarray(cut.params), np.asarray(exact.params))
    assert cut.history["round"].tolist() == exact.history["round"].tolist()
    np.testing.assert_allclose(cut.history["train_loss"], exact.history["train_loss"])
    np.testing.assert_allclose(cut.history["virtual_time"], exact.history["virtual_time"])
    # a runs axis: each run stops at its own budget, as it would alone
    several = fa.simulate(*args, rounds=400, eval_every=7, max_virtual_time=budget,
                          seed=[0, 1, 2])
    for seed, result in enumerate(several):
        alone = fa.simulate(*args, rounds=400, eval_every=7, max_virtual_time=budget, seed=seed)
        assert len(result.round_metrics["virtual_time"]) == len(alone.round_metrics["virtual_time"])
        np.testing.assert_allclose(result.round_metrics["virtual_time"],
                                   alone.round_metrics["virtual_time"], rtol=1e-6)
        assert result.history["round"].tolist() == alone.history["round"].tolist()
    assert len({len(r.round_metrics["virtual_time"]) for r in several}) > 1  # they differ


def test_a_budget_must_be_positive():
    with pytest.raises(ValueError, match="max_virtual_time"):
        fa.simulate(quadratic_task(), point_clients(np.arange(3.0)[:, None]),
                    fa.algorithms.FedAvg(clients_per_round=1), AV.AlwaysOn(), rounds=2,
                    max_virtual_time=0.0)


@dataclasses.dataclass(frozen=True)
class _RecordsDraws(fa.selection.Selection):
    """Clients 0..k-1; records per round the largest of k uniforms from each key a selection
    may derive from its own (stochastic greedy folds it with each step's index)."""

    rounds: int

    def init(self, params, num_clients):
        del params, num_clients
        return jnp.zeros((self.rounds, 7), jnp.float32)

    def select(self, state, context, k):
        key = context.key
        keys = [key, *(jax.random.fold_in(key, i) for i in range(4)), *jax.random.split(key)]
        draws = jnp.stack([jax.random.uniform(each, (k,)).max() for each in keys])
        cohort = jnp.arange(k, dtype=jnp.int32)
        return state.at[context.round].set(draws), cohort, context.available[cohort]


def test_durations_are_independent_of_the_selections_draws():
    # The durations' key was once the selection's folded with 1: a round's slowest job was then
    # a monotone function of stochastic greedy's step-1 draws, coupling who is late, and the
    # round's time, to who was picked. Every key a selection may derive must now be unrelated.
    rounds, k = 200, 4
    alg = fa.algorithms.FedAvg(clients_per_round=k, local_steps=1, batch_size=1,
                               selection=_RecordsDraws(rounds),
                               durations=fa.clock.Exponential(1.0))
    result = fa.simulate(quadratic_task(), point_clients(np.arange(8.0)[:, None]), alg,
                         AV.AlwaysOn(), rounds=rounds)
    round_time = np.diff(result.round_metrics["virtual_time"], prepend=0.0)
    draws = np.asarray(result.state.selection)

    def ranks(x):
        return np.argsort(np.argsort(x))

    rho = [np.corrcoef(ranks(round_time), ranks(draws[:, j]))[0, 1] for j in range(7)]
    # independent: each rho ~ N(0, 1/sqrt(199) = 0.07); coupled, a key's rho would be 1
    assert max(abs(r) for r in rho) < 0.3, rho
