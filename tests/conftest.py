"""Shared fixtures: the real MNIST files beside the repository, and small problems.

Tests that need real MNIST take the ``mnist`` fixture. In a clone without the files they skip,
naming where the files were looked for; CI sets ``FEDJAX_AVAIL_REQUIRE_DATA=1`` so that missing
data fails there instead of silently skipping the golden results.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

import fedjax_avail as fa
from fedjax_avail.testing import point_clients, quadratic_task  # noqa: F401 (tests import them)

REPO = Path(__file__).resolve().parents[1]
# The CLI caches compiled programs in the user's cache directory; tests write nothing there
# (tests/test_compilation_cache.py turns that cache on in processes of its own).
os.environ[fa.compilation_cache.ENV] = "0"
# The tests share compiled programs instead: JAX's persistent cache in a directory of this
# session, so a program another test already compiled is loaded, not compiled again (the
# default tier: 10:03 -> 7:03 on 2 cores). A hit is the very executable the compilation would
# give, so no result changes. FEDJAX_AVAIL_TEST_CACHE names a directory to keep across sessions
# (CI's two tiers share one) or is "0" to compile every program afresh.
TEST_CACHE_ENV = "FEDJAX_AVAIL_TEST_CACHE"


def _share_compiled_programs() -> None:
    directory = os.environ.get(TEST_CACHE_ENV, "")
    if directory == "0":
        return
    if not directory:
        directory = tempfile.mkdtemp(prefix="fedjax_avail_tests_")
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
    fa.enable_compilation_cache(directory)


_share_compiled_programs()
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


