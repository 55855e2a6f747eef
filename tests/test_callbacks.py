"""The engine as a loop with callbacks (issue 15): hook order, early stop, live outputs,
optional dependencies checked first, the "compiling" display, checkpoint housekeeping."""

import dataclasses
import re
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from test_checkpoint import _setup  # the same small run

import fedjax_avail as fa
from fedjax_avail import experiments


def _run(rounds, **kw):
    task, fd, alg, process, test = _setup()
    kw = {"eval_every": 5, "seed": 3, **kw}
    return fa.simulate(task, fd, alg, process, rounds=rounds, test_data=test, **kw)


class Recorder(fa.callbacks.Callback):
    """Writes every hook call into a shared log as (name, hook, rounds done)."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def on_run_start(self, run):
        self.log.append((self.name, "start", run.done))

    def on_evaluation(self, run, rows):
        assert [row["round"] for row in rows] == [run.done]
        self.log.append((self.name, "evaluation", run.done))

    def on_chunk_end(self, run, metrics):
        self.log.append((self.name, "chunk", run.done, len(metrics["num_available"])))

    def on_run_end(self, run):
        self.log.append((self.name, "end", run.done, run.error))


@pytest.mark.slow
def test_hooks_come_in_order_at_every_chunk_boundary(tmp_path):
    log = []
    _run(12, callbacks=[Recorder("a", log), Recorder("b", log),
                        fa.callbacks.Checkpointing(tmp_path, every=4)])
    # chunks end at the evaluations (5, 10, 12) and the checkpoints (4, 8, 12); at each
    # boundary the callbacks see the chunk, then the evaluation due there
    expected = [("start", 0), ("evaluation", 0), ("chunk", 4, 4), ("chunk", 5, 1),
                ("evaluation", 5), ("chunk", 8, 3), ("chunk", 10, 2), ("evaluation", 10),
                ("chunk", 12, 2), ("evaluation", 12), ("end", 12, None)]
    assert log == [(name, *call) for call in expected for name in "ab"]


@pytest.mark.slow
def test_a_callback_stops_the_run_at_a_target_keeping_the_history(tmp_path):
    class StopAtTarget(fa.callbacks.Callback):
        def on_evaluation(self, run, rows):
            if rows[0]["test_accuracy"] >= 0.5:
                run.stop("reached 50% test accuracy")

    stopped = _run(200, callbacks=[StopAtTarget(),
                                   fa.callbacks.Checkpointing(tmp_path, every=100)])
    done = int(stopped.history["round"][-1])
    assert 0 < done < 200 and stopped.stopped == "reached 50% test accuracy"
    assert stopped.history["test_accuracy"][-1] >= 0.5 > stopped.history["test_accuracy"][-2]
    assert len(stopped.round_metrics["num_available"]) == done
    plain = _run(done)  # the same rounds without the callback: the same numbers
    assert plain.history.rows == stopped.history.rows and plain.stopped is None
    np.testing.assert_array_equal(ravel_pytree(plain.params)[0],
                                  ravel_pytree(stopped.params)[0])
    # the stop was checkpointed (off the every-100 schedule): the run continues from it
    assert str(done) in {p.name for p in tmp_path.iterdir()}
    continued = _run(200, checkpoint_dir=tmp_path)
    assert continued.history.rows == _run(200).history.rows


def test_a_stop_asked_after_a_chunk_ends_the_run_there():
    class StopAfter(fa.callbacks.Callback):
        def on_chunk_end(self, run, metrics):
            if run.done >= 7:
                run.stop("enough")

    result = _run(30, eval_every=7, callbacks=[StopAfter()])
    assert result.history["round"].tolist() == [0, 7] and result.stopped == "enough"


def test_metrics_csv_is_current_at_every_evaluation_while_the_run_goes_on(tmp_path):
    path, seen = tmp_path / "not_yet" / "live.csv", []  # its directory is made

    class ReadBack(fa.callbacks.Callback):  # listed after the logger: sees what it wrote
        def on_evaluation(self, run, rows):
            text = path.read_text().splitlines()
            seen.append((run.done, len(text) - 1, text[-1].split(",")[:2]))

    result = _run(15, seed=[0, 1], callbacks=[
        fa.callbacks.CSVLogger(path, {"algorithm": "fedlaavg"}), ReadBack()])
    # two seeds: two rows per evaluation, each naming its algorithm and seed
    assert seen == [(0, 2, ["fedlaavg", "1"]), (5, 4, ["fedlaavg", "1"]),
                    (10, 6, ["fedlaavg", "1"]), (15, 8, ["fedlaavg", "1"])]
    assert path.read_text().splitlines()[0].startswith("algorithm,seed,round,")
    assert len(result) == 2


def test_metrics_csv_written_a_row_at_a_time_is_the_whole_historys_csv(tmp_path):
    """The logger formats each new row once; the file must still be what formatting every row
    gives: when later rows bring columns (a later run's first), when histories are replaced
    (shorter, as long with other values, more of them) and when the logger serves a new call."""
    path = tmp_path / "m.csv"
    preceding = [{"algorithm": "fedavg", "round": 0, "train_loss": 2.5}]
    logger = fa.callbacks.CSVLogger(path, {"algorithm": "mifa"}, preceding)
    run = fa.Run(rounds=9, seeds=[0, 1], several=True, desc=None, carry=None,
                 histories=[fa.History(), fa.History()])

    def expected():
        rows = list(preceding)
        for seed, history in zip(run.seeds, run.histories, strict=True):
            rows += [{"algorithm": "mifa", "seed": seed, **row} for row in history]
        return fa.History(rows).to_csv()

    def check(note):
        logger.on_evaluation(run, [])
        assert path.read_text() == expected(), note

    for done in (0, 3, 6, 9):
        for i, history in enumerate(run.histories):
            row = {"round": done, "train_loss": 1.0 / (done + 1) + i}
            if done >= 3 and i == 1:
                row["b"] = 0.5  # a column of the second run's first ...
            if done >= 6 and i == 0:
                row["a"] = 0.125 * done  # ... then one of the first run's: a goes before b
            history.append(row)
        check(done)
    assert path.read_text().splitlines()[0] == "algorithm,round,train_loss,seed,a,b"
    run.histories = [fa.History(h.rows[:2]) for h in run.histories]
    check("shorter")
    run.histories = [fa.History([{**row, "train_loss": 7.0} for row in h]) for h in
                     run.histories]
    check("as long, other values")
    run.seeds, run.histories = [0, 1, 2], [*run.histories, fa.History([{"round": 0}])]
    check("one run more")
    logger.on_run_start(run)  # the logger in a new call: a fresh history as long as before
    run.histories[0].rows[:] = [{"round": 0, "train_loss": 3.0}, {"round": 3}]
    check("a new call")


def _scalars(directory):
    """(tag, step, value) of every scalar in a directory's TensorBoard event files: TFRecord
    framing (length, its CRC, the Event proto, its CRC) read by hand."""
    from tensorboardX.proto import event_pb2

    out = []
    for events in sorted(directory.glob("events.out.tfevents.*")):
        data = events.read_bytes()
        at = 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at:at + 8])
            event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
            at += 12 + length + 4
            out += [(v.tag, event.step, v.simple_value) for v in event.summary.value]
    return out


def test_tensorboard_events_are_written_at_every_evaluation(tmp_path):
    pytest.importorskip("tensorboardX")
    seen = []

    class ReadBack(fa.callbacks.Callback):
        def on_evaluation(self, run, rows):
            seen.append(sorted({step for tag, step, _ in _scalars(tmp_path)
                                if tag == "train_loss"}))

    result = _run(10, callbacks=[fa.callbacks.TensorBoard(tmp_path), ReadBack()])
    assert seen == [[0], [0, 5], [0, 5, 10]]
    losses = {step: value for tag, step, value in _scalars(tmp_path) if tag == "train_loss"}
    np.testing.assert_allclose([losses[r] for r in (0, 5, 10)], result.history["train_loss"],
                               rtol=1e-6)


def test_a_missing_tensorboardx_is_reported_before_any_compute(monkeypatch, tmp_path):
    for name in [n for n in sys.modules if n.startswith("tensorboardX")] + [
            "tensorboardX", "tensorboardX.event_file_writer", "tensorboardX.proto"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"pip install 'fedjax_avail\[tensorboard\]'"):
        fa.callbacks.TensorBoard(tmp_path)
    built = []
    experiment = dataclasses.replace(experiments.get("digits-diurnal"),
                                     build=lambda config: built.append(config))
    with pytest.raises(ImportError, match="tensorboardX"):
        experiments.run(experiment, {"rounds": 5}, tmp_path / "out", progress=False,
                        tensorboard=True)
    assert built == []  # nothing was loaded or compiled


def test_progress_says_compiling_before_the_first_chunk(capsys):
    _run(10, progress=True, desc="fedlaavg")
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "fedlaavg: compiling (0/10 rounds done)"
    assert lines[-1].startswith("fedlaavg: 10/10 rounds, rounds/s ")


@pytest.mark.slow
def test_no_checkpoint_keep_and_seconds_that_add_up_across_resumes(tmp_path):
    experiment = experiments.get("digits-diurnal")
    settings = {"rounds": 40, "eval_every": 10}
    none = experiments.run(experiment, settings, tmp_path / "none", progress=False,
                           checkpoint=False)
    assert not (tmp_path / "none" / "checkpoints").exists() or not any(
        p.is_dir() for p in (tmp_path / "none" / "checkpoints").iterdir())
    out = tmp_path / "kept"
    options = dict(progress=False, checkpoint_every=10, keep_checkpoints=1)
    experiments.run(experiment, {**settings, "rounds": 20}, out, **options)
    resumed = experiments.run(experiment, settings, out, resume=True, **options)
    for name in none.histories:
        assert sorted(p.name for p in (out / "checkpoints" / name).iterdir()
                      if p.name.isdigit()) == ["40"]
    assert [r["final_train_loss"] for r in resumed.summary] == [
        r["final_train_loss"] for r in none.summary]
    # Resuming the finished run restores it and runs nothing: its seconds are still the
    # whole run's (the invocations before it counted), not the restore's fraction of one.
    again = experiments.run(experiment, settings, out, resume=True, **options)
    for before, after in zip(resumed.summary, again.summary, strict=True):
        assert after["seconds"] >= 0.9 * before["seconds"] > 0


def test_the_guide_callback_example_runs_and_stops_at_its_target(tmp_path, monkeypatch):
    text = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "use.md").read_text()
    block = re.search(r"```python\n(class Log\(fa\.callbacks\.Callback\):.*?)```", text,
                      re.S).group(1)
    logged = []

    class Tracker:
        def log(self, values, step):
            logged.append((step, values))

    task, fd, algorithm, availability, test = _setup()
    monkeypatch.chdir(tmp_path)
    scope = dict(fa=fa, task=task, fd=fd, algorithm=algorithm, availability=availability,
                 test=test, tracker=Tracker())
    exec(block.replace("rounds=2000", "rounds=300"), scope)  # noqa: S102 (the guide's code)
    result = scope["result"]
    assert result.stopped == "reached 85% test accuracy"
    assert [step for step, _ in logged] == result.history["round"].tolist()
    assert logged[-1][1]["seed0/test_accuracy"] >= 0.85
    assert (tmp_path / "live.csv").read_text().count("\n") == len(result.history) + 1


def _quadratic_runs(rounds, callbacks=(), **kw):
    """Two runs in one program, the second diverging (|1 - 2 lr| > 1) in round 21."""
    from fedjax_avail.testing import point_clients, quadratic_task

    algorithms = [fa.algorithms.FedSGD(clients_per_round=2, batch_size=1, client_lr=lr)
                  for lr in (0.1, 5.0)]
    return fa.simulate(quadratic_task(), point_clients(np.arange(6.0)[:, None]), algorithms,
                       fa.availability.AlwaysOn(), rounds=rounds, seed=[0, 1], eval_every=7,
                       callbacks=list(callbacks), **kw)


def test_a_stop_never_hides_a_diverged_seed():
    class StopLate(fa.callbacks.Callback):
        def on_chunk_end(self, run, metrics):
            if run.done >= 56:
                run.stop("enough")

    with pytest.raises(fa.DivergenceError, match=r"run 1 \(seed 1\) in round 21") as info:
        _quadratic_runs(300, [StopLate()])
    assert [r.stopped for r in info.value.result] == ["diverged"] * 2
    assert info.value.result[0].history["round"].tolist()[-1] == 56


def test_resuming_a_finished_run_with_a_diverged_seed_raises_again(tmp_path):
    for _ in range(2):
        with pytest.raises(fa.DivergenceError, match=r"seed 1\) in round 21"):
            _quadratic_runs(70, checkpoint_dir=tmp_path)


def test_a_stop_at_round_zero_runs_no_round():
    class StopAtOnce(fa.callbacks.Callback):
        def on_evaluation(self, run, rows):
            run.stop("nothing to do")

    result = _run(50, callbacks=[StopAtOnce()])
    assert result.history["round"].tolist() == [0] and result.timing["run"] == 0.0
    assert result.stopped == "nothing to do"


def test_a_failing_on_run_end_neither_hides_the_run_s_error_nor_skips_the_others():
    ended = []

    class Broken(fa.callbacks.Callback):
        def on_run_end(self, run):
            raise RuntimeError("broken callback")

    class Tidy(fa.callbacks.Callback):
        def on_run_end(self, run):
            ended.append(type(run.error).__name__)

    with pytest.raises(fa.DivergenceError), pytest.warns(  # the run's own error, and a word
            UserWarning, match="RuntimeError in a callback's on_run_end after the run ended "
                               "with DivergenceError: broken callback"):
        _quadratic_runs(70, [Broken(), Tidy()])
    assert ended == ["DivergenceError"]
    with pytest.raises(RuntimeError, match="broken callback"):  # a clean run: the callback's
        _run(5, callbacks=[Broken(), Tidy()])
    assert ended == ["DivergenceError", "NoneType"]


def test_runs_that_share_a_seed_get_outputs_of_their_own(tmp_path):
    pytest.importorskip("tensorboardX")
    task, fd, _, process, test = _setup()
    algorithms = [fa.algorithms.FedAvg(clients_per_round=5, local_steps=3, batch_size=4,
                                       client_lr=lr) for lr in (0.05, 0.1)]
    fa.simulate(task, fd, algorithms, process, rounds=5, seed=0, eval_every=5, callbacks=[
        fa.callbacks.CSVLogger(tmp_path / "m.csv"), fa.callbacks.TensorBoard(tmp_path / "tb")])
    lines = (tmp_path / "m.csv").read_text().splitlines()
    assert lines[0].startswith("run,seed,round,") and len(lines) == 5
    for i in range(2):
        assert [step for tag, step, _ in _scalars(tmp_path / "tb" / f"run_{i}_seed_0")
                if tag == "train_loss"] == [0, 5]


def test_an_output_that_cannot_be_written_warns_and_the_run_goes_on(tmp_path):
    pytest.importorskip("tensorboardX")
    blocked = tmp_path / "file"
    blocked.write_text("a file where a directory should be")
    with pytest.warns(UserWarning, match="could not write") as warned:
        result = _run(10, checkpoint_dir=tmp_path / "ckpt", callbacks=[
            fa.callbacks.CSVLogger(blocked / "m.csv"), fa.callbacks.TensorBoard(blocked / "tb")])
    assert len(warned) == 2 and result.history["round"].tolist() == [0, 5, 10]
    assert "10" in {p.name for p in (tmp_path / "ckpt").iterdir()}


def test_a_test_set_of_array_likes_scores_as_its_arrays():
    """Test examples that only convert to arrays (``__array__``, a list of labels) are turned
    into one array each before they go to the device, and score as the arrays do."""
    class ArrayLike:
        def __init__(self, array):
            self.array = array

        def __array__(self, dtype=None, copy=None):
            return self.array if dtype is None else self.array.astype(dtype)

        @property
        def shape(self):
            return self.array.shape

    task, fd, alg, process, test = _setup()
    likes = {"x": ArrayLike(test["x"]), "y": test["y"].tolist()}
    runs = [fa.simulate(task, fd, alg, process, rounds=5, seed=3, eval_every=5, test_data=t)
            for t in (test, likes)]
    assert runs[0].history.rows == runs[1].history.rows
