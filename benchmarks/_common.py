"""What every benchmark records: the machine, and its JSON result written atomically."""

from __future__ import annotations

import collections
import contextlib
import gzip
import json
import os
import platform
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from fedjax_avail import program
from fedjax_avail._io import atomic_write_text
from fedjax_avail.data import MNIST_ENV

REPO_ROOT = Path(__file__).resolve().parents[1]

# The quickstart notebook's main cell (notebooks/01_quickstart.ipynb: FedLaAvg Fig. 4's setting,
# N = 1000, K = 100, C = 10, B = 5, diurnal E = 100) as source for a fresh process
# (``python -c``), after it has set ``data_dir`` (the MNIST IDX folder): it defines ``test``,
# ``fd``, ``task``, ``availability`` and ``algorithms`` (name -> algorithm).
QUICKSTART_SETUP = """
import fedjax_avail as fa
train, test = fa.data.load_mnist(data_dir)
fd = fa.data.one_label_per_client(train["x"], train["y"], 1000, seed=0)
task = fa.tasks.logistic_regression(num_features=784, num_classes=10)
availability = fa.availability.diurnal(fd.client_labels(), D=1, E=100)
common = dict(clients_per_round=100, local_steps=10, batch_size=5)
algorithms = {"fedavg": fa.algorithms.FedAvg(**common, client_lr=0.01),
              "fedlaavg": fa.algorithms.FedLaAvg(**common, client_lr=0.01),
              "sequential": fa.algorithms.SequentialSGD(**common, lr=0.01)}
"""


def default_data_dir() -> Path:
    """``$FEDJAX_AVAIL_MNIST_DIR``, else ``shared/data/mnist`` next to the repository."""
    env = os.environ.get(MNIST_ENV)
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data" / "mnist"


def cpu_model() -> dict[str, Any]:
    """The CPU's model name and its vector extensions (Linux's ``/proc/cpuinfo``; empty
    elsewhere): machines of one size differ (an AMD EPYC with AVX-512, an Intel Xeon with AMX,
    an AVX2-only one), and XLA's and PyTorch's kernels with them."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in text.splitlines()[:40] if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    return {"cpu_model": fields.get("model name"),
            "cpu_vector_extensions": sorted(f for f in flags
                                            if f in ("avx2", "avx512f", "amx_tile", "amx_bf16"))}


def machine_info() -> dict[str, Any]:
    """Platform, CPU count and model and JAX version/backend/devices of this run."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        **cpu_model(),
        "jax_version": jax.__version__,
        "jax_backend": jax.default_backend(),
        "jax_devices": [str(d) for d in jax.devices()],
        "jax_device_kind": jax.devices()[0].device_kind,  # "NVIDIA H100 80GB HBM3", "cpu"
    }


def best_seconds(fn, arg, repeats: int) -> float:
    """The fastest of ``repeats`` timed calls ``fn(arg)`` to ``block_until_ready`` (of every
    array it returns), after one untimed call (compilation)."""
    jax.block_until_ready(fn(arg))
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(arg))
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_flop_per_s(repeats: int = 20) -> float:
    """FLOP/s of one dense 2048 x 2048 float32 matrix product in XLA on the default device:
    this machine's practical ceiling for dense arithmetic, measured in the same run."""
    a = jax.random.normal(jax.random.PRNGKey(0), (2048, 2048), jnp.float32)
    return 2 * 2048**3 / best_seconds(jax.jit(lambda x: x @ x), a, repeats)


