"""Benchmark: s/round of this tree against a git revision, side by side in one run.

"Nothing here slows a round" is a ratio measured on one machine at one time: this script
exports ``--ref`` (default ``HEAD``: the last commit, i.e. the tree without the uncommitted
change) into a temporary directory and times both trees in alternating subprocesses, so slow
and fast phases of a noisy machine fall on both alike. Each measurement is one
``fa.simulate`` call in a fresh process; ``s_per_round`` is the engine's own round time
(compilation and evaluation excluded), ``compile_s`` reported apart; the first repeat's final
models of the two trees are compared (``final_models_identical``, and the largest difference).

Setting: the FedLaAvg Fig. 4 MNIST benchmark (``fedlaavg_mnist.py``: N = 1000 one-digit clients,
logistic regression, diurnal availability D = 1, E = 100, K = 100, C = 10, B = 5, lr 0.01),
for FedAvg and FedLaAvg (``--algorithms`` also takes ``fedavg_divfl``: FedAvg with DivFL's
selection, ``fedavg_poc``: with Power-of-Choice, d = N; ``fedavg_lenet5`` and ``fedavg_cnn``:
FedAvg training LeNet-5 or WKAFL's CNN instead, the convolutional models on a CPU;
``fedasync_mlp``: FedAsync, one job an update, training an MLP 784-200-200-10 from its default
H = 256 model history, event clock with M = 100 jobs in flight, Exponential(1) job times; a
timing workload: at the client lr 0.01 under this availability its loss does not fall;
``fedavg_mlp_chunk7``: FedAvg training that MLP with ``client_chunk=7``, 15 chunks for K = 100,
the last overlapping the one before: the working set of a chunked cohort).
``fedavg_pfl_cnn``: FedAvg on ``peer_comparison.py``'s CIFAR-10 shape (pfl's CNN as each tree's
``benchmarks/peer_comparison.py`` writes it, cohort 50, 5 steps of 10 images, lr 0.1, the
training loss of 5000 images). ``fedbuff_<N>`` and ``kasync_<N>`` (e.g. ``fedbuff_1e5``) time
asynchronous updates on ``async_scaling.py``'s data (N clients of 10 random 8x8 images, 64x10
logistic regression): FedBuff (K = 10, Q = 5, B = 5) and K-async SGD (K = 10, B = 4) on the
event clock (Exponential(1) job times, M = 100 jobs in flight, H = 64), availability
Bernoulli(0.5). ``fedlaavg_<N>`` (e.g. ``fedlaavg_1e5``): FedLaAvg on ``scaling.py``'s data
(N clients of MNIST-shaped random images, max(60000, 2N) rows, logistic regression, K = 100,
C = 10, B = 5, Bernoulli(0.5)), its [N, P] table in float32; ``fedavg_<N>`` (e.g.
``fedavg_1e6``): FedAvg on the same.

Besides ``s_per_round``, each run's ``total_s`` (the whole ``simulate`` call: planning and
placing the state, compilation and evaluation included) is recorded.

Usage::

    python benchmarks/before_after.py [--ref HEAD] [--rounds 300] [--repeats 5]
        [--algorithms fedavg,fedlaavg] [--out benchmarks/results/before_after.json]

Where this repository's history is not at hand (a lent GPU machine gets the working tree
alone), export the revision here (``git archive REV | tar -x -C DIR``), carry ``DIR`` along and
pass ``--ref-tree DIR --ref REV``: ``--ref`` then only names it in the results.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import default_data_dir, machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "before_after.json"  # named per algorithms

# Run in a fresh interpreter with the tree under test first on sys.path.
CHILD = """
import json, re, sys, time
import numpy as np
import fedjax_avail as fa
from jax.flatten_util import ravel_pytree
algorithm_name, rounds, data_dir, params_out = sys.argv[1], int(sys.argv[2]), *sys.argv[3:5]
if algorithm_name.startswith(("fedbuff_", "kasync_")):  # async_scaling.py's workload
    name, n = algorithm_name.rsplit("_", 1)
    n = int(float(n))
    rng = np.random.default_rng(0)
    fd = fa.data.iid(rng.integers(0, 255, (n * 10, 8, 8)).astype(np.uint8),
                     rng.integers(0, 10, n * 10), n)
    events = dict(concurrency=100, history=64, durations=fa.clock.Exponential(1.0))
    algorithm = (fa.algorithms.FedBuff(buffer_size=10, local_steps=5, batch_size=5, **events)
                 if name == "fedbuff" else
                 fa.algorithms.KAsyncSGD(clients_per_round=10, batch_size=4, **events))
    process = fa.availability.Bernoulli(0.5)
    task = fa.tasks.logistic_regression(64, 10)
