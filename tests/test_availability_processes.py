"""Availability processes beyond the basics: statistics, exact patterns, files, combinators, E.

Every mask comes from ``fa.availability.sample`` (what ``simulate`` sees); the expectations are
closed forms, plain Python loops or brute force, never the code's own output.
"""

import itertools

import jax
import numpy as np
import pytest
from conftest import point_clients, quadratic_task

import fedjax_avail as fa
from fedjax_avail import _bits, _keys

A = fa.availability


def _within_5_se(freq, p, steps):
    se = np.sqrt(p * (1 - p) / steps)
    return np.all(np.abs(freq - p) <= 5 * se + 1e-9)


def _complete_runs(column, value):
    """Lengths of the runs of ``value`` in a bool column, dropping runs that touch either end."""
    edges = np.flatnonzero(np.diff(column.astype(np.int8))) + 1
    starts = np.concatenate([[0], edges])
    lengths = np.diff(np.concatenate([starts, [len(column)]]))
    keep = (column[starts] == value) & (starts > 0) & (starts + lengths < len(column))
    return lengths[keep]


# ----------------------------------------------------------------------------- Bernoulli


def test_bernoulli_uniform_range_draws_p_in_range_and_frequencies_match():
    process = A.Bernoulli.uniform_range(40, low=0.2, high=0.7, seed=3)
    p = np.asarray(process.p)
    assert p.shape == (40,) and p.min() >= 0.2 and p.max() < 0.7
    assert p.std() > 0.1  # really per-client, not one value
    np.testing.assert_array_equal(p, A.Bernoulli.uniform_range(40, 0.2, 0.7, seed=3).p)
    assert not np.array_equal(p, A.Bernoulli.uniform_range(40, 0.2, 0.7, seed=4).p)
    masks = A.sample(process, 40, 3000, seed=1)
    assert _within_5_se(masks.mean(axis=0), p, 3000)


def test_bernoulli_label_correlated_follows_mifa_adversarial_mode():
    # Clients hold (smallest) labels 0..9; MIFA: p_i = p_min + (p_max - p_min) * label_i / 9.
    clients = [{"y": np.array([d, min(d + 3, 9)])} for d in range(10) for _ in range(3)]
    labels = fa.FederatedData.from_client_arrays(clients).client_labels()
    process = A.Bernoulli.label_correlated(labels, p_min=0.1, p_max=0.9)
    expected = np.array([0.1 + 0.8 * d / 9 for d in range(10) for _ in range(3)])
    np.testing.assert_allclose(process.p, expected, rtol=1e-12)
    masks = A.sample(process, 30, 3000, seed=2)
    assert _within_5_se(masks.mean(axis=0), expected, 3000)
    # max_label pins the top of the scale when the high labels are absent.
    low = A.Bernoulli.label_correlated(np.array([0, 2, 4]), 0.0, 0.9, max_label=9)
    np.testing.assert_allclose(low.p, [0.0, 0.2, 0.4])


@pytest.mark.parametrize("n", [1, 7, 10])
def test_client_bits_are_jax_threefry_bits_with_both_words_used(n):
    key = jax.random.fold_in(jax.random.PRNGKey(3), 11)
    with jax.threefry_partitionable(False):  # JAX's reference for this layout
        expected = np.asarray(jax.random.bits(key, (n,), np.uint32))
    np.testing.assert_array_equal(np.asarray(_bits.client_bits(key, n)), expected)
    np.testing.assert_array_equal(np.asarray(_bits.client_bits(jax.random.key(3), n)),
                                  np.asarray(_bits.client_bits(jax.random.PRNGKey(3), n)))


def test_thresholds_make_p0_and_p1_exact_even_at_the_extreme_words():
    words = jax.numpy.array([0, 1, 2**31 - 1, 2**31, 2**32 - 1], np.uint32)
    assert not np.asarray(_bits.below(words, _bits.threshold(np.zeros(5)))).any()
    assert np.asarray(_bits.below(words, _bits.threshold(np.ones(5)))).all()
    np.testing.assert_array_equal(_bits.below(words, _bits.threshold(np.full(5, 0.5))),
                                  [True, True, True, False, False])


