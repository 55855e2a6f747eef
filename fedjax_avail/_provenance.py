"""Where a result came from: package versions, the project's git commit, the command, the time."""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from fedjax_avail._version import __version__

_PACKAGES = ("fedjax_avail", "jax", "jaxlib", "flax", "optax", "numpy", "orbax-checkpoint")


_PACKAGE = Path(__file__).resolve().parent
# Written by setup.py when the package is built (``pip install .``, a wheel): the commit it was
# built from, for an installed copy that no git checkout tracks.
BUILD_RECORD = _PACKAGE / "_build.json"


def built_commit(record: Path | None = None) -> str | None:
    """The commit recorded in ``record`` (default :data:`BUILD_RECORD`) when the package was
    built, or None (no record: an editable install or a copy of the source; a record from
    outside any checkout)."""
    try:
        return json.loads((record or BUILD_RECORD).read_text()).get("git_commit")
    except (OSError, ValueError, AttributeError):
        return None


def commit() -> str | None:
    """The commit this package's code comes from: the checkout that tracks it (an editable
    install or a clone on ``sys.path``, ``-dirty`` after edits), else the commit recorded when
    it was built (``pip install .``), else None."""
    return git_commit() or built_commit()


def git_commit(path: Path | None = None) -> str | None:
    """The commit of the git checkout that tracks ``path`` (default: this package), or None.

    None also where ``path`` lies inside a checkout that does not track it (a virtual
    environment or a download inside some other repository), so an installed copy never
    reports the commit of whatever repository happens to hold it. A ``-dirty`` suffix marks
    uncommitted changes to the tracked files of ``path``'s folder (and below it).
    """
    target = Path(path or __file__).resolve()
    where = target.parent

    def git(*args: str) -> subprocess.CompletedProcess:
        # --no-optional-locks: never hold the index lock a user's own git command may want
        return subprocess.run(["git", "--no-optional-locks", "-C", str(where), *args],
                              capture_output=True, text=True, timeout=10)

    try:
        tracked = git("ls-files", "--error-unmatch", "--", target.name)
        commit = git("rev-parse", "HEAD")
        if tracked.returncode != 0 or commit.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    except (OSError, subprocess.SubprocessError):
        return None
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def source_digest(package: Path = _PACKAGE) -> str:
    """A hash of the ``.py`` files under ``package`` (their paths and bytes): the code itself,
    whether or not it is a git checkout, committed, or installed."""
    digest = hashlib.blake2b(digest_size=16)
    for file in sorted(package.rglob("*.py")):
        digest.update(file.relative_to(package).as_posix().encode() + b"\0")
        digest.update(file.read_bytes() + b"\0")
    return digest.hexdigest()


_LOADED = source_digest()  # at import: the code this process runs, not later edits to it


def code() -> dict[str, str | None]:
    """This package's code as loaded: its version and source digest (what a checkpoint's
    fingerprint compares: a run resumed under other code would equal neither code's
    uninterrupted run) and, for people, the git commit (:func:`git_commit`)."""
    return {"fedjax_avail_version": __version__, "fedjax_avail_source": _LOADED,
            "fedjax_avail_commit": commit()}


def provenance() -> dict[str, Any]:
    """Versions, git commit, command line, host and UTC time of this process, JSON-ready."""
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    import jax

    return {
        "versions": {"python": platform.python_version(), **versions},
        "git_commit": commit(),
        "command": sys.argv,
        "platform": platform.platform(),
        "jax_backend": jax.default_backend(),
        "utc_time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
