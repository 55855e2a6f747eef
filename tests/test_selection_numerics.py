"""Facility location at the edges (issue "trust at the edges"): non-finite gradients stop a run,
near-duplicate gradients pick what exact arithmetic picks, and memory grows with N, not N^2.

Truths: a float64 greedy written from the definition (``tests/reference/facility.py``), closed
forms (identical points tie to the lowest index), and the documented memory formula.
"""

import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from reference import facility as ref

import fedjax_avail as fa
from fedjax_avail.selection import _facility

S = fa.selection


# --- 1. NaN / Inf ----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["plain", "lazy"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_helper_refuses_non_finite_features_naming_the_first_bad_row(method, bad):
    features = np.random.default_rng(0).normal(size=(10, 3))
    features[4, 1] = bad
    features[7, 0] = bad
    with pytest.raises(ValueError, match=r"features must be finite: row 4 .*2 of 10 rows"):
        S.greedy_facility_location(features, 3, method=method)


KINK = 1.5  # the bad client's gradient is NaN once the model's coordinate reaches KINK


def _kink_task(threshold: float) -> fa.Task:
    """``(x - y)^2`` plus, on examples flagged ``bad``, ``-1e-3 sqrt(max(threshold - x, 0))``.

    The extra term is finite everywhere (0 for x >= threshold) but its gradient is NaN there
    (``inf * 0``), and its slope pushes descent away from the threshold: a model below it stays
    below it while the bad client trains.
    """
    def loss(x, batch):
        flagged = batch["bad"] > 0
        room = jnp.where(flagged, jnp.maximum(threshold - x[0], 0.0), 1.0)
        kink = jnp.where(flagged, -1e-3 * jnp.sqrt(room), 0.0)
        return jnp.mean(jnp.sum((x - batch["y"]) ** 2, axis=-1) + kink)

    return fa.Task(init=lambda key: jnp.zeros((1,), jnp.float32), loss=loss)


def _kink_clients() -> fa.FederatedData:
    # Seven clients near 2 and one flagged client (the last index) at 1, below the kink.
    ys = [2.0, 2.1, 1.9, 2.2, 1.8, 2.05, 1.95, 1.0]
    return fa.FederatedData.from_client_arrays(
        [{"y": np.array([[y]], np.float32), "bad": np.array([float(i == 7)], np.float32)}
         for i, y in enumerate(ys)])


def _kink_run(selection, threshold, rounds):
    alg = fa.algorithms.FedAvg(clients_per_round=3, local_steps=2, batch_size=1, client_lr=0.1,
                               selection=selection)
    return fa.simulate(_kink_task(threshold), _kink_clients(), alg, fa.availability.AlwaysOn(),
                       rounds=rounds, seed=0, eval_every=rounds)


STRATEGIES = [S.DivFL(method="greedy"), S.SubTrunc(method="greedy")]


# Passes with _submodular.py's NaN losses alone (the engine's per-round vector check catches the
# NaN loss at round 0); the engine's check right after ``prepare`` names the same round 0.
@pytest.mark.parametrize("selection", STRATEGIES, ids=["divfl", "subtrunc"])
def test_a_nan_gradient_at_the_initial_model_stops_the_run_in_round_0(selection):
    # Threshold -1: at x = 0 the flagged client's gradient is NaN, its loss finite. Before the
    # fix its NaN row made every coverage cost NaN, greedy fell back to the lowest indices, the
    # flagged client (index 7) never trained, and the run finished with a silently wrong
    # selection.
    with pytest.raises(fa.DivergenceError, match="round 0") as info:
        _kink_run(selection, threshold=-1.0, rounds=6)
    assert info.value.round == 0


@pytest.mark.parametrize("selection", [S.DivFL(method="greedy", refresh="available"),
                                       S.SubTrunc(method="greedy", refresh="available")],
                         ids=["divfl", "subtrunc"])