def test_bernoulli_clients_sharing_a_threefry_block_are_independent():
    # Clients j and N/2 + j take the two words of one block: their masks must not agree more
    # (or less) often than independent Bernoulli(1/2) draws, and 0 and 1 stay exact.
    p = np.full(200, 0.5)
    p[99], p[199] = 0.0, 1.0  # the last block's two words
    masks = A.sample(A.Bernoulli(p), 200, 2000, seed=6)
    agree = (masks[:, :99] == masks[:, 100:199]).mean()
    assert abs(agree - 0.5) <= 5 * np.sqrt(0.25 / masks[:, :99].size)
    assert not masks[:, 99].any() and masks[:, 199].all()


# ----------------------------------------------------------------------------- Markov


def test_markov_long_run_share_and_mean_run_lengths_match_the_chain():
    p_on = np.array([0.05, 0.2, 0.5, 0.1, 0.3, 0.02])
    p_off = np.array([0.2, 0.05, 0.5, 0.9, 0.1, 0.02])
    steps = 20000
    masks = A.sample(A.Markov(p_on, p_off), 6, steps, seed=5)
    share = p_on / (p_on + p_off)
    lam = 1 - p_on - p_off  # second eigenvalue: autocorrelation lam^k inflates the variance
    se = np.sqrt(share * (1 - share) / steps * (1 + lam) / (1 - lam))
    np.testing.assert_array_less(np.abs(masks.mean(axis=0) - share), 5 * se)
    np.testing.assert_allclose(A.Markov(p_on, p_off).stationary_share(), share)
    for i in range(6):
        for value, p_leave in ((True, p_off[i]), (False, p_on[i])):
            runs = _complete_runs(masks[:, i], value)
            mean, sd = 1 / p_leave, np.sqrt(1 - p_leave) / p_leave  # Geometric(p_leave)
            assert len(runs) > 50
            assert abs(runs.mean() - mean) <= 5 * sd / np.sqrt(len(runs)), (i, value)


def test_markov_initial_state_is_stationary_or_as_asked():
    n = 4000
    first = A.sample(A.Markov(0.1, 0.3), n, 1, seed=0)[0]
    assert abs(first.mean() - 0.25) <= 5 * np.sqrt(0.25 * 0.75 / n)
    assert A.sample(A.Markov(0.1, 0.3, initial="on"), n, 1)[0].all()
    assert not A.sample(A.Markov(0.1, 0.3, initial="off"), n, 1)[0].any()
    # A frozen chain started on stays on; started off with p_on = 1 it alternates.
    assert A.sample(A.Markov(0.0, 0.0, initial="on"), 3, 20).all()
    flip = A.sample(A.Markov(1.0, 1.0, initial="off"), 2, 6)
    np.testing.assert_array_equal(flip[:, 0], [False, True] * 3)


# ----------------------------------------------------------------------------- HourOfDay


