"""Full-batch passes over unbalanced clients: blocked, exact, and counted by the estimate."""

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from reference.full_batch import logistic_full_batch

import fedjax_avail as fa
from fedjax_avail.local import Problem, full_batch


def _clients(counts, features, dtype=np.uint8, seed=0):
    """Random examples (10 classes) for clients of the given sizes, stored flat."""
    rng = np.random.default_rng(seed)
    counts = np.asarray(counts, np.int32)
    m = int(counts.sum())
    x = (rng.integers(0, 256, (m, features), dtype=np.uint8) if dtype == np.uint8
         else rng.normal(size=(m, features)).astype(dtype))
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
    return fa.FederatedData(arrays={"x": x, "y": rng.integers(0, 10, m).astype(np.int32)},
                            offsets=offsets, counts=counts)


@pytest.mark.parametrize("block, chunk", [(7, None), (256, 3), (1000, None)])
def test_full_batch_equals_a_per_client_loop(block, chunk):
    # 700 rows: 100 blocks of 7, 3 blocks of 234, or one block; 1-row and 2-row clients mostly
    # padding; 256 and 257 on either side of a block edge.
    fd = _clients([700, 1, 3, 256, 257, 5, 600, 2], 12)
    task = fa.tasks.logistic_regression(12, 10)
    params = jax.tree.map(lambda a: jnp.asarray(
        np.random.default_rng(1).normal(size=a.shape) * 0.5, a.dtype),
        task.init(jax.random.PRNGKey(0)))
    clients = jnp.array([3, 0, 7, 4, 1, 6], jnp.int32)

    @jax.jit
    def run(params, data, clients):
        problem = Problem(task, data)
        grads, losses = full_batch(problem, params, clients, chunk=chunk, block=block)
        _, only = full_batch(problem, params, clients, chunk=chunk, block=block,
                             with_grads=False)
        return grads, losses, only

    grads, losses, only = run(params, fd, clients)
    layer = params["DenseOI_0"]
    dw, db, want = logistic_full_batch(layer["kernel"], layer["bias"],
                                       np.asarray(fd.arrays["x"]) / 255.0, fd.arrays["y"],
                                       fd.offsets, fd.counts, np.asarray(clients))
    want_grads = np.stack([ravel_pytree({"DenseOI_0": {"bias": b, "kernel": w}})[0]
                           for w, b in zip(dw, db, strict=True)])
    np.testing.assert_allclose(losses, want, rtol=2e-5)
    np.testing.assert_allclose(only, want, rtol=2e-5)
    np.testing.assert_allclose(grads, want_grads, rtol=1e-4, atol=1e-6)


def test_full_batch_memory_follows_the_block_not_the_largest_client():
    task = fa.tasks.logistic_regression(16, 10)
    params = task.init(jax.random.PRNGKey(0))

    def temp_bytes(largest):
        fd = _clients([largest] + [1] * 7, 16, np.float32)
        fn = jax.jit(lambda p, d, c: full_batch(Problem(task, d), p, c))
        compiled = fn.lower(params, fd, jnp.arange(8)).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    small, large = temp_bytes(2_560), temp_bytes(25_600)  # both in blocks of 256 rows
    assert large <= 1.2 * small, (small, large)
    assert large < 8 * 25_600 * 16 * 4 / 10  # far below 8 members padded to 25,600 rows


def test_full_batch_refuses_a_bad_block():
    fd = _clients([3, 1], 4)
    task = fa.tasks.logistic_regression(4, 10)
    with pytest.raises(ValueError, match=r"block must be an integer >= 1, got 0"):
        full_batch(Problem(task, fd), task.init(jax.random.PRNGKey(0)), jnp.arange(2), block=0)


# the 50,000-row client's passes run for half a minute compiled the default tier's quick way
# (tests/conftest.py): the long tier
@pytest.mark.parametrize("largest, others", [(10_000, 99),
                                             pytest.param(50_000, 999, marks=pytest.mark.slow)])
@pytest.mark.parametrize("selection", ["PowerOfChoice", "DivFL"])
def test_estimate_is_within_20_percent_of_measured_for_unbalanced_clients(
        largest, others, selection):
    fd = _clients([largest] + [1] * others, 784)  # MNIST-shaped uint8 rows
    task = fa.tasks.logistic_regression(784, 10)
    strategy = (fa.selection.PowerOfChoice(d=20) if selection == "PowerOfChoice"
                else fa.selection.DivFL())
    alg = fa.algorithms.FedAvg(clients_per_round=10, selection=strategy)
    estimate = fa.estimate_memory(task, fd, alg, fa.availability.AlwaysOn())
    gc.collect()  # earlier tests' unreachable arrays, freed mid-run, would count
    result = fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=2, eval_every=2)
    measured = result.memory["measured"]  # device arrays held + XLA's temporaries of a round
    assert result.memory["estimated"] == estimate.total
    assert abs(estimate.total - measured) <= 0.2 * measured, (estimate.describe(), measured)
    assert "full_batch_working_set" in estimate.describe()
