"""SubTrunc's and UnionFL's scale (issue 18): ``normalize="mean"`` weighs ``G / N`` against the
truncated loss term, so at the paper's lam = 0.95, b = 1.10 the truncation binds and SubTrunc
picks other clients than DivFL; ``normalize=None`` is the code as it was, bit for bit.

Truths: a hand-worked instance, the float64 greedy written from the definitions
(``tests/reference/facility.py``), and the pre-issue ``_extra`` arithmetic copied below.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from reference import facility as ref

import fedjax_avail as fa
from fedjax_avail import experiments
from fedjax_avail.experiments._subtrunc import strategy
from fedjax_avail.selection import FacilityState, SelectionContext

S = fa.selection
MARGIN = 1e-4  # float32 sums of N <= 12 distances are good to ~1e-6 (relative)

# Three groups on a line: A = clients 0-2 at 0, B = clients 3-5 at 1, the outlier 6 at 3 with
# a high loss (2.0; the others 0.2). k = 2.
HAND_FEATURES = np.array([[0.0], [0.0], [0.0], [1.0], [1.0], [1.0], [3.0]], np.float32)
HAND_LOSSES = np.array([0.2] * 6 + [2.0], np.float32)


def _picks(selection, features, losses, k, last=None, round_=0):
    """``selection.select`` under jit: the k picks in the order picked."""
    n = len(losses)
    last = np.full(n, -1) if last is None else last
    state = FacilityState(jnp.asarray(features, jnp.float32), jnp.asarray(losses, jnp.float32),
                          jnp.asarray(last, jnp.int32))

    @jax.jit
    def select(state):
        context = SelectionContext(jax.random.PRNGKey(0), jnp.ones(n, bool), jnp.int32(round_),
                                   None, None)
        return selection.select(state, context, k)[1:]

    picked, valid = select(state)
    assert np.asarray(valid).all()
    return np.asarray(picked).tolist()


def _truncated(losses, lam, b, phi=math.log1p):
    """SubTrunc's ``H(S) = lam * min(b, sum_{i in S} phi(f_i))`` (eq. 11-12), in float64."""
    return lambda picks: lam * min(b, math.fsum(phi(float(losses[i])) for i in picks))


def test_mean_scale_at_the_papers_lambda_and_b_picks_the_lossy_outlier_divfl_passes_over():
    # By hand. Step 0, coverage costs sum_i d_ie: A 6, B 5, outlier 15; H gains 0.95 min(1.1,
    # phi): A, B 0.1732 (phi(0.2) = 0.1823), outlier 1.0437 (phi(2) = 1.0986). B wins under
    # either scale (mean: -5/7 + 0.17 > -6/7 + 0.17 > -15/7 + 1.04). Step 1, cover (1,1,1,0,0,0,
    # 2): G gains A 3, outlier 2; H gains A 0.95 * 0.1823 = 0.1732, outlier 0.95 * (1.1 -
    # 0.1823) = 0.8718 (truncated at b). Mean: 3/7 + 0.17 = 0.60 < 2/7 + 0.87 = 1.16: the
    # outlier. As written: 3 + 0.17 > 2 + 0.87: A, DivFL's pick.
    assert _picks(S.DivFL(method="greedy"), HAND_FEATURES, HAND_LOSSES, 2) == [3, 0]
    mean = S.SubTrunc(lam=0.95, b=1.10, method="greedy", normalize="mean")
    assert _picks(mean, HAND_FEATURES, HAND_LOSSES, 2) == [3, 6]
    literal = S.SubTrunc(lam=0.95, b=1.10, method="greedy", normalize=None)
    assert _picks(literal, HAND_FEATURES, HAND_LOSSES, 2) == [3, 0]
    assert S.SubTrunc(method="greedy").normalize == "mean"  # the class default
    # The float64 reference agrees on both scales.
    h = _truncated(HAND_LOSSES, 0.95, 1.10)
    assert ref.objective_greedy(HAND_FEATURES, 2, h, divisor=7)[0] == [3, 6]
    assert ref.objective_greedy(HAND_FEATURES, 2, h)[0] == [3, 0]


