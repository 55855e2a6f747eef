"""Every input validated (issue 6, section 2): a table of bad inputs across the public API.

Each must fail before anything is compiled, with an error that names the parameter, echoes the
value and states what is allowed (the fragments each case expects).
"""

import re

import numpy as np
import pytest

import fedjax_avail as fa
from fedjax_avail import cli

A, ALG, D = fa.availability, fa.algorithms, fa.data
RNG = np.random.default_rng(0)
X = RNG.integers(0, 255, (40, 8, 8)).astype(np.uint8)
Y = np.arange(40) % 10
FD = D.iid(X, Y, 20)
TASK = fa.tasks.logistic_regression(64, 10)
OK_ALG = ALG.FedAvg(clients_per_round=2)
ON = A.AlwaysOn()


def sim(**changes):
    """simulate() with one argument replaced."""
    args = dict(task=TASK, data=FD, algorithm=OK_ALG, availability=ON, rounds=3)
    args.update(changes)
    return lambda: fa.simulate(**args)


CASES = [
    # data constructors
    ("from_client_arrays empty", lambda: fa.FederatedData.from_client_arrays([]), ValueError,
     ["clients must hold at least one client"]),
    ("from_client_arrays keys", lambda: fa.FederatedData.from_client_arrays(
        [{"x": X[:2]}, {"y": Y[:2]}]), ValueError, ["clients[1] has keys ['y']", "['x']"]),
    ("from_client_arrays dtypes", lambda: fa.FederatedData.from_client_arrays(
        [{"x": X[:2]}, {"x": X[:2] / 255.0}]), ValueError,
     ["clients[1]['x'] has dtype float64 but clients[0]'s is uint8"]),
    ("from_client_arrays unsigned dtypes", lambda: fa.FederatedData.from_client_arrays(
        [{"x": X[:2]}, {"x": X[:2].astype(np.uint16)}]), ValueError,
     ["clients[1]['x'] has dtype uint16 but clients[0]'s is uint8", "unsigned integers one"]),
    ("FederatedData max_count", lambda: FD.replace(max_count=FD.max_count + 1), ValueError,
     [f"max_count must be the largest of counts ({FD.max_count})",
      f"got {FD.max_count + 1}"]),
    ("client_labels fractions", lambda: D.iid(X, Y + 0.5, 20).client_labels(), ValueError,
     ["arrays['y'] must hold whole-number labels for client_labels", "(dtype float64)"]),
    ("from_client_arrays lengths", lambda: fa.FederatedData.from_client_arrays(
        [{"x": X[:2], "y": Y[:3]}]), ValueError, ["clients[0] arrays differ in length",
                                                   "'x': 2", "'y': 3"]),
    ("from_arrays negative ids", lambda: fa.FederatedData.from_arrays(
        {"x": X[:3]}, np.array([0, -1, 1])), ValueError, ["client_ids must be >= 0", "-1"]),
    ("from_arrays float ids", lambda: fa.FederatedData.from_arrays(
        {"x": X[:3]}, np.array([0.0, 1.0, 1.0])), ValueError,
     ["client_ids must be integers", "float64"]),
    ("from_arrays lengths", lambda: fa.FederatedData.from_arrays(
        {"x": X[:3]}, np.zeros(4, int)), ValueError, ["arrays['x'] has 3 rows",
                                                      "client_ids has 4"]),
    ("from_arrays num_clients", lambda: fa.FederatedData.from_arrays(
        {"x": X[:3]}, np.zeros(3, int), num_clients=0), ValueError,
     ["num_clients must be an integer >= 1", "got 0"]),
    ("from_arrays id too large", lambda: fa.FederatedData.from_arrays(
        {"x": X[:3]}, np.array([0, 1, 2]), num_clients=2), ValueError,
     ["client_ids must be in [0, num_clients=2)", "got max 2"]),
    ("FederatedData offsets", lambda: fa.FederatedData(
        arrays={"x": X[:4]}, offsets=np.array([0, 1]), counts=np.array([2, 2])), ValueError,
     ["offsets must be the running sum of counts", "[0, 1]"]),
    ("FederatedData empty client", lambda: fa.FederatedData(
        arrays={"x": X[:2]}, offsets=np.array([0, 2]), counts=np.array([2, 0])), ValueError,
     ["counts must be >= 1", "clients [1]"]),
    ("FederatedData no arrays", lambda: fa.FederatedData(
        arrays={}, offsets=np.array([0]), counts=np.array([1])), ValueError,
     ["arrays must be a non-empty dict", "{}"]),
    # partitioners
    ("iid num_clients 0", lambda: D.iid(X, Y, 0), ValueError,
     ["num_clients must be an integer in [1, 40]", "got 0"]),
    ("iid num_clients float", lambda: D.iid(X, Y, 2.5), ValueError,
     ["num_clients must be an integer", "got 2.5"]),
    ("iid lengths", lambda: D.iid(X, Y[:5], 2), ValueError, ["len(x)=40", "len(y)=5"]),
    ("one_label_per_client N", lambda: D.one_label_per_client(X, Y, 15), ValueError,
     ["num_clients must be a multiple of the number of labels (10)", "got 15"]),
    ("one_label_per_client mean", lambda: D.one_label_per_client(X, Y, 10, mean=-1.0),
     ValueError, ["mean > 0", "mean=-1.0"]),
    ("classes_per_client k", lambda: D.classes_per_client(X, Y, 4, k=0), ValueError,
     ["k must be an integer in [1, 10]", "got 0"]),
    ("dirichlet alpha", lambda: D.dirichlet(X, Y, 4, alpha=0.0), ValueError,
     ["alpha must be a finite number > 0", "got 0.0"]),
    ("dirichlet alpha inf", lambda: D.dirichlet(X, Y, 4, alpha=np.inf), ValueError,
     ["alpha must be a finite number > 0", "got inf"]),
    ("one_label_per_client mean nan", lambda: D.one_label_per_client(X, Y, 10, mean=np.nan),
     ValueError, ["finite mean > 0", "mean=nan"]),
    ("iid seed", lambda: D.iid(X, Y, 2, seed=-1), ValueError,
     ["seed must be an integer >= 0", "got -1"]),
    ("dirichlet min_size", lambda: D.dirichlet(X, Y, 4, alpha=1.0, min_size=11), ValueError,
     ["min_size * num_clients = 44", "40"]),
    # tasks
    ("logistic_regression features", lambda: fa.tasks.logistic_regression(0), ValueError,
     ["num_features must be an integer >= 1", "got 0"]),
    ("mlp hidden", lambda: fa.tasks.mlp(64, hidden=(32, 0)), ValueError,
     ["hidden[1] must be an integer >= 1", "got 0"]),
    ("lenet5 input_shape", lambda: fa.tasks.lenet5((28, 28)), ValueError,
     ["input_shape must be (H, W, C)", "(28, 28)"]),
    ("lstm vocab", lambda: fa.tasks.lstm_classifier(0, embeddings=np.zeros((0, 25))),
     ValueError, ["vocab_size must be an integer >= 1", "got 0"]),
    ("lstm embeddings", lambda: fa.tasks.lstm_classifier(5, embeddings=np.zeros((4, 25))),
     ValueError, ["embeddings must have shape [vocab_size, embed_dim] = [5, 25]", "[4, 25]"]),
    ("lstm padding at the start", lambda: fa.tasks.lstm_classifier(10).validate(
        {"x": np.array([[3, 4, 0], [0, 0, 3]], np.int32), "y": np.array([0, 1], np.int32)},
        "data.arrays"), ValueError,
     ["data.arrays['x'] must hold padding (0) at the end of each row only", "1 rows",
      "row 1: [0, 0, 3]"]),
    ("task input size", sim(task=fa.tasks.logistic_regression(784, 10)), ValueError,
     ["data.arrays['x'] must hold examples of 784 values", "(40, 8, 8)"]),
    ("task channels first", sim(task=fa.tasks.classification(
        fa.tasks.LogisticRegression(10), (8, 4, 2)), data=D.iid(
        X.reshape(40, 2, 8, 4), Y, 20)), ValueError,
     ["examples of shape (2, 8, 4), but the task reads input_shape (8, 4, 2)",
      "np.moveaxis(x, 1, -1)"]),
    ("task labels", sim(data=D.iid(X, Y + 1, 20)), ValueError,
     ["labels in [0, 10)", "[1, 10]"]),
    ("task int64 pixels", sim(data=D.iid(X.astype(np.int64), Y, 20)), ValueError,
     ["data.arrays['x'] has dtype int64", "store images as uint8"]),
    # availability processes
    ("Bernoulli p", lambda: A.Bernoulli(1.5), ValueError,
     ["p must be a finite number or an array, with values in [0, 1]", "1.5"]),
    ("Bernoulli p bool", lambda: A.Bernoulli(True), TypeError,
     ["p must be a finite number or an array, with values in [0, 1]", "True (bool)"]),
    ("Bernoulli p bools", lambda: A.Bernoulli(np.array([True, False])), TypeError,
     ["p must be a finite number or an array", "array([ True, False])"]),
    ("Bernoulli width", sim(availability=A.Bernoulli(np.full(3, 0.5))), ValueError,
     ["p has 3 entries but there are 20 clients"]),
    ("Markov p_on", lambda: A.Markov(p_on=-0.1, p_off=0.5), ValueError,
     ["p_on must be a finite number or an array, with values in [0, 1]", "-0.1"]),
    ("Markov initial", lambda: A.Markov(0.1, 0.2, initial="up"), ValueError,
     ["initial must be one of", "'up'"]),
    ("Periodic groups", lambda: A.Periodic(np.array([-1, 0]), 1), ValueError,
     ["groups must be an array, with values in [0, 2^30]", "-1"]),
    ("Periodic group id", lambda: A.Periodic(np.array([0, 2**32 + 1]), 1), ValueError,
     ["groups must be an array, with values in [0, 2^30]", "4294967297"]),
    ("Periodic period", lambda: A.Periodic(np.array([0, 1]), 0), ValueError,
     ["period must be an integer >= 1", "got 0"]),
    ("diurnal D", lambda: A.diurnal(Y, D=0, E=5), ValueError,
     ["D must be an integer in [1, 9]", "got 0"]),
    ("HourOfDay start", lambda: A.HourOfDay(24), ValueError,
     ["start_hour must be an integer or an array, with values in [0, 23]", "got 24"]),
    ("HourOfDay hours", lambda: A.HourOfDay(3, hours=0), ValueError,
     ["hours must be an integer in [1, 24]", "got 0"]),
    ("Trace empty", lambda: A.Trace(np.zeros((0, 3), bool)), ValueError,
     ["mask_table must be [T, N] with T >= 1 and N >= 1", "(0, 3)"]),
    ("Trace values", lambda: A.Trace(np.array([[0, 2]])), ValueError,
     ["mask_table must hold booleans (or 0/1)", "2"]),
    ("Trace width", sim(availability=A.Trace(np.ones((4, 19), bool))), ValueError,
     ["mask_table is [T, N] = (4, 19)", "20 clients"]),
    ("dropout q", lambda: A.dropout(ON, 1.5), ValueError,
     ["q must be a finite number in [0, 1]", "1.5"]),
    ("all_of nothing", lambda: A.all_of(), ValueError,
     ["processes must be a non-empty tuple", "()"]),
    # algorithms
    ("FedAvg K", lambda: ALG.FedAvg(clients_per_round=0), ValueError,
     ["clients_per_round must be an integer >= 1", "got 0"]),
    ("FedAvg lr", lambda: ALG.FedAvg(clients_per_round=2, client_lr=0.0), ValueError,
     ["client_lr must be a finite number > 0", "got 0.0"]),
    ("FedAvg lr inf", lambda: ALG.FedAvg(clients_per_round=2, client_lr=float("inf")),
     ValueError, ["client_lr must be a finite number > 0", "got inf"]),
    ("FedAvg batch", lambda: ALG.FedAvg(clients_per_round=2, batch_size=2.5), ValueError,
     ["batch_size must be an integer >= 1", "got 2.5"]),
    ("FedAvg weighting", lambda: ALG.FedAvg(clients_per_round=2, weighting="size"), ValueError,
     ["weighting must be 'uniform' or 'data_size'", "'size'"]),
    ("FedAvg optimizer", lambda: ALG.FedAvg(clients_per_round=2, server_optimizer="rms"),
     ValueError, ["server_optimizer must be 'sgd' or 'adam'", "'rms'"]),
    ("FedProx mu", lambda: ALG.FedProx(clients_per_round=2, mu=-1.0), ValueError,
     ["mu must be a finite number >= 0", "got -1.0"]),
    ("FedSGD steps", lambda: ALG.FedSGD(clients_per_round=2, local_steps=3), ValueError,
     ["local_steps=1", "got 3"]),
    ("MIFA start", lambda: ALG.MIFA(clients_per_round=2, start="soon"), ValueError,
     ["start must be one of", "'soon'"]),
    ("SequentialSGD lr", lambda: ALG.SequentialSGD(2, lr=-1.0), ValueError,
     ["lr must be a finite number > 0", "got -1.0"]),
    ("K larger than N", sim(algorithm=ALG.FedLaAvg(clients_per_round=21)), ValueError,
     ["clients_per_round must be in [1, num_clients=20]", "got 21"]),
    # asynchronous algorithms and the clock
    ("K-async K > N", sim(algorithm=ALG.KAsyncSGD(clients_per_round=21)), ValueError,
     ["the 21 results a server update needs must be at most num_clients=20"]),
    ("FedBuff history 0", lambda: ALG.FedBuff(buffer_size=2, history=0), ValueError,
     ["history must be None or an integer >= 1", "got 0"]),
    ("FedBuff concurrency < K", lambda: ALG.FedBuff(buffer_size=5, concurrency=3), ValueError,
     ["concurrency must be None or an integer >= 5", "got 3"]),
    ("FedBuff concurrency > N", sim(algorithm=ALG.FedBuff(buffer_size=2, concurrency=25)),
     ValueError, ["concurrency must be an integer in [2, 21)", "got 25"]),
    ("Exponential mean", lambda: fa.clock.Exponential(-1.0), ValueError,
     ["mean must be a finite number > 0", "got -1.0"]),
    ("Constant NaN", lambda: fa.clock.Constant(float("nan")), ValueError,
     ["duration must be a finite number > 0", "got nan"]),
    ("LogNormal sigma", lambda: fa.clock.LogNormal(1.0, -0.5), ValueError,
     ["sigma must be a finite number >= 0", "got -0.5"]),
    ("speed factors", lambda: fa.clock.Constant(1.0, speed=np.array([1.0, 0.0])), ValueError,
     ["speed must be None or an array, with values > 0", "0.]"]),
    ("speed width", sim(algorithm=ALG.FedBuff(
        buffer_size=2, durations=fa.clock.Exponential(1.0, speed=np.ones(3)))), ValueError,
     ["speed has 3 entries but there are 20 clients"]),
    ("offline policy", lambda: ALG.FedBuff(buffer_size=2, offline="maybe"), ValueError,
     ["offline must be one of ('lost', 'late')", "'maybe'"]),
    ("durations kind", lambda: ALG.KAsyncSGD(clients_per_round=2, durations=1.0), TypeError,
     ["durations must be a Constant or an Exponential or a LogNormal or a KofP", "float"]),
    ("WKAFL sim_min", lambda: ALG.WKAFL(clients_per_round=2, sim_min=2.0), ValueError,
     ["sim_min must be a finite number in [-1, 1]", "got 2.0"]),
    ("WKAFL switch", lambda: ALG.WKAFL(clients_per_round=2, stage_switch="auto"), ValueError,
     ["stage_switch must be one of ('round', 'loss')", "'auto'"]),
    ("FedAsync mixing", lambda: ALG.FedAsync(mixing=1.5), ValueError,
     ["mixing must be a finite number in (0, 1]", "got 1.5"]),
    ("FedAsync staleness", lambda: ALG.FedAsync(staleness="linear"), ValueError,
     ["staleness must be one of ('constant', 'polynomial', 'hinge')", "'linear'"]),
    # simulate
    ("rounds 0", sim(rounds=0), ValueError, ["rounds must be an integer in [1, 2^24)",
                                             "got 0"]),
    ("rounds 2^24", sim(rounds=2**24), ValueError, ["rounds must be an integer", "16777216"]),
    ("eval_every", sim(eval_every=0), ValueError,
     ["eval_every must be None or an integer >= 1", "got 0"]),
    ("seed negative", sim(seed=-1), ValueError, ["seed must be an integer in [0, 2^32)",
                                                  "got -1"]),
    ("seed 2^32", sim(seed=2**32 + 5), ValueError, ["seed must be an integer in [0, 2^32)",
                                                     "4294967301"]),
    ("seed float", sim(seed=1.5), ValueError, ["seed must be an integer", "got 1.5"]),
    ("client_chunk", sim(client_chunk=0), ValueError,
     ["client_chunk must be None or an integer >= 1", "got 0"]),
    ("eval_batch_size", lambda: fa.callbacks.Evaluation(batch_size=0), ValueError,
     ["eval_batch_size must be an integer >= 1", "got 0"]),
    ("checkpoint_every", lambda: fa.callbacks.Checkpointing("ckpt", every=0), ValueError,
     ["checkpoint_every must be None or an integer >= 1", "got 0"]),
    ("a moved parameter", sim(checkpoint_every=5), TypeError,
     ["simulate() no longer takes checkpoint_every",
      "callbacks=[fa.callbacks.Checkpointing(directory, every=...)]"]),
    ("two evaluations", sim(callbacks=[fa.callbacks.Evaluation(), fa.callbacks.Evaluation()]),
     ValueError, ["callbacks holds 2 Evaluation callbacks; a run has one"]),
    ("evaluation twice", sim(eval_every=5, callbacks=[fa.callbacks.Evaluation()]), ValueError,
     ["pass eval_every to the Evaluation callback in callbacks, not to simulate"]),
    ("data kind", sim(data={"x": X, "y": Y}), TypeError,
     ["data must be a FederatedData", "got dict"]),
    ("task kind", sim(task=lambda params, batch: 0.0), TypeError,
     ["task must be a Task", "got function"]),
    ("test_data tuple", sim(test_data=(X, Y)), TypeError,
     ["test_data must be None, a FederatedData or a dict", "got tuple"]),
    ("test_data pixel scale", sim(test_data={"x": X.astype(np.float32), "y": Y}), ValueError,
     ["test_data['x'] holds floats in [0.0, ", "but data.arrays['x'] is uint8",
      "test_data['x'].astype(np.uint8)"]),
    ("test_data other clients", sim(test_data=D.iid(X, Y, 4)), ValueError,
     ["test_data is a FederatedData of 4 clients but data has 20"]),
    ("test_data pixel dtype", sim(test_data={"x": X.astype(np.uint16), "y": Y}), ValueError,
     ["test_data['x'] is uint16 but data.arrays['x'] is uint8"]),
    ("test_data lengths", sim(test_data={"x": X, "y": Y[:3]}), ValueError,
     ["test_data arrays must share one non-empty leading example axis", "'y': 3"]),
]


