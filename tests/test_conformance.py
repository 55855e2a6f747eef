"""One battery every algorithm must pass. Adding an algorithm adds one line to ALGORITHMS."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest

import fedjax_avail as fa
from fedjax_avail.local import local_sgd

KW = dict(clients_per_round=4, local_steps=3, batch_size=2)
ALGORITHMS = {
    "fedsgd": lambda: fa.algorithms.FedSGD(clients_per_round=4, batch_size=2, client_lr=0.02),
    "fedavg": lambda: fa.algorithms.FedAvg(**KW, client_lr=0.02),
    "fedprox": lambda: fa.algorithms.FedProx(**KW, client_lr=0.02, mu=0.5),
    "fedadam": lambda: fa.algorithms.FedAdam(**KW, client_lr=0.02, server_lr=0.01),
    "fedlaavg": lambda: fa.algorithms.FedLaAvg(**KW, client_lr=0.02),
    "mifa": lambda: fa.algorithms.MIFA(**KW, client_lr=0.02, lr_decay=False,
                                   start="immediately"),
    "mifa_after_all_seen": lambda: fa.algorithms.MIFA(**KW, client_lr=0.02, lr_decay=False),
    "sequential": lambda: fa.algorithms.SequentialSGD(**KW, lr=0.004),
    "kasync": lambda: fa.algorithms.KAsyncSGD(clients_per_round=4, batch_size=2, client_lr=0.02),
    "twafl": lambda: fa.algorithms.TWAFL(clients_per_round=4, batch_size=2, client_lr=0.02),
    "sasgd": lambda: fa.algorithms.SASGD(clients_per_round=4, batch_size=2, client_lr=0.05),
    "gsgm": lambda: fa.algorithms.GSGM(clients_per_round=4, batch_size=2, client_lr=0.02),
    "wkafl": lambda: fa.algorithms.WKAFL(clients_per_round=4, batch_size=2, client_lr=0.02,
                                         switch_round=100),
    "fedbuff": lambda: fa.algorithms.FedBuff(buffer_size=4, local_steps=3, batch_size=2,
                                             client_lr=0.02, concurrency=6,
                                             durations=fa.clock.Constant(1.0)),
    "fedasync": lambda: fa.algorithms.FedAsync(local_steps=3, batch_size=2, client_lr=0.02,
                                               mixing=0.3),
}


@pytest.fixture(params=sorted(ALGORITHMS))
def algorithm(request):
    return ALGORITHMS[request.param]()


def test_round_keeps_state_structure_and_traces_once(algorithm):
    fa.testing.check_traces_once(algorithm)


def test_bit_identical_for_a_seed(algorithm):
    fa.testing.check_deterministic(algorithm)


def test_converges_on_a_quadratic(algorithm):
    if isinstance(algorithm, fa.algorithms.FedAsync):  # one client an update: it fluctuates
        fa.testing.check_converges(algorithm, rounds=1000, average_last=5)
    else:
        fa.testing.check_converges(algorithm)


def test_cohort_compute_does_not_grow_with_N(algorithm):
    fa.testing.check_cohort_compute(algorithm)


# The battery must be able to fail: each broken algorithm below trips exactly its check.


@dataclasses.dataclass(frozen=True)
class _Broken(fa.algorithms.FedAvg):
    flaw: str = ""

    def round(self, state, inputs, problem):
        if self.flaw == "trains_everyone":
            inputs = inputs._replace(available=jnp.ones_like(inputs.available))
            every = jnp.arange(inputs.available.shape[0])
            deltas = local_sgd(problem, state.params, every, inputs.key, steps=self.local_steps,
                               batch_size=self.batch_size, lr=self.client_lr)
            nudge = 1e-30 * jnp.mean(deltas)
            state = state._replace(params=jax.tree.map(lambda p: p + nudge, state.params))
        new, metrics = super().round(state, inputs, problem)
        if self.flaw == "ignores_key":  # and availability: the seed changes nothing
            fixed = inputs._replace(key=jax.random.PRNGKey(0),
                                    available=jnp.ones_like(inputs.available))
            new, metrics = super().round(state, fixed, problem)
        if self.flaw == "changes_dtype":
            new = new._replace(params=new.params.astype(jnp.bfloat16))
        if self.flaw == "never_moves":
            new = new._replace(params=state.params)
        return new, metrics


@pytest.mark.parametrize("flaw, check, message", [
    ("changes_dtype", fa.testing.check_traces_once, "dtypes changed"),
    ("ignores_key", fa.testing.check_deterministic, "ignores its key"),
    ("never_moves", fa.testing.check_converges, "not at the optimum"),
    ("trains_everyone", fa.testing.check_cohort_compute, "per extra client"),
])
def test_the_battery_catches_a_broken_algorithm(flaw, check, message):
    broken = _Broken(clients_per_round=4, local_steps=3, batch_size=2, client_lr=0.02, flaw=flaw)
    with pytest.raises(AssertionError, match=message):
        check(broken)
