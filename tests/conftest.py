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

# One CPU device in the tests and the processes they start (importing the package would ask for
# one a core: fedjax_avail.mesh.use_cpu_cores): their results are compared across layouts and
# with references where they choose the devices; tests/test_cpu_cores.py tests the default.
os.environ.setdefault("FEDJAX_AVAIL_CPU_DEVICES", "1")

import jax._src.compiler  # noqa: E402
import pytest  # noqa: E402

import fedjax_avail as fa  # noqa: E402
from fedjax_avail.testing import point_clients, quadratic_task  # noqa: E402, F401 (tests import them)

REPO = Path(__file__).resolve().parents[1]
# The tests share compiled programs: JAX's persistent cache in a directory of this session, so a
# program another test already compiled is loaded, not compiled again (the default tier: 10:03
# -> 7:03 on 2 cores). A hit is the very executable the compilation would give, so no result
# changes. FEDJAX_AVAIL_TEST_CACHE names a directory to keep across sessions (CI's two tiers
# share one, each loading only its own programs) or is "0" to compile every program afresh.
# The directory reaches pytest-xdist's workers through TEST_CACHE_ENV and the CLI and notebooks
# run by tests through the CLI's own setting, so nothing is written to the user's cache directory
# (tests/test_compilation_cache.py tests that one in processes of its own). With several
# writers, a read can meet an entry still being written: JAX then warns and compiles afresh.
TEST_CACHE_ENV = "FEDJAX_AVAIL_TEST_CACHE"


def _share_compiled_programs() -> None:
    directory = os.environ.get(TEST_CACHE_ENV, "")
    if directory == "0":
        os.environ[fa.compilation_cache.ENV] = "0"
        return
    if not directory:  # the first process (pytest's, or xdist's controller) makes it
        directory = tempfile.mkdtemp(prefix="fedjax_avail_tests_")
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        os.environ[TEST_CACHE_ENV] = directory
    os.environ[fa.compilation_cache.ENV] = directory
    fa.enable_compilation_cache(directory)


_share_compiled_programs()
MNIST_DIR = Path(os.environ.get(fa.data.MNIST_ENV, REPO.parent / "shared" / "data" / "mnist"))


# The default tier's XLA flags (pytest_configure): no LLVM optimisation passes, and XLA:CPU's
# elemental emitters in place of its MLIR fusion emitters, which take longer to compile.
TEST_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"


def pytest_configure(config: pytest.Config) -> None:
    """The default tier (``-m 'not slow'``) checks behaviour on many small programs that run for
    milliseconds, so it compiles them the quick way (``TEST_XLA_FLAGS``): without LLVM's
    optimisation passes (the conformance battery 213 s -> 149 s on 2 cores) and without XLA:CPU's
    MLIR fusion emitters (the whole tier 8:27-8:49 -> 5:58 on 2 cores, CPU time 16:25 -> 10:50,
    JAX 0.10.2). That never changes what a test compares: each compares programs compiled alike,
    or within a tolerance. The few tests that check what XLA:CPU itself compiles with its default
    flags (a scatter in a gradient, a working set that the emitters change) are in the slow tier.
    The slow tier trains real models for minutes (3x slower unoptimised), so it keeps XLA's
    default (JAX's cache key holds the flags, so the slow tier cannot load the default tier's
    programs). Set before JAX starts its backend; subprocesses (the CLI) inherit it; an XLA_FLAGS
    naming an optimisation level of its own is kept as it is."""
    flags = os.environ.get("XLA_FLAGS", "")
    if config.getoption("markexpr") == "not slow" and "xla_backend_optimization_level" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " " + TEST_XLA_FLAGS).strip()


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




@pytest.fixture
def no_compilation(monkeypatch):
    """Fails a test that compiles anything: bad input must be reported before compute."""
    def refuse(*args, **kwargs):
        raise AssertionError("compiled before the bad input was reported")

    # compile_or_get_cached: a program the session's compilation cache holds (above) is
    # loaded there without reaching backend_compile_and_load
    monkeypatch.setattr(jax._src.compiler, "compile_or_get_cached", refuse)
    monkeypatch.setattr(jax._src.compiler, "backend_compile_and_load", refuse)
