"""One clock (issue 16): availability by time slot, asynchronous updates only when results
arrive, every row on the virtual-time axis."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import point_clients, quadratic_task
from reference.events import simulate_events

import fedjax_avail as fa
from fedjax_avail import _keys
from fedjax_avail.timeline import Timeline, within_budget

AV = fa.availability


def _read(process, n, slots, seed=0):
    """Masks read by a Timeline at ``slots`` (increasing, with jumps)."""
    keys = _keys.run_keys(seed)
    timeline = Timeline(process, keys)
    cursor = timeline.start(process.init(keys.availability_init, n), n)
    at = jax.jit(timeline.at)
    masks = []
    for s in slots:
        cursor = at(cursor, s)
        masks.append(np.asarray(cursor.mask))
    return np.stack(masks)


@pytest.mark.parametrize("process", [
    AV.Periodic(groups=np.arange(12) % 3, period=4),
    AV.HourOfDay(np.arange(12) * 2 % 24, hours=8, rounds_per_hour=1),
    AV.diurnal(np.arange(12) % 2, 1, 6),
    AV.Trace(np.random.default_rng(0).random((40, 12)) < 0.4),
    AV.Trace(np.random.default_rng(1).random((40, 12)) < 0.4, cyclic=False),
    AV.Bernoulli(0.3),
    AV.all_of(AV.Bernoulli(0.7), AV.Periodic(groups=np.arange(12) % 2, period=3)),
])
def test_a_jump_of_k_slots_reads_what_k_one_slot_steps_read(process):
    slots = [0, 1, 5, 6, 13, 29, 30, 47]
    stepped = AV.sample(process, 12, 48)  # slot by slot, as round r reads slot r
    np.testing.assert_array_equal(_read(process, 12, slots), stepped[slots])
    # reading the same slot twice gives the same mask (two rounds inside one slot)
    np.testing.assert_array_equal(_read(process, 12, [3, 3, 3]), stepped[[3, 3, 3]])


def test_markov_k_slot_jump_has_the_k_step_law():
    # X_{t+k} given X_t by the k-step transition: compare with the float64 matrix power.
    # z-tests at |z| < 4.5: false-alarm rate ~7e-6 per comparison, 8 comparisons.
    n = 40_000
    for p_on, p_off, k in [(0.05, 0.2, 5), (0.7, 0.8, 3), (1e-3, 2e-3, 40), (0.3, 0.1, 17)]:
        process = AV.Markov(p_on, p_off, initial="on")
        keys = _keys.run_keys(3)
        state = process.init(keys.availability_init, n)
        state = state._replace(on=np.arange(n) % 2 == 0)
        after = np.asarray(process.skip(state, 0, k, jax.random.PRNGKey(11)).on)
        P = np.linalg.matrix_power(np.array([[1 - p_on, p_on], [p_off, 1 - p_off]]), k)
        for start, expected in ((True, P[1, 1]), (False, P[0, 1])):
            share = after[(np.arange(n) % 2 == 0) == start].mean()
            z = (share - expected) / math.sqrt(expected * (1 - expected) / (n / 2))
            assert abs(z) < 4.5, (p_on, p_off, k, start, share, expected)
        # k = 0 changes nothing
        same = process.skip(state, 0, 0, jax.random.PRNGKey(11)).on
        np.testing.assert_array_equal(np.asarray(same), np.asarray(state.on))


def _kasync(n=8, offline="late", k=2, durations=None, **kw):
    """K-async SGD whose client i's jobs all take ``durations[i]`` (default 1 / speeds from
    0.5 to 1.5)."""
    speed = np.linspace(0.5, 1.5, n) if durations is None else 1 / np.asarray(durations)
    return fa.algorithms.KAsyncSGD(
        clients_per_round=k, batch_size=1, client_lr=0.1, offline=offline, history=None,
        durations=fa.clock.Constant(1.0, speed=speed), **kw)


def _on_points(algorithm, availability, rounds, n, **kw):
    """``simulate``'s round metrics on the quadratic over n one-point clients."""
    return fa.simulate(quadratic_task(), point_clients(np.arange(float(n))[:, None]), algorithm,
                       availability, rounds=rounds, **kw).round_metrics


