"""Partitioners: split a pooled labelled data set into N clients.

Each returns a :class:`FederatedData` of exactly ``num_clients`` clients whose arrays are those
given (``x``, ``y``), re-ordered and grouped by client (:func:`one_label_per_client` keeps the
examples its drawn client sizes take, as FedLaAvg's setting does), or raises ``ValueError`` when
some client would get no example. All are deterministic given ``seed``.
"""

from __future__ import annotations

import numpy as np

from fedjax_avail._checks import is_int
from fedjax_avail.data._federated import FederatedData


def _check(x: np.ndarray, y: np.ndarray, num_clients: int) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x), np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be an [M] vector of labels, got shape {y.shape}")
    if len(x) != len(y):
        raise ValueError(f"x and y must have the same length, got len(x)={len(x)}, len(y)={len(y)}")
    if not is_int(num_clients) or not 1 <= num_clients <= len(y):
        raise ValueError(
            f"num_clients must be an integer in [1, {len(y)}] (one example each), got "
            f"{num_clients!r}"
        )
    return x, y


def _rng(seed: int) -> np.random.Generator:
    """The partition's generator (``np.random.default_rng(seed)``); a negative integer seed
    raises ValueError naming ``seed``."""
    if is_int(seed) and seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    return np.random.default_rng(seed)


def iid(x: np.ndarray, y: np.ndarray, num_clients: int, seed: int = 0) -> FederatedData:
    """Shuffles the examples and deals them into N clients of (almost) equal size."""
    x, y = _check(x, y, num_clients)
    perm = _rng(seed).permutation(len(y))
    ids = np.empty(len(y), np.int64)
    ids[perm] = np.arange(len(y)) * num_clients // len(y)
    return FederatedData.from_arrays({"x": x, "y": y}, ids, num_clients)


def one_label_per_client(
    x: np.ndarray,
    y: np.ndarray,
    num_clients: int,
    mean: float | None = None,
    std: float | None = None,
    seed: int = 0,
) -> FederatedData:
    """Every client holds one label; N / num_labels clients per label; sizes ~ Normal(mean, std²).

    FedLaAvg Sec. 6.1.1 (P:L337): "each client only holds the images of one digit", with client
    sizes roughly Normal(6e4/N, (1e4/N)^2). The defaults are ``mean = M / N`` and
    ``std = M / (6 N)``, which give exactly those numbers on MNIST's M = 60,000.

    .. note::
       The paper does not say what happens when a label's clients ask for more examples than the
       label has (MNIST has 5421 to 6742 per digit, 6000 asked on average). Here a label's sizes
       are then scaled down in proportion so the clients stay disjoint; sizes are rounded and at
       least 1. Examples are drawn without replacement.

    Args:
      x: ``[M, ...]`` inputs.
      y: ``[M]`` integer labels.
      num_clients: N, a multiple of the number of distinct labels.
      mean: mean client size (default ``M / N``).
      std: standard deviation of client sizes (default ``M / (6 N)``).
      seed: seed of the size draw and of the example assignment.
    """
    x, y = _check(x, y, num_clients)
    labels = np.unique(y)
    if num_clients % len(labels):
        raise ValueError(
            f"num_clients must be a multiple of the number of labels ({len(labels)}), "
            f"got {num_clients}"
        )
    mean = len(y) / num_clients if mean is None else mean
    std = len(y) / (6 * num_clients) if std is None else std
    if not (np.isfinite(mean) and np.isfinite(std) and mean > 0 and std >= 0):
        raise ValueError(f"need finite mean > 0 and std >= 0, got mean={mean}, std={std}")
    rng = _rng(seed)
    per_label = num_clients // len(labels)
    ids = np.full(len(y), -1, np.int64)
    for j, label in enumerate(labels):
        pool = rng.permutation(np.flatnonzero(y == label))
        sizes = np.maximum(np.rint(rng.normal(mean, std, per_label)), 1).astype(np.int64)
        if sizes.sum() > len(pool):
            sizes = np.maximum(np.floor(sizes * len(pool) / sizes.sum()), 1).astype(np.int64)
        ends = np.cumsum(sizes)
        for c, (lo, hi) in enumerate(zip(ends - sizes, ends, strict=True)):
            ids[pool[lo:hi]] = j * per_label + c
    keep = ids >= 0
    return FederatedData.from_arrays({"x": x[keep], "y": y[keep]}, ids[keep], num_clients)