@pytest.mark.parametrize(("lam", "b", "expected"), [
    (0.0, 1.10, [3, 0]),  # DivFL
    (0.10, 1.10, [3, 0]),  # Table II's lam: step 1 switches at lam = (1/7) / 0.7354 = 0.194
    (0.25, 1.10, [3, 6]),
    (0.95, 1.10, [3, 6]),
    (0.95, 0.20, [3, 0]),  # b small: F(S) = 0.18 of the first pick nearly fills it (L155)
])
def test_lambda_and_b_move_the_mean_scaled_selection_where_the_paper_says(lam, b, expected):
    strategy_ = S.SubTrunc(lam=lam, b=b, method="greedy")
    assert _picks(strategy_, HAND_FEATURES, HAND_LOSSES, 2) == expected
    found, margin = ref.objective_greedy(HAND_FEATURES, 2, _truncated(HAND_LOSSES, lam, b),
                                         divisor=7)
    assert found == expected and margin > MARGIN


@pytest.mark.parametrize("seed", range(4))
def test_mean_scale_picks_what_the_float64_definition_picks(seed):
    # Random clients, losses and recent sets: SubTrunc and UnionFL with G / N against the
    # float64 greedy on W(S) = G(S) / N + extra(S) written from eq. 9-14.
    rng = np.random.default_rng(300 + seed)
    n, k = 12, 4
    features = rng.normal(size=(n, 3)).astype(np.float32)
    losses = rng.uniform(0.0, 2.5, size=n).astype(np.float32)
    last = np.where(rng.random(n) < 0.4, 5, -1)  # selected in round 5, or never
    checked = 0
    for lam, b in ((0.95, 1.10), (0.5, 1.10), (0.95, 3.0)):
        expected, margin = ref.objective_greedy(features, k, _truncated(losses, lam, b),
                                                divisor=n)
        if margin > MARGIN:
            assert _picks(S.SubTrunc(lam=lam, b=b, method="greedy"), features, losses,
                          k) == expected
            checked += 1
    recent = set(np.flatnonzero(last == 5).tolist())
    expected, margin = ref.objective_greedy(
        features, k, lambda picks: -1.0 * len(recent.intersection(picks)), divisor=n)
    if margin > MARGIN:
        unionfl = S.UnionFL(mu=1.0, window=5, method="greedy")
        assert _picks(unionfl, features, losses, k, last=last, round_=6) == expected
        checked += 1
    # A case within MARGIN of a tie is not checked: seed 2 checks UnionFL only (its clients 0
    # and 3 are mutual nearest neighbours, tied in every SubTrunc case), the others all four.
    assert checked == (1 if seed == 2 else 4)


@pytest.mark.parametrize("copies", [1, 10])
def test_the_mean_scale_does_not_drift_to_divfl_as_clients_multiply(copies):
    # Three clients at (0, 0), two at (0.2, 0), a lossy one at (0.4, 0.05) (losses as above),
    # every client repeated ``copies`` times: G / N is the same whatever copies, so the mean
    # scale picks the same places; G as written grows with N against the same H, and at 10
    # copies (N = 60) SubTrunc is DivFL again. Found by the float64 reference, confirmed jitted.
    # (The lossy one sits off the line: on it, with counts 3, 2, 1, the first two places cover
    # everyone at the same cost, an exact tie that float32 breaks by rounding.)
    base = np.array([[0.0, 0.0]] * 3 + [[0.2, 0.0]] * 2 + [[0.4, 0.05]], np.float32)
    features = np.tile(base, (copies, 1))
    losses = np.tile(np.array([0.2] * 5 + [2.0], np.float32), copies)
    h = _truncated(losses, 0.95, 1.10)
    place = lambda picks: [p % 6 for p in picks]  # noqa: E731
    mean, margin = ref.objective_greedy(features, 2, h, divisor=len(losses))
    assert place(mean) == [5, 0] and margin > MARGIN
    literal, margin = ref.objective_greedy(features, 2, h)
    assert place(literal) == ([5, 0] if copies == 1 else [0, 3]) and margin > MARGIN
    divfl, _ = ref.objective_greedy(features, 2, lambda picks: 0.0)
    assert place(divfl) == [0, 3]
    assert _picks(S.SubTrunc(method="greedy"), features, losses, 2) == mean
    assert _picks(S.SubTrunc(method="greedy", normalize=None), features, losses, 2) == literal