def _assert_matches_reference(table, durations, k, updates, offline, rtol):
    """The clock's updates (clients, staleness, times) are the event-driven reference's."""
    expected = simulate_events(table, durations, k, updates, offline)
    m = _on_points(_kasync(len(durations), offline, k, durations), AV.Trace(table), updates,
                   len(durations))
    assert m["applied_clients"].tolist() == [e[1] for e in expected]
    assert m["applied_staleness"].tolist() == [e[2] for e in expected]
    np.testing.assert_allclose(m["virtual_time"], [e[0] for e in expected], rtol=rtol)


@pytest.mark.parametrize("offline", ["late", "lost"])
def test_an_outage_makes_no_update_and_time_jumps_past_it(offline):
    # Issue 16's case: K = 2, 8 clients, constant durations, every client offline in slots
    # 50-99. Before the clock was one, 50 updates applied nothing inside the outage and the
    # first updates after it had staleness 55 and 53.
    n = 8
    table = np.ones((400, n), bool)
    table[50:100] = False
    result = fa.simulate(quadratic_task(), point_clients(np.arange(float(n))[:, None]),
                         _kasync(n, offline), AV.Trace(table), rounds=300)
    m = result.round_metrics
    time = m["virtual_time"]
    assert np.all(np.diff(time) >= 0)
    assert not np.any((time > 50) & (time < 100)), "an update inside the outage"
    after = int(np.argmax(time >= 100))
    assert after > 0 and time[after - 1] <= 50 and time[after] >= 100
    assert np.all(m["num_applied"] == 2)  # every update applies its K contributions
    # Staleness after the outage is what it was before (the old clock gave 55 and 53): at most
    # the pre-outage maximum plus the K results the jobs finishing at the return bring at once.
    before = m["applied_staleness"][after - 40:after].max()
    assert m["applied_staleness"][after:after + 40].max() <= before + 2
    assert before < 10


@pytest.mark.parametrize("offline", ["lost", "late"])
def test_the_clock_matches_an_event_driven_reference(offline):
    n, k, updates = 10, 3, 70
    rng = np.random.default_rng(4)
    table = rng.random((400, n)) < 0.6
    table[20:26] = False  # an outage
    _assert_matches_reference(table, rng.uniform(0.3, 2.5, n), k, updates, offline, 1e-5)


@pytest.mark.parametrize("offline", ["lost", "late"])
@pytest.mark.parametrize("k", [1, 3])
def test_the_clock_matches_the_reference_when_jobs_finish_together(offline, k):
    # Durations of half slots: jobs finish together, and on slot ends. Before, the K jobs an
    # update completes were the first in slot order, not client order, among equal finish
    # times, and when an update came at a slot's end the jobs finishing with it were read
    # against the next slot (lost or delayed if their client was off there).
    n, updates = 9, 60
    rng = np.random.default_rng(k)
    table = rng.random((400, n)) < 0.7
    _assert_matches_reference(table, rng.choice([0.5, 1.0, 1.5], n), k, updates, offline, 1e-6)


@pytest.mark.parametrize("offline, slot_length, seed", [("late", 0.3, 0), ("lost", 0.7, 11)])
def test_virtual_time_never_goes_back_when_updates_land_on_slot_ends(offline, slot_length,
                                                                     seed):
    # Durations in thirds of a slot whose float32 length is inexact: an update summed to an ulp
    # past a slot's end was followed by one at that end, an ulp earlier.
    durations = np.array([3, 2, 2, 1]) * slot_length / 3
    m = _on_points(_kasync(4, offline, 2, durations), AV.Bernoulli(0.6), 300, 4,
                   slot_length=slot_length, seed=seed)
    assert np.all(np.diff(m["virtual_time"]) >= 0)


def test_an_update_takes_the_earliest_jobs_by_finish_time_then_client():
    # The clock's candidates for an update: the k first jobs in (finish time, client) order,
    # among M slots holding clients of a larger N (client indices above M), with free slots.
    from fedjax_avail.clock._events import _earliest
    rng = np.random.default_rng(0)
    n, m = 50, 10
    for _ in range(200):
        client = rng.choice(n, m, replace=False)
        remaining = rng.choice([0.5, 1.0, 1.5, np.inf], m).astype(np.float32)
        client[np.isinf(remaining) & (rng.random(m) < 0.5)] = -1  # free slots
        k = int(rng.integers(1, m + 1))
        got = np.asarray(_earliest(jnp.asarray(remaining), jnp.asarray(client, jnp.int32), k, n))
        finite = [i for i in np.lexsort((client, remaining)) if np.isfinite(remaining[i])]
        assert len(set(got.tolist())) == k
        assert sorted(i for i in got if np.isfinite(remaining[i])) == sorted(finite[:k])


