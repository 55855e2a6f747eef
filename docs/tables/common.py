"""Reading committed results and stating what they support.

Every table and sentence the generator writes goes through these helpers, so one rule decides
when a number "matches" the paper's and when an ordering "holds":

* **A number matches** the paper's when they differ by at most the sum of the two spreads: our
  standard deviation over seeds (one seed: over the run's last evaluations, the curve's own
  swing) and the paper's (its reported std, zero when it reports none).
* **An ordering holds in every seed** when each seed's paired difference has the claimed
  sign; it has **the same sign in the mean, not in every seed** when the mean paired
  difference has it but some seeds do not; it is **reversed in the mean** when the mean has
  the other sign. No significance test is made: with 5 seeds, "every seed" is the strongest
  statement the data allow. With one seed it holds or is reversed, and the words say "one
  seed".
"""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from pathlib import Path

from fedjax_avail.experiments._sweep import _slug

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "results"
BENCHMARKS = REPO / "benchmarks" / "results"


# The GPU of the results written before the benchmarks and the runs' provenance recorded its
# kind (the sessions' logs name them).
GPU_BY_DATE = {"2026-11-22": "NVIDIA H100", "2026-11-26": "NVIDIA H200"}


def panel(setting: str) -> str:
    """The folder a sweep writes a panel's results to (the sweep's own naming)."""
    return _slug(setting)


def summary(folder: str | Path) -> list[dict]:
    """The rows of a committed `summary.json` (one per algorithm, or per panel and algorithm)."""
    return json.loads((RESULTS / folder / "summary.json").read_text())


def row(rows: list[dict], **match) -> dict:
    """The one row whose fields equal `match` (an error names what was looked for)."""
    found = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    if len(found) != 1:
        raise LookupError(f"{len(found)} rows match {match}")
    return found[0]


def histories(folder: str | Path) -> dict[tuple[str, int], list[dict]]:
    """Every evaluation of a committed `metrics.csv`, by (algorithm, seed), in round order."""
    out: dict[tuple[str, int], list[dict]] = defaultdict(list)
    with open(RESULTS / folder / "metrics.csv", newline="") as f:
        for r in csv.DictReader(f):
            values = {k: (float(v) if v not in ("", None) else math.nan) for k, v in r.items()
                      if k not in ("algorithm", "setting")}
            out[r["algorithm"], int(values.get("seed", 0))].append(values)
    for rows in out.values():
        rows.sort(key=lambda r: r["round"])
    return dict(out)


def per_seed(folder: str | Path, algorithm: str, metric: str, at_round: int | None = None
             ) -> dict[int, float]:
    """{seed: the metric at `at_round`} (default: each seed's last evaluation)."""
    out = {}
    for (name, seed), rows in histories(folder).items():
        if name == algorithm:
            picked = rows[-1] if at_round is None else next(
                r for r in rows if r["round"] == at_round)
            out[seed] = picked[metric]
    if not out:
        raise LookupError(f"no {algorithm} in {folder}")
    return out


def mean_std(values) -> tuple[float, float]:
    """Mean and (population, as the experiments' summaries report) standard deviation."""
    values = list(values)
    m = sum(values) / len(values)
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def last_evaluations(folder: str | Path, algorithm: str, metric: str, count: int = 10
                     ) -> list[float]:
    """The metric at a one-seed run's last `count` evaluations."""
    (rows,) = [r for (name, _), r in histories(folder).items() if name == algorithm]
    return [r[metric] for r in rows[-count:]]


def num(value: float, digits: int) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def pm(mean: float, std: float, digits: int) -> str:
    return f"{num(mean, digits)} +- {num(std, digits)}"


def agreement(ours: float, our_spread: float, paper: float, paper_spread: float = 0.0,
              digits: int = 2) -> str:
    """"matches" when |ours - paper| is within the two spreads, else by how much it differs."""
    if math.isnan(ours):
        raise ValueError("no number to compare (a diverged run): say so instead")
    gap = ours - paper
    allowed = our_spread + paper_spread
    if abs(gap) <= allowed:
        return "matches within the spreads"
    times = f", {abs(gap) / allowed:.1f}x the spreads" if allowed > 0 else ""
    return f"differs by {gap:+.{digits}f}{times}"


def paired(a: dict[int, float], b: dict[int, float]) -> tuple[float, float, int, int]:
    """Seed-by-seed a - b: mean, std, how many seeds have a < b, how many seeds."""
    if set(a) != set(b):
        raise ValueError(f"paired seeds differ: {sorted(a)} against {sorted(b)}")
    seeds = sorted(a)
    diffs = [a[s] - b[s] for s in seeds]
    m, s = mean_std(diffs)
    return m, s, sum(d < 0 for d in diffs), len(seeds)


def below(a: dict[int, float], b: dict[int, float], digits: int = 2) -> str:
    """Whether a is below b, in the words of the module's rule, with the paired difference."""
    m, s, wins, n = paired(a, b)
    detail = f"paired difference {m:+.{digits}f} +- {s:.{digits}f}, lower in {wins} of {n} seeds"
    if m == 0:
        return f"no difference ({detail})"
    if n == 1:
        return ("holds (one seed" if m < 0 else "reversed (one seed") + f", {m:+.{digits}f})"
    if wins == n:
        return f"holds in every seed ({detail})"
    if m < 0:
        return f"same sign in the mean, not in every seed ({detail})"
    return f"reversed in the mean ({detail})"


def below_short(a: dict[int, float], b: dict[int, float]) -> str:
    """`below` in a few words: "holds in every seed", "same sign in the mean (lower in 3 of 5
    seeds)", "reversed in the mean (lower in 1 of 5 seeds)"."""
    m, _, wins, n = paired(a, b)
    if n == 1:
        return "holds (one seed)" if m < 0 else "reversed (one seed)"
    word = ("no difference" if m == 0 else "holds in every seed" if wins == n else
            "same sign in the mean" if m < 0 else "reversed in the mean")
    return word if wins == n else f"{word} (lower in {wins} of {n} seeds)"


def rank(values: dict[str, float]) -> str:
    """Names from the lowest value to the highest, ties (equal to the shown digits) joined by =."""
    order = sorted(values, key=values.get)
    words = [order[0]]
    for prev, name in zip(order, order[1:], strict=False):
        words.append(("= " if f"{values[prev]:.2f}" == f"{values[name]:.2f}" else "< ") + name)
    return " ".join(words)


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)

