"""The masks an availability process yields, as :func:`fedjax_avail.simulate` sees them."""

from __future__ import annotations

import jax
import numpy as np

from fedjax_avail import _keys
from fedjax_avail._checks import Count, Seed, checked
from fedjax_avail.availability._process import AvailabilityProcess


@checked
def sample(
    process: AvailabilityProcess, num_clients: Count, steps: Count, seed: Seed = 0
) -> np.ndarray:
    """``[steps, N]`` bool: the masks of rounds ``0..steps-1`` in ``simulate(..., seed=seed)``."""
    keys = _keys.run_keys(seed)
    state = process.init(keys.availability_init, num_clients)

    def body(state, t):
        return process.step(state, t, _keys.availability_key(keys, t))

    _, masks = jax.jit(lambda s: jax.lax.scan(body, s, jax.numpy.arange(steps)))(state)
    return np.asarray(masks)
