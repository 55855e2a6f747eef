"""Where a result came from: the commit is that of the checkout that tracks the package."""

import subprocess
from pathlib import Path

import pytest

from fedjax_avail import _provenance
from fedjax_avail._provenance import code, git_commit, source_digest


def _has_git() -> bool:
    try:
        return subprocess.run(["git", "--version"], capture_output=True).returncode == 0
    except OSError:
        return False


needs_git = pytest.mark.skipif(not _has_git(), reason="needs git")


def _git(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), "-c", "user.name=t", "-c", "user.email=t@t",
                           "-c", "commit.gpgsign=false", *args], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
    (tmp_path / ".gitignore").write_text(".venv/\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "one")
    return tmp_path


@needs_git
def test_a_tracked_file_reports_its_checkouts_commit_and_dirt(repo):
    head = _git(repo, "rev-parse", "HEAD")
    assert git_commit(repo / "pkg" / "mod.py") == head
    (repo / ".gitignore").write_text(".venv/\nbuild/\n")  # a change outside the package
    assert git_commit(repo / "pkg" / "mod.py") == head
    (repo / "pkg" / "mod.py").write_text("x = 2\n")
    assert git_commit(repo / "pkg" / "mod.py") == head + "-dirty"


@needs_git
def test_an_untracked_copy_inside_another_checkout_reports_no_commit(repo):
    # e.g. the package installed into a virtual environment inside some repository
    site = repo / ".venv" / "lib" / "site-packages" / "pkg"
    site.mkdir(parents=True)
    (site / "mod.py").write_text("x = 1\n")
    (repo / "pkg" / "new.py").write_text("y = 1\n")  # not yet added
    assert git_commit(site / "mod.py") is None
    assert git_commit(repo / "pkg" / "new.py") is None


def test_outside_any_checkout_there_is_no_commit(tmp_path):
    (tmp_path / "mod.py").write_text("x = 1\n")
    assert git_commit(tmp_path / "mod.py") is None


def test_without_git_there_is_no_commit(tmp_path, monkeypatch):
    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    assert git_commit() is None


def test_the_source_digest_is_the_code_files_and_nothing_else(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("x = 1\n")
    (package / "sub" / "b.py").write_text("y = 1\n")
    first = source_digest(package)
    (package / "notes.txt").write_text("not code\n")
    (tmp_path / "outside.py").write_text("z = 1\n")
    assert source_digest(package) == first
    (package / "sub" / "b.py").write_text("y = 2\n")  # an edit
    assert source_digest(package) != first
    (package / "sub" / "b.py").write_text("y = 1\n")
    (package / "c.py").write_text("")  # a new module, even an empty one
    assert source_digest(package) != first
    (package / "c.py").unlink()
    (package / "sub" / "b.py").rename(package / "b.py")  # a move
    assert source_digest(package) != first


def test_the_code_is_the_package_as_loaded():
    import fedjax_avail

    assert code()["fedjax_avail_version"] == fedjax_avail.__version__
    assert code()["fedjax_avail_source"] == source_digest() == _provenance._LOADED
    assert set(code()) == {"fedjax_avail_version", "fedjax_avail_source", "fedjax_avail_commit"}
