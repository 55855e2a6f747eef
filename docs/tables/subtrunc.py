"""SubTrunc / UnionFL (Castillo J. et al.): Table I with LeNet and with logistic regression,
the lambda, window and phi sweeps (Tables II-IV), from `docs/results/subtrunc-mnist-*`."""

from __future__ import annotations

from common import (
    agreement,
    below,
    below_short,
    mean_std,
    num,
    panel,
    per_seed,
    pm,
    rank,
    row,
    summary,
    table,
)

NAMES = {"random": "Random", "poc": "Power-of-Choice (d = N)", "divfl": "DivFL",
         "subtrunc": "SubTrunc", "unionfl": "UnionFL"}
SHORT = {"random": "Random", "poc": "PoC", "divfl": "DivFL", "subtrunc": "SubTrunc",
         "unionfl": "UnionFL"}
# Table I, MNIST (L224-231): test accuracy and client dissimilarity [%], mean +- std.
PAPER = {"random": (82.99, 0.99, 9.16, 0.18), "poc": (82.42, 1.97, 8.59, 0.38),
         "divfl": (82.16, 0.91, 8.89, 0.59), "subtrunc": (83.72, 0.81, 7.96, 0.62),
         "unionfl": (83.57, 0.34, 8.59, 0.34)}
CD = "test_client_dissimilarity"


def _lenet(algorithm: str, metric: str, at_round: int | None = None, literal: bool = False):
    folder = f"subtrunc-mnist-lenet{'-none' if literal else ''}/{algorithm}"
    scale = 100.0 if metric == "test_accuracy" else 1.0
    return {s: v * scale for s, v in per_seed(folder, algorithm, metric, at_round).items()}


def _lr(algorithm: str, metric: str, literal: bool = False):
    folder = f"subtrunc-mnist-lr{'-none' if literal else ''}"
    scale = 100.0 if metric == "test_accuracy" else 1.0
    return {s: v * scale for s, v in per_seed(folder, algorithm, metric).items()}


def _cell(read, algorithm: str, **kw) -> str:
    acc = mean_std(read(algorithm, "test_accuracy", **kw).values())
    cd = mean_std(read(algorithm, CD, **kw).values())
    return f"{pm(*acc, 2)} / {pm(*cd, 2)}"


def _claims(read, **kw) -> list[list[str]]:
    """The paper's Table I orderings of client dissimilarity, checked seed by seed."""
    cd = {a: read(a, CD, **kw) for a in NAMES}
    rows = [[f"SubTrunc fairer than {NAMES[o]}", below(cd["subtrunc"], cd[o])]
            for o in ("divfl", "unionfl", "poc", "random")]
    rows.append(["Random the least fair (each method's seeds below Random's)", ", ".join(
        f"{SHORT[o]} {below_short(cd[o], cd['random'])}"
        for o in ("poc", "divfl", "subtrunc", "unionfl"))])
    means = {SHORT[a]: mean_std(v.values())[0] for a, v in cd.items()}
    rows.append(["order of the means, fairest first",
                 f"ours: {rank(means)}; paper: "
                 f"{rank({SHORT[a]: p[2] for a, p in PAPER.items()})}"])
    return rows


def table1_lenet() -> str:
    """Table I with LeNet-5: rounds 150 and 20, both scales of G, beside the paper's."""
    body = []
    for a in NAMES:
        literal = a in ("subtrunc", "unionfl")
        late_w = _cell(_lenet, a, literal=True) if literal else "(same)"
        early_w = _cell(_lenet, a, at_round=20, literal=True) if literal else "(same)"
        p = PAPER[a]
        early_cd = mean_std(_lenet(a, CD, 20).values())
        body.append([NAMES[a], _cell(_lenet, a), late_w, _cell(_lenet, a, at_round=20), early_w,
                     f"{pm(p[0], p[1], 2)} / {pm(p[2], p[3], 2)}",
                     agreement(early_cd[0], early_cd[1], p[2], p[3])])
    head = ["method", "round 150, G / N", "round 150, as written", "round 20, G / N",
            "round 20, as written", "paper (LeNet)", "client dissimilarity at round 20 vs paper"]
    claims = [[c, late, early] for (c, late), (_, early) in
              zip(_claims(_lenet), _claims(_lenet, at_round=20), strict=True)]
    return (table(head, body) + "\n\nThe paper's orderings of client dissimilarity "
            "(G / N), seed by seed:\n\n"
            + table(["claim (paper L317)", "round 150", "round 20"], claims))


