"""No silent wrong results: each test here failed (gave a plausible wrong number, or a misleading
error) before the fix it guards. Issue 6, section 1."""

import json
import os
import stat

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import point_clients, quadratic_task

import fedjax_avail as fa
from fedjax_avail import cli, experiments


@pytest.fixture(scope="module")
def digits_fd(digits):
    train, test = digits
    return fa.data.one_label_per_client(train["x"], train["y"], 20, seed=0), test


def test_normalize_images_by_dtype():
    x = np.array([[0, 51, 255]], np.uint8)
    np.testing.assert_allclose(fa.tasks.normalize_images(x), [[0, 0.2, 1.0]])
    np.testing.assert_allclose(fa.tasks.normalize_images(x.astype(np.uint16) * 257),
                               [[0, 0.2, 1.0]], rtol=1e-6)
    floats = np.array([[0.0, 0.2, 1.0]], np.float32)  # torchvision's convention: unchanged
    np.testing.assert_array_equal(fa.tasks.normalize_images(floats), floats)


def test_float_images_in_unit_range_train_like_uint8(digits):
    train, test = digits
    float_train = {"x": train["x"].astype(np.float32) / 255, "y": train["y"]}
    alg = fa.algorithms.FedAvg(clients_per_round=10, local_steps=5, batch_size=5, client_lr=0.1)
    task = fa.tasks.logistic_regression(64, 10)
    losses = []
    for split in (train, float_train):
        fd = fa.data.one_label_per_client(split["x"], split["y"], 20, seed=0)
        result = fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=30, eval_every=30)
        losses.append(result.history["train_loss"][-1])
    assert losses[0] < 1.5  # it learns (it sat at ln 10 = 2.30 when floats were divided by 255)
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-4)


@pytest.mark.parametrize("bad, match", [
    (-1, r"labels in \[0, 10\).*\[-1, "),
    (10, r"labels in \[0, 10\).*, 10\]"),
])
def test_labels_outside_the_classes_are_refused(digits, bad, match):
    train, _ = digits
    y = train["y"].copy()
    y[3] = bad
    fd = fa.data.iid(train["x"], y, 10)
    alg = fa.algorithms.FedAvg(clients_per_round=2)
    with pytest.raises(ValueError, match=match):
        fa.simulate(fa.tasks.logistic_regression(64, 10), fd, alg, fa.availability.AlwaysOn(),
                    rounds=2)


def test_float_labels_nan_and_inf_are_refused(digits):
    train, test = digits
    task = fa.tasks.logistic_regression(64, 10)
    alg = fa.algorithms.FedAvg(clients_per_round=2)
    on = fa.availability.AlwaysOn()
    float_y = fa.data.iid(train["x"], train["y"].astype(np.float32), 10)
    with pytest.raises(ValueError, match="integer class labels, got dtype float32"):
        fa.simulate(task, float_y, alg, on, rounds=2)
    x = train["x"].astype(np.float32)
    x[5, 2, 2] = np.nan
    with pytest.raises(ValueError, match=r"data.arrays\['x'\] holds NaN or Inf"):
        fa.simulate(task, fa.data.iid(x, train["y"], 10), alg, on, rounds=2)
    bad_test = {"x": test["x"].astype(np.float32), "y": test["y"]}
    bad_test["x"][0, 0, 0] = np.inf
    with pytest.raises(ValueError, match=r"test_data\['x'\] holds NaN or Inf"):
        fa.simulate(task, fa.data.iid(train["x"], train["y"], 10), alg, on, rounds=2,
                    test_data=bad_test)


def test_divergence_is_caught_in_the_round_it_happens():
    # x <- x - 5 * 2 (x - 1): |x - 1| grows 9x a round and overflows float32 in round 40.
    x, first_bad = np.float32(0), None
    with np.errstate(over="ignore"):
        for r in range(100):
            x = x - np.float32(5.0) * (np.float32(2.0) * (x - np.float32(1.0)))
            if not np.isfinite(x):
                first_bad = r
                break
    alg = fa.algorithms.FedSGD(clients_per_round=1, batch_size=1, client_lr=5.0)
    with pytest.raises(fa.DivergenceError, match=f"became NaN/Inf in round {first_bad} ") as info:
        fa.simulate(quadratic_task(), point_clients([[1.0]]), alg, fa.availability.AlwaysOn(),
                    rounds=1000, eval_every=1000)
    assert info.value.result.history["round"].tolist() == [0, 1000]  # what was recorded


