"""Deterministic cyclic availability: groups take turns (FedLaAvg's diurnal MNIST pattern)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail._checks import Annotated, Count, Range, check_fields, is_int
from fedjax_avail.availability._process import State


@dataclasses.dataclass(frozen=True, eq=False)
class Periodic:
    """Groups of clients take turns: at step t, group ``(t // period) % G`` is available.

    Args:
      groups: ``[N]`` ints in ``0..G-1`` (or bools, read as 0/1), client i's group
        (G = ``max(groups) + 1``).
      period: steps each group stays available, an integer >= 1.

    Example (FedLaAvg Fig. 2, D = 1, E = 100): ``Periodic(groups=(labels >= 1), period=100)``
    makes the digit-0 clients available in rounds 0-99, the others in 100-199, and so on.
    """

    groups: Annotated[np.ndarray, Range(0, 2**30, bools=True)]  # G fits the device's int32
    period: Count

    def __post_init__(self):
        check_fields(self)
        groups = np.asarray(self.groups)
        integer = np.issubdtype(groups.dtype, np.integer) or groups.dtype == bool
        if groups.ndim != 1 or groups.size == 0 or not integer:
            raise ValueError(f"groups must be a non-empty [N] integer (or bool) vector, got "
                             f"{groups.dtype} {groups.shape}")

    @property
    def num_groups(self) -> int:
        return int(np.max(self.groups)) + 1

    def init(self, key: jax.Array, num_clients: int) -> State:
        del key
        if len(self.groups) != num_clients:
            raise ValueError(f"groups has {len(self.groups)} entries but there are {num_clients} "
                             "clients")
        return jnp.asarray(np.asarray(self.groups).astype(np.int32))

    def step(self, state: State, t: jax.Array, key: jax.Array) -> tuple[State, jax.Array]:
        del key
        return state, state == (t // self.period) % self.num_groups

    def skip(self, state: State, t: jax.Array, k: jax.Array, key: jax.Array) -> State:
        del t, k, key  # a function of the slot
        return state


def diurnal(labels: np.ndarray, D: int, E: int) -> Periodic:  # noqa: N803 (the paper's names)
    """FedLaAvg's MNIST availability (Sec. 6.1.3, P:L373): two groups alternate every E rounds.

    Clients holding digits ``< D`` are available for E rounds (starting at round 0), then the
    remaining clients for the next E rounds; the period is 2E.

    Args:
      labels: ``[N]`` each client's label (``FederatedData.client_labels()``).
      D: digits ``0..D-1`` form the first group; an integer, 1 <= D <= max(labels).
      E: rounds per phase, an integer >= 1.
    """
    labels = np.asarray(labels)
    if not is_int(D) or not 1 <= D <= labels.max():
        raise ValueError(f"D must be an integer in [1, {labels.max()}] (both groups non-empty), "
                         f"got {D!r}")
    if not is_int(E) or E < 1:
        raise ValueError(f"E must be an integer >= 1, got {E!r}")
    return Periodic(groups=(labels >= D).astype(np.int32), period=int(E))
