"""FedAvg family: the contract's server step, reductions, and the plain reference loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import point_clients, quadratic_task
from jax.flatten_util import ravel_pytree
from reference import loop

import fedjax_avail as fa


def _leaves_equal(a, b, atol=0.0):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, atol=atol, rtol=0)


def test_fedsgd_server_step_is_server_lr_times_mean_delta():
    # Exact gradients at 0: u_i = -lr * 2 (0 - e_i) = 2 lr e_i; all 3 selected (K = N).
    points = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]], np.float32)
    fd = point_clients(points)
    alg = fa.algorithms.FedSGD(clients_per_round=3, batch_size=1, client_lr=0.1, server_lr=0.5)
    result = fa.simulate(quadratic_task(2), fd, alg, fa.availability.AlwaysOn(), rounds=1,
                         eval_every=1)
    np.testing.assert_allclose(result.params, 0.5 * np.mean(2 * 0.1 * points, axis=0), rtol=1e-6)


def test_data_size_weighting():
    fd = fa.FederatedData.from_client_arrays(
        [{"y": np.array([[2.0]] * 3, np.float32)}, {"y": np.array([[6.0]], np.float32)}]
    )
    alg = fa.algorithms.FedSGD(clients_per_round=2, batch_size=1, client_lr=0.1,
                               weighting="data_size")
    result = fa.simulate(quadratic_task(), fd, alg, fa.availability.AlwaysOn(), rounds=1)
    np.testing.assert_allclose(result.params, [(3 * 0.4 + 1 * 1.2) / 4], rtol=1e-6)


def test_fedprox_with_mu_zero_is_fedavg(digits):
    train, test = digits
    fd = fa.data.one_label_per_client(train["x"], train["y"], 20)
    task = fa.tasks.logistic_regression(64, 10)
    process = fa.availability.Bernoulli(0.5)
    kw = dict(clients_per_round=5, local_steps=4, batch_size=3, client_lr=0.1)
    a = fa.simulate(task, fd, fa.algorithms.FedProx(mu=0.0, **kw), process, rounds=10, seed=1)
    b = fa.simulate(task, fd, fa.algorithms.FedAvg(**kw), process, rounds=10, seed=1)
    _leaves_equal(a.params, b.params)
    c = fa.simulate(task, fd, fa.algorithms.FedProx(mu=1.0, **kw), process, rounds=10, seed=1)
    assert not np.allclose(jax.tree.leaves(c.params)[0], jax.tree.leaves(b.params)[0])


@pytest.mark.parametrize("mu", [0.0, 0.7])
def test_fedavg_and_fedprox_match_plain_per_client_loop(digits, mu):
    train, _ = digits
    fd = fa.data.one_label_per_client(train["x"], train["y"], 20, seed=4)
    task = fa.tasks.logistic_regression(64, 10)
    process = fa.availability.Bernoulli(0.3)
    alg = fa.algorithms.FedAvg(clients_per_round=4, local_steps=3, batch_size=2, client_lr=0.2,
                               server_lr=0.8, mu=mu)
    result = fa.simulate(task, fd, alg, process, rounds=10, seed=7, eval_every=10)
    masks = loop.bernoulli_masks(0.3, fd.num_clients, 10, seed=7)
    np.testing.assert_array_equal(result.round_metrics["num_available"], masks.sum(axis=1))
    expected = loop.fedavg(task, fd, masks, 7, K=4, C=3, B=2, lr=0.2, mu=mu, server_lr=0.8)
    _leaves_equal(result.params, expected, atol=1e-5)


def test_no_available_client_leaves_fedavg_model_unchanged():
    fd = point_clients([[1.0], [2.0]])
    table = np.array([[False, False]] * 3 + [[True, False]])
    alg = fa.algorithms.FedSGD(clients_per_round=1, batch_size=1, client_lr=0.1)
    result = fa.simulate(quadratic_task(), fd, alg, fa.availability.Trace(table), rounds=3)
    np.testing.assert_array_equal(result.params, [0.0])
    assert result.round_metrics["num_selected"].tolist() == [0, 0, 0]


def test_fedadam_is_adam_on_the_negated_mean_delta():
    fd = point_clients([[1.0], [3.0]])
    alg = fa.algorithms.FedAdam(clients_per_round=2, local_steps=1, batch_size=1, client_lr=0.1,
                                server_lr=0.05)
    result = fa.simulate(quadratic_task(), fd, alg, fa.availability.AlwaysOn(), rounds=1)
    # Adam's first step moves by lr * m_hat / (sqrt(v_hat) + eps) = lr * d / (|d| + eps).
    d = 0.1 * 2 * 2.0  # mean delta at x = 0: 2 lr mean(e)
    np.testing.assert_allclose(result.params, [0.05 * d / (abs(d) + 1e-3)], rtol=1e-5)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_a_round_nobody_takes_part_in_leaves_the_server_as_it_was(optimizer):
    # Everyone is available in slot 0 only. Before, FedAdam's moments kept moving the model
    # in the empty rounds after it (and counted Adam steps); the server takes no step there.
    fd = point_clients([[2.0], [2.0], [2.0]])
    table = np.zeros((6, 3), bool)
    table[0] = True
    alg = fa.algorithms.FedAvg(clients_per_round=2, local_steps=1, batch_size=1,
                               client_lr=0.1, server_lr=0.05, server_optimizer=optimizer)
    one, five = (fa.simulate(quadratic_task(), fd, alg, fa.availability.Trace(table),
                             rounds=rounds) for rounds in (1, 5))
    assert five.round_metrics["num_selected"].tolist() == [2, 0, 0, 0, 0]
    np.testing.assert_array_equal(five.params, one.params)
    assert jax.tree.all(jax.tree.map(np.array_equal, five.state.opt_state, one.state.opt_state))


def test_sequential_sgd_takes_K_times_C_steps_on_pooled_data():
    fd = point_clients([[2.0], [2.0], [2.0]])
    alg = fa.algorithms.SequentialSGD(clients_per_round=2, local_steps=3, batch_size=1, lr=0.1)
    result = fa.simulate(quadratic_task(), fd, alg, fa.availability.AlwaysOn(), rounds=1)
    # Six steps of x <- x - 0.1 * 2 (x - 2) from 0: x = 2 (1 - 0.8^6).
    np.testing.assert_allclose(result.params, [2 * (1 - 0.8**6)], rtol=1e-6)


@pytest.mark.parametrize("mu", [0.0, 0.5])
def test_local_steps_are_sgd_on_the_flat_float32_model_whatever_the_leaves_dtypes(mu):
    # A model of three leaves, one stored in bfloat16: the flat [P] vector is float32, and the
    # steps must update it in float32 (the loss sees each leaf cast to its own dtype), as plain
    # SGD on the raveled vector does; the carry of leaves must not round to bfloat16 per step.
    rng = np.random.default_rng(3)
    params = {"a": jnp.asarray(rng.standard_normal((3, 2)), jnp.float32),
              "b": jnp.asarray(rng.standard_normal(2), jnp.bfloat16),
              "c": jnp.asarray(rng.standard_normal(()), jnp.float32)}

    def loss(p, batch):
        out = batch["x"] @ p["a"] + p["b"].astype(jnp.float32) * p["c"]
        return jnp.mean((out - batch["y"]) ** 2)

    task = fa.Task(init=lambda key: params, loss=loss)
    fd = fa.FederatedData.from_client_arrays(
        [{"x": rng.standard_normal((5, 3)).astype(np.float32),
          "y": rng.standard_normal((5, 2)).astype(np.float32)} for _ in range(3)])
    problem = fa.local.Problem(task, fd)
    clients, key = jnp.array([2, 0]), jax.random.PRNGKey(5)
    deltas = fa.local.local_sgd(problem, params, clients, key, steps=4, batch_size=2, lr=0.05,
                                mu=mu)

    x0, unravel = ravel_pytree(params)
    assert x0.dtype == jnp.float32 and deltas.shape == (2, x0.size)
    rows = fa.data.sample_rows(key, clients, fd.offsets[clients], fd.counts[clients], 4, 2)
    for k in range(2):
        x = x0
        for step in range(4):
            batch = {name: a[rows[k, step]] for name, a in fd.arrays.items()}
            g = jax.grad(lambda v, batch=batch: loss(unravel(v), batch))(x)
            x = x - 0.05 * (g + mu * (x - x0))
        np.testing.assert_allclose(deltas[k], x - x0, rtol=1e-6, atol=1e-7)
