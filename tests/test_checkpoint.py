"""Checkpoint and resume (issue 6, section 4): a resumed run is bit-identical to an uninterrupted
one, after a SIGKILL, an incomplete checkpoint or Ctrl-C."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import fedjax_avail as fa
from fedjax_avail import cli

REPO = Path(__file__).resolve().parents[1]


def _setup():
    train, test = fa.data.load_digits()
    fd = fa.data.one_label_per_client(train["x"], train["y"], 30, seed=0)
    task = fa.tasks.logistic_regression(64, 10)
    alg = fa.algorithms.FedLaAvg(clients_per_round=5, local_steps=3, batch_size=4, client_lr=0.1)
    return task, fd, alg, fa.availability.Markov(0.2, 0.3), test


def _run(rounds, checkpoint_dir=None, every=10, keep=2, seconds=0.0, callbacks=(), **kw):
    """The small run, checkpointed into ``checkpoint_dir`` every ``every`` rounds."""
    task, fd, alg, process, test = _setup()
    checkpoints = [] if checkpoint_dir is None else [
        fa.callbacks.Checkpointing(checkpoint_dir, every=every, keep=keep, seconds=seconds)]
    return fa.simulate(task, fd, alg, process, rounds=rounds, seed=3, eval_every=10,
                       test_data=test, callbacks=[*callbacks, *checkpoints], **kw)


def _assert_same(a, b):
    np.testing.assert_array_equal(ravel_pytree(a.params)[0], ravel_pytree(b.params)[0])
    np.testing.assert_array_equal(a.state.latest, b.state.latest)
    assert a.history.rows == b.history.rows
    assert a.round_metrics.keys() == b.round_metrics.keys()
    for k in a.round_metrics:
        np.testing.assert_array_equal(a.round_metrics[k], b.round_metrics[k])


@pytest.fixture(scope="module")
def uninterrupted():
    return _run(120)


@pytest.mark.slow
def test_a_run_continued_from_its_checkpoint_is_bit_identical(uninterrupted, tmp_path):
    first = _run(50, checkpoint_dir=tmp_path, every=25)
    assert first.history["round"].tolist() == [0, 10, 20, 30, 40, 50]
    resumed = _run(120, checkpoint_dir=tmp_path, every=25)
    _assert_same(resumed, uninterrupted)
    again = _run(120, checkpoint_dir=tmp_path)  # finished: restored, nothing to run
    _assert_same(again, uninterrupted)
    assert again.timing["run"] == 0.0


_KILLED_RUN = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    import fedjax_avail.checkpoint as ck
    from test_checkpoint import _run

    save = ck.RunCheckpointer.save
    def slow_save(self, done, *args):
        save(self, done, *args)
        print("saved", done, flush=True)
        time.sleep(0.25)
    ck.RunCheckpointer.save = slow_save
    _run(120, checkpoint_dir={directory!r}, every=10)
    print("finished", flush=True)
""")


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_is_bit_identical(uninterrupted, tmp_path):
    script = _KILLED_RUN.format(tests=str(REPO / "tests"), directory=str(tmp_path))
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    try:
        for line in process.stdout:
            if line.startswith("saved") and int(line.split()[1]) >= 50:
                process.send_signal(signal.SIGKILL)
                break
        process.wait(timeout=60)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGKILL
    saved = sorted(int(p.name) for p in tmp_path.iterdir() if p.name.isdigit())
    assert 50 <= saved[-1] < 120  # killed mid-way
    _assert_same(_run(120, checkpoint_dir=tmp_path, every=10), uninterrupted)


def test_an_unreadable_newest_checkpoint_falls_back_to_the_one_before(uninterrupted, tmp_path):
    _run(40, checkpoint_dir=tmp_path, every=20)
    shutil.rmtree(tmp_path / "40" / "carry")  # complete on disk once, then damaged
    with pytest.warns(UserWarning, match="round 40 .* damaged"):
        resumed = _run(120, checkpoint_dir=tmp_path, every=20)
    _assert_same(resumed, uninterrupted)


def test_a_checkpoint_of_another_run_is_refused(tmp_path):
    _run(10, checkpoint_dir=tmp_path)
    task, fd, alg, process, _ = _setup()
    with pytest.raises(ValueError, match=r"holds a checkpoint \(round 10\) of a different run"):
        fa.simulate(task, fd, alg, process, rounds=20, seed=4, eval_every=10,
                    checkpoint_dir=tmp_path)