def memory_bytes_per_s(megabytes: int = 512, repeats: int = 20) -> float:
    """Bytes/s of one elementwise pass (read once, written once) over a float32 array of
    ``megabytes`` MiB on the default device: this machine's practical memory bandwidth (a
    GPU's HBM, a CPU's DRAM), measured in the same run."""
    x = jnp.ones(megabytes * 2**20 // 4, jnp.float32)
    return 2 * x.nbytes / best_seconds(jax.jit(lambda v: v * 1.0001), x, repeats)


def hlo_operations(text: str) -> dict[str, tuple[str, str]]:
    """Each instruction of a compiled program's HLO ``text`` (``compiled.as_text()``) -> its
    module's name and its shape and opcode (``"f32[784,64]{1,0} fusion"``)."""
    module = re.match(r"HloModule ([\w.\-]+)", text)
    name = module.group(1) if module else ""
    definitions = {}
    for line in text.splitlines():
        match = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = (\S+ [\w-]+)\(", line)
        if match:
            definitions.setdefault(match.group(1), (name, match.group(2)))
    return definitions


@contextlib.contextmanager
def simulate_programs() -> Iterator[dict[str, tuple[str, str]]]:
    """The operations (:func:`hlo_operations`) of every round program ``fa.simulate`` compiles
    inside the block, gathered as they are compiled (the engine's compile step,
    ``fedjax_avail.program._compile``, wrapped for the block's duration)."""
    definitions: dict[str, tuple[str, str]] = {}
    compile_program = program._compile

    def compile_and_keep(lowered: Any, batched_runs: bool) -> Any:
        compiled = compile_program(lowered, batched_runs)
        definitions.update(hlo_operations(compiled.as_text()))
        return compiled

    program._compile = compile_and_keep
    try:
        yield definitions
    finally:
        program._compile = compile_program


def traced_operations(call: Callable[[], Any], definitions: dict[str, tuple[str, str]],
                      per: int, top: int) -> list[dict[str, Any]]:
    """Runs ``call()`` once under ``jax.profiler``; its ``top`` operations among
    ``definitions`` (:func:`hlo_operations`) by time, in ms and calls per ``per`` (steps,
    rounds), each with its HLO shape. On an accelerator the time is the device's (its
    kernels'); on a CPU, each operation's time summed over the devices and the threads that
    ran it (operations run concurrently, so the list can sum to more than the wall time)."""
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
            jax.block_until_ready(call())
        trace = next(Path(trace_dir).rglob("*.trace.json.gz"))
        events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    accelerators = {event["pid"] for event in events if event.get("ph") == "M"
                    and event.get("name") == "process_name"
                    and str(event.get("args", {}).get("name", "")).startswith("/device:")}
    modules = {module for module, _ in definitions.values()}
    total: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    for event in events:
        args = event.get("args") or {}
        op = args.get("hlo_op", event.get("name"))
        if (event.get("ph") != "X" or op not in definitions
                or (accelerators and event.get("pid") not in accelerators)
                or ("hlo_module" in args and args["hlo_module"] not in modules)):
            continue
        total[op] += event.get("dur", 0)
        calls[op] += 1
    return [{"op": op, "hlo": definitions[op][1], "ms": us / per / 1e3, "calls": calls[op] / per}
            for op, us in total.most_common(top)]


def write_json(path: str | Path, payload: dict[str, Any]) -> None:
    """Writes ``payload`` as indented JSON, atomically."""
    atomic_write_text(path, json.dumps(payload, indent=2) + "\n")


class ClientLoop:
    """The reference loops' shared half: clients trained one by one, as FedJAX's jit backend and
    the papers' PyTorch code run them. Host-side (numpy) batch sampling, B rows with
    replacement; device-side one ``jax.jit``-compiled SGD step of one client on one batch."""

    def __init__(self, task, fd, *, seed: int, steps: int, batch_size: int, lr: float):
        self.x_rows = np.asarray(fd.arrays["x"])
        self.y_rows = np.asarray(fd.arrays["y"])
        self.offsets = np.asarray(fd.offsets)
        self.counts = np.asarray(fd.counts)
        self.num_clients = fd.num_clients
        self.steps, self.batch_size = steps, batch_size
        self.rng = np.random.default_rng(seed)
        self.params = task.init(jax.random.PRNGKey(seed))
        flat, self.unravel = ravel_pytree(self.params)
        self.flat = np.asarray(flat, np.float32)  # global model x, [P]

        def sgd_step(params, x_batch, y_batch):
            grads = jax.grad(task.loss)(params, {"x": x_batch, "y": y_batch})
            return jax.tree.map(lambda p, g: p - lr * g, params, grads)

        self.sgd_step = jax.jit(sgd_step)

    def local_update(self, i: int) -> np.ndarray:
        """C SGD steps of client i from the global model; returns ``u_i = x_i^C - x``."""
        params = self.params
        lo, n = int(self.offsets[i]), int(self.counts[i])
        for _ in range(self.steps):
            rows = lo + self.rng.integers(0, n, size=self.batch_size)
            params = self.sgd_step(params, self.x_rows[rows], self.y_rows[rows])
        flat, _ = ravel_pytree(params)
        return np.asarray(flat) - self.flat

    def set_model(self, flat: np.ndarray) -> None:
        """The new global model x (flat), also as the device pytree the next clients start from."""
        self.flat = flat
        self.params = jax.block_until_ready(self.unravel(jax.numpy.asarray(flat)))