@pytest.mark.parametrize("offline, times, clients, staleness, lost", [
    ("lost", [1, 1, 2, 3], [0, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]),
    ("late", [1, 1, 2, 2], [0, 1, 0, 1], [0, 1, 1, 1], [0, 0, 0, 0]),
])
def test_jobs_finishing_at_a_slot_end_with_an_update_complete_in_that_slot(
        offline, times, clients, staleness, lost):
    # Both jobs finish at t = 1, the end of slot 0; client 1 is off in slot 1. K = 1: update 0
    # takes client 0's result; client 1's, finished in slot 0 too, is update 1's (before, it
    # was read against slot 1: lost, or late until slot 2). Both restart at t = 1; client 1's
    # second job is lost in slot 1, or waits for slot 2 and completes at its start.
    table = np.ones((20, 2), bool)
    table[1, 1] = False
    m = _on_points(_kasync(2, offline, 1, [1.0, 1.0]), AV.Trace(table), 4, 2)
    assert m["virtual_time"].tolist() == times
    assert m["applied_clients"].ravel().tolist() == clients
    assert m["applied_staleness"].ravel().tolist() == staleness
    assert m["jobs_lost"].tolist() == lost
    expected = simulate_events(table, [1.0, 1.0], 1, 4, offline)
    assert [(time, c, s) for time, (c,), (s,) in expected] == list(zip(
        times, clients, staleness, strict=True))


@pytest.mark.parametrize("length", [0.1, 0.3, 0.7, 1 / 60])
@pytest.mark.parametrize("job", [1.0, 0.5, 0.25])
def test_a_slot_lasts_its_length_where_float32_cannot_hold_it(length, job):
    # Jobs of a slot (or half a slot), client 1 off in odd slots (its job there lost): with
    # L = 1 client 1 completes at the end of every even slot. A slot of 0.1 must be as long as
    # its jobs too; it was an ulp short (XLA:CPU's fused multiply-add skipped the rounding of a
    # slot's start), so client 1's job spilled into the odd slot and was lost: 118 and 32
    # completions of 150. Half-slot jobs start mid-slot, at an update's float32 time: the time
    # passed in the slot is the compensated sum's. Four quarter-slot jobs in a row ended an ulp
    # past the slot's end at L = 0.7 while time was kept in seconds; it is kept in slots.
    table = np.array([[1, 1], [1, 0]] * 200, bool)

    def run(slot_length):
        alg = fa.algorithms.KAsyncSGD(clients_per_round=1, batch_size=1, client_lr=0.1,
                                      offline="lost", history=None,
                                      durations=fa.clock.Constant(job * slot_length))
        return _on_points(alg, AV.Trace(table), 150, 2, slot_length=slot_length)

    ones, m = run(1.0), run(length)
    # quarter-slot jobs: 12 updates per two slots (client 0: 4 + 4, client 1: 4), and 6 in the
    # 25th slot, by (time, client): 3 each
    counts = [99, 51] if job == 0.25 else [100, 50]
    assert np.bincount(ones["applied_clients"].ravel()).tolist() == counts
    assert m["applied_clients"].tolist() == ones["applied_clients"].tolist()
    np.testing.assert_allclose(m["virtual_time"] / length, ones["virtual_time"], rtol=1e-5)


def test_an_update_starting_at_a_slots_end_counts_that_slots_clients():
    # Both jobs take one slot and finish at 1.0, slot 0's end: update 0 is made in slot 0, and
    # update 1 starts there, at 1.0, where the clock stands: num_available is slot 0's 2, not
    # slot 1's 1 (docs/guide/asynchronous.md). Client 1, off in slot 1, completes late at 2.0
    # in slot 2, where update 2 starts.
    table = np.array([[1, 1], [1, 0]] + [[1, 1]] * 6, bool)
    m = _on_points(_kasync(2, "late", 2, [1.0, 1.0]), AV.Trace(table), 3, 2)
    assert m["virtual_time"].tolist() == [1.0, 2.0, 3.0]
    assert m["num_available"].tolist() == [2, 2, 2] and table[1].sum() == 1


