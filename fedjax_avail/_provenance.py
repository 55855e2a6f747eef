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
    """The commit of the git checkout holding ``path`` (default: this package), or None.

    A ``-dirty`` suffix marks uncommitted changes to tracked files.
    """
    where = Path(path or __file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


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
