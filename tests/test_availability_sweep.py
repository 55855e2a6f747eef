"""The availability sweep: every process reaches the stated mean availability."""

import numpy as np
import pytest
from conftest import MNIST_DIR

from fedjax_avail import availability, experiments
from fedjax_avail.experiments._availability_sweep import PROCESSES

pytestmark = pytest.mark.slow  # a long tier: `pytest -m slow` (.ci/run runs it)


@pytest.mark.parametrize("name", PROCESSES)
def test_each_process_has_the_mean_availability(name, digits):
    import fedjax_avail as fa

    train, _ = digits
    fd = fa.data.one_label_per_client(train["x"], train["y"], 200, seed=0)
    config = experiments.AVAILABILITY_MNIST.config({"process": name})
    process = experiments._availability_sweep.make_process(config, fd)
    steps = 1200
    masks = availability.sample(process, fd.num_clients, steps, seed=1)
    if name in ("periodic", "hour-of-day"):
        # 1200 steps = whole periods of the deterministic patterns (4 x 25, 24 x 5 rounds).
        assert masks.mean() == 0.25, name
        return
    # Random processes: within 5 standard errors of the mean of N x T Bernoulli(0.25) draws;
    # a Markov chain's draws are correlated (lag-one correlation rho = 1 - p_on - p_off), which
    # multiplies the variance by (1 + rho) / (1 - rho).
    rho = 0.0
    if name == "markov":
        p_off = config["markov_p_off"]
        rho = 1 - p_off - p_off * 0.25 / 0.75
    variance = 0.25 * 0.75 / masks.size * (1 + rho) / (1 - rho)
    if name == "label-correlated":  # p_i depends on the label: the mean is over the clients' p_i
        expected = float(np.mean(process.p))
        assert expected == pytest.approx(0.25, abs=0.01)
    else:
        expected = 0.25
    assert abs(masks.mean() - expected) < 5 * np.sqrt(variance), name


def test_bad_process_name_is_a_clear_error(digits):
    import fedjax_avail as fa

    fd = fa.data.iid(digits[0]["x"], digits[0]["y"], 10)
    with pytest.raises(ValueError, match="setting process must be one of .*'markov'"):
        experiments.AVAILABILITY_MNIST.config({"process": "sometimes"})
    config = {**experiments.AVAILABILITY_MNIST.config(), "process": "sometimes"}
    with pytest.raises(ValueError, match="process must be one of"):
        experiments._availability_sweep.make_process(config, fd)


def test_sweep_smoke(tmp_path, mnist):
    del mnist
    small = dict(num_clients=100, clients_per_round=10, rounds=3, eval_every=3,
                 data_dir=str(MNIST_DIR), algorithms=("fedavg", "fedlaavg"))
    outcomes = experiments.run_sweep(experiments.AVAILABILITY_SWEEP_MNIST, small, tmp_path,
                                     progress=False)
    assert list(outcomes) == list(PROCESSES)
    assert all(r["status"] == "ok" for o in outcomes.values() for r in o.summary)
    assert (tmp_path / "grid.png").exists()
    np.testing.assert_array_equal(outcomes["markov"].histories["fedavg"]["round"], [0, 3])
