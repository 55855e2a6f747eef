"""How one seed becomes every random stream of a run.

Each round's keys are ``fold_in(stream, round)``, so a round's randomness depends on the seed and
the round index only: never on ``eval_every``, chunking or the number of devices.
"""

from __future__ import annotations

from typing import NamedTuple

import jax


class RunKeys(NamedTuple):
    params: jax.Array  # model initialisation
    availability_init: jax.Array
    availability: jax.Array  # folded with the round index
    algorithm: jax.Array  # folded with the round index


def run_keys(seed: int) -> RunKeys:
    return RunKeys(*jax.random.split(jax.random.PRNGKey(seed), 4))


def availability_key(keys: RunKeys, t: jax.Array) -> jax.Array:
    return jax.random.fold_in(keys.availability, t)


def algorithm_key(keys: RunKeys, t: jax.Array) -> jax.Array:
    return jax.random.fold_in(keys.algorithm, t)
