"""Experiments as data: every field of every part is a setting by a dotted name, every
experiment takes seeds and sweeps, a sweep's members equal their separate runs, and a run never
overwrites or resumes silently."""

import csv
import dataclasses
import json

import numpy as np
import pytest
from conftest import MNIST_DIR

import fedjax_avail as fa
from fedjax_avail import cli, experiments
from fedjax_avail.experiments import _parts
from fedjax_avail.experiments._experiment import _Reads
from fedjax_avail.experiments._folder import mean_history
from fedjax_avail.history import History

OFFLINE = [name for name, e in experiments.REGISTRY.items()
           if isinstance(e, experiments.Experiment) and "sentiment140" not in name]
SMALL = {"rounds": 6, "eval_every": 3}


def _leaves(prefix, obj):
    """(dotted name, value) of every scalar field below a dataclass, walked here on its own."""
    for field in dataclasses.fields(obj):
        if not field.init:
            continue
        value = getattr(obj, field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from _leaves(f"{prefix}.{field.name}", value)
        elif value is None or isinstance(value, (bool, int, float, str)):
            yield f"{prefix}.{field.name}", value


def _get(setup, key):
    part, *path = key.split(".")
    obj = {**setup.algorithms, "availability": setup.availability}[part]
    for name in path:
        obj = getattr(obj, name)
    return obj


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _as_text(value):
    return "none" if value is None else str(value).lower() if isinstance(value, bool) else str(
        value)


@pytest.mark.parametrize("name", OFFLINE)
def test_every_field_of_every_part_is_a_setting(name, mnist):
    experiment = experiments.get(name)
    data = {"data_dir": str(MNIST_DIR)} if "data_dir" in experiment.defaults else {}
    setup = experiment.setup(experiment.config(data))
    parts = {**setup.algorithms, "availability": setup.availability}
    leaves = [leaf for part, obj in parts.items() if dataclasses.is_dataclass(obj)
              for leaf in _leaves(part, obj)]
    assert len(leaves) >= 5 * len(setup.algorithms)
    for key, value in leaves:
        same = _parts.apply(setup, {key: _as_text(value)})  # the command line's text
        assert _get(same, key) == value and type(_get(same, key)) is type(value), key
    # a changed value reaches the part, and only that part
    first = next(iter(setup.algorithms))
    key = f"{first}.client_lr"
    changed = _parts.apply(setup, {key: str(_get(setup, key) * 2)})
    assert _get(changed, key) == _get(setup, key) * 2
    assert all(changed.algorithms[o] is setup.algorithms[o] for o in setup.algorithms
               if o != first)


def test_a_wrong_dotted_setting_is_one_line_naming_it(capsys, tmp_path):
    cases = {
        "fedavg.client_lr=-1": "setting fedavg.client_lr: client_lr must be a finite number > "
                               "0, got -1.0",
        "fedavg.client_lr=abc": "setting fedavg.client_lr must be a finite number > 0, got "
                                "'abc'",
        "fedavg.nope=1": "setting fedavg.nope: FedAvg has no field 'nope'; its fields: "
                         "selection, durations",
        "fedbuff.history=512": "setting fedbuff.history: no part 'fedbuff'; parts: fedavg, "
                               "fedlaavg, sequential, availability",
        "fedavg.local_steps=2.5": "setting fedavg.local_steps: local_steps must be an integer "
                                  ">= 1, got 2.5",
        "fedavg.weighting=1": "setting fedavg.weighting: weighting must be",
        "fedavg.selection.lam=1": "setting fedavg.selection.lam: Uniform has no field 'lam'",
        "fedavg.=1": "--set fedavg.: a dotted setting names a part and its field",
    }
    for pair, words in cases.items():
        assert cli.main(["run", "--set", pair, "--out", str(tmp_path / "x"), "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, (pair, err)
    assert not (tmp_path / "x").exists()
    assert cli.main(["run", "--set", "seed=0,1,2", "--dry-run"]) == 2
    assert "for several seeds trained together: --set seeds=0,1,2" in capsys.readouterr().err


def test_every_experiment_takes_seeds_and_sweeps():
    for name, experiment in experiments.REGISTRY.items():
        overrides = {"seeds": (0, 1)}
        if isinstance(experiment, experiments.Sweep):
            panels = experiments.sweep_settings(experiment, overrides)
            assert all(experiment.base.config(p)["seeds"] == (0, 1) for p in panels.values())
        else:
            assert experiment.config(overrides)["seeds"] == (0, 1), name
        grid = experiments.with_grid(experiment, {"rounds": [10, 20], "eval_every": [1, 2]})
        panels = experiments.sweep_settings(grid, overrides)
        own = len(experiment.settings) if isinstance(experiment, experiments.Sweep) else 1
        assert len(panels) == 4 * own, name
        points = sorted({(p["rounds"], p["eval_every"]) for p in panels.values()})
        assert points == [(10, 1), (10, 2), (20, 1), (20, 2)], name


def test_a_sweep_of_a_setting_its_panels_set_is_refused():
    with pytest.raises(ValueError, match="--sweep E: the panels of fedlaavg-mnist-fig4 set it"):
        experiments.with_grid(experiments.get("fedlaavg-mnist-fig4"), {"E": [5, 10]})
    with pytest.raises(ValueError, match="--sweep lr: a value is given twice"):
        experiments.with_grid(experiments.DEFAULT, {"lr": [0.1, 0.1]})


def test_a_sweeps_members_equal_their_separate_runs(tmp_path, capsys):
    base = ["run", "--set", "rounds=6", "--set", "eval_every=3", "--set",
            "algorithms=fedavg,fedlaavg", "--no-progress"]
    assert cli.main([*base, "--sweep", "lr=0.05,0.2", "--sweep", "fedlaavg.local_steps=2,5",
                     "--out", str(tmp_path / "grid")]) == 0
    out = capsys.readouterr().out
    assert "best for fedavg by final_test_accuracy: " in out
    rows = _csv(tmp_path / "grid" / "metrics.csv")
    assert {"setting", "lr", "fedlaavg.local_steps"} <= set(rows[0])
    summary = json.loads((tmp_path / "grid" / "summary.json").read_text())
    assert len(summary) == 8
    for algorithm in ("fedavg", "fedlaavg"):
        scored = [row for row in summary if row["algorithm"] == algorithm]
        top = max(row["final_test_accuracy"] for row in scored)
        assert [row["best"] for row in scored] == [
            row["final_test_accuracy"] == top for row in scored]
    # fedlaavg's local steps change nothing of fedavg: its best lr wins twice, a tie
    fedavg = [row for row in summary if row["algorithm"] == "fedavg" and row["best"]]
    assert len(fedavg) == 2 and fedavg[0]["lr"] == fedavg[1]["lr"]
    for lr in ("0.05", "0.2"):
        for steps in ("2", "5"):
            alone = tmp_path / f"{lr}-{steps}"
            assert cli.main([*base, "--set", f"lr={lr}", "--set",
                             f"fedlaavg.local_steps={steps}", "--out", str(alone)]) == 0
            separate = _csv(alone / "metrics.csv")
            member = [r for r in rows if r["setting"] == f"lr={lr}, "
                      f"fedlaavg.local_steps={steps}"]
            assert len(member) == len(separate) == 6  # 2 algorithms x rounds 0, 3, 6
            assert {r["lr"] for r in member} == {lr}
            for mine, theirs in zip(member, separate, strict=True):
                for column in ("algorithm", "round", "train_loss", "test_accuracy"):
                    assert mine[column] == theirs[column], (lr, steps, column)
    capsys.readouterr()


def test_seeds_run_together_for_any_experiment_and_report_their_spread(tmp_path):
    outcome = experiments.run(experiments.DEFAULT, {**SMALL, "algorithms": ("fedavg",),
                                                    "seeds": (0, 1, 2)}, tmp_path,
                              progress=False, checkpoint=False)
    (row,) = outcome.summary
    finals = [h.rows[-1]["train_loss"] for h in outcome.per_seed["fedavg"]]
    assert len(set(finals)) == 3  # three different runs
    np.testing.assert_allclose(row["final_train_loss"], np.mean(finals), rtol=1e-6)
    np.testing.assert_allclose(row["final_train_loss_std"], np.std(finals), rtol=1e-5)
    assert row["seeds"] == [0, 1, 2]


def test_a_run_never_overwrites_or_resumes_silently(tmp_path, capsys):
    run = ["run", "--set", "rounds=3", "--set", "eval_every=3", "--set", "algorithms=fedavg",
           "--no-progress", "--out", str(tmp_path / "o")]
    assert cli.main([*run, "--resume"]) == 2
    assert "holds no run to resume" in capsys.readouterr().err
    assert cli.main(run) == 0
    first = (tmp_path / "o" / "metrics.csv").read_text()
    assert cli.main(run) == 2
    err = capsys.readouterr().err
    assert "already holds a run's results" in err and "--overwrite" in err
    assert (tmp_path / "o" / "metrics.csv").read_text() == first
    assert cli.main([*run, "--resume", "--overwrite"]) == 2
    assert "choose one" in capsys.readouterr().err
    assert cli.main([*run, "--overwrite", "--set", "lr=0.1"]) == 0
    assert (tmp_path / "o" / "metrics.csv").read_text() != first
    assert cli.main([*run, "--set", "lr=0.1", "--resume"]) == 0  # finished: nothing to redo


@pytest.mark.parametrize("best, words", [("nope", "best must be final_test_accuracy"),
                                         ("time_to=1.5", "with ACC in (0, 1]")])
def test_a_bad_best_is_refused_before_anything_runs(best, words, capsys):
    assert cli.main(["run", "--sweep", "lr=0.1,0.2", "--best", best, "--dry-run"]) == 2
    assert words in capsys.readouterr().err


def test_best_without_a_sweep_is_refused_not_ignored(capsys):
    assert cli.main(["run", "--best", "final_train_loss", "--dry-run"]) == 2
    assert "is not a sweep: add --sweep" in capsys.readouterr().err


def _evaluations(*points):
    """A run's evaluations from (round, virtual time, test accuracy)."""
    return History([{"round": r, "virtual_time": t, "test_accuracy": a} for r, t, a in points])


def test_time_to_accuracy_scores_each_seeds_own_time():
    score = experiments.criterion("time_to=0.5")
    fast = _evaluations((0, np.nan, 0.1), (5, 7.0, 0.6))
    slow = _evaluations((0, np.nan, 0.1), (5, 9.0, 0.5))
    never = _evaluations((0, np.nan, 0.1), (5, 12.0, 0.4))
    assert score({}, [fast]) == -7.0 > score({}, [slow]) == -9.0
    assert score({}, [never]) is None
    assert score({}, [fast, never]) == -(7.0 + 12.0) / 2  # never there: the run's end
    # two seeds past 0.5 at different times, whose mean curve never gets there
    up_down = _evaluations((0, np.nan, 0.1), (1, 1.0, 0.6), (2, 2.0, 0.3))
    down_up = _evaluations((0, np.nan, 0.1), (1, 1.0, 0.3), (2, 2.0, 0.6))
    assert max(mean_history([up_down, down_up])["test_accuracy"]) < 0.5
    assert score({}, [up_down, down_up]) == -1.5
    # a budget stops seeds at different rounds; the mean curve keeps the rounds all recorded
    budgeted = _evaluations((0, np.nan, 0.1), (4, 4.0, 0.45), (5, 6.5, 0.55))
    assert max(mean_history([budgeted, down_up])["test_accuracy"]) < 0.5
    assert score({}, [budgeted, down_up]) == -(6.5 + 2.0) / 2
    no_clock = History([{"round": 0, "test_accuracy": 0.1}, {"round": 4, "test_accuracy": 0.7}])
    assert score({}, [no_clock]) == -4.0  # rounds where the run has no clock


def _first_time(rows, accuracy):
    """Plain reference: a seed's first virtual time (round 0's NaN: 0) at ``accuracy``, or its
    last evaluation's where it never gets there."""
    def x(row):
        t = float(row["virtual_time"]) if row.get("virtual_time") else float(row["round"])
        return t if np.isfinite(t) else 0.0
    rows = sorted(rows, key=lambda r: int(r["round"]))
    return next((x(r) for r in rows if r["test_accuracy"] and float(r["test_accuracy"])
                 >= accuracy), x(rows[-1]))


def test_a_finished_sweep_is_rescored_from_its_metrics_without_running(tmp_path, capsys):
    grid = tmp_path / "grid"
    assert cli.main(["run", "--set", "rounds=6", "--set", "eval_every=3", "--set",
                     "algorithms=fedavg,fedlaavg", "--set", "seeds=0,1", "--no-progress",
                     "--sweep", "lr=0.05,0.2", "--out", str(grid)]) == 0
    first = (grid / "summary.json").read_text()
    rows = _csv(grid / "metrics.csv")
    accuracy = float(np.median([float(r["test_accuracy"]) for r in rows if r["round"] != "0"]))
    capsys.readouterr()
    assert cli.main(["rescore", str(grid), "--best", f"time_to={accuracy}"]) == 0
    assert f"best for fedavg by time_to={accuracy}: lr=" in capsys.readouterr().out
    summary = json.loads((grid / "summary.json").read_text())
    config = json.loads((grid / "config.json").read_text())
    assert config["best"] == f"time_to={accuracy}" and "git_commit" in config["rescored"]
    for row in summary:
        mine = [r for r in rows if r["setting"] == row["setting"]
                and r["algorithm"] == row["algorithm"]]
        seeds = sorted({r["seed"] for r in mine})
        assert len(seeds) == 2
        times = [_first_time([r for r in mine if r["seed"] == s], accuracy) for s in seeds]
        reached = any(float(r["test_accuracy"]) >= accuracy for r in mine if r["test_accuracy"])
        assert row["score"] == (pytest.approx(-np.mean(times)) if reached else None)
    for algorithm in ("fedavg", "fedlaavg"):
        scores = [row["score"] for row in summary if row["algorithm"] == algorithm]
        top = max((s for s in scores if s is not None), default=None)
        assert [row["best"] for row in summary if row["algorithm"] == algorithm] == [
            s is not None and s == top for s in scores]
    # back to the criterion it ran with: the summary it wrote, to the byte
    assert cli.main(["rescore", str(grid), "--best", "final_test_accuracy"]) == 0
    assert (grid / "summary.json").read_text() == first
    assert cli.main(["rescore", str(grid / "lr_0.05"), "--best", "final_test_accuracy"]) == 2
    assert "holds no sweep's results" in capsys.readouterr().err
    assert cli.main(["rescore", str(tmp_path / "none"), "--best", "final_test_accuracy"]) == 2
    assert not (tmp_path / "none").exists()
    (tmp_path / "plain").mkdir()  # a single run's summary: refused, and nothing written there
    (tmp_path / "plain" / "summary.json").write_text(json.dumps([{"algorithm": "fedavg"}]))
    assert cli.main(["rescore", str(tmp_path / "plain"), "--best", "final_test_accuracy"]) == 2
    assert [p.name for p in (tmp_path / "plain").iterdir()] == ["summary.json"]
    capsys.readouterr()
    # an interrupted sweep (no config.json yet) is rescored over the points it finished
    (grid / "config.json").unlink()
    assert cli.main(["rescore", str(grid), "--best", f"time_to={accuracy}"]) == 0
    assert json.loads((grid / "summary.json").read_text()) == summary


def test_a_setting_nothing_in_the_run_reads_is_refused_not_recorded(tmp_path, capsys, mnist):
    """A setting changed from its default that neither the build, nor the parts it built, nor
    the runner reads would be recorded in config.json and ignored: a sweep over it would label
    identical runs differently."""
    assert cli.main(["run", "--set", "mu=5", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "setting mu=5.0: nothing in this run reads it (it feeds fedprox, which " in err
    assert cli.main(["run", "--sweep", "mu=0.1,5", "--dry-run"]) == 2
    assert "setting mu=0.1: nothing in this run reads it" in capsys.readouterr().err
    assert cli.main(["run", "--sweep", "mu=1,5", "--dry-run"]) == 2  # one point at the default
    assert "setting mu=5.0: nothing in this run reads it" in capsys.readouterr().err
    assert cli.main(["run", "--set", "mu=5", "--set", "algorithms=fedavg,fedprox",
                     "--dry-run"]) == 0
    assert cli.main(["run", "--set", "mu=1", "--dry-run"]) == 0  # its default: no change
    default = experiments.DEFAULT
    config = default.config({"mu": 1})  # an int for the float default (a TOML file's `mu = 1`)
    default.check_read([config], [default.setup(config).read])
    # a sweep keeps a setting that one of its points reads, in whichever program it runs
    assert cli.main(["run", "--sweep", "algorithms=fedavg,fedprox", "--set", "mu=5",
                     "--dry-run"]) == 0
    # and refuses one that none reads before the first point trains
    assert cli.main(["run", "--sweep", "algorithms=fedavg,fedlaavg", "--set", "mu=5",
                     "--no-progress", "--out", str(tmp_path / "grid")]) == 2
    assert "setting mu=5.0: nothing in this run reads it" in capsys.readouterr().err
    assert not list(tmp_path.rglob("metrics.csv"))
    experiment = experiments.get("wkafl-mnist")
    built = {}
    for model in ("lr", "cnn"):
        config = experiment.config({"model": model, "init": "flax", "data_dir": str(MNIST_DIR),
                                    "num_clients": 20})
        built[model] = (config, experiment.setup(config))
    assert "init" not in built["lr"][1].read and "init" in built["cnn"][1].read  # the CNN's
    with pytest.raises(ValueError, match="setting init=flax: nothing in this run reads it"):
        experiment.check_read([built["lr"][0]], [built["lr"][1].read])
    experiment.check_read([c for c, _ in built.values()],  # a sweep over model keeps it
                          [setup.read for _, setup in built.values()])
    capsys.readouterr()


def test_a_setting_whose_every_field_a_dotted_setting_sets_is_refused(capsys):
    """``mu=0.5`` with ``fedprox.mu=0.3``: the dotted one sets the only field ``mu`` feeds, so
    ``mu`` would be recorded and ignored; ``lr`` still feeds the other algorithms' rates."""
    run = ["run", "--set", "algorithms=fedavg,fedprox", "--dry-run"]
    assert cli.main([*run, "--set", "mu=0.5", "--set", "fedprox.mu=0.3"]) == 2
    err = capsys.readouterr().err
    assert ("setting mu=0.5: nothing in this run reads it (dotted settings set every field it "
            "feeds: fedprox.mu)") in err
    # only the dotted settings of the fields it feeds are named
    assert cli.main([*run, "--set", "mu=0.5", "--set", "fedprox.mu=0.3",
                     "--set", "fedprox.batch_size=7"]) == 2
    assert "(dotted settings set every field it feeds: fedprox.mu)" in capsys.readouterr().err
    # a setting read through another's reading (K from beta) is named less precisely
    assert cli.main(["run", "--set", "algorithms=fedavg", "--set", "beta=0.2", "--set",
                     "fedavg.clients_per_round=5", "--dry-run"]) == 2
    assert ("setting beta=0.2: nothing in this run reads it (digits-diurnal does not use it "
            "under these settings, where dotted settings set fedavg.clients_per_round)"
            ) in capsys.readouterr().err
    assert cli.main([*run, "--set", "fedprox.mu=0.3"]) == 0
    assert cli.main([*run, "--set", "lr=0.07", "--set", "fedavg.client_lr=0.2"]) == 0
    assert cli.main([*run, "--set", "lr=0.07", "--set", "fedavg.client_lr=0.2",
                     "--set", "fedprox.client_lr=0.3"]) == 2
    assert ("setting lr=0.07: nothing in this run reads it (dotted settings set every field it "
            "feeds: fedavg.client_lr, fedprox.client_lr)") in capsys.readouterr().err
    default = experiments.DEFAULT
    config = default.config({"algorithms": ("fedavg", "fedprox"), "mu": 0.5, "fedprox.mu": 0.3})
    setup = default.setup(config)
    assert setup.algorithms["fedprox"].mu == 0.3 and "mu" not in setup.read
    # a nested part a dotted setting sets whole (from Python) reads none of its settings
    fedbuff = _parts.part(fa.algorithms.FedBuff, buffer_size=2, durations=_parts.part(
        fa.clock.LogNormal, sigma=_parts.Setting("duration_sigma")))
    for dotted, read in (({}, True), ({"fedbuff.durations": fa.clock.Constant(1.0)}, False)):
        reads = _Reads({"duration_sigma": 1.0, **dotted})
        fedbuff.build(reads, "fedbuff")
        assert ("duration_sigma" in reads.keys_read) is read


def test_a_fields_meaning_comes_from_its_class_docstring():
    from fedjax_avail import algorithms

    fedbuff = _parts.field_docs(algorithms.FedBuff)
    assert fedbuff["history"].startswith("H, the global models kept for stale jobs")  # base's
    assert fedbuff["buffer_size"] == "K, uploads per server update."  # its own
    fedavg = _parts.field_docs(algorithms.FedAvg)
    # a base class's own entry wins over the subclass's entry naming several fields
    assert fedavg["deadline"].startswith("with durations, the longest a round waits")
    lines = experiments.part_settings(experiments.DEFAULT.setup(experiments.DEFAULT.config()))
    at = lines.index("fedavg.client_lr = 0.05")
    assert lines[at + 1].strip().startswith("a finite number > 0; ")


def test_refusals_come_before_the_first_algorithm_trains(tmp_path, capsys, no_compilation):
    out = str(tmp_path / "o")
    for words, message in [
        (["--set", "fedlaavg.clients_per_round=1000"],
         "fedlaavg: clients_per_round must be in [1, num_clients=100], got 1000"),
        (["--sweep", "algorithms=fedlaavg,fedavg", "--set", "fedlaavg.local_steps=3"],
         "setting fedlaavg.local_steps: no part 'fedlaavg'"),  # the second panel's parts
    ]:
        assert cli.main(["run", *words, "--out", out, "--no-progress"]) == 2
        assert message in capsys.readouterr().err
    assert not list((tmp_path / "o").rglob("*.csv"))


def test_a_dotted_setting_the_panels_vary_is_refused(mnist, capsys):
    data = ["--set", f"data_dir={MNIST_DIR}", "--dry-run"]
    for name, pair, field in [
        ("fedlaavg-mnist-fig5-beta", "fedlaavg.clients_per_round=5", "clients_per_round"),
        ("fedlaavg-mnist-fig4", "availability.period=30", "availability.period"),
    ]:
        assert cli.main(["run", name, "--set", pair, *data]) == 2
        err = capsys.readouterr().err
        assert f"the panels of {name} set" in err and field in err, err
    assert cli.main(["run", "fedlaavg-mnist-fig4", "--sweep", "availability.period=30,60",
                     *data]) == 2
    assert "set availability.period themselves" in capsys.readouterr().err


def test_the_amplitude_window_follows_the_availability_period():
    experiment = experiments.DEFAULT
    assert experiment.setup(experiment.config()).window == 2 * 20  # 2E
    moved = experiment.setup(experiment.config({"availability.period": 7}))
    assert moved.availability.period == 7 and moved.window == 14


def test_overwrite_removes_only_a_runs_files_and_only_once_the_settings_pass(tmp_path,
                                                                              capsys):
    out = tmp_path / "o"
    run = ["run", "--set", "rounds=10", "--set", "eval_every=5", "--set", "algorithms=fedavg",
           "--no-progress", "--out", str(out), "--checkpoint-every", "5"]
    assert cli.main(run) == 0
    before = sorted(p.relative_to(out) for p in out.rglob("*") if p.name != ".lock")
    assert any(p.parts[0] == "checkpoints" for p in before)
    assert cli.main([*run, "--overwrite", "--set", "fedavg.client_lr=-1"]) == 2
    capsys.readouterr()
    after = sorted(p.relative_to(out) for p in out.rglob("*") if p.name != ".lock")
    assert after == before  # refused: nothing removed, still resumable
    finished = (out / "metrics.csv").read_text()
    assert cli.main([*run, "--resume"]) == 0  # finished: restored, the same rows
    assert (out / "metrics.csv").read_text() == finished
    mine = tmp_path / "mine"  # a folder of the user's own, no run's results in it
    (mine / "tensorboard" / "fedavg").mkdir(parents=True)
    (mine / "tensorboard" / "fedavg" / "keep.txt").write_text("mine")
    (mine / "curves_paper.png").write_bytes(b"mine")
    assert cli.main([*run[:-4], "--out", str(mine), "--overwrite"]) == 0
    assert (mine / "tensorboard" / "fedavg" / "keep.txt").exists()
    assert (mine / "curves_paper.png").read_bytes() == b"mine"
    capsys.readouterr()


def test_a_resumed_sweep_checks_every_started_panel_before_compute(tmp_path, capsys):
    run = ["run", "--set", "rounds=4", "--set", "eval_every=2", "--set", "algorithms=fedavg",
           "--no-progress", "--out", str(tmp_path / "s")]
    assert cli.main([*run, "--sweep", "lr=0.05,0.2"]) == 0
    tables = {name: (tmp_path / "s" / name).read_text()
              for name in ("metrics.csv", "summary.json")}
    assert cli.main([*run, "--sweep", "lr=0.01,0.05,0.2", "--set", "local_steps=5",
                     "--resume"]) == 2
    assert "different settings: local_steps" in capsys.readouterr().err
    assert not (tmp_path / "s" / "lr_0.01").exists()  # nothing trained
    assert all((tmp_path / "s" / name).read_text() == text for name, text in tables.items())
    assert cli.main([*run, "--sweep", "lr=0.01,0.05,0.2", "--resume"]) == 0  # a new point
    rows = _csv(tmp_path / "s" / "metrics.csv")
    assert [r["lr"] for r in rows if r["round"] == "0"] == ["0.01", "0.05", "0.2"]
    capsys.readouterr()


def test_the_resume_command_of_an_interrupted_sweep_repeats_the_sweep(monkeypatch, capsys,
                                                                       tmp_path):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(experiments, "run_sweep", interrupted)
    assert cli.main(["run", "--sweep", "lr=0.05,0.2", "--sweep", "E=5,10", "--best",
                     "final_train_loss", "--out", str(tmp_path / "s")]) == 130
    command = capsys.readouterr().err.strip().splitlines()[-1].strip()
    assert command == (f"fedjax-avail run digits-diurnal --sweep lr=0.05,0.2 --sweep E=5,10 "
                       f"--best final_train_loss --out {tmp_path / 's'} --resume")


def test_compare_tells_a_sweeps_settings_apart_among_several_runs(tmp_path):
    rows = [{"setting": f"lr={lr}", "lr": lr, "algorithm": "fedavg", "round": r,
             "train_loss": lr * (r + 1)} for lr in (0.1, 0.2) for r in range(3)]
    (tmp_path / "s").mkdir()
    History(rows).to_csv(tmp_path / "s" / "metrics.csv")
    (tmp_path / "p").mkdir()
    History([{"algorithm": "fedavg", "round": r, "train_loss": 1.0} for r in range(3)]).to_csv(
        tmp_path / "p" / "metrics.csv")
    figure = experiments.compare_runs([tmp_path / "s", tmp_path / "p"], tmp_path / "c.png")
    styles = [(line.get_label(), line.get_color(), line.get_linestyle())
              for line in figure.axes[0].get_lines()]
    assert len({(colour, style) for _, colour, style in styles}) == 3, styles


def test_a_dry_run_lists_the_parts_fields(capsys):
    assert cli.main(["run", "--dry-run", "--set", "fedlaavg.local_steps=3"]) == 0
    out = capsys.readouterr().out
    assert "  fedavg.client_lr = 0.05\n      a finite number > 0; " in out
    assert "  fedlaavg.local_steps = 3\n" in out and "  availability.period = 20\n" in out


def test_the_best_lines_name_each_algorithms_best_or_say_there_is_none():
    rows = [{"algorithm": "fedavg", "setting": "lr=0.1", "best": False, "score": None},
            {"algorithm": "sequential", "setting": "lr=0.1", "best": True, "score": -5.0},
            {"algorithm": "sequential", "setting": "lr=0.2", "best": True, "score": -5.0}]
    assert experiments.best_lines(rows, "time_to=0.9") == [
        "best for fedavg by time_to=0.9: none (no point reached the target)",
        "best for sequential by time_to=0.9: lr=0.1 (5)",
        "best for sequential by time_to=0.9: lr=0.2 (5)"]


@pytest.mark.slow  # over 6 s
def test_real_valued_points_of_a_sweep_share_one_program(tmp_path, monkeypatch):
    grid = experiments.with_grid(experiments.DEFAULT, {"lr": [0.05, 0.2],
                                                      "fedlaavg.local_steps": [2, 5]})
    groups = experiments.programs(grid, experiments.sweep_settings(grid, SMALL))
    assert groups == [["lr=0.05, fedlaavg.local_steps=2", "lr=0.2, fedlaavg.local_steps=2"],
                      ["lr=0.05, fedlaavg.local_steps=5", "lr=0.2, fedlaavg.local_steps=5"]]
    # an integer of the availability process is a program of its own, a real field is not
    grid = experiments.with_grid(experiments.DEFAULT, {"E": [5, 10], "fedavg.mu": [0.0, 1.0]})
    assert [len(g) for g in experiments.programs(grid, experiments.sweep_settings(grid, {}))
            ] == [2, 2]
    # one simulate call per algorithm for three learning rates; each point as its own run
    calls = []
    simulate = experiments._run.simulate
    monkeypatch.setattr(experiments._run, "simulate",
                        lambda *a, **k: calls.append(k["seed"]) or simulate(*a, **k))
    settings = {**SMALL, "algorithms": ("fedavg",)}
    grid = experiments.with_grid(experiments.DEFAULT, {"lr": [0.02, 0.2],
                                                      "fedavg.mu": [0.0, 0.5]})
    together = experiments.run_sweep(grid, settings, tmp_path / "t", progress=False)
    assert calls == [[0, 0, 0, 0]]
    experiments.run_sweep(grid, settings, tmp_path / "s", progress=False, together=False)
    assert calls[1:] == [0, 0, 0, 0]
    assert _csv(tmp_path / "t" / "metrics.csv") == _csv(tmp_path / "s" / "metrics.csv")
    for label in together:
        folder = label.replace("=", "_").replace(", ", "__")
        assert (_csv(tmp_path / "t" / folder / "metrics.csv")
                == _csv(tmp_path / "s" / folder / "metrics.csv")), label
    seconds = {o.summary[0]["compile_seconds"] for o in together.values()}
    assert len(seconds) == 1  # one compilation, the program's


def test_points_that_cannot_share_a_program_are_refused_naming_why(mnist):
    with pytest.raises(ValueError, match=r"cannot share one compiled program: setting "
                                         r"local_steps differs \(2, 5\)"):
        experiments.run_together(experiments.DEFAULT, [{"local_steps": 2}, {"local_steps": 5}],
                                 [None, None], progress=False)
    # a real-valued setting that feeds a field one program cannot vary: the job durations
    points = [{"speed_sigma": s, "data_dir": str(MNIST_DIR)} for s in (0.5, 1.0)]
    with pytest.raises(ValueError, match="fedavg: algorithm runs differ in durations"):
        experiments.run_together(experiments.get("async-mnist"), points, [None, None],
                                 progress=False)
    grid = experiments.with_grid(experiments.get("async-mnist"), {"speed_sigma": [0.5, 1.0],
                                                                 "p_on": [0.05, 0.1]})
    panels = experiments.sweep_settings(grid, {"data_dir": str(MNIST_DIR)})
    assert [[panels[label]["speed_sigma"] for label in group]
            for group in experiments.programs(grid, panels)] == [[0.5, 0.5], [1.0, 1.0]]


def test_a_diverging_point_of_a_shared_program_ends_as_its_own_run(tmp_path):
    # lr = 3e38 overflows the model in round 0; the other point trains on, as it would alone
    settings = {"rounds": 10, "eval_every": 5, "algorithms": ("fedavg",)}
    grid = experiments.with_grid(experiments.DEFAULT, {"lr": [0.05, 3e38]})
    outcomes = experiments.run_sweep(grid, settings, tmp_path / "t", progress=False)
    ok, bad = (outcomes[label].summary[0] for label in ("lr=0.05", "lr=3e+38"))
    assert ok["status"] == "ok" and ok["rounds_done"] == 10
    alone = experiments.run(experiments.DEFAULT, {**settings, "lr": 3e38}, tmp_path / "a",
                            progress=False)
    mine = alone.summary[0]
    assert bad["status"].startswith("diverged: ") and mine["status"].startswith("diverged: ")
    assert bad["stopped_at_round"] == mine["stopped_at_round"] == 0
    assert (_csv(tmp_path / "t" / "lr_3e_38" / "metrics.csv")
            == _csv(tmp_path / "a" / "metrics.csv"))


@pytest.mark.slow  # over 6 s
def test_a_shared_program_resumes_as_it_started(tmp_path, capsys):
    base = ["run", "--set", "algorithms=fedavg", "--set", "eval_every=3", "--no-progress",
            "--sweep", "lr=0.05,0.2"]
    assert cli.main([*base, "--set", "rounds=3", "--out", str(tmp_path / "r")]) == 0
    assert cli.main([*base, "--set", "rounds=6", "--out", str(tmp_path / "r"),
                     "--resume"]) == 0  # more rounds: both points continue from round 3
    assert cli.main([*base, "--set", "rounds=6", "--out", str(tmp_path / "f")]) == 0
    for point in ("lr_0.05", "lr_0.2"):
        assert (_csv(tmp_path / "r" / point / "metrics.csv")
                == _csv(tmp_path / "f" / point / "metrics.csv"))
    # resumed as it started, whatever --separate-programs says; a new point runs on its own
    assert cli.main([*base[:-1], "lr=0.05,0.2,0.5", "--set", "rounds=9", "--out",
                     str(tmp_path / "r"), "--resume", "--separate-programs"]) == 0
    settings = json.loads((tmp_path / "r" / "lr_0.05" / "checkpoints" / "settings.json"
                           ).read_text())
    assert settings["program"] == ["lr_0.05", "lr_0.2"]
    assert "program" not in json.loads((tmp_path / "r" / "lr_0.5" / "checkpoints" /
                                        "settings.json").read_text())
    capsys.readouterr()
    (tmp_path / "r" / "lr_0.2" / "checkpoints" / "settings.json").unlink()
    assert cli.main([*base, "--set", "rounds=9", "--out", str(tmp_path / "r"), "--resume"]
                    ) == 2
    assert "run as one program, but only lr=0.05 started" in capsys.readouterr().err


@pytest.mark.slow  # over 6 s
def test_a_stalled_point_is_recorded_and_the_others_run_on(mnist, tmp_path):
    # p_on ~ 0, p_off = 1: no client is ever available, FedBuff's first update never comes
    settings = {"algorithms": ("fedbuff",), "num_clients": 20, "rounds": 6, "eval_every": 3,
                "p_off": 1.0, "clients_per_round": 2, "concurrency": 4, "data_dir": str(MNIST_DIR)}
    grid = experiments.with_grid(experiments.get("async-mnist"), {"p_on": [1e-9, 0.5]})
    outcomes = experiments.run_sweep(grid, settings, tmp_path / "t", progress=False)
    stalled, ok = (outcomes[label].summary[0] for label in ("p_on=1e-09", "p_on=0.5"))
    assert stalled["status"].startswith("stalled: ") and stalled["stopped_at_round"] == 0
    assert ok["status"] == "ok" and ok["rounds_done"] == 6
    alone = experiments.run(experiments.get("async-mnist"), {**settings, "p_on": 1e-9},
                            tmp_path / "a", progress=False).summary[0]
    assert alone["status"].startswith("stalled: the asynchronous run stalled: update 0")
    assert (_csv(tmp_path / "t" / "p_on_1e-09" / "metrics.csv")
            == _csv(tmp_path / "a" / "metrics.csv"))


def _declared(experiment):
    """Every Setting of an experiment's declared parts, walked here on its own."""
    def walk(p):
        for value in p.fields.values():
            if isinstance(value, experiments.Part):
                yield from walk(value)
            elif isinstance(value, experiments.Setting):
                yield value

    return [s for p in experiment.parts.values() for s in walk(p)]


@pytest.mark.parametrize("name", OFFLINE)
def test_every_experiment_declares_its_algorithms_as_parts_fed_by_its_settings(name, mnist):
    experiment = experiments.get(name)
    assert experiment.parts
    assert experiment.all_choices()["algorithms"] == tuple(experiment.parts)
    # every setting a part reads exists, or the part says what it is without it
    assert {s.name for s in _declared(experiment) if s.read is None and not s.has_default
            } <= set(experiment.defaults), name
    # every declared algorithm builds under the defaults, a setting's value reaching its field
    data = {"data_dir": str(MNIST_DIR)} if "data_dir" in experiment.defaults else {}
    config = experiment.config({**data, "algorithms": tuple(experiment.parts)})
    built = experiment.setup(config).algorithms
    for part_name, declared in experiment.parts.items():
        for field, source in declared.fields.items():
            if (isinstance(source, experiments.Setting) and source.read is None
                    and source.name in config):
                assert getattr(built[part_name], field) == config[source.name], (part_name,
                                                                                  field)


def test_a_short_setting_is_checked_by_every_field_it_feeds(capsys):
    feeds = _parts.feeds(experiments.DEFAULT.parts)
    assert {owner.__name__ for owner, field in feeds["lr"]} >= {"FedAvg", "FedLaAvg",
                                                                 "SequentialSGD"}
    assert ("client_lr" in {f for _, f in feeds["lr"]} and "lr" in {f for _, f in feeds["lr"]})
    assert cli.main(["run", "--set", "local_steps=0", "--dry-run"]) == 2
    assert ("setting local_steps must be an integer >= 1, got 0"
            in capsys.readouterr().err)
    # read through a function: checked as the field it stands for (K from beta, speeds)
    assert cli.main(["run", "--set", "clients_per_round=0", "--dry-run"]) == 2
    assert "setting clients_per_round must be an integer >= 1" in capsys.readouterr().err
    assert cli.main(["run", "async-mnist", "--set", "speed_sigma=-1", "--dry-run"]) == 2
    assert "setting speed_sigma must be a finite number >= 0" in capsys.readouterr().err


def test_help_lists_every_algorithms_fields_without_loading_data(capsys, monkeypatch):
    monkeypatch.delenv("FEDJAX_AVAIL_MNIST_DIR", raising=False)
    def refuse(config):
        raise AssertionError("--help loaded the data")

    monkeypatch.setattr(experiments._async, "load_mnist_for", refuse)
    assert cli.main(["run", "async-mnist", "--help"]) == 0
    out = capsys.readouterr().out
    for line in ("fedbuff.history = 256\n", "fedbuff.client_lr <- lr\n",
                 "fedbuff.buffer_size <- clients_per_round\n",
                 "fedbuff.durations.speed <- speed_sigma: each client's speed factor",
                 "fedasync.mixing = 0.6\n#       a finite number in (0, 1]; alpha"):
        assert f"#   {line}" in out, line


def test_every_setting_of_every_experiment_is_checked_by_an_annotation_or_its_choices():
    from fedjax_avail.experiments import _settings

    for name, experiment in experiments.REGISTRY.items():
        own = experiment.base if isinstance(experiment, experiments.Sweep) else experiment
        fed = _parts.feeds(own.parts)
        unchecked = [key for key in own.defaults if key not in _settings.SETTINGS
                     and key not in fed and key not in own.all_choices()]
        assert not unchecked, (name, unchecked)
    with pytest.raises(ValueError, match=r"setting data_dir must be None or a path, got ''"):
        experiments.get("fedlaavg-mnist").config({"data_dir": ""})
    with pytest.raises(ValueError, match=r"part\(FedProx\): no field 'client_lrr'; its fields"):
        experiments.part(experiments._fedlaavg.algorithms.FedProx,
                         client_lrr=experiments.Setting("lr"))
