"""Tasks: model + loss + metrics as pure functions."""

from fedjax_avail.tasks._lstm import LSTMClassifier, lstm_classifier
from fedjax_avail.tasks._models import (
    MLP,
    DenseOI,
    LeNet5,
    LogisticRegression,
    lenet5,
    logistic_regression,
    mlp,
)
from fedjax_avail.tasks._task import Task, classification, normalize_images

__all__ = [
    "MLP",
    "DenseOI",
    "LSTMClassifier",
    "LeNet5",
    "LogisticRegression",
    "Task",
    "classification",
    "lenet5",
    "logistic_regression",
    "lstm_classifier",
    "mlp",
    "normalize_images",
]
