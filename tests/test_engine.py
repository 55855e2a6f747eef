"""simulate(): determinism, semantics of rounds, validation, divergence, history."""

import dataclasses
import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import point_clients, quadratic_task

import fedjax_avail as fa


@pytest.fixture(scope="module")
def small(digits):
    train, test = digits
    fd = fa.data.one_label_per_client(train["x"], train["y"], 20, seed=0)
    return fa.tasks.logistic_regression(64, 10), fd, test


def _flat(params):
    return np.concatenate([np.ravel(x) for x in jax.tree.leaves(params)])


@pytest.mark.slow
def test_same_seed_bit_identical_whatever_eval_every_and_chunking(small):
    task, fd, _ = small
    alg = fa.algorithms.FedLaAvg(clients_per_round=4, local_steps=3, batch_size=2, client_lr=0.1)
    process = fa.availability.Bernoulli(0.5)
    runs = [fa.simulate(task, fd, alg, process, rounds=24, seed=11, eval_every=e)
            for e in (1, 7, 24)]
    runs.append(fa.simulate(task, fd, alg, process, rounds=24, seed=11, eval_every=7,
                            client_chunk=3))
    for other in runs[1:]:
        np.testing.assert_array_equal(_flat(runs[0].params), _flat(other.params))
    other_seed = fa.simulate(task, fd, alg, process, rounds=24, seed=12, eval_every=24)
    assert not np.array_equal(_flat(runs[0].params), _flat(other_seed.params))


def test_round_r_uses_availability_step_r(small):
    task, fd, _ = small
    process = fa.availability.Bernoulli(0.3)
    alg = fa.algorithms.FedAvg(clients_per_round=20, local_steps=1, batch_size=1, client_lr=0.1)
    result = fa.simulate(task, fd, alg, process, rounds=15, seed=4, eval_every=4)
    masks = fa.availability.sample(process, fd.num_clients, 15, seed=4)
    np.testing.assert_array_equal(result.round_metrics["num_available"], masks.sum(axis=1))
    # K = N: every available client is selected, and only those.
    np.testing.assert_array_equal(result.round_metrics["num_selected"], masks.sum(axis=1))


def test_history_rows_and_exports(small, tmp_path):
    task, fd, test = small
    alg = fa.algorithms.FedAvg(clients_per_round=5, local_steps=2, batch_size=4, client_lr=0.1)
    result = fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=10, eval_every=4,
                         test_data=test)
    h = result.history
    assert h["round"].tolist() == [0, 4, 8, 10]
    assert {"train_loss", "train_accuracy", "test_loss", "test_accuracy"} <= set(h.columns)
    np.testing.assert_allclose(h["train_loss"][0], np.log(10), rtol=1e-6)  # zero-init softmax
    h.to_csv(tmp_path / "m.csv")
    header = (tmp_path / "m.csv").read_text().splitlines()[0]
    assert header.startswith("round,virtual_time,train_loss")
    assert h.to_pandas()["round"].tolist() == [0, 4, 8, 10]
    assert set(result.timing) >= {"compile", "run", "eval", "total", "s_per_round"}


def test_train_loss_is_the_mean_over_all_examples():
    # Clients of sizes 1 and 3 at points 0 and 4: at x = 0 the example mean is (0 + 3*16)/4.
    fd = fa.FederatedData.from_client_arrays(
        [{"y": np.zeros((1, 1), np.float32)}, {"y": np.full((3, 1), 4.0, np.float32)}]
    )
    alg = fa.algorithms.FedSGD(clients_per_round=1, batch_size=1, client_lr=0.1)
    result = fa.simulate(quadratic_task(), fd, alg, fa.availability.AlwaysOn(), rounds=1)
    assert result.history["train_loss"][0] == pytest.approx(12.0)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: fa.algorithms.FedAvg(clients_per_round=0), "clients_per_round"),
        (lambda: fa.algorithms.FedLaAvg(clients_per_round=-2), "clients_per_round"),
        (lambda: fa.algorithms.FedAvg(clients_per_round=2, client_lr=0.0), "client_lr"),
        (lambda: fa.algorithms.FedLaAvg(clients_per_round=2, client_lr=-1.0), "client_lr"),
        (lambda: fa.algorithms.FedAvg(clients_per_round=2, batch_size=0), "batch_size"),
        (lambda: fa.algorithms.FedAvg(clients_per_round=2, local_steps=0), "local_steps"),
        (lambda: fa.algorithms.FedAvg(clients_per_round=2, server_lr=0), "server_lr"),
        (lambda: fa.algorithms.FedProx(clients_per_round=2, mu=-1.0), "mu"),
        (lambda: fa.algorithms.FedAvg(clients_per_round=2, weighting="x"), "weighting"),
        (lambda: fa.algorithms.FedSGD(clients_per_round=2, local_steps=3), "local_steps"),
    ],
)
def test_bad_hyperparameters_fail_at_construction(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_simulate_arguments_fail_before_compute(small, monkeypatch):
    task, fd, _ = small
    monkeypatch.setattr(jax, "jit", lambda *a, **k: pytest.fail("compiled before validating"))
    alg = fa.algorithms.FedLaAvg(clients_per_round=21)
    with pytest.raises(ValueError, match=r"clients_per_round must be in \[1, num_clients=20\]"):
        fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=5)
    ok = fa.algorithms.FedAvg(clients_per_round=2)
    with pytest.raises(ValueError, match="width must be N"):
        fa.simulate(task, fd, ok, fa.availability.Trace(np.ones((4, 19), bool)), rounds=5)
    with pytest.raises(ValueError, match="rounds"):
        fa.simulate(task, fd, ok, fa.availability.AlwaysOn(), rounds=0)
    with pytest.raises(ValueError, match="eval_every"):
        fa.simulate(task, fd, ok, fa.availability.AlwaysOn(), rounds=3, eval_every=0)
    with pytest.raises(ValueError, match="client_chunk"):
        fa.simulate(task, fd, ok, fa.availability.AlwaysOn(), rounds=3, client_chunk=0)