def test_hour_of_day_matches_a_python_loop_exactly():
    start = np.random.default_rng(0).integers(0, 24, 30)
    hours, per_hour, steps = 5, 3, 24 * 3 * 2 + 7
    masks = A.sample(A.HourOfDay(start, hours=hours, rounds_per_hour=per_hour), 30, steps)
    for t in range(steps):
        hour_of_day = (t // per_hour) % 24
        for i in range(30):
            window = [(start[i] + k) % 24 for k in range(hours)]
            assert masks[t, i] == (hour_of_day in window), (t, i)


def test_hour_of_day_scalar_start_full_day_and_quietest_window():
    masks = A.sample(A.HourOfDay(22, hours=3), 4, 48)
    np.testing.assert_array_equal(masks[:, 0], [h % 24 in (22, 23, 0) for h in range(48)])
    assert A.sample(A.HourOfDay(7, hours=24, rounds_per_hour=2), 3, 50).all()
    counts = np.random.default_rng(1).integers(0, 5, (20, 24))
    process = A.HourOfDay.quietest_window(counts, hours=8)
    for i in range(20):
        totals = [sum(counts[i, (s + k) % 24] for k in range(8)) for s in range(24)]
        assert process.start_hour[i] == totals.index(min(totals))


# ----------------------------------------------------------------------------- Trace


def test_trace_from_npz_npy_and_csv_is_exact(tmp_path):
    table = np.random.default_rng(2).random((7, 5)) < 0.5
    np.savez(tmp_path / "named.npz", mask=table, other=np.zeros(3))
    np.savez(tmp_path / "single.npz", table.astype(np.uint8))
    np.save(tmp_path / "plain.npy", table)
    np.savetxt(tmp_path / "t.csv", table.astype(int), fmt="%d", delimiter=",")
    for name in ("named.npz", "single.npz", "plain.npy", "t.csv"):
        masks = A.sample(A.Trace.from_file(tmp_path / name), 5, 17)
        np.testing.assert_array_equal(masks, table[np.arange(17) % 7], err_msg=name)


def test_trace_from_intervals_is_exact_and_one_shot_ends_unavailable():
    intervals = [[(0, 3)], [(2, 4), (6, 8), (3, 5)], [], [(7, 8)]]
    expected = np.zeros((8, 4), bool)
    for i, pairs in enumerate(intervals):
        for start, end in pairs:
            for t in range(start, end):
                expected[t, i] = True
    cyclic = A.sample(A.Trace.from_intervals(intervals, num_steps=8), 4, 20)
    np.testing.assert_array_equal(cyclic, expected[np.arange(20) % 8])
    once = A.sample(A.Trace.from_intervals(intervals, num_steps=8, cyclic=False), 4, 20)
    np.testing.assert_array_equal(once[:8], expected)
    assert not once[8:].any()
    table = np.ones((3, 2), bool)
    np.testing.assert_array_equal(A.sample(A.Trace(table, cyclic=False), 2, 5).all(axis=1),
                                  [True, True, True, False, False])


def test_trace_file_errors_are_clear(tmp_path):
    np.savez(tmp_path / "two.npz", a=np.ones((2, 2)), b=np.ones((2, 2)))
    with pytest.raises(ValueError, match="expected one named 'mask'"):
        A.Trace.from_file(tmp_path / "two.npz")
    (tmp_path / "ragged.csv").write_text("1,0,1\n0,1\n")
    with pytest.raises(ValueError, match="CSV of 0/1"):
        A.Trace.from_file(tmp_path / "ragged.csv")
    (tmp_path / "bad.csv").write_text("1,0\n2,1\n")
    with pytest.raises(ValueError, match="0/1"):
        A.Trace.from_file(tmp_path / "bad.csv")
    with pytest.raises(ValueError, match=r"\.npz, \.npy or \.csv"):
        A.Trace.from_file(tmp_path / "t.txt")
    (tmp_path / "wide.csv").write_text("1,0,1\n0,1,1\n")
    with pytest.raises(ValueError, match="width must be N"):
        A.sample(A.Trace.from_file(tmp_path / "wide.csv"), 2, 3)


# ----------------------------------------------------------------------------- combinators


def test_all_of_and_any_of_are_and_or_of_deterministic_children():
    rng = np.random.default_rng(3)
    children = [
        A.HourOfDay(rng.integers(0, 24, 9), hours=10, rounds_per_hour=2),
        A.Periodic(rng.integers(0, 3, 9), period=4),
        A.Trace(rng.random((11, 9)) < 0.6),
    ]
    separate = [A.sample(c, 9, 60) for c in children]
    np.testing.assert_array_equal(A.sample(A.all_of(*children), 9, 60),
                                  separate[0] & separate[1] & separate[2])
    np.testing.assert_array_equal(A.sample(A.any_of(*children), 9, 60),
                                  separate[0] | separate[1] | separate[2])
    nested = A.any_of(A.all_of(children[0], children[1]), children[2])
    np.testing.assert_array_equal(A.sample(nested, 9, 60),
                                  (separate[0] & separate[1]) | separate[2])


def test_combined_random_children_use_the_documented_split_keys():
    children = (A.Bernoulli(np.linspace(0.1, 0.9, 7)), A.Markov(0.2, 0.3))
    n, steps, seed = 7, 40, 9
    keys = _keys.run_keys(seed)
    init_keys = jax.random.split(keys.availability_init, 2)
    states = [c.init(k, n) for c, k in zip(children, init_keys, strict=True)]
    expected_all, expected_any = [], []
    for t in range(steps):
        step_keys = jax.random.split(_keys.availability_key(keys, t), 2)
        masks = []
        for j, child in enumerate(children):
            states[j], mask = child.step(states[j], t, step_keys[j])
            masks.append(np.asarray(mask))
        expected_all.append(masks[0] & masks[1])
        expected_any.append(masks[0] | masks[1])
    np.testing.assert_array_equal(A.sample(A.all_of(*children), n, steps, seed), expected_all)
    np.testing.assert_array_equal(A.sample(A.any_of(*children), n, steps, seed), expected_any)


def test_combined_children_draw_independent_streams():
    # The same key for both children would make AND of two Bernoulli(0.5) a Bernoulli(0.5).
    masks = A.sample(A.all_of(A.Bernoulli(0.5), A.Bernoulli(0.5)), 200, 200, seed=0)
    assert abs(masks.mean() - 0.25) <= 5 * np.sqrt(0.25 * 0.75 / masks.size)


@pytest.mark.parametrize(
    "make",
    [
        lambda: A.Bernoulli.uniform_range(20, 0.2, 0.8),
        lambda: A.Markov(np.linspace(0.05, 0.5, 20), 0.2),
        lambda: A.all_of(A.HourOfDay(np.arange(20) % 24, hours=12), A.Bernoulli(0.5)),
        lambda: A.any_of(A.Markov(0.1, 0.4), A.Bernoulli(0.2)),
    ],
)
def test_random_processes_are_deterministic_for_a_seed(make):
    a, b = A.sample(make(), 20, 50, seed=7), A.sample(make(), 20, 50, seed=7)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, A.sample(make(), 20, 50, seed=8))


