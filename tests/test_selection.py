"""Cohort selection rules."""

import jax
import numpy as np

import fedjax_avail as fa


def test_least_recent_takes_the_oldest_available_with_index_ties():
    last = np.array([5, -1, 3, -1, 3, 0, 7], np.int32)
    available = np.array([1, 0, 1, 1, 1, 1, 1], bool)
    cohort, valid = fa.selection.least_recent(last, available, 3)
    # Available stamps: 0:5, 2:3, 3:-1, 4:3, 5:0, 6:7 -> oldest are 3 (-1), 5 (0), then 2 (tie
    # with 4 at 3: lower index wins).
    assert np.asarray(cohort).tolist() == [3, 5, 2] and np.asarray(valid).all()


def test_least_recent_selects_all_when_fewer_than_k_available():
    available = np.array([0, 1, 0, 0, 1], bool)
    cohort, valid = fa.selection.least_recent(np.zeros(5, np.int32), available, 4)
    cohort, valid = np.asarray(cohort), np.asarray(valid)
    assert sorted(cohort[valid].tolist()) == [1, 4]
    assert len(set(cohort.tolist())) == 4  # padding slots are distinct clients, marked invalid


def test_uniform_is_uniform_over_available_subsets():
    available = np.array([1, 1, 0, 1, 1, 0], bool)
    draws = jax.vmap(lambda k: fa.selection.uniform(k, available, 2))(
        jax.random.split(jax.random.PRNGKey(0), 6000)
    )
    cohorts, valid = np.asarray(draws[0]), np.asarray(draws[1])
    assert valid.all() and np.isin(cohorts, [0, 1, 3, 4]).all()
    assert (cohorts[:, 0] != cohorts[:, 1]).all()
    freq = np.bincount(cohorts.ravel(), minlength=6)[[0, 1, 3, 4]] / 6000
    assert np.all(np.abs(freq - 0.5) < 5 * np.sqrt(0.25 / 6000))


def test_uniform_pads_when_too_few():
    available = np.array([0, 0, 1, 0], bool)
    cohort, valid = fa.selection.uniform(jax.random.PRNGKey(1), available, 3)
    assert np.asarray(cohort)[np.asarray(valid)].tolist() == [2]
    assert np.asarray(valid).sum() == 1
