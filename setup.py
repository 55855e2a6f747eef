"""Writes ``fedjax_avail/_build.json`` into the built package: the git commit the package was
built from, so an installed copy (``pip install .``, a wheel) names it in every result's
provenance (``fedjax_avail._provenance.git_commit``). Everything else is in pyproject.toml."""

import json
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


def source_commit(root: Path) -> str | None:
    """The commit of the checkout at ``root``, with ``-dirty`` for uncommitted changes to the
    package's files (new ones too); None outside a git checkout (e.g. an sdist) or without
    git."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "--no-optional-locks", "-C", str(root), *args],
                              capture_output=True, text=True, timeout=10)

    try:
        tracked = git("ls-files", "--error-unmatch", "--", "fedjax_avail/__init__.py")
        commit = git("rev-parse", "HEAD")
        if tracked.returncode != 0 or commit.returncode != 0:
            return None
        # untracked files count too: a new module under fedjax_avail/ is built into the wheel
        dirty = git("status", "--porcelain", "--", "fedjax_avail")
    except (OSError, subprocess.SubprocessError):
        return None
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


class BuildWithCommit(build_py):
    """setuptools' build_py, then the build record beside the built modules."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install asks git at run time
            return
        target = Path(self.build_lib) / "fedjax_avail" / "_build.json"
        target.write_text(json.dumps({"git_commit": source_commit(Path(__file__).parent)})
                          + "\n")


if __name__ == "__main__":  # setuptools runs this file as __main__; tests import it
    setup(cmdclass={"build_py": BuildWithCommit})
