"""Federated data, partitioners and data set loaders."""

from fedjax_avail.data._datasets import (
    MNIST_ENV,
    load_digits,
    load_mnist,
    load_mnist_tfds,
    read_idx,
)
from fedjax_avail.data._federated import FederatedData, sample_rows
from fedjax_avail.data._hours import (
    hourly_counts,
    positive_share,
    skew_by_hour,
    sleep_start_hours,
)
from fedjax_avail.data._huggingface import from_huggingface
from fedjax_avail.data._partition import (
    classes_per_client,
    dirichlet,
    iid,
    labels_per_client,
    one_label_per_client,
)
from fedjax_avail.data._sentiment140 import (
    SENTIMENT140_CSV,
    Sentiment140,
    load_sentiment140,
    parse_hours,
    read_sentiment140_csv,
)
from fedjax_avail.data._shakespeare import Shakespeare, load_shakespeare
from fedjax_avail.data._text import GLOVE_ENV, OOV, PAD, build_vocab, encode, load_glove, tokenize
from fedjax_avail.data._tfds_images import (
    load_celeba,
    load_cifar10,
    load_emnist,
    load_tfds_images,
)

__all__ = [
    "GLOVE_ENV",
    "MNIST_ENV",
    "OOV",
    "PAD",
    "SENTIMENT140_CSV",
    "FederatedData",
    "Sentiment140",
    "Shakespeare",
    "build_vocab",
    "classes_per_client",
    "dirichlet",
    "encode",
    "hourly_counts",
    "iid",
    "labels_per_client",
    "load_celeba",
    "load_cifar10",
    "load_emnist",
    "load_tfds_images",
    "load_digits",
    "load_glove",
    "load_mnist",
    "load_mnist_tfds",
    "from_huggingface",
    "load_sentiment140",
    "load_shakespeare",
    "one_label_per_client",
    "parse_hours",
    "positive_share",
    "read_idx",
    "read_sentiment140_csv",
    "sample_rows",
    "skew_by_hour",
    "sleep_start_hours",
    "tokenize",
]