def test_a_nan_gradient_in_a_later_round_stops_the_run_in_that_round(selection):
    # Every available client's gradient is refreshed at the model of each round; the flagged
    # client's is NaN from the first round whose model has x >= KINK.
    with pytest.raises(fa.DivergenceError) as info:
        _kink_run(selection, threshold=KINK, rounds=40)
    r = info.value.round
    assert r >= 1 and f"round {r}" in str(info.value)
    # The truth: the model after r - 1 rounds is below the kink, the one after r rounds (which
    # round r refreshes at) is past it; both shorter runs finish without error.
    before, at = (_kink_run(selection, KINK, rounds) for rounds in (r - 1, r))
    assert float(before.params[0]) < KINK <= float(at.params[0])


# --- 2. Near-duplicate gradients ---------------------------------------------------------------

# The instances are no near-ties: float32 sums of N <= 40 distances are good to N eps < 3e-6
# (relative), so a best candidate ahead by more than 1e-5 must win in float32 too.
MARGIN = 1e-5


def _near_duplicates(seed, n=30, p=50):
    rng = np.random.default_rng(seed)
    centre = rng.normal(size=p)
    g = centre + 1e-4 * np.linalg.norm(centre) * rng.normal(size=(n, p))
    return g.astype(np.float32)  # both sides see the same float32 values


@pytest.mark.parametrize("seed", range(10))
def test_near_duplicate_gradients_pick_what_float64_greedy_picks(seed):
    # g_i = c + 1e-4 |c| noise_i: |g_i|^2 + |g_j|^2 - 2 g_i.g_j cancels ~8 of float32's 7 digits.
    # k = 3: from the 4th pick on, some seeds reach exact ties (two clients that only cover each
    # other), which float32 cannot be asked to break by index.
    g = _near_duplicates(seed)
    expected, margin = ref.greedy(g, 3)
    assert margin > MARGIN
    jitted, valid = jax.jit(lambda f: S.greedy(jax.random.PRNGKey(0), f, jnp.ones(30, bool),
                                               3))(jnp.asarray(g))
    assert np.asarray(valid).all() and np.asarray(jitted).tolist() == expected
    assert S.greedy_facility_location(g, 3).tolist() == expected
    assert S.greedy_facility_location(g, 3, method="lazy").tolist() == expected


@pytest.mark.parametrize("spread", [1.0, 1e-2, 1e-4])
def test_distances_match_float64_whether_the_expansion_or_the_difference_is_used(spread):
    # spread 1: well-separated clients (the matrix-product path); 1e-2, 1e-4: near-duplicates
    # (the direct-difference path). Both within float32 rounding of exact distances.
    rng = np.random.default_rng(0)
    centre = rng.normal(size=300)
    g = (centre + spread * rng.normal(size=(50, 300))).astype(np.float32)
    columns = np.array([0, 7, 49])
    exact = np.linalg.norm(g.astype(np.float64)[:, None, :] - g[columns].astype(np.float64),
                           axis=-1)
    found = np.asarray(jax.jit(_facility.distances)(jnp.asarray(g), jnp.asarray(columns)))
    np.testing.assert_allclose(found, exact, rtol=2e-5, atol=0)


# --- 3. Blocks and memory ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_blocked_distances_pick_what_float64_greedy_picks(seed, monkeypatch):
    # Tiny blocks: the jitted greedy sums features 3 at a time over row blocks and computes the
    # N^2 distances in column blocks; the numpy helper uses 3 x 7 distance blocks.
    for name, value in (("BLOCK", 60), ("CHUNK", 3), ("ROWS", 7), ("COLUMNS", 3)):
        monkeypatch.setattr(_facility, name, value)
    rng = np.random.default_rng(200 + seed)
    n, k = 37, 6
    features = rng.normal(size=(n, 8)).astype(np.float32)
    available = rng.random(n) < 0.7
    expected, margin = ref.greedy(features, k, available)
    assert margin > MARGIN
    f, on = jnp.asarray(features), jnp.asarray(available)
    plain, valid = jax.jit(lambda f, on: S.greedy(jax.random.PRNGKey(seed), f, on, k))(f, on)
    assert np.asarray(valid).all() and np.asarray(plain).tolist() == expected
    # Stochastic greedy with every open client a candidate is plain greedy.
    everyone, _ = jax.jit(lambda f, on: S.greedy(jax.random.PRNGKey(seed), f, on, k, n))(f, on)
    assert np.asarray(everyone).tolist() == expected
    for method in ("plain", "lazy"):
        assert S.greedy_facility_location(features, k, available, method).tolist() == expected
    value = sum(max(map(max, ref.distance_table(features))) - min(row[j] for j in expected)
                for row in ref.distance_table(features))
    assert S.coverage_value(features, expected) == pytest.approx(value, rel=1e-12)


