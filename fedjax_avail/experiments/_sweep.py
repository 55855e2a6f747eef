"""Sweeps: one experiment run under several settings, laid out like the paper's figure grids."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedjax_avail._io import atomic_write_text, check_writable_dir
from fedjax_avail._lock import DirectoryLock
from fedjax_avail._provenance import provenance
from fedjax_avail.experiments._experiment import Experiment, RunOutcome, run
from fedjax_avail.plotting import plot_grid, plot_histories, run_title

# FedLaAvg Fig. 5/9 and 7/11 vary N (beta = 0.1) and beta (N = 1000) without giving the values
# (spec sec. 4.4); these span the text's N = 200 and the defaults N = 1000, beta = 0.1. K is
# round(beta * N) of the N actually run, so the labels stay true under --set num_clients=...
N_SETTINGS = {f"N={n}": dict(num_clients=n, beta=0.1) for n in (200, 500, 1000)}
BETA_SETTINGS = {f"beta={b}": dict(beta=b) for b in (0.05, 0.1, 0.2, 0.5)}
# A user's setting that a panel's own setting would overwrite: refused, not silently dropped.
_CONFLICTS = {"beta": ("beta", "clients_per_round"), "clients_per_round": ("beta",
                                                                           "clients_per_round")}


@dataclasses.dataclass(frozen=True)
class Sweep:
    """An experiment run once per setting, e.g. FedLaAvg Fig. 4's five (E, D) panels.

    Attributes:
      name: the CLI name.
      description: one line.
      base: the experiment each setting overrides.
      settings: panel label -> overrides of ``base``'s settings.
      defaults: overrides applied to every panel (``--set`` may change these and any setting of
        ``base`` that the panels do not set themselves).
      overlay: draw every setting as one curve in a single panel (for one-algorithm sweeps such
        as Fig. 5's N and beta); otherwise one column per setting.
      measured: the recorded outcome of the default run and the command.
    """

    name: str
    description: str
    base: Experiment
    settings: Mapping[str, Mapping[str, Any]]
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    overlay: bool = False
    measured: str = ""

    def all_defaults(self) -> dict[str, Any]:
        """Every setting ``--set`` accepts, with its value before the panels' overrides."""
        return {**self.base.defaults, **self.defaults}


def sweep_settings(sweep: Sweep, overrides: Mapping[str, Any] | None = None
                   ) -> dict[str, dict[str, Any]]:
    """Each panel's overrides of ``sweep.base``: the sweep's defaults, the user's ``overrides``,
    the panel's own settings; every panel's configuration checked.

    Raises:
      ValueError: an override of a setting that the panels set themselves (e.g. ``E`` in the
        Fig. 4 sweep), or a bad setting.
    """
    overrides = dict(overrides or {})
    for label, setting in sweep.settings.items():
        for key in overrides:
            clash = [k for k in _CONFLICTS.get(key, (key,)) if k in setting]
            if clash:
                raise ValueError(f"setting {key} cannot be changed in {sweep.name}: its panels "
                                 f"set {clash[0]} themselves (panel {label!r}: {dict(setting)})")
    panels = {label: {**sweep.defaults, **overrides, **setting}
              for label, setting in sweep.settings.items()}
    for panel in panels.values():
        sweep.base.config(panel)
    return panels


def run_sweep(
    sweep: Sweep,
    overrides: Mapping[str, Any] | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
    *,
    resume: bool = False,
    checkpoint_every: int | None = None,
    mesh: Any = None,
    **run_options: Any,
) -> dict[str, RunOutcome]:
    """Runs every panel; writes ``<label>/`` per panel, plus a combined ``summary.json`` and
    ``grid.png`` (training loss and test accuracy of every panel). ``run_options``
    (``checkpoint``, ``keep_checkpoints``, ``checkpoint_seconds``, ``tensorboard``) go to each
    panel's :func:`run`.

    Raises:
      ValueError: an override of a setting that the panels set themselves (e.g. ``E`` in the
        Fig. 4 sweep), a bad setting, or an ``out_dir`` that cannot be written, before compute.
    """
    panels = sweep_settings(sweep, overrides)
    shared = {**sweep.defaults, **dict(overrides or {})}
    if out_dir is not None:
        out_dir = check_writable_dir(out_dir, "out_dir")
    lock = DirectoryLock(out_dir, "out_dir") if out_dir is not None else contextlib.nullcontext()
    with lock:  # one sweep per output directory (each panel also locks its own)
        outcomes = {}
        for label, panel in panels.items():
            panel_dir = None if out_dir is None else Path(out_dir) / _slug(label)
            outcomes[label] = run(sweep.base, panel, panel_dir, progress,
                                  resume=resume, checkpoint_every=checkpoint_every, mesh=mesh,
                                  **run_options)
        if out_dir is not None:
            summary = [{"setting": label, **row} for label, o in outcomes.items()
                       for row in o.summary]
            atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
            atomic_write_text(out_dir / "config.json", json.dumps(
                {"sweep": sweep.name, "overrides": shared, "settings": sweep.settings,
                 "provenance": provenance()}, indent=2, default=str) + "\n")
            title = sweep_title(sweep, panels, outcomes)
            if sweep.overlay:
                curves = {f"{label} ({name})": history for label, o in outcomes.items()
                          for name, history in o.histories.items()}
                spread = {f"{label} ({name})": seeds for label, o in outcomes.items()
                          for name, seeds in o.per_seed.items()}
                plot_histories(curves, out_dir / "grid.png", title=title, spread=spread)
            else:
                plot_grid({label: o.histories for label, o in outcomes.items()},
                          out_dir / "grid.png", title=title)
    return outcomes


def sweep_title(sweep: Sweep, panels: Mapping[str, Mapping[str, Any]],
                outcomes: Mapping[str, RunOutcome]) -> str:
    """A sweep figure's title from what was run: the sweep, the algorithms drawn, the seeds and
    the settings the panels vary, e.g. ``"fedlaavg-mnist-fig4: fedavg, fedlaavg; 1 seed; over
    E, D"``.

    Args:
      sweep: the sweep.
      panels: panel label -> its overrides of ``sweep.base`` (:func:`sweep_settings`).
      outcomes: panel label -> its :class:`RunOutcome`.
    """
    config = sweep.base.config(next(iter(panels.values())))
    algorithms = dict.fromkeys(name for o in outcomes.values() for name in o.histories)
    varied = dict.fromkeys(key for setting in sweep.settings.values() for key in setting)
    return (f"{run_title(sweep.name, algorithms, len(config.get('seeds') or [None]))}; over "
            f"{', '.join(varied)}")


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label).strip("_")
