"""Drop-outs: a selected client fails to report its update."""

from __future__ import annotations

import dataclasses

import jax

from fedjax_avail.availability._process import AvailabilityProcess, State

_REPORTS_STREAM = 0x5D0  # folded into the availability key; the wrapped process keeps its own


@dataclasses.dataclass(frozen=True, eq=False)
class Dropout:
    """Wraps a process: availability is unchanged, but each client that is selected fails to
    report its update with probability q, independently per round.

    The engine asks ``reports(available, t, key) -> [N] bool`` each round and the algorithms drop
    the updates of selected clients that do not report (``algorithms.reported``): they do not
    count as participants. The wrapped process sees the same keys as it would unwrapped, so a run
    with and without drop-outs shares its availability masks. Use it as the outermost wrapper.
    """

    process: AvailabilityProcess
    q: float

    def __post_init__(self):
        if not 0.0 <= self.q <= 1.0:
            raise ValueError(f"q must be a probability in [0, 1], got {self.q!r}")

    def init(self, key: jax.Array, num_clients: int) -> State:
        return self.process.init(key, num_clients)

    def step(self, state: State, t: jax.Array, key: jax.Array) -> tuple[State, jax.Array]:
        return self.process.step(state, t, key)

    def reports(self, available: jax.Array, t: jax.Array, key: jax.Array) -> jax.Array:
        del t
        key = jax.random.fold_in(key, _REPORTS_STREAM)
        return jax.random.uniform(key, available.shape) >= self.q


def dropout(process: AvailabilityProcess, q: float) -> Dropout:
    """``process`` with drop-out probability ``q`` for selected clients (see :class:`Dropout`)."""
    return Dropout(process, q)
