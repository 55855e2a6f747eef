"""Sentiment140 as FedLaAvg uses it: one client per Twitter user, tweets with their hour of day.

FedLaAvg Sec. 6.1.2 (P:L339, L399, L401; spec sec. 4.1): 1.6M tweets of 659,775 users; users
with more than 40 tweets are the clients (1473 of them, N = 1000 by default); one tenth of the
data is the test set; each client is available the 8 hours a day it tweets least (P:L399); and
tweets are dropped by hour of day so that the share of positive tweets runs from alpha at
0:00-1:00 to 1 - alpha at 12:00-13:00 (P:L399). The steps of :func:`load_sentiment140`, in order:

1. read the training file (1.6M rows; TFDS ``sentiment140`` or the authors' CSV);
2. keep users with at least ``min_tweets`` tweets (default 41: "more than 40", P:L339), so the
   client count does not depend on alpha, as the paper's single figure of 1473 suggests;
3. if ``alpha`` is given, :func:`skew_by_hour` over those users' tweets; users left with none
   are dropped;
4. if ``num_clients`` is given, a seeded random subset of that many users (order: user name);
5. per client, a random ``round(test_fraction * n_i)`` of its tweets is test data (at least one
   tweet stays for training); the paper does not say whether the tenth is per client or global;
6. vocabulary from the training tweets only; texts to ``[M, max_len]`` ids (:mod:`._text`).

Hours are those of the file's timestamps (PDT); the users' own time zones are unknown.
"""

from __future__ import annotations

import codecs
import csv
import os
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from fedjax_avail._checks import check_int, check_optional_int
from fedjax_avail.data._federated import FederatedData
from fedjax_avail.data._hours import skew_by_hour
from fedjax_avail.data._text import build_vocab, encode, tokenize
from fedjax_avail.data._tfds import data_source

SENTIMENT140_CSV = "training.1600000.processed.noemoticon.csv"
_HOW = (
    "Get the authors' data at http://cs.stanford.edu/people/alecmgo/trainingandtestdata.zip "
    f"(http://help.sentiment140.com/for-students) and pass its {SENTIMENT140_CSV} as csv_path, "
    "or use TFDS (pip install 'fedjax_avail[tfds]', download=True) on a machine with network."
)
_HOUR = re.compile(r"\b(\d{1,2}):\d{2}:\d{2}\b")
Raw = dict[str, np.ndarray]


class Sentiment140(NamedTuple):
    """What :func:`load_sentiment140` returns.

    Attributes:
      train: N clients; arrays ``x`` ``[M, max_len]`` int32 token ids, ``y`` ``[M]`` int32
        (1 = positive), ``hour`` ``[M]`` int32 in 0..23.
      test: pooled held-out tweets: ``x``, ``y``, ``hour`` as in train, and ``client`` ``[M']``
        int32, the client each came from.
      vocab: ``vocab[i]`` is the token of id i (0 ``"<pad>"``, 1 ``"<oov>"``).
      users: ``users[i]`` is client i's Twitter name.
    """

    train: FederatedData
    test: dict[str, np.ndarray]
    vocab: tuple[str, ...]
    users: tuple[str, ...]


def parse_hours(dates) -> np.ndarray:
    """``[M]`` int32 hours 0..23 of date strings like ``'Mon Apr 06 22:19:45 PDT 2009'`` (-> 22).

    Raises:
      ValueError: a string without an ``HH:MM:SS`` time, or an hour above 23; names the string.
    """
    out = np.empty(len(dates), np.int32)
    for i, date in enumerate(dates):
        match = _HOUR.search(date.decode() if isinstance(date, bytes) else str(date))
        if match is None or int(match.group(1)) > 23:
            raise ValueError(f"dates[{i}] = {date!r} has no HH:MM:SS time of day (hour 0..23)")
        out[i] = int(match.group(1))
    return out


def _labels(polarity: np.ndarray) -> np.ndarray:
    bad = ~np.isin(polarity, (0, 4))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"polarity must be 0 (negative) or 4 (positive) as in the training file, "
                         f"got {polarity[i]} at row {i}")
    return (polarity == 4).astype(np.int32)


