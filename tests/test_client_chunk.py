"""client_chunk="auto" (issue 17, part 3): on a CPU a large cohort is trained in chunks that
keep each chunk's working sets in ``CPU_CHUNK_BYTES``; the choice changes results by float
reordering at most, and never the full-batch passes."""

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_avail as fa
from fedjax_avail import cohort as cohort_lib
from fedjax_avail import memory


def _lr_activations() -> int:
    """Activations of MNIST logistic regression on B = 5 rows: 50 logits and the label lookups
    (how many the loss makes depends on optax's version)."""
    task = fa.tasks.logistic_regression(784, 10)
    rows = {"x": jax.ShapeDtypeStruct((5, 784), np.uint8),
            "y": jax.ShapeDtypeStruct((5,), np.int32)}
    jaxpr = jax.make_jaxpr(task.loss)(task.init(jax.random.PRNGKey(0)), rows).jaxpr
    count = memory._layer_outputs(jaxpr, True)
    assert 50 <= count <= 70
    return count


# One member of MNIST logistic regression (P = 7850): 4 P-vectors (its delta included), one
# batch of B = 5 rows (784 pixels, a label) and their activations
LR_MEMBER = (4 * 7850 + 5 * 785 + _lr_activations()) * 4


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


@pytest.mark.parametrize(("k", "chunk"), [(1000, 11), (100, 10), (60, 10), (12, 6), (11, None),
                                          (10, None)])
