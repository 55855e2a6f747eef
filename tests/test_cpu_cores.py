"""Every CPU core by default: importing the package asks JAX for one CPU device per core
(``fa.mesh.use_cpu_cores``), and ``simulate``'s ``mesh="auto"`` splits one run's cohort over
them when it has at least 8 members a device and fits in memory (``fa.mesh.auto_mesh``,
``fa.memory.fitting_mesh``).

The test session itself runs on one CPU device (``conftest.py``); the defaults are checked in
fresh processes whose environment does not choose a device count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import fedjax_avail as fa

ENV = fa.mesh.CPU_DEVICES_ENV


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter whose environment chooses no CPU device count, plus
    ``env``."""
    clean = {k: v for k, v in os.environ.items() if k not in (ENV, "XLA_FLAGS", "JAX_PLATFORMS",
                                                             "JAX_NUM_CPU_DEVICES")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**clean, "JAX_PLATFORMS": "cpu", **env}, timeout=300)


def _devices(code: str = "", **env: str) -> int:
    done = _python(code + "\nimport jax, fedjax_avail\nprint(len(jax.devices()))", **env)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def test_importing_the_package_asks_for_one_cpu_device_a_core():
    import joblib

    assert _devices() == joblib.cpu_count() == fa.mesh.cpu_cores()
    assert fa.mesh.cpu_cores() <= len(os.sched_getaffinity(0))


def test_the_count_keeps_within_a_limit_the_affinity_does_not_show():
    # a container's CPU quota is such a limit; joblib's own variable stands in for one here
    # (a quota cannot be set without privileges)
    assert _devices(LOKY_MAX_CPU_COUNT="1") == 1


def test_the_environment_variable_chooses_the_count():
    assert _devices(**{ENV: "3"}) == 3
    assert _devices(**{ENV: "1"}) == 1


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_count_in_the_environment_is_refused_naming_it(value):
    done = _python("import fedjax_avail", **{ENV: value})
    assert done.returncode != 0
    assert f"{ENV} must be an integer >= 1, got {value!r}" in done.stderr


def test_a_count_chosen_in_jax_or_a_started_backend_is_kept():
    assert _devices("import jax; jax.config.update('jax_num_cpu_devices', 1)") == 1
    assert _devices(XLA_FLAGS="--xla_force_host_platform_device_count=3", **{ENV: "2"}) == 3
    assert _devices("import jax; jax.devices()") == 1  # JAX started before the import


def test_one_device_gives_no_automatic_mesh():
    assert len(jax.devices()) == 1  # conftest's one device
    assert fa.mesh.auto_mesh(1000, several=False) is None