def classes_per_client(
    x: np.ndarray, y: np.ndarray, num_clients: int, k: int, seed: int = 0
) -> FederatedData:
    """Client i holds labels ``(i*k + j) mod L`` for j < k; each label is split in equal shares.

    Every client then has exactly k distinct labels (k <= L, the number of labels), and the
    clients holding a label share its examples equally (up to one example). Every example is
    kept, so every label needs a holder (``N k >= L``) and at least as many examples as it has
    holders; otherwise ValueError names the label.
    """
    x, y = _check(x, y, num_clients)
    labels, sizes = np.unique(y, return_counts=True)
    if not is_int(k) or not 1 <= k <= len(labels):
        raise ValueError(f"k must be an integer in [1, {len(labels)}] (the number of labels), "
                         f"got {k!r}")
    if num_clients * k < len(labels):
        raise ValueError(f"num_clients * k must be at least the number of labels ({len(labels)}) "
                         f"so that every label has a holder, got {num_clients} * {k}: labels "
                         f"{labels[num_clients * k:][:10].tolist()} would be dropped (select "
                         "their examples out of x and y first to leave them out)")
    rng = _rng(seed)
    holders = [[] for _ in labels]
    for i in range(num_clients):
        for j in range(k):
            holders[(i * k + j) % len(labels)].append(i)
    short = next((j for j in range(len(labels)) if sizes[j] < len(holders[j])), None)
    if short is not None:
        raise ValueError(f"label {labels[short].tolist()!r} has {sizes[short]} examples for its "
                         f"{len(holders[short])} holders (num_clients={num_clients}, k={k}); "
                         f"each holder needs one to have k labels: use fewer clients or a "
                         "smaller k")
    ids = np.empty(len(y), np.int64)
    for j, label in enumerate(labels):
        pool = rng.permutation(np.flatnonzero(y == label))
        share = np.arange(len(pool)) * len(holders[j]) // len(pool)
        ids[pool] = np.asarray(holders[j])[share]
    return FederatedData.from_arrays({"x": x, "y": y}, ids, num_clients)


