"""Natural partitions from Hugging Face datasets: one client per value of a client-id column.

Many federated benchmarks on the Hugging Face Hub carry their natural split as a column:
FEMNIST's ``writer_id`` (``flwrlabs/femnist``), Sent140's ``user`` (``flwrlabs/sent140``),
Shakespeare's ``character_id`` (``flwrlabs/shakespeare``). :func:`from_huggingface` turns such
a ``datasets.Dataset`` into :class:`FederatedData`; with a ``partitioner`` from
``flwr-datasets`` (``IidPartitioner``, ``DirichletPartitioner``, ``PathologicalPartitioner``,
...) it splits any dataset the way that partitioner does instead. ``pip install
'fedjax_avail[huggingface]'``; downloading needs a network::

    import datasets
    femnist = datasets.load_dataset("flwrlabs/femnist", split="train")
    fd = fa.data.from_huggingface(femnist, client_column="writer_id",
                                  columns={"x": "image", "y": "character"})

Columns become numpy arrays with a leading example axis; JAX computes in 32 bits, so float64
columns are stored as float32 and int64 columns as int32 (refused if a value does not fit).
Text columns must be tokenized first (e.g. with ``datasets.Dataset.map``): they are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedjax_avail.data._federated import FederatedData


def _column(dataset: Any, name: str) -> np.ndarray:
    """One column as a numeric numpy array (module docstring: 32-bit, text refused)."""
    if name not in dataset.column_names:
        raise ValueError(f"the dataset has no column {name!r}; its columns: "
                         f"{dataset.column_names}")
    values = np.asarray(dataset.with_format("numpy")[name])
    if values.dtype == object or values.dtype.kind in "USO":
        raise ValueError(f"column {name!r} holds {values.dtype} values, not numbers; tokenize "
                         "or encode it first (datasets.Dataset.map)")
    if values.dtype == np.float64:
        values = values.astype(np.float32)
    elif values.dtype == np.int64:
        info = np.iinfo(np.int32)
        if values.size and (values.min() < info.min or values.max() > info.max):
            raise ValueError(f"column {name!r} holds integers outside int32's range")
        values = values.astype(np.int32)
    return values


def from_huggingface(
    dataset: Any,
    client_column: str | None = None,
    columns: Mapping[str, str] | None = None,
    partitioner: Any = None,
) -> FederatedData:
    """A Hugging Face dataset as :class:`FederatedData` (module docstring).

    Args:
      dataset: a ``datasets.Dataset`` (one split).
      client_column: the column naming each example's client (the natural partition); clients
        are its distinct values in sorted order. Give this or ``partitioner``.
      columns: array name in :class:`FederatedData` -> dataset column, e.g. ``{"x": "image",
        "y": "character"}``; None: every column but ``client_column``, under its own name.
      partitioner: an ``flwr_datasets`` partitioner (anything with ``num_partitions``, a
        settable ``dataset`` and ``load_partition(i)``): client i is its partition i.

    Returns:
      :class:`FederatedData`, client i's examples in the dataset's order.

    Raises:
      ValueError: neither or both of ``client_column`` and ``partitioner``, a missing or text
        column (named), an empty partition.
    """
    if (client_column is None) == (partitioner is None):
        raise ValueError("give exactly one of client_column (a natural partition) and "
                         "partitioner (an flwr-datasets partitioner)")
    if columns is None:
        columns = {c: c for c in dataset.column_names if c != client_column}
    if not columns:
        raise ValueError("columns: the dataset has no column besides the client column")
    if partitioner is not None:
        partitioner.dataset = dataset
        clients = []
        for i in range(partitioner.num_partitions):
            part = partitioner.load_partition(i)
            if len(part) == 0:
                raise ValueError(f"the partitioner's partition {i} is empty; every client needs "
                                 "an example (fewer partitions, or a minimum partition size)")
            clients.append({name: _column(part, column) for name, column in columns.items()})
        return FederatedData.from_client_arrays(clients)
    if client_column not in dataset.column_names:
        raise ValueError(f"the dataset has no column {client_column!r}; its columns: "
                         f"{dataset.column_names}")
    ids = np.asarray(dataset.with_format("numpy")[client_column])
    names, client = np.unique(ids.astype(str) if ids.dtype.kind in "OUS" else ids,
                              return_inverse=True)
    arrays = {name: _column(dataset, column) for name, column in columns.items()}
    return FederatedData.from_arrays(arrays, client.astype(np.int32), len(names))