def test_a_non_finite_model_is_not_scored():
    # With lr = 5 the model overflows in round 40 (above); a metric of it (here the share of
    # positive coordinates, 0.0 for NaN) would be a plausible-looking number.
    task = fa.Task(init=quadratic_task().init, loss=quadratic_task().loss,
                   metrics=lambda x, b: {"positive": jnp.mean(x > 0)})
    alg = fa.algorithms.FedSGD(clients_per_round=1, batch_size=1, client_lr=5.0)
    with pytest.raises(fa.DivergenceError) as info:
        fa.simulate(task, point_clients([[1.0]]), alg, fa.availability.AlwaysOn(), rounds=100,
                    eval_every=100, test_data={"y": np.ones((1, 1), np.float32)})
    assert info.value.round == 40
    last = info.value.result.history.rows[-1]
    assert last["round"] == 100 and all(np.isnan(v) for k, v in last.items() if k != "round")


def test_a_diverged_algorithm_is_summarised_at_its_round(tmp_path):
    outcome = experiments.run(experiments.DEFAULT, {"rounds": 40, "eval_every": 20, "lr": 1e37,
                                                    "algorithms": ("fedavg",)}, tmp_path,
                              progress=False)
    (row,) = outcome.summary
    assert row["status"].startswith("diverged") and row["final_train_loss"] is None
    assert f"(diverged at round {row['stopped_at_round']})" in experiments.format_summary(
        outcome.summary)


def test_a_nan_initial_model_is_caught_at_round_zero():
    task = fa.Task(init=lambda key: jnp.full((1,), jnp.nan),
                   loss=lambda x, b: jnp.mean((x - b["y"]) ** 2))
    alg = fa.algorithms.FedSGD(clients_per_round=1, batch_size=1)
    with pytest.raises(fa.DivergenceError, match=r"initial model \(round 0\)"):
        fa.simulate(task, point_clients([[1.0]]), alg, fa.availability.AlwaysOn(), rounds=5)


def test_experiments_run_mifa_with_a_constant_learning_rate():
    config = experiments.FEDLAAVG_MNIST.config({"algorithms": ("mifa",)})
    (mifa,) = experiments._fedlaavg.algorithms_from_config(config).values()
    assert mifa.lr_decay is False and mifa.start == "after_all_seen"


def test_federated_data_built_directly_is_validated():
    arrays = {"x": np.arange(5.0)}
    with pytest.raises(ValueError, match="clients are empty"):
        fa.FederatedData(arrays=arrays, offsets=np.array([0, 3, 3]), counts=np.array([3, 0, 2]))
    with pytest.raises(ValueError, match="running sum of counts"):
        fa.FederatedData(arrays=arrays, offsets=np.array([0, 1]), counts=np.array([3, 2]))
    with pytest.raises(ValueError, match="5 rows"):
        fa.FederatedData(arrays=arrays, offsets=np.array([0, 3]), counts=np.array([3, 3]))


def test_partitioners_return_n_clients_or_raise():
    # Label 0 has one example for its two holders (clients 0 and 2): client 2 would be empty.
    # Before, from_arrays returned N = 2 clients without a word.
    x, y = np.zeros((4, 2)), np.array([0, 1, 1, 1])
    with pytest.raises(ValueError, match="label 0 has 1 examples for its 2 holders"):
        fa.data.classes_per_client(x, y, 3, k=1)
    with pytest.raises(ValueError, match=r"empty, e.g. clients \[2\]"):
        fa.FederatedData.from_arrays({"x": x}, np.array([0, 1, 1, 0]), num_clients=3)


