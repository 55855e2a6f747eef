"""Benchmark: a round's cost against N, K, the task kind and the client loop, and FLOP/s.

Every part runs in one process, side by side (the machine's noise hits all rows alike):

* ``n``: FedAvg and FedLaAvg on MNIST-shaped data (28x28 uint8 images, max(60000, 2N) rows
  split evenly, 784x10 logistic regression), K = 100, C = 10, B = 5, Bernoulli(0.5)
  availability, for N = 10^2 ... 10^6. FedLaAvg stores its ``[N, P]`` table in float32 while it
  fits in ``--table-budget`` GB, in bfloat16 beyond (the ``table_dtype`` column). Records
  s/round, client steps/s (K C / s per round), and memory: the formula
  (:func:`fedjax_avail.estimate_memory`) against the device bytes the run held plus XLA's
  working set (``Result.memory["measured"]``), and the process's peak RSS.
* ``k``: FedAvg at N = max(10^4, 4K) for K = 10, 100, 1000 (``--k-values``; on a GPU to 10^5),
  each round against the time its bytes take at the memory bandwidth measured in the same run
  (``_common.memory_bytes_per_s``): the batches its steps read (``floor_batches_s``) and
  those with the members' models read and written every step (``floor_lockstep_s``, issue
  36's GPU floor; :func:`round_floor_bytes`). ``--trace T`` also records where a round's time
  goes: the T costliest operations of a few traced rounds (``operations``: ms and calls a
  round, the HLO shape; on a GPU its kernels' time; :func:`_round_operations`).
* ``tasks``: logistic regression, MLP (784-200-200-10), LeNet-5 and the Sentiment140 LSTM
  (25 tokens, 25-d embedding, 2 x 16 units), FedAvg K = 100 (LSTM: K = 50), each with the
  cohort trained by one ``vmap`` (``client_chunk=None``), by sequential ``vmap`` s of 10
  clients (``client_chunk=10``) and one client at a time (``client_chunk=1``).
* ``flops``: a 2048 x 2048 float32 matmul's FLOP/s, measured here; each task's local-training
  FLOP/s = (XLA's FLOP count of one client step on one batch) x K x C / s per round; and the
  bare batched-einsum SGD of a pre-gathered cohort (no data gather, no selection, no
  bookkeeping: the floor for the logistic-regression round).

The JSON goes to ``--out``; with the ``n`` part, a figure of s/round and memory against N next
to it (``scaling.png``).

All times exclude compilation (``Result.timing``) and come from ``block_until_ready``; each
configuration runs once untimed (warm-up) then ``--repeats`` times, best kept.

Usage::

    python benchmarks/scaling.py [--parts n,k,tasks,flops] [--rounds 100] [--max-n 1000000]
                                 [--n-values 100,1000,...] [--algorithms fedavg,fedlaavg]
                                 [--k-values 10,100,1000] [--trace 12]
                                 [--tasks mlp,lenet5,...]
                                 [--quick] [--out results/scaling.json]

The JSON is rewritten after every row, so a run cut short keeps the rows it finished.

XLA:CPU keeps freed buffers in the process, so a run at N = 10^6 after smaller ones may be
refused by the memory check; the README's N = 10^6 rows come from fresh processes
(``--parts n --n-values 1000000 --algorithms fedlaavg --out results/scaling_1e6_fedlaavg.json``).
"""

from __future__ import annotations

import argparse
import datetime
import resource
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _common import (  # noqa: I001 (benchmarks/ is on sys.path)
    best_seconds,
    machine_info,
    matmul_flop_per_s,
    memory_bytes_per_s,
    simulate_programs,
    traced_operations,
    write_json,
)

import fedjax_avail as fa
from fedjax_avail.local import flat_size

