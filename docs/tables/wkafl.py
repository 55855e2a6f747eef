"""WKAFL (Zhou et al.): Tables II and III with the paper's CNN (GPU) and with logistic
regression, and the Fig. 5 ablation, from `docs/results/wkafl-mnist-*`.

Every run is one seed, as the paper's are; a number's spread is the standard deviation of the
run's last 10 test accuracies (the paper's stability window, A_num = 10, L431)."""

from __future__ import annotations

from common import agreement, last_evaluations, mean_std, num, panel, row, summary, table

NAMES = {"wkafl": "WKAFL", "twafl": "TWAFL", "gsgm": "GSGM", "sasgd": "SASGD"}
# Table II (L476-484) and Table III (L488-496), EMNIST-MNIST: final accuracy [, stability].
TABLE2 = {"P/K=100 (1000/10)": {"wkafl": 0.9734, "twafl": 0.962, "sasgd": 0.9319},
          "P/K=150 (3000/20)": {"wkafl": 0.9756, "twafl": 0.9649, "sasgd": 0.8753},
          "P/K=300 (3000/10)": {"wkafl": 0.9728, "twafl": 0.9572, "sasgd": 0.8553}}
TABLE3 = {"L_num=1": {"wkafl": (0.9728, 0.0060), "twafl": (0.9572, 0.0107),
                      "gsgm": (0.9057, 0.0032), "sasgd": (0.8553, 0.0834)},
          "L_num=5": {"wkafl": (0.9754, 0.0068), "twafl": (0.9649, 0.0095),
                      "gsgm": (0.908, 0.0027), "sasgd": (0.8753, 0.0237)},
          "L_num=10": {"wkafl": (0.9658, 0.0036), "twafl": (0.9623, 0.0060),
                       "gsgm": (0.9075, 0.0018), "sasgd": (0.8619, 0.0206)}}


class Source:
    """Where a table's runs are: one folder per algorithm (the GPU runs, one process each) or
    one sweep folder holding every algorithm."""

    def __init__(self, folder: str, split_by_algorithm: bool, paper_model: bool = True):
        self.folder, self.split = folder, split_by_algorithm
        self.paper_model = paper_model  # else its accuracies are not compared to the paper's

    def _base(self, algorithm: str) -> str:
        return f"{self.folder}/{algorithm}" if self.split else self.folder

    def result(self, algorithm: str, setting: str) -> dict:
        return row(summary(self._base(algorithm)), setting=setting, algorithm=algorithm)

    def last10(self, algorithm: str, setting: str) -> list[float]:
        return last_evaluations(f"{self._base(algorithm)}/{panel(setting)}", algorithm,
                                "test_accuracy")


def _cell(source: Source, algorithm: str, setting: str, paper: float) -> tuple[str, float]:
    """'final (mean of the last 10 +- std): agreement', and the final accuracy (nan: diverged)."""
    r = source.result(algorithm, setting)
    if r["status"] != "ok":
        return f"diverged (iteration {r['stopped_at_round']})", float("nan")
    m, s = mean_std(source.last10(algorithm, setting))
    final = r["final_test_accuracy"]
    text = f"{num(final, 4)} ({num(m, 3)} +- {num(s, 3)})"
    if source.paper_model:
        text += f": {agreement(final, s, paper, digits=4)}"
    return text, final


def _leader(finals: dict[str, float], means: dict[str, float]) -> str:
    best = max(finals, key=lambda a: finals[a] if finals[a] == finals[a] else -1)
    best_mean = max(means, key=lambda a: means[a] if means[a] == means[a] else -1)
    return f"{NAMES[best]} (last-10 mean: {NAMES[best_mean]})"


def _means(source: Source, setting: str, algorithms) -> dict[str, float]:
    out = {}
    for a in algorithms:
        ok = source.result(a, setting)["status"] == "ok"
        out[a] = mean_std(source.last10(a, setting))[0] if ok else float("nan")
    return out


def table2(source: Source) -> str:
    """Table II: each method's final accuracy beside the paper's, and who leads."""
    body = []
    for setting, paper in TABLE2.items():
        cells = {a: _cell(source, a, setting, p) for a, p in paper.items()}
        leader = _leader({a: c[1] for a, c in cells.items()}, _means(source, setting, paper))
        body.append([setting.split(" ")[0].replace("P/K=", ""),
                     *(f"{c[0]} (paper {num(paper[a], 4)})" for a, c in cells.items()),
                     f"{leader}; paper WKAFL"])
    drops = {a: source.result(a, "P/K=100 (1000/10)")["final_test_accuracy"]
             - source.result(a, "P/K=300 (3000/10)")["final_test_accuracy"] for a in TABLE2[
                 "P/K=100 (1000/10)"]}
    paper_drops = {a: TABLE2["P/K=100 (1000/10)"][a] - TABLE2["P/K=300 (3000/10)"][a]
                   for a in drops}
    worst = max(drops, key=drops.get)
    words = ("Accuracy lost from P/K = 100 to 300: "
             + ", ".join(f"{NAMES[a]} {num(d, 4)} (paper {num(paper_drops[a], 4)})"
                         for a, d in drops.items())
             + ". The paper's \"SASGD loses the most\" (L486): "
             + ("holds" if worst == "sasgd" else f"not here ({NAMES[worst]} loses the most)")
             + ".")
    head = ["P/K", *(f"{NAMES[a]}: final (last 10: mean +- std)" for a in TABLE2[
        "P/K=100 (1000/10)"]), "most accurate: ours; paper"]
    return table(head, body) + "\n\n" + words


