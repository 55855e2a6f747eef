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


# (HLO module, instruction) -> its result's shape and its opcode, "f32[784,64]{1,0} fusion"
Definitions = dict[tuple[str, str], str]
# Instructions whose profiler events span their bodies' operations (counted once, inside)
CONTROL_FLOW = ("while", "conditional", "call")
# The events JAX's profiler (0.10.2) writes at most into a trace; past them it drops events
# without a word (FedAvg at K = 10^4 on a CPU: one round 745,000 events, two rounds 1,000,019,
# metadata included, and 15% fewer calls a round)
TRACE_EVENTS_CAP = 1_000_000


def hlo_operations(text: str) -> Definitions:
    """Each instruction of a compiled program's HLO ``text`` (``compiled.as_text()``), tuple
    results included, keyed by its module's name and its own (:data:`Definitions`)."""
    module = re.match(r"HloModule ([\w.\-]+)", text)
    name = module.group(1) if module else ""
    definitions = {}
    for line in text.splitlines():
        match = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = (\(.*?\)|\S+) ([\w-]+)\(", line)
        if match:
            definitions.setdefault((name, match.group(1)), f"{match.group(2)} {match.group(3)}")
    return definitions


@contextlib.contextmanager
def simulate_programs() -> Iterator[Definitions]:
    """The instructions (:func:`hlo_operations`) of every round program ``fa.simulate``
    compiles inside the block, gathered as they are compiled (the engine's compile step,
    ``fedjax_avail.program._compile``, wrapped for the block's duration)."""
    definitions: Definitions = {}
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


def operation_times(events: list[dict[str, Any]], definitions: Definitions, per: float,
                    top: int, accelerator: bool) -> list[dict[str, Any]]:
    """The ``top`` instructions of ``definitions`` by their time in a profiler trace's
    ``events`` (its ``traceEvents``), in ms and calls per ``per`` (steps, rounds), each with its
    shape and opcode. Counted: complete events whose ``hlo_op`` is one of them (of that
    ``hlo_module`` where the event names one; an instruction name two modules share needs it),
    control flow left out (:data:`CONTROL_FLOW`); on an ``accelerator``, the kernels of the
    device's streams alone (the host's thunks and the trace's summary lines carry ``hlo_op``
    too).

    Raises:
      RuntimeError: on an accelerator, a trace without device streams or without kernels of
        these instructions (a profiler that could not read the device, say).
    """
    names = {}
    for module, op in definitions:
        names[op] = None if op in names else (module, op)  # None: a name two modules share
    keep = None
    if accelerator:
        devices = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") ==
                   "process_name" and str(e["args"].get("name", "")).startswith("/device:")}
        keep = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "M" and e.get("name") ==
                "thread_name" and e["pid"] in devices and "Stream" in str(e["args"].get("name"))}
        if not keep:
            threads = sorted({str(e["args"].get("name")) for e in events if e.get("ph") == "M"
                              and e.get("name") == "thread_name" and e["pid"] in devices})
            raise RuntimeError(f"no device streams among the trace's {len(events)} events; "
                               f"its device threads are {threads[:8]}")
    total: collections.Counter[tuple[str, str]] = collections.Counter()
    calls: collections.Counter[tuple[str, str]] = collections.Counter()
    for event in events:
        args = event.get("args") or {}
        if event.get("ph") != "X" or "hlo_op" not in args:
            continue
        key = ((args["hlo_module"], args["hlo_op"]) if "hlo_module" in args
               else names.get(args["hlo_op"]))
        if (key not in definitions or definitions[key].split()[-1] in CONTROL_FLOW
                or (keep is not None and (event.get("pid"), event.get("tid")) not in keep)):
            continue
        total[key] += event.get("dur", 0)
        calls[key] += 1
    if accelerator and not total:
        seen = sorted({str(e.get("args")) for e in events if e.get("ph") == "X"
                       and (e.get("pid"), e.get("tid")) in keep})[:3]
        raise RuntimeError(f"no kernel of the program's instructions in the trace; the device "
                           f"streams' events carry {seen}")
    return [{"op": op, "hlo": definitions[module, op], "ms": us / per / 1e3,
             "calls": calls[module, op] / per}
            for (module, op), us in total.most_common(top)]


def traced_operations(call: Callable[[], Any], definitions: Definitions, per: float,
                      top: int) -> dict[str, Any]:
    """Runs ``call()`` once under ``jax.profiler``: its ``top`` instructions by time
    (:func:`operation_times`: ``"operations"``), what that time is (``"clock"``) and the
    trace's number of events (``"trace_events"``). On an accelerator the time is its kernels';
    on a CPU, each instruction's time summed over the devices and the threads that ran it (they
    run concurrently: the list can sum to more than the call's wall time).

    Raises:
      RuntimeError: the trace reached :data:`TRACE_EVENTS_CAP` (the counts would come out
        short: profile a shorter call), or as :func:`operation_times`.
    """
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir):
            jax.block_until_ready(call())
        trace = next(Path(trace_dir).rglob("*.trace.json.gz"))
        events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    if len(events) >= TRACE_EVENTS_CAP:
        raise RuntimeError(f"the trace holds {len(events)} events, the profiler's most: "
                           "events were dropped; profile a shorter call")
    accelerator = jax.default_backend() != "cpu"
    return {"clock": ("device kernels" if accelerator
                      else "host threads, summed over the devices and threads"),
            "trace_events": len(events),
            "operations": operation_times(events, definitions, per, top, accelerator)}


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