def test_divergence_stops_with_the_history_so_far():
    fd = point_clients([[1.0], [2.0]])
    alg = fa.algorithms.FedSGD(clients_per_round=2, batch_size=1, client_lr=5.0)  # |1-2g| > 1
    with pytest.raises(fa.DivergenceError, match="diverged") as info:
        fa.simulate(quadratic_task(), fd, alg, fa.availability.AlwaysOn(), rounds=2000,
                    eval_every=50)
    history = info.value.result.history
    assert history["round"][0] == 0 and len(history) >= 2
    assert not np.isfinite(history["train_loss"][-1])
    assert np.isfinite(history["train_loss"][:-1]).all()


def test_simulations_of_one_task_share_its_evaluation_programs():
    """The evaluators' programs depend on the task's functions and the data's shapes only, so
    a second simulate of the same task traces none of them again (each new closure used to be
    traced, lowered and compiled afresh: 0.1-0.3 s each); another task, another batch size
    or other data get their own, with their own values."""
    traced = []

    def loss(params, batch):
        traced.append(batch["y"].shape)  # runs once per trace, never at run time
        return jnp.mean((params - batch["y"]) ** 2)

    task = fa.Task(init=lambda key: jnp.zeros(1), loss=loss)
    fd = fa.FederatedData.from_client_arrays(
        [{"y": np.full((2, 1), float(i), np.float32)} for i in range(4)])
    test = {"y": np.arange(6, dtype=np.float32).reshape(6, 1)}
    for alg in (fa.algorithms.FedAvg(clients_per_round=2, batch_size=1, client_lr=0.1),
                fa.algorithms.FedLaAvg(clients_per_round=2, batch_size=1, client_lr=0.1)):
        fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=2, test_data=test)
        evaluations = [s for s in traced if s[0] != 1]  # local steps trace batches of B = 1
        assert sorted(evaluations) == [(6, 1), (8, 1)], evaluations  # train and test, once
    other = fa.evaluation.make_evaluator(task, test, batch_size=4)
    assert [s for s in traced if s[0] != 1][2:] == []  # nothing traced until it is called
    assert float(other(jnp.zeros(1))["loss"]) == pytest.approx(np.mean(test["y"] ** 2))
    assert sorted([s for s in traced if s[0] != 1][2:]) == [(2, 1), (4, 1)]  # its own blocks
    same = fa.Task(init=task.init, loss=lambda p, b: 2 * loss(p, b))
    assert float(fa.evaluation.make_evaluator(same, test)(jnp.zeros(1))["loss"]) == (
        pytest.approx(2 * np.mean(test["y"] ** 2)))


def test_a_tasks_shared_evaluation_programs_go_with_the_task():
    def loss(params, batch):
        return jnp.mean((params - batch["y"]) ** 2)

    task = fa.Task(init=lambda key: jnp.zeros(1), loss=loss)
    arrays = {"y": np.ones((6, 1), np.float32)}
    first = fa.evaluation.make_evaluator(task, arrays)
    assert fa.evaluation.make_evaluator(task, arrays)._fn is first._fn
    # an equal task (the same functions) shares them; another batch size gets its own
    assert fa.evaluation.make_evaluator(dataclasses.replace(task), arrays)._fn is first._fn
    assert fa.evaluation.make_evaluator(task, arrays, batch_size=4)._fn is not first._fn
    assert len(fa.evaluation._PROGRAMS[task]) == 2
    held, alive = len(fa.evaluation._PROGRAMS), weakref.ref(task)
    del task, first
    gc.collect()
    assert alive() is None and len(fa.evaluation._PROGRAMS) <= held - 1  # not kept alive
