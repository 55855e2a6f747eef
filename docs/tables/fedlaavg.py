"""FedLaAvg (Yan et al.): Fig. 4/8 in its five availability settings, Fig. 5/9 (N and beta),
the supplement's FedAdam, the table dtypes, and the availability sweep (no paper), from
`docs/results/fedlaavg-mnist-*` and `docs/results/availability-sweep-mnist`. One seed each."""

from __future__ import annotations

from common import histories, num, panel, row, summary, table

from fedjax_avail.experiments import dominant_period
from fedjax_avail.history import History

ALGORITHMS = {"fedsgd": "FedSGD", "fedavg": "FedAvg", "fedprox": "FedProx",
              "fedlaavg_c1": "FedLaAvg C=1", "fedlaavg": "FedLaAvg C=10",
              "sequential": "sequential SGD"}
FIG4 = ["E=100, D=3", "E=100, D=5", "E=50, D=1", "E=100, D=1", "E=200, D=1"]


def _cell(r: dict) -> str:
    if r["status"] != "ok":
        return f"{r['status'].split(':')[0]} (round {r['stopped_at_round']})"
    return f"{num(r['final_train_loss'], 3)} ({num(r['amplitude_last_window'], 3)})"


def fig4_ratios() -> list[float]:
    """FedAvg's amplitude over FedLaAvg's (C = 10) in each of the five settings."""
    rows = summary("fedlaavg-mnist-fig4")
    return [row(rows, setting=s, algorithm="fedavg")["amplitude_last_window"]
            / row(rows, setting=s, algorithm="fedlaavg")["amplitude_last_window"] for s in FIG4]


def fig4_periods() -> dict[str, float]:
    """FedAvg's dominant period of training loss in each setting, after round 400."""
    return {s: dominant_period(History(histories(f"fedlaavg-mnist-fig4/{panel(s)}")[
        ("fedavg", 0)]), skip=400) for s in FIG4}


def fig4_claims() -> tuple[bool, str]:
    """The paper's Fig. 4 claims, checked: FedAvg oscillates with period 2E (within 10%) and
    its amplitude is more than 10 times FedLaAvg's, in every setting (one seed)."""
    ratios, periods = fig4_ratios(), fig4_periods()
    two_e = {s: 2 * int(s.split(",")[0].split("=")[1]) for s in FIG4}
    off = [s for s in FIG4 if abs(periods[s] - two_e[s]) > 0.1 * two_e[s]]
    words = (f"FedAvg's oscillation {min(ratios):.0f}x to {max(ratios):.0f}x FedLaAvg's; its "
             f"period 2E in {len(FIG4) - len(off)} of {len(FIG4)} settings")
    if off:
        words += " (" + "; ".join(f"{s}: {periods[s]:.0f} rounds" for s in off) + ")"
    return min(ratios) > 10 and not off, words


def fig4() -> str:
    """Final training loss (amplitude over the last 2E rounds) in the five (E, D) settings."""
    rows = summary("fedlaavg-mnist-fig4")
    body, ratios, periods = [], fig4_ratios(), fig4_periods()
    for setting, ratio in zip(FIG4, ratios, strict=True):
        r = {a: row(rows, setting=setting, algorithm=a) for a in ALGORITHMS}
        gap = r["fedlaavg"]["final_train_loss"] - r["sequential"]["final_train_loss"]
        body.append([setting, *(_cell(r[a]) for a in ALGORITHMS), f"{ratio:.0f}x",
                     f"{periods[setting]:.0f}", num(gap, 3)])
    head = ["(E, D)", *ALGORITHMS.values(), "FedAvg / FedLaAvg amplitude",
            "FedAvg's period (rounds)", "FedLaAvg - sequential loss"]
    ok, words = fig4_claims()
    return (table(head, body) + "\n\nThe paper's claims (P:L405), read as FedAvg oscillating "
            "with period 2E (within 10%) and with more than 10 times FedLaAvg's amplitude: "
            f"{'hold' if ok else 'do not all hold'} (one seed; {words}).")


def fig5() -> str:
    """FedLaAvg's final training loss for several N (beta = 0.1) and beta (N = 1000)."""
    body = []
    for folder in ("fedlaavg-mnist-fig5-n", "fedlaavg-mnist-fig5-beta"):
        rows = [r for r in summary(folder) if r["algorithm"] == "fedlaavg"]
        for r in rows:
            early = max(h["train_loss"] for h in histories(f"{folder}/"
                        f"{panel(r['setting'])}")[("fedlaavg", 0)]
                        if 200 <= h["round"] <= 700)
            body.append([r["setting"].replace("=", " = "), num(r["final_train_loss"], 3),
                         num(r["amplitude_last_window"], 3), num(early, 3),
                         num(r["final_test_accuracy"], 3)])
    return table(["setting", "final train loss", "amplitude, last 2E rounds",
                  "highest loss in rounds 200-700", "final test accuracy"], body)


