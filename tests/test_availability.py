"""Availability processes: exact patterns, statistics, validation."""

import numpy as np
import pytest

import fedjax_avail as fa


def test_always_on():
    assert fa.availability.sample(fa.availability.AlwaysOn(), 5, 3).all()


def test_bernoulli_frequencies_match_per_client_p():
    p = np.linspace(0.0, 1.0, 11)
    masks = fa.availability.sample(fa.availability.Bernoulli(p), 11, 4000, seed=1)
    freq = masks.mean(axis=0)
    se = np.sqrt(p * (1 - p) / 4000)
    assert np.all(np.abs(freq - p) <= 5 * se + 1e-9)
    np.testing.assert_array_equal(masks, fa.availability.sample(fa.availability.Bernoulli(p), 11,
                                                                4000, seed=1))
    assert not np.array_equal(masks, fa.availability.sample(fa.availability.Bernoulli(p), 11,
                                                            4000, seed=2))


def test_periodic_follows_the_contract_exactly():
    groups = np.array([0, 1, 2, 1, 0])
    masks = fa.availability.sample(fa.availability.Periodic(groups, period=3), 5, 30)
    for t in range(30):
        np.testing.assert_array_equal(masks[t], groups == (t // 3) % 3)


def test_diurnal_alternates_the_two_groups_every_E_rounds():
    labels = np.repeat(np.arange(10), 3)
    masks = fa.availability.sample(fa.availability.diurnal(labels, D=3, E=4), 30, 24)
    first = labels < 3
    for t in range(24):
        np.testing.assert_array_equal(masks[t], first if (t // 4) % 2 == 0 else ~first)


def test_trace_is_cyclic():
    table = np.random.default_rng(0).random((7, 4)) < 0.5
    masks = fa.availability.sample(fa.availability.Trace(table), 4, 20)
    for t in range(20):
        np.testing.assert_array_equal(masks[t], table[t % 7])


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: fa.availability.Bernoulli(1.5), "p must be"),
        (lambda: fa.availability.Bernoulli(np.array([0.2, -0.1])), "p must be"),
        (lambda: fa.availability.Periodic(np.array([0, 1]), period=0), "period"),
        (lambda: fa.availability.Trace(np.zeros((0, 3), bool)), "mask_table"),
        (lambda: fa.availability.diurnal(np.arange(10), D=0, E=5), "D must"),
        (lambda: fa.availability.diurnal(np.arange(10), D=1, E=0), "E must"),
    ],
)
def test_bad_parameters_are_rejected(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_width_is_checked_against_num_clients():
    with pytest.raises(ValueError, match="width must be N"):
        fa.availability.sample(fa.availability.Trace(np.ones((3, 4), bool)), 5, 2)
    with pytest.raises(ValueError, match="clients"):
        fa.availability.sample(fa.availability.Bernoulli(np.full(4, 0.5)), 5, 2)