@pytest.mark.slow
def test_ctrl_c_writes_what_finished_and_prints_the_resume_command(tmp_path):
    out = tmp_path / "run"
    # --devices is in the checkpoint's fingerprint (1: mesh=None, the default "auto"): the
    # printed command must repeat it for the resume to be accepted
    argv = ["run", "--set", "rounds=300", "--set", "eval_every=10", "--out", str(out),
            "--checkpoint-every", "10", "--no-progress", "--devices", "1"]
    # A shell's background job inherits SIGINT ignored (and the run then, rightly, ignores
    # Ctrl-C): the child takes Python's default handler, as a user's foreground run has.
    child = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler)"
             "; sys.argv[0] = 'fedjax-avail'; runpy.run_module('fedjax_avail.cli', "
             "run_name='__main__')")
    process = subprocess.Popen([sys.executable, "-c", child, *argv],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    first = out / "checkpoints" / "fedavg"
    while time.time() < deadline and not (first.exists() and any(
            p.name.isdigit() for p in first.iterdir())):
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "interrupted after round" in err and "Resume with:" in err
    command = err.strip().splitlines()[-1].split()
    assert command[:2] == ["fedjax-avail", "run"] and command[-1] == "--resume"
    assert command[command.index("--devices") + 1] == "1"
    assert (out / "summary.json").exists() and (out / "metrics.csv").exists()
    assert cli.main(command[1:]) == 0  # resume, as printed
    fresh = tmp_path / "fresh"
    assert cli.main(["run", "--set", "rounds=300", "--set", "eval_every=10", "--out",
                     str(fresh), "--no-progress"]) == 0
    assert (out / "metrics.csv").read_text() == (fresh / "metrics.csv").read_text()


def _ctrl_c_in_the_first_chunk(monkeypatch):
    """Makes every run see a Ctrl-C asked while its first chunk runs."""
    from fedjax_avail.callbacks import _interrupt

    class Requested(_interrupt.StopOnInterrupt):
        def __enter__(self):
            self.requested = True
            return self

    monkeypatch.setattr(_interrupt, "StopOnInterrupt", Requested)


def test_ctrl_c_in_the_library_keeps_the_history(monkeypatch, tmp_path):
    _ctrl_c_in_the_first_chunk(monkeypatch)
    with pytest.raises(fa.Interrupted, match="interrupted after round 10 of 120") as info:
        _run(120, checkpoint_dir=tmp_path)
    assert info.value.result.history["round"].tolist() == [0, 10]
    assert info.value.result.stopped == "interrupted"
    assert info.value.checkpoint_dir == tmp_path.resolve()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.isdigit()) == ["10"]
    assert os.path.isdir(tmp_path / "10")


def test_resuming_with_fewer_rounds_is_refused(tmp_path):
    _run(30, checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="after 30 rounds, more than rounds=20"):
        _run(20, checkpoint_dir=tmp_path)


@pytest.mark.slow
def test_extending_a_run_that_ended_off_the_eval_schedule(tmp_path):
    # The 35-round run's last row (round 35) is not on the eval_every=10 schedule of the longer
    # run, which has rows at 30 and 40 only.
    _run(35, checkpoint_dir=tmp_path)
    extended = _run(60, checkpoint_dir=tmp_path)
    assert extended.history["round"].tolist() == [0, 10, 20, 30, 40, 50, 60]
    _assert_same(extended, _run(60))


def test_a_changed_test_set_or_eval_every_is_another_run(tmp_path):
    task, fd, alg, process, test = _setup()
    fa.simulate(task, fd, alg, process, rounds=10, seed=3, eval_every=10, test_data=test,
                checkpoint_dir=tmp_path)
    other = {"x": test["x"][:50], "y": test["y"][:50]}
    for changes in (dict(test_data=other, eval_every=10), dict(test_data=test, eval_every=5)):
        with pytest.raises(ValueError, match="of a different run"):
            fa.simulate(task, fd, alg, process, rounds=20, seed=3, checkpoint_dir=tmp_path,
                        **changes)


def test_a_write_killed_half_way_is_ignored(uninterrupted, tmp_path):
    _run(40, checkpoint_dir=tmp_path, every=20)
    # What orbax leaves when killed while writing step 60: a temporary directory, never renamed.
    partial = tmp_path / "60.orbax-checkpoint-tmp-1234567890"
    shutil.copytree(tmp_path / "40", partial)
    shutil.rmtree(partial / "carry")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = _run(120, checkpoint_dir=tmp_path, every=20)
    # ignored, not taken for a damaged checkpoint (which would warn and fall back)
    assert not [w for w in caught if issubclass(w.category, UserWarning)], caught
    _assert_same(resumed, uninterrupted)


