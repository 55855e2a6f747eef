"""client_chunk="auto" (issue 17, part 3): on a CPU a large cohort is trained in chunks that
keep each chunk's working sets in ``CPU_CHUNK_BYTES``; the choice changes results by float
reordering at most, and never the full-batch passes."""

import jax
import numpy as np
import pytest

import fedjax_avail as fa
from fedjax_avail import memory

LR_MEMBER = (4 * 7850 + 5 * 785) * 4  # 4 P-vectors, one batch of B = 5 rows (784 pixels, a label)


def _images(num_clients: int, rows_each: int = 4) -> fa.FederatedData:
    rng = np.random.default_rng(0)
    rows = num_clients * rows_each
    return fa.FederatedData.from_arrays(
        {"x": rng.integers(0, 256, (rows, 784)).astype(np.uint8),
         "y": rng.integers(0, 10, rows)}, np.arange(rows) % num_clients,
        num_clients=num_clients)


def _fedavg(k: int) -> fa.algorithms.FedAvg:
    return fa.algorithms.FedAvg(clients_per_round=k, local_steps=2, batch_size=5,
                                client_lr=0.01)


@pytest.mark.parametrize(("k", "chunk"), [(1000, 59), (100, 50), (60, 30), (59, None),
                                          (10, None)])
def test_auto_on_a_cpu_splits_the_cohort_evenly_into_chunks_that_fit_the_budget(k, chunk):
    task, fd = fa.tasks.logistic_regression(784, 10), _images(1000, 1)
    most = memory.CPU_CHUNK_BYTES // LR_MEMBER  # 59 members of MNIST logistic regression
    assert most == 59
    train, full_batch = memory.client_chunks("auto", task, fd, _fedavg(k), backend="cpu")
    assert (train, full_batch) == (chunk, None)
    if chunk is not None:  # as few chunks as fit, as even as they come: no member is padding
        assert chunk <= most and -(-k // chunk) == -(-k // most)
        assert k % chunk == 0 or chunk * (-(-k // chunk)) - k < -(-k // chunk)


def test_auto_is_one_vmap_off_the_cpu_and_an_explicit_value_bounds_both_passes():
    task, fd, alg = fa.tasks.logistic_regression(784, 10), _images(1000, 1), _fedavg(1000)
    assert memory.client_chunks("auto", task, fd, alg, backend="gpu") == (None, None)
    assert memory.client_chunks(7, task, fd, alg) == (7, 7)
    assert memory.client_chunks(None, task, fd, alg) == (None, None)
    with pytest.raises(ValueError, match=r"client_chunk must be None or an integer >= 1.*got "
                                         r"'all'"):
        fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=1, client_chunk="all")


def test_the_estimate_counts_the_members_trained_at_once():
    task, fd, alg = fa.tasks.logistic_regression(784, 10), _images(1000, 1), _fedavg(1000)
    terms = {chunk: fa.estimate_memory(task, fd, alg, client_chunk=chunk).terms[
        "cohort_working_set"] for chunk in (None, 10, "auto")}
    assert terms[None] == 1000 * LR_MEMBER and terms[10] == 10 * LR_MEMBER
    train, _ = memory.client_chunks("auto", task, fd, alg)
    assert terms["auto"] == (train or 1000) * LR_MEMBER


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="'auto' chunks on a CPU only")
def test_auto_trains_in_its_chunks_and_matches_one_vmap_up_to_float_reordering():
    task, fd, alg = fa.tasks.logistic_regression(784, 10), _images(64), _fedavg(64)
    train, _ = memory.client_chunks("auto", task, fd, alg)
    assert train == 32  # 64 members x 141 KB > 8 MiB: two chunks

    def run(chunk):
        return fa.simulate(task, fd, alg, fa.availability.Bernoulli(0.9), rounds=3, seed=2,
                           eval_every=3, client_chunk=chunk)

    auto, chunked, whole = run("auto"), run(32), run(None)
    flat = [np.concatenate([np.ravel(a) for a in jax.tree.leaves(r.params)])
            for r in (auto, chunked, whole)]
    np.testing.assert_array_equal(flat[0], flat[1])  # "auto" is client_chunk=32 here
    np.testing.assert_allclose(flat[0], flat[2], rtol=1e-5, atol=1e-7)
    for name in ("num_available", "num_selected"):
        np.testing.assert_array_equal(auto.round_metrics[name], whole.round_metrics[name])
    for run_, chunk in ((auto, 32), (whole, None)):  # what each run planned its memory for
        assert run_.memory["estimated"] == fa.estimate_memory(
            task, fd, alg, fa.availability.Bernoulli(0.9), client_chunk=chunk).total
    assert auto.memory["estimated"] < whole.memory["estimated"]
    loss = auto.history["train_loss"]
    assert loss[-1] < loss[0]  # the rounds trained (the comparison is not of idle models)
