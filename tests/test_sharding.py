"""The client axis sharded over a device mesh, each round's cohort split over a "cohort" axis,
and a two-process run (issue 9): results equal one device's, the tables really split. Each run
is its own process: XLA_FLAGS must be set before JAX starts."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # a long tier: `pytest -m slow` (.ci/run runs it)

SCRIPT = Path(__file__).with_name("sharded_run.py")
MEMORY_SCRIPT = Path(__file__).with_name("sharded_memory.py")


def _run(*args: str) -> dict:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def one_device():
    return _run("1", "clients", "fedlaavg")


@pytest.mark.parametrize("devices", [2, 4])
def test_sharded_client_axis_equals_one_device(one_device, devices):
    out = _run(str(devices), "clients", "fedlaavg")
    assert out["devices"] == devices
    assert out["spec"] in ("P('clients',)", "PartitionSpec('clients',)")
    # The [40, 650] latest-update table is really split: 40 / devices rows on each device.
    assert out["local_shards"] == [[40 // devices, 650]] * devices
    np.testing.assert_allclose(out["params"], one_device["params"], atol=1e-6)
    assert out["train_loss"] == pytest.approx(one_device["train_loss"], rel=1e-6)
    np.testing.assert_allclose(out["test"], one_device["test"], rtol=1e-6)


def test_an_availability_trace_is_split_over_its_clients_and_changes_nothing():
    """A [7, 40] trace is split over its 40 clients (20 on each of 2 devices), not copied whole
    to each, nor split over its 7 rows; the run equals one device's."""
    alone = _run("1", "clients", "fedlaavg+trace")
    split = _run("2", "clients", "fedlaavg+trace")
    assert (alone["trace_shards"], split["trace_shards"]) == ([[7, 40]], [[7, 20]] * 2)
    np.testing.assert_allclose(split["params"], alone["params"], atol=1e-6)
    assert split["train_loss"] == pytest.approx(alone["train_loss"], rel=1e-6)


def test_two_processes_with_jax_distributed_equal_one_device(one_device):
    with socket.socket() as s:  # a free port on localhost for the coordinator
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    workers = [subprocess.Popen([sys.executable, str(SCRIPT), "2", "clients", "fedlaavg", str(i),
                                 "2", port],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for i in range(2)]
    outs = []
    for worker in workers:
        stdout, stderr = worker.communicate(timeout=300)
        assert worker.returncode == 0, stderr[-2000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    for out in outs:
        assert out["devices"] == 4  # two processes x two local devices, one global mesh
        assert out["local_shards"] == [[10, 650]] * 2  # each process holds its clients' rows
        np.testing.assert_allclose(out["params"], one_device["params"], atol=1e-6)
        assert out["train_loss"] == pytest.approx(one_device["train_loss"], rel=1e-6)


@pytest.mark.parametrize("algorithm", ["fedavg", "fedlaavg", "divfl", "fedbuff", "wkafl"])
def test_cohort_split_over_devices_equals_one_device(algorithm):
    """Each device trains K / D cohort members (FedAvg's K = 7 is padded to 8); every member's
    computation is unchanged and only the order of the cohort sum's terms may differ, so the
    runs agree with one device's to float32 rounding (FedLaAvg's table update is exact)."""
    alone = _run("1", "cohort", algorithm)
    split = _run("2", "cohort", algorithm)
    assert split["devices"] == 2
    if algorithm == "fedlaavg":
        np.testing.assert_array_equal(split["params"], alone["params"])
    np.testing.assert_allclose(split["params"], alone["params"], rtol=1e-4, atol=1e-6)
    assert split["train_loss"] == pytest.approx(alone["train_loss"], rel=1e-5)
    # the test set, evaluated on the first device alone (evaluation.Evaluators), scores the same
    np.testing.assert_allclose(split["test"], alone["test"], rtol=1e-5)


@pytest.mark.parametrize("algorithm", ["fedavg@3", "fedbuff@3", "divfl@3", "wkafl@3"])
def test_a_chunked_cohort_split_over_devices_equals_one_device(algorithm):
    """client_chunk with a "cohort" axis: each device trains its share of the cohort in its own
    chunks (FedAvg: 7 members padded to 8, 4 a device in chunks of 3, the last overlapping;
    DivFL's full-batch passes, whose outputs hold None leaves; WKAFL's per-member scalars). The
    speed of the split is benchmarks/cohort_mesh_chunks.py's to show."""
    alone = _run("1", "cohort", algorithm)
    split = _run("2", "cohort", algorithm)
    assert split["devices"] == 2
    np.testing.assert_allclose(split["params"], alone["params"], rtol=1e-4, atol=1e-6)
    assert split["train_loss"] == pytest.approx(alone["train_loss"], rel=1e-5)


def test_clients_and_cohort_axes_together(one_device):
    out = _run("4", "clients,cohort", "fedlaavg")
    assert out["local_shards"] == [[20, 650]] * 4  # split in two over "clients"
    np.testing.assert_allclose(out["params"], one_device["params"], atol=1e-6)


def test_memory_under_a_mesh_is_counted_over_its_devices():
    """Measured and estimated bytes are totals over the mesh's devices: a "cohort" mesh keeps a
    copy of the data and the states on each device (twice one device's arrays held, but the
    test set, which its evaluations read on the first device alone), each device trains its
    share of the cohort; a "clients" mesh splits the data and the tables (the test set is
    copied to both), and each device trains the whole cohort. The estimate stays within 25% of
    the measurement (10% when written)."""
    done = subprocess.run([sys.executable, str(MEMORY_SCRIPT)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    rows, test = out["rows"], out["test_bytes"]
    held = {(r["algorithm"], r["mesh"], r["chunk"]): r["held"] for r in rows}
    for (algorithm, mesh, chunk), value in held.items():
        alone = held[algorithm, "none", chunk]
        want = {"none": alone, "cohort": 2 * alone - test, "clients": alone + test}[mesh]
        assert abs(value - want) <= 0.02 * want, (algorithm, mesh, chunk, value, alone)
    for row in rows:
        assert abs(row["estimated"] - row["measured"]) <= 0.25 * row["measured"], row
