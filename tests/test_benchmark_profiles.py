"""The benchmarks' operation profiles (``benchmarks/_common.py``) count what ran.

``scaling.py --trace`` lists the costliest operations of profiled ``fa.simulate`` rounds, whose
definitions come from the program the engine compiles (``simulate_programs`` wraps its compile
step: a renamed step would leave the lists silently empty, and the first test would fail), and
``profile_cnn_step.py --trace`` those of a compiled call."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import REPO

import fedjax_avail as fa

sys.path.insert(0, str(REPO / "benchmarks"))
from _common import hlo_operations, simulate_programs, traced_operations  # noqa: E402


def test_simulate_programs_sees_the_round_program():
    fd = fa.testing.point_clients(np.linspace(0.0, 1.0, 20)[:, None])
    algorithm = fa.algorithms.FedAvg(clients_per_round=4, local_steps=3, batch_size=2,
                                     client_lr=0.1)

    def run() -> fa.Result:
        return fa.simulate(fa.testing.quadratic_task(), fd, algorithm,
                           fa.availability.AlwaysOn(), rounds=2)

    with simulate_programs() as definitions:
        run()
    assert definitions and len({module for module, _ in definitions.values()}) == 1
    ops = traced_operations(run, definitions, per=2, top=5)
    assert len(ops) == 5 and all(op["hlo"] == definitions[op["op"]][1] for op in ops)


@pytest.mark.parametrize("per", [1, 37])
def test_traced_operations_count_calls(per):
    """An operation inside a loop of 37 iterations runs 37 times a call."""
    def loop(x, w):
        return jax.lax.fori_loop(0, 37, lambda i, y: jnp.tanh(y @ w + i), x)

    compiled = jax.jit(loop).lower(jnp.ones((64, 64)), jnp.eye(64)).compile()
    ops = traced_operations(lambda: compiled(jnp.ones((64, 64)), jnp.eye(64)),
                            hlo_operations(compiled.as_text()), per=per, top=10)
    assert ops and all(op["ms"] >= 0 for op in ops)
    assert any(op["calls"] == 37 / per and "[64,64]" in op["hlo"] for op in ops), ops
