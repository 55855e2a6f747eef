"""FedLaAvg against the paper: eq. 3, selection, zeros for never-seen clients, reductions,
Example 1 and the bounded-staleness lemma."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import point_clients, quadratic_task
from jax.flatten_util import ravel_pytree
from reference import loop

import fedjax_avail as fa
from fedjax_avail.algorithms import RoundInput
from fedjax_avail.local import Problem


def _rounds(alg, task, fd, masks, seed=0):
    """Runs alg.round under jit one round at a time; yields (state, inputs) after each round."""
    state = alg.init(task.init(jax.random.PRNGKey(seed)), fd.num_clients)
    problem = Problem(task, jax.device_put(fd))
    step = jax.jit(lambda s, i: alg.round(s, i, problem))
    for r, mask in enumerate(masks):
        inputs = RoundInput(jnp.int32(r), jnp.asarray(mask), jax.random.PRNGKey(100 + r))
        previous = state
        state, _ = step(state, inputs)
        yield previous, state, inputs


def test_running_mean_equals_mean_of_all_stored_updates_every_round(digits):
    train, _ = digits
    fd = fa.data.one_label_per_client(train["x"], train["y"], 30, seed=0)
    task = fa.tasks.logistic_regression(64, 10)
    masks = np.random.default_rng(0).random((25, 30)) < 0.3
    alg = fa.algorithms.FedLaAvg(clients_per_round=4, local_steps=3, batch_size=2, client_lr=0.1)
    for previous, state, inputs in _rounds(alg, task, fd, masks):
        # eq. 3 (P:L134) for Algorithm 2: u^r = (1/N) sum_i u_i^{R_i^r}, never-seen rows zero.
        np.testing.assert_allclose(state.mean_update, state.latest.mean(axis=0), atol=1e-6)
        never = np.asarray(state.last_round) < 0
        assert not np.asarray(state.latest)[never].any()
        # x^r = x^{r-1} + u^r (L10).
        x_prev, _ = ravel_pytree(previous.params)
        x_new, _ = ravel_pytree(state.params)
        np.testing.assert_allclose(x_new, x_prev + state.mean_update, atol=1e-6)
        # L6-L7: the K available clients with the oldest stamps, ties by lower index.
        available = np.flatnonzero(np.asarray(inputs.available))
        old = np.asarray(previous.last_round)
        expected = sorted(available, key=lambda i: (old[i], i))[: alg.clients_per_round]
        got = np.flatnonzero(np.asarray(state.last_round) == int(inputs.round))
        assert sorted(got.tolist()) == sorted(int(i) for i in expected)
        assert set(got.tolist()) <= set(available.tolist())


def test_first_round_divides_by_N_not_by_participants():
    # Four clients at points 1..4, quadratic loss: one SGD step from 0 with lr gives
    # u_i = -lr * 2 (0 - e_i) = 2 lr e_i; only clients 0 and 2 are available.
    fd = point_clients([[1.0], [2.0], [3.0], [4.0]])
    alg = fa.algorithms.FedLaAvg(clients_per_round=4, local_steps=1, batch_size=1, client_lr=0.1)
    mask = np.array([[True, False, True, False]])
    (_, state, _), = list(_rounds(alg, quadratic_task(), fd, mask))
    np.testing.assert_allclose(state.params, [(0.2 * 1 + 0.2 * 3) / 4], rtol=1e-6)


def test_full_participation_with_K_equal_N_is_fedsgd(digits):
    train, _ = digits
    fd = fa.data.one_label_per_client(train["x"], train["y"], 20, seed=1)
    task = fa.tasks.logistic_regression(64, 10)
    common = dict(clients_per_round=20, batch_size=4, client_lr=0.2)
    run = lambda alg: fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=15,  # noqa: E731
                                  seed=3, eval_every=15)
    la = run(fa.algorithms.FedLaAvg(local_steps=1, **common))
    sgd = run(fa.algorithms.FedSGD(**common))
    for a, b in zip(jax.tree.leaves(la.params), jax.tree.leaves(sgd.params), strict=True):
        np.testing.assert_allclose(a, b, atol=2e-6)
    # With C > 1 it is full-participation FedAvg with a plain mean (P:L258).
    la = run(fa.algorithms.FedLaAvg(local_steps=3, **common))
    avg = run(fa.algorithms.FedAvg(local_steps=3, **common))
    for a, b in zip(jax.tree.leaves(la.params), jax.tree.leaves(avg.params), strict=True):
        np.testing.assert_allclose(a, b, atol=2e-6)


def test_matches_plain_per_client_loop(digits):
    train, _ = digits
    fd = fa.data.one_label_per_client(train["x"], train["y"], 20, seed=2)
    task = fa.tasks.logistic_regression(64, 10)
    process = fa.availability.Bernoulli(0.4)
    alg = fa.algorithms.FedLaAvg(clients_per_round=3, local_steps=2, batch_size=3, client_lr=0.3)
    result = fa.simulate(task, fd, alg, process, rounds=12, seed=5, eval_every=12)
    masks = loop.bernoulli_masks(0.4, fd.num_clients, 12, seed=5)
    expected, stamps = loop.fedlaavg(task, fd, masks, 5, K=3, C=2, B=3, lr=0.3)
    np.testing.assert_array_equal(result.state.last_round, stamps)
    for a, b in zip(jax.tree.leaves(result.params), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def _example1_table(t1, t2):
    return np.array([[True, False]] * t1 + [[False, True]] * t2)


@pytest.mark.parametrize("t1, t2", [(3, 3), (5, 2)])
def test_example1_fedavg_end_of_period_closed_form(t1, t2):
    """P:L102-115: x^{k(t1+t2)} = q^k x0 + (1 - q^k) X with q = (1-2g)^{t1+t2}."""
    e1, e2, g = 1.0, 5.0, 0.05
    fd = point_clients([[e1], [e2]])
    alg = fa.algorithms.FedSGD(clients_per_round=1, batch_size=1, client_lr=g)
    a = 1 - 2 * g
    limit = (a**t2 * (e1 - e2) + e2 - e1 * a ** (t1 + t2)) / (1 - a ** (t1 + t2))  # P:L90
    for k in (1, 4, 12):
        r = fa.simulate(quadratic_task(), fd, alg, fa.availability.Trace(_example1_table(t1, t2)),
                        rounds=k * (t1 + t2), eval_every=t1 + t2)
        q = a ** ((t1 + t2) * k)
        np.testing.assert_allclose(r.params, [(1 - q) * limit], rtol=1e-5)  # x0 = 0
    # Even with equal phases the limit is biased towards the last phase's client, not x*.
    assert abs(limit - (e1 + e2) / 2) > 0.05


def test_example1_fedlaavg_converges_to_the_optimum():
    e1, e2, t1, t2 = 1.0, 5.0, 5, 2
    fd = point_clients([[e1], [e2]])
    rounds = 4000
    g = 1 / (2 * math.sqrt(rounds))  # Theorem 1 step size (P:L191)
    alg = fa.algorithms.FedLaAvg(clients_per_round=1, local_steps=1, batch_size=1, client_lr=g)
    result = fa.simulate(quadratic_task(), fd, alg, fa.availability.Trace(_example1_table(t1, t2)),
                         rounds=rounds, eval_every=rounds)
    assert abs(float(result.params[0]) - (e1 + e2) / 2) < 1e-3
    fedavg = fa.simulate(quadratic_task(), fd,
                         fa.algorithms.FedSGD(clients_per_round=1, batch_size=1, client_lr=g),
                         fa.availability.Trace(_example1_table(t1, t2)), rounds=rounds,
                         eval_every=rounds)
    assert abs(float(fedavg.params[0]) - (e1 + e2) / 2) > 0.5


@pytest.mark.parametrize("seed", range(4))
def test_bounded_staleness_lemma(seed):
    """Under Assumption 4 with parameter E, r - R_i^r <= ceil(N/K) E - 1 for all r, i (P:L236)."""
    rng = np.random.default_rng(seed)
    n, k, e = int(rng.integers(5, 25)), int(rng.integers(1, 5)), int(rng.integers(1, 6))
    rounds = 60
    table = rng.random((rounds, n)) < 0.2
    for i in range(n):  # force availability at least once in every E consecutive rounds
        for start in range(0, rounds, e):
            window = table[start : start + e, i]
            if not window.any():
                table[start + rng.integers(len(window)), i] = True
    # A window [t, t+E) may straddle two blocks; enforce it exactly.
    for i in range(n):
        for t in range(rounds - e + 1):
            if not table[t : t + e, i].any():
                table[t + e - 1, i] = True
    assert fa.availability.sample(fa.availability.Trace(table), n, rounds).shape == (rounds, n)
    fd = point_clients(rng.normal(size=(n, 1)))
    alg = fa.algorithms.FedLaAvg(clients_per_round=k, local_steps=1, batch_size=1, client_lr=0.01)
    result = fa.simulate(quadratic_task(), fd, alg, fa.availability.Trace(table), rounds=rounds,
                         eval_every=rounds)
    # The recorded metric is exactly max_i (r - R_i^r) from stamps recomputed by the plain rule
    # (L6-L7, never-seen clients at -1), and it obeys the lemma's bound.
    stamp, expected = np.full(n, -1), []
    for r in range(rounds):
        chosen = sorted(np.flatnonzero(table[r]), key=lambda i: (stamp[i], i))[:k]
        stamp[chosen] = r
        expected.append(int(np.max(r - stamp)))
    np.testing.assert_array_equal(result.round_metrics["max_staleness"], expected)
    bound = math.ceil(n / k) * e - 1
    assert max(expected) <= bound


@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_a_smaller_table_keeps_the_mean_of_its_stored_rows(digits, dtype):
    train, _ = digits
    fd = fa.data.one_label_per_client(train["x"], train["y"], 30, seed=0)
    task = fa.tasks.logistic_regression(64, 10)
    masks = np.random.default_rng(1).random((25, 30)) < 0.3
    alg = fa.algorithms.FedLaAvg(clients_per_round=4, local_steps=3, batch_size=2,
                                 client_lr=0.1, table_dtype=dtype)
    for previous, state, _ in _rounds(alg, task, fd, masks):
        if dtype == "int8":
            assert state.latest.dtype == jnp.int8
            stored = np.asarray(state.latest, np.float32) * np.asarray(state.latest_scale)[:, None]
        else:  # bfloat16 bits stored as uint16: the top 16 bits of a float32
            assert state.latest.dtype == jnp.uint16
            stored = (np.asarray(state.latest).astype(np.uint32) << 16).view(np.float32)
        # u^r is the mean of what the table holds (the rounded rows), not of the raw updates.
        np.testing.assert_allclose(state.mean_update, stored.mean(axis=0), atol=2e-6)
        x_prev, _ = ravel_pytree(previous.params)
        x_new, _ = ravel_pytree(state.params)
        np.testing.assert_allclose(x_new, x_prev + state.mean_update, atol=1e-6)
    est = {d: fa.estimate_memory(task, fd, dataclasses_replace(alg, table_dtype=d))
           for d in ("float32", dtype)}
    ratio = est[dtype].terms["per_client_tables"] / est["float32"].terms["per_client_tables"]
    assert ratio < (0.55 if dtype == "bfloat16" else 0.3)


def test_a_bfloat16_table_is_written_in_place(digits):
    """XLA:CPU would convert a bfloat16 table to float32 for the scatter (a float32 copy of the
    whole table every round); stored as uint16 bits, the compiled round's temporaries stay far
    below the table's size."""
    train, _ = digits
    fd = fa.data.one_label_per_client(train["x"], train["y"], 600, seed=0)
    task = fa.tasks.logistic_regression(64, 10)
    alg = fa.algorithms.FedLaAvg(clients_per_round=4, local_steps=2, batch_size=2,
                                 client_lr=0.1, table_dtype="bfloat16")
    result = fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=4, eval_every=2)
    table_bytes = 600 * 650 * 2
    assert result.state.latest.nbytes == table_bytes
    assert result.memory["working_set"] < table_bytes / 4


def dataclasses_replace(alg, **changes):
    import dataclasses

    return dataclasses.replace(alg, **changes)