def read_sentiment140_csv(path: str | os.PathLike) -> Raw:
    """Reads the authors' CSV (ISO-8859-1; columns polarity, id, date, query, user, text).

    Returns:
      ``{"polarity": [M] int, "date", "user", "text": [M] str}``.

    Raises:
      FileNotFoundError: no such file; the message says how to get it.
      ValueError: a row without 6 columns.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"Sentiment140: {file.resolve()} is not a file. {_HOW}")
    cols: dict[str, list] = {"polarity": [], "date": [], "user": [], "text": []}
    with open(file, "rb") as f:
        for i, row in enumerate(csv.reader(codecs.iterdecode(f, "ISO-8859-1"))):
            if len(row) != 6:
                raise ValueError(f"{file}: row {i} has {len(row)} columns, expected 6 "
                                 "(polarity, id, date, query, user, text)")
            cols["polarity"].append(int(row[0]))
            cols["date"].append(row[2])
            cols["user"].append(row[4])
            cols["text"].append(row[5])
    return {k: np.asarray(v, np.int32 if k == "polarity" else object) for k, v in cols.items()}


def _read_tfds(data_dir: str | None, download: bool) -> Raw:
    source = data_source("sentiment140", "train", data_dir, download, _HOW)
    cols: dict[str, list] = {"polarity": [], "date": [], "user": [], "text": []}
    for i in range(len(source)):  # one record at a time: columns only, no 1.6M dicts kept
        r = source[i]
        cols["polarity"].append(int(r["polarity"]))
        for k in ("date", "user", "text"):
            v = r[k]
            cols[k].append(v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v))
    return {k: np.asarray(v, np.int32 if k == "polarity" else object) for k, v in cols.items()}


def _check(min_tweets, test_fraction, num_clients, alpha, max_len, vocab_size) -> None:
    check_int("min_tweets", min_tweets)
    if not 0 <= test_fraction < 1:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    check_optional_int("num_clients", num_clients)
    if alpha is not None and not 0 <= alpha <= 0.5:
        raise ValueError(f"alpha must be None or in [0, 0.5], got {alpha}")
    check_int("max_len", max_len)
    check_int("vocab_size (pad, OOV and one word)", vocab_size, 3)


def load_sentiment140(
    csv_path: str | os.PathLike | None = None,
    *,
    data_dir: str | None = None,
    download: bool = True,
    min_tweets: int = 41,
    num_clients: int | None = None,
    alpha: float | None = None,
    test_fraction: float = 0.1,
    max_len: int = 25,
    vocab_size: int = 10_000,
    seed: int = 0,
) -> Sentiment140:
    """Sentiment140 split by user, with hours of day and optional label skew (module docstring).

    Args:
      csv_path: the authors' ``training.1600000.processed.noemoticon.csv``; if None, TFDS
        ``sentiment140`` (train split) is read through ``tfds.data_source`` (no TensorFlow).
      data_dir: TFDS data directory (TFDS only).
      download: let TFDS download and prepare the data (TFDS only; False where offline).
      min_tweets: keep users with at least this many tweets; 41 = "more than 40" (P:L339).
      num_clients: N, a seeded random subset of the kept users (paper default 1000, P:L401);
        None keeps all of them (1473 in the paper).
      alpha: label skew by hour (:func:`skew_by_hour`), in [0, 0.5]; None drops nothing.
      test_fraction: per-client share of tweets held out, in [0, 1) (paper: one tenth).
      max_len: T, tokens per tweet (first T kept, then padding).
      vocab_size: V, token ids including padding (0) and OOV (1).
      seed: seed of the skew, the client subset and the test split.

    Returns:
      a :class:`Sentiment140` ``(train, test, vocab, users)``.

    Raises:
      ValueError: an argument out of range (named), fewer than ``num_clients`` users, or a
        malformed row (bad polarity or date).
      FileNotFoundError: ``csv_path`` is not a file (the message says how to get it).

    Example:
      >>> data = load_sentiment140("training.1600000.processed.noemoticon.csv",
      ...                          num_clients=1000, alpha=0.0)
      >>> data.train.num_clients, data.train.arrays["x"].shape[1]
      (1000, 25)
    """
    _check(min_tweets, test_fraction, num_clients, alpha, max_len, vocab_size)
    raw = read_sentiment140_csv(csv_path) if csv_path is not None else _read_tfds(data_dir,
                                                                                  download)
    users, user_of = np.unique(raw["user"].astype(str), return_inverse=True)
    keep = np.bincount(user_of, minlength=len(users))[user_of] >= int(min_tweets)
    rows = np.flatnonzero(keep)
    if rows.size == 0:
        raise ValueError(f"no user has >= min_tweets = {min_tweets} tweets among the {len(users)}"
                         " users read; lower min_tweets")
    labels, hours = _labels(raw["polarity"][rows]), parse_hours(raw["date"][rows])
    rng = np.random.default_rng(seed)
    if alpha is not None:
        kept = skew_by_hour(hours, labels, alpha, seed=seed)
        rows, labels, hours = rows[kept], labels[kept], hours[kept]
    present = np.unique(user_of[rows])  # sorted user indices: clients are ordered by name
    if num_clients is not None:
        if int(num_clients) > len(present):
            raise ValueError(f"num_clients must be <= {len(present)} (users with >= {min_tweets}"
                             f" tweets), got {num_clients}")
        present = np.sort(rng.choice(present, int(num_clients), replace=False))
    client = np.searchsorted(present, user_of[rows])
    chosen = np.isin(user_of[rows], present)
    rows, labels, hours, client = rows[chosen], labels[chosen], hours[chosen], client[chosen]
    is_test = np.zeros(len(rows), bool)
    for i in range(len(present)):
        mine = np.flatnonzero(client == i)
        n_test = min(int(np.rint(test_fraction * len(mine))), len(mine) - 1)
        is_test[rng.choice(mine, n_test, replace=False)] = True
    tokens = [tokenize(t) for t in raw["text"][rows]]
    vocab = build_vocab((t for t, s in zip(tokens, is_test, strict=True) if not s), vocab_size)
    arrays = {"x": encode(tokens, vocab, max_len), "y": labels, "hour": hours}
    train = FederatedData.from_arrays({k: v[~is_test] for k, v in arrays.items()},
                                      client[~is_test], len(present))
    test = {**{k: v[is_test] for k, v in arrays.items()},
            "client": client[is_test].astype(np.int32)}
    return Sentiment140(train, test, vocab, tuple(str(u) for u in users[present]))
