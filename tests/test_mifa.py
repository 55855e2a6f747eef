"""MIFA against FedLaAvg's averaging rule, its start rules, the authors' code's schedule;
drop-outs, nested and composed."""

import dataclasses

import jax
import numpy as np
import pytest
from conftest import point_clients, quadratic_task
from jax.flatten_util import ravel_pytree

import fedjax_avail as fa
from fedjax_avail.availability import dropout


def _flat(params):
    return np.asarray(ravel_pytree(params)[0])


def test_mifa_is_fedlaavg_averaging_when_all_available_clients_train(digits):
    train, _ = digits
    fd = fa.data.one_label_per_client(train["x"], train["y"], 20, seed=3)
    task = fa.tasks.logistic_regression(64, 10)
    process = fa.availability.Bernoulli(0.4)
    kw = dict(clients_per_round=20, local_steps=3, batch_size=2, client_lr=0.2)
    mifa = fa.simulate(task, fd, fa.algorithms.MIFA(**kw, lr_decay=False, start="immediately"),
                       process, rounds=15, seed=2)
    la = fa.simulate(task, fd, fa.algorithms.FedLaAvg(**kw), process, rounds=15, seed=2)
    np.testing.assert_allclose(_flat(mifa.params), _flat(la.params), atol=2e-6)
    np.testing.assert_array_equal(mifa.state.last_round, la.state.last_round)


def test_default_start_waits_for_every_row_within_availability():
    # MIFA steps only once every client has reported (S:L9); until then only available clients
    # train (at the unchanged initial model, so G_i = -grad f_i(0) = 2 e_i) and fill their rows.
    points = np.array([[1.0], [2.0], [4.0]], np.float32)
    table = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 1], [1, 1, 1]], bool)
    alg = fa.algorithms.MIFA(clients_per_round=3, local_steps=1, batch_size=1, client_lr=0.1,
                             lr_decay=False)
    run = lambda rounds: fa.simulate(quadratic_task(), point_clients(points), alg,  # noqa: E731
                                     fa.availability.Trace(table), rounds=rounds)
    waited = run(2)
    np.testing.assert_array_equal(waited.params, [0.0])  # client 2 has no row yet
    assert waited.round_metrics["num_selected"].tolist() == [2, 1]  # only available clients
    np.testing.assert_array_equal(waited.state.last_round, [1, 0, -1])
    # Round 2: client 2, the only one available, fills the last row: the server steps at once
    # with the mean of the rows, all computed at x = 0.
    x1 = 0.1 * np.mean(2 * points[:, 0])
    np.testing.assert_allclose(run(3).params, [x1], rtol=1e-6)
    # Round 3: everyone refreshes at x1, the second step.
    x2 = x1 + 0.1 * np.mean(-2 * (x1 - points[:, 0]))
    np.testing.assert_allclose(run(4).params, [x2], rtol=1e-6)


def test_authors_code_waits_for_every_client_then_fills_the_table_with_all_of_them():
    points = np.array([[1.0], [2.0], [4.0]], np.float32)
    table = np.array([[1, 1, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1], [1, 0, 1]], bool)
    alg = fa.algorithms.MIFA(clients_per_round=3, local_steps=1, batch_size=1, client_lr=0.1,
                             start="authors_code")
    run = lambda rounds: fa.simulate(quadratic_task(), point_clients(points), alg,  # noqa: E731
                                     fa.availability.Trace(table), rounds=rounds)
    waited = run(3)
    np.testing.assert_array_equal(waited.params, [0.0])  # client 2 not yet seen
    assert waited.state.step == 0 and (waited.state.last_round == -1).all()
    filled = run(4)  # round 3: everyone seen; the table holds all N at x = 0, no step yet
    np.testing.assert_array_equal(filled.params, [0.0])
    np.testing.assert_allclose(filled.state.table[:, 0], 2 * points[:, 0], rtol=1e-6)  # -grad
    # Round 4 (t = 0, lr_0): all three refresh at x = 0 (same values); x = 0.1 * mean(2 e).
    # Round 5 (t = 1, lr_0 / 2): clients 0, 2 refresh at x1.
    x1 = 0.1 * np.mean(2 * points[:, 0])
    g = 2 * points[:, 0].copy()
    g[[0, 2]] = -2 * (x1 - points[[0, 2], 0])
    x2 = x1 + 0.05 * g.mean()
    np.testing.assert_allclose(run(5).params, [x1], rtol=1e-6)
    np.testing.assert_allclose(run(6).params, [x2], rtol=1e-5)
    assert run(6).round_metrics["num_selected"].tolist() == [0, 0, 0, 3, 3, 2]


