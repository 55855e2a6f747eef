"""Write every results table of the documentation from the committed results.

A document marks each generated part with a pair of comments::

    <!-- generated: subtrunc-table1-lr -->
    ... written by this script ...
    <!-- /generated -->

and `TABLES` names the function that writes it from `docs/results/` and `benchmarks/results/`
(`docs/tables/`). ``python docs/generate.py`` rewrites every marked part in place;
``python docs/generate.py --check`` changes nothing and exits 1 naming each part whose text
differs from what its results give (the docs test runs it, so a documented number cannot drift
from its source). ``FIGURES`` are drawn from the same results by ``python docs/generate.py``
(not compared by ``--check``: a PNG's bytes vary with the matplotlib version).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "tables"))

# docs/tables/ is put on the path above.
import asynchronous  # noqa: E402
import fedlaavg  # noqa: E402
import provenance  # noqa: E402
import shakespeare  # noqa: E402
import speed  # noqa: E402
import status  # noqa: E402
import subtrunc  # noqa: E402
import wkafl  # noqa: E402
from common import REPO  # noqa: E402

TABLES: dict[str, Callable[[], str]] = {
    # README.md
    "digits-diurnal": fedlaavg.digits_diurnal,
    "status-summary": status.summary_table,
    "signature-headline": asynchronous.signature_headline,
    "speed-headline": speed.speed_headline,
    # docs/guide/ and benchmarks/README.md
    "compile-cache": speed.compile_cache,
    "fedlaavg-end-to-end": speed.fedlaavg_end_to_end,
    "scaling-n": speed.scaling_n,
    "cohort-chunks": speed.cohort_chunks,
    "chunk-budget": speed.chunk_budget,
    "conv-groups": speed.conv_groups,
    "devices": speed.devices,
    "cpu-cores": speed.cpu_cores,
    "run-axis": speed.run_axis_cpu,
    "sweep-programs": speed.sweep_programs,
    "async-scaling": speed.async_scaling,
    "selection-scaling": speed.selection_scaling,
    "availability-overhead": speed.availability_overhead,
    "xla-cpu-options": speed.xla_cpu_options,
    "xla-cpu-options-cnn": speed.xla_cpu_options_cnn,
    "profile-cnn-step": speed.profile_cnn_step,
    "before-after": speed.before_after,
    "same-numbers": speed.same_numbers,
    "dry-run-seconds": speed.dry_run_seconds,
    "shakespeare-leaf": shakespeare.leaf_statistics,
    # docs/reproducing.md
    "status-fedlaavg": status.status_fedlaavg,
    "fedlaavg-fig4": fedlaavg.fig4,
    "fedlaavg-fig5": fedlaavg.fig5,
    "fedlaavg-small-beta": fedlaavg.small_beta,
    "fedlaavg-fedadam": fedlaavg.fedadam,
    "fedlaavg-dtype": fedlaavg.table_dtype,
    "status-wkafl": status.status_wkafl,
    "wkafl-table2-cnn": wkafl.table2_cnn,
    "wkafl-table3-cnn": wkafl.table3_cnn,
    "wkafl-table2-lr": wkafl.table2_lr,
    "wkafl-table3-lr": wkafl.table3_lr,
    "wkafl-ablation": wkafl.ablation,
    "wkafl-cnn-cpu": wkafl.cnn_cpu,
    "status-subtrunc": status.status_subtrunc,
    "subtrunc-table1-lenet": subtrunc.table1_lenet,
    "subtrunc-table1-lr": subtrunc.table1_lr,
    "subtrunc-sweeps": subtrunc.sweeps,
    "status-fedbuff": status.status_fedbuff,
    "async-mnist": asynchronous.async_mnist,
    "time-to-accuracy-skew": asynchronous.time_to_accuracy_skew,
    "time-to-accuracy-stragglers": asynchronous.time_to_accuracy_stragglers,
    "availability-sweep": fedlaavg.availability_sweep,
    "shakespeare-availability": shakespeare.availability,
    # docs/results/README.md
    "results-index": provenance.index,
}
FIGURES: dict[str, Callable[[Path], object]] = {
    "time-to-accuracy-mnist.png": asynchronous.figure_skew,
    "time-to-accuracy-stragglers-mnist.png": asynchronous.figure_stragglers,
    "shakespeare-availability.png": shakespeare.figure,
}
DOCUMENTS = [REPO / "README.md", REPO / "benchmarks" / "README.md",
             *sorted((REPO / "docs").rglob("*.md"))]
REGION = re.compile(r"(<!-- generated: ([\w.-]+) -->\n)(.*?)(<!-- /generated -->)", re.S)


def region_names(text: str) -> list[str]:
    """The names of the generated parts a document marks, in order."""
    return [m.group(2) for m in REGION.finditer(text)]


def regenerate(text: str, tables: dict[str, Callable[[], str]] = TABLES) -> tuple[str, list[str]]:
    """The text with every marked part rewritten, and the names of the parts it holds."""
    names = []

    def write(match: re.Match) -> str:
        name = match.group(2)
        if name not in tables:
            raise KeyError(f"no table named {name!r} (docs/generate.py TABLES: "
                           f"{', '.join(sorted(tables))})")
        names.append(name)
        return f"{match.group(1)}{tables[name]().rstrip()}\n{match.group(4)}"

    return REGION.sub(write, text), names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a generated part differs from its results")
    args = parser.parse_args(argv)
    stale, used = [], set()
    for path in DOCUMENTS:
        text = path.read_text()
        new, names = regenerate(text)
        used.update(names)
        if new != text:
            stale.append(path)
            if args.check:
                sys.stdout.writelines(difflib.unified_diff(
                    text.splitlines(True), new.splitlines(True), str(path), "regenerated"))
            else:
                path.write_text(new)
    if not args.check:
        for name, draw in FIGURES.items():
            draw(REPO / "docs" / name)
    unused = sorted(set(TABLES) - used)
    if unused:
        print(f"tables no document shows: {', '.join(unused)}", file=sys.stderr)
        return 1
    if args.check and stale:
        print(f"generated parts differ from their results in: "
              f"{', '.join(str(p.relative_to(REPO)) for p in stale)}; "
              "run `python docs/generate.py`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
