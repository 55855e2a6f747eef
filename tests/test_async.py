"""Asynchronous algorithms and the clock (issue 7): reductions, closed forms, the event schedule
of ``fedbuff.md`` section 5, staleness laws, availability."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import point_clients, quadratic_task
from jax.flatten_util import ravel_pytree
from reference import loop

import fedjax_avail as fa
from fedjax_avail.algorithms._staleness import exponential_weights, staleness_factor
from fedjax_avail.algorithms._wkafl import _clip

ALG = fa.algorithms


def _flat(params):
    return np.asarray(ravel_pytree(params)[0])


@pytest.fixture(scope="module")
def digits_fd(digits):
    train, _ = digits
    return fa.data.one_label_per_client(train["x"], train["y"], 20, seed=0)


def test_the_event_schedule_of_the_fedbuff_spec():
    # fedbuff.md section 5: n = 5, K = 2, job times D = [3.0, 4.1, 5.3, 6.7, 8.9], everyone
    # starts at 0 and restarts at once; the table's SOLID rows are the 7 server updates.
    durations = np.array([3.0, 4.1, 5.3, 6.7, 8.9])
    alg = ALG.FedBuff(buffer_size=2, local_steps=1, batch_size=1, client_lr=0.1,
                      durations=fa.clock.Constant(1.0, speed=1 / durations))
    result = fa.simulate(quadratic_task(), point_clients(np.arange(5.0)[:, None]), alg,
                         fa.availability.AlwaysOn(), rounds=7)
    m = result.round_metrics
    np.testing.assert_allclose(m["virtual_time"], [4.1, 6.0, 8.2, 9.0, 12.0, 13.4, 15.9],
                               rtol=1e-6)
    assert m["applied_clients"].tolist() == [[0, 1], [2, 0], [3, 1], [4, 0], [2, 0], [1, 3],
                                             [0, 2]]
    assert m["applied_staleness"].tolist() == [[0, 0], [1, 1], [2, 1], [3, 1], [3, 0], [2, 3],
                                               [1, 2]]


@pytest.mark.parametrize("history", [64, None])
def test_fedbuff_with_one_slot_and_buffer_one_is_fedavg_with_one_client(digits_fd, history):
    # One client available per round (a different one each round): FedBuff's single job is
    # that client's, started from the current model (fedbuff.md fact 5).
    fd = digits_fd
    n, rounds = fd.num_clients, 12
    table = np.zeros((rounds, n), bool)
    table[np.arange(rounds), (np.arange(rounds) * 7) % n] = True
    process = fa.availability.Trace(table)
    kw = dict(local_steps=3, batch_size=4, client_lr=0.2)
    buff = fa.simulate(fa.tasks.logistic_regression(64, 10), fd,
                       ALG.FedBuff(buffer_size=1, concurrency=1, history=history,
                                   durations=fa.clock.Constant(1.0), **kw), process,
                       rounds=rounds)
    avg = fa.simulate(fa.tasks.logistic_regression(64, 10), fd,
                      ALG.FedAvg(clients_per_round=1, **kw), process, rounds=rounds)
    np.testing.assert_allclose(_flat(buff.params), _flat(avg.params), atol=1e-6)
    assert buff.round_metrics["applied_clients"][:, 0].tolist() == (
        (np.arange(rounds) * 7) % n).tolist()
    assert (buff.round_metrics["applied_staleness"] == 0).all()


def test_fedbuff_with_one_slot_is_sequential_local_sgd(digits_fd):
    # Every client available: the sequence of clients is random; a plain loop that trains
    # them one after another from the current model (documented batch rule) gives the model.
    fd, task = digits_fd, fa.tasks.logistic_regression(64, 10)
    alg = ALG.FedBuff(buffer_size=1, concurrency=1, local_steps=2, batch_size=3, client_lr=0.3,
                      durations=fa.clock.Exponential(1.0))
    result = fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=10, seed=4)
    clients = result.round_metrics["applied_clients"][:, 0]
    assert len(set(clients.tolist())) > 3  # uniformly random clients
    x, unravel = ravel_pytree(task.init(loop.run_keys(4)[0]))
    x = np.asarray(x, np.float64)
    for r, client in enumerate(clients):
        _, _, train_key = loop.round_keys(4, r)
        x = x + loop.client_update(task, fd, unravel(x), int(client), train_key, 2, 3, 0.3)
    np.testing.assert_allclose(_flat(result.params), x, atol=1e-5)


def test_fedbuff_with_buffer_and_concurrency_n_is_fedavg(digits_fd):
    fd, task = digits_fd, fa.tasks.logistic_regression(64, 10)
    n, kw = fd.num_clients, dict(local_steps=3, batch_size=4, client_lr=0.2)
    buff = fa.simulate(task, fd, ALG.FedBuff(buffer_size=n, concurrency=n,
                                             durations=fa.clock.Constant(2.0), **kw),
                       fa.availability.AlwaysOn(), rounds=6, seed=1)
    avg = fa.simulate(task, fd, ALG.FedAvg(clients_per_round=n, **kw),
                      fa.availability.AlwaysOn(), rounds=6, seed=1)
    np.testing.assert_allclose(_flat(buff.params), _flat(avg.params), atol=2e-6)
    assert (buff.round_metrics["applied_staleness"] == 0).all()
    np.testing.assert_allclose(buff.round_metrics["virtual_time"], 2.0 * np.arange(1, 7))


def test_constant_durations_full_concurrency_staleness_closed_form():
    # N = 6 in lockstep, K = 2 per update: the three pairs take turns, so after the first cycle
    # every contribution is N/K - 1 = 2 updates stale, and time moves by d every N/K updates.
    alg = ALG.KAsyncSGD(clients_per_round=2, batch_size=1, client_lr=0.01,
                        durations=fa.clock.Constant(1.5))
    result = fa.simulate(quadratic_task(), point_clients(np.arange(6.0)[:, None]), alg,
                         fa.availability.AlwaysOn(), rounds=12)
    r = np.arange(12)
    np.testing.assert_array_equal(result.round_metrics["applied_staleness"],
                                  np.repeat(np.minimum(r, 2)[:, None], 2, axis=1))
    np.testing.assert_allclose(result.round_metrics["virtual_time"], 1.5 * (1 + r // 3))


def test_k_of_p_staleness_is_geometric():
    # WKAFL's protocol: s + 1 ~ Geometric(K/P) on {1, 2, ...}, mean P/K (wkafl.md 6, fact 12).
    p_clients, k, rounds, burn_in = 40, 4, 3000, 300
    alg = ALG.KAsyncSGD(clients_per_round=k, batch_size=1, client_lr=0.001, history=None)
    result = fa.simulate(quadratic_task(), point_clients(np.zeros((p_clients, 1))), alg,
                         fa.availability.AlwaysOn(), rounds=rounds, eval_every=rounds)
    s = result.round_metrics["applied_staleness"][burn_in:].ravel()
    q = k / p_clients
    # Mean within 5 standard errors (geometric variance (1 - q) / q^2; K draws per round are
    # nearly independent).
    assert abs((s + 1).mean() - 1 / q) < 5 * math.sqrt((1 - q) / q**2 / s.size)
    pmf = (1 - q) ** np.arange(8) * q
    freq = np.bincount(s, minlength=8)[:8] / s.size
    assert np.all(np.abs(freq - pmf) < 5 * np.sqrt(pmf * (1 - pmf) / s.size))
    assert fa.clock.staleness_histogram(result.round_metrics).sum() == rounds * k


def test_fedbuff_follows_the_quadratic_recursion_step_by_step():
    # fedbuff.md fact 8 for f_i(w) = ||w - c_i||^2 (gradient 2 (w - c_i)), full batches:
    # u = (1 - (1 - 2 eta)^Q) (c - w^v) from the job's start w^v, and w^{t+1} = w^t + beta sum u.
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(8, 2))
    eta, q_steps, k = 0.1, 2, 3
    alg = ALG.FedBuff(buffer_size=k, local_steps=q_steps, batch_size=1, client_lr=eta,
                      history=None, durations=fa.clock.Exponential(1.0))
    rounds = 40
    result = fa.simulate(quadratic_task(2), point_clients(centres), alg,
                         fa.availability.AlwaysOn(), rounds=rounds, seed=2)
    m = result.round_metrics
    assert m["applied_staleness"].max() >= 2  # stale contributions were applied
    a = 1 - (1 - 2 * eta) ** q_steps
    w = [np.zeros(2)]
    for t in range(rounds):
        step = sum(a * (centres[c] - w[t - s]) for c, s in
                   zip(m["applied_clients"][t], m["applied_staleness"][t], strict=True) if c >= 0)
        w.append(w[t] + step / k)
    np.testing.assert_allclose(result.params, w[-1], atol=1e-5)


@pytest.mark.slow
def test_history_and_per_client_copies_agree_and_short_histories_drop(digits_fd):
    fd, task = digits_fd, fa.tasks.logistic_regression(64, 10)
    kw = dict(buffer_size=3, local_steps=2, batch_size=2, client_lr=0.2, concurrency=12)
    runs = {h: fa.simulate(task, fd, ALG.FedBuff(history=h, **kw), fa.availability.Bernoulli(0.8),
                           rounds=40, seed=3) for h in (None, 64)}
    assert runs[64].round_metrics["applied_staleness"].max() < 64
    np.testing.assert_array_equal(_flat(runs[None].params), _flat(runs[64].params))
    with pytest.warns(UserWarning, match="contributions were dropped"):
        short = fa.simulate(task, fd, ALG.FedBuff(history=2, **kw),
                            fa.availability.Bernoulli(0.8), rounds=40, seed=3)
    assert short.round_metrics["dropped_stale"].sum() > 0
    assert short.round_metrics["applied_staleness"].max() <= 1


def test_offline_clients_never_start_and_jobs_never_come_from_the_future(digits_fd):
    # The table is indexed by slot (virtual time // 1). A job applied in update r with
    # staleness s started from version v = r - s: at a time in [T(v - 1), T(v)] (T(u): the
    # time of update u) and completed in [T(r - 1), T(r)]. Its client was available when it
    # started; with "lost" it stayed available through every slot the job surely ran in.
    fd = digits_fd
    n, slots, rounds = fd.num_clients, 200, 60
    table = np.random.default_rng(1).random((slots, n)) < 0.5
    table[:, 0] = False  # client 0 is never available
    for offline in ("lost", "late"):
        alg = ALG.FedBuff(buffer_size=2, local_steps=1, batch_size=2, concurrency=6,
                          offline=offline, durations=fa.clock.Exponential(1.0))
        result = fa.simulate(fa.tasks.logistic_regression(64, 10), fd, alg,
                             fa.availability.Trace(table, cyclic=False), rounds=rounds, seed=5)
        m = result.round_metrics
        slot = np.floor(m["virtual_time"]).astype(int)
        assert slot[-1] < slots
        for r in range(rounds):
            for c, s in zip(m["applied_clients"][r], m["applied_staleness"][r], strict=True):
                if c < 0:
                    continue
                assert c != 0 and 0 <= s <= r  # a version from the past, or the present
                v = r - s
                started = slot[v - 1] if v >= 1 else 0
                assert table[started:slot[v] + 1, c].any(), (r, c, s)
                if offline == "lost" and v <= r - 1:  # offline clients' jobs never complete
                    assert table[slot[v]:slot[r - 1] + 1, c].all(), (r, c, s)
        if offline == "lost":
            assert m["jobs_lost"][-1] > 0


def test_wkafl_reduces_to_k_async_sgd(digits_fd):
    # wkafl.md 6, fact 1: alpha = 0, no clip, stage 1 only, sim_min = -1, beta = 0, gamma = 0.
    fd, task = digits_fd, fa.tasks.logistic_regression(64, 10)
    kw = dict(clients_per_round=5, batch_size=4, client_lr=0.05)
    wkafl = ALG.WKAFL(**kw, alpha=0.0, clip=1e30, sim_min=-1.0, beta=0.0, gamma=0.0,
                      switch_round=10**6)
    runs = [fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=30, seed=6)
            for alg in (wkafl, ALG.KAsyncSGD(**kw))]
    np.testing.assert_allclose(_flat(runs[0].params), _flat(runs[1].params), atol=2e-6)
    assert runs[0].round_metrics["applied_staleness"].max() > 0


def test_staleness_weights_sum_to_one_and_are_shift_invariant():
    s = jnp.array([0, 3, 1, 7], jnp.int32)
    valid = jnp.array([True, True, False, True])
    w = exponential_weights(s, valid)
    np.testing.assert_allclose(float(w.sum()), 1.0, rtol=1e-6)
    assert float(w[2]) == 0.0 and float(w[0]) > float(w[1]) > float(w[3])
    np.testing.assert_allclose(exponential_weights(s + 1000, valid), w, rtol=1e-6)
    expected = (math.e / 2) ** -np.array([0.0, 3, 7])
    np.testing.assert_allclose(np.asarray(w)[[0, 1, 3]], expected / expected.sum(), rtol=1e-6)
    np.testing.assert_allclose(staleness_factor(jnp.array([0, 3]), "polynomial", a=0.5),
                               [1.0, 0.5])
    np.testing.assert_allclose(staleness_factor(jnp.array([2, 6]), "hinge", a=1.0, b=4),
                               [1.0, 1 / 3])


def test_wkafl_clipping_bounds():
    # wkafl.md 6, fact 7: ||g^_i|| <= CB; stage 2 also ||g^_i|| <= B ||g_bar||, direction kept.
    rng = np.random.default_rng(0)
    g = jnp.asarray(rng.normal(scale=50.0, size=(6, 9)), jnp.float32)
    clipped = _clip(g, 100.0)
    assert float(jnp.linalg.norm(clipped, axis=1).max()) <= 100.0 * (1 + 1e-6)
    alg = ALG.WKAFL(clients_per_round=6, clip=20.0, relative_clip=0.5, sim_min=-1.0)
    g = _clip(g, alg.clip)
    a = exponential_weights(jnp.arange(6), jnp.ones(6, bool))
    estimate = a @ g
    for stage in (1, 2):
        update, chosen = alg._select(g, estimate, a, jnp.ones(6, bool), jnp.int32(stage))
        bound = alg.clip if stage == 1 else min(alg.clip, 0.5 * float(jnp.linalg.norm(estimate)))
        assert float(jnp.linalg.norm(update)) <= bound * (1 + 1e-5)
        assert int(chosen) == 6


def test_wkafl_stage_switches_by_round_or_by_loss_once(digits_fd):
    fd, task = digits_fd, fa.tasks.logistic_regression(64, 10)
    by_round = fa.simulate(task, fd, ALG.WKAFL(clients_per_round=4, client_lr=0.05,
                                               switch_round=7), fa.availability.AlwaysOn(),
                           rounds=12)
    assert by_round.round_metrics["stage"].tolist() == [1] * 7 + [2] * 5
    by_loss = fa.simulate(task, fd, ALG.WKAFL(clients_per_round=4, client_lr=0.05,
                                              stage_switch="loss", loss_threshold=2.2),
                          fa.availability.AlwaysOn(), rounds=60)
    stage = by_loss.round_metrics["stage"]
    first = int(np.argmax(stage == 2))
    assert 0 < first and (stage[first:] == 2).all()  # one-way


def test_async_history_columns(digits_fd):
    result = fa.simulate(fa.tasks.logistic_regression(64, 10), digits_fd,
                         ALG.FedAsync(local_steps=2, batch_size=2), fa.availability.AlwaysOn(),
                         rounds=20, eval_every=10)
    h = result.history
    assert {"virtual_time", "staleness_mean", "staleness_max"} <= set(h.columns)
    s = result.round_metrics["applied_staleness"]
    np.testing.assert_allclose(h["staleness_mean"][1:], [s[:10].mean(), s[10:].mean()])
    np.testing.assert_allclose(h["virtual_time"][1:], result.round_metrics["virtual_time"][[9, 19]])


def test_async_state_memory_grows_with_history_not_clients():
    est = {}
    for n in (1000, 100_000):
        fd = fa.FederatedData(arrays={"x": np.zeros((n, 64), np.uint8),
                                      "y": np.zeros(n, np.int32)},
                              offsets=np.arange(n, dtype=np.int32), counts=np.ones(n, np.int32))
        est[n] = fa.estimate_memory(fa.tasks.logistic_regression(64, 10), fd,
                                    ALG.FedBuff(buffer_size=10, history=64, concurrency=100))
    p = 650
    for e in est.values():
        assert e.terms["server_state"] >= 64 * p * 4  # the [H, P] history
    # Per-client state is [N] flags and speeds, not [N, P] models.
    assert est[100_000].terms["per_client_tables"] < 100_000 * 16
    assert est[100_000].terms["server_state"] == est[1000].terms["server_state"]


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's working set")
@pytest.mark.parametrize("name", ["FedAsync", "FedLaAvg"])  # FedBuff, K-async: FedAsync's read
def test_one_client_a_step_never_copies_the_model_history_or_table(name):
    # MNIST logistic regression (P = 7850), H = 256: the [H, P] store is 8 MB. An update that
    # read one start model wrote its new row in place only after XLA copied the store twice
    # (262 P-rows of working set); FedLaAvg with K = 1 likewise copied its [N, P] table (82
    # P-rows at N = 40). The step itself needs a few P-vectors.
    rng = np.random.default_rng(0)
    fd = fa.data.iid(rng.integers(0, 256, (200, 784)).astype(np.uint8),
                     rng.integers(0, 10, 200), 40)
    events = dict(history=256, concurrency=20, durations=fa.clock.Exponential(1.0))
    alg = {"FedAsync": lambda: ALG.FedAsync(local_steps=2, batch_size=5, **events),
           "FedLaAvg": lambda: ALG.FedLaAvg(clients_per_round=1, local_steps=2, batch_size=5),
           }[name]()
    result = fa.simulate(fa.tasks.logistic_regression(784, 10), fd, alg,
                         fa.availability.AlwaysOn(), rounds=2)
    assert result.memory["working_set"] < 16 * 7850 * 4, result.memory


def test_fedavg_rounds_last_as_long_as_their_slowest_client(digits_fd):
    n = digits_fd.num_clients
    speed = np.linspace(0.5, 2.0, n)
    alg = ALG.FedAvg(clients_per_round=n, local_steps=1, batch_size=2,
                     durations=fa.clock.Constant(3.0, speed=speed))
    result = fa.simulate(fa.tasks.logistic_regression(64, 10), digits_fd, alg,
                         fa.availability.AlwaysOn(), rounds=5, eval_every=5)
    np.testing.assert_allclose(result.round_metrics["virtual_time"], 3.0 / 0.5 * np.arange(1, 6),
                               rtol=1e-6)
    assert result.history["virtual_time"][-1] == pytest.approx(30.0)


def test_labels_per_client_is_wkafl_algorithm_4(mnist):
    train, _ = mnist
    for labels in (1, 5, 10):
        fd = fa.data.labels_per_client(train["x"], train["y"], 300, labels, seed=labels)
        assert fd.num_clients == 300
        distinct = [len(np.unique(fd.client(i)["y"])) for i in range(300)]
        assert max(distinct) <= labels and (labels > 1 or min(distinct) == 1)
        if labels == 1:  # the total is D_num exactly: uniform on 10..49
            assert fd.counts.min() >= 10 and fd.counts.max() <= 49
            assert abs(fd.counts.mean() - 29.5) < 5 * 11.5 / np.sqrt(300)
        else:  # rounding moves the total by at most L_num / 2
            assert fd.counts.min() >= 10 - labels / 2 and fd.counts.max() <= 49 + labels / 2
        # Within a client, examples are distinct (drawn without replacement per label).
        for i in range(0, 300, 50):
            images = fd.client(i)["x"].reshape(fd.counts[i], -1)
            assert len(np.unique(images, axis=0)) == fd.counts[i]