def test_dropout_loses_updates_of_selected_clients(digits):
    train, _ = digits
    fd = fa.data.one_label_per_client(train["x"], train["y"], 20, seed=0)
    task = fa.tasks.logistic_regression(64, 10)
    alg = fa.algorithms.FedLaAvg(clients_per_round=20, local_steps=1, batch_size=2)
    base = fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=5, seed=1)
    same = fa.simulate(task, fd, alg, dropout(fa.availability.AlwaysOn(), 0.0), rounds=5, seed=1)
    # Every report arrives: the same participation; the same model up to float reordering (the
    # mask's multiply may fuse differently: bit for bit on JAX 0.10, 7e-10 apart on 0.7).
    np.testing.assert_array_equal(same.state.last_round, base.state.last_round)
    np.testing.assert_allclose(_flat(same.params), _flat(base.params), rtol=1e-5, atol=1e-8)
    gone = fa.simulate(task, fd, alg, dropout(fa.availability.AlwaysOn(), 1.0), rounds=5, seed=1)
    np.testing.assert_array_equal(_flat(gone.params), _flat(task.init(jax.random.PRNGKey(0))))
    assert (gone.state.last_round == -1).all()
    some = fa.simulate(task, fd, alg, dropout(fa.availability.AlwaysOn(), 0.3), rounds=200,
                       seed=1, eval_every=200)
    share = some.round_metrics["num_selected"].mean() / 20
    assert abs(share - 0.7) < 5 * np.sqrt(0.21 / 4000)
    assert (some.round_metrics["num_available"] == 20).all()


@pytest.mark.slow
def test_dropout_inside_a_combinator_or_another_dropout_is_applied(digits):
    train, _ = digits
    fd = fa.data.one_label_per_client(train["x"], train["y"], 20, seed=0)
    task = fa.tasks.logistic_regression(64, 10)
    alg = fa.algorithms.FedLaAvg(clients_per_round=20, local_steps=1, batch_size=2)
    on = fa.availability.AlwaysOn()
    start = _flat(task.init(jax.random.PRNGKey(0)))
    for process in (fa.availability.all_of(dropout(on, 1.0), on),
                    fa.availability.any_of(on, dropout(on, 1.0)),
                    dropout(dropout(on, 1.0), 0.0)):
        gone = fa.simulate(task, fd, alg, process, rounds=3, seed=1)
        np.testing.assert_array_equal(_flat(gone.params), start)
        assert (gone.round_metrics["num_selected"] == 0).all()
    # Two independent drop-outs of 0.5 compose to a report rate of 0.25, side by side or nested.
    for process in (fa.availability.all_of(dropout(on, 0.5), dropout(on, 0.5)),
                    dropout(dropout(on, 0.5), 0.5)):
        twice = fa.simulate(task, fd, alg, process, rounds=200, seed=2, eval_every=200)
        share = twice.round_metrics["num_selected"].mean() / 20
        assert abs(share - 0.25) < 5 * np.sqrt(0.25 * 0.75 / 4000)


class _Plain:  # a user's wrapper without reports(), as a plain class
    def __init__(self, inner):
        self.inner = inner

    def init(self, key, n):
        return self.inner.init(key, n)

    def step(self, state, t, key):
        return self.inner.step(state, t, key)


_Frozen = dataclasses.dataclass(frozen=True)(type("_Frozen", (), {
    "__annotations__": {"inner": object}, "init": _Plain.init, "step": _Plain.step}))


@pytest.mark.parametrize("wrapper", [_Plain, _Frozen])
def test_a_wrapper_that_hides_a_dropout_is_refused(wrapper):
    fd = point_clients([[1.0], [2.0]])
    alg = fa.algorithms.FedSGD(clients_per_round=2, batch_size=1)
    with pytest.raises(ValueError, match="drop-outs would be ignored"):
        fa.simulate(quadratic_task(), fd, alg, wrapper(dropout(fa.availability.AlwaysOn(), 0.5)),
                    rounds=2)
