"""Hour-of-day windows: each client is available during its own hours of every simulated day."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail._checks import Annotated, Count, Range, check_fields, is_int
from fedjax_avail.availability._process import State

HOURS_PER_DAY = 24


@dataclasses.dataclass(frozen=True, eq=False)
class HourOfDay:
    """Client i is available during ``hours`` consecutive hours of each day, from its own start.

    A simulated day is ``24 * rounds_per_hour`` steps; step t falls in hour
    ``h(t) = (t // rounds_per_hour) % 24``, and

        client i is available at step t  iff  (h(t) - start_hour[i]) % 24 < hours,

    i.e. during hours ``start_hour[i], ..., start_hour[i] + hours - 1`` (mod 24), wrapping past
    midnight. This is FedLaAvg's Sentiment140 availability (Sec. 6.1.3, P:L399, Fig. 3): each
    client is available during the 8 hours of the day in which its user tweets least
    (:meth:`quietest_window`). Each client is unavailable for ``(24 - hours) * rounds_per_hour``
    consecutive steps, so FedLaAvg's Assumption 5 holds with ``E = (24 - hours) *
    rounds_per_hour + 1`` (``1`` when ``hours = 24``). The paper's "E" for Sentiment140 (24, 120,
    240) is read here as steps per day, i.e. ``rounds_per_hour = E // 24`` (1, 5, 10); the text
    leaves the mapping open (spec/fedlaavg.md sec. 4.1).

    Args:
      start_hour: the first available hour, an int in ``0..23``, or ``[N]`` such ints.
      hours: how many consecutive hours a client is available each day, ``1..24``.
      rounds_per_hour: steps per simulated hour, >= 1.

    Raises:
      ValueError: a start hour outside ``0..23`` or not an integer, ``hours`` outside ``1..24``
        or ``rounds_per_hour < 1`` (at construction); ``[N]`` start hours of the wrong width (at
        ``init``).

    Example:
      >>> process = HourOfDay(start_hour=np.array([22, 0, 9]), hours=8, rounds_per_hour=5)
    """

    start_hour: Annotated[int | np.ndarray, Range(0, 23)]
    hours: Annotated[int, Range(1, 24)] = 8
    rounds_per_hour: Count = 1

    def __post_init__(self):
        check_fields(self)
        start = np.asarray(self.start_hour)
        if start.ndim > 1 or start.size == 0 or not np.issubdtype(start.dtype, np.integer):
            raise ValueError(f"start_hour must be an int or a non-empty [N] integer vector in "
                             f"0..23, got {start.dtype} {start.shape}")

    @classmethod
    def quietest_window(
        cls, hourly_counts: np.ndarray, hours: int = 8, rounds_per_hour: int = 1
    ) -> HourOfDay:
        """Starts each client's window where its activity over ``hours`` hours is smallest.

        FedLaAvg (P:L399): a Sentiment140 client is available during the 8 hours in which it
        sends the fewest tweets. The window is contiguous and may wrap past midnight; among
        equally quiet windows the earliest start hour wins.

        Args:
          hourly_counts: ``[N, 24]`` non-negative activity per hour of day (e.g. tweets).
          hours: window length, ``1..24``.
          rounds_per_hour: steps per simulated hour, >= 1.

        Returns:
          ``HourOfDay(start_hour, hours, rounds_per_hour)`` with ``start_hour`` ``[N]`` int32.
        """
        counts = np.asarray(hourly_counts, np.float64)
        if counts.ndim != 2 or counts.shape[1] != HOURS_PER_DAY or counts.shape[0] == 0:
            raise ValueError(f"hourly_counts must be [N, 24] with N >= 1, got shape "
                             f"{counts.shape}")
        if not np.all(np.isfinite(counts) & (counts >= 0)):
            raise ValueError("hourly_counts must be finite and >= 0")
        if not is_int(hours) or not 1 <= hours <= HOURS_PER_DAY:
            raise ValueError(f"hours must be an integer in 1..24, got {hours!r}")
        window = (np.arange(HOURS_PER_DAY)[:, None] + np.arange(hours)[None, :]) % HOURS_PER_DAY
        totals = counts[:, window].sum(axis=-1)  # [N, 24]: activity of the window from hour s
        start = np.argmin(totals, axis=1).astype(np.int32)  # first minimum: earliest start
        return cls(start, hours, rounds_per_hour)

    def init(self, key: jax.Array, num_clients: int) -> State:
        del key
        start = np.asarray(self.start_hour, np.int32)
        if start.ndim == 1 and start.shape[0] != num_clients:
            raise ValueError(f"start_hour has {start.shape[0]} entries but there are "
                             f"{num_clients} clients")
        return jnp.broadcast_to(jnp.asarray(start), (num_clients,))

    def step(self, state: State, t: jax.Array, key: jax.Array) -> tuple[State, jax.Array]:
        del key
        hour = (t // self.rounds_per_hour) % HOURS_PER_DAY
        return state, (hour - state) % HOURS_PER_DAY < self.hours

    def skip(self, state: State, t: jax.Array, k: jax.Array, key: jax.Array) -> State:
        del t, k, key  # a function of the slot
        return state