elif re.fullmatch(r"(fedavg|fedlaavg)_[0-9.]+(e[0-9]+)?", algorithm_name):  # scaling.py's
    name, n = algorithm_name.split("_")
    n = int(float(n))
    rows = max(60_000, 2 * n)
    rng = np.random.default_rng(0)
    fd = fa.FederatedData.from_arrays(
        {"x": rng.integers(0, 256, (rows, 28, 28), dtype=np.uint8),
         "y": rng.integers(0, 10, rows)}, np.arange(rows) % n, num_clients=n)
    common = dict(clients_per_round=100, local_steps=10, batch_size=5, client_lr=0.01)
    algorithm = (fa.algorithms.FedAvg(**common) if name == "fedavg" else
                 fa.algorithms.FedLaAvg(**common, table_dtype="float32"))
    process = fa.availability.Bernoulli(0.5)
    task = fa.tasks.logistic_regression(784, 10)
elif algorithm_name == "fedavg_pfl_cnn":  # peer_comparison.py's CIFAR-10 shape, that tree's
    import os
    sys.path.insert(0, os.path.join(os.environ["PYTHONPATH"], "benchmarks"))
    import peer_comparison
    from peers import cifar10_shape as shape
    fd, process = peer_comparison.cifar10_data(), fa.availability.AlwaysOn()
    algorithm = fa.algorithms.FedAvg(
        clients_per_round=shape.COHORT, local_steps=shape.LOCAL_STEPS,
        batch_size=shape.BATCH_SIZE, client_lr=shape.CLIENT_LR)
    task = fa.tasks.classification(peer_comparison.PflSimpleCNN(), shape.IMAGE_SHAPE)
else:
    train, test = fa.data.load_mnist(data_dir)
    fd = fa.data.one_label_per_client(train["x"], train["y"], 1000, seed=0)
    process = fa.availability.diurnal(fd.client_labels(), D=1, E=100)
    common = dict(clients_per_round=100, local_steps=10, batch_size=5, client_lr=0.01)
    algorithm = {"fedavg": fa.algorithms.FedAvg, "fedlaavg": fa.algorithms.FedLaAvg,
                 "fedavg_divfl": lambda **c: fa.algorithms.FedAvg(
                     **c, selection=fa.selection.DivFL()),
                 "fedavg_poc": lambda **c: fa.algorithms.FedAvg(
                     **c, selection=fa.selection.PowerOfChoice(d=1000)),
                 "fedavg_lenet5": fa.algorithms.FedAvg, "fedavg_cnn": fa.algorithms.FedAvg,
                 "fedavg_mlp_chunk7": fa.algorithms.FedAvg,
                 "fedasync_mlp": lambda clients_per_round, **c: fa.algorithms.FedAsync(
                     **c, concurrency=100, durations=fa.clock.Exponential(1.0)),
                 }[algorithm_name](**common)
    task = {"fedavg_lenet5": lambda: fa.tasks.lenet5((28, 28, 1)),
            "fedavg_cnn": lambda: fa.tasks.cnn((28, 28, 1)),
            "fedasync_mlp": lambda: fa.tasks.mlp(784, (200, 200), 10),
            "fedavg_mlp_chunk7": lambda: fa.tasks.mlp(784, (200, 200), 10)}.get(
        algorithm_name, lambda: fa.tasks.logistic_regression(784, 10))()
chunk = 7 if algorithm_name.endswith("_chunk7") else "auto"
# the training loss of 5000 examples (all 50,000 CIFAR-10-shape images took 54 s)
evaluation = fa.callbacks.Evaluation(every=rounds, train_examples=5000)
result = fa.simulate(task, fd, algorithm, process, rounds=rounds, seed=0, client_chunk=chunk,
                     callbacks=[evaluation] if algorithm_name == "fedavg_pfl_cnn" else (),
                     eval_every=None if algorithm_name == "fedavg_pfl_cnn" else rounds)
np.save(params_out, np.asarray(ravel_pytree(result.params)[0]))
print(json.dumps({"s_per_round": result.timing["s_per_round"],
                  "compile_s": result.timing["compile"],
                  "total_s": result.timing["total"],
                  "working_set_bytes": result.memory.get("working_set"),
                  "final_train_loss": result.history.rows[-1]["train_loss"],
                  "module": fa.__file__}))
