"""Checkpoints that cannot lie and resumes that refuse a changed run (issue 14, sections 1, 4).

* A bit flipped in any file of a checkpoint never changes what is restored: either the
  checkpoint restores exactly as written (the bit was in a file that holds no data), or it is
  skipped with a warning for the one before it, or the restore is refused.
* Every setting in the fingerprint (each ``simulate`` argument or environment fact that can
  change a recorded number) is refused when it changes on resume, by name.
* One run per directory: a second run refuses at once, naming the holder; a dead holder's lock
  is taken over with a notice.
"""

import gc
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import fedjax_avail as fa
from fedjax_avail import experiments, plan
from fedjax_avail.callbacks import _checkpointing
from fedjax_avail.checkpoint import RunCheckpointer
from fedjax_avail.timeline import Timeline

REPO = Path(__file__).resolve().parents[1]
# orbax leaves the TensorStore read error of a damaged file to the garbage collector
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def _setup():
    train, test = fa.data.load_digits()
    fd = fa.data.one_label_per_client(train["x"], train["y"], 30, seed=0)
    task = fa.tasks.logistic_regression(64, 10)
    alg = fa.algorithms.FedLaAvg(clients_per_round=5, local_steps=3, batch_size=4, client_lr=0.1)
    return dict(task=task, data=fd, algorithm=alg, availability=fa.availability.Markov(0.2, 0.3),
                seed=3, eval_every=10, test_data=test)


def _run(rounds, checkpoint_dir=None, checkpoint_every=10, **changes):
    """The small run with ``changes``, its evaluation's options (``eval_every``, ``test_data``,
    ``eval_batch_size``, ``train_eval_examples``) in its Evaluation callback, checkpointed into
    ``checkpoint_dir`` every ``checkpoint_every`` rounds."""
    setup = {**_setup(), **changes}
    callbacks = [fa.callbacks.Evaluation(
        setup.pop("test_data"), setup.pop("eval_every"),
        batch_size=setup.pop("eval_batch_size", 4096),
        train_examples=setup.pop("train_eval_examples", None))]
    if checkpoint_dir is not None:
        callbacks.append(fa.callbacks.Checkpointing(checkpoint_dir, every=checkpoint_every))
    return fa.simulate(**setup, rounds=rounds, callbacks=callbacks)


def _same(a, b):
    np.testing.assert_array_equal(ravel_pytree(a.params)[0], ravel_pytree(b.params)[0])
    np.testing.assert_array_equal(a.state.latest, b.state.latest)
    assert a.history.rows == b.history.rows
    for k in a.round_metrics:
        np.testing.assert_array_equal(a.round_metrics[k], b.round_metrics[k])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A run checkpointed at rounds 20 and 30, its settings as the engine recorded them, and
    what a checkpointer restores from each of the two checkpoints untouched."""
    directory = tmp_path_factory.mktemp("ckpt")
    recorded = {}

    class Spy(RunCheckpointer):
        def __init__(self, path, settings, keep):
            recorded.update(settings)
            super().__init__(path, settings, keep)

    original, _checkpointing.RunCheckpointer = _checkpointing.RunCheckpointer, Spy
    try:
        finished = _run(30, checkpoint_dir=directory, checkpoint_every=10)
    finally:
        _checkpointing.RunCheckpointer = original
    newest = RunCheckpointer(directory, recorded).restore(_abstract(finished))
    assert newest.done == 30
    older = tmp_path_factory.mktemp("older")
    shutil.copytree(directory, older, dirs_exist_ok=True)
    shutil.rmtree(older / "30")
    before = RunCheckpointer(older, recorded).restore(_abstract(finished))
    assert before.done == 20
    return directory, recorded, finished, newest, before


def _abstract(result):
    """The scan carry's shapes: (algorithm state, availability cursor, health flag)."""
    state = jax.eval_shape(lambda: result.state)
    process = fa.availability.Markov(0.2, 0.3)
    avail = jax.eval_shape(lambda: Timeline.start(
        process.init(jax.random.key(0), 30), 30))
    return state, avail, jax.ShapeDtypeStruct((), np.int32)


