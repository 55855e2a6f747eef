"""Federated data, partitioners and data set loaders."""

from fedjax_avail.data._datasets import (
    MNIST_ENV,
    load_digits,
    load_mnist,
    load_mnist_tfds,
    read_idx,
)
from fedjax_avail.data._federated import FederatedData, sample_rows
from fedjax_avail.data._partition import classes_per_client, dirichlet, iid, one_label_per_client

__all__ = [
    "MNIST_ENV",
    "FederatedData",
    "classes_per_client",
    "dirichlet",
    "iid",
    "load_digits",
    "load_mnist",
    "load_mnist_tfds",
    "one_label_per_client",
    "read_idx",
    "sample_rows",
]