def table1_lr() -> str:
    """Table I with logistic regression (2-core CPU), beside the paper's LeNet numbers."""
    body = []
    for a in NAMES:
        literal = _cell(_lr, a, literal=True) if a in ("subtrunc", "unionfl") else "(same)"
        p = PAPER[a]
        cd = mean_std(_lr(a, CD).values())
        body.append([NAMES[a], _cell(_lr, a), literal, f"{pm(p[0], p[1], 2)} / "
                     f"{pm(p[2], p[3], 2)}", agreement(cd[0], cd[1], p[2], p[3])])
    head = ["method", "ours, G / N (default)", "ours, as written (`normalize=none`)",
            "paper (LeNet)", "client dissimilarity vs paper"]
    return (table(head, body) + "\n\nThe paper's orderings of client dissimilarity (G / N), "
            "seed by seed:\n\n" + table(["claim (paper L317)", "ours"], _claims(_lr)))


# Tables II-IV, MNIST (L285-313): client dissimilarity [%], mean +- std.
SWEEPS = [
    ("subtrunc-mnist-table2-lr", "subtrunc", "lam", "lambda",
     {0.01: (8.90, 0.63), 0.1: (8.38, 0.56), 0.25: (8.18, 0.55), 0.5: (8.14, 0.34),
      0.75: (8.07, 0.41), 0.95: (7.96, 0.62)}),
    ("subtrunc-mnist-table3-lr", "unionfl", "window", "window",
     {2: (8.77, 0.35), 5: (8.59, 0.34), 10: (8.52, 0.18)}),
    ("subtrunc-mnist-table4-lr", "subtrunc", "phi", "phi",
     {"identity": (7.91, 0.35), "log1p": (7.96, 0.62)}),
]


def _sweep_point(folder: str, algorithm: str, key: str, value) -> dict[int, float]:
    return per_seed(f"{folder}/{panel(f'{key}={value}')}", algorithm, CD)


def sweeps() -> str:
    """Tables II-IV with logistic regression: each point beside the paper's, and the trends."""
    body, trends = [], []
    for folder, algorithm, key, label, paper in SWEEPS:
        rows = summary(folder)
        points = {}
        for value, (p, p_std) in paper.items():
            r = row(rows, setting=f"{key}={value}", algorithm=algorithm)
            ours = (r["client_dissimilarity"], r["client_dissimilarity_std"])
            points[value] = _sweep_point(folder, algorithm, key, value)
            body.append([f"{label} = {value}", pm(*ours, 2), pm(p, p_std, 2),
                         agreement(*ours, p, p_std)])
        first, last = list(paper)[0], list(paper)[-1]
        fair, other = (last, first) if paper[last][0] < paper[first][0] else (first, last)
        ours_means = [mean_std(points[v].values())[0] for v in paper]
        paper_means = [p for p, _ in paper.values()]
        same_order = sorted(range(len(paper)), key=ours_means.__getitem__) == sorted(
            range(len(paper)), key=paper_means.__getitem__)
        trends.append([f"{label} = {fair} fairer than {label} = {other} (paper: "
                       f"{num(paper[fair][0] - paper[other][0], 2)})",
                       below(points[fair], points[other]), "yes" if same_order else "no"])
    return (table(["setting (`--set model=lr --set lr=0.1`)", "ours", "paper (LeNet)",
                   "ours vs paper"], body) + "\n\n"
            + table(["the paper's trend", "ours, seed by seed",
                     "every point's mean in the paper's order"], trends))