def test_batches_reach_every_row_of_a_huge_client():
    # floor(u * count) with float32 u cannot reach odd rows above 2^24; exact integers can.
    count = 2**25 + 1
    rows = np.asarray(fa.data.sample_rows(jax.random.PRNGKey(0), np.array([0], np.int32),
                                          np.array([0], np.int32), np.array([count], np.int32),
                                          64, 64))
    high = rows[rows >= 2**24]
    assert rows.min() >= 0 and rows.max() < count
    assert (high % 2 == 1).mean() > 0.4  # about half of them


def test_beta_sweep_k_follows_the_number_of_clients():
    sweep = experiments.get("fedlaavg-mnist-fig5-beta")
    for label, setting in sweep.settings.items():
        config = sweep.base.config({**sweep.defaults, "num_clients": 200, **setting})
        algs = experiments._fedlaavg.algorithms_from_config(config)
        beta = float(label.split("=")[1])
        assert algs["fedlaavg"].clients_per_round == round(beta * 200), label
    with pytest.raises(ValueError, match="clients_per_round cannot be changed"):
        experiments.run_sweep(sweep, {"clients_per_round": 7}, None, progress=False)


def test_diurnal_rejects_fractions_and_periodic_takes_bool_groups():
    labels = np.array([0, 1, 2, 1])
    with pytest.raises(ValueError, match="E must be an integer >= 1, got 2.5"):
        fa.availability.diurnal(labels, D=1, E=2.5)
    by_bool = fa.availability.sample(fa.availability.Periodic(labels >= 1, 3), 4, 12)
    by_int = fa.availability.sample(fa.availability.Periodic((labels >= 1).astype(int), 3), 4, 12)
    np.testing.assert_array_equal(by_bool, by_int)


def test_tfds_extra_imports_the_real_download_path(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    # The real builder (no mock): its URL table reads the package's checksums through
    # importlib_resources, which broke `load_mnist_tfds()` out of the box.
    builder = tfds.builder("mnist", data_dir=str(tmp_path))
    assert any(url.endswith("train-images-idx3-ubyte.gz") for url in builder.url_infos)


def test_out_pointing_at_a_file_fails_before_compute(tmp_path, capsys, monkeypatch):
    target = tmp_path / "results.txt"
    target.write_text("not a directory")
    monkeypatch.setattr(experiments._run, "simulate",
                        lambda *a, **k: pytest.fail("simulated before checking --out"))
    assert cli.main(["run", "--set", "rounds=2", "--out", str(target), "--no-progress"]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err


def test_output_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        fa.History([{"round": 0, "train_loss": 1.0}]).to_csv(tmp_path / "m.csv")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "m.csv").stat().st_mode) == 0o644


def test_test_data_as_a_tuple_is_a_clear_error(digits_fd):
    fd, test = digits_fd
    alg = fa.algorithms.FedAvg(clients_per_round=2)
    with pytest.raises(TypeError, match="test_data must be None, a FederatedData or a dict"):
        fa.simulate(fa.tasks.logistic_regression(64, 10), fd, alg, fa.availability.AlwaysOn(),
                    rounds=2, test_data=(test["x"], test["y"]))


def test_bad_setting_names_the_key_the_user_typed(capsys, tmp_path):
    assert cli.main(["run", "--set", "lr=-1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "setting lr must be a finite number > 0, got -1.0" in err and "client_lr" not in err


def test_amplitude_is_not_measured_on_short_runs(tmp_path, capsys):
    # E = 20 (window 2E = 40): 30 rounds cannot show a whole window after the start-up phase.
    code = cli.main(["run", "--set", "rounds=30", "--set", "eval_every=10", "--out",
                     str(tmp_path), "--no-progress"])
    assert code == 0
    assert "n/a" in capsys.readouterr().out
    rows = json.loads((tmp_path / "summary.json").read_text())
    assert all(row["amplitude_last_window"] is None for row in rows)


def test_results_record_their_provenance(tmp_path):
    experiments.run(experiments.DEFAULT, {"rounds": 2, "eval_every": 1,
                                          "algorithms": ("fedavg",)}, tmp_path, progress=False)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["seed"] == 0 and config["rounds"] == 2
    versions = config["provenance"]["versions"]
    assert versions["jax"] == jax.__version__ and versions["fedjax_avail"] == fa.__version__
    assert "git_commit" in config["provenance"] and config["provenance"]["utc_time"]