def _formula_bytes(n, d):
    """The peak the helper's docstring states for plain greedy on float64 features."""
    return 8 * n * (d + 4) + 16 * _facility.COLUMNS * min(n, _facility.ROWS)


@pytest.mark.parametrize(("n", "d", "k"), [(20_000, 5, 3), (3_000, 64, 2)])
def test_helper_memory_is_linear_in_n_and_matches_its_formula(n, d, k):
    # Three (two) groups of identical points far apart, sizes 10000 > 6000 > 4000, in shuffled
    # order: greedy covers the largest group first, and identical points tie, so it picks each
    # group's lowest index. The old [N, N, d] array would need 8 N^2 d bytes (16 GB here).
    rng = np.random.default_rng(0)
    sizes = [n // 2, 3 * n // 10, n - n // 2 - 3 * n // 10][:k]
    sizes[-1] = n - sum(sizes[:-1])
    group = rng.permutation(np.repeat(np.arange(k), sizes))
    features = np.zeros((n, d))
    features[np.arange(n), group] = 100.0  # group g sits at 100 e_g
    tracemalloc.start()
    try:
        picks = S.greedy_facility_location(features, k)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert picks.tolist() == [int(np.flatnonzero(group == g)[0]) for g in range(k)]
    assert 0.8 * _formula_bytes(n, d) <= peak <= 1.2 * _formula_bytes(n, d), peak
    assert peak < 8 * n * n * d / 1000


def test_jitted_plain_greedy_memory_is_linear_in_n():
    # DivFL(method="greedy") at N = 10^5: the old [N, N] float32 matrix asked XLA for 40 GB.
    n, p = 100_000, 5
    compiled = jax.jit(lambda f, on: S.greedy(jax.random.PRNGKey(0), f, on, 5)).lower(
        jax.ShapeDtypeStruct((n, p), jnp.float32), jax.ShapeDtypeStruct((n,), bool)).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    # One [N, BLOCK // N] distance block (4 BLOCK bytes) and its map output, plus O(N) vectors.
    assert temp < 3 * 4 * _facility.BLOCK + 200 * n, temp
    assert temp < n * n * 4 / 500


def test_plain_and_lazy_greedy_break_exact_ties_alike():
    # Clients 1 and 6 cover equally (column sums 5.8), but float64 sums them a hair apart:
    # before, plain greedy's bare argmin took client 6, lazy greedy the lower index 1.
    features = np.array([[0.7], [0.1], [-0.5], [-2.2], [0.4], [-1.0], [0.0], [0.9]])
    available = np.array([0, 1, 1, 1, 1, 1, 1, 0], bool)
    for method in ("plain", "lazy"):
        assert S.greedy_facility_location(features, 2, available, method).tolist() == [1, 3]
    rng = np.random.default_rng(0)  # features on a 0.1 grid: many exact ties
    for _ in range(100):
        n = int(rng.integers(5, 30))
        features, available = np.round(rng.normal(size=(n, 2)), 1), rng.random(n) < 0.8
        k = int(rng.integers(1, 5))
        assert np.array_equal(S.greedy_facility_location(features, k, available, "plain"),
                              S.greedy_facility_location(features, k, available, "lazy"))
