"""Real data sets: MNIST (IDX files or TFDS) and scikit-learn's digits (always offline).

Every loader returns ``(train, test)``, each a dict ``{"x": uint8 images [M, H, W], "y": int32
labels [M]}``. Images stay uint8; tasks normalise them inside the loss.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import os
from pathlib import Path

import numpy as np

from fedjax_avail.data._tfds import data_source

MNIST_ENV = "FEDJAX_AVAIL_MNIST_DIR"
_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

Split = dict[str, np.ndarray]


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Reads one IDX file (optionally gzipped) into a read-only numpy array of its stored dtype
    and shape."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if raw[:2] != b"\x00\x00" or raw[2] != 0x08:
        raise ValueError(f"{path} is not an unsigned-byte IDX file (magic {raw[:4].hex()})")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says {shape} but holds {data.size} bytes")
    return data.reshape(shape)


def _find(directory: Path, stem: str) -> Path | None:
    dotted = stem.replace("-idx", ".idx")
    for name in (stem, stem + ".gz", dotted, dotted + ".gz"):
        if (directory / name).exists():
            return directory / name
    return None


@functools.lru_cache(maxsize=4)
def _read_idx_once(path: str, identity: tuple[int, ...]) -> np.ndarray:
    """:func:`read_idx`, once per process for a file unchanged since (``identity``,
    :func:`_identity`, is part of the key): a sweep's panels each load MNIST, and its gzip
    takes about 0.4 s. ``path`` is the name given (a ``.gz`` link to a blob without the suffix
    is still read as gzip)."""
    del identity
    return read_idx(path)


def _identity(path: Path) -> tuple[int, ...]:
    """What changes when the file behind ``path`` (a link followed) is replaced or rewritten:
    its device and inode, size, modification time and status-change time (which a copy that
    keeps the modification time, ``cp -p``, still changes)."""
    stat = path.stat()
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns


def load_mnist(data_dir: str | os.PathLike | None = None) -> tuple[Split, Split]:
    """Loads MNIST from the four standard IDX files (gzipped or not) in a directory; the images
    are read once per process (read-only arrays shared by every call) until a file changes.

    Args:
      data_dir: the directory; default the environment variable ``FEDJAX_AVAIL_MNIST_DIR``.

    Returns:
      ``(train, test)``: 60,000 and 10,000 examples; ``x`` uint8 ``[M, 28, 28]``,
      ``y`` int32 ``[M]``.

    Raises:
      FileNotFoundError: no directory given, or a file missing; the message says where it looked
        and how to get the files.
    """
    where = data_dir if data_dir is not None else os.environ.get(MNIST_ENV)
    how = (
        "Download train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
        "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz "
        "(e.g. from https://storage.googleapis.com/cvdf-datasets/mnist/) "
        f"into one directory and pass it as data_dir or set {MNIST_ENV}; or use "
        "fedjax_avail.data.load_mnist_tfds() with tensorflow-datasets installed."
    )
    if where is None:
        raise FileNotFoundError(f"MNIST: no data_dir given and {MNIST_ENV} is not set. {how}")
    directory = Path(where).expanduser()
    out = []
    for split in ("train", "test"):
        paths = [_find(directory, stem) for stem in _MNIST_FILES[split]]
        missing = [s for s, p in zip(_MNIST_FILES[split], paths, strict=True) if p is None]
        if missing:
            raise FileNotFoundError(f"MNIST: {missing} not found in {directory.resolve()}. {how}")
        x, y = (_read_idx_once(str(p.absolute()), _identity(p)) for p in paths)
        out.append({"x": x, "y": y.astype(np.int32)})
    return out[0], out[1]


def load_mnist_tfds(data_dir: str | None = None, download: bool = True) -> tuple[Split, Split]:
    """Loads MNIST through TensorFlow Datasets (``pip install 'fedjax_avail[tfds]'``).

    Uses ``tfds.data_source``, which needs no TensorFlow to read. Pass ``download=False`` where
    there is no network (tests do, under ``tfds.testing.mock_data``).
    """
    out = []
    for split in ("train", "test"):
        source = data_source("mnist", split, data_dir, download,
                             "Or pass the IDX files' directory to load_mnist().")
        rows = [source[i] for i in range(len(source))]
        x = np.stack([np.asarray(r["image"], np.uint8).reshape(28, 28) for r in rows])
        y = np.asarray([r["label"] for r in rows], np.int32)
        out.append({"x": x, "y": y})
    return out[0], out[1]


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> tuple[Split, Split]:
    """scikit-learn's 1,797 8x8 handwritten digits, offline; pixel values 0..16 scaled to uint8.

    Args:
      test_fraction: share of examples held out as the test split, in (0, 1).
      seed: seed of the split.
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    images, labels = _sklearn_digits()
    x = np.rint(images * (255 / 16)).astype(np.uint8)
    y = labels.astype(np.int32)
    perm = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = perm[:n_test], perm[n_test:]
    return {"x": x[train], "y": y[train]}, {"x": x[test], "y": y[test]}


def _sklearn_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits: float pixels 0..16 ``[1797, 8, 8]`` and labels ``[1797]``.

    Read from the file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``) as its own
    ``load_digits`` reads it, without importing scikit-learn: that import (SciPy with it) costs
    1-2 s, as much as a short run. Where that file is not found (another layout),
    ``sklearn.datasets.load_digits`` itself.
    """
    try:
        spec = importlib.util.find_spec("sklearn")
    except (ImportError, ValueError):  # a module without a spec stands in for scikit-learn
        spec = None
    roots = (spec.submodule_search_locations or []) if spec is not None else []
    files = [Path(root) / "datasets" / "data" / "digits.csv.gz" for root in roots]
    found = next((file for file in files if file.is_file()), None)
    if found is None:
        from sklearn.datasets import load_digits as sk_load_digits

        digits = sk_load_digits()
        return digits.images, digits.target
    with gzip.open(found, "rt", encoding="utf-8") as f:
        data = np.loadtxt(f, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)