class _SubTruncBefore(S.SubTrunc):
    """``SubTrunc._extra`` before issue 18, verbatim (``normalize`` did not exist)."""

    def _extra(self, state, context):
        del context
        phi = jnp.log1p(jnp.maximum(state.losses, 0.0)) if self.phi == "log1p" else (
            state.losses)

        def gain(columns, total):
            return self.lam * (jnp.minimum(self.b, total + phi[columns])
                               - jnp.minimum(self.b, total))

        return gain, jnp.float32(0.0), lambda total, chosen: total + phi[chosen]


class _UnionFLBefore(S.UnionFL):
    """``UnionFL._extra`` before issue 18, verbatim."""

    def _extra(self, state, context):
        recent = (state.last_selected >= 0) & (state.last_selected >= context.round - self.window)

        def gain(columns, carry):
            del carry
            return -self.mu * recent[columns].astype(jnp.float32)

        return gain, jnp.float32(0.0), lambda carry, chosen: carry


def _digits_run(fd, selection):
    alg = fa.algorithms.FedAvg(clients_per_round=5, local_steps=2, batch_size=5, client_lr=0.1,
                               selection=selection)
    return fa.simulate(fa.tasks.logistic_regression(64, 10), fd, alg,
                       fa.availability.Bernoulli(0.6), rounds=8, seed=3, eval_every=8)


@pytest.fixture(scope="module")
def digits_clients(digits):
    train, _ = digits
    fd = fa.data.classes_per_client(train["x"], train["y"], 30, k=3)
    return fd, np.asarray(_digits_run(fd, S.DivFL()).state.selection.last_selected)


@pytest.mark.parametrize(("now", "before"), [
    (S.SubTrunc(lam=50.0, b=5.0, normalize=None), _SubTruncBefore(lam=50.0, b=5.0)),
    (S.UnionFL(mu=3.0, normalize=None), _UnionFLBefore(mu=3.0)),
], ids=["subtrunc", "unionfl"])
def test_normalize_none_is_the_code_before_bit_for_bit(digits_clients, now, before):
    # A whole run (stochastic greedy, stale gradients and losses, 30 clients): the same picks
    # every round and the same final model, bit for bit. lam = 50, b = 5 and mu = 3 so the
    # extra term decides picks on the literal scale: the runs are not DivFL's. (At b = 1.1 the
    # truncation is full after the first pick here: every loss is still above e^1.1 - 1 = 2.0.)
    fd, divfl = digits_clients
    ours, theirs = (_digits_run(fd, selection) for selection in (now, before))
    stamps = np.asarray(ours.state.selection.last_selected)
    np.testing.assert_array_equal(stamps, theirs.state.selection.last_selected)
    for a, b in zip(jax.tree.leaves(ours.params), jax.tree.leaves(theirs.params), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(stamps, divfl)


@pytest.mark.parametrize("cls", [S.SubTrunc, S.UnionFL])
@pytest.mark.parametrize("bad", ["sum", "Mean", "none", 1.0])
def test_a_bad_normalize_is_refused_naming_it_before_any_compute(cls, bad):
    with pytest.raises(ValueError, match=rf"normalize must be None or one of 'mean', got "
                                         rf"{bad!r}"):
        cls(normalize=bad)


def test_the_table_experiments_use_the_mean_scale_and_none_restores_the_literal_one():
    for name in ("subtrunc-mnist", "subtrunc-mnist-table2", "subtrunc-mnist-table3",
                 "subtrunc-mnist-table4"):
        experiment = experiments.get(name)
        defaults = (experiment.all_defaults() if isinstance(experiment, experiments.Sweep)
                    else dict(experiment.defaults))
        assert defaults["normalize"] == "mean", name
    base = experiments.get("subtrunc-mnist")
    config = base.config()
    assert strategy("subtrunc", config).normalize == "mean"
    assert strategy("unionfl", config).normalize == "mean"
    literal = base.config({"normalize": "none"})
    assert strategy("subtrunc", literal).normalize is None
    assert strategy("unionfl", literal).normalize is None
    with pytest.raises(ValueError, match=r"setting normalize must be one of \('mean', 'none'\), "
                                         r"got 'sum'"):
        base.config({"normalize": "sum"})
