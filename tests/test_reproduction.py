"""Real MNIST, fedlaavg-mnist shortened (E = 50, 600 rounds): the paper's Fig. 4 behaviour.

FedAvg's training loss oscillates with period 2E (P:L405) while FedLaAvg's decreases smoothly
towards sequential SGD's. Measured on this setting (seed 0): FedAvg period 102 rounds and
amplitude 0.446 over the last 2E rounds, FedLaAvg amplitude 0.021, final losses FedAvg 0.493,
FedLaAvg 0.416, sequential SGD 0.246 (gap 0.271 at round 300, 0.170 at 600).
"""

import numpy as np
import pytest
from conftest import MNIST_DIR

from fedjax_avail import experiments

E = 50


@pytest.fixture(scope="module")
def outcome(mnist):
    del mnist  # ensures the data is there, with a clear failure otherwise
    overrides = dict(E=E, rounds=600, eval_every=10, data_dir=str(MNIST_DIR),
                     algorithms=("fedavg", "fedlaavg", "sequential"))
    return experiments.run(experiments.FEDLAAVG_MNIST, overrides, out_dir=None, progress=False)


@pytest.mark.slow
def test_fedavg_oscillates_with_period_2E(outcome):
    fedavg = outcome.histories["fedavg"]
    period = experiments.dominant_period(fedavg, skip=2 * E)
    assert 0.9 * 2 * E <= period <= 1.1 * 2 * E


@pytest.mark.slow
def test_fedlaavg_is_smooth_and_approaches_sequential_sgd(outcome):
    h = {name: outcome.histories[name] for name in ("fedavg", "fedlaavg", "sequential")}
    amp_avg = experiments.oscillation_amplitude(h["fedavg"], 2 * E)
    amp_la = experiments.oscillation_amplitude(h["fedlaavg"], 2 * E)
    assert amp_avg > 5 * amp_la
    # Smooth: after two periods (the start-up, when stored updates are still zeros) FedLaAvg's
    # loss never rises between evaluations, while FedAvg's rises by more than 0.1 every period.
    la, avg = h["fedlaavg"], h["fedavg"]
    assert np.all(np.diff(la["train_loss"][la["round"] >= 4 * E]) <= 1e-3)
    assert np.diff(avg["train_loss"][avg["round"] >= 4 * E]).max() > 0.1
    # Towards sequential SGD: the gap shrinks, and ends below FedAvg's loss.
    seq = h["sequential"]["train_loss"]
    gap = la["train_loss"] - seq
    assert gap[-1] < 0.75 * gap[la["round"] == 300][0]  # measured: 0.170 vs 0.271
    assert la["train_loss"][-1] < h["fedavg"]["train_loss"][-1]
