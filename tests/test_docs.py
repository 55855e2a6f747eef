"""Every command the documentation shows is run here, so the documentation stays true.

Commands are collected in document order from README.md, CONTRIBUTING.md, docs/*.md,
benchmarks/README.md and the notebooks' text, then run in one scratch directory per document
(so ``describe ... > my.toml`` feeds a later ``--config my.toml``):

* ``fedjax-avail run`` of the default offline experiment runs for real on 10 rounds; every other
  ``run`` is a ``--dry-run`` (settings, data, algorithms and memory checked, nothing trained),
  once per test session where it reads and writes no file (``--out``, ``--resume``,
  ``--config``, ``>``): ``docs/results/README.md`` repeats most of ``docs/reproducing.md``'s;
  experiments whose data these machines cannot fetch (Sentiment140) must fail with the one-line
  "not prepared" error the documentation promises;
* ``list``, ``describe``, ``compare``, ``--help`` run as written;
* ``python benchmarks/X.py ARGS`` parses ARGS with the script's own parser; other ``python``
  scripts run as written.

The documentation site (``mkdocs build --strict``: every link and anchor checked, the API
reference generated from the docstrings) is built here too.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
import types
from pathlib import Path

import jax
import pytest
from conftest import MNIST_DIR, REPO

from fedjax_avail import cli

pytestmark = pytest.mark.slow  # a long tier: `pytest -m slow` (.ci/run runs it)

SOURCES = [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "benchmarks" / "README.md",
           *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "notebooks").glob("*.ipynb"))]
PREFIXES = ("fedjax-avail ", "python benchmarks/", "python docs/", "python -m fedjax_avail")
SETUP = ("python3.11 -m venv", "pip install", "pytest", "bash .ci/run")


def _text(path: Path) -> str:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return path.read_text()


def commands(path: Path) -> list[str]:
    """The commands of a document, in order: lines of fenced blocks and inline code spans."""
    found = []
    for match in re.finditer(r"```[a-z]*\n(.*?)```|`([^`\n]+)`", _text(path), re.S):
        if match.group(1) is not None:
            lines = match.group(1).replace("\\\n", " ").splitlines()
        else:
            lines = [match.group(2)]
        for line in lines:
            line = re.split(r"\s+#\s", line)[0].strip()
            placeholder = re.search(r"\b[A-Z]{3,}\b", line)  # fedjax-avail describe NAME
            if line.startswith(PREFIXES) and not line.startswith("fedjax-avail: ") and not (
                    placeholder):
                found.append(line)
    return found


def _needs_unfetchable_data(name: str) -> bool:
    return "sentiment140" in name


# Dry runs that read and write no file, already checked in this session (by their arguments).
_DRY_RUNS_DONE: set[tuple[str, ...]] = set()
_STATEFUL = {"--out", "--resume", "--overwrite", "--config"}


def _run_cli(words: list[str], capsys) -> None:
    args, redirect = words[1:], None
    if ">" in args:
        at = args.index(">")
        args, redirect = args[:at], args[at + 1]
    expected = 0
    if args and args[0] == "run" and not {"-h", "--help"} & set(args):
        name = args[1] if len(args) > 1 and not args[1].startswith("-") else "digits-diurnal"
        if "--devices" in args:  # JAX fixes its CPU devices when it starts: test_cli runs
            args = [*args, "--dry-run"]  # --devices in a fresh process
            asked = int(args[args.index("--devices") + 1])
            if jax.default_backend() != "cpu" and len(jax.devices()) < asked:
                return  # as many accelerators as asked for, which this machine lacks
        elif name == "digits-diurnal":
            args = [*args, "--set", "rounds=10", "--set", "eval_every=5", "--no-progress"]
            if not {"--resume", "--overwrite"} & set(args):  # each an example of its own:
                args.append("--overwrite")  # it may write where an earlier example wrote
        elif _needs_unfetchable_data(name):
            args, expected = [*args, "--dry-run", "--set", "download=false"], 2
        else:
            args = [*args, "--dry-run"]
    alone = "--dry-run" in args and redirect is None and not _STATEFUL & set(args)
    if alone and tuple(args) in _DRY_RUNS_DONE:
        return
    code = cli.main(args)
    if alone and code == expected:
        _DRY_RUNS_DONE.add(tuple(args))
    out = capsys.readouterr()
    if redirect:
        Path(redirect).write_text(out.out)
    assert code == expected, f"{shlex.join(words)}: exit {code}\n{out.err}"
    if expected == 2:
        assert "is not prepared in" in out.err and out.err.count("\n") == 1, out.err


def _run_python(words: list[str]) -> None:
    script = words[1]
    if script.startswith("benchmarks/"):
        sys.path.insert(0, str(REPO / "benchmarks"))
        try:
            module = importlib.import_module(Path(script).stem)
            module.parse_args(words[2:])  # the documented arguments are the script's own
        finally:
            sys.path.remove(str(REPO / "benchmarks"))
        return
    if script == "docs/generate.py":  # it rewrites the repository's docs: check them instead
        done = subprocess.run([sys.executable, str(REPO / script), "--check"],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr
        return
    (Path.cwd() / "docs").mkdir(exist_ok=True)
    runpy.run_path(str(REPO / script), run_name="__main__")


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_documented_command_works(source, tmp_path, monkeypatch, capsys, mnist):
    del mnist
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FEDJAX_AVAIL_MNIST_DIR", str(MNIST_DIR))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    for command in commands(source):
        words = shlex.split(command)
        if command.startswith("python -m fedjax_avail"):
            words = ["fedjax-avail", *words[3:]]
        if words[0] == "fedjax-avail":
            _run_cli(words, capsys)
        else:
            _run_python(words)


def test_the_commands_are_found():
    readme = commands(REPO / "README.md")
    assert "fedjax-avail list" in readme
    assert sum(c.startswith("fedjax-avail run ") for c in readme) >= 5
    guide = commands(REPO / "docs" / "guide" / "experiments.md")
    assert sum(c.startswith("fedjax-avail run ") for c in guide) >= 10
    reproducing = commands(REPO / "docs" / "reproducing.md")
    from fedjax_avail import experiments

    for name in experiments.REGISTRY:  # every named experiment is in the reproduction guide
        assert any(f" {name}" in f"{c} " for c in reproducing) or name in {
            "digits-diurnal", "fedlaavg-sentiment140", "availability-mnist",
            "availability-sweep-mnist", "wkafl-mnist", "async-mnist"}, name


def test_readme_opens_with_the_two_setup_commands_ci_runs():
    readme = (REPO / "README.md").read_text()
    first_block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1)
    lines = [line for line in first_block.splitlines() if line and not line.startswith("#")]
    assert len(lines) == 2
    assert lines[0].startswith("python3.11 -m venv") and lines[0].endswith("fedjax-avail run")
    assert lines[1].startswith("python3.11 -m venv") and lines[1].endswith("pytest -q")
    assert lines[1] in (REPO / ".ci" / "run").read_text()


def test_the_site_builds_with_every_link_and_the_api_reference(tmp_path):
    """`mkdocs build --strict`: a broken link, anchor or docstring reference fails it."""
    pytest.importorskip("mkdocs")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
                           str(REPO / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    import fedjax_avail as fa

    page = (tmp_path / "site" / "api" / "index.html").read_text()
    for module in fa.__all__:
        if isinstance(getattr(fa, module), types.ModuleType) and not module.startswith("_"):
            assert f'id="fedjax_avail.{module}"' in page, module
    assert "FedLaAvg" in page and "P:L283-302" in page  # docstrings with the paper's lines
    home = (tmp_path / "site" / "index.html").read_text()
    assert "fedjax_avail" in home and 'href="guide/use/"' in home  # the README, its links


class _Tracker:
    """What the callbacks example logs to (any object with `.log(dict, step=)`)."""

    def __init__(self):
        self.logged = []

    def log(self, values, step):
        self.logged.append((step, values))


@pytest.mark.parametrize("source", [p for p in SOURCES if p.suffix == ".md" and "```python"
                                    in p.read_text()], ids=lambda p: str(p.relative_to(REPO)))
def test_every_python_block_runs(source, tmp_path, monkeypatch, mnist):
    """A document's Python blocks run in order in one namespace (a later block uses an earlier
    one's names), on the real MNIST files and 20 rounds instead of the shown 2000."""
    del mnist
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    scope = {"tracker": _Tracker()}
    for block in re.findall(r"```python\n(.*?)```", source.read_text(), re.S):
        code = block.replace('"path/to/mnist"', repr(str(MNIST_DIR))).replace(
            "rounds=2000", "rounds=20")
        exec(compile(code, str(source), "exec"), scope)  # noqa: S102 (the document's code)
    if "fa.simulate(" in source.read_text():  # a training example left its result
        assert "result" in scope
