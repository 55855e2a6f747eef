"""Interval traces in seconds (issue 37): the FedScale rule against a plain reference, the
plain-text format, FedScale's files and their malformed entries, the restricted unpickler."""

import itertools
import json
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import point_clients, quadratic_task
from test_timeline import _read

import fedjax_avail as fa

AV = fa.availability


def fedscale_is_active(entry: dict, seconds: float) -> bool:
    """FedScale's rule written out (not the code under test): active when some
    ``active[j] <= t mod finish_time <= inactive[j]``."""
    t = seconds % entry["finish_time"]
    return any(a <= t <= b for a, b in zip(entry["active"], entry["inactive"], strict=True))


def reference_masks(trace: dict, num_clients: int, seconds_per_slot: int, slots) -> np.ndarray:
    keys = list(trace)
    return np.array([[fedscale_is_active(trace[keys[i % len(keys)]], s * seconds_per_slot)
                      for i in range(num_clients)] for s in slots])


def test_a_fedscale_trace_replays_the_rule_of_its_reference_exactly():
    trace = AV.example_fedscale_trace(num_devices=37, days=3, seed=1)
    process = AV.from_fedscale(trace, num_clients=50, seconds_per_slot=60)
    slots = range(0, 3 * 1440 + 400, 7)  # past one period, so the repeat is read too
    got = AV.sample(process, 50, max(slots) + 1)[list(slots)]
    want = reference_masks(trace, 50, 60, slots)
    np.testing.assert_array_equal(got, want)
    assert 0.05 < want.mean() < 0.6  # the example has daily on/off cycles, not all or nothing


def test_a_fedscale_session_past_finish_time_is_cut_as_the_rule_reads_it():
    """The rule reads t mod finish_time, so a session's part after finish_time (and a session
    starting after it) is never read: cut off here, not refused (FedScale's own stored index
    may stop on such a session instead: module docstring of _fedscale)."""
    trace = {"a": {"active": [60, 500, 700], "inactive": [120, 650, 800], "finish_time": 600},
             "b": {"active": [10], "inactive": [50], "finish_time": 100}}
    process = AV.from_fedscale(trace, num_clients=2, seconds_per_slot=10)
    slots = range(0, 250)
    got = AV.sample(process, 2, max(slots) + 1)[list(slots)]
    np.testing.assert_array_equal(got, reference_masks(trace, 2, 10, slots))


def test_boundaries_are_closed_and_the_period_wraps():
    trace = {"a": {"active": [60, 300], "inactive": [120, 300], "finish_time": 600},
             "b": {"active": [], "inactive": [], "finish_time": 100}}
    process = AV.from_fedscale(trace, num_clients=2, seconds_per_slot=60)
    masks = AV.sample(process, 2, 21)
    on = {s for s in range(21) if masks[s, 0]}
    # slot s starts at 60 s: 60 and 120 are in [60, 120]; 300 is the point interval [300, 300]
    assert on == {1, 2, 5, 11, 12, 15}
    assert not masks[:, 1].any()  # a device with no interval is never available


def test_a_jump_of_k_slots_reads_what_k_one_slot_steps_read():
    trace = AV.example_fedscale_trace(num_devices=12, days=2, seed=3)
    process = AV.from_fedscale(trace, num_clients=12, seconds_per_slot=600)
    slots = [0, 1, 5, 6, 13, 29, 30, 47, 200, 287, 288, 400]
    stepped = AV.sample(process, 12, 401)
    np.testing.assert_array_equal(_read(process, 12, slots), stepped[slots])


