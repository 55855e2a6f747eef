"""Check: the numbers of this tree against a git revision's, configuration by configuration.

A refactor must not change a number it did not mean to. This script exports ``--ref`` (default
``HEAD``) and runs the same configurations under both trees, each in a fresh process with the
tree first on ``sys.path``: every algorithm (FedAvg and its variants, FedLaAvg's table dtypes,
MIFA's three starts, the selection strategies, FedBuff, FedAsync, K-async SGD, TWAFL, SASGD,
GSGM, WKAFL on both clocks, sequential SGD), synchronous rounds with durations, deadlines and
over-selection, availability processes and drop-outs, a slot length, virtual-time budgets, runs
axes of seeds and of learning rates in each layout, and a chunked cohort, on scikit-learn's
digits (offline). For each it compares the final models, every per-round metric and the
history rows bit for bit, and writes which differ (``results/same_numbers.json``).

Only ``simulate``'s arguments that every revision since the one clock takes are used, so an
older revision runs the same script.

Usage::

    python benchmarks/same_numbers.py [--ref HEAD] [--only fedavg,gsgm]
        [--out benchmarks/results/same_numbers.json]
"""

from __future__ import annotations

import argparse
import datetime
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import REPO_ROOT, machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)

# Run in a fresh interpreter with the tree under test first on sys.path: writes
# {name: [per run: {params, metrics, history, stopped}] or "error ..."} to argv[1].
CHILD = r'''
import pickle, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
from jax.flatten_util import ravel_pytree
import fedjax_avail as fa

A, C, S, ALG = fa.availability, fa.clock, fa.selection, fa.algorithms
train, test = fa.data.load_digits()
N = 40
fd = fa.data.iid(train["x"].reshape(len(train["x"]), -1), train["y"], N, seed=0)
test = {"x": test["x"].reshape(len(test["x"]), -1), "y": test["y"]}
task = fa.tasks.logistic_regression(64, 10)
mlp = fa.tasks.mlp(64, (16,), 10)
labels = np.asarray([np.bincount(fd.client(i)["y"], minlength=10).argmax() for i in range(N)])
speed = np.exp(np.random.default_rng(1).normal(0, 0.5, N))
LN = C.LogNormal(1.0, 0.5, speed=speed)
table = np.random.default_rng(2).random((15, N)) < 0.4
bern = A.Bernoulli(0.5)
local = dict(local_steps=3, batch_size=5, client_lr=0.05)
CASES = {
    "fedavg": (task, ALG.FedAvg(10, **local), bern, {}),
    "fedavg_mlp_chunk": (mlp, ALG.FedAvg(10, **local), bern, {"client_chunk": 3}),
    "fedavg_durations": (task, ALG.FedAvg(10, **local, durations=LN, deadline=1.5,
                                          over_selection=1.3), A.Markov(p_on=0.3, p_off=0.2),
                         {}),
    "fedprox_data_size": (task, ALG.FedProx(10, **local, weighting="data_size"),
                          A.Periodic(labels % 3, 4), {}),
    "fedadam": (task, ALG.FedAdam(10, **local), bern, {}),
    "fedsgd_dropout": (task, ALG.FedSGD(10, batch_size=5, client_lr=0.05),
                       A.dropout(bern, 0.2), {}),
    "fedlaavg": (task, ALG.FedLaAvg(10, **local), A.Trace(table), {}),
    "fedlaavg_int8_durations": (task, ALG.FedLaAvg(10, **local, table_dtype="int8",
                                                   durations=LN, deadline=2.0), bern, {}),
    "fedlaavg_bf16_uniform": (task, ALG.FedLaAvg(10, **local, table_dtype="bfloat16",
                                                 selection=S.Uniform()), bern, {}),
    "mifa": (task, ALG.MIFA(25, **local), bern, {}),
    "mifa_immediately_durations": (task, ALG.MIFA(25, **local, start="immediately",
                                                  lr_decay=False, durations=LN,
                                                  over_selection=1.2), bern, {}),
    "mifa_authors_code": (task, ALG.MIFA(25, **local, start="authors_code"), bern, {}),
    "divfl": (task, ALG.FedAvg(8, **local, selection=S.DivFL()), bern, {}),
    "subtrunc": (task, ALG.FedAvg(8, **local, selection=S.SubTrunc(lam=0.5, b=1.0)), bern,
                 {}),
    "unionfl": (task, ALG.FedAvg(8, **local, selection=S.UnionFL(mu=0.5, window=3)), bern,
                {}),
    "power_of_choice": (task, ALG.FedAvg(8, **local, selection=S.PowerOfChoice(d=16)), bern,
                        {}),
    "fedbuff": (task, ALG.FedBuff(5, **local, concurrency=20), bern, {}),
    "fedbuff_late_history": (task, ALG.FedBuff(5, **local, concurrency=20, durations=LN,
                                               offline="late", history=4),
                             A.Markov(p_on=0.3, p_off=0.2), {}),
    "fedasync": (task, ALG.FedAsync(**local, history=None), bern, {}),
    "kasync": (task, ALG.KAsyncSGD(5, batch_size=5, client_lr=0.05), A.AlwaysOn(), {}),
    "twafl": (task, ALG.TWAFL(5, batch_size=5, client_lr=0.05), A.AlwaysOn(), {}),
    "sasgd": (task, ALG.SASGD(5, batch_size=5, client_lr=0.05), A.AlwaysOn(), {}),
    "gsgm": (task, ALG.GSGM(5, batch_size=5, client_lr=0.05), A.AlwaysOn(), {}),
    "wkafl": (task, ALG.WKAFL(5, batch_size=5, client_lr=0.05, switch_round=10),
              A.AlwaysOn(), {}),
    "wkafl_event_clock": (task, ALG.WKAFL(5, batch_size=5, client_lr=0.05,
                                          durations=C.Exponential(1.0), concurrency=15), bern,
                          {}),
    "sequential": (task, ALG.SequentialSGD(10, 3, 5, 0.05), bern, {}),
    "seeds_loop": (task, ALG.FedAvg(10, **local), bern, {"seed": [0, 1, 2]}),
    "seeds_vmap": (task, ALG.FedLaAvg(10, **local), bern, {"seed": [0, 1],
                                                           "runs_layout": "vmap"}),
    "learning_rates_map": (task, [ALG.FedAvg(10, 3, 5, lr) for lr in (0.02, 0.05)], bern,
                           {"seed": [0, 0], "runs_layout": "map"}),
    "budget": (task, ALG.FedAvg(10, **local, durations=C.Exponential(1.0)), bern,
               {"max_virtual_time": 17.0}),
    "budget_runs": (task, ALG.FedBuff(5, **local, concurrency=20), bern,
                    {"max_virtual_time": 9.0, "seed": [0, 1, 2]}),
    "slot_length": (task, ALG.FedAvg(10, **local, durations=LN), A.Trace(table),
                    {"slot_length": 0.7}),
}
out, names = sys.argv[1], sys.argv[2].split(",") if sys.argv[2] else list(CASES)
captured = {}
for name in names:
    model, algorithm, process, kw = CASES[name]
    try:
        result = fa.simulate(model, fd, algorithm, process, rounds=30, eval_every=7,
                             test_data=test, **kw)
    except Exception as error:
        captured[name] = f"error {type(error).__name__}: {error}"
        continue
    captured[name] = [dict(params=np.asarray(ravel_pytree(r.params)[0]),
                           metrics={k: np.asarray(v) for k, v in r.round_metrics.items()},
                           history=[dict(row) for row in r.history.rows], stopped=r.stopped)
                      for r in (result if isinstance(result, list) else [result])]
with open(out, "wb") as f:
    pickle.dump(captured, f)
'''


