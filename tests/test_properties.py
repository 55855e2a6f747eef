"""Property-based tests (hypothesis): availability processes against their defining formulas,
selection invariants, and the flat data layout. Issue 6, section 3."""

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import loop

import fedjax_avail as fa

A = fa.availability
FAST = settings(max_examples=25, deadline=None)


@st.composite
def groups_and_period(draw):
    n = draw(st.integers(1, 12))
    groups = np.asarray(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    return groups, draw(st.integers(1, 5)), draw(st.integers(1, 30))


@FAST
@given(groups_and_period())
def test_periodic_is_its_formula(case):
    groups, period, steps = case
    masks = A.sample(A.Periodic(groups, period), len(groups), steps)
    t = np.arange(steps)[:, None]
    np.testing.assert_array_equal(masks, groups[None, :] == (t // period) % (groups.max() + 1))


@FAST
@given(st.lists(st.integers(0, 23), min_size=1, max_size=10), st.integers(1, 24),
       st.integers(1, 3), st.integers(1, 80))
def test_hour_of_day_is_its_formula(start, hours, per_hour, steps):
    start = np.asarray(start)
    masks = A.sample(A.HourOfDay(start, hours, per_hour), len(start), steps)
    hour = (np.arange(steps)[:, None] // per_hour) % 24
    np.testing.assert_array_equal(masks, (hour - start[None, :]) % 24 < hours)


@FAST
@given(st.integers(1, 6), st.integers(1, 8), st.integers(1, 25), st.booleans(), st.integers(0, 99))
def test_trace_replays_its_table(rows, n, steps, cyclic, seed):
    table = np.random.default_rng(seed).random((rows, n)) < 0.5
    masks = A.sample(A.Trace(table, cyclic=cyclic), n, steps)
    t = np.arange(steps)
    expected = table[t % rows] if cyclic else np.where((t < rows)[:, None],
                                                         table[np.minimum(t, rows - 1)], False)
    np.testing.assert_array_equal(masks, expected)


@FAST
@given(st.sampled_from([0.0, 0.1, 0.5, 0.93, 1.0]), st.integers(1, 40), st.integers(0, 2**31))
def test_bernoulli_is_the_documented_draw(p, n, seed):
    masks = A.sample(A.Bernoulli(p), n, 4, seed=seed)
    np.testing.assert_array_equal(masks, loop.bernoulli_masks(p, n, 4, seed))
    if p in (0.0, 1.0):
        assert (masks == bool(p)).all()


@FAST
@given(groups_and_period(), st.integers(0, 99))
@pytest.mark.slow
def test_combinators_are_and_and_or_of_their_children(case, seed):
    groups, period, steps = case
    n = len(groups)
    table = np.random.default_rng(seed).random((7, n)) < 0.5
    a, b = A.Periodic(groups, period), A.Trace(table)
    ma, mb = A.sample(a, n, steps), A.sample(b, n, steps)
    np.testing.assert_array_equal(A.sample(A.all_of(a, b), n, steps), ma & mb)
    np.testing.assert_array_equal(A.sample(A.any_of(a, b), n, steps), ma | mb)


@st.composite
def availability_and_k(draw):
    n = draw(st.integers(1, 30))
    available = np.asarray(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    return available, draw(st.integers(1, n)), draw(st.integers(0, 2**31))


@FAST
@given(availability_and_k())
def test_uniform_selection_invariants(case):
    available, k, seed = case
    cohort, valid = fa.selection.uniform(jax.random.PRNGKey(seed), available, k)
    cohort, valid = np.asarray(cohort), np.asarray(valid)
    assert cohort.shape == (k,) and len(set(cohort.tolist())) == k  # distinct
    assert available[cohort[valid]].all() and not available[cohort[~valid]].any()
    assert valid.sum() == min(k, available.sum())


@FAST
@given(availability_and_k())
def test_least_recent_selection_is_the_sorted_rule(case):
    available, k, seed = case
    stamps = np.random.default_rng(seed).integers(-1, 5, len(available)).astype(np.int32)
    cohort, valid = fa.selection.least_recent(stamps, available, k)
    cohort, valid = np.asarray(cohort), np.asarray(valid)
    assert len(set(cohort.tolist())) == k
    chosen = sorted(np.flatnonzero(available), key=lambda i: (stamps[i], i))[:k]
    assert sorted(cohort[valid].tolist()) == sorted(int(i) for i in chosen)


@st.composite
def client_ids(draw):
    n = draw(st.integers(1, 8))
    extra = draw(st.lists(st.integers(0, n - 1), max_size=20))
    ids = np.asarray(list(range(n)) + extra)  # every client owns at least one example
    return np.random.default_rng(draw(st.integers(0, 99))).permutation(ids), n


@FAST
@given(client_ids())
def test_from_arrays_groups_rows_by_client_in_order(case):
    ids, n = case
    values = np.arange(len(ids)) * 10
    fd = fa.FederatedData.from_arrays({"v": values}, ids, num_clients=n)
    assert fd.num_clients == n and fd.counts.tolist() == np.bincount(ids).tolist()
    np.testing.assert_array_equal(fd.offsets, np.concatenate([[0], np.cumsum(fd.counts)[:-1]]))
    for i in range(n):
        np.testing.assert_array_equal(fd.client(i)["v"], values[ids == i])  # stable order


@FAST
@given(client_ids(), st.integers(1, 4), st.integers(1, 5), st.integers(0, 2**31))
def test_batches_come_only_from_the_clients_own_rows(case, steps, batch, seed):
    ids, n = case
    fd = fa.FederatedData.from_arrays({"owner": ids}, ids, num_clients=n)
    clients = np.arange(n, dtype=np.int32)
    rows = np.asarray(fa.data.sample_rows(jax.random.PRNGKey(seed), clients, fd.offsets,
                                          fd.counts, steps, batch))
    assert rows.shape == (n, steps, batch)
    owners = fd.arrays["owner"][rows]
    np.testing.assert_array_equal(owners, np.broadcast_to(clients[:, None, None], owners.shape))
