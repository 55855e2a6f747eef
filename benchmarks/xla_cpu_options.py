"""Benchmark: the quickstart notebook's rounds, or a CNN's local steps, under XLA:CPU's options.

``--workload notebook`` (the default): the quickstart notebook's rounds (FedAvg, FedLaAvg and
sequential SGD of MNIST logistic regression, N = 1000, K = 100, C = 10 local steps of B = 5)
are most of its time once the compilation cache holds its programs (``compile_cache.py``).
Their small batched matmuls run at a fraction of the CPU's matmul rate. This asks whether
another of XLA:CPU's dot back ends (YNNPACK, the default here; its single-dot mode; XLA's own
emitter; XNNPACK; oneDNN) runs them faster.

``--workload cnn``: ``profile_cnn_step.py``'s local training of pfl's CIFAR-10 CNN (``--clients``
x 5 SGD steps of 10 images, the clients split over the CPU devices as ``simulate``'s mesh splits
a cohort) with its convolutions as ours (``fa.tasks.conv_general_dilated``: matrix products)
and as XLA's (``lax.conv_general_dilated``, what ``nn.Conv`` calls), under XLA's own emitters,
YNNPACK's fusions with and without their defaults beyond dots and reductions, and the options
that hand convolutions to XNNPACK or oneDNN. It asks whether XLA:CPU's own convolution path,
given a kernel library, beats ours inside loops. Each row records what was compiled: the
program's library fusions and calls by kind, its convolutions inside a library fusion or call
and outside (XLA's own emitter), and a hash of its text, which shows whether an option took
effect at all (where two rows compile one program, their times differ by the machine's noise
alone). ms a step is the best call's (of 10 for ours, 2 for XLA's) over all steps; the compile
time excludes the first call.

Each option runs in a fresh process (``XLA_FLAGS`` is read when JAX starts), the options
interleaved over ``--repeats`` passes of the list, each pass in another order, so that a drift
of the machine touches them all. None of these options changes a result beyond float
reordering (the final training losses, or the trained parameters' sum, are recorded to show
it); fast-math options, which do, are left out. An option this XLA does not know fails its
process; it is recorded as an error and the others run.

Usage::

    python benchmarks/xla_cpu_options.py [--workload notebook|cnn] [--rounds 100]
        [--clients 2] [--repeats 2] [--out benchmarks/results/xla_cpu_options[_cnn].json]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import QUICKSTART_SETUP, default_data_dir, machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)
from peers import cifar10_shape

BENCHMARKS = Path(__file__).resolve().parent
DEFAULT_OUT = {"notebook": BENCHMARKS / "results" / "xla_cpu_options.json",
               "cnn": BENCHMARKS / "results" / "xla_cpu_options_cnn.json"}
NO_YNN = "--xla_cpu_experimental_ynn_fusion_type= "  # XNNPACK and oneDNN fusions need it off

OPTIONS = {  # workload -> name -> XLA_FLAGS; the names say what they are on JAX 0.10.2, whose
    # XLA:CPU fuses dots with YNNPACK by default and XNNPACK or oneDNN only when asked
    "notebook": {
        "default (YNNPACK dot fusions)": "",
        "YNNPACK single dots": "--xla_cpu_experimental_ynn_fusion_type=individual_dot",
        "XLA's own dot emitter (no YNNPACK fusions)": "--xla_cpu_experimental_ynn_fusion_type=",
        "XNNPACK dot fusions": NO_YNN + "--xla_cpu_experimental_xnn_fusion_type=dot",
        "oneDNN dot fusions": NO_YNN + "--xla_cpu_experimental_onednn_fusion_type=dot",
    },
    "cnn": {
        "default (YNNPACK fusions)": "",
        "XLA's own emitters (no YNNPACK fusions)": "--xla_cpu_experimental_ynn_fusion_type=",
        "YNNPACK dot and reduction fusions only":
            "--xla_cpu_experimental_ynn_fusion_type=dot,reduce",
        "XNNPACK convolutions":
            NO_YNN + "--xla_cpu_experimental_xnn_fusion_type=individual_convolution",
        "oneDNN convolutions":
            NO_YNN + "--xla_cpu_experimental_onednn_fusion_type=individual_convolution",
        "oneDNN custom calls (XLA's older rewrites)":
            "--xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_custom_call=true",
    },
}

NOTEBOOK_CELL = """
import json, sys
data_dir = sys.argv[1]
""" + QUICKSTART_SETUP + """
rounds = int(sys.argv[2])
out = {}
for name, algorithm in algorithms.items():
    result = fa.simulate(task, fd, algorithm, availability, rounds=rounds, seed=0,
                         eval_every=rounds, test_data=test)
    out[name] = {"ms_per_round": result.timing["run"] / rounds * 1e3,
                 "compile_s": result.timing["compile"],
                 "train_loss": result.history["train_loss"][-1]}
