"""The memory estimate against measured bytes, and the guard (issue 6, section 5)."""

import gc

import jax
import numpy as np
import pytest

import fedjax_avail as fa
from fedjax_avail import memory


@pytest.mark.parametrize("num_clients", [100, 1000])
@pytest.mark.parametrize("name", ["FedAvg", "FedLaAvg"])
def test_estimate_is_within_20_percent_of_measured_bytes(mnist, num_clients, name):
    train, test = mnist
    fd = fa.data.one_label_per_client(train["x"], train["y"], num_clients, seed=0)
    task = fa.tasks.logistic_regression(784, 10)
    alg = getattr(fa.algorithms, name)(clients_per_round=num_clients // 10)
    estimate = fa.estimate_memory(task, fd, alg, fa.availability.AlwaysOn(), test_data=test)
    gc.collect()  # earlier tests' unreachable arrays, freed mid-run, would count
    result = fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=2, eval_every=1,
                         test_data=test)
    measured = result.memory["measured"]  # device arrays held + XLA's temporaries of a round
    assert result.memory["estimated"] == estimate.total
    assert abs(estimate.total - measured) <= 0.2 * measured, (estimate.describe(), measured)
    # The data is held once (the evaluator reads the training buffers themselves).
    assert result.memory["held"] < estimate.terms["data"] * 1.5 + estimate.terms["test_data"] \
        + estimate.terms["per_client_tables"]


def test_table_term_is_n_times_p_times_4_bytes():
    fd = fa.FederatedData(arrays={"x": np.zeros((6, 784), np.uint8), "y": np.zeros(6, np.int32)},
                          offsets=np.arange(6, dtype=np.int32), counts=np.ones(6, np.int32))
    task = fa.tasks.logistic_regression(784, 10)
    est = fa.estimate_memory(task, fd, fa.algorithms.FedLaAvg(clients_per_round=2))
    # latest [N, P] float32 + last_round [N] int32 + LeastRecent's stamps [N] int32
    assert est.tables == {".latest [6, 7850] float32": 6 * 7850 * 4,
                          ".last_round [6] int32": 6 * 4, ".selection [6] int32": 6 * 4}
    assert est.terms["per_client_tables"] == 6 * 7850 * 4 + 2 * 6 * 4
    assert est.terms["data"] == 6 * 784 + 6 * 4 + 8 * 6


def test_a_model_of_the_client_axis_length_is_replicated_and_not_a_table():
    # N = 10 clients and 10 classes: the kernel [10, 784] and the bias [10] have the client
    # axis's length but are the model, replicated on a "clients" mesh (they were split) and not
    # counted as tables; the latest updates [10, P] and the stamps [10] are split, with or
    # without a runs axis.
    from jax.sharding import Mesh, PartitionSpec

    fd = fa.FederatedData(arrays={"x": np.zeros((10, 784), np.uint8),
                                  "y": np.zeros(10, np.int32)},
                          offsets=np.arange(10, dtype=np.int32), counts=np.ones(10, np.int32))
    task = fa.tasks.logistic_regression(784, 10)
    alg = fa.algorithms.FedLaAvg(clients_per_round=2)
    state = jax.eval_shape(lambda: alg.init(task.init(jax.random.PRNGKey(0)), 10))
    assert {leaf.shape[0] for leaf in jax.tree.leaves(state.params)} == {10}
    stacked = jax.tree.map(lambda a: jax.ShapeDtypeStruct((3, *a.shape), a.dtype), state)
    mesh = Mesh(np.array(jax.devices()[:1]), ("clients",))
    for axis, tree in ((0, state), (1, stacked)):
        split = PartitionSpec(*[None] * axis, "clients")
        specs = jax.tree.map(lambda s: s.spec, fa.mesh.client_shardings(tree, 10, mesh, axis))
        assert jax.tree.leaves(specs.params) == [PartitionSpec()] * 2, axis
        assert jax.tree.leaves(specs.opt_state) == [PartitionSpec()] * len(
            jax.tree.leaves(state.opt_state)), axis
        assert (specs.latest, specs.last_round, specs.selection) == (split,) * 3, axis
        assert specs.mean_update == PartitionSpec(), axis
    est = fa.estimate_memory(task, fd, alg)
    assert sorted(est.tables) == [".last_round [10] int32", ".latest [10, 7850] float32",
                                  ".selection [10] int32"]


