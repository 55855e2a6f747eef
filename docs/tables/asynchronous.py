"""Asynchronous servers on the one clock, from `docs/results/`: `async-mnist` (FedBuff,
FedAsync, FedAvg under log-normal job times and Markov availability; one seed) and the
signature study: `time-to-accuracy-mnist` (availability skew) and
`time-to-accuracy-stragglers-mnist` (stragglers), each algorithm swept over a small
learning-rate grid on 5 seeds, best by the mean over the seeds of their virtual time to 85%."""

from __future__ import annotations

import json
import math
from pathlib import Path

from common import RESULTS, below_short, histories, mean_std, num, panel, row, summary, table

ASYNC = {"fedavg": "FedAvg (each round waits for its slowest client)",
         "fedbuff": "FedBuff (K = 10 of M = 100 jobs)",
         "fedasync": "FedAsync (10,000 updates: the same client work)"}


def async_mnist() -> str:
    """Final accuracy, the virtual time the run took, staleness."""
    rows = summary("async-mnist")
    runs = histories("async-mnist")
    body = []
    for a, name in ASYNC.items():
        r, last = row(rows, algorithm=a), runs[a, 0][-1]
        staleness = last["staleness_mean"] if last["staleness_mean"] == last[
            "staleness_mean"] else 0.0
        body.append([name, f"{r['rounds_done']:,}", num(r["final_test_accuracy"], 3),
                     num(last["virtual_time"], 0), num(staleness, 1)])
    return table(["", "rounds / updates", "final test accuracy", "virtual time at the end",
                  "mean staleness (last evaluation window)"], body)


# Each regime's experiment; its results are every folder named after it: the local-SGD
# algorithms swept over lr, WKAFL over wkafl_lr (its own run: sweeping lr would repeat it
# unchanged), and the grids extended where an algorithm's best value was the grid's edge.
REGIMES = {"skew": "time-to-accuracy-mnist", "stragglers": "time-to-accuracy-stragglers-mnist"}
DEFAULT_LR = {"lr": "0.01", "wkafl_lr": "0.05"}
NAMES = {"fedavg": "FedAvg", "fedavg_small": "FedAvg", "fedlaavg": "FedLaAvg", "mifa": "MIFA",
         "fedbuff": "FedBuff", "wkafl": "WKAFL"}
ASYNCHRONOUS = ("fedbuff", "wkafl")


def _runs(regime: str) -> dict[str, dict]:
    """Per algorithm: its swept setting, its grid (every folder's values, ascending), the best
    value (the sweeps' own score, ``--best time_to=0.85``: the least mean over the seeds of
    their own virtual times to 85%, a seed that never got there counting as its run's end;
    ties: the lowest value) and the paper's, the run's settings, and per value
    {seed: evaluations}."""
    out: dict[str, dict] = {}
    prefix = REGIMES[regime]
    folders = sorted(p.name for p in RESULTS.iterdir()
                     if p.name == prefix or p.name.startswith(prefix + "-"))
    for folder in folders:
        rows = summary(folder)
        for name in dict.fromkeys(r["algorithm"] for r in rows):
            mine = [r for r in rows if r["algorithm"] == name]
            key = next(k for k in DEFAULT_LR if k in mine[0])
            entry = out.setdefault(name, dict(key=key, default=DEFAULT_LR[key], runs={},
                                              scores={}, config=json.loads(
                (RESULTS / folder / panel(mine[0]["setting"]) / "config.json").read_text())))
            for r in mine:
                if r[key] in entry["runs"]:  # one folder's rows would silently hide another's
                    raise ValueError(f"{folder} repeats {name} at {key}={r[key]}, which an "
                                     "earlier folder holds")
                entry["runs"][r[key]] = {seed: h for (a, seed), h in histories(
                    f"{folder}/{panel(r['setting'])}").items() if a == name}
                entry["scores"][r[key]] = r["score"] if r["status"] == "ok" else None
    for entry in out.values():
        entry["grid"] = sorted(entry["runs"], key=float)
        scored = {v: s for v, s in entry["scores"].items() if s is not None}
        entry["best"] = max(sorted(scored, key=float), key=scored.get) if scored else None
    return out


def _tuned(entry: dict) -> str:
    """The tuned value, or the paper's where no value of the grid reached 85%."""
    return entry["best"] or entry["default"]


def _first(evaluations: list[dict], target: float) -> dict | None:
    return next((e for e in evaluations if e["test_accuracy"] >= target), None)


def _k(name: str, config: dict) -> int:
    return config["buffer_size" if name in (*ASYNCHRONOUS, "fedavg_small") else
                  "clients_per_round"]


def _label(name: str, config: dict) -> str:
    k = _k(name, config)
    if name in ASYNCHRONOUS:
        return f"{NAMES[name]} (K = {k} of M = {config['concurrency']})"
    return f"{NAMES[name]} (K = {k})"


def _time_cell(seeds: dict[int, list[dict]], target: float) -> str:
    """Mean +- std of the seeds' virtual times to ``target`` (one decimal below 100), and how
    many seeds reached it."""
    times = [e["virtual_time"] for e in (_first(h, target) for h in seeds.values()) if e]
    reached = f"({len(times)}/{len(seeds)})"
    if not times:
        return f"- {reached}"
    mean, std = mean_std(times)
    digits = 1 if mean < 100 else 0
    spread = f" +- {num(std, digits)}" if len(times) > 1 else ""
    return f"{num(mean, digits)}{spread} {reached}"


