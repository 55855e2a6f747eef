"""Composing processes: available under all of them (AND) or under any of them (OR)."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from fedjax_avail._checks import check_fields
from fedjax_avail.availability._dropout import reports_of
from fedjax_avail.availability._process import AvailabilityProcess, State, ended, skip

_MODES = {"all": jnp.logical_and, "any": jnp.logical_or}


@dataclasses.dataclass(frozen=True, eq=False)
class Combined:
    """Combines the masks of child processes with AND (``mode="all"``) or OR (``"any"``).

    The state is the tuple of the children's states. Child j gets its own key, split
    deterministically from the parent's: ``jax.random.split(key, J)[j]`` at ``init`` and at every
    step, so the children's random streams are independent of each other and the combination is
    reproducible for a seed. Build it with :func:`all_of` or :func:`any_of`.

    Drop-outs of children (:func:`fedjax_avail.availability.dropout`) are forwarded: a selected
    client reports its update only if it reports under every child that has drop-outs.

    Args:
      processes: J >= 1 availability processes (anything with ``init`` and ``step``; combined
        processes nest).
      mode: ``"all"`` or ``"any"``.

    Raises:
      ValueError: no processes, an unknown mode (at construction).
      TypeError: a child without ``init``/``step`` (at construction).
    """

    processes: tuple[AvailabilityProcess, ...]
    mode: str = "all"
    forwards_reports = True  # its reports() are its children's (see _dropout._drops_out)

    def __post_init__(self):
        check_fields(self)
        if self.mode not in _MODES:
            raise ValueError(f"mode must be one of {tuple(_MODES)}, got {self.mode!r}")
        if not isinstance(self.processes, tuple) or len(self.processes) == 0:
            raise ValueError(f"processes must be a non-empty tuple of availability processes, "
                             f"got {self.processes!r}")

    def _keys(self, key: jax.Array) -> jax.Array:
        return jax.random.split(key, len(self.processes))

    def init(self, key: jax.Array, num_clients: int) -> State:
        return tuple(process.init(k, num_clients)
                     for process, k in zip(self.processes, self._keys(key), strict=True))

    def step(self, state: State, t: jax.Array, key: jax.Array) -> tuple[State, jax.Array]:
        stepped = [process.step(s, t, k)
                   for process, s, k in zip(self.processes, state, self._keys(key), strict=True)]
        mask = functools.reduce(_MODES[self.mode], [m for _, m in stepped])
        return tuple(s for s, _ in stepped), mask

    def skip(self, state: State, t: jax.Array, k: jax.Array, key: jax.Array) -> State:
        """Each child skips the k slots with its own key (as in ``step``)."""
        return tuple(skip(process, s, t, k, child_key) for process, s, child_key
                     in zip(self.processes, state, self._keys(key), strict=True))

    def ended(self, state: State, t: jax.Array) -> jax.Array:
        """``all_of``: when any child has ended; ``any_of``: when every child has."""
        done = jnp.stack([ended(process, s, t)
                          for process, s in zip(self.processes, state, strict=True)])
        return jnp.any(done) if self.mode == "all" else jnp.all(done)

    def reports(self, available: jax.Array, t: jax.Array, key: jax.Array) -> jax.Array | None:
        """The AND of the children's reports (each with its own key, as in ``step``)."""
        masks = [reports_of(process, available, t, k)
                 for process, k in zip(self.processes, self._keys(key), strict=True)]
        masks = [m for m in masks if m is not None]
        return functools.reduce(jnp.logical_and, masks) if masks else None


def all_of(*processes: AvailabilityProcess) -> Combined:
    """Client i is available at step t iff it is available under every process (AND).

    Example (Sentiment140 night windows, and then only with probability 0.5):
      >>> all_of(HourOfDay(start_hour, hours=8), Bernoulli(0.5))
    """
    return Combined(tuple(processes), "all")


def any_of(*processes: AvailabilityProcess) -> Combined:
    """Client i is available at step t iff it is available under at least one process (OR).

    Example (a diurnal pattern plus occasional off-phase availability):
      >>> any_of(diurnal(labels, D=1, E=100), Bernoulli(0.05))
    """
    return Combined(tuple(processes), "any")