OUT = Path(__file__).resolve().parent / "results" / "scaling.json"
K, C, B = 100, 10, 5
TASKS = ("logistic_regression", "mlp", "lenet5", "lstm")
# The k part's --trace profiles TRACE_MEMBERS / K rounds (1 to 10), whose events fit in the
# profiler's trace (_common.TRACE_EVENTS_CAP; on a CPU about 75 events a member trained: one
# round at K = 10^4 takes 745,000; a K whose one round does not fit records the error)
TRACE_MEMBERS = 10_000


def _images(n: int, rows: int | None = None) -> fa.FederatedData:
    """MNIST-shaped random data: ``max(60000, 2N)`` rows split evenly among N clients."""
    rows = rows or max(60_000, 2 * n)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (rows, 28, 28), dtype=np.uint8)
    return fa.FederatedData.from_arrays({"x": x, "y": rng.integers(0, 10, rows)},
                                        np.arange(rows) % n, num_clients=n)


def _tokens(n: int, rows: int = 20_000, length: int = 25, vocab: int = 5000):
    rng = np.random.default_rng(0)
    x = rng.integers(1, vocab, (rows, length)).astype(np.int32)
    return fa.FederatedData.from_arrays({"x": x, "y": rng.integers(0, 2, rows)},
                                        np.arange(rows) % n, num_clients=n)


def _time(task, fd, algorithm, rounds: int, repeats: int, warmup: bool = True,
          **kwargs) -> fa.Result:
    """The fastest of ``repeats`` timed runs (after an untimed warm-up run if ``warmup``; the
    round times exclude compilation either way); its Result. Only the best Result is kept
    alive: at N = 10^6 a second [N, P] table would not fit."""
    best = None
    for i in range(repeats + int(warmup)):
        result = fa.simulate(task, fd, algorithm, fa.availability.Bernoulli(0.5), rounds=rounds,
                             callbacks=[fa.callbacks.Evaluation(every=rounds,
                                                                train_examples=2000)],
                             **kwargs)
        if (i or not warmup) and (best is None or result.timing["run"] < best.timing["run"]):
            best = result
        del result
    return best


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def part_n(args, record) -> None:
    task = fa.tasks.logistic_regression(784, 10)
    size = flat_size(task.init(jax.random.PRNGKey(0)))
    sizes = [n for n in args.n_values if n <= args.max_n]
    for n in sizes:
        fd = _images(n)
        fits = n * size * 4 <= args.table_budget * 1e9
        algorithms = {
            "fedavg": fa.algorithms.FedAvg(clients_per_round=K, local_steps=C, batch_size=B,
                                           client_lr=0.01),
            "fedlaavg": fa.algorithms.FedLaAvg(clients_per_round=K, local_steps=C, batch_size=B,
                                               client_lr=0.01,
                                               table_dtype="float32" if fits else "bfloat16"),
        }
        for name, algorithm in algorithms.items():
            if name not in args.algorithms:
                continue
            big = n >= 1_000_000
            result = _time(task, fd, algorithm, args.rounds, 1 if big else args.repeats,
                           warmup=not big)
            spr = result.timing["s_per_round"]
            row = {"part": "n", "algorithm": name, "num_clients": n, "k": K,
                   "table_dtype": getattr(algorithm, "table_dtype", None),
                   "s_per_round": spr, "client_steps_per_s": K * C / spr,
                   "compile_s": result.timing["compile"],
                   "estimated_bytes": result.memory.get("estimated"),
                   "measured_bytes": result.memory.get("measured"),
                   "peak_rss_gb": _peak_rss_gb(),
                   # simulate's default mesh="auto": the cohort over the CPU's devices, each
                   # holding a copy of the state (memory is a total over them), or one device
                   # when that would not fit
                   "devices": result.memory.get("devices")}
            record(row)
            ratio = row["measured_bytes"] / row["estimated_bytes"]
            print(f"N={n:>8} {name:9s} {row['table_dtype'] or '':9s} {spr * 1e3:8.2f} ms/round "
                  f"{row['client_steps_per_s']:9.0f} client steps/s  memory estimated "
                  f"{fa.memory.format_bytes(row['estimated_bytes'])}, measured "
                  f"{fa.memory.format_bytes(row['measured_bytes'])} ({ratio:.2f}x), "
                  f"peak RSS {row['peak_rss_gb']:.1f} GB", flush=True)
        del fd