def fedadam() -> str:
    """The supplement's Fig. 8: FedAdam against FedLaAvg under E = 100, D = 1."""
    rows = summary("fedlaavg-mnist-fedadam")
    body = []
    for a, name in (("fedadam", "FedAdam"), ("fedlaavg", "FedLaAvg C=10")):
        h = histories("fedlaavg-mnist-fedadam")[(a, 0)]
        late = [x["train_loss"] for x in h if x["round"] >= 1000]
        r = row(rows, algorithm=a)
        body.append([name, num(max(x["train_loss"] for x in h if x["round"] <= 300), 2),
                     f"{num(min(late), 2)} - {num(max(late), 2)}",
                     num(r["amplitude_last_window"], 3), num(r["final_train_loss"], 3),
                     num(r["final_test_accuracy"], 3)])
    return table(["algorithm", "highest train loss, rounds 0-300", "train loss after round 1000",
                  "amplitude, last 2E rounds", "final train loss", "final test accuracy"], body)


def table_dtype() -> str:
    """FedLaAvg's [N, P] table in float32, bfloat16 and int8 (the default setting)."""
    body = []
    for folder, dtype in (("fedlaavg-mnist-fedadam", "float32"),
                          ("fedlaavg-mnist-bfloat16", "bfloat16"),
                          ("fedlaavg-mnist-int8", "int8")):
        r = row(summary(folder), algorithm="fedlaavg")
        body.append([f"`{dtype}`", num(r["final_train_loss"], 5),
                     num(r["amplitude_last_window"], 3), num(r["final_test_accuracy"], 4)])
    return table(["`table_dtype`", "final train loss", "amplitude, last 2E rounds",
                  "final test accuracy"], body)


PROCESSES = {"bernoulli": "Bernoulli(0.25)", "markov": "Markov(p_on=1/30, p_off=0.1)",
             "label-correlated": "label-correlated Bernoulli (0.05 ... 0.45 by digit)",
             "periodic": "periodic (4 groups, 25 rounds each)",
             "hour-of-day": "hour-of-day (6 h a day, 5 rounds an hour)"}


def availability_sweep() -> str:
    """FedAvg, FedProx, FedLaAvg and sequential SGD under five processes of mean 0.25."""
    rows = summary("availability-sweep-mnist")
    algorithms = ("fedavg", "fedprox", "fedlaavg", "sequential")
    body = []
    for setting, name in PROCESSES.items():
        r = {a: row(rows, setting=setting, algorithm=a) for a in algorithms}
        body.append([name, *(f"{num(r[a]['final_train_loss'], 3)} / "
                             f"{num(r[a]['final_test_accuracy'], 3)}" for a in algorithms)])
    return table(["process", "FedAvg", "FedProx", "FedLaAvg", "sequential SGD"], body)


def digits_diurnal() -> str:
    """The default experiment's summary (scikit-learn digits, diurnal availability)."""
    body = [[r["algorithm"], num(r["final_train_loss"], 4), num(r["final_test_accuracy"], 4),
             num(r["amplitude_last_window"], 4)] for r in summary("digits-diurnal")]
    return table(["algorithm", "final train loss", "final test accuracy", "amplitude"], body)


def small_beta() -> str:
    """FedLaAvg and FedAvg at beta = K / N from 0.01 to 0.1, at two learning rates (3 seeds)."""
    rows = summary("fedlaavg-mnist-small-beta")
    body, stable = [], {}
    for k in (10, 20, 50, 100):
        cells = []
        for lr in (0.003, 0.01):
            r = {a: row(rows, setting=f"clients_per_round={k}, lr={lr}", algorithm=a)
                 for a in ("fedlaavg", "fedavg")}
            cells += [_seeds_cell(r["fedlaavg"]), _seeds_cell(r["fedavg"])]
            stable[k, lr] = r["fedlaavg"]["final_train_loss"] <= r["fedavg"]["final_train_loss"]
        body.append([f"{k} ({k / 1000:g})", *cells])
    sizes = (10, 20, 50, 100)

    def stable_from(lr: float) -> str:
        ok = [k for k in sizes if stable[k, lr]]
        if not ok or ok != [k for k in sizes if k >= ok[0]]:
            return f"at lr {lr}, at K = {', '.join(map(str, ok)) or 'none'} (not a range)"
        return f"at lr {lr}, from beta = {ok[0] / 1000:g}"

    words = "; ".join(stable_from(lr) for lr in (0.003, 0.01))
    return (table(["K (beta)", "FedLaAvg, lr 0.003", "FedAvg, lr 0.003", "FedLaAvg, lr 0.01",
                   "FedAvg, lr 0.01"], body)
            + f"\n\nFedLaAvg ends below FedAvg's loss (its stable range here) {words}: a "
            "smaller learning rate extends the range towards small beta.")


def _seeds_cell(r: dict) -> str:
    if r["status"] != "ok":
        return f"{r['status'].split(':')[0]} (round {r['stopped_at_round']})"
    return (f"{num(r['final_train_loss'], 3)} +- {num(r['final_train_loss_std'], 3)} "
            f"({num(r['amplitude_last_window'], 3)})")