def table3(source: Source) -> str:
    """Table III: accuracy and stability beside the paper's, and who leads."""
    body, stab = [], []
    for setting, paper in TABLE3.items():
        cells = {a: _cell(source, a, setting, p[0]) for a, p in paper.items()}
        leader = _leader({a: c[1] for a, c in cells.items()}, _means(source, setting, paper))
        body.append([setting.replace("L_num=", ""),
                     *(f"{c[0]} (paper {num(paper[a][0], 4)})" for a, c in cells.items()),
                     f"{leader}; paper WKAFL"])
        ours = {a: source.result(a, setting)["stability"] for a in paper}
        ok = {a for a in paper if source.result(a, setting)["status"] == "ok"}
        steadiest = min(ok, key=ours.get)
        stab.append([setting.replace("L_num=", ""), *(
            f"{num(ours[a], 4)}{'' if a in ok else ' (diverged)'} / {num(paper[a][1], 4)}"
            for a in paper), f"{NAMES[steadiest]}; paper GSGM"])
    head = ["L_num", *(f"{NAMES[a]}: final (last 10)" for a in TABLE3["L_num=1"]),
            "most accurate: ours; paper"]
    stab_head = ["L_num", *(f"{NAMES[a]} ours / paper" for a in TABLE3["L_num=1"]),
                 "most stable (of the runs that finished): ours; paper"]
    return (table(head, body) + "\n\nTraining stability (std of ln test accuracy over the last "
            "10 evaluations; lower is steadier):\n\n" + table(stab_head, stab))


def table2_cnn() -> str:
    return table2(Source("wkafl-mnist-table2-cnn", split_by_algorithm=True))


def table3_cnn() -> str:
    return table3(Source("wkafl-mnist-table3-cnn", split_by_algorithm=True))


def verdict(source: Source, paper_table: dict) -> tuple[str, bool]:
    """How many final accuracies match the paper's within the spreads, and who leads; and
    whether that is all of them with WKAFL leading everywhere (the table reproduced)."""
    matched = total = leads = 0
    diverged = set()
    for setting, paper in paper_table.items():
        finals = {}
        for a, p in paper.items():
            p = p[0] if isinstance(p, tuple) else p
            text, finals[a] = _cell(source, a, setting, p)
            total += 1
            matched += "matches" in text
            if text.startswith("diverged"):
                diverged.add(NAMES[a])
        leads += max(finals, key=lambda a: finals[a] if finals[a] == finals[a] else -1) == "wkafl"
    words = (f"{matched} of {total} final accuracies match the paper's within the spreads; "
             f"WKAFL the most accurate at {leads} of {len(paper_table)} settings (paper: all)")
    if diverged:
        words += f"; {', '.join(sorted(diverged))} diverges"
    return words, matched == total and leads == len(paper_table) and not diverged


def table2_lr() -> str:
    return table2(Source("wkafl-mnist-table2-lr", split_by_algorithm=False, paper_model=False))


def table3_lr() -> str:
    return table3(Source("wkafl-mnist-table3-lr", split_by_algorithm=False, paper_model=False))


ABLATION = {"wkafl": "WKAFL", "wkafl_no_selection": "without gradient selection",
            "wkafl_no_staleness": "without staleness weighting",
            "wkafl_no_noniid": "without the non-IID strategy (momentum, alpha = 0)"}


def _ablation_rows() -> dict[str, dict]:
    rows = summary("wkafl-mnist-ablation-lr")
    return {a: row(rows, algorithm=a) for a in ABLATION}


def ablation_verdict() -> str:
    """The paper's Fig. 5: each component helps; the staleness strategy the most. A component
    helps when removing it lowers the final accuracy by more than the full method's spread
    (the std of its last 10 evaluations)."""
    r = _ablation_rows()
    full = r["wkafl"]["final_test_accuracy"]
    spread = mean_std(last_evaluations("wkafl-mnist-ablation-lr", "wkafl", "test_accuracy"))[1]
    worst = min(ABLATION, key=lambda a: r[a]["final_test_accuracy"])
    helps = [a for a in ABLATION if a != "wkafl"
             and r[a]["final_test_accuracy"] < full - spread]
    return (f"one seed: removing {ABLATION[worst].replace('without ', '')} costs the most (as "
            f"in the paper); {len(helps)} of the 3 components help"
            f"{'s' if len(helps) == 1 else ''} by more than the run's spread ({spread:.3f}); "
            "in the paper all 3 help")


def ablation() -> str:
    r = _ablation_rows()
    body = [[name, num(r[a]["final_test_accuracy"], 3), num(r[a]["final_train_loss"], 3),
             num(r[a]["stability"], 4)] for a, name in ABLATION.items()]
    return (table(["", "final test accuracy", "final train loss", "stability"], body)
            + f"\n\nThe paper's Fig. 5: {ablation_verdict()}.")


def cnn_cpu() -> str:
    """The CNN at P/K = 300 on a 2-core CPU beside the GPU's run."""
    cpu = summary("wkafl-mnist-cnn-pk300")
    gpu = Source("wkafl-mnist-table2-cnn", split_by_algorithm=True)
    body = []
    for a in ("wkafl", "twafl", "sasgd"):
        c = row(cpu, algorithm=a)["final_test_accuracy"]
        g = gpu.result(a, "P/K=300 (3000/10)")["final_test_accuracy"]
        body.append([NAMES[a], num(c, 4), num(g, 4), f"{c - g:+.4f}"])
    return table(["", "2-core CPU", "GPU", "CPU - GPU"], body)
