"""Where a result came from: package versions, the project's git commit, the command, the time."""

from __future__ import annotations

import datetime
import importlib.metadata
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

_PACKAGES = ("fedjax_avail", "jax", "jaxlib", "flax", "optax", "numpy", "orbax-checkpoint")


def git_commit(path: Path | None = None) -> str | None:
    """The commit of the git checkout that tracks ``path`` (default: this package), or None.

    None also where ``path`` lies inside a checkout that does not track it (a virtual
    environment or a download inside some other repository), so an installed copy never
    reports the commit of whatever repository happens to hold it. A ``-dirty`` suffix marks
    uncommitted changes to tracked files.
    """
    target = Path(path or __file__).resolve()
    where = target.parent

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True,
                              timeout=10)

    try:
        tracked = git("ls-files", "--error-unmatch", "--", target.name)
        commit = git("rev-parse", "HEAD")
        if tracked.returncode != 0 or commit.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def code() -> dict[str, str | None]:
    """This package's code: its version and, in a git checkout of it, the commit (or None).

    What a checkpoint records of the code that wrote it: a run resumed under other code would
    equal neither code's uninterrupted run.
    """
    import fedjax_avail

    return {"fedjax_avail_version": fedjax_avail.__version__,
            "fedjax_avail_commit": git_commit()}


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
        "git_commit": git_commit(),
        "command": sys.argv,
        "platform": platform.platform(),
        "jax_backend": jax.default_backend(),
        "utc_time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