# ----------------------------------------------------------------------------- E and plots


def _brute_force_e(table):
    steps = table.shape[0]
    for e in range(1, steps + 1):
        if all(table[t:t + e].any(axis=0).all() for t in range(steps - e + 1)):
            return e
    return steps + 1


def test_minimal_availability_equals_brute_force_on_random_traces():
    rng = np.random.default_rng(4)
    seen = set()
    for trial in range(40):
        table = rng.random((12, 5)) < rng.uniform(0.1, 0.9)
        expected = _brute_force_e(table)
        seen.add(expected)
        assert A.minimal_availability(A.Trace(table), 5, 12, seed=trial) == expected
    assert len(seen) > 3 and 13 in seen  # varied cases, including a never-available client


def test_minimal_availability_closed_forms():
    labels = np.repeat(np.arange(10), 2)
    for e in (1, 3, 7):
        assert A.minimal_availability(A.diurnal(labels, D=2, E=e), 20, 4 * e) == e + 1
    assert A.minimal_availability(A.AlwaysOn(), 20, 30) == 1
    start = np.arange(20) % 24
    assert A.minimal_availability(A.HourOfDay(start, hours=8, rounds_per_hour=2), 20, 96) == 33
    never = np.ones((6, 3), bool)
    never[:, 1] = False
    assert A.minimal_availability(A.Trace(never), 3, 6) == 7  # sentinel: steps + 1


def test_plot_availability_writes_a_png(tmp_path):
    start = np.arange(30) % 24
    path = tmp_path / "sub" / "hours.png"
    fig = A.plot_availability(A.all_of(A.HourOfDay(start, hours=8), A.Bernoulli(0.7)), 30, 72,
                              path=path, sort_by=start)
    assert fig is not None
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in path.parent.iterdir() if p.name != "hours.png"]  # no temp file left
    A.plot_availability(A.Markov(0.1, 0.2), 10, 20, path=tmp_path / "m.png", sort_by="share")
    assert (tmp_path / "m.png").stat().st_size > 0
    with pytest.raises(ValueError, match="sort_by"):
        A.plot_availability(A.AlwaysOn(), 10, 5, sort_by=np.arange(3))


# ----------------------------------------------------------------------------- validation


