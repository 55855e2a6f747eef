"""Runs of one configuration in one compiled program: hyperparameter values and availability
parameters on the runs axis (issue 9), checked against separate runs."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import fedjax_avail as fa


def _flat(params):
    return np.asarray(ravel_pytree(params)[0])


@pytest.fixture(scope="module")
def setting(digits):
    train, _ = digits
    return (fa.tasks.logistic_regression(64, 10),
            fa.data.one_label_per_client(train["x"], train["y"], 20, seed=0))


@pytest.mark.slow
def test_learning_rates_and_availability_in_one_program_equal_separate_runs(setting):
    task, fd = setting
    algs = [fa.algorithms.FedProx(clients_per_round=5, client_lr=lr, mu=mu)
            for lr, mu in ((0.01, 0.0), (0.05, 0.5), (0.2, 1.0))]
    procs = [fa.availability.Bernoulli(p) for p in (0.3, 0.6, 0.9)]
    batch = fa.simulate(task, fd, algs, procs, rounds=20, seed=[0, 0, 1], eval_every=10)
    for alg, process, seed, result in zip(algs, procs, (0, 0, 1), batch, strict=True):
        alone = fa.simulate(task, fd, alg, process, rounds=20, seed=seed, eval_every=10)
        np.testing.assert_allclose(_flat(result.params), _flat(alone.params), atol=1e-6)
        np.testing.assert_array_equal(result.round_metrics["num_available"],
                                      alone.round_metrics["num_available"])
    assert len({float(r.history["train_loss"][-1]) for r in batch}) == 3


def test_a_single_value_is_shared_by_every_run(setting):
    task, fd = setting
    algs = [fa.algorithms.FedAvg(clients_per_round=5, client_lr=lr) for lr in (0.02, 0.1)]
    batch = fa.simulate(task, fd, algs, fa.availability.AlwaysOn(), rounds=5, seed=3)
    alone = fa.simulate(task, fd, algs[1], fa.availability.AlwaysOn(), rounds=5, seed=3)
    np.testing.assert_allclose(_flat(batch[1].params), _flat(alone.params), atol=1e-6)


@pytest.mark.parametrize("algorithms, processes, match", [
    ([fa.algorithms.FedAvg(clients_per_round=5), fa.algorithms.FedAvg(clients_per_round=6)],
     fa.availability.AlwaysOn(), "differ in clients_per_round"),
    ([fa.algorithms.FedAvg(clients_per_round=5),
      fa.algorithms.FedAvg(clients_per_round=5, weighting="data_size")],
     fa.availability.AlwaysOn(), "differ in weighting"),
    ([fa.algorithms.FedAvg(clients_per_round=5), fa.algorithms.FedLaAvg(clients_per_round=5)],
     fa.availability.AlwaysOn(), "share one class"),
    (fa.algorithms.FedAvg(clients_per_round=5),
     [fa.availability.Periodic(np.arange(20) % 2, 3), fa.availability.Periodic(
         np.arange(20) % 2, 4)], "differ in period"),
    ([fa.algorithms.FedAvg(clients_per_round=5)] * 2, [fa.availability.AlwaysOn()] * 3,
     "one length"),
])
def test_runs_that_one_program_cannot_hold_are_refused(setting, algorithms, processes, match):
    task, fd = setting
    with pytest.raises(ValueError, match=match):
        fa.simulate(task, fd, algorithms, processes, rounds=2)


@pytest.mark.slow
def test_runs_resume_from_their_checkpoint(setting, tmp_path):
    task, fd = setting
    algs = [fa.algorithms.FedLaAvg(clients_per_round=4, client_lr=lr) for lr in (0.05, 0.1)]
    kw = dict(availability=fa.availability.Bernoulli(0.5), seed=[7, 8], eval_every=10)
    fa.simulate(task, fd, algs, rounds=20, checkpoint_dir=tmp_path, **kw)
    resumed = fa.simulate(task, fd, algs, rounds=40, checkpoint_dir=tmp_path, **kw)
    straight = fa.simulate(task, fd, algs, rounds=40, **kw)
    for a, b in zip(resumed, straight, strict=True):
        np.testing.assert_array_equal(_flat(a.params), _flat(b.params))
        assert a.history.rows == b.history.rows


@pytest.mark.parametrize("layout", ["loop", pytest.param("map", marks=pytest.mark.slow),
                                    pytest.param("vmap", marks=pytest.mark.slow)])
def test_each_runs_layout_gives_every_run_its_separate_result(setting, layout,
                                                             monkeypatch):
    # FedLaAvg (a per-client table in the state) with LeastRecent selection, and FedAvg with
    # DivFL (a prepare pass before round 0): every run of the runs axis is its separate run;
    # "loop" trains two of the three runs at once (two cores), whatever the machine has.
    monkeypatch.setattr(fa.mesh, "cpu_cores", lambda: 2)
    task, fd = setting
    for alg in (fa.algorithms.FedLaAvg(clients_per_round=4, client_lr=0.1),
                fa.algorithms.FedAvg(clients_per_round=4, selection=fa.selection.DivFL())):
        process = fa.availability.Bernoulli(0.6)
        batch = fa.simulate(task, fd, alg, process, rounds=12, seed=[0, 5, 9], eval_every=6,
                            runs_layout=layout)
        for seed, result in zip((0, 5, 9), batch, strict=True):
            alone = fa.simulate(task, fd, alg, process, rounds=12, seed=seed, eval_every=6)
            np.testing.assert_allclose(_flat(result.params), _flat(alone.params), atol=1e-6)
            np.testing.assert_array_equal(result.round_metrics["num_available"],
                                          alone.round_metrics["num_available"])
            np.testing.assert_allclose(result.history["train_loss"],
                                       alone.history["train_loss"], rtol=1e-5)
            if layout == "loop":  # the very programs of a single run: bit for bit
                np.testing.assert_array_equal(_flat(result.params), _flat(alone.params))
                assert result.history.rows == alone.history.rows  # evaluated alone too
                for name, values in alone.round_metrics.items():
                    np.testing.assert_array_equal(result.round_metrics[name], values)


def test_the_automatic_runs_layout_loops_over_runs_on_a_cpu_and_batches_elsewhere(
        monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    assert fa.runs.runs_layout("auto") == "loop"
    assert fa.runs.runs_layout("auto", mesh=object()) == "map"
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert fa.runs.runs_layout("auto") == "vmap"
    assert fa.runs.runs_layout("map") == "map"
    with pytest.raises(ValueError, match="'loop' runs without a mesh"):
        fa.runs.runs_layout("loop", mesh=object())


def test_the_loop_layout_trains_one_run_a_core_at_most_all_runs(monkeypatch):
    monkeypatch.setattr(fa.mesh, "cpu_cores", lambda: 3)
    assert [fa.runs.loop_workers(s) for s in (1, 2, 3, 8)] == [1, 2, 3, 3]


def test_the_loop_layout_runs_its_runs_at_once_and_writes_each_back():
    # Each run waits for another to be running beside it (a barrier of 2 with a timeout): the
    # runs overlap, never more than loop_workers at once, and every run's new slice lands in
    # its own row, whatever order they finish in.
    barrier, lock = threading.Barrier(2, timeout=30), threading.Lock()
    live, most = [0], [0]

    def one_run(i, row):
        with lock:
            live[0] += 1
            most[0] = max(most[0], live[0])
        if i < 4:
            barrier.wait()  # raises BrokenBarrierError unless two runs are live at once
        with lock:
            live[0] -= 1
        return {"w": row["w"] * 10 + i}, f"run {i}"

    kept = []
    stacked = {"w": jnp.arange(5.0)[:, None] * jnp.ones((5, 3))}
    extras = fa.runs.runs_at_once(stacked, one_run, 2, kept.append)
    np.testing.assert_array_equal(kept[-1]["w"],
                                  (np.arange(5.0) * 11)[:, None] * np.ones((5, 3)))
    assert extras == [f"run {i}" for i in range(5)]
    assert most[0] == 2 and len(kept) == 5  # the caller holds the live state after each run


def test_the_memory_estimate_counts_the_runs_the_loop_trains_at_once(monkeypatch):
    fd = fa.FederatedData(arrays={"x": np.zeros((6, 784), np.uint8), "y": np.zeros(6, np.int32)},
                          offsets=np.arange(6, dtype=np.int32), counts=np.ones(6, np.int32))
    task, alg = fa.tasks.logistic_regression(784, 10), fa.algorithms.FedLaAvg(clients_per_round=2)
    one = fa.estimate_memory(task, fd, alg).terms
    for cores, workers in ((1, 1), (3, 3), (16, 4)):
        monkeypatch.setattr(fa.mesh, "cpu_cores", lambda c=cores: c)
        four = fa.estimate_memory(task, fd, alg, runs=4, runs_layout="loop").terms
        assert four["per_client_tables"] == (4 + workers) * one["per_client_tables"], cores
        assert four["cohort_working_set"] == workers * one["cohort_working_set"], cores
        assert four["cohort_updates"] == workers * one["cohort_updates"], cores
    two = fa.estimate_memory(task, fd, alg, runs=4, runs_layout="loop", loop_workers=2).terms
    assert two["per_client_tables"] == 6 * one["per_client_tables"]
    with pytest.raises(ValueError, match="loop_workers must be None or an integer >= 1"):
        fa.estimate_memory(task, fd, alg, runs=4, runs_layout="loop", loop_workers=0)


def test_the_loop_trains_fewer_runs_at_once_rather_than_refuse_a_run(setting, monkeypatch):
    # Memory for 4 runs' states and one more slice, not two: the run goes ahead one run at a
    # time (and equals its separate runs), where it would be refused only if one did not fit.
    from fedjax_avail import memory

    task, fd = setting
    alg = fa.algorithms.FedLaAvg(clients_per_round=4, client_lr=0.1)
    monkeypatch.setattr(fa.mesh, "cpu_cores", lambda: 2)
    process = fa.availability.Bernoulli(0.6)
    kw = dict(availability=process, test_data=None, runs=4, runs_layout="loop")
    one = fa.estimate_memory(task, fd, alg, loop_workers=1, **kw).total
    two = fa.estimate_memory(task, fd, alg, loop_workers=2, **kw).total
    assert two > one
    seen = []
    runs_at_once = fa.runs.runs_at_once
    monkeypatch.setattr(fa.runs, "runs_at_once",
                        lambda stacked, fn, workers, keep: seen.append(workers) or runs_at_once(
                            stacked, fn, workers, keep))
    monkeypatch.setattr(memory, "available_bytes", lambda mesh=None: (one + two) // 2)
    batch = fa.simulate(task, fd, alg, process, rounds=4, seed=[0, 1, 2, 3], runs_layout="loop")
    assert seen and set(seen) == {1}
    alone = fa.simulate(task, fd, alg, process, rounds=4, seed=2)
    np.testing.assert_array_equal(_flat(batch[2].params), _flat(alone.params))
    monkeypatch.setattr(memory, "available_bytes", lambda mesh=None: one - 1)
    with pytest.raises(MemoryError, match="this run needs about"):
        fa.simulate(task, fd, alg, process, rounds=4, seed=[0, 1, 2, 3], runs_layout="loop")


def test_a_dry_run_refuses_exactly_the_seeds_simulate_refuses(monkeypatch, mnist):
    # Memory for the loop's runs one at a time, not two: simulate trains them one at a time, so
    # the dry run (experiments.plan) passes; it estimated two at once and refused, before.
    from conftest import MNIST_DIR

    from fedjax_avail import experiments, memory

    del mnist
    if fa.runs.runs_layout() != "loop":
        pytest.skip("the loop layout is the CPU's")
    monkeypatch.setattr(fa.mesh, "cpu_cores", lambda: 2)
    experiment = experiments.get("subtrunc-mnist")
    overrides = {"seeds": (0, 1, 2, 3), "algorithms": ("random",), "data_dir": str(MNIST_DIR)}
    setup = experiment.build(experiment.config(overrides))
    kw = dict(test_data=setup.test, runs=4, runs_layout="loop")
    args = (setup.task, setup.train, setup.algorithms["random"], setup.availability)
    one, two = (fa.estimate_memory(*args, loop_workers=w, **kw).total for w in (1, 2))
    assert one < two
    monkeypatch.setattr(memory, "available_bytes", lambda mesh=None: (one + two) // 2)
    [row] = experiments.plan(experiment, overrides)
    assert row["estimated_bytes"] == one and row["seeds"] == [0, 1, 2, 3]
    monkeypatch.setattr(memory, "available_bytes", lambda mesh=None: one - 1)
    with pytest.raises(MemoryError, match="this run needs about"):
        experiments.plan(experiment, overrides)
    with pytest.raises(MemoryError, match="this run needs about"):  # before any compute
        fa.simulate(*args, rounds=1, seed=[0, 1, 2, 3], runs_layout="loop",
                    test_data=setup.test)


def test_an_unknown_runs_layout_is_refused_by_name_before_compute(setting):
    task, fd = setting
    with pytest.raises(ValueError, match="runs_layout must be one of"):
        fa.simulate(task, fd, fa.algorithms.FedAvg(clients_per_round=2),
                    fa.availability.AlwaysOn(), rounds=2, seed=[0, 1], runs_layout="pmap")