def dirichlet(
    x: np.ndarray,
    y: np.ndarray,
    num_clients: int,
    alpha: float,
    seed: int = 0,
    min_size: int = 1,
    max_tries: int = 100,
) -> FederatedData:
    """Label shares per client drawn from Dirichlet(alpha) for each label.

    For each label, a vector of client proportions ~ Dir(alpha * 1_N) splits its examples (the
    label-skew partition of Yurochkin et al. 2019 and NIID-Bench, Li et al. 2022; Hsu et al.
    2019 instead draw each client's mix of labels, Dir(alpha p)). Small alpha gives few labels
    per client; large alpha approaches IID. The draw is repeated (at most ``max_tries`` times)
    until every client has at least ``min_size`` examples.
    """
    x, y = _check(x, y, num_clients)
    if not (np.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha must be a finite number > 0, got {alpha}")
    if min_size * num_clients > len(y):
        raise ValueError(f"min_size * num_clients = {min_size * num_clients} exceeds {len(y)}")
    rng = _rng(seed)
    for _ in range(max_tries):
        ids = np.empty(len(y), np.int64)
        for label in np.unique(y):
            pool = rng.permutation(np.flatnonzero(y == label))
            cuts = (np.cumsum(rng.dirichlet(np.full(num_clients, alpha))) * len(pool)).astype(int)
            owner = np.searchsorted(cuts, np.arange(len(pool)), side="right")
            ids[pool] = np.minimum(owner, num_clients - 1)
        if np.bincount(ids, minlength=num_clients).min() >= min_size:
            return FederatedData.from_arrays({"x": x, "y": y}, ids, num_clients)
    raise ValueError(
        f"no Dirichlet(alpha={alpha}) draw in {max_tries} tries gave every one of {num_clients} "
        f"clients >= {min_size} examples; raise alpha or lower num_clients/min_size"
    )


def labels_per_client(
    x: np.ndarray,
    y: np.ndarray,
    num_clients: int,
    labels: int,
    min_size: int = 10,
    max_size: int = 49,
    seed: int = 0,
) -> FederatedData:
    """WKAFL's non-IID generator (Algorithm 4, P:L395-404): L labels and D_min..D_max examples.

    For each client i: ``Classes`` <- ``labels`` (L_num) distinct labels drawn uniformly;
    ``D_num`` <- an integer uniform in ``[min_size, max_size]``; ``weights`` <- L_num uniforms in
    (0, 1); the client then takes ``round(D_num w_j / sum(w))`` examples of its j-th label, drawn
    without replacement from that label's examples. As in the authors' code
    (``rawDatasetsLoader.py``, ``wkafl.md`` 7.4: ``D_num = randperm(40)[0] + 10``, so 10..49)
    clients draw **independently of each other**: two clients may hold the same example (the
    flat layout stores it twice). A label may get 0 examples after rounding when L_num > 1; a
    client whose rounded total is 0 gets one example of its first label.

    Args:
      x: ``[M, ...]`` inputs.
      y: ``[M]`` integer labels.
      num_clients: P.
      labels: L_num, in ``[1, number of distinct labels]``.
      min_size, max_size: D_min <= D_max, each >= 1.
      seed: seed of every draw.

    Raises:
      ValueError: a setting out of range, or a label with fewer examples than a client asks for.
    """
    x, y = np.asarray(x), np.asarray(y)
    if y.ndim != 1 or len(x) != len(y) or len(y) == 0:
        raise ValueError(f"x and y must hold the same number >= 1 of examples and y must be [M], "
                         f"got x {x.shape}, y {y.shape}")
    if not is_int(num_clients) or num_clients < 1:
        raise ValueError(f"num_clients must be an integer >= 1, got {num_clients!r}")
    classes = np.unique(y)
    if not is_int(labels) or not 1 <= labels <= len(classes):
        raise ValueError(f"labels must be an integer in [1, {len(classes)}] (the distinct labels), "
                         f"got {labels!r}")
    if not (is_int(min_size) and is_int(max_size) and 1 <= min_size <= max_size):
        raise ValueError(f"min_size and max_size must be integers with 1 <= min_size <= "
                         f"max_size, got {min_size!r} and {max_size!r}")
    rng = _rng(seed)
    pools = {label: np.flatnonzero(y == label) for label in classes}
    rows, ids = [], []
    for i in range(num_clients):
        chosen = rng.choice(classes, labels, replace=False)
        total = rng.integers(min_size, max_size + 1)
        weights = rng.uniform(size=labels)
        counts = np.rint(total * weights / weights.sum()).astype(np.int64)
        if counts.sum() == 0:
            counts[0] = 1
        for label, count in zip(chosen, counts, strict=True):
            pool = pools[label]
            if count > len(pool):
                raise ValueError(f"label {label} has {len(pool)} examples but a client asks for "
                                 f"{count}; lower max_size")
            rows.append(rng.choice(pool, count, replace=False))
            ids.append(np.full(count, i))
    rows, ids = np.concatenate(rows), np.concatenate(ids)
    return FederatedData.from_arrays({"x": x[rows], "y": y[rows]}, ids, num_clients)