def test_played_once_no_one_is_available_after_the_last_interval():
    process = AV.Intervals.from_lists([[(0, 2)], [(1, 5), (7, 9)]])
    masks = AV.sample(process, 2, 12)
    np.testing.assert_array_equal(masks[:, 0], [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(masks[:, 1], [0, 1, 1, 1, 1, 1, 0, 1, 1, 1, 0, 0])
    state = process.init(None, 2)
    assert not AV.ended(process, state, 9) and AV.ended(process, state, 10)


def test_the_plain_text_formats_give_the_same_process(tmp_path):
    rows = [(0, 0, 50), (2, 10, 20), (0, 100, 130), (2, 40, 41)]
    (tmp_path / "t.csv").write_text("client,start,end\n" + "".join(
        f"{c},{s},{e}\n" for c, s, e in rows))
    (tmp_path / "t.jsonl").write_text("".join(
        json.dumps({"client": c, "start": s, "end": e}) + "\n" for c, s, e in rows))
    want = AV.Intervals.from_lists([[(0, 50), (100, 130)], [], [(10, 20), (40, 41)]],
                                   period=150, seconds_per_slot=5)
    for name in ("t.csv", "t.jsonl"):
        got = AV.Intervals.from_file(tmp_path / name, num_clients=3, period=150,
                                     seconds_per_slot=5)
        np.testing.assert_array_equal(AV.sample(got, 3, 70), AV.sample(want, 3, 70))


@pytest.mark.parametrize("entry, words", [
    ({"active": [0, 10], "inactive": [5], "finish_time": 100}, "active has 2 entries but "
                                                                 "inactive has 1"),
    ({"active": [10, 0], "inactive": [20, 5], "finish_time": 100}, "must be sorted"),
    ({"active": [0, 10], "inactive": [15, 20], "finish_time": 100}, "must not overlap"),
    ({"active": [5], "inactive": [1], "finish_time": 100}, "starts at 5 after it ends at 1"),
    ({"active": [0], "inactive": [5], "finish_time": 0}, "'finish_time'] must be a number > 0"),
    ({"active": [0], "inactive": [5]}, "has no 'finish_time'"),
])
def test_a_malformed_entry_is_refused_naming_the_key_and_field(entry, words):
    with pytest.raises(ValueError, match=r"trace\['phone-7'\]") as error:
        AV.from_fedscale({"ok": {"active": [0], "inactive": [1], "finish_time": 9},
                          "phone-7": entry}, num_clients=4)
    assert words in str(error.value)


def test_bad_plain_text_is_refused_naming_the_file_and_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("client,start,end\n0,0,10\n5,0,10\n")
    with pytest.raises(ValueError, match=r"bad.csv line 3: client 5 is outside 0..2"):
        AV.Intervals.from_file(path, num_clients=3)
    path.write_text("client,begin,end\n0,0,10\n")
    with pytest.raises(ValueError, match=r"missing \['start'\]"):
        AV.Intervals.from_file(path, num_clients=3)
    lines = tmp_path / "bad.jsonl"
    for client in ("1.9", "true"):  # not read as client 1
        lines.write_text('{"client": 0, "start": 0, "end": 5}\n'
                         f'{{"client": {client}, "start": 0, "end": 5}}\n')
        with pytest.raises(ValueError, match=r"bad.jsonl line 2: .*is not an integer"):
            AV.Intervals.from_file(lines, num_clients=3)


class _Bomb:
    """Unpickling this calls ``open(marker, "w")``: it would create the marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_pickle_carrying_a_callable_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "trace.pkl"
    path.write_bytes(pickle.dumps({"d": {"active": [0], "inactive": [5], "finish_time": 9,
                                         "model": _Bomb(marker)}}))
    with pytest.raises(pickle.UnpicklingError, match="names io.open"):
        AV.from_fedscale(path, num_clients=2)
    assert not marker.exists()
    pickle.loads(path.read_bytes())  # the bomb is real: plain unpickling runs it
    assert marker.exists()


def test_a_plain_pickle_loads_like_its_dict(tmp_path):
    trace = AV.example_fedscale_trace(num_devices=5, days=1, seed=2)
    path = tmp_path / "trace.pkl"
    path.write_bytes(pickle.dumps(trace))
    a = AV.sample(AV.from_fedscale(path, num_clients=8), 8, 1440)
    b = AV.sample(AV.from_fedscale(trace, num_clients=8), 8, 1440)
    np.testing.assert_array_equal(a, b)


def test_an_assignment_picks_the_entries():
    trace = {"x": {"active": [0], "inactive": [59], "finish_time": 120},
             "y": {"active": [60], "inactive": [119], "finish_time": 120}}
    process = AV.from_fedscale(trace, num_clients=3, seconds_per_slot=60,
                               assignment=["y", "y", "x"])
    np.testing.assert_array_equal(AV.sample(process, 3, 2), [[0, 0, 1], [1, 1, 0]])
    with pytest.raises(ValueError, match="assignment names keys the trace lacks: \\['z'\\]"):
        AV.from_fedscale(trace, num_clients=1, assignment=["z"])


def test_simulate_runs_on_a_trace_and_the_memory_estimate_counts_it():
    points = np.array(list(itertools.product([-1.0, 0.0, 1.0], [0.0, 2.0, 4.0, 6.0])))
    fd = point_clients(points)
    trace = AV.example_fedscale_trace(num_devices=12, days=1, seed=4)
    process = AV.from_fedscale(trace, num_clients=12, seconds_per_slot=3600)
    alg = fa.algorithms.FedAvg(clients_per_round=4, local_steps=1, batch_size=1, client_lr=0.1)
    result = fa.simulate(quadratic_task(2), fd, alg, process, rounds=30, seed=3, eval_every=10)
    masks = AV.sample(process, 12, 30)
    np.testing.assert_array_equal(result.round_metrics["num_available"], masks.sum(axis=1))
    estimate = fa.estimate_memory(quadratic_task(2), fd, alg, process)
    width = process.starts.shape[1]
    assert estimate.terms["availability_state"] >= 4 * 12 * 2 * width


def fedscale_completion_seconds(entry, batch_size, local_steps, kbits):
    """FedScale's get_completion_time written out (not the code under test)."""
    return (3.0 * batch_size * local_steps * entry["computation"] / 1000.0
            + (kbits + kbits) / entry["communication"])


def test_capacity_durations_follow_fedscales_completion_time():
    capacity = {"a": {"computation": 20.0, "communication": 800.0},
                "b": {"computation": 5.0, "communication": 5000.0},
                "c": {"computation": 120.0, "communication": 100.0}}
    durations = fa.clock.from_fedscale_capacity(capacity, num_clients=7, batch_size=20,
                                                local_steps=5, model_kbits=400.0)
    keys = list(capacity)
    want = np.array([fedscale_completion_seconds(capacity[keys[i % 3]], 20, 5, 400.0)
                     for i in range(7)])
    got = np.asarray(durations.sample(None, jnp.asarray(durations.speeds(7))))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    minutes = fa.clock.from_fedscale_capacity(capacity, 7, 20, 5, 400.0, seconds_per_unit=60)
    got = np.asarray(minutes.sample(None, jnp.asarray(minutes.speeds(7))))
    np.testing.assert_allclose(got, want / 60, rtol=1e-6)


@pytest.mark.parametrize("entry, words", [
    ({"computation": 10.0}, "capacity['d']['communication'] must be a number > 0, got None"),
    ({"computation": -1.0, "communication": 5.0}, "['computation'] must be a number > 0"),
])
def test_a_bad_capacity_entry_is_refused_naming_the_key_and_field(entry, words):
    with pytest.raises(ValueError) as error:
        fa.clock.from_fedscale_capacity({"d": entry}, 2, 10, 1, 100.0)
    assert words in str(error.value)


def test_capacity_durations_drive_an_asynchronous_server():
    points = np.array(list(itertools.product([-1.0, 0.0, 1.0], [0.0, 2.0, 4.0, 6.0])))
    fd = point_clients(points)
    capacity = {str(i): {"computation": 10.0 * (i + 1), "communication": 1000.0}
                for i in range(4)}
    durations = fa.clock.from_fedscale_capacity(capacity, 12, batch_size=1, local_steps=1,
                                                model_kbits=100.0)
    alg = fa.algorithms.FedBuff(buffer_size=2, concurrency=4, local_steps=1, batch_size=1,
                                client_lr=0.1, durations=durations)
    result = fa.simulate(quadratic_task(2), fd, alg, AV.AlwaysOn(), rounds=20, seed=1,
                         eval_every=5)
    # a job takes 0.2 s of communication plus 0.03-0.12 s of compute: 20 updates of 2 jobs
    # from 4 in flight take about 40 jobs * 0.23-0.32 s / 4 (2.3-3.2 s); 2x slack for the
    # jobs still in flight and the order they finish in
    assert 2.0 <= result.history["virtual_time"][-1] <= 6.4


@pytest.mark.parametrize("starts, ends, words", [
    ([[0, np.inf], [5, 1]], [[3, -np.inf], [9, 4]], "client 1: interval 1 starts at 1, "
                                                    "before interval 0 ends at 9"),
    ([[np.inf, 0]], [[-np.inf, 3]], "client 0: interval 1 follows padding"),
    ([[0, np.nan]], [[3, 4]], "client 0: interval 1 has bounds (nan, 4.0)"),
    ([[0]], [[np.inf]], "client 0: interval 0 has bounds (0.0, inf)"),
])
def test_intervals_a_search_cannot_read_are_refused_naming_the_client(starts, ends, words):
    with pytest.raises(ValueError) as error:
        AV.Intervals(np.array(starts, float), np.array(ends, float))
    assert words in str(error.value)


@pytest.mark.parametrize("period, words", [
    (50, "client 0: interval 0 (100, 200) ends after the period 50 s"),
    ([300, 30], "client 1: interval 0 (0, 40) ends after the period 30 s"),
])
def test_an_interval_past_its_period_is_refused(period, words):
    """The rule reads t mod P: an interval ending after P would never (wholly) be read."""
    with pytest.raises(ValueError) as error:
        AV.Intervals.from_lists([[(100, 200)], [(0, 40)]], period=period)
    assert words in str(error.value)
    AV.Intervals.from_lists([[(100, 200)], [(0, 40)]], period=200)  # ending at P is read


def test_a_million_clients_replay_their_devices():
    """N = 10^6 clients from a 500-device trace (the checks and the padding are vectorised)."""
    trace = AV.example_fedscale_trace(num_devices=500, days=2, seed=5)
    process = AV.from_fedscale(trace, num_clients=10**6, seconds_per_slot=60)
    masks = AV.sample(process, 10**6, 3)
    np.testing.assert_array_equal(masks[:, :500], masks[:, 500:1000])  # keys[i % 500]


@pytest.mark.parametrize("shared_period", [False, True])  # a period [N], or one for all
def test_clients_with_many_intervals_take_the_binary_search_and_agree(shared_period):
    from fedjax_avail.availability._intervals import COMPARE_ALL_UP_TO

    rng = np.random.default_rng(7)
    bounds = np.cumsum(rng.integers(1, 6, (3, 2 * (COMPARE_ALL_UP_TO + 20))), axis=1)
    finish = [int(bounds.max()) + 3 if shared_period else int(b[-1]) + 3 for b in bounds]
    trace = {f"k{i}": {"active": b[0::2].tolist(), "inactive": b[1::2].tolist(),
                       "finish_time": finish[i]} for i, b in enumerate(bounds)}
    process = AV.from_fedscale(trace, num_clients=3, seconds_per_slot=1)
    assert process.starts.shape[1] > COMPARE_ALL_UP_TO
    slots = range(0, 2 * int(bounds.max()))
    np.testing.assert_array_equal(AV.sample(process, 3, len(slots)),
                                  reference_masks(trace, 3, 1, slots))


def test_the_state_keeps_clients_on_its_last_axis_also_when_they_are_as_many_as_intervals():
    # the mesh shards, and the memory estimate counts, an availability state along its last
    # axis of length N: with N = J = 2 that must be the clients, not the intervals
    from fedjax_avail.mesh import client_axis

    process = fa.availability.Intervals.from_lists([[(0, 1), (2, 3)], [(10, 15), (20, 25)]],
                                                   period=[50, 60])
    state = process.init(jax.random.key(0), 2)
    paths = jax.tree_util.tree_flatten_with_path(state)[0]
    assert [client_axis(path, leaf, 2, availability=True) for path, leaf in paths] == [1, 1, 0]
    np.testing.assert_array_equal(np.asarray(state.starts)[:, 1], [10, 20])
