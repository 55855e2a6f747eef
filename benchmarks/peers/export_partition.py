"""Writes the FedLaAvg MNIST partition to one ``.npz``, so that the peer frameworks train on it.

The partition is this project's: ``fa.data.one_label_per_client(train["x"], train["y"], 1000,
seed=0)`` on the real MNIST training set (1000 clients holding one digit each, sizes about
Normal(60, 10^2)). The file holds plain numpy arrays, so that the FedJAX and Flower scripts can
read it without importing ``fedjax_avail``:

* ``x``: ``uint8 [M, 784]`` pixels of the kept training examples, rows grouped by client;
* ``y``: ``int32 [M]`` labels;
* ``client_id``: ``int32 [M]`` the client of each row (non-decreasing);
* ``offsets``, ``counts``: ``int64 [N]`` first row and number of rows of each client;
* ``test_x``, ``test_y``: the 10,000 test examples, same dtypes;
* ``num_clients``, ``seed``: scalars describing the split.

Pixels stay uint8; every consumer scales them to ``[0, 1]`` by dividing by 255, as the project's
tasks do (``normalize_images``). The file is written uncompressed (about 55 MB) and atomically.

Usage (the project's venv, from the repository root)::

    python benchmarks/peers/export_partition.py [--data-dir DIR] [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np

import fedjax_avail as fa

REPO_ROOT = Path(__file__).resolve().parents[2]
NUM_CLIENTS = 1000
SEED = 0
DEFAULT_OUT = Path(tempfile.gettempdir()) / "fedjax_avail_peers" / "mnist_one_label_1000.npz"


def default_data_dir() -> Path:
    """``$FEDJAX_AVAIL_MNIST_DIR``, else ``shared/data/mnist`` next to the repository."""
    env = os.environ.get(fa.data.MNIST_ENV)
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data" / "mnist"


def build_partition(data_dir: Path) -> tuple[fa.FederatedData, dict[str, np.ndarray]]:
    """The project's partition of MNIST and its test set (the FedLaAvg setting)."""
    train, test = fa.data.load_mnist(data_dir)
    fd = fa.data.one_label_per_client(train["x"], train["y"], NUM_CLIENTS, seed=SEED)
    return fd, test


def partition_arrays(fd: fa.FederatedData, test: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays the ``.npz`` holds (see the module docstring)."""
    offsets = np.asarray(fd.offsets, np.int64)
    counts = np.asarray(fd.counts, np.int64)
    x = np.asarray(fd.arrays["x"], np.uint8)
    client_id = np.repeat(np.arange(fd.num_clients, dtype=np.int32), counts)
    if not np.array_equal(np.cumsum(counts) - counts, offsets):
        raise ValueError("the partition's rows are not grouped by client in order")
    return {
        "x": x.reshape(len(x), -1),
        "y": np.asarray(fd.arrays["y"], np.int32),
        "client_id": client_id,
        "offsets": offsets,
        "counts": counts,
        "test_x": np.asarray(test["x"], np.uint8).reshape(len(test["x"]), -1),
        "test_y": np.asarray(test["y"], np.int32),
        "num_clients": np.int64(fd.num_clients),
        "seed": np.int64(SEED),
    }


def write_npz(arrays: dict[str, np.ndarray], out: Path) -> None:
    """Writes ``arrays`` to the uncompressed ``.npz`` ``out`` atomically (temp file + rename)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd_out, tmp = tempfile.mkstemp(dir=out.parent, prefix=out.name, suffix=".tmp")
    try:
        with os.fdopen(fd_out, "wb") as f:
            np.savez(f, **arrays)
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def summary(arrays: dict[str, np.ndarray]) -> dict[str, int]:
    """Sizes of an exported partition: clients, examples, smallest and largest client."""
    return {
        "num_clients": int(arrays["num_clients"]),
        "num_train_examples": len(arrays["y"]),
        "num_test_examples": len(arrays["test_y"]),
        "min_client_size": int(arrays["counts"].min()),
        "max_client_size": int(arrays["counts"].max()),
    }


def export(data_dir: Path, out: Path) -> dict[str, int]:
    """Builds the partition and writes it to ``out``; returns its :func:`summary`."""
    fd, test = build_partition(data_dir)
    arrays = partition_arrays(fd, test)
    write_npz(arrays, out)
    return summary(arrays)


def main(argv: list[str] | None = None) -> dict[str, int]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=None,
                        help=f"MNIST IDX files (default ${fa.data.MNIST_ENV} or "
                             "../shared/data/mnist)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the .npz to write")
    args = parser.parse_args(argv)
    data_dir = args.data_dir if args.data_dir is not None else default_data_dir()
    sizes = export(data_dir, args.out)
    print(f"wrote {args.out}: {sizes['num_clients']} clients, "
          f"{sizes['num_train_examples']} training examples "
          f"({sizes['min_client_size']}-{sizes['max_client_size']} per client), "
          f"{sizes['num_test_examples']} test examples")
    return sizes


if __name__ == "__main__":
    main()