AUTO = """
import json
import jax, numpy as np
import fedjax_avail as fa
from fedjax_avail.testing import point_clients, quadratic_task

out = {"auto_mesh": {f"{k},{several}": (None if (m := fa.mesh.auto_mesh(k, several)) is None
                                         else dict(m.shape))
                     for k in (8, 15, 16, 100) for several in (False, True)}}
points = np.random.default_rng(0).normal(size=(64, 3))
fd, task = point_clients(points), quadratic_task(3)
for k in (16, 8):
    algorithm = fa.algorithms.FedAvg(clients_per_round=k, local_steps=2, batch_size=1,
                                     client_lr=0.1)
    runs = {str(mesh): fa.simulate(task, fd, algorithm, fa.availability.AlwaysOn(), rounds=5,
                                   seed=0, mesh=mesh, eval_every=5)
            for mesh in ("auto", None)}
    out[k] = {"devices": {m: r.memory["devices"] for m, r in runs.items()},
              "train_loss": {m: r.history.rows[-1]["train_loss"] for m, r in runs.items()},
              "difference": float(np.max(np.abs(np.asarray(runs["auto"].params)
                                                - np.asarray(runs["None"].params))))}
seeds = fa.simulate(task, fd, fa.algorithms.FedAvg(clients_per_round=16, local_steps=2,
                    batch_size=1, client_lr=0.1), fa.availability.AlwaysOn(), rounds=5,
                    seed=[0, 1], eval_every=5)
out["seeds"] = [r.memory["devices"] for r in seeds]
one_seed = fa.simulate(task, fd, fa.algorithms.FedAvg(clients_per_round=16, local_steps=2,
                       batch_size=1, client_lr=0.1), fa.availability.AlwaysOn(), rounds=5,
                       seed=[0], eval_every=5)
out["one_seed_list"] = [r.memory["devices"] for r in one_seed]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_auto_splits_one_runs_cohort_over_two_cpu_devices():
    done = _python(AUTO, **{ENV: "2"})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    two = {"cohort": 2}
    assert out["auto_mesh"] == {"8,False": None, "8,True": None, "15,False": None,
                                "15,True": None, "16,False": two, "16,True": None,
                                "100,False": two, "100,True": None}
    assert out["16"]["devices"] == {"auto": 2, "None": 1}
    assert out["8"]["devices"] == {"auto": 1, "None": 1}
    assert out["16"]["difference"] < 1e-5  # the same training, up to float reordering
    assert out["8"]["difference"] == 0.0
    assert out["seeds"] == [1, 1]  # several runs use the cores with the "loop" layout
    assert out["one_seed_list"] == [1]  # a runs axis of one seed too
    # evaluated on the first device's copies: the same training loss up to float reordering
    assert abs(out["16"]["train_loss"]["auto"] - out["16"]["train_loss"]["None"]) < 1e-5


def test_a_resume_with_auto_may_choose_other_devices(tmp_path, monkeypatch):
    points = np.random.default_rng(0).normal(size=(32, 3))
    fd, task = fa.testing.point_clients(points), fa.testing.quadratic_task(3)
    algorithm = fa.algorithms.FedAvg(clients_per_round=16, local_steps=1, batch_size=1,
                                     client_lr=0.1)
    whole = fa.simulate(task, fd, algorithm, fa.availability.AlwaysOn(), rounds=6, seed=0,
                        eval_every=3)
    first = fa.simulate(task, fd, algorithm, fa.availability.AlwaysOn(), rounds=3, seed=0,
                        eval_every=3, checkpoint_dir=tmp_path)
    assert first.memory["devices"] == 1  # the test session's one device: no mesh
    one = jax.sharding.Mesh(np.array(jax.devices()[:1]), (fa.mesh.COHORT,))
    monkeypatch.setattr(fa.mesh, "auto_mesh", lambda cohort, several: one)
    resumed = fa.simulate(task, fd, algorithm, fa.availability.AlwaysOn(), rounds=6, seed=0,
                          eval_every=3, checkpoint_dir=tmp_path)
    assert resumed.memory["devices"] == 1 and resumed.history.rows[0]["round"] == 0
    np.testing.assert_allclose(resumed.params, whole.params, rtol=1e-6, atol=1e-6)


def test_auto_falls_back_to_one_device_when_the_mesh_would_not_fit(monkeypatch):
    points = np.random.default_rng(0).normal(size=(32, 3))
    fd, task = fa.testing.point_clients(points), fa.testing.quadratic_task(3)
    algorithm = fa.algorithms.FedAvg(clients_per_round=16, local_steps=1, batch_size=1,
                                     client_lr=0.1)
    one = jax.sharding.Mesh(np.array(jax.devices()[:1]), (fa.mesh.COHORT,))
    monkeypatch.setattr(fa.mesh, "auto_mesh", lambda cohort, several: one)
    needs = fa.estimate_memory(task, fd, algorithm, mesh=one).total
    for free, expected in ((None, one), (needs, one), (needs - 1, None)):
        monkeypatch.setattr(fa.memory, "available_bytes", lambda mesh=None, free=free: free)
        assert fa.memory.fitting_mesh("auto", task, fd, algorithm) is expected
    assert fa.memory.fitting_mesh(None, task, fd, algorithm) is None
    assert fa.memory.fitting_mesh(one, task, fd, algorithm) is one
    with pytest.raises(ValueError, match="mesh must be a jax.sharding.Mesh, None .* got 'all'"):
        fa.memory.fitting_mesh("all", task, fd, algorithm)


IN_PLACE = """
import json
import jax, numpy as np
from jax.sharding import Mesh
import fedjax_avail as fa
from fedjax_avail import plan, runs as runs_lib