def test_a_trace_that_ended_stops_the_run_naming_the_time():
    n = 6
    table = np.ones((30, n), bool)
    with pytest.raises(fa.StalledError, match="virtual time 30") as error:
        fa.simulate(quadratic_task(), point_clients(np.arange(float(n))[:, None]),
                    _kasync(n, "lost"), AV.Trace(table, cyclic=False), rounds=200,
                    eval_every=50)
    result = error.value.result
    assert error.value.virtual_time == pytest.approx(30.0)
    # the run ended at the update that stalled: its rounds before it, its last row there
    stalled = result.round_metrics["stalled"]
    assert len(stalled) == error.value.round and not stalled.any()
    assert result.history["round"][-1] == error.value.round
    assert 0 < error.value.round < 200 and error.value.round % 50


def test_synchronous_rounds_read_the_slot_they_start_in():
    # Round r of FedAvg with constant durations 2.5 starts at 2.5 r: it reads slot
    # floor(2.5 r). Row s of the table has (s % 7) + 1 clients on.
    n, rounds = 8, 12
    table = np.arange(n)[None, :] < (np.arange(40) % 7 + 1)[:, None]
    alg = fa.algorithms.FedAvg(clients_per_round=2, local_steps=1, batch_size=1,
                               durations=fa.clock.Constant(2.5))
    m = fa.simulate(quadratic_task(), point_clients(np.arange(float(n))[:, None]), alg,
                    AV.Trace(table), rounds=rounds).round_metrics
    slots = np.floor(2.5 * np.arange(rounds)).astype(int)
    assert m["num_available"].tolist() == table[slots].sum(1).tolist()
    np.testing.assert_allclose(m["virtual_time"], 2.5 * np.arange(1, rounds + 1), rtol=1e-6)


def test_every_algorithm_reports_virtual_time():
    # Without durations a round is one slot of length L: virtual time (r + 1) L.
    fd = point_clients(np.arange(6.0)[:, None])
    for alg in (fa.algorithms.FedAvg(clients_per_round=2),
                fa.algorithms.FedLaAvg(clients_per_round=2),
                fa.algorithms.MIFA(clients_per_round=2)):
        result = fa.simulate(quadratic_task(), fd, alg, AV.Bernoulli(0.5), rounds=6,
                             eval_every=3, slot_length=0.5)
        np.testing.assert_allclose(result.round_metrics["virtual_time"],
                                   0.5 * np.arange(1, 7))
        assert result.history["virtual_time"].tolist() == [0.0, 1.5, 3.0]
    same = fa.simulate(quadratic_task(), fd, fa.algorithms.FedAvg(clients_per_round=2),
                       AV.Bernoulli(0.5), rounds=6, slot_length=0.5)
    base = fa.simulate(quadratic_task(), fd, fa.algorithms.FedAvg(clients_per_round=2),
                       AV.Bernoulli(0.5), rounds=6)
    np.testing.assert_array_equal(same.round_metrics["num_selected"],
                                  base.round_metrics["num_selected"])


