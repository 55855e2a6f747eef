"""The list of recorded results: each folder under `docs/results/`, the command that wrote it
and where, from its `config.json`'s provenance."""

from __future__ import annotations

import json
import shlex

from common import GPU_BY_DATE, RESULTS, table

OUTPUT_OPTIONS = {"--out", "--no-progress", "--no-checkpoint", "--overwrite"}


def _command(argv: list[str]) -> str:
    """`fedjax-avail run ...` without the output options (where it wrote is not the setting)."""
    words, skip = ["fedjax-avail"], False
    for word in argv[1:]:
        if skip:
            skip = False
        elif word in OUTPUT_OPTIONS:
            skip = word == "--out"
        else:
            words.append(word)
    return shlex.join(words)


def index() -> str:
    """One row a recorded run: its folder, command, machine, versions and time."""
    body = []
    for config in sorted(RESULTS.rglob("config.json")):
        folder = config.parent
        if (folder.parent / "config.json").exists() and folder.parent != RESULTS:
            continue  # a sweep's panel: its sweep's row names it
        p = json.loads(config.read_text())["provenance"]
        where = GPU_BY_DATE[p["utc_time"][:10]] if p["jax_backend"] == "gpu" else "CPU"
        commit = (p["git_commit"] or "")[:12] or "(an installed copy)"
        body.append([f"`{folder.relative_to(RESULTS)}/`", f"`{_command(p['command'])}`",
                     f"{where}, JAX {p['versions']['jax']}", commit, p["utc_time"][:16]])
    return table(["folder", "command", "machine", "commit", "UTC"], body)