def _times(seeds: dict[int, list[dict]], target: float, budget: float) -> dict[int, float]:
    """{seed: virtual time to target}, the budget where a seed did not reach it."""
    return {s: (e["virtual_time"] if (e := _first(h, target)) else budget)
            for s, h in seeds.items()}


def _signature(regime: str) -> str:
    runs = _runs(regime)
    reference = runs["fedavg"]
    budget = reference["config"]["max_virtual_time"]
    fedavg = _times(reference["runs"][_tuned(reference)], 0.85, budget)
    body = []
    for name, r in runs.items():
        shown = [_tuned(r)] + ([r["default"]] if r["default"] != _tuned(r) else [])
        for value in shown:
            seeds = r["runs"][value]
            config, k = r["config"], _k(name, r["config"])
            reached = [e for e in (_first(h, 0.85) for h in seeds.values()) if e]
            jobs = mean_std([e["round"] * k for e in reached])[0] if reached else math.nan
            steps = 1 if name == "wkafl" else config["local_steps"]
            final = mean_std([h[-1]["test_accuracy"] for h in seeds.values()])
            words = ["tuned" if value == r["best"] else "default" if r["best"] else
                     "no value's mean curve reached 85%"]
            if value == r["default"] and name != "fedavg_small":
                words.append("the paper's")
            if value == r["best"] and value in (r["grid"][0], r["grid"][-1]):
                words.append("the grid's edge")
            versus = ("" if name == "fedavg" and value == _tuned(reference) else below_short(
                _times(seeds, 0.85, budget), fedavg))
            body.append([_label(name, config), f"{value} ({', '.join(words)})",
                         _time_cell(seeds, 0.85), _time_cell(seeds, 0.90),
                         f"{jobs:,.0f} x {steps}" if reached else "-",
                         f"{final[0]:.4f} +- {final[1]:.4f}", versus])
    return table(["", "learning rate", "virtual time to 85% (seeds reached)", "to 90%",
                  "client jobs to 85% x local steps", "test accuracy at the end",
                  "time to 85% below tuned FedAvg (K = 100)'s"], body)


def _verdict(regime: str) -> str:
    """Which tuned algorithms reach 85% before tuned FedAvg (K = 100), in the rule's words."""
    runs = _runs(regime)
    reference = runs["fedavg"]
    budget = reference["config"]["max_virtual_time"]
    fedavg = _times(reference["runs"][_tuned(reference)], 0.85, budget)
    groups: dict[str, list[str]] = {}
    for name, r in runs.items():
        if name != "fedavg":
            words = below_short(_times(r["runs"][_tuned(r)], 0.85, budget), fedavg)
            groups.setdefault(words, []).append(_label(name, r["config"]))
    return "; ".join(f"{words}: {', '.join(names)}" for words, names in groups.items())


def time_to_accuracy_skew() -> str:
    """The availability-skew regime: diurnal availability over one-digit clients."""
    return _signature("skew") + ("\n\nAt their tuned rates, time to 85% below FedAvg (K = 100)'s, "
                                 f"seed by seed: {_verdict('skew')}.")


def time_to_accuracy_stragglers() -> str:
    """The stragglers regime: everyone available, heavy-tailed job times."""
    return _signature("stragglers") + (
        "\n\nAt their tuned rates, time to 85% below FedAvg (K = 100)'s, seed by seed: "
        f"{_verdict('stragglers')}.")


def signature_headline() -> str:
    """Each regime's mean virtual time to 85% per algorithm at its tuned learning rate."""
    regimes = {"skew": "availability skew (diurnal, one digit per client)",
               "stragglers": "stragglers (heavy-tailed job times, everyone available)"}
    found = {regime: _runs(regime) for regime in regimes}
    columns = [n for n in NAMES if any(n in runs for runs in found.values())]
    header = ["virtual time to 85%, tuned lr, 5 seeds"]
    for name in columns:
        config = next(runs[name]["config"] for runs in found.values() if name in runs)
        header.append(_label(name, config))
    body = []
    for regime, words in regimes.items():
        runs = found[regime]
        body.append([words] + [_time_cell(runs[n]["runs"][_tuned(runs[n])], 0.85)
                               if n in runs else "not run" for n in columns])
    return table(header, body)


def _figure(regime: str, path: Path) -> None:
    """Each algorithm's mean curve over the seeds at its tuned learning rate, against virtual
    time, in a band from the seeds' minimum to their maximum."""
    from fedjax_avail.experiments._folder import mean_history
    from fedjax_avail.history import History
    from fedjax_avail.plotting import plot_histories

    curves, spread = {}, {}
    for name, r in _runs(regime).items():
        runs = [History(rows) for _, rows in sorted(r["runs"][_tuned(r)].items())]
        label = f"{_label(name, r['config'])}, {r['key'].replace('_', ' ')} {_tuned(r)}"
        curves[label], spread[label] = mean_history(runs), runs
    folder = REGIMES[regime]
    plot_histories(curves, path, x="virtual_time", spread=spread,
                   title=f"{folder}: each algorithm at its tuned learning rate, mean and range "
                         "over 5 seeds")


def figure_skew(path: Path) -> None:
    _figure("skew", path)


def figure_stragglers(path: Path) -> None:
    _figure("stragglers", path)