fd = fa.data.iid(np.zeros((80, 2, 2), np.uint8), np.arange(80) % 10, 40)
task = fa.tasks.logistic_regression(4, 10)
out = {}


def pointers(array):
    return [s.data.unsafe_buffer_pointer() for s in array.addressable_shards]


for name, mesh, seeds in (("cohort", fa.mesh.cohort_mesh(2), 0),
                          ("clients", Mesh(np.array(jax.devices()), ("clients",)), [0, 1])):
    runs = runs_lib.runs_of(seeds, fa.algorithms.FedLaAvg(clients_per_round=4),
                            fa.availability.AlwaysOn())
    alone, _ = plan._initial_carry(task, 40, runs, None)
    carry, _ = plan._initial_carry(task, 40, runs, mesh)
    placed, _ = plan._place(carry, fd, mesh, runs.several)
    table = carry[0].latest
    out[name] = {
        "equal": jax.tree.structure(alone) == jax.tree.structure(carry) and all(
            a.dtype == b.dtype and np.array_equal(a, b)
            for a, b in zip(jax.tree.leaves(alone), jax.tree.leaves(carry), strict=True)),
        "table_shards": [list(s.data.shape) for s in table.addressable_shards],
        "devices": len(table.sharding.device_set),
        "not_copied": pointers(table) == pointers(placed[0].latest),
    }
print(json.dumps(out))
"""


def test_under_a_mesh_the_state_is_built_on_its_devices_not_copied_there():
    # a state built on one CPU device and then placed was copied to each other device (a
    # [10^5, 7850] table: seconds on 2 cores); built by one program with the carry's shardings
    # it is the one-device state's values, replicated or split as the mesh asks
    done = _python(IN_PLACE, **{ENV: "2"})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["cohort"] == {"equal": True, "table_shards": [[40, 50]] * 2, "devices": 2,
                             "not_copied": True}
    assert out["clients"] == {"equal": True, "table_shards": [[2, 20, 50]] * 2, "devices": 2,
                              "not_copied": True}


SPLIT_BITS = """
import json
import jax
import numpy as np
import fedjax_avail as fa
from fedjax_avail import _bits
key = jax.random.fold_in(jax.random.PRNGKey(3), 11)
out = {}
for n in range(_bits.SPLIT_CLIENTS - 1, _bits.SPLIT_CLIENTS + 4):
    with jax.threefry_partitionable(False):  # JAX's reference for this layout
        expected = np.asarray(jax.random.bits(key, (n,), np.uint32))
    draw = jax.jit(lambda k: _bits.client_bits(k, n))
    with fa.mesh.mesh_context(fa.mesh.cohort_mesh(2)):
        compiled = draw.lower(key).compile()
    words = compiled(key)
    share = -(-(-(-n // 2)) // 2)  # a device's blocks: ceil(ceil(N / 2) / 2)
    out[n] = {"equal": bool(np.array_equal(np.asarray(words), expected)),
              "gathered": "all-gather" in compiled.as_text(),
              "device_blocks": f"u32[{share}]" in compiled.as_text(),
              "on_devices": len(words.sharding.device_set)}
print(json.dumps(out))
"""


def test_a_cohort_mesh_splits_the_client_bits_and_keeps_the_words():
    # from SPLIT_CLIENTS clients on each device computes half the Threefry blocks and the
    # words are gathered (FedAvg at N = 10^6 over 2 devices: 0.73x the time a round); the
    # words are JAX's, so availability and selection draw what one device draws. N from
    # 2^18 - 1 to 2^18 + 3: odd and even N, and M = ceil(N / 2) blocks odd (a padding block)
    done = _python(SPLIT_BITS, **{ENV: "2"})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    split = fa._bits.SPLIT_CLIENTS
    assert out.pop(str(split - 1)) == {"equal": True, "gathered": False,
                                       "device_blocks": False, "on_devices": 2}
    assert out == {str(n): {"equal": True, "gathered": True, "device_blocks": True,
                            "on_devices": 2} for n in range(split, split + 4)}
