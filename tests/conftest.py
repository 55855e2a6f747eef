"""Shared fixtures: the real MNIST files beside the repository, and small problems.

Tests that need real MNIST take the ``mnist`` fixture. In a clone without the files they skip,
naming where the files were looked for; CI sets ``FEDJAX_AVAIL_REQUIRE_DATA=1`` so that missing
data fails there instead of silently skipping the golden results.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import fedjax_avail as fa
from fedjax_avail.testing import point_clients, quadratic_task  # noqa: F401 (tests import them)

REPO = Path(__file__).resolve().parents[1]
# The CLI caches compiled programs in the user's cache directory; tests write nothing there and
# compile afresh (tests/test_compilation_cache.py turns the cache on in processes of its own).
os.environ[fa.compilation_cache.ENV] = "0"
MNIST_DIR = Path(os.environ.get(fa.data.MNIST_ENV, REPO.parent / "shared" / "data" / "mnist"))


@pytest.fixture(scope="session")
def mnist():
    if not any(MNIST_DIR.glob("train-images*")):
        why = (f"needs the real MNIST IDX files in {MNIST_DIR} (set {fa.data.MNIST_ENV} to "
               "their folder)")
        if os.environ.get("FEDJAX_AVAIL_REQUIRE_DATA") == "1":
            pytest.fail(why + "; FEDJAX_AVAIL_REQUIRE_DATA=1 makes this a failure")
        pytest.skip(why)
    return fa.data.load_mnist(MNIST_DIR)


@pytest.fixture(scope="session")
def digits():
    return fa.data.load_digits()


