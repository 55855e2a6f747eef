"""The command line and the experiments registry, on tiny settings."""

import json
import subprocess
import sys

import pytest
from conftest import MNIST_DIR

from fedjax_avail import cli, experiments


def test_list_names_every_experiment(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in experiments.REGISTRY:
        assert name in out


def test_default_run_writes_metrics_config_and_plot(tmp_path, capsys):
    code = cli.main(["run", "--set", "rounds=30", "--set", "eval_every=10", "--out",
                     str(tmp_path), "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    assert "fedlaavg" in out and "fedavg" in out
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines[0].startswith("algorithm,round,train_loss")
    assert len(lines) == 1 + 3 * 4  # three algorithms, rounds 0, 10, 20, 30
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["rounds"] == 30 and config["experiment"] == "digits-diurnal"
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


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
    with pytest.raises(SystemExit):
        cli.main(["frobnicate"])


def test_console_script_is_installed():
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "fedjax-avail"]
    assert script.value == "fedjax_avail.cli:main"
    done = subprocess.run([sys.executable, "-m", "fedjax_avail.cli", "list"], capture_output=True,
                          text=True, check=True)
    assert "fedlaavg-mnist" in done.stdout


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
