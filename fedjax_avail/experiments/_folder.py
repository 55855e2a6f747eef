"""An experiment's output folder: the checks before a run starts or resumes there, and the
result files it writes (``metrics.csv``, ``config.json``, ``summary.json``, the figures)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fedjax_avail._io import atomic_write_text
from fedjax_avail.history import History, on_shared_rounds
from fedjax_avail.plotting import plot_histories, run_title

# Settings a resumed run may change: more rounds (never fewer: ``simulate`` refuses that), and
# where the same data lives (its contents are in ``simulate``'s fingerprint).
RESUMABLE = ("rounds", "data_dir")


# What a run leaves in its output directory: a second run there must be asked for.
_RESULTS = ("metrics.csv", "config.json", "summary.json")


def check_fresh(out_dir: Path, resume: bool, overwrite: bool) -> list[str]:
    """Refuses to start a run (``resume`` False) in a folder holding an earlier run's results
    (its result files or a checkpoint) unless ``overwrite``; and ``resume`` together with
    ``overwrite``. Returns what of an earlier run it found."""
    if resume and overwrite:
        raise ValueError("--resume continues the run in --out and --overwrite replaces it; "
                         "choose one")
    found = [name for name in _RESULTS if (out_dir / name).exists()]
    if any(step.name.isdigit() for step in (out_dir / "checkpoints").glob("*/*")):
        found.append("checkpoints")
    if found and not resume and not overwrite:
        raise ValueError(f"{out_dir} already holds a run's results ({', '.join(found)}); "
                         "pass --overwrite (overwrite=True) to replace them, --resume to "
                         "continue that run, or choose another --out")
    return found


def resumable_settings(out_dir: Path, name: str, config: Mapping[str, Any],
                        resume: bool, program: list[str] | None = None) -> dict[str, Any]:
    """What ``checkpoints/settings.json`` records of this run (and, for a point of a shared
    program, ``program``: the folders of its points); with ``resume``, first refuses a folder
    with no run to resume and settings that differ from the recorded ones (naming them),
    before anything is loaded or compiled."""
    path = out_dir / "checkpoints" / "settings.json"
    now = json.loads(json.dumps({"experiment": name, **{
        k: v for k, v in config.items() if k not in RESUMABLE},
        **({"program": program} if program else {})}, default=str))
    if resume and not path.exists():
        raise ValueError(f"--resume: {out_dir} holds no run to resume (no checkpoints/"
                         "settings.json); run without --resume to start one")
    if resume:
        try:
            then = json.loads(path.read_text())
        except ValueError:
            raise ValueError(f"--resume: {path} is damaged (not JSON); delete {out_dir} "
                             "/checkpoints to start afresh") from None
        differ = sorted(k for k in {*now, *then} if now.get(k) != then.get(k))
        if differ:
            raise ValueError(
                f"--resume: {out_dir} holds a run with different settings: " + ", ".join(
                    f"{k} (was {then.get(k)!r}, now {now.get(k)!r})" for k in differ)
                + "; resume with the same settings, or choose another --out (or "
                "--overwrite to start afresh)")
    return now


def mean_history(histories: list[History]) -> History:
    """The mean of the histories of several seeds at the rounds all of them recorded
    (:func:`~fedjax_avail.history.on_shared_rounds`: seeds stopped by a time budget end at
    rounds of their own, whose rows are left out here and kept in ``metrics.csv``); one
    history: itself."""
    if len(histories) == 1:
        return histories[0]
    rows = []
    for group in zip(*(h.rows for h in on_shared_rounds(histories)), strict=True):
        rows.append({k: float(np.mean([row.get(k, np.nan) for row in group]))
                     for k in group[0]})
    return History(rows)


def csv_rows(per_seed: Mapping[str, list[History]], seeds: list[int] | None) -> list[dict]:
    """The rows of ``metrics.csv``: one per algorithm, seed and evaluation."""
    return [{"algorithm": name, **({"seed": seeds[i]} if seeds else {}), **row}
            for name, histories in per_seed.items() for i, history in enumerate(histories)
            for row in history]


def write_results(out_dir: Path, meta, per_seed, summary, experiment, setup, plot: bool,
           seeds) -> Path:
    """Writes the result files (the figure only when ``plot``); if that fails, writes them to a
    fresh temporary directory instead (so finished work is never lost to an output error) and
    returns where they are."""
    try:
        _write_files(out_dir, meta, per_seed, summary, experiment, setup, plot, seeds)
        return out_dir
    except OSError as error:
        fallback = Path(tempfile.mkdtemp(prefix=f"fedjax-avail-{experiment.name}-"))
        _write_files(fallback, meta, per_seed, summary, experiment, setup, plot, seeds)
        print(f"fedjax-avail: could not write to {out_dir} ({error}); results saved in "
              f"{fallback}")
        return fallback


def _write_files(out_dir: Path, meta, per_seed, summary, experiment, setup, plot: bool,
                 seeds) -> None:
    """metrics.csv (one row per algorithm, seed and evaluation), config.json, summary.json and
    the figures (the mean over seeds, in a band from their minimum to their maximum)."""
    History(csv_rows(per_seed, seeds)).to_csv(out_dir / "metrics.csv")
    histories = {name: mean_history(h) for name, h in per_seed.items()}
    atomic_write_text(out_dir / "config.json", json.dumps(meta, indent=2, default=str) + "\n")
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    if plot:
        for x in setup.x_axes:
            name = "curves.png" if x == "round" else f"curves_{x}.png"
            title = run_title(experiment.name, per_seed, len(seeds or [None]))
            plot_histories(histories, out_dir / name, title=title, x=x, spread=per_seed)