def round_floor_bytes(fd: fa.FederatedData, params: int, k: int) -> dict[str, int]:
    """Bytes a FedAvg round of ``k`` members, ``C`` steps of ``B`` rows each, moves through
    device memory: ``"batches"``, the rows of ``fd`` its client steps read (no schedule avoids
    them), and ``"models_each_step"``, each member's ``params`` float32 parameters read and
    written once a step, what a cohort trained in lockstep (a ``vmap`` over members whose models
    outgrow the caches, as on a GPU) moves besides (issue 36's floor). A CPU trains members one
    after another and keeps a member's model in its cache between steps."""
    row = sum(jax.dtypes.canonicalize_dtype(a.dtype).itemsize * int(np.prod(a.shape[1:]))
              for a in fd.arrays.values())
    return {"batches": k * C * B * row, "models_each_step": k * C * 2 * 4 * params}


def part_k(args, record) -> None:
    task = fa.tasks.logistic_regression(784, 10)
    params = flat_size(task.init(jax.random.PRNGKey(0)))
    bandwidth = memory_bytes_per_s()
    print(f"memory bandwidth (an elementwise pass over 512 MiB): {bandwidth / 1e9:.0f} GB/s",
          flush=True)
    for k in args.k_values:
        n = max(10_000, 4 * k)  # about N / 2 available: K of them, not padding slots
        fd = _images(n)
        algorithm = fa.algorithms.FedAvg(clients_per_round=k, local_steps=C, batch_size=B,
                                         client_lr=0.01)
        result = _time(task, fd, algorithm, args.rounds, args.repeats)
        spr = result.timing["s_per_round"]
        floor = round_floor_bytes(fd, params, k)
        batches_s = floor["batches"] / bandwidth
        lockstep_s = batches_s + floor["models_each_step"] / bandwidth
        row = {"part": "k", "algorithm": "fedavg", "num_clients": n, "k": k,
               "s_per_round": spr, "client_steps_per_s": k * C / spr,
               "memory_bytes_per_s": bandwidth, "floor_bytes": floor,
               "floor_batches_s": batches_s, "floor_lockstep_s": lockstep_s,
               "devices": result.memory.get("devices")}
        print(f"N={n:>6} K={k:>6} fedavg {spr * 1e3:8.2f} ms/round "
              f"{k * C / spr:9.0f} client steps/s; at the memory bandwidth its batches take "
              f"{batches_s * 1e3:.3f} ms ({spr / batches_s:.1f}x), with the models each step "
              f"{lockstep_s * 1e3:.3f} ms ({spr / lockstep_s:.2f}x)", flush=True)
        del result
        if args.trace:
            try:  # a profiler that fails (no CUPTI on a GPU, say) costs the list, not the row
                row.update(_round_operations(task, fd, algorithm, args.trace))
            except Exception as error:  # noqa: BLE001 (recorded in the row and printed)
                row["operations_error"] = repr(error)
                print(f"  no trace: {error!r}", flush=True)
            for op in row.get("operations", []):
                print(f"  {op['ms']:8.3f} ms  x{op['calls']:<6.0f} {op['op']:36s} {op['hlo']}",
                      flush=True)
        record(row)
        del fd