def test_fedbuff_with_k_m_n_is_fedavg_on_the_same_time_axis():
    n = 6
    fd = point_clients(np.arange(float(n))[:, None])
    kw = dict(local_steps=2, batch_size=1, client_lr=0.1)
    buff = fa.simulate(quadratic_task(), fd, fa.algorithms.FedBuff(
        buffer_size=n, concurrency=n, server_lr=1.0 / n, durations=fa.clock.Constant(1.7),
        **kw), AV.AlwaysOn(), rounds=8)
    avg = fa.simulate(quadratic_task(), fd, fa.algorithms.FedAvg(
        clients_per_round=n, durations=fa.clock.Constant(1.7), **kw), AV.AlwaysOn(), rounds=8)
    np.testing.assert_allclose(buff.round_metrics["virtual_time"],
                               avg.round_metrics["virtual_time"], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(buff.state.params), np.asarray(avg.state.params),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("length", [0.1, 0.3, 0.7, 1 / 60])
@pytest.mark.parametrize("job", [None, 1.0, 0.75])
def test_a_run_at_slot_length_l_is_the_run_at_one_with_time_scaled(length, job):
    # Synchronous rounds (one slot each, or jobs of `job` slots) through outages: at slot length
    # L with durations times L, every round reads the slot the L = 1 run reads. Kept in
    # seconds, time after an outage's jump drifted (L = 0.1 read slot 46 where L = 1 reads 47).
    n = 6
    table = np.random.default_rng(3).random((200, n)) < 0.5
    table[40:47] = False

    def run(slot_length):
        durations = None if job is None else fa.clock.Constant(job * slot_length)
        alg = fa.algorithms.FedAvg(clients_per_round=2, local_steps=1, batch_size=1,
                                   durations=durations)
        return _on_points(alg, AV.Trace(table), 80, n, slot_length=slot_length)

    ones, m = run(1.0), run(length)
    assert m["num_available"].tolist() == ones["num_available"].tolist()
    assert m["num_selected"].tolist() == ones["num_selected"].tolist()
    np.testing.assert_allclose(m["virtual_time"] / length, ones["virtual_time"], rtol=1e-6)


@pytest.mark.parametrize("length", [0.1, 0.3, 0.7, 1 / 60])
def test_a_budget_of_k_slots_lets_the_rounds_before_slot_k_start(length):
    # max_virtual_time = k L (as Python computes it) lets a round starting at slot k - 1 run
    # and not one starting at slot k, for every k up to 1000
    for k in range(1, 1001):
        assert within_budget(jnp.float32(k - 1), k * length, length), k
        assert not within_budget(jnp.float32(k), k * length, length), k


def test_a_budget_of_k_slots_runs_k_rounds():
    # one-slot rounds, synchronous or asynchronous: at L = 0.7 a budget of 9 L ran 10 while
    # time was kept in seconds
    length = 0.7
    fd = point_clients(np.arange(4.0)[:, None])
    algorithms = (fa.algorithms.FedAvg(clients_per_round=2),
                  fa.algorithms.KAsyncSGD(clients_per_round=1, batch_size=1, history=None,
                                          concurrency=1,
                                          durations=fa.clock.Constant(length)))
    for alg in algorithms:
        for k in (9, 10):
            result = fa.simulate(quadratic_task(), fd, alg, AV.AlwaysOn(), rounds=20,
                                 slot_length=length, max_virtual_time=k * length)
            assert len(result.round_metrics["virtual_time"]) == k, (type(alg).__name__, k)
            assert result.stopped == f"max_virtual_time={k * length:g} reached"


@pytest.mark.parametrize("layout", ["loop", "vmap"])
def test_a_swept_deadline_times_the_rounds_as_its_own_run(layout):
    # Deadlines on the runs axis are float32 values: a round that waits for one lasts
    # deadline / L slots as in the run alone (at L = 1/60 a deadline of 0.25 is 15 slots).
    n, length = 6, 1 / 60
    table = np.random.default_rng(4).random((400, n)) < 0.7

    def fedavg(deadline):
        return fa.algorithms.FedAvg(clients_per_round=3, local_steps=1, batch_size=1,
                                    durations=fa.clock.LogNormal(0.2, 0.5), deadline=deadline)

    deadlines = [0.25, 0.3]
    kw = dict(rounds=30, slot_length=length)
    fd = point_clients(np.arange(float(n))[:, None])
    both = fa.simulate(quadratic_task(), fd, [fedavg(d) for d in deadlines], AV.Trace(table),
                       seed=[0, 0], runs_layout=layout, **kw)
    for deadline, result in zip(deadlines, both, strict=True):
        alone = fa.simulate(quadratic_task(), fd, fedavg(deadline), AV.Trace(table), **kw)
        for key in ("virtual_time", "num_available", "num_late"):
            np.testing.assert_array_equal(result.round_metrics[key],
                                          alone.round_metrics[key], err_msg=key)
        assert np.any(alone.round_metrics["num_late"] > 0)


def test_a_duration_model_in_slots_is_divided_by_l_in_float64():
    # converted on the host as it is, not checked again (its span was checked in time units)
    assert fa.clock.Constant(2.5 * 0.7).in_slots(0.7).duration == 2.5
    model = fa.clock.LogNormal(1e-28, 0.5, speed=np.array([1.0, 2.0]))
    slots = model.in_slots(3600.0)
    assert slots.mean == 1e-28 / 3600.0 and slots.sigma == 0.5 and slots.speed is model.speed
    assert model.in_slots(1.0) is model