def test_an_availability_trace_is_split_over_its_clients_and_a_model_history_is_not():
    # An availability state keeps its clients on its last axis of length N: a trace [T, N] is
    # split over its clients (it was copied whole, or split over its T rows when T = N), with
    # or without a runs axis. An algorithm's state keeps them on its first: a model history
    # [H, P] whose P happens to be N (4 x 2 + 2 = 10 parameters) is not a client array.
    from jax.sharding import Mesh, PartitionSpec

    mesh = Mesh(np.array(jax.devices()[:1]), ("clients",))
    for axis in (0, 1):
        runs = (3,) * axis
        cursor = {"mask": jax.ShapeDtypeStruct((*runs, 10), np.bool_),
                  "trace": jax.ShapeDtypeStruct((*runs, 4, 10), np.bool_),
                  "square": jax.ShapeDtypeStruct((*runs, 10, 10), np.bool_)}
        specs = jax.tree.map(lambda s: s.spec, fa.mesh.client_shardings(
            cursor, 10, mesh, axis, availability=True))
        assert specs["mask"] == PartitionSpec(*[None] * axis, "clients"), axis
        assert specs["trace"] == specs["square"] == PartitionSpec(*[None] * (axis + 1),
                                                                  "clients"), axis
    fd = fa.FederatedData(arrays={"x": np.zeros((10, 4), np.uint8), "y": np.zeros(10, np.int32)},
                          offsets=np.arange(10, dtype=np.int32), counts=np.ones(10, np.int32))
    task = fa.tasks.logistic_regression(4, 2)
    alg = fa.algorithms.FedBuff(buffer_size=2, concurrency=3)
    state = jax.eval_shape(lambda: alg.init(task.init(jax.random.PRNGKey(0)), 10))
    history = jax.tree.leaves(state.store)[0]
    assert history.shape[1] == 10 and history.shape[0] != 10
    specs = fa.mesh.client_shardings(state, 10, mesh)
    assert jax.tree.leaves(specs.store)[0].spec == PartitionSpec()
    assert not any(name.startswith(".store") for name in fa.estimate_memory(task, fd, alg).tables)
    # over 2 devices of a "clients" axis a trace's [4, 10] bytes are held once in all, as split
    trace = fa.availability.Trace(np.ones((4, 10), bool))
    abstract = jax.sharding.AbstractMesh((2,), ("clients",))
    assert fa.estimate_memory(task, fd, alg, trace, mesh=abstract).terms[
        "availability_state"] == 4 * 10


def test_the_test_set_is_counted_where_the_evaluations_hold_it():
    # a copy on each device of a mesh with a "clients" axis; one on the first device of a mesh
    # without one (fedjax_avail.evaluation.Evaluators evaluates there alone)
    fd = fa.FederatedData(arrays={"x": np.zeros((8, 784), np.uint8), "y": np.zeros(8, np.int32)},
                          offsets=np.arange(8, dtype=np.int32), counts=np.ones(8, np.int32))
    test = {"x": np.zeros((100, 784), np.uint8), "y": np.zeros(100, np.int32)}
    task, alg = fa.tasks.logistic_regression(784, 10), fa.algorithms.FedAvg(clients_per_round=4)
    one = 100 * (784 + 4)

    def held(names):
        mesh = None if names is None else jax.sharding.AbstractMesh(
            (2,) * len(names), names)
        return fa.estimate_memory(task, fd, alg, test_data=test, mesh=mesh).terms["test_data"]

    assert held(None) == held(("cohort",)) == one
    assert held(("clients",)) == 2 * one and held(("clients", "cohort")) == 4 * one


def test_the_loop_trains_the_most_runs_at_once_that_fit(monkeypatch):
    fd = fa.FederatedData(arrays={"x": np.zeros((6, 784), np.uint8), "y": np.zeros(6, np.int32)},
                          offsets=np.arange(6, dtype=np.int32), counts=np.ones(6, np.int32))
    task = fa.tasks.logistic_regression(784, 10)
    alg = fa.algorithms.FedLaAvg(clients_per_round=2)
    monkeypatch.setattr(fa.mesh, "cpu_cores", lambda: 3)
    kw = dict(runs=4, runs_layout="loop")
    need = {w: fa.estimate_memory(task, fd, alg, loop_workers=w, **kw).total for w in (1, 2, 3)}
    assert need[1] < need[2] < need[3]
    for available, workers in ((None, 3), (need[3], 3), (need[3] - 1, 2), (need[2] - 1, 1),
                               (need[1] - 1, 1)):  # the last does not fit: check_fits refuses
        estimate, chosen = memory.fitting_estimate(task, fd, alg, available=available, **kw)
        assert (chosen, estimate.total) == (workers, need[workers]), available
    for layout, runs in (("vmap", 4), ("map", 4), ("loop", 1)):  # no loop workers to lower
        estimate, chosen = memory.fitting_estimate(task, fd, alg, available=1, runs=runs,
                                                   runs_layout=layout)
        assert chosen == 1 and estimate.total == fa.estimate_memory(
            task, fd, alg, runs=runs, runs_layout=layout).total, layout


