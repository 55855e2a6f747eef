"""Shared fixtures: the real MNIST files beside the repository, and small problems."""

from __future__ import annotations

import os
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_avail as fa

REPO = Path(__file__).resolve().parents[1]
MNIST_DIR = Path(os.environ.get(fa.data.MNIST_ENV, REPO.parent / "shared" / "data" / "mnist"))


@pytest.fixture(scope="session")
def mnist():
    if not MNIST_DIR.exists():
        pytest.fail(f"real MNIST is expected at {MNIST_DIR} (set {fa.data.MNIST_ENV})")
    return fa.data.load_mnist(MNIST_DIR)


@pytest.fixture(scope="session")
def digits():
    return fa.data.load_digits()


def quadratic_task(dim: int = 1) -> fa.Task:
    """f_i(x) = mean_b ||x - y_b||^2 over a client's examples y: gradient 2 (x - mean y)."""
    return fa.Task(
        init=lambda key: jnp.zeros((dim,), jnp.float32),
        loss=lambda x, batch: jnp.mean(jnp.sum((x - batch["y"]) ** 2, axis=-1)),
    )


def point_clients(points) -> fa.FederatedData:
    """One client per row of ``points`` ``[N, dim]``, holding exactly that one example."""
    points = np.asarray(points, np.float32)
    return fa.FederatedData.from_client_arrays([{"y": p[None]} for p in points])
