"""Selection strategies (issue 8): DivFL, SubTrunc, UnionFL, Power-of-Choice; greedy facility
location against brute force; fairness metrics; the runs axis that Table I's seeds use."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import fedjax_avail as fa
from fedjax_avail.local import Problem
from fedjax_avail.selection import SelectionContext

S = fa.selection


def _flat(params):
    return np.asarray(ravel_pytree(params)[0])


@pytest.fixture(scope="module")
def three_classes(digits):
    train, test = digits
    return (fa.data.classes_per_client(train["x"], train["y"], 30, k=3),
            fa.data.classes_per_client(test["x"], test["y"], 30, k=3))


def _run(fd, selection, rounds=12, seed=4, test=None, process=None):
    alg = fa.algorithms.FedAvg(clients_per_round=5, local_steps=3, batch_size=5, client_lr=0.1,
                               selection=selection)
    return fa.simulate(fa.tasks.logistic_regression(64, 10), fd, alg,
                       process or fa.availability.Bernoulli(0.6), rounds=rounds, seed=seed,
                       eval_every=rounds, test_data=test)


@pytest.mark.slow
def test_subtrunc_lam0_and_unionfl_mu0_select_exactly_what_divfl_selects(three_classes):
    fd, _ = three_classes
    runs = {name: _run(fd, sel) for name, sel in (
        ("divfl", S.DivFL()), ("subtrunc", S.SubTrunc(lam=0.0)), ("unionfl", S.UnionFL(mu=0.0)))}
    for name in ("subtrunc", "unionfl"):
        np.testing.assert_array_equal(runs[name].state.selection.last_selected,
                                      runs["divfl"].state.selection.last_selected)
        np.testing.assert_array_equal(_flat(runs[name].params), _flat(runs["divfl"].params))
    # ... and with a real penalty they choose differently.
    other = _run(fd, S.UnionFL(mu=100.0))
    assert not np.array_equal(other.state.selection.last_selected,
                              runs["divfl"].state.selection.last_selected)


def _instance(rng, n, dim=3):
    return rng.normal(size=(n, dim))


@pytest.mark.parametrize("seed", range(6))
def test_greedy_reaches_1_minus_1_over_e_of_the_optimum(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(6, 11)), int(rng.integers(2, 5))
    features = _instance(rng, n)
    available = rng.random(n) < 0.8
    available[:k] = True
    picked = S.greedy_facility_location(features, k, available)
    best = max(S.coverage_value(features, c)
               for c in itertools.combinations(np.flatnonzero(available), k))
    assert S.coverage_value(features, picked) >= (1 - 1 / math.e) * best - 1e-9
    assert available[picked].all() and len(set(picked.tolist())) == k
    # First pick: the available client with the smallest column sum of distances (spec fact 2).
    d = np.linalg.norm(features[:, None] - features[None], axis=-1)
    first = np.flatnonzero(available)[np.argmin(d[:, available].sum(axis=0))]
    assert picked[0] == first
    # The jitted float32 greedy DivFL uses starts from the same client and reaches the same
    # value (its picks may differ on near-ties that float32 distances cannot separate).
    jitted, valid = S.greedy(jax.random.PRNGKey(0), jnp.asarray(features, jnp.float32),
                             jnp.asarray(available), k)
    assert np.asarray(valid).all() and int(jitted[0]) == first
    assert S.coverage_value(features, np.asarray(jitted)) == pytest.approx(
        S.coverage_value(features, picked), rel=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_lazy_greedy_returns_the_plain_greedy_set(seed):
    rng = np.random.default_rng(100 + seed)
    features = _instance(rng, 40, dim=5)
    available = rng.random(40) < 0.7
    plain = S.greedy_facility_location(features, 8, available)
    lazy = S.greedy_facility_location(features, 8, available, method="lazy")
    assert plain.tolist() == lazy.tolist()


def test_stochastic_greedy_meets_its_expected_guarantee():
    # Mirzasoleiman et al.: r = (N / k) ln(1 / eps) candidates a step gives
    # E[G(S)] >= (1 - 1/e - eps) OPT. N = 12, k = 3, eps = 0.1 -> r = 10.
    rng = np.random.default_rng(7)
    n, k, eps = 12, 3, 0.1
    r = math.ceil(n / k * math.log(1 / eps))
    features = _instance(rng, n)
    best = max(S.coverage_value(features, c) for c in itertools.combinations(range(n), k))
    keys = jax.random.split(jax.random.PRNGKey(0), 400)
    picks, valid = jax.vmap(lambda key: S.greedy(key, jnp.asarray(features, jnp.float32),
                                                 jnp.ones(n, bool), k, r))(keys)
    assert np.asarray(valid).all()
    values = np.array([S.coverage_value(features, p) for p in np.asarray(picks)])
    guarantee = (1 - 1 / math.e - eps) * best
    assert values.mean() - 4 * values.std() / math.sqrt(len(values)) >= guarantee


@pytest.mark.parametrize("strategy", [S.Uniform(), S.LeastRecent(), S.PowerOfChoice(8),
                                      S.DivFL(), S.DivFL(method="greedy"), S.SubTrunc(),
                                      S.UnionFL(), S.DivFL(refresh="available")],
                         ids=lambda s: repr(s)[:40])
@pytest.mark.slow
def test_selected_clients_are_available_distinct_and_k_of_them(three_classes, strategy):
    fd, _ = three_classes
    task = fa.tasks.logistic_regression(64, 10)
    params = task.init(jax.random.PRNGKey(0))
    problem = Problem(task, jax.device_put(fd))
    state = strategy.init(params, fd.num_clients)
    if hasattr(strategy, "prepare"):
        state = strategy.prepare(state, params, problem)
    select = jax.jit(lambda s, key, on, r: strategy.select(
        s, SelectionContext(key, on, r, params, problem), 5))
    rng = np.random.default_rng(0)
    for r in range(6):
        available = rng.random(fd.num_clients) < (0.1 if r == 0 else 0.5)
        ctx = SelectionContext(jax.random.PRNGKey(r), jnp.asarray(available), jnp.int32(r),
                               params, problem)
        state, cohort, valid = select(state, ctx.key, ctx.available, ctx.round)
        cohort, valid = np.asarray(cohort), np.asarray(valid)
        assert len(set(cohort.tolist())) == 5
        assert available[cohort[valid]].all()
        assert valid.sum() == min(5, available.sum())
        state = strategy.update(state, ctx, jnp.asarray(cohort), jnp.asarray(valid))


def test_unionfl_does_not_repick_recent_clients_while_others_are_left(three_classes):
    fd, _ = three_classes  # 30 clients, 5 a round, window 4: 25 recent at most, 5 left
    result = _run(fd, S.UnionFL(mu=1e6, window=4, method="greedy"), rounds=20,
                  process=fa.availability.AlwaysOn())
    stamps = np.asarray(result.state.selection.last_selected)
    assert (stamps >= 15).sum() == 25  # the last 5 rounds chose 25 different clients


def test_unionfl_counts_a_selected_client_that_did_not_report_as_selected(three_classes):
    # U_t holds the sets the server selected (eq. 14, L163-L165). A cohort that all dropped out
    # sent no gradients, so plain greedy, which is deterministic, would pick it again unless
    # its members pay the penalty.
    fd, _ = three_classes
    task = fa.tasks.logistic_regression(64, 10)
    params = task.init(jax.random.PRNGKey(0))
    problem = Problem(task, jax.device_put(fd))
    everyone = jnp.ones(fd.num_clients, bool)

    def two_rounds_nobody_reports(strategy):
        state = strategy.prepare(strategy.init(params, fd.num_clients), params, problem)
        cohorts = []
        for r in range(2):
            context = SelectionContext(jax.random.PRNGKey(r), everyone, jnp.int32(r), params,
                                       problem)
            state, cohort, valid = strategy.select(state, context, 5)
            assert np.asarray(valid).all()
            state = strategy.update(state, context, cohort, jnp.zeros(5, bool))
            cohorts.append(set(np.asarray(cohort).tolist()))
        return cohorts

    penalised = two_rounds_nobody_reports(S.UnionFL(mu=1e6, window=1, method="greedy"))
    assert not penalised[0] & penalised[1]
    # with the penalty off, the same deterministic greedy repeats the cohort: the test can fail
    plain = two_rounds_nobody_reports(S.UnionFL(mu=0.0, window=1, method="greedy"))
    assert plain[0] == plain[1] == penalised[0]


def test_subtrunc_with_identical_gradients_and_large_b_picks_the_lossiest():
    # G is then constant, and min(b, F) with b huge is F: the k highest phi(f_i) win (fact 6).
    features = jnp.zeros((8, 4))
    losses = jnp.array([0.1, 2.0, 0.5, 3.0, 0.2, 1.0, 0.3, 2.5])
    strategy = S.SubTrunc(lam=1.0, b=1e9, method="greedy")
    gain, init, step = strategy._extra(S.FacilityState(features, losses, jnp.zeros(8, int)),
                                       None)
    picked, valid = S.greedy(jax.random.PRNGKey(0), features, jnp.ones(8, bool), 3, None,
                             gain, init, step)
    assert sorted(np.asarray(picked).tolist()) == [1, 3, 7]


@pytest.mark.slow
def test_power_of_choice_with_every_client_is_the_top_k_losses(three_classes):
    fd, _ = three_classes
    task = fa.tasks.logistic_regression(64, 10)
    params = jax.tree.map(lambda p: p + 0.01 * jnp.arange(p.size).reshape(p.shape) % 0.3,
                          task.init(jax.random.PRNGKey(0)))
    problem = Problem(task, jax.device_put(fd))
    ctx = SelectionContext(jax.random.PRNGKey(1), jnp.ones(30, bool), jnp.int32(0), params,
                           problem)
    _, cohort, valid = S.PowerOfChoice(30).select((), ctx, 5)
    losses = [float(task.loss(params, fd.client(i))) for i in range(30)]
    assert sorted(np.asarray(cohort).tolist()) == sorted(np.argsort(losses)[-5:].tolist())


def test_fairness_metrics_equal_a_plain_computation():
    acc = np.array([0.9, 0.5, 0.7, 1.0, 0.6, 0.8, 0.75, 0.55, 0.95, 0.65, 0.85])
    m = fa.fairness.fairness_metrics(acc)
    ranked = sorted(acc)
    assert m["client_dissimilarity"] == pytest.approx(100 * np.sqrt(np.mean((acc - acc.mean())
                                                                           ** 2)))
    assert m["acc_range"] == pytest.approx(0.5) and m["acc_min"] == 0.5
    assert m["acc_worst10"] == pytest.approx(ranked[0])  # 10% of 11 clients: one
    assert m["acc_best10"] == pytest.approx(ranked[-1])
    assert m["jain"] == pytest.approx(acc.sum() ** 2 / (11 * (acc**2).sum()))
    assert fa.fairness.fairness_metrics(np.full(20, 0.7))["jain"] == pytest.approx(1.0)


@pytest.mark.parametrize("n, tenth", [(4, 1), (14, 1), (15, 2), (25, 3), (35, 4), (45, 5)])
def test_the_worst_and_best_tenth_round_halves_up(n, tenth):
    """10% of N clients is N / 10 rounded half up, however 0.1 * N falls in floats (Python's
    round took 25 to 2 and 35 to 4)."""
    acc = np.linspace(0.0, 1.0, n)
    m = fa.fairness.fairness_metrics(acc)
    assert m["acc_worst10"] == pytest.approx(acc[:tenth].mean())
    assert m["acc_best10"] == pytest.approx(acc[-tenth:].mean())


def test_history_records_per_client_fairness(three_classes):
    fd, test = three_classes
    result = _run(fd, S.Uniform(), rounds=6, test=test)
    task = fa.tasks.logistic_regression(64, 10)
    acc = [float(task.metrics(result.params, test.client(i))["accuracy"]) for i in range(30)]
    row = result.history.rows[-1]
    assert row["test_client_dissimilarity"] == pytest.approx(100 * np.std(acc), abs=1e-4)
    assert row["test_acc_worst10"] == pytest.approx(np.mean(sorted(acc)[:3]), abs=1e-6)


@pytest.mark.parametrize("selection", [S.Uniform(), S.SubTrunc()], ids=["uniform", "subtrunc"])
@pytest.mark.slow
def test_seeds_in_one_program_equal_separate_runs(three_classes, selection):
    fd, test = three_classes
    batch = _run(fd, selection, seed=[1, 2, 3], test=test)
    assert isinstance(batch, list) and len(batch) == 3
    for seed, result in zip((1, 2, 3), batch, strict=True):
        alone = _run(fd, selection, seed=seed, test=test)
        np.testing.assert_allclose(_flat(result.params), _flat(alone.params), atol=1e-6)
        for k in alone.round_metrics:
            np.testing.assert_array_equal(result.round_metrics[k], alone.round_metrics[k])
        for a, b in zip(result.history.rows, alone.history.rows, strict=True):
            assert a.keys() == b.keys()
            np.testing.assert_allclose([a[k] for k in a], [b[k] for k in a], rtol=2e-6)
    assert not np.allclose(_flat(batch[0].params), _flat(batch[1].params))


def test_a_seed_that_diverges_does_not_stop_the_others():
    from conftest import point_clients, quadratic_task

    # lr = 5 diverges for every seed: each run is reported, named, and all results kept.
    fd = point_clients([[0.0], [1.0]])
    alg = fa.algorithms.FedSGD(clients_per_round=1, batch_size=1, client_lr=5.0)
    named = r"run 0 \(seed 3\) in round \d+, run 1 \(seed 4\) in round"
    with pytest.raises(fa.DivergenceError, match=named) as info:
        fa.simulate(quadratic_task(), fd, alg, fa.availability.AlwaysOn(), rounds=200,
                    seed=[3, 4], eval_every=100)
    assert len(info.value.result) == 2


def test_divfl_cost_per_extra_client_is_the_coverage_distances_only():
    # Every client must be covered: a round costs about k r candidate distances per client
    # (2 P flops each), never an N x N matrix (k N per client) or training all N.
    task = fa.tasks.logistic_regression(64, 10)
    alg = fa.algorithms.FedAvg(clients_per_round=4, local_steps=3, batch_size=2,
                               selection=S.DivFL(candidates=5))

    def flops(n):
        rng = np.random.default_rng(0)
        fd = fa.data.iid(rng.integers(0, 255, (n * 4, 8, 8)).astype(np.uint8),
                         rng.integers(0, 10, n * 4), n)
        state = alg.init(task.init(jax.random.PRNGKey(0)), n)
        inputs = fa.algorithms.RoundInput(jnp.int32(0), jnp.ones(n, bool), jax.random.PRNGKey(1))
        step = jax.jit(lambda s, d: alg.round(s, inputs, Problem(task, d)))
        return step.lower(state, jax.device_put(fd)).compile().cost_analysis()["flops"]

    per_client = (flops(3000) - flops(300)) / 2700
    p = 650
    assert per_client < 4 * 5 * (2 * p + 20), per_client