START_HOUR = r"start_hour must be an integer or an array, with values in \[0, 23\]"


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: A.Bernoulli.uniform_range(10, -0.1, 0.5), "low and high"),
        (lambda: A.Bernoulli.uniform_range(10, 0.6, 0.5), "low and high"),
        (lambda: A.Bernoulli.uniform_range(0, 0.1, 0.5), "num_clients"),
        (lambda: A.Bernoulli.label_correlated(np.arange(5), 0.2, 1.2), "p_min and p_max"),
        (lambda: A.Bernoulli.label_correlated(np.array([0, -1]), 0.2, 0.8), "labels"),
        (lambda: A.Bernoulli.label_correlated(np.arange(10), 0.2, 0.8, max_label=5), "max_label"),
        (lambda: A.Markov(1.5, 0.1), "p_on must be"),
        (lambda: A.Markov(0.1, np.array([0.2, -0.2])), "p_off must be"),
        (lambda: A.Markov(np.full(2, 0.1), np.full(3, 0.1)), "same length"),
        (lambda: A.Markov(np.array([0.0, 0.2]), 0.0), r"p_on \+ p_off"),
        (lambda: A.Markov(0.1, 0.1, initial="all"), "initial"),
        (lambda: A.HourOfDay(24), START_HOUR),
        (lambda: A.HourOfDay(np.array([3, -1])), START_HOUR),
        (lambda: A.HourOfDay(np.array([1.5, 2.0])), "start_hour"),
        (lambda: A.HourOfDay(0, hours=0), "hours must be"),
        (lambda: A.HourOfDay(0, hours=25), "hours must be"),
        (lambda: A.HourOfDay(0, rounds_per_hour=0), "rounds_per_hour"),
        (lambda: A.HourOfDay.quietest_window(np.ones((3, 12))), r"\[N, 24\]"),
        (lambda: A.diurnal(np.arange(10), D=1, E=0), "E must"),
        (lambda: A.Trace(np.ones((3, 0), bool)), "mask_table"),
        (lambda: A.Trace(np.ones((3, 2), bool), cyclic="no"), "cyclic"),
        (lambda: A.Trace.from_intervals([[(0, 3)], [(2, 9)]], num_steps=8), r"intervals\[1\]"),
        (lambda: A.Trace.from_intervals([[(4, 3)]], num_steps=8), r"intervals\[0\]"),
        (lambda: A.Trace.from_intervals([[(0, 1, 2)]], num_steps=8), "pairs"),
        (lambda: A.Trace.from_intervals([[(0, 1)]], num_steps=0), "num_steps"),
        (lambda: A.all_of(), "processes"),
    ],
)
def test_bad_parameters_fail_at_construction(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_combinators_reject_non_processes():
    with pytest.raises(TypeError, match=r"processes\[1\]"):
        A.all_of(A.AlwaysOn(), 0.5)


@pytest.mark.parametrize(
    "process, match",
    [
        (A.Markov(np.full(4, 0.1), 0.2), "p_on has 4 entries"),
        (A.HourOfDay(np.arange(4)), "start_hour has 4 entries"),
        (A.all_of(A.AlwaysOn(), A.Trace(np.ones((2, 4), bool))), "width must be N"),
    ],
)
def test_widths_are_checked_against_num_clients_before_compute(process, match):
    with pytest.raises(ValueError, match=match):
        A.sample(process, 5, 3)


# ----------------------------------------------------------------------------- simulate


@pytest.mark.parametrize(
    "process",
    [
        A.Markov(0.3, 0.3),
        A.all_of(A.HourOfDay(np.arange(12) % 24, hours=12), A.Bernoulli(0.8)),
    ],
    ids=["markov", "hours_and_bernoulli"],
)
def test_simulate_runs_under_the_new_processes(process):
    points = np.array(list(itertools.product([-1.0, 0.0, 1.0], [0.0, 2.0, 4.0, 6.0])))
    fd = point_clients(points)
    alg = fa.algorithms.FedAvg(clients_per_round=4, local_steps=1, batch_size=1, client_lr=0.1)
    result = fa.simulate(quadratic_task(2), fd, alg, process, rounds=30, seed=3, eval_every=10)
    masks = A.sample(process, 12, 30, seed=3)
    np.testing.assert_array_equal(result.round_metrics["num_available"], masks.sum(axis=1))
    np.testing.assert_array_equal(result.round_metrics["num_selected"],
                                  np.minimum(masks.sum(axis=1), 4))
    assert result.history["train_loss"][-1] < result.history["train_loss"][0]
