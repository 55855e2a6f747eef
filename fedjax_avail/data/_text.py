"""Text to token ids: a tweet tokeniser, a frequency vocabulary, padding, and GloVe vectors.

FedLaAvg's Sentiment140 model reads tweets through pretrained 25-dimensional GloVe Twitter
embeddings (P:L339; the file ``glove.twitter.27B.zip``, App. F P:L900). The paper does not say
how tweets are tokenised, how long sequences are, or how unknown words are handled (spec sec. 8);
the choices made here are:

* :func:`tokenize`: HTML entities unescaped, lowercased, URLs -> ``<url>`` and @mentions ->
  ``<user>`` (the markers GloVe Twitter was trained with), then runs of letters and digits with
  inner apostrophes (``don't``); other characters (punctuation, emoji) are dropped.
* :func:`build_vocab`: id 0 is padding, id 1 out-of-vocabulary, then the most frequent words.
* :func:`encode`: the first ``max_len`` tokens, padded with 0 at the end.
"""

from __future__ import annotations

import collections
import gzip
import html
import io
import os
import re
import warnings
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from fedjax_avail._checks import check_int

PAD = 0  # token id of padding
OOV = 1  # token id of words outside the vocabulary
GLOVE_ENV = "FEDJAX_AVAIL_GLOVE"
_URL = re.compile(r"(?:https?://|www\.)\S+")
_MENTION = re.compile(r"@\w+")
_TOKEN = re.compile(r"<url>|<user>|[a-z0-9]+(?:'[a-z0-9]+)*")


def tokenize(text: str | bytes) -> list[str]:
    """Splits one tweet into lowercase word tokens.

    Example:
      >>> tokenize("@Bob I don't LOVE http://x.co/a &amp; it!!")
      ['<user>', 'i', "don't", 'love', '<url>', 'it']
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = html.unescape(text).lower()
    text = _MENTION.sub(" <user> ", _URL.sub(" <url> ", text))
    return _TOKEN.findall(text)


def build_vocab(token_lists: Iterable[Sequence[str]], vocab_size: int) -> tuple[str, ...]:
    """The ``vocab_size - 2`` most frequent tokens after ``"<pad>"`` (id 0) and ``"<oov>"`` (id 1).

    Ties in frequency are broken alphabetically, so the vocabulary is deterministic. It is shorter
    than ``vocab_size`` when the text has fewer distinct tokens.

    Args:
      token_lists: the tokenised training texts.
      vocab_size: V, the number of ids including padding and OOV, >= 3.

    Returns:
      ``vocab``: a tuple of tokens, ``vocab[i]`` the token of id i.

    Raises:
      ValueError: ``vocab_size < 3``.
    """
    check_int("vocab_size (pad, OOV and one word)", vocab_size, 3)
    counts = collections.Counter(t for tokens in token_lists for t in tokens)
    counts.pop("<pad>", None)
    counts.pop("<oov>", None)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: vocab_size - 2]
    return ("<pad>", "<oov>", *(word for word, _ in ranked))


def encode(token_lists: Sequence[Sequence[str]], vocab: Sequence[str], max_len: int) -> np.ndarray:
    """Token ids of each text: its first ``max_len`` tokens, padded with 0 at the end.

    Args:
      token_lists: M tokenised texts.
      vocab: from :func:`build_vocab`; tokens outside it get id 1 (OOV).
      max_len: T, the sequence length, >= 1.

    Returns:
      ``[M, T]`` int32 ids; a text's length is its number of non-zero ids.

    Raises:
      ValueError: ``max_len < 1``.

    Example:
      >>> encode([["a", "zz"], []], ("<pad>", "<oov>", "a"), 3).tolist()
      [[2, 1, 0], [0, 0, 0]]
    """
    check_int("max_len", max_len)
    index = {word: i for i, word in enumerate(vocab)}
    out = np.full((len(token_lists), max_len), PAD, np.int32)
    for row, tokens in enumerate(token_lists):
        ids = [index.get(t, OOV) for t in tokens[: max_len]]
        out[row, : len(ids)] = ids
    return out


def _open_glove(path: Path, dim: int) -> io.TextIOBase:
    if path.suffix == ".zip":
        archive = zipfile.ZipFile(path)
        names = [n for n in archive.namelist() if n.endswith(f".{dim}d.txt")]
        if not names:
            raise FileNotFoundError(f"{path} holds no *.{dim}d.txt member: {archive.namelist()}")
        return io.TextIOWrapper(archive.open(names[0]), encoding="utf-8", errors="replace")
    opener = gzip.open if path.suffix == ".gz" else open
    return opener(path, "rt", encoding="utf-8", errors="replace")


def load_glove(
    path: str | os.PathLike | None,
    vocab: Sequence[str],
    dim: int = 25,
    seed: int = 0,
) -> np.ndarray:
    """An embedding matrix for ``vocab`` from a GloVe text file (``word v_1 ... v_dim`` per line).

    Rows of words found in the file are their GloVe vectors; row 0 (padding) is zero; every other
    row (OOV id 1 and words GloVe lacks) is Normal(0, 0.1^2), drawn from ``seed``. Lines whose
    field count is not ``dim + 1`` (GloVe Twitter has a few words with odd whitespace) are skipped
    with a warning that counts them.

    Args:
      path: ``glove.twitter.27B.25d.txt`` (optionally ``.gz``) or the ``glove.twitter.27B.zip``
        archive itself; default the environment variable ``FEDJAX_AVAIL_GLOVE``.
      vocab: V tokens, ``vocab[i]`` the token of id i (from :func:`build_vocab`).
      dim: the vector size of the file (25 in FedLaAvg, P:L339).
      seed: seed of the random rows.

    Returns:
      ``[V, dim]`` float32.

    Raises:
      FileNotFoundError: no file; the message says where it looked and how to get the file.
      ValueError: ``dim < 1``, or the file's first vector does not have ``dim`` numbers.

    Example:
      >>> emb = load_glove("glove.twitter.27B.25d.txt", data.vocab)  # data: load_sentiment140()
    """
    if int(dim) < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    where = path if path is not None else os.environ.get(GLOVE_ENV)
    how = (
        "Download http://nlp.stanford.edu/data/glove.twitter.27B.zip (FedLaAvg App. F) and pass "
        f"the zip or its glove.twitter.27B.{dim}d.txt as path, or set {GLOVE_ENV}."
    )
    if where is None:
        raise FileNotFoundError(f"GloVe: no path given and {GLOVE_ENV} is not set. {how}")
    file = Path(where).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"GloVe: {file.resolve()} is not a file. {how}")
    rng = np.random.default_rng(seed)
    matrix = (0.1 * rng.standard_normal((len(vocab), int(dim)))).astype(np.float32)
    matrix[PAD] = 0.0
    index = {word: i for i, word in enumerate(vocab) if i != PAD}
    skipped, first = 0, True
    with _open_glove(file, int(dim)) as f:
        for line in f:
            fields = line.rstrip("\n").rstrip(" ").split(" ")
            if first and len(fields) != int(dim) + 1:
                raise ValueError(
                    f"{file}: the first vector has {len(fields) - 1} numbers, but dim={dim}"
                )
            first = False
            if len(fields) != int(dim) + 1:
                skipped += 1
                continue
            i = index.get(fields[0])
            if i is not None:
                matrix[i] = np.asarray(fields[1:], np.float32)
    if skipped:
        warnings.warn(f"GloVe: skipped {skipped} lines of {file} without {dim} numbers",
                      stacklevel=2)
    return matrix
