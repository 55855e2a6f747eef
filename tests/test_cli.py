"""The command line and the experiments registry, on tiny settings."""

import json
import subprocess
import sys

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
from conftest import MNIST_DIR

from fedjax_avail import cli, experiments


def test_list_names_every_experiment(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in experiments.REGISTRY:
        assert name in out


@pytest.mark.slow
def test_default_run_writes_metrics_config_and_plot(tmp_path, capsys):
    code = cli.main(["run", "--set", "rounds=30", "--set", "eval_every=10", "--out",
                     str(tmp_path), "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    assert "fedlaavg" in out and "fedavg" in out
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines[0].startswith("algorithm,round,virtual_time,train_loss")
    assert len(lines) == 1 + 3 * 4  # three algorithms, rounds 0, 10, 20, 30
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["rounds"] == 30 and config["experiment"] == "digits-diurnal"
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_fedlaavg_mnist_smoke(tmp_path, mnist):
    del mnist
    overrides = dict(num_clients=100, clients_per_round=10, rounds=4, eval_every=2,
                     data_dir=str(MNIST_DIR))
    outcome = experiments.run(experiments.FEDLAAVG_MNIST, overrides, tmp_path, progress=False)
    assert [row["algorithm"] for row in outcome.summary] == [
        "fedsgd", "fedavg", "fedprox", "fedlaavg", "sequential"]
    assert all(row["status"] == "ok" for row in outcome.summary)


def test_bad_settings_are_clear_errors(capsys, tmp_path):
    assert cli.main(["run", "--set", "nope=1", "--out", str(tmp_path)]) == 2
    assert "no setting 'nope'" in capsys.readouterr().err
    assert cli.main(["run", "--set", "rounds=abc", "--out", str(tmp_path)]) == 2
    assert "--set rounds" in capsys.readouterr().err
    assert cli.main(["run", "fedlaavg-mnist", "--set", "data_dir=/nonexistent",
                     "--out", str(tmp_path)]) == 2
    assert "FEDJAX_AVAIL_MNIST_DIR" in capsys.readouterr().err
    for seconds in ("-1", "nan", "inf"):  # refused before a dry run says it passes
        assert cli.main(["run", "--checkpoint-seconds", seconds, "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert f"--checkpoint-seconds must be a finite number >= 0, got {float(seconds)}" in err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["frobnicate"])
    assert exit_.value.code == 2  # argparse's usage error, not a success
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


def test_console_script_is_installed():
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "fedjax-avail"]
    assert script.value == "fedjax_avail.cli:main"
    done = subprocess.run([sys.executable, "-m", "fedjax_avail.cli", "list"], capture_output=True,
                          text=True, check=True)
    assert "fedlaavg-mnist" in done.stdout


@pytest.mark.slow
def test_sweeps_write_every_panel_and_a_grid(tmp_path, mnist):
    del mnist
    small = dict(num_clients=100, clients_per_round=10, rounds=2, eval_every=1,
                 data_dir=str(MNIST_DIR), algorithms=("fedavg", "fedlaavg"))
    outcomes = experiments.run_sweep(experiments.get("fedlaavg-mnist-fig4"), small, tmp_path,
                                     progress=False)
    assert list(outcomes) == list(experiments.FEDLAAVG_MNIST_FIG4.settings)
    assert (tmp_path / "E_200__D_1" / "metrics.csv").exists()
    assert (tmp_path / "grid.png").read_bytes()[:4] == b"\x89PNG"
    rows = json.loads((tmp_path / "summary.json").read_text())
    assert len(rows) == 5 * 2 and {r["setting"] for r in rows} == set(outcomes)
    code = cli.main(["run", "fedlaavg-mnist-fig5-beta", "--set", "rounds=1", "--set",
                     f"data_dir={MNIST_DIR}", "--out", str(tmp_path / "beta"), "--no-progress"])
    assert code == 0 and (tmp_path / "beta" / "grid.png").exists()


def test_describe_and_run_help_print_settings_as_toml_without_running(capsys, tmp_path):
    assert cli.main(["describe", "fedlaavg-mnist"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# fedlaavg-mnist: ") and "\n# measured:" in text
    assert "\nlr = 0.01\n" in text and '\nsource = "idx"\n' in text
    assert "\n# data_dir = (none; optional)" in text
    assert cli.main(["run", "fedlaavg-mnist", "--help", "--out", str(tmp_path)]) == 0
    usage, settings = capsys.readouterr().out.split("\n# fedlaavg-mnist: ")
    assert "--set KEY=VALUE" in usage and "--config FILE.toml" in usage and "`" not in usage
    assert "# fedlaavg-mnist: " + settings == text
    assert not any(tmp_path.iterdir())  # --help ran nothing


@pytest.mark.parametrize("name", ["subtrunc-mnist", "fedlaavg-mnist-fig4"])
def test_describe_output_is_a_valid_config_file(capsys, tmp_path, name):

    cli.main(["describe", name])
    table = tomllib.loads(capsys.readouterr().out)
    experiment = experiments.get(name)
    defaults = cli._defaults(experiment)
    assert set(table) == {k for k, v in defaults.items() if v is not None}
    for key, value in table.items():
        assert (tuple(value) if isinstance(value, list) else value) == defaults[key], key
    config = tmp_path / "my.toml"
    config.write_text(cli._describe(experiment))
    assert cli._overrides(experiment, [], config) == {k: v for k, v in defaults.items()
                                                       if v is not None}


def test_config_file_settings_and_set_precedence(tmp_path, capsys):
    config = tmp_path / "small.toml"
    config.write_text('rounds = 20\neval_every = 10\nalgorithms = ["fedavg"]\nbeta = "none"\n'
                      "lr = 0.1\n")
    out = tmp_path / "out"
    code = cli.main(["run", "--config", str(config), "--set", "eval_every=5", "--out", str(out),
                     "--no-progress"])
    assert code == 0, capsys.readouterr().err
    saved = json.loads((out / "config.json").read_text())
    assert saved["rounds"] == 20 and saved["eval_every"] == 5 and saved["lr"] == 0.1
    assert saved["algorithms"] == ["fedavg"] and saved["beta"] is None
    rows = (out / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 5  # one algorithm, rounds 0, 5, 10, 15, 20


@pytest.mark.parametrize("text, expected", [
    ("nope = 1\n", "small.toml: has no setting 'nope'"),
    ("rounds = \n", "not valid TOML"),
    ("rounds = 2.5\n", "rounds"),
    ('algorithms = ["fedavg", "frobnicate"]\n', "frobnicate"),
    ("algorithms = []\n", "setting algorithms must be a non-empty list"),
    ("rounds = 5\n[settings]\nrounds = 6\n", "rounds set both at the top level and in "
                                               "[settings]"),
    ("settings = 3\n", "'settings' must be a table"),
])
def test_bad_config_files_are_one_line_errors(tmp_path, capsys, text, expected):
    config = tmp_path / "small.toml"
    config.write_text(text)
    assert cli.main(["run", "--config", str(config), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedjax-avail: error: ") and err.count("\n") == 1
    assert expected in err.replace("digits-diurnal has no setting", "small.toml: has no setting")
    assert not (tmp_path / "o" / "metrics.csv").exists()


def test_missing_config_file_and_unknown_experiment(tmp_path, capsys):
    assert cli.main(["run", "--config", str(tmp_path / "absent.toml")]) == 2
    assert "absent.toml: no such file" in capsys.readouterr().err
    assert cli.main(["describe", "frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "frobnicate" in err and err.count("\n") == 1


def test_compare_overlays_finished_runs_and_tensorboard_logs(tmp_path, capsys):
    pytest.importorskip("tensorboardX")
    for lr in ("0.05", "0.1"):
        assert cli.main(["run", "--set", "rounds=10", "--set", "eval_every=5", "--set",
                         "algorithms=fedavg", "--set", f"lr={lr}", "--out", str(tmp_path / lr),
                         "--no-progress", "--tensorboard"]) == 0
    events = list((tmp_path / "0.05" / "tensorboard" / "fedavg").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0
    histories = experiments.read_histories(tmp_path / "0.1")
    assert list(histories) == ["fedavg"] and list(histories["fedavg"]["round"]) == [
        0, 5, 10]
    figure = tmp_path / "both.png"
    assert cli.main(["compare", str(tmp_path / "0.05"), str(tmp_path / "0.1"), "--out",
                     str(figure)]) == 0
    assert figure.read_bytes()[:4] == b"\x89PNG"
    assert cli.main(["compare", str(tmp_path), "--out", str(figure)]) == 2
    assert "holds no metrics.csv" in capsys.readouterr().err


def test_python_dash_m_and_no_command(capsys):
    done = subprocess.run([sys.executable, "-m", "fedjax_avail", "describe", "digits-diurnal"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.startswith("# digits-diurnal: ")
    assert cli.main([]) == 0
    assert "examples:" in capsys.readouterr().out


def test_progress_lines_when_not_a_terminal(capsys):
    from fedjax_avail.callbacks._progress import Progress

    progress = Progress(total=100, initial=20, desc="fedavg", enabled=True, interval=0.0)
    progress.update(40, run_seconds=2.0, ran=40, train_loss=0.5)
    progress.close()
    line = capsys.readouterr().err
    # 40 rounds in 2 s of round time: 20 rounds/s, 40 rounds left: 2 s.
    assert line == "fedavg: 60/100 rounds, rounds/s 20.0, ETA 0:02, train_loss 0.5000\n"


def test_missing_tfds_data_is_one_line_not_a_traceback(tmp_path, capsys, monkeypatch):
    tfds = pytest.importorskip("tensorflow_datasets")

    def offline(*args, **kwargs):
        raise ConnectionError("Failed to resolve 'cs.stanford.edu'\nlong traceback text")

    monkeypatch.setattr(tfds, "data_source", offline)
    code = cli.main(["run", "fedlaavg-sentiment140", "--dry-run", "--set",
                     f"data_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "'sentiment140' (train) could not be downloaded: ConnectionError: Failed to " in err
    assert "csv_path" in err
    code = cli.main(["run", "fedlaavg-sentiment140", "--dry-run", "--set", "download=false",
                     "--set", f"data_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "is not prepared in" in err


def test_a_dry_run_estimates_memory_over_the_devices_the_run_uses(monkeypatch, capsys):
    """--devices D splits the run's cohort over D devices, each holding a copy of the data and
    the states: the dry run checks that estimate (1.5-2x one device's here), not one device's."""
    import jax

    if jax.default_backend() != "cpu" and len(jax.devices()) < 2:
        pytest.skip("--devices 2 needs two accelerators (a CPU's are made for the run)")
    plans, plan = [], experiments.plan  # (this process has one CPU device)
    monkeypatch.setattr(experiments, "plan", lambda *a: plans.append(plan(*a)) or plans[-1])
    for flags in ([], ["--devices", "2"]):
        assert cli.main(["run", "--dry-run", *flags]) == 0
    capsys.readouterr()
    alone, split = ([row["estimated_bytes"] for row in rows] for rows in plans)
    assert all(b > 1.4 * a for a, b in zip(alone, split, strict=True)), (alone, split)

def test_dry_run_checks_everything_and_trains_nothing(tmp_path, capsys, mnist):
    del mnist
    code = cli.main(["run", "fedlaavg-mnist-fig5-n", "--dry-run", "--set", "rounds=7", "--set",
                     f"data_dir={MNIST_DIR}", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and not any(tmp_path.iterdir())
    assert out.count("fedlaavg ") == 3 and "7 rounds, 1 seed" in out  # one line per panel
    assert "passes every check" in out
    # A setting that only fails when the experiment is built (a bad algorithm name) fails here.
    code = cli.main(["run", "fedlaavg-mnist", "--dry-run", "--set", "algorithms=fedavg,nope",
                     "--set", f"data_dir={MNIST_DIR}"])
    assert code == 2 and "nope" in capsys.readouterr().err


@pytest.mark.slow
def test_devices_splits_the_cohort_and_changes_no_number(tmp_path):
    """--devices 2 runs the round's cohort on two (CPU) devices; the summary equals one
    device's to float32 rounding. In a fresh process: JAX picks its CPU devices at start."""
    summaries = {}
    for devices in ("1", "2"):
        out = tmp_path / devices
        done = subprocess.run(
            [sys.executable, "-m", "fedjax_avail", "run", "--set", "rounds=20",
             "--set", "eval_every=10", "--set", "algorithms=fedavg,fedlaavg", "--devices",
             devices, "--no-progress", "--out", str(out)],
            capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        summaries[devices] = json.loads((out / "summary.json").read_text())
    for one, two in zip(summaries["1"], summaries["2"], strict=True):
        assert two["final_train_loss"] == pytest.approx(one["final_train_loss"], rel=1e-5)
    assert cli.main(["run", "--devices", "0"]) == 2


def test_devices_1_is_one_device_without_a_mesh(monkeypatch, capsys):
    """--devices 1 asks for simulate(mesh=None), so a run checkpointed with mesh=None resumes
    from the command line; no flag is "auto"."""
    assert cli._mesh(1) is None and cli._planned_mesh(1) is None
    assert cli._mesh(None) == "auto" and cli._planned_mesh(None) == "auto"
    meshes, plan = [], experiments.plan
    monkeypatch.setattr(experiments, "plan", lambda experiment, overrides, mesh, *a, **k: (
        meshes.append(mesh) or plan(experiment, overrides, mesh, *a, **k)))
    assert cli.main(["run", "--dry-run", "--devices", "1"]) == 0
    capsys.readouterr()
    assert meshes and all(m is None for m in meshes), meshes


def test_more_devices_than_jax_has_is_one_line(capsys, tmp_path):
    import jax

    jax.devices()  # a started backend keeps its device count
    assert cli.main(["run", "--devices", "64", "--no-progress", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "devices=64" in err and "jax_num_cpu_devices" in err and "Traceback" not in err


def test_top_level_keys_and_a_settings_table_are_both_read(tmp_path, capsys):
    config = tmp_path / "both.toml"
    config.write_text('rounds = 5\n[settings]\neval_every = 5\nalgorithms = ["fedavg"]\n')
    assert cli.main(["run", "--config", str(config), "--dry-run"]) == 0
    assert "fedavg                         5 rounds" in capsys.readouterr().out


def test_a_config_file_that_is_not_utf8_names_config_and_the_file(tmp_path, capsys):
    config = tmp_path / "latin1.toml"
    config.write_bytes("desc = \"caf\u00e9\"\n".encode("latin-1"))
    assert cli.main(["run", "--config", str(config), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"--config {config}: not valid TOML" in err and "UTF-8" in err


def test_an_empty_algorithm_list_is_an_error_not_an_empty_run(tmp_path, capsys):
    out = tmp_path / "o"
    assert cli.main(["run", "--set", "algorithms=", "--out", str(out)]) == 2
    assert "setting algorithms must be a non-empty list" in capsys.readouterr().err
    assert not (out / "metrics.csv").exists()


def test_poc_d_out_of_range_names_the_setting(tmp_path, capsys):
    assert cli.main(["run", "subtrunc-mnist", "--set", "poc_d=5", "--set",
                     "algorithms=poc", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "setting poc_d" in err and "[10, 100]" in err and "got 5" in err
