"""One battery every algorithm must pass. Adding an algorithm adds one line to ALGORITHMS."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import point_clients, quadratic_task

import fedjax_avail as fa
from fedjax_avail.algorithms import RoundInput
from fedjax_avail.local import Problem

KW = dict(clients_per_round=4, local_steps=3, batch_size=2)
ALGORITHMS = {
    "fedsgd": lambda: fa.algorithms.FedSGD(clients_per_round=4, batch_size=2, client_lr=0.02),
    "fedavg": lambda: fa.algorithms.FedAvg(**KW, client_lr=0.02),
    "fedprox": lambda: fa.algorithms.FedProx(**KW, client_lr=0.02, mu=0.5),
    "fedadam": lambda: fa.algorithms.FedAdam(**KW, client_lr=0.02, server_lr=0.01),
    "fedlaavg": lambda: fa.algorithms.FedLaAvg(**KW, client_lr=0.02),
    "mifa": lambda: fa.algorithms.MIFA(**KW, client_lr=0.02, lr_decay=False,
                                   start="immediately"),
    "mifa_after_all_seen": lambda: fa.algorithms.MIFA(**KW, client_lr=0.02, lr_decay=False),
    "sequential": lambda: fa.algorithms.SequentialSGD(**KW, lr=0.004),
    "kasync": lambda: fa.algorithms.KAsyncSGD(clients_per_round=4, batch_size=2, client_lr=0.02),
    "twafl": lambda: fa.algorithms.TWAFL(clients_per_round=4, batch_size=2, client_lr=0.02),
    "sasgd": lambda: fa.algorithms.SASGD(clients_per_round=4, batch_size=2, client_lr=0.05),
    "gsgm": lambda: fa.algorithms.GSGM(clients_per_round=4, batch_size=2, client_lr=0.02),
    "wkafl": lambda: fa.algorithms.WKAFL(clients_per_round=4, batch_size=2, client_lr=0.02,
                                         switch_round=100),
    "fedbuff": lambda: fa.algorithms.FedBuff(buffer_size=4, local_steps=3, batch_size=2,
                                             client_lr=0.02, concurrency=6,
                                             durations=fa.clock.Constant(1.0)),
    "fedasync": lambda: fa.algorithms.FedAsync(local_steps=3, batch_size=2, client_lr=0.02,
                                               mixing=0.3),
}


def _points(n, seed=0):
    return np.random.default_rng(seed).normal(size=(n, 3)).astype(np.float32)


@pytest.fixture(params=sorted(ALGORITHMS))
def algorithm(request):
    return ALGORITHMS[request.param]()


def test_round_keeps_state_structure_and_traces_once(algorithm):
    fd, task = point_clients(_points(10)), quadratic_task(3)
    state = algorithm.init(task.init(jax.random.PRNGKey(0)), fd.num_clients)
    traces = []

    def body(state, r):
        traces.append(1)
        inputs = RoundInput(r, jnp.arange(10) % 2 == r % 2, jax.random.fold_in(
            jax.random.PRNGKey(0), r))
        return algorithm.round(state, inputs, Problem(task, fd))

    run = jax.jit(lambda s: jax.lax.scan(body, s, jnp.arange(6)))
    out, _ = run(state)
    run(out)
    assert len(traces) == 1
    shapes = lambda s: jax.tree.map(lambda a: (jnp.shape(a), jnp.result_type(a)), s)  # noqa: E731
    assert shapes(out) == shapes(state)


def test_bit_identical_for_a_seed(algorithm):
    fd, task = point_clients(_points(10)), quadratic_task(3)
    runs = [fa.simulate(task, fd, algorithm, fa.availability.Bernoulli(0.6), rounds=8, seed=s)
            for s in (1, 1, 2)]
    np.testing.assert_array_equal(runs[0].params, runs[1].params)
    assert not np.array_equal(runs[0].params, runs[2].params)


def test_converges_on_a_quadratic(algorithm):
    points = _points(8, seed=3)
    fd, task = point_clients(points), quadratic_task(3)
    fields = {f.name for f in dataclasses.fields(algorithm)}
    changes = {name: value for name, value in (  # no cohort sampling noise
        ("clients_per_round", 8), ("buffer_size", 8), ("concurrency", None)) if name in fields}
    algorithm = dataclasses.replace(algorithm, **changes)
    result = fa.simulate(task, fd, algorithm, fa.availability.AlwaysOn(), rounds=400,
                         eval_every=400)
    # The optimum of the mean of ||x - e_i||^2 is the mean point, where the loss is the spread.
    optimum = points.mean(axis=0)
    np.testing.assert_allclose(result.params, optimum, atol=0.1)
    best = np.mean(np.sum((points - optimum) ** 2, axis=1))
    assert result.history["train_loss"][-1] - best < 0.02 * (result.history["train_loss"][0] - best)


def test_cohort_compute_does_not_grow_with_N(algorithm):
    """Round FLOPs grow only by O(1) bookkeeping per client (selection), never by training all N."""
    task = fa.tasks.logistic_regression(64, 10)

    def flops(n):
        rng = np.random.default_rng(0)
        fd = fa.data.iid(rng.integers(0, 255, (n * 4, 8, 8)).astype(np.uint8),
                         rng.integers(0, 10, n * 4), n)
        state = algorithm.init(task.init(jax.random.PRNGKey(0)), n)
        inputs = RoundInput(jnp.int32(0), jnp.ones(n, bool), jax.random.PRNGKey(1))
        step = jax.jit(lambda s, d: algorithm.round(s, inputs, Problem(task, d)))
        return step.lower(state, jax.device_put(fd)).compile().cost_analysis()["flops"]

    per_extra_client = (flops(5000) - flops(50)) / 4950
    # Training one client costs C*B*(64*10)*~6 flops = 23,040 here (C = 3, B = 2). Bookkeeping
    # over all N (availability draws, selection ranks, the async clock's slots and duration
    # draws) costs O(1) per client, at most a few hundred flops; training all N would cost
    # 23,040 per client.
    assert per_extra_client < 1000, per_extra_client