"""


def export(ref: str, into: Path) -> Path:
    """The files of git revision ``ref`` under ``into`` (``git archive``)."""
    archive = subprocess.run(["git", "archive", ref], cwd=REPO_ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def measure(tree: Path, algorithm: str, rounds: int, data_dir: str, params_out: Path) -> dict:
    """One child's figures; its final model, raveled, is saved to ``params_out``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CHILD, algorithm, str(rounds), data_dir,
                          str(params_out)],
                         cwd=tempfile.gettempdir(), env=env, check=True, capture_output=True,
                         text=True).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    if not figures.pop("module").startswith(str(tree)):
        raise RuntimeError(f"the child did not import fedjax_avail from {tree}")
    return figures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ref", default="HEAD", help="git revision to compare against")
    parser.add_argument("--ref-tree", type=Path, default=None,
                        help="that revision's files, already exported (no git needed)")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--algorithms", default="fedavg,fedlaavg")
    parser.add_argument("--data-dir", default=str(default_data_dir()))
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON result (default: results/before_after_<algorithms>.json)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        before = args.ref_tree.resolve() if args.ref_tree else export(args.ref, Path(tmp))
        if not (before / "fedjax_avail" / "__init__.py").is_file():
            raise SystemExit(f"--ref-tree {args.ref_tree}: no fedjax_avail package in it")
        trees = {"before": before, "after": REPO_ROOT}
        for algorithm in args.algorithms.split(","):
            runs: dict[str, list[dict]] = {"before": [], "after": []}
            for i in range(args.repeats):
                order = ("before", "after") if i % 2 == 0 else ("after", "before")
                for side in order:
                    runs[side].append(measure(trees[side], algorithm, args.rounds,
                                              args.data_dir, Path(tmp) / f"{side}{i}.npy"))
            row = {side: {"s_per_round_median": statistics.median(
                r["s_per_round"] for r in values), "s_per_round_min": min(
                r["s_per_round"] for r in values), "s_per_round": [
                    r["s_per_round"] for r in values], "compile_s_median": statistics.median(
                        r["compile_s"] for r in values), "total_s_median": statistics.median(
                            r.get("total_s", float("nan")) for r in values), "total_s": [
                                r.get("total_s") for r in values], "final_train_loss": values[0][
                            "final_train_loss"], "working_set_bytes": values[0][
                                "working_set_bytes"]} for side, values in runs.items()}
            row["ratio_after_over_before"] = (row["after"]["s_per_round_median"]
                                              / row["before"]["s_per_round_median"])
            rows[algorithm] = row
            # The first repeat's final models (same seed on both sides), compared.
            before_model, after_model = (np.load(Path(tmp) / f"{side}0.npy")
                                         for side in ("before", "after"))
            row["final_models_identical"] = bool(np.array_equal(before_model, after_model))
            row["final_models_max_abs_difference"] = (
                float(np.max(np.abs(before_model - after_model)))
                if before_model.shape == after_model.shape else None)
            row["ratio_of_best"] = (row["after"]["s_per_round_min"]
                                    / row["before"]["s_per_round_min"])
            print(f"{algorithm}: before {row['before']['s_per_round_median'] * 1e3:.2f} ms, "
                  f"after {row['after']['s_per_round_median'] * 1e3:.2f} ms a round "
                  f"(ratio {row['ratio_after_over_before']:.3f}; of the best runs "
                  f"{row['ratio_of_best']:.3f}; whole call "
                  f"{row['before']['total_s_median']:.2f} s before, "
                  f"{row['after']['total_s_median']:.2f} s after; final models identical: "
                  f"{row['final_models_identical']})", flush=True)
    commit = None if args.ref_tree else subprocess.run(
        ["git", "rev-parse", args.ref], cwd=REPO_ROOT, check=True, capture_output=True,
        text=True).stdout.strip()
    payload = {"benchmark": "before_after", "ref": args.ref, "ref_commit": commit,
               "rounds": args.rounds,
               "repeats": args.repeats, "date": datetime.date.today().isoformat(),
               "machine": machine_info(), "results": rows}
    out = args.out or DEFAULT_OUT.with_name(
        f"before_after_{args.algorithms.replace(',', '_')}.json")
    write_json(out, payload)
    return payload


if __name__ == "__main__":
    main()