def test_runs_multiply_the_state_and_only_batched_runs_multiply_the_working_sets():
    fd = fa.FederatedData(arrays={"x": np.zeros((6, 784), np.uint8), "y": np.zeros(6, np.int32)},
                          offsets=np.arange(6, dtype=np.int32), counts=np.ones(6, np.int32))
    task = fa.tasks.logistic_regression(784, 10)
    alg = fa.algorithms.FedLaAvg(clients_per_round=2)
    one = fa.estimate_memory(task, fd, alg).terms
    # the runs' states, and the copies a layout makes: map stacks new states beside the old,
    # loop holds the slices of the runs it trains at once (one a core, at most 4)
    workers = fa.runs.loop_workers(4)
    for layout, states, working in (("vmap", 4, 4), ("map", 8, 1),
                                    ("loop", 4 + workers, workers)):
        four = fa.estimate_memory(task, fd, alg, runs=4, runs_layout=layout).terms
        assert four["per_client_tables"] == states * one["per_client_tables"], layout
        assert four["server_state"] == states * one["server_state"], layout
        assert four["cohort_working_set"] == working * one["cohort_working_set"] > 0, layout
        assert four["cohort_updates"] == working * one["cohort_updates"] > 0, layout
        assert four["data"] == one["data"], layout
    with pytest.raises(ValueError, match="runs_layout must be 'vmap', 'map' or 'loop'"):
        fa.estimate_memory(task, fd, alg, runs=2, runs_layout="auto")


def test_a_run_that_cannot_fit_is_refused_before_allocating(monkeypatch):
    n = 10**6  # FedLaAvg's [N, P] float32 table for MNIST logistic regression: 31.4 GB
    x = np.broadcast_to(np.zeros((1, 784), np.uint8), (n, 784))  # allocates nothing
    fd = fa.FederatedData(arrays={"x": x, "y": np.zeros(n, np.int32)},
                          offsets=np.arange(n, dtype=np.int32), counts=np.ones(n, np.int32))
    monkeypatch.setattr(memory, "available_bytes", lambda device=None, mesh=None: 24 * 10**9)
    before = sum(a.nbytes for a in jax.live_arrays())
    alg = fa.algorithms.FedLaAvg(clients_per_round=100)
    with pytest.raises(MemoryError, match=r"needs about 32\.2 GB .* only 24\.0 GB") as info:
        fa.simulate(fa.tasks.logistic_regression(784, 10), fd, alg, fa.availability.AlwaysOn(),
                    rounds=10)
    assert "per_client_tables: 31.4 GB" in str(info.value)
    assert "fewer clients or a smaller model" in str(info.value)
    assert sum(a.nbytes for a in jax.live_arrays()) - before < 10**6


def test_a_cohort_whose_updates_cannot_fit_is_told_to_shrink_k_not_only_to_chunk(monkeypatch):
    n = 10**5  # K = N: a [K, P] float32 array of MNIST logistic regression is 3.14 GB
    x = np.broadcast_to(np.zeros((1, 784), np.uint8), (n, 784))
    fd = fa.FederatedData(arrays={"x": x, "y": np.zeros(n, np.int32)},
                          offsets=np.arange(n, dtype=np.int32), counts=np.ones(n, np.int32))
    monkeypatch.setattr(memory, "available_bytes", lambda device=None, mesh=None: 2 * 10**9)
    task = fa.tasks.logistic_regression(784, 10)
    # FedBuff holds its K results and their K start models together
    alg = fa.algorithms.FedBuff(buffer_size=n, concurrency=n, history=4, local_steps=1,
                                batch_size=1, client_lr=0.01,
                                durations=fa.clock.Exponential(1.0))
    with pytest.raises(MemoryError, match="fewer clients per round") as info:
        fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=1, client_chunk=10)
    assert "cohort_updates: 6.3 GB" in str(info.value)
    # FedAvg sums its deltas as its chunks finish (cohort.map_cohort_sum): in chunks it fits
    fedavg = fa.algorithms.FedAvg(clients_per_round=n, batch_size=1)
    assert fa.estimate_memory(task, fd, fedavg, client_chunk=10).total < 10**8


def test_bad_runs_and_data_are_refused_before_anything_is_shaped():
    def init(key):
        raise AssertionError("shaped before the arguments were checked")

    task = fa.Task(init=init, loss=lambda params, batch: 0.0)
    fd = fa.FederatedData(arrays={"x": np.zeros((2, 3), np.float32)},
                          offsets=np.arange(2, dtype=np.int32), counts=np.ones(2, np.int32))
    alg = fa.algorithms.FedAvg(clients_per_round=1)
    with pytest.raises(ValueError, match=r"runs must be an integer >= 1, got 0"):
        fa.estimate_memory(task, fd, alg, runs=0)
    with pytest.raises(TypeError, match=r"data must be a FederatedData .*got dict"):
        fa.estimate_memory(task, {"x": np.zeros((2, 3))}, alg)