print(json.dumps(out))
"""

# a fresh process runs _cnn_cell (this module imports no JAX backend before XLA_FLAGS is read)
CNN_CELL = """
import json, sys
sys.path.insert(0, sys.argv[1])
from xla_cpu_options import _cnn_cell
print(json.dumps(_cnn_cell(int(sys.argv[2]))))
"""
TIMED_CALLS = {"ours": 10, "xla": 2}  # a step with XLA's convolutions takes ~100x longer


def _cnn_cell(clients: int) -> dict[str, dict[str, Any]]:
    """``profile_cnn_step.py``'s local training of ``clients`` clients (split over the CPU
    devices) with our convolutions and with XLA's: per convolution, ms a step (the best of
    ``TIMED_CALLS`` calls), the compile time, the trained parameters' sum, the compiled
    program's library fusions and calls by kind and its convolutions inside and outside them
    (:func:`_library_use`), and a hash of its text."""
    import jax
    from jax import lax
    from profile_cnn_step import STEPS, local_training

    import fedjax_avail as fa

    devices = min(clients, len(jax.devices()))
    out = {}
    for name, conv in {"ours": fa.tasks.conv_general_dilated,
                       "xla": lax.conv_general_dilated}.items():
        start = time.perf_counter()
        compiled, inputs = local_training(fa.tasks.max_pool, clients, devices, conv=conv)
        compile_s = time.perf_counter() - start
        params = jax.block_until_ready(compiled(*inputs))
        calls = []
        for _ in range(TIMED_CALLS[name]):
            start = time.perf_counter()
            jax.block_until_ready(compiled(*inputs))
            calls.append(time.perf_counter() - start)
        text = compiled.as_text()
        out[name] = {"ms_per_step": min(calls) / (clients * STEPS) * 1e3,
                     "compile_s": compile_s,
                     "param_sum": float(sum(leaf.sum() for leaf in jax.tree.leaves(params))),
                     **_library_use(text),
                     "program": hashlib.sha256(text.encode()).hexdigest()[:16]}
    return out


def _library_use(hlo: str) -> dict[str, dict[str, int]]:
    """What a compiled program's text hands to kernel libraries: ``"library_fusions"``, its
    library fusions and calls by kind; ``"convolutions"``, its ``convolution`` instructions
    in a computation a library fusion calls (and oneDNN's convolution calls, ``"library"``)
    and the rest (XLA's own emitter, ``"xla"``)."""
    counts: dict[str, int] = {}
    computation = None
    for line in hlo.splitlines():
        header = re.match(r"(?:ENTRY )?(%[\w.-]+) \(", line)
        if header:
            computation = header.group(1)
            counts[computation] = 0
        elif computation is not None and " convolution(" in line:
            counts[computation] += 1
    kinds = re.findall(r'"kind":"(__\w+)"|custom_call_target="(__(?:onednn|[xy]nn)[^"]*)"', hlo)
    fused = set(re.findall(r'calls=(%[\w.-]+)[^\n]*"kind":"__', hlo))
    in_library = sum(n for name, n in counts.items() if name in fused)
    onednn = sum(kind.startswith("__onednn$conv") for _, kind in kinds)
    return {"library_fusions": dict(collections.Counter(a or b for a, b in kinds)),
            "convolutions": {"library": in_library + onednn,
                             "xla": sum(counts.values()) - in_library}}


MEASURE = {"notebook": "ms_per_round", "cnn": "ms_per_step"}
RECORDED = {"notebook": ("ms_per_round", "compile_s", "train_loss"),  # medians over processes
            "cnn": ("ms_per_step", "compile_s", "param_sum")}
PROGRAM = {"notebook": (), "cnn": ("library_fusions", "convolutions", "program")}  # compiled


def _cell(workload: str, flags: str, args: argparse.Namespace) -> dict:
    """The workload's cell under ``flags``, or ``{"error": ...}`` when the process fails (an
    XLA that does not know a flag stops at start; the other options still run)."""
    env = {**os.environ, "XLA_FLAGS": flags}
    command = ([sys.executable, "-c", NOTEBOOK_CELL, args.data_dir, str(args.rounds)]
               if workload == "notebook"
               else [sys.executable, "-c", CNN_CELL, str(BENCHMARKS), str(args.clients)])
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        print(f"XLA_FLAGS={flags!r} failed:\n{done.stderr[-1500:]}", file=sys.stderr)
        return {"error": done.stderr[-1500:]}
    return json.loads(done.stdout.splitlines()[-1])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(OPTIONS), default="notebook")
    parser.add_argument("--rounds", type=int, default=100, help="notebook: rounds a run")
    parser.add_argument("--clients", type=int, default=2,
                        help="cnn: clients a call (with XLA's convolutions a step takes over "
                        "1 s on 2 cores)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--data-dir", default=str(default_data_dir()))
    parser.add_argument("--out", type=Path, default=None,
                        help="default: results/xla_cpu_options.json (notebook), "
                        "results/xla_cpu_options_cnn.json (cnn)")
    args = parser.parse_args(argv)
    for name in ("rounds", "clients", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    args.out = args.out or DEFAULT_OUT[args.workload]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    options = OPTIONS[args.workload]
    names = list(options)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for repeat in range(args.repeats):  # each repeat in another order: a drift touches all
        for name in names[repeat % len(names):] + names[:repeat % len(names)]:
            runs[name].append(_cell(args.workload, options[name], args))
    results = {}
    for name, cells in runs.items():
        done = [cell for cell in cells if "error" not in cell]
        results[name] = {"xla_flags": options[name], "runs": cells}
        for column in done[0] if done else ():
            results[name][column] = {key: statistics.median(cell[column][key] for cell in done)
                                     for key in RECORDED[args.workload]}
            for key in PROGRAM[args.workload]:
                # one option compiles one program; None where the processes' differed
                values = [cell[column][key] for cell in done]
                results[name][column][key] = (values[0] if all(v == values[0] for v in values)
                                              else None)
    measure = MEASURE[args.workload]
    default = results[names[0]]
    columns = [column for column in default if column not in ("xla_flags", "runs")]
    print(f"{'option':44s}" + "".join(f"{column:>22s}" for column in columns))
    for name, r in results.items():
        cells = (f"{r[c][measure]:9.2f} ms ({default[c][measure] / r[c][measure]:4.2f}x)"
                 if c in r else f"{'failed':>22s}" for c in columns)
        print(f"{name:44s}" + "".join(cells))
    setting = ({"rounds": args.rounds} if args.workload == "notebook" else
               {"clients": args.clients, "steps_per_client": cifar10_shape.LOCAL_STEPS,
                "batch_size": cifar10_shape.BATCH_SIZE})
    write_json(args.out, {"benchmark": "xla_cpu_options", "workload": args.workload, **setting,
                          "repeats": args.repeats, "date": str(datetime.date.today()),
                          "machine": machine_info(), "results": results})


if __name__ == "__main__":
    main()