def capture(tree: Path, names: str, out: Path) -> dict:
    """Every configuration's runs under ``tree`` (a fresh process)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-c", CHILD, str(out), names], cwd=tempfile.gettempdir(),
                   env=env, check=True)
    with open(out, "rb") as f:
        return pickle.load(f)


def differences(before, after) -> list[str]:
    """What differs between one configuration's runs under the two trees (empty: nothing)."""
    if isinstance(before, str) or isinstance(after, str):
        return [] if before == after else [f"before: {before!s:.200}", f"after: {after!s:.200}"]
    found = []
    for i, (a, b) in enumerate(zip(before, after, strict=True)):
        if not np.array_equal(a["params"], b["params"]):
            found.append(f"run {i}: final model (largest difference "
                         f"{np.max(np.abs(a['params'] - b['params'])):.3g})")
        for key in sorted(a["metrics"].keys() | b["metrics"].keys()):
            if key not in a["metrics"] or key not in b["metrics"]:
                found.append(f"run {i}: per-round metric {key} only "
                             f"{'after' if key in b['metrics'] else 'before'}")
            elif not np.array_equal(a["metrics"][key], b["metrics"][key]):
                found.append(f"run {i}: per-round metric {key}")
        if a["history"] != b["history"]:
            found.append(f"run {i}: history rows")
        if a["stopped"] != b["stopped"]:
            found.append(f"run {i}: stopped {a['stopped']!r} -> {b['stopped']!r}")
    return found


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ref", default="HEAD", help="git revision to compare against")
    parser.add_argument("--only", default="", help="comma-separated configurations")
    parser.add_argument("--out", type=Path,
                        default=REPO_ROOT / "benchmarks" / "results" / "same_numbers.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", args.ref], cwd=REPO_ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        before = capture(Path(tmp), args.only, Path(tmp) / "before.pkl")
        after = capture(REPO_ROOT, args.only, Path(tmp) / "after.pkl")
    rows = {name: differences(before[name], after[name]) for name in before}
    for name, found in rows.items():
        print(f"{name}: {'same' if not found else '; '.join(found)}", flush=True)
    payload = {"benchmark": "same_numbers", "ref": args.ref,
               "date": datetime.date.today().isoformat(), "machine": machine_info(),
               "same": sorted(n for n, f in rows.items() if not f),
               "differ": {n: f for n, f in rows.items() if f}}
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
