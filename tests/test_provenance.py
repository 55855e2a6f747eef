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


def test_the_code_is_the_package_as_loaded(tmp_path):
    import fedjax_avail

    assert code()["fedjax_avail_version"] == fedjax_avail.__version__
    # the digest taken at import is that of the files the package was loaded from
    assert _provenance._LOADED == source_digest(Path(fedjax_avail.__file__).parent)
    assert _provenance._LOADED != source_digest(tmp_path)  # an empty folder: another digest
    assert set(code()) == {"fedjax_avail_version", "fedjax_avail_source", "fedjax_avail_commit"}


def _setup_py():
    """The project's setup.py as a module (its setup() call runs only as __main__)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("setup_py", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ROOT = Path(__file__).resolve().parent.parent


@needs_git
def test_the_build_records_the_commit_it_was_built_from(repo, tmp_path):
    (repo / "fedjax_avail").mkdir()
    (repo / "fedjax_avail" / "__init__.py").write_text("")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "two")
    source_commit = _setup_py().source_commit
    head = _git(repo, "rev-parse", "HEAD")
    assert source_commit(repo) == head
    (repo / "fedjax_avail" / "__init__.py").write_text("x = 1\n")
    assert source_commit(repo) == head + "-dirty"
    assert source_commit(tmp_path / "nowhere") is None  # an sdist: no checkout


def test_an_installed_copy_reads_its_build_record(tmp_path, monkeypatch):
    record = tmp_path / "_build.json"
    assert _provenance.built_commit(record) is None  # none written (an editable install)
    record.write_text('{"git_commit": "abc123"}\n')
    assert _provenance.built_commit(record) == "abc123"
    record.write_text("{not json")
    assert _provenance.built_commit(record) is None
    record.write_text('{"git_commit": "abc123"}\n')
    monkeypatch.setattr(_provenance, "BUILD_RECORD", record)
    monkeypatch.setattr(_provenance, "git_commit", lambda: None)  # no checkout tracks it
    assert _provenance.commit() == "abc123" == _provenance.provenance()["git_commit"]


@needs_git
def test_the_package_under_test_names_a_commit_of_this_checkout():
    # In CI the package is installed with `pip install '.[test]'` from a clean clone: no
    # checkout tracks the installed copy, so this checks the commit recorded at build time.
    try:
        _git(ROOT, "rev-parse", "HEAD")
    except subprocess.CalledProcessError:
        pytest.skip("the tests do not sit in a git checkout")
    named = _provenance.provenance()["git_commit"]
    assert named is not None, "the installed package names no commit"
    done = subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor",
                           named.removesuffix("-dirty"), "HEAD"], capture_output=True)
    assert done.returncode == 0, f"{named} is not a commit of {ROOT} at or before HEAD"