def _equal(a, b):
    assert a.done == b.done and a.rows == b.rows
    for x, y in zip(jax.tree.leaves(a.carry), jax.tree.leaves(b.carry), strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert a.round_metrics.keys() == b.round_metrics.keys()
    for k in a.round_metrics:
        np.testing.assert_array_equal(a.round_metrics[k], b.round_metrics[k])


def _flip(path: Path, position: int, bit: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 1 << bit
    path.write_bytes(bytes(data))


def test_a_bit_flipped_in_any_file_of_the_newest_checkpoint_never_changes_the_restore(
        saved, tmp_path):
    directory, recorded, finished, newest, before = saved
    files = sorted(p.relative_to(directory) for p in (directory / "30").rglob("*")
                   if p.is_file())
    assert len(files) >= 10  # carry, round metrics and meta, each with orbax's metadata
    rng = np.random.default_rng(0)
    outcomes = {}
    for name in files:
        size = (directory / name).stat().st_size
        for position in sorted({size // 2, int(rng.integers(size))}):
            copy = tmp_path / f"{len(outcomes)}"
            shutil.copytree(directory, copy)
            _flip(copy / name, position, int(rng.integers(8)))
            checkpointer = RunCheckpointer(copy, recorded)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    restored = checkpointer.restore(_abstract(finished))
                except ValueError as refused:
                    assert "no intact checkpoint" in str(refused)
                    outcomes[(str(name), position)] = "refused"
                    continue
            if any("round 30" in str(w.message) and "damaged" in str(w.message)
                   for w in caught):
                _equal(restored, before)
                assert not (copy / "30").exists()  # the damaged one is gone: never used later
                outcomes[(str(name), position)] = "fell back"
            else:  # the bit was in a file that holds no data
                _equal(restored, newest)
                outcomes[(str(name), position)] = "unchanged"
    assert "refused" not in outcomes.values()  # the checkpoint of round 20 is intact
    gc.collect()  # orbax's abandoned reads of the damaged files, while warnings are filtered
    # the arrays' own data files are among those that fall back
    assert any(v == "fell back" and "/d/" in k[0] for k, v in outcomes.items()), outcomes


def test_a_flipped_bit_in_the_largest_file_resumes_to_the_uninterrupted_result(tmp_path):
    uninterrupted = _run(40)
    _run(30, checkpoint_dir=tmp_path, checkpoint_every=10)
    largest = max((p for p in (tmp_path / "30").rglob("*") if p.is_file()),
                  key=lambda p: p.stat().st_size)
    _flip(largest, largest.stat().st_size // 2, 3)
    with pytest.warns(UserWarning, match="round 30 .* damaged .*checksum"):
        resumed = _run(40, checkpoint_dir=tmp_path, checkpoint_every=10)
    _same(resumed, uninterrupted)


def test_no_intact_checkpoint_is_a_refusal(tmp_path):
    _run(20, checkpoint_dir=tmp_path, checkpoint_every=10)
    for step in ("10", "20"):
        largest = max((p for p in (tmp_path / step).rglob("*") if p.is_file()),
                      key=lambda p: p.stat().st_size)
        _flip(largest, largest.stat().st_size // 2, 0)
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="no intact checkpoint"):
        _run(30, checkpoint_dir=tmp_path, checkpoint_every=10)


def _other_task():
    return fa.tasks.mlp(64, (8,), 10)


# One change per fingerprint setting; each is refused naming that setting.
CHANGES = {
    "algorithm": lambda s: {"algorithm": fa.algorithms.FedLaAvg(
        clients_per_round=5, local_steps=3, batch_size=4, client_lr=0.2)},
    "availability": lambda s: {"availability": fa.availability.Markov(0.2, 0.4)},
    "task": lambda s: {"task": _other_task()},
    "model": lambda s: {"task": _other_task()},
    "seed": lambda s: {"seed": 4},
    "eval_every": lambda s: {"eval_every": 5},
    "data": lambda s: {"data": fa.data.one_label_per_client(
        fa.data.load_digits()[0]["x"], fa.data.load_digits()[0]["y"], 30, seed=1)},
    "test_data": lambda s: {"test_data": None},
    "train_eval_examples": lambda s: {"train_eval_examples": 500},
    "eval_batch_size": lambda s: {"eval_batch_size": 128},
    "client_chunk": lambda s: {"client_chunk": 2},
    "mesh": lambda s: {"mesh": jax.sharding.Mesh(np.array(jax.devices()[:1]), ("clients",))},
    "slot_length": lambda s: {"slot_length": 0.5},
    "max_virtual_time": lambda s: {"max_virtual_time": 50.0},
}
ENVIRONMENT = {
    "fedjax_avail_version": "0.0.1",
    "fedjax_avail_source": "0" * 32,
    "jax_version": "0.0.1",
    "backend": "tpu",
    "jax_config": {"jax_default_prng_impl": "rbg"},
}


def test_every_setting_that_can_change_a_number_is_in_the_fingerprint(saved):
    _, recorded, *_ = saved
    assert set(recorded) == set(CHANGES) | set(ENVIRONMENT)


@pytest.mark.parametrize("setting", sorted(CHANGES))
def test_resuming_with_a_changed_setting_is_refused_naming_it(saved, setting, tmp_path):
    directory = saved[0]
    copy = tmp_path / "c"
    shutil.copytree(directory, copy)
    changes = CHANGES[setting](_setup())
    with pytest.raises(ValueError, match=rf"of a different run \(different [^)]*\b{setting}\b"):
        _run(40, checkpoint_dir=copy, checkpoint_every=10, **changes)


@pytest.mark.parametrize("setting", sorted(ENVIRONMENT))
def test_resuming_in_a_changed_environment_is_refused_naming_it(saved, setting, tmp_path,
                                                                monkeypatch):
    directory = saved[0]
    copy = tmp_path / "c"
    shutil.copytree(directory, copy)
    real = plan._environment
    monkeypatch.setattr(plan, "_environment", lambda: {**real(),
                                                        setting: ENVIRONMENT[setting]})
    with pytest.raises(ValueError, match=rf"different \(?[^)]*\b{setting}\b"):
        _run(40, checkpoint_dir=copy, checkpoint_every=10)


def _code(source, commit):
    return {"fedjax_avail_version": fa.__version__, "fedjax_avail_source": source,
            "fedjax_avail_commit": commit}


def test_a_checkpoint_of_other_code_is_refused_naming_the_code_that_wrote_it(tmp_path,
                                                                            monkeypatch):
    from fedjax_avail import _provenance

    monkeypatch.setattr(_provenance, "code", lambda: _code("a" * 32, "c" * 40))
    _run(20, checkpoint_dir=tmp_path, checkpoint_every=10)
    # another commit of the same code (a commit elsewhere in the checkout) is the same code
    monkeypatch.setattr(_provenance, "code", lambda: _code("a" * 32, "d" * 40 + "-dirty"))
    assert _run(25, checkpoint_dir=tmp_path, checkpoint_every=10).history.rows[-1]["round"] == 25
    monkeypatch.setattr(_provenance, "code", lambda: _code("b" * 32, "e" * 40))
    with pytest.raises(ValueError, match=(
            r"holds a checkpoint \(round 25\) written by other code \(different "
            rf"fedjax_avail_source: fedjax_avail {fa.__version__}, source a{{12}}, commit d{{40}}"
            rf"-dirty; this is fedjax_avail {fa.__version__}, source b{{12}}, commit e{{40}}\)"
            r".* continue it with the code that wrote it, or use another directory")) as refusal:
        _run(30, checkpoint_dir=tmp_path, checkpoint_every=10)
    assert "different run" not in str(refusal.value)  # no setting differs
    with pytest.raises(ValueError, match=r"of a different run \(different seed\); .*; it was "
                       r"also written by other code \(different fedjax_avail_source"):
        _run(30, checkpoint_dir=tmp_path, checkpoint_every=10, seed=4)


def test_a_checkpoint_from_before_the_code_was_recorded_is_refused_saying_so(tmp_path,
                                                                             monkeypatch):
    from fedjax_avail import _provenance

    before = {k: v for k, v in plan._environment().items() if not k.startswith("fedjax_avail")}
    monkeypatch.setattr(_provenance, "code", dict)  # what a checkpoint before 2026-11-25 holds
    monkeypatch.setattr(plan, "_environment", lambda: before)
    _run(20, checkpoint_dir=tmp_path, checkpoint_every=10)
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"written by other code \(different "
                       r"fedjax_avail_source, fedjax_avail_version: fedjax_avail from before "
                       r"checkpoints recorded their code"):
        _run(30, checkpoint_dir=tmp_path, checkpoint_every=10)


def test_more_rounds_and_progress_options_are_not_a_different_run(saved, tmp_path):
    directory, *_ = saved
    copy = tmp_path / "c"
    shutil.copytree(directory, copy)
    result = _run(40, checkpoint_dir=copy, checkpoint_every=20, progress=False, desc="x")
    assert result.history.rows[-1]["round"] == 40


def _hold(directory: Path):
    """A child process that holds ``directory``'s lock until killed."""
    script = textwrap.dedent(f"""
        import sys, time
        from fedjax_avail._lock import DirectoryLock
        with DirectoryLock({str(directory)!r}, "checkpoint_dir"):
            print("locked", flush=True)
            time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             cwd=REPO)
    assert child.stdout.readline().strip() == "locked"
    return child


def test_a_second_run_on_a_locked_directory_refuses_at_once_naming_the_holder(tmp_path):
    child = _hold(tmp_path)
    try:
        t0 = time.perf_counter()
        with pytest.raises(fa.DirectoryBusyError, match=rf"in use by another run \(pid "
                                                         rf"{child.pid} "):
            _run(10, checkpoint_dir=tmp_path)
        assert time.perf_counter() - t0 < 5  # before any compute
        assert not any(p.name.isdigit() for p in tmp_path.iterdir())
    finally:
        child.kill()
        child.wait()
    with pytest.warns(UserWarning, match=rf"taking over the lock .*pid {child.pid}"):
        _run(10, checkpoint_dir=tmp_path)  # the holder died by SIGKILL: its lock is stale
    assert json.loads((tmp_path / ".fedjax-avail.lock").read_text() or "{}") == {}


def test_an_experiment_out_dir_is_locked_too(tmp_path, capsys):
    from fedjax_avail import cli

    child = _hold(tmp_path)
    try:
        assert cli.main(["run", "--set", "rounds=10", "--out", str(tmp_path),
                         "--no-progress"]) == 2
    finally:
        child.kill()
        child.wait()
    err = capsys.readouterr().err
    assert err.startswith("fedjax-avail: error: out_dir") and f"pid {child.pid}" in err
    assert not (tmp_path / "metrics.csv").exists()


def test_checkpoint_dir_must_be_a_directory_path(tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    with pytest.raises(ValueError, match="checkpoint_dir .* exists and is not a directory"):
        _run(10, checkpoint_dir=a_file)
    with pytest.raises(TypeError, match="checkpoint_dir must be a string or an os"):
        _run(10, checkpoint_dir=3)
    with pytest.raises(TypeError, match="checkpoint_dir must be None or a string or an os"):
        fa.simulate(**{k: v for k, v in _setup().items() if k != "test_data"}, rounds=2,
                    checkpoint_dir=3)


@pytest.fixture(scope="module")
def finished_experiment(tmp_path_factory):
    out = tmp_path_factory.mktemp("exp")
    experiments.run(experiments.DEFAULT, {"rounds": 10, "eval_every": 5,
                                          "algorithms": ("fedavg",)}, out, progress=False)
    return out


def _changed(key, value):
    """Another valid value of the default experiment's setting ``key``."""
    if key == "algorithms":
        return ("fedlaavg",)
    if key == "beta":
        return 0.5
    if key == "seeds":
        return (0, 1)
    if isinstance(value, bool):
        return not value
    return value + 1 if isinstance(value, int) else value * 2


EXPERIMENT_SETTINGS = sorted(set(experiments.DEFAULT.defaults) - set(experiments.RESUMABLE))


def test_every_experiment_setting_but_rounds_and_data_dir_must_match_on_resume():
    assert set(experiments.RESUMABLE) == {"rounds", "data_dir"}
    assert len(EXPERIMENT_SETTINGS) == len(experiments.DEFAULT.defaults) - 1  # no data_dir


@pytest.mark.parametrize("setting", EXPERIMENT_SETTINGS)
def test_an_experiment_resumed_with_a_changed_setting_is_refused_naming_it(
        finished_experiment, setting, tmp_path):
    value = _changed(setting, experiments.DEFAULT.defaults[setting])
    out = tmp_path / "o"
    shutil.copytree(finished_experiment, out)
    overrides = {"rounds": 10, "eval_every": 5, "algorithms": ("fedavg",), setting: value}
    with pytest.raises(ValueError, match=rf"--resume: .* different settings: {setting} \(was"):
        experiments.run(experiments.DEFAULT, overrides, out, progress=False, resume=True)


def test_an_experiment_resumed_with_more_rounds_continues(finished_experiment, tmp_path):
    out = tmp_path / "o"
    shutil.copytree(finished_experiment, out)
    outcome = experiments.run(experiments.DEFAULT, {"rounds": 20, "eval_every": 5,
                                                    "algorithms": ("fedavg",)},
                              out, progress=False, resume=True)
    assert outcome.histories["fedavg"].rows[-1]["round"] == 20
    assert os.path.exists(out / "checkpoints" / "settings.json")