def test_the_table_has_at_least_40_cases():
    assert len(CASES) >= 40


@pytest.mark.parametrize("make, error, fragments", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input_is_reported_before_compilation(make, error, fragments, no_compilation):
    with pytest.raises(error) as info:
        make()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize("argv, fragments", [
    (["run", "nope"], ["no experiment 'nope'", "registered"]),
    (["run", "--set", "nope=1"], ["has no setting 'nope'", "settings:"]),
    (["run", "--set", "rounds=abc"], ["--set rounds", "'abc'"]),
    (["run", "--set", "E=0"], ["setting E must be an integer >= 1", "got 0"]),
    (["run", "--set", "beta=2"],
     ["setting beta must be None or a finite number in (0, 1]", "got 2"]),
    (["run", "--set", "rounds"], ["--set takes key=value", "'rounds'"]),
    (["run", "fedlaavg-mnist", "--set", "data_dir=/nonexistent"],
     ["/nonexistent", "FEDJAX_AVAIL_MNIST_DIR"]),
])
def test_command_line_errors_are_one_clear_line(argv, fragments, capsys, tmp_path,
                                                no_compilation):
    assert cli.main([*argv, "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedjax-avail: error: ") and "Traceback" not in err
    for fragment in fragments:
        assert re.search(re.escape(fragment), err), (fragment, err)


def test_a_mesh_with_explicit_axes_is_refused_before_compiling():
    # jax.make_mesh's default axis type is Explicit, under which the engine's placement fails
    # deep inside the first compiled round; it is refused by name with the fix.
    import jax

    fd = fa.testing.point_clients(np.arange(4.0)[:, None])
    explicit = jax.make_mesh((1,), ("clients",),
                             axis_types=(jax.sharding.AxisType.Explicit,))
    with pytest.raises(ValueError, match=r"Explicit .*jax.sharding.Mesh\(devices, names\)"):
        fa.simulate(fa.testing.quadratic_task(), fd, fa.algorithms.FedAvg(clients_per_round=2),
                    fa.availability.AlwaysOn(), rounds=2, mesh=explicit)
    auto = jax.make_mesh((1,), ("clients",), axis_types=(jax.sharding.AxisType.Auto,))
    fa.simulate(fa.testing.quadratic_task(), fd, fa.algorithms.FedAvg(clients_per_round=2),
                fa.availability.AlwaysOn(), rounds=2, mesh=auto)


@pytest.mark.parametrize("shape, ok", [
    ((28, 28, 1), True), ((28, 28), True), ((784,), True), ((1, 28, 28), True),  # torchvision
    ((784, 1), True), ((14, 56, 1), False), ((2, 392), False),
])
def test_an_image_task_reads_its_shape_flattened_or_with_axes_of_one_moved(shape, ok):
    """Only axes of size 1 may move: another order of the same values would be scrambled."""
    task = fa.tasks.classification(fa.tasks.LogisticRegression(10), (28, 28, 1))
    arrays = {"x": np.zeros((3, *shape), np.uint8), "y": np.zeros(3, np.int32)}
    if ok:
        task.validate(arrays, "data")
    else:
        with pytest.raises(ValueError, match=r"reorder the axes"):
            task.validate(arrays, "data")
