"""Tasks: model + loss + metrics as pure functions."""

from fedjax_avail.tasks._conv import conv_general_dilated
from fedjax_avail.tasks._lstm import LSTMClassifier, lstm_classifier, next_character_lstm
from fedjax_avail.tasks._matmul import dot_general, matmul
from fedjax_avail.tasks._models import (
    CNN,
    INITS,
    MLP,
    CelebACNN,
    DenseOI,
    LeNet5,
    LogisticRegression,
    celeba_cnn,
    cnn,
    lenet5,
    logistic_regression,
    mlp,
)
from fedjax_avail.tasks._pool import max_pool
from fedjax_avail.tasks._task import Task, classification, normalize_images

__all__ = [
    "CNN",
    "INITS",
    "MLP",
    "CelebACNN",
    "DenseOI",
    "LSTMClassifier",
    "LeNet5",
    "LogisticRegression",
    "Task",
    "celeba_cnn",
    "classification",
    "cnn",
    "conv_general_dilated",
    "dot_general",
    "lenet5",
    "logistic_regression",
    "lstm_classifier",
    "matmul",
    "next_character_lstm",
    "max_pool",
    "mlp",
    "normalize_images",
]