def test_checkpoint_seconds_skips_saves_due_too_soon_but_never_the_last_or_a_stop(
        tmp_path, monkeypatch):
    """A save costs ~70 ms whatever the model, so ``checkpoint_seconds`` skips a save due
    sooner than that after the run's start or the last save: with the clock at one second a
    round, saves due every 10 rounds at least 25 s apart fall at rounds 30 and 60 (the last);
    a stopped run is saved where it stopped. 0 saves every ``checkpoint_every`` rounds."""
    from fedjax_avail import engine
    from fedjax_avail.callbacks import _cadence

    clock = [0.0]
    for module in (_cadence, engine):  # the cadence's clock
        monkeypatch.setattr(module, "time", type("Clock", (), {
            "perf_counter": staticmethod(lambda: clock[0])}))

    class Tick(fa.callbacks.Callback):  # listed before Checkpointing, which runs last
        def on_run_start(self, run):
            clock[0] = 0.0

        def on_chunk_end(self, run, metrics):
            clock[0] = float(run.done)

    class StopAt20(fa.callbacks.Callback):
        def on_chunk_end(self, run, metrics):
            if run.done == 20:
                run.stop("enough")

    def saved(name, seconds, *callbacks):
        _run(60, checkpoint_dir=tmp_path / name, every=10, keep=10, seconds=seconds,
             callbacks=[Tick(), *callbacks])
        return sorted(int(p.name) for p in (tmp_path / name).iterdir() if p.name.isdigit())

    assert saved("every", 0) == [10, 20, 30, 40, 50, 60]
    assert saved("floor", 25) == [30, 60]
    assert saved("stopped", 3600, StopAt20()) == [20]
    with pytest.raises(ValueError, match="checkpoint_seconds must be .*>= 0.*-1"):
        _run(10, checkpoint_dir=tmp_path / "bad", seconds=-1)


def test_the_fingerprint_is_taken_only_when_a_checkpoint_asks(monkeypatch, tmp_path):
    # it hashes the data (0.73 s for pfl's CIFAR-10 shape): a run without checkpoints skips it
    from fedjax_avail import plan

    taken = []
    monkeypatch.setattr(plan, "run_settings", lambda **s: taken.append(sorted(s)) or {})
    _run(2)
    assert taken == []
    _run(2, checkpoint_dir=tmp_path, every=1)
    assert len(taken) == 1 and "data" in taken[0] and "algorithm" in taken[0]


def _diverging(client_lrs, seed=0):
    """Linear regression on 20 clients; client_lr 0.6 diverges by round 20, 0.05 does not."""
    rng = np.random.default_rng(0)
    clients = []
    for i in range(20):
        x = rng.normal(size=(12 + i % 3, 8)).astype(np.float32)
        clients.append({"x": x, "y": (x[:, 0] > 0).astype(np.float32)})
    task = fa.Task(init=lambda key: np.zeros(8, np.float32),
                   loss=lambda w, b: ((b["x"] @ w - b["y"]) ** 2).mean())
    algorithms = [fa.algorithms.FedAvg(clients_per_round=5, local_steps=5, batch_size=4,
                                       client_lr=lr) for lr in client_lrs]
    return lambda: fa.simulate(task, fa.FederatedData.from_client_arrays(clients),
                               algorithms if len(algorithms) > 1 else algorithms[0],
                               fa.availability.Bernoulli(0.7), rounds=60, eval_every=20,
                               seed=seed)


def test_a_divergence_is_not_hidden_by_a_ctrl_c_in_the_same_chunk(monkeypatch):
    # Before, the Ctrl-C's stop came first and held: Interrupted, with a NaN history row.
    _ctrl_c_in_the_first_chunk(monkeypatch)
    with pytest.raises(fa.DivergenceError) as info:
        _diverging([0.6])()
    assert info.value.result.stopped == "diverged"


def test_runs_that_finished_are_not_marked_stopped_by_another_runs_divergence():
    with pytest.raises(fa.DivergenceError) as info:
        _diverging([0.05, 0.6, 0.05], seed=[0, 1, 2])()
    assert [r.stopped for r in info.value.result] == [None, "diverged", None]
    assert [int(r.history["round"][-1]) for r in info.value.result] == [60, 60, 60]
