"""The summary of an experiment: each algorithm's final numbers (mean and population std over
seeds) and the table the command prints."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from fedjax_avail.experiments._analysis import oscillation_amplitude
from fedjax_avail.history import History


def _number(value: float | None) -> float | None:
    """None for a value that was not measured or is not finite (JSON has no NaN)."""
    return None if value is None or not math.isfinite(value) else float(value)


def _measures(history: History, setup: Any) -> dict[str, float | None]:
    """One run's final numbers."""
    last = history.rows[-1]
    out = {
        "final_train_loss": _number(last["train_loss"]),
        "final_test_accuracy": _number(last.get("test_accuracy")),
        "amplitude_last_window": _number(oscillation_amplitude(history, setup.window)),
    }
    if "test_client_dissimilarity" in last:
        out["client_dissimilarity"] = _number(last["test_client_dissimilarity"])
    if setup.summary:
        out.update({k: _number(v) for k, v in setup.summary(history).items()})
    return out


def summary_row(name, status, results, setup, start, stopped, seeds) -> dict[str, Any]:
    """The summary of one algorithm: its final numbers, averaged over seeds with their std and
    the number of seeds each was measured in (``<key>_count``: a seed that never reached a
    target has no time to it, and the mean is over the others)."""
    measures = [_measures(r.history, setup) for r in results]
    # the rounds each seed completed: a time budget stops each at its own round
    done = [int(r.history.rows[-1]["round"]) for r in results]
    row: dict[str, Any] = {
        "algorithm": name,
        "status": status,
        "stopped_at_round": stopped,  # the round it diverged in, or was interrupted after
        "rounds_done": min(done),  # the fewest
    }
    if seeds:
        row["rounds_done_per_seed"] = done
    for key in measures[0]:
        # over the seeds that measured it (a time to a target some seeds never reached):
        # <key>_count says how many
        values = [m[key] for m in measures if m[key] is not None]
        row[key] = float(np.mean(values)) if values else None
        if seeds:
            row[f"{key}_std"] = float(np.std(values)) if values else None
            row[f"{key}_count"] = len(values)
    if seeds:
        row["seeds"] = seeds
    # this invocation's wall time plus the earlier ones' that made its restored checkpoint
    row["seconds"] = round(time.perf_counter() - start + results[0].timing["earlier"], 2)
    row["compile_seconds"] = round(results[0].timing["compile"], 2)
    return row


def _cell(value: float | None) -> str:
    """A summary value as text: four decimals, "n/a" where it was not measured."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.4f}"


_STANDARD = ("algorithm", "status", "stopped_at_round", "rounds_done",
             "rounds_done_per_seed", "final_train_loss", "final_test_accuracy",
             "amplitude_last_window", "seconds", "compile_seconds", "seeds")
# The standard columns of the summary table: header -> summary key.
_COLUMNS = {"train loss": "final_train_loss", "test acc": "final_test_accuracy",
            "amplitude": "amplitude_last_window"}


def format_summary(summary: list[dict[str, Any]]) -> str:
    """A table of the summary rows, each column as wide as its header and its widest value
    ("n/a" where a value was not measured); an experiment's own summary columns (e.g. WKAFL's
    stability) follow the standard ones under their full names. Under a multi-seed row, a row
    of the standard deviations over the seeds."""
    extra = [k for k in (summary[0] if summary else {})
             if k not in _STANDARD and not k.endswith(("_std", "_count"))]
    columns = {**_COLUMNS, **{key: key for key in extra}}
    table, flags = [["algorithm", *columns, "sec"]], [""]
    for row in summary:
        table.append([row["algorithm"], *(_mean_cell(row, k) for k in columns.values()),
                      f"{row['seconds']:.1f}"])
        flags.append("" if row["status"] == "ok" else
                     f"  ({row['status'].split(':')[0]} at round {row['stopped_at_round']})")
        if row.get("seeds"):  # the spread over seeds, under the means
            table.append([f"  +- (std, {len(row['seeds'])} seeds)",
                          *(_cell(row.get(f"{k}_std")) for k in columns.values()), ""])
            flags.append("")
    widths = [max(len(cells[i]) for cells in table) for i in range(len(table[0]))]
    return "\n".join(_line(cells, widths) + flag for cells, flag in zip(table, flags,
                                                                         strict=True))


def _mean_cell(row: dict[str, Any], key: str) -> str:
    """A mean over seeds, followed by "(k/n seeds)" when only k of the n seeds measured it."""
    count, seeds = row.get(f"{key}_count"), row.get("seeds")
    partial = seeds and count is not None and count < len(seeds)
    return _cell(row.get(key)) + (f" ({count}/{len(seeds)} seeds)" if partial else "")


def _line(cells: list[str], widths: list[int]) -> str:
    """One table line: the first cell left-aligned, the others right-aligned."""
    first, *rest = cells
    return (f"{first:<{widths[0]}}" + "".join(
        f" {cell:>{width}}" for cell, width in zip(rest, widths[1:], strict=True))).rstrip()