def _round_operations(task: fa.Task, fd: fa.FederatedData, algorithm: fa.algorithms.FedAvg,
                      top: int) -> dict[str, Any]:
    """The ``top`` costliest instructions of FedAvg's rounds (``_common.traced_operations``: ms
    and calls a round), over ``TRACE_MEMBERS / K`` rounds (1 to 10) of one profiled run, whose
    program's instructions are read as it is compiled (its compilation records no instruction's
    events).

    Raises:
      RuntimeError: the engine compiled no program that ``simulate_programs`` saw.
    """
    rounds = min(10, max(1, TRACE_MEMBERS // algorithm.clients_per_round))

    def run() -> fa.Result:
        return fa.simulate(task, fd, algorithm, fa.availability.Bernoulli(0.5), rounds=rounds)

    with simulate_programs() as definitions:
        # the call fills definitions before traced_operations reads the trace with them
        profile = traced_operations(run, definitions, rounds, top)
    if not definitions:
        raise RuntimeError("simulate_programs saw no compiled program")
    return {"trace_rounds": rounds, **profile}


def _tasks():
    images = _images(1_000)
    return {
        "logistic_regression": (fa.tasks.logistic_regression(784, 10), images, K),
        "mlp": (fa.tasks.mlp(784, (200, 200), 10), images, K),
        "lenet5": (fa.tasks.lenet5((28, 28, 1)), images, K),
        "lstm": (fa.tasks.lstm_classifier(5000, embeddings=np.random.default_rng(0).normal(
            size=(5000, 25)).astype(np.float32)), _tokens(1_000), 50),
    }


def _step_flops(task, fd) -> float:
    """XLA's FLOP count of one SGD step of one client on one batch of B rows."""
    batch = {k: jnp.asarray(v[:B]) for k, v in fd.arrays.items()}
    params = task.init(jax.random.PRNGKey(0))

    def step(p, b):
        grads = jax.grad(task.loss)(p, b)
        return jax.tree.map(lambda w, g: w - 0.01 * g, p, grads)

    cost = jax.jit(step).lower(params, batch).compile().cost_analysis()
    return float((cost[0] if isinstance(cost, list) else cost)["flops"])


def part_tasks(args, record, matmul_flops: float | None) -> None:
    for name, (task, fd, k) in _tasks().items():
        if name not in args.tasks:
            continue
        flops = _step_flops(task, fd) * k * C
        for label, chunk in (("vmap", None), ("chunks_of_10", 10), ("lax_map", 1)):
            algorithm = fa.algorithms.FedAvg(clients_per_round=k, local_steps=C, batch_size=B,
                                             client_lr=0.01)
            result = _time(task, fd, algorithm, args.task_rounds, args.repeats,
                           client_chunk=chunk)
            spr = result.timing["s_per_round"]
            rate = flops / spr
            row = {"part": "tasks", "task": name, "loop": label, "k": k, "s_per_round": spr,
                   "client_steps_per_s": k * C / spr, "round_flops": flops,
                   "flop_per_s": rate,
                   "fraction_of_matmul": rate / matmul_flops if matmul_flops else None}
            record(row)
            share = f", {100 * row['fraction_of_matmul']:.1f}% of the matmul" if (
                matmul_flops) else ""
            print(f"{name:20s} {label:13s} {spr * 1e3:9.2f} ms/round "
                  f"{k * C / spr:9.0f} client steps/s {rate / 1e9:7.2f} GFLOP/s{share}",
                  flush=True)


def _bare_einsum_s_per_round(repeats: int = 5, rounds: int = 50) -> float:
    """C SGD steps of K logistic regressions on pre-gathered ``[K, C, B, 784]`` batches."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.random((rounds, K, C, B, 784), np.float32))
    y = jax.nn.one_hot(rng.integers(0, 10, (rounds, K, C, B)), 10)

    def one_round(w, xy):
        xs, ys = xy

        def step(wk, batch):
            xb, yb = batch  # [K, B, 784], [K, B, 10]
            p = jax.nn.softmax(jnp.einsum("kbi,koi->kbo", xb, wk))
            grad = jnp.einsum("kbo,kbi->koi", p - yb, xb) / B
            return wk - 0.01 * grad, None

        wk, _ = jax.lax.scan(step, jnp.broadcast_to(w, (K, 10, 784)),
                             (jnp.moveaxis(xs, 1, 0), jnp.moveaxis(ys, 1, 0)))
        return w + jnp.mean(wk - w, axis=0), None

    run = jax.jit(lambda w: jax.lax.scan(one_round, w, (x, y))[0])
    return best_seconds(run, jnp.zeros((10, 784), jnp.float32), repeats) / rounds


def plot(rows: list, path: Path) -> None:
    """s/round and memory (formula and measured) against N: the ``n`` part as a figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (time_ax, memory_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for name in ("fedavg", "fedlaavg"):
        mine = [r for r in rows if r["part"] == "n" and r["algorithm"] == name]
        if not mine:
            continue
        n = [r["num_clients"] for r in mine]
        time_ax.plot(n, [1e3 * r["s_per_round"] for r in mine], "o-", label=name)
        memory_ax.plot(n, [r["estimated_bytes"] / 1e9 for r in mine], "o-",
                       label=f"{name}, formula")
        memory_ax.plot(n, [r["measured_bytes"] / 1e9 for r in mine], "x--",
                       label=f"{name}, measured")
    time_ax.set(xscale="log", xlabel="N clients", ylabel="ms per round", ylim=(0, None),
                title=f"K = {K}, C = {C}, B = {B}, MNIST-shaped LR")
    memory_ax.set(xscale="log", yscale="log", xlabel="N clients",
                  ylabel="GB on the devices (all of them)",
                  title="memory: estimate_memory vs measured")
    for ax in (time_ax, memory_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="flops,tasks,k,n")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--task-rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-n", type=int, default=1_000_000)
    parser.add_argument("--n-values", type=lambda v: [int(float(x)) for x in v.split(",")],
                        default=[100, 1_000, 10_000, 100_000, 1_000_000],
                        help="N of the n part (comma-separated)")
    parser.add_argument("--algorithms", type=lambda v: v.split(","),
                        default=["fedavg", "fedlaavg"], help="algorithms of the n part")
    parser.add_argument("--table-budget", type=float, default=8.0,
                        help="GB a float32 FedLaAvg table may take before bfloat16 is used")
    parser.add_argument("--k-values", type=lambda v: [int(float(x)) for x in v.split(",")],
                        default=[10, 100, 1000], help="K of the k part (comma-separated)")
    parser.add_argument("--trace", type=int, default=0,
                        help="operations of the k part's rounds to list (0: no trace)")
    parser.add_argument("--tasks", type=lambda v: v.split(","), default=list(TASKS),
                        help="tasks of the tasks part (comma-separated)")
    parser.add_argument("--quick", action="store_true",
                        help="N <= 10^4, 10 rounds, 1 repeat (a smoke test of the script)")
    parser.add_argument("--out", type=Path, default=OUT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.quick:
        args.max_n, args.rounds, args.task_rounds, args.repeats = 10_000, 10, 3, 1
    parts = args.parts.split(",")
    rows: list = []
    matmul = bare = None
    if "flops" in parts:
        matmul = matmul_flop_per_s()
        bare = _bare_einsum_s_per_round()
        print(f"dense 2048x2048 float32 matmul: {matmul / 1e9:.1f} GFLOP/s; bare batched-einsum "
              f"SGD of the logistic-regression cohort (K={K}, C={C}, B={B}): "
              f"{bare * 1e3:.2f} ms/round", flush=True)
    payload = {
        "benchmark": "scaling",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "settings": {"rounds": args.rounds, "task_rounds": args.task_rounds,
                     "repeats": args.repeats, "K": K, "C": C, "B": B},
        "matmul_flop_per_s": matmul,
        "bare_einsum_s_per_round": bare,
        "rows": rows,
    }

    def record(row: dict) -> None:
        """Keeps ``row`` and rewrites the JSON: a run cut short keeps every finished row."""
        rows.append(row)
        write_json(args.out, payload)

    if "tasks" in parts:
        part_tasks(args, record, matmul)
    if "k" in parts:
        part_k(args, record)
    if "n" in parts:
        part_n(args, record)
    write_json(args.out, payload)
    if "n" in parts:
        plot(rows, args.out.with_suffix(".png"))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"{time.perf_counter() - t0:.0f} s in all")