def test_auto_on_a_cpu_splits_the_cohort_evenly_into_chunks_that_fit_the_budget(k, chunk):
    task, fd = fa.tasks.logistic_regression(784, 10), _images(1000, 1)
    most = memory.CPU_CHUNK_BYTES // LR_MEMBER  # 11 members of MNIST logistic regression
    assert most == 11
    # no full-batch passes (uniform selection): the second value repeats the first
    assert memory.client_chunks("auto", task, fd, _fedavg(k), backend="cpu") == (chunk, chunk)
    divfl = fa.algorithms.FedAvg(clients_per_round=k, batch_size=5,
                                 selection=fa.selection.DivFL())
    assert memory.client_chunks("auto", task, fd, divfl, backend="cpu") == (chunk, None)
    if chunk is not None:  # as few chunks as fit, as even as they come
        blocks = -(-k // chunk)
        assert chunk <= most and blocks == -(-k // most) and blocks * chunk - k < blocks


def test_a_member_past_the_budget_trains_alone():
    # the MLP 784-200-200-10: 3 MiB a member (its four P-vectors alone pass 1.5 MiB)
    task, fd = fa.tasks.mlp(784, (200, 200), 10), _images(1000, 1)
    assert 4 * 199_210 * 4 > memory.CPU_CHUNK_BYTES
    assert memory.client_chunks("auto", task, fd, _fedavg(40), backend="cpu") == (1, 1)


def test_auto_counts_batched_runs_and_leaves_accelerators_one_vmap():
    task, fd, alg = fa.tasks.logistic_regression(784, 10), _images(1000, 1), _fedavg(100)
    assert memory.client_chunks("auto", task, fd, alg, backend="cpu", runs_at_once=2) == (5, 5)
    clients = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("clients",))
    assert memory.client_chunks("auto", task, fd, alg, backend="cpu", mesh=clients) == (10, 10)
    assert memory.client_chunks("auto", task, fd, alg, backend="gpu") == (None, None)
    assert memory.client_chunks("auto", task, fd, alg, backend="gpu", runs_at_once=8) == (
        None, None)
    # the platform read from a concrete mesh's devices (this process's: a CPU)
    one = fa.mesh.cohort_mesh(1)
    expected = (10, 10) if jax.default_backend() == "cpu" else (None, None)
    assert memory.client_chunks("auto", task, fd, alg, mesh=one) == expected


@pytest.mark.parametrize(("k", "devices", "chunk"), [
    (100, 1, 10), (100, 2, 10), (22, 2, None), (23, 2, 6), (1000, 2, 11), (1000, 17, 10),
    (187, 17, None), (7, 2, None)])
def test_auto_under_a_cohort_mesh_chunks_each_devices_share_of_the_cohort(k, devices, chunk):
    """Each of D devices trains its ceil(K / D) members (map_cohort), so "auto" applies the
    chunk budget to that share: 2 devices of 500 members in chunks of 11 (46 a device), while
    a share of 11 fits one vmap."""
    task, fd = fa.tasks.logistic_regression(784, 10), _images(1000, 1)
    mesh = jax.sharding.AbstractMesh((devices,), ("cohort",))
    assert memory.cohort_devices(mesh) == devices
    assert memory.client_chunks("auto", task, fd, _fedavg(k), backend="cpu", mesh=mesh) == (
        chunk, chunk)
    if chunk is not None:  # the share in as few chunks as fit the budget, as even as they come
        share, most = -(-k // devices), memory.CPU_CHUNK_BYTES // LR_MEMBER
        assert chunk <= most and -(-share // chunk) == -(-share // most)
    assert memory.client_chunks("auto", task, fd, _fedavg(k), backend="gpu", mesh=mesh) == (
        None, None)


def test_an_explicit_value_bounds_both_passes_and_a_bad_one_is_refused_by_name():
    task, fd, alg = fa.tasks.logistic_regression(784, 10), _images(1000, 1), _fedavg(1000)
    assert memory.client_chunks(7, task, fd, alg) == (7, 7)
    assert memory.client_chunks(None, task, fd, alg) == (None, None)
    for bad in ("all", 0, 2.5):
        with pytest.raises(ValueError, match="client_chunk must be None.*'auto'.*integer >= 1"):
            memory.client_chunks(bad, task, fd, alg)
        with pytest.raises(ValueError, match="client_chunk must be None"):
            fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=1, client_chunk=bad)


@dataclasses.dataclass(frozen=True)
class _StackedFedAvg(fa.algorithms.FedAvg):
    """FedAvg's rounds, estimated as an algorithm that holds its K deltas after training."""

    cohort_copies: ClassVar[int] = 1


def _stacked(k: int) -> _StackedFedAvg:
    return _StackedFedAvg(clients_per_round=k, local_steps=2, batch_size=5, client_lr=0.01)


def test_the_estimate_counts_the_members_trained_at_once_and_every_members_update():
    task, fd = fa.tasks.logistic_regression(784, 10), _images(1000, 1)
    stacked = _stacked(1000)
    terms = {chunk: fa.estimate_memory(task, fd, stacked, client_chunk=chunk).terms
             for chunk in (None, 10, "auto")}
    training = LR_MEMBER - 7850 * 4  # a member in training, its delta apart
    train, _ = memory.client_chunks("auto", task, fd, stacked)
    assert train == 11  # 1000 members in 91 chunks of 11, the last overlapping by 1
    # the K deltas are held together until aggregated, whatever the chunk, and the members
    # in training beside them (no padded stack: cohort.map_cohort)
    for chunk, members in ((None, 1000), (10, 10), ("auto", 11)):
        assert terms[chunk]["cohort_updates"] == 1000 * 7850 * 4, chunk
        assert terms[chunk]["cohort_working_set"] == members * training, chunk
    # under a "cohort" mesh of D devices: the cohort padded to D shares, each device its chunk
    two = jax.sharding.AbstractMesh((2,), ("cohort",))
    for k, chunk, members in ((1000, "auto", 2 * 11), (1000, 7, 2 * 7), (7, None, 8)):
        alg = _stacked(k)
        terms = fa.estimate_memory(task, fd, alg, client_chunk=chunk, mesh=two).terms
        padded = -(-k // 2) * 2
        assert terms["cohort_updates"] == k * 7850 * 4, (k, chunk)
        assert terms["cohort_working_set"] == (padded - k) * 7850 * 4 + members * training, (
            k, chunk)
    # FedAvg sums its deltas as the members finish (cohort.map_cohort_sum): a sum a device and
    # the members in flight, each without its start (the server's model) and its delta (added
    # to the sum as it is formed); no [K, P] array
    streamed = LR_MEMBER - 2 * 7850 * 4
    for chunk, mesh, members in ((None, None, 1000), (10, None, 10), (7, two, 2 * 7),
                                 ("auto", two, 2 * 11)):
        terms = fa.estimate_memory(task, fd, _fedavg(1000), client_chunk=chunk,
                                   mesh=mesh).terms
        sums = 1 if mesh is None else 2
        assert terms["cohort_updates"] == 0, chunk
        assert terms["cohort_working_set"] == sums * 7850 * 4 + members * streamed, chunk
    # an asynchronous update's start models are held while its members train, beside their
    # results: two [K, P] arrays, and the members in flight above them
    fedbuff = fa.algorithms.FedBuff(buffer_size=1000, concurrency=1000, history=4,
                                    local_steps=2, batch_size=5, client_lr=0.01)
    terms = fa.estimate_memory(task, fd, fedbuff, client_chunk=10).terms
    assert terms["cohort_updates"] == 2 * 1000 * 7850 * 4
    assert terms["cohort_working_set"] == 10 * training


def test_the_full_batch_estimate_counts_every_devices_chunk_under_a_cohort_mesh():
    """Under a "cohort" mesh of D devices each device takes its chunk of its share of a
    pass's members (cohort.map_cohort): D chunks of c at once hold what one device's chunk of
    D c holds, and a pass of m members pads to D shares."""
    task, fd = fa.tasks.logistic_regression(784, 10), _images(1000, 1)
    two = jax.sharding.AbstractMesh((2,), ("cohort",))

    def full_batch(selection, chunk, mesh=None, k=40):
        alg = fa.algorithms.FedAvg(clients_per_round=k, local_steps=1, batch_size=5,
                                   client_lr=0.01, selection=selection)
        return fa.estimate_memory(task, fd, alg, client_chunk=chunk,
                                  mesh=mesh).terms["full_batch_working_set"]

    for selection in (fa.selection.PowerOfChoice(d=60), fa.selection.DivFL()):
        assert full_batch(selection, 5, two) == full_batch(selection, 10) > 0
        assert full_batch(selection, 5, two) > full_batch(selection, 5)
    # no chunk: Power-of-Choice's d = 7 candidates padded to 2 shares of 4: 8 at once; DivFL's
    # [K, P] gradients of K = 39 members padded to 40 rows
    assert full_batch(fa.selection.PowerOfChoice(d=7), None, two) == full_batch(
        fa.selection.PowerOfChoice(d=8), None)
    assert full_batch(fa.selection.DivFL(), None, two, k=39) == full_batch(
        fa.selection.DivFL(), None, k=40)

@pytest.mark.parametrize("chunk", [1, 7, 13, 40, 64])
def test_chunks_give_every_member_its_own_result_and_hold_no_padded_stack(chunk):
    # K = 40 members in chunks that divide it or not (the last chunk overlapping the one
    # before), or one vmap: each member's outputs are its own, exactly (integer-valued), None
    # leaves kept; the working set is the chunk's, never a stack padded past K beside the K
    # rows sliced out of it (which 7 and 13 would pad to 42 and 52 rows)
    k, p = 40, 25_000
    rows = jnp.arange(3 * k, dtype=jnp.int32).reshape(k, 3)
    scales = jnp.arange(k, dtype=jnp.float32)

    traces = []

    def member(row, scale):
        traces.append(chunk)  # once per trace of the member function
        return {"update": jnp.full((p,), jnp.sum(row), jnp.float32) * scale,
                "first": row[0], "none": None}

    def mapped(rows, scales):
        return cohort_lib.map_cohort(member, rows, scales, chunk=chunk)

    out = jax.jit(mapped)(rows, scales)
    assert traces == [chunk]  # traced once, also for the chunks' buffer (not again for it)
    sums = np.asarray(rows).sum(axis=1)
    np.testing.assert_array_equal(out["update"], (sums * np.arange(k))[:, None] * np.ones(p))
    np.testing.assert_array_equal(out["first"], np.asarray(rows)[:, 0])
    assert out["none"] is None
    temp = jax.jit(mapped).lower(rows, scales).compile().memory_analysis().temp_size_in_bytes
    assert temp <= min(chunk, k) * p * 4 + 2**16, (temp, chunk)


def _algorithm(name: str, k: int, steps: int = 1):
    common = dict(local_steps=steps, batch_size=5, client_lr=0.01)
    if name == "FedBuff":
        return fa.algorithms.FedBuff(buffer_size=k, concurrency=k, history=4,
                                     durations=fa.clock.Exponential(1.0), **common)
    return getattr(fa.algorithms, name)(clients_per_round=k, **common)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's working set")
@pytest.mark.parametrize(("name", "chunk"), [
    ("FedAvg", 1),
    # XLA:CPU's elemental emitters (the default tier's TEST_XLA_FLAGS, tests/conftest.py) hold
    # 3x FedLaAvg's working set of its default fusion emitters: checked as users compile
    pytest.param("FedLaAvg", 1, marks=pytest.mark.slow),
    ("FedBuff", 7)])
def test_a_chunked_cohorts_estimate_is_within_20_percent_of_xla_s_working_set(name, chunk):
    # an MLP (P = 199,210), K = 40: its deltas are 32 MB, which FedAvg sums as the members
    # finish (cohort.map_cohort_sum) and FedLaAvg and FedBuff hold until aggregated, with
    # FedLaAvg's table rows and FedBuff's start models beside them (4 and 2 [K, P] arrays);
    # FedBuff's start models also while its members train, in chunks of 7 (the last one
    # overlapping). The estimate counted only the members in flight before (2.4 MB each).
    # FedAvg takes 2 local steps: a member's model and gradient (3 P-vectors with the sum);
    # from a single step XLA fuses the update and holds 2 (the estimate 1.5x over).
    task, fd = fa.tasks.mlp(784, (200, 200), 10), _images(40, 5)
    alg = _algorithm(name, 40, steps=2 if name == "FedAvg" else 1)
    terms = fa.estimate_memory(task, fd, alg, client_chunk=chunk).terms
    result = fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=1,
                         client_chunk=chunk)
    measured = result.memory["working_set"]
    cohort = terms["cohort_updates"] + terms["cohort_working_set"]
    assert abs(cohort - measured) <= 0.2 * measured, (terms, measured)
    if name == "FedAvg":
        assert measured < 40 * 199_210 * 4 / 4  # well under its 32 MB of deltas


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="'auto' chunks on a CPU only")
def test_auto_trains_in_its_chunks_and_matches_one_vmap_up_to_float_reordering(monkeypatch):
    task, fd = fa.tasks.logistic_regression(784, 10), _images(64)
    alg = fa.algorithms.FedAvg(clients_per_round=64, local_steps=2, batch_size=5,
                               client_lr=0.01, selection=fa.selection.PowerOfChoice(d=64))
    assert memory.client_chunks("auto", task, fd, alg) == (11, None)  # 64 x 141 KB > 1.5 MiB
    seen = []  # (members, chunk) of every cohort map the engine traces
    map_cohort, map_cohort_sum = cohort_lib.map_cohort, cohort_lib.map_cohort_sum

    def spy(fn, *args, chunk=None):
        seen.append((jax.tree.leaves(args)[0].shape[0], chunk))
        return map_cohort(fn, *args, chunk=chunk)

    def spy_sum(fn, weights, *args, chunk=None):
        seen.append((jax.tree.leaves(args)[0].shape[0], chunk))
        return map_cohort_sum(fn, weights, *args, chunk=chunk)

    monkeypatch.setattr(cohort_lib, "map_cohort", spy)
    monkeypatch.setattr(cohort_lib, "map_cohort_sum", spy_sum)

    def run(chunk):
        seen.clear()
        result = fa.simulate(task, fd, alg, fa.availability.Bernoulli(0.9), rounds=3, seed=2,
                             eval_every=3, client_chunk=chunk)
        return result, sorted(set(seen), key=str)

    (auto, auto_maps), (whole, whole_maps) = run("auto"), run(None)
    # training in chunks of 11; Power-of-Choice's full-batch losses of its 64 candidates whole
    assert auto_maps == [(64, 11), (64, None)] and whole_maps == [(64, None)]
    flat = [np.concatenate([np.ravel(a) for a in jax.tree.leaves(r.params)])
            for r in (auto, whole)]
    np.testing.assert_allclose(flat[0], flat[1], rtol=1e-5, atol=1e-7)
    for name in ("num_available", "num_selected"):
        np.testing.assert_array_equal(auto.round_metrics[name], whole.round_metrics[name])
    assert auto.memory["estimated"] < whole.memory["estimated"]
    assert auto.memory["client_chunk"] == 11 and whole.memory["client_chunk"] is None
    loss = auto.history["train_loss"]
    assert loss[-1] < loss[0]  # the rounds trained (the comparison is not of idle models)


def test_chunks_run_with_64_bit_integers():
    # under jax_enable_x64 the chunk loop counts in int64; the member function was traced
    # with an int32 start
    jax.config.update("jax_enable_x64", True)
    try:
        rows = jnp.arange(14.0).reshape(7, 2)
        out = jax.jit(lambda r: cohort_lib.map_cohort(lambda x: x.sum() * 2, r, chunk=3))(rows)
        np.testing.assert_array_equal(out, np.arange(14.0).reshape(7, 2).sum(1) * 2)
    finally:
        jax.config.update("jax_enable_x64", False)


@pytest.mark.parametrize("chunk", [None, 1, 4, 5, 7, 12, 30])
def test_the_cohort_sum_weighs_every_member_once_in_any_chunks(chunk):
    # K = 12 in chunks of 5 (last chunk [7, 12) retrains members 7-9) or 7 ([5, 12) retrains
    # 5-6): the sum counts each member once, the weights as given (zeros included)
    k, p = 12, 1000
    rows = jnp.arange(k * 3, dtype=jnp.float32).reshape(k, 3)
    weights = jnp.asarray([0.5, 0, 2, 1, 1, 3, 0, 1, 1, 4, 1, 0.25], jnp.float32)

    def member(row):
        return {"update": jnp.full((p,), jnp.sum(row)), "square": jnp.sum(row) ** 2}

    total = jax.jit(lambda w, r: cohort_lib.map_cohort_sum(member, w, r, chunk=chunk))(
        weights, rows)
    sums = np.asarray(rows, np.float64).sum(axis=1)  # an independent float64 reference
    w = np.asarray(weights, np.float64)
    np.testing.assert_allclose(total["update"], np.full(p, w @ sums), rtol=1e-6)
    np.testing.assert_allclose(total["square"], w @ sums**2, rtol=1e-6)


def test_the_cohort_sum_in_chunks_holds_no_stack_of_the_members_results():
    # the [K, P] results map_cohort returns are never held: a sum and a chunk's results
    k, p, chunk = 40, 25_000, 4
    rows = jnp.arange(k, dtype=jnp.float32)

    def summed(r):
        return cohort_lib.map_cohort_sum(lambda x: jnp.full((p,), x), jnp.ones(k), r,
                                         chunk=chunk)

    np.testing.assert_allclose(jax.jit(summed)(rows), np.full(p, k * (k - 1) / 2))
    temp = jax.jit(summed).lower(rows).compile().memory_analysis().temp_size_in_bytes
    assert temp <= (chunk + 2) * p * 4 + 2**16, temp
    stacked = jax.jit(lambda r: cohort_lib.map_cohort(lambda x: jnp.full((p,), x), r,
                                                      chunk=chunk).sum(0))
    assert stacked.lower(rows).compile().memory_analysis().temp_size_in_bytes >= k * p * 4


def test_fedavg_s_streamed_mean_matches_the_mean_of_its_members_deltas():
    # the round's sum as the members finish against the mean of local_sgd's [K, P] deltas
    # (the stacked path), with invalid members (weight 0) and data-size weights, in chunks of 3
    from fedjax_avail.local import Problem, local_sgd

    fd = _images(10, 4)
    task = fa.tasks.logistic_regression(784, 10)
    params = task.init(jax.random.PRNGKey(0))
    clients = jnp.asarray([0, 3, 5, 7, 9, 2, 4], jnp.int32)
    weights = jnp.asarray([1, 0, 4, 4, 0, 4, 4], jnp.float32)
    problem = Problem(task, fd, client_chunk=3)
    common = dict(steps=2, batch_size=3, lr=0.1)
    key = jax.random.PRNGKey(1)
    deltas = local_sgd(problem, params, clients, key, **common)
    total = local_sgd(problem, params, clients, key, weights=weights, **common)
    np.testing.assert_allclose(total / weights.sum(), cohort_lib.masked_mean(deltas, weights),
                               rtol=1e-5, atol=1e-7)


def test_local_sgd_trains_a_mixed_dtype_model_in_the_flat_vectors_dtype():
    # a bfloat16 weight beside a weakly typed float bias: ravel_pytree's flat vector (and the
    # SGD state) is float32, where jnp.result_type of the leaves would say bfloat16
    from jax.flatten_util import ravel_pytree

    from fedjax_avail.local import Problem, local_sgd

    params = {"w": jnp.asarray([0.5, -1.0, 2.0], jnp.bfloat16), "b": jnp.asarray(0.25)}

    def loss(model, batch):
        return jnp.mean((batch["x"] @ model["w"].astype(jnp.float32) + model["b"]
                         - batch["y"]) ** 2)

    task = fa.Task(init=lambda key: params, loss=loss)
    x = np.asarray([[1.0, 2.0, 3.0], [0.5, -1.0, 1.5]], np.float32)
    y = np.asarray([1.0, -2.0], np.float32)
    fd = fa.FederatedData.from_arrays({"x": x, "y": y}, np.arange(2), num_clients=2)
    clients = jnp.asarray([0, 1], jnp.int32)
    for mu in (0.0, np.float32(0.0), 0.1):
        deltas = local_sgd(Problem(task, fd), params, clients, jax.random.PRNGKey(0), steps=3,
                           batch_size=1, lr=0.05, mu=mu)
        assert deltas.dtype == ravel_pytree(params)[0].dtype == jnp.float32, mu
        def bf16(v):  # rounded to bfloat16 and back
            return np.asarray(jnp.asarray(v, jnp.bfloat16), np.float32)

        for k in range(2):  # float32 SGD on the client's one row; w (and so its gradient, the
            # cast's transpose) passes through bfloat16
            w, b = np.asarray(params["w"], np.float32), np.float32(params["b"])
            w0, b0 = w.copy(), b
            for _ in range(3):
                r = np.float32(x[k] @ bf16(w) + b - y[k])
                gw = bf16(2 * r * x[k]) + float(mu) * (w - w0)
                gb = 2 * r + float(mu) * (b - b0)
                w, b = w - np.float32(0.05) * gw, b - np.float32(0.05) * gb
            # ravel_pytree's order: the leaves sorted by key ("b", then "w")
            np.testing.assert_allclose(deltas[k], np.concatenate([[b - b0], w - w0]),
                                       rtol=1e-5, atol=1e-6)


def test_the_cohort_sum_of_bfloat16_results_is_summed_in_float32():
    # as jnp.tensordot(weights, results) promotes: a weight of 257 is not rounded to 256
    weights = jnp.asarray([257.0, 1.0, 3.0], jnp.float32)
    rows = jnp.asarray([1.0, 1.0, 1.0], jnp.bfloat16)
    for chunk in (None, 2):
        total = cohort_lib.map_cohort_sum(lambda x: x * 1, weights, rows, chunk=chunk)
        assert total.dtype == jnp.float32 and float(total) == 261.0, chunk


def test_the_cohort_sum_refuses_weights_that_are_not_one_per_member():
    # a dynamic slice of too few weights would clamp silently inside the chunk loop
    rows = jnp.arange(12.0)
    for weights in (jnp.ones(5), jnp.ones((12, 1))):
        with pytest.raises(ValueError, match=r"weights must be \[K\] = \[12\]"):
            cohort_lib.map_cohort_sum(lambda x: x, weights, rows, chunk=5)
