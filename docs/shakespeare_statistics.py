"""Writes docs/results/shakespeare-leaf/summary.json: the clients and client sizes of
``fa.data.load_shakespeare()`` beside LEAF's published statistics (needs the ``shakespeare``
extra). Run from the repository root: ``python docs/shakespeare_statistics.py``.
"""

import json
from pathlib import Path

import numpy as np

import fedjax_avail as fa
from fedjax_avail._io import atomic_write_text
from fedjax_avail._provenance import provenance
from fedjax_avail.data._shakespeare import LEAF_STATS

OUT = Path(__file__).resolve().parent / "results" / "shakespeare-leaf" / "summary.json"

data = fa.data.load_shakespeare()
sizes = data.train.counts + np.bincount(data.test["client"], minlength=data.train.num_clients)
summary = {
    "ours": {"clients": int(data.train.num_clients), "examples": int(sizes.sum()),
             "mean": float(sizes.mean()), "std": float(sizes.std()),
             "median": float(np.median(sizes)), "min": int(sizes.min()), "max": int(sizes.max()),
             "plays": len({play for play, _ in data.clients}),
             "train_examples": int(data.train.num_examples),
             "test_examples": int(len(data.test["y"])), "oov_share": data.oov_share},
    "leaf": LEAF_STATS,
    "settings": {"seq_len": 80, "test_fraction": 0.1, "min_examples": 1},
    "provenance": provenance(),
}
OUT.parent.mkdir(parents=True, exist_ok=True)
atomic_write_text(OUT, json.dumps(summary, indent=2) + "\n")
print(json.dumps(summary["ours"], indent=2))
