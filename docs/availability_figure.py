"""Draws docs/availability.png: four processes over 100 clients and 96 rounds (black = available).

Run from the repository root: ``python docs/availability_figure.py``.
"""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import fedjax_avail as fa  # noqa: E402

labels = np.repeat(np.arange(10), 10)
starts = np.random.default_rng(0).integers(0, 24, 100).astype(np.int32)
processes = {
    "diurnal (D=1, E=10)": fa.availability.diurnal(labels, D=1, E=10),
    "label-correlated Bernoulli (0.05-0.45)": fa.availability.Bernoulli.label_correlated(
        labels, 0.05, 0.45, max_label=9
    ),
    "Markov (p_on=1/30, p_off=0.1)": fa.availability.Markov(p_on=1 / 30, p_off=0.1),
    "HourOfDay (6 h, 2 rounds/h)": fa.availability.HourOfDay(starts, hours=6, rounds_per_hour=2),
}
fig, axes = plt.subplots(1, len(processes), figsize=(16, 3.6))
for ax, (name, process) in zip(axes, processes.items(), strict=True):
    masks = fa.availability.sample(process, 100, 96, seed=0)
    e = fa.availability.minimal_availability(process, 100, 96)
    ax.imshow(masks.T, aspect="auto", cmap="Greys", interpolation="nearest")
    ax.set(title=f"{name}\nminimal availability E = {e}", xlabel="round", ylabel="client")
fig.tight_layout()
fig.savefig("docs/availability.png", dpi=100)
