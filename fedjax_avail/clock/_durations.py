"""How long a client's job takes in virtual time: duration models, and WKAFL's K-of-P protocol.

A duration model draws the virtual time one job (download, local training, upload) takes. Each
client may have a speed factor ``s_i > 0``: its jobs take ``draw / s_i``. The draws are made when
a job starts, from that step's key, so nothing depends on a finish time before it happens.

The papers give no duration distribution (WKAFL and the FedBuff analysis set staleness only
through P/K and the buffer); these are the ones FLSim and FedScale offer (constant,
exponential, log-normal).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail._checks import Annotated, NonNegative, Positive, Range, check_fields

# Durations a float32 virtual clock can add up: a job's duration (its 1e-6 and 1 - 1e-6
# quantiles, divided by the fastest and slowest speed) must lie in [TINY, HUGE]; outside,
# float32 underflows to 0 (one client then fills every update) or overflows to Inf.
TINY, HUGE = 1e-30, 1e30
_Z = 4.753  # the standard normal's 1 - 1e-6 quantile
MAX_SPEED_RATIO = 2.0**20  # slowest / fastest: float32 time keeps 2^-4 of the fastest job


@dataclasses.dataclass(frozen=True, eq=False)
class _Durations:
    _scale: ClassVar[str]  # the parameter in time units (scaled by ``in_slots``)
    speed: Annotated[np.ndarray | None, Range(0, low_open=True)] = dataclasses.field(
        default=None, kw_only=True)  # [N] factors > 0

    def __post_init__(self):
        check_fields(self)
        if self.speed is not None:
            speed = np.asarray(self.speed, np.float64)
            if speed.ndim != 1 or speed.size == 0:
                raise ValueError(f"speed must be an [N] vector of finite factors > 0, got "
                                 f"{speed.dtype} {speed.shape}")
            if speed.max() > MAX_SPEED_RATIO * speed.min():
                raise ValueError(
                    f"speed factors must span at most a factor {MAX_SPEED_RATIO:g} (float32 "
                    "virtual time loses a slow job's progress next to a fast one's), got "
                    f"[{speed.min():.3g}, {speed.max():.3g}]")

    def _check_span(self, low: float, high: float) -> None:
        """Refuses durations float32 cannot hold: ``low``, ``high`` the draws' 1e-6 and
        1 - 1e-6 quantiles before the speed factors."""
        speed = np.ones(1) if self.speed is None else np.asarray(self.speed, np.float64)
        shortest, longest = low / speed.max(), high / speed.min()
        if not (shortest >= TINY and longest <= HUGE):
            raise ValueError(
                f"{type(self).__name__}{self._text()}: job durations would span "
                f"[{shortest:.3g}, {longest:.3g}] virtual time units, outside [{TINY:g}, "
                f"{HUGE:g}] (float32 time would underflow to 0 or overflow to Inf); rescale "
                "the durations or the speed factors")

    def _text(self) -> str:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name != "speed"}
        return "(" + ", ".join(f"{k}={v!r}" for k, v in values.items()) + (
            "" if self.speed is None else ", speed=[...]") + ")"

    def _key(self) -> tuple:
        speed = None if self.speed is None else np.asarray(self.speed, np.float64)
        return (type(self), tuple(getattr(self, f.name) for f in dataclasses.fields(self)
                                  if f.name != "speed"),
                None if speed is None else (speed.shape, speed.tobytes()))

    def __eq__(self, other: object) -> bool:
        """Equal when of the same kind with equal parameters and speed factors (so that runs
        differing only elsewhere share their duration model)."""
        return isinstance(other, _Durations) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def speeds(self, num_clients: int) -> np.ndarray:
        """``[N]`` float32 speed factors (checked against N)."""
        if self.speed is None:
            return np.ones(num_clients, np.float32)
        speed = np.asarray(self.speed, np.float32)
        if speed.shape[0] != num_clients:
            raise ValueError(f"speed has {speed.shape[0]} entries but there are {num_clients} "
                             "clients")
        return speed

    def shortest(self, speed: np.ndarray) -> float:
        """The shortest job any client of speed factors ``speed`` ``[N]`` can draw (0 where
        that is not known exactly: a distribution reaches durations near 0, and a log-normal
        of sigma 0 computes its mean through exp and log)."""
        del speed
        return 0.0

    def in_slots(self, slot_length: float) -> _Durations:
        """The same model in availability slots of length ``slot_length`` (L): its durations
        divided by L in float64, on the host (the clocks keep time in slots, so a job of L
        takes exactly one slot; itself at L = 1)."""
        if slot_length == 1.0:
            return self
        scaled = copy.copy(self)  # not re-checked: its span is checked in time units
        object.__setattr__(scaled, self._scale, getattr(self, self._scale) / slot_length)
        return scaled

    def sample(self, key: jax.Array, speed: jax.Array) -> jax.Array:
        """Durations ``[S]`` of jobs of clients with speed factors ``speed`` ``[S]``."""
        return self._base(key, speed.shape) / speed

    def _base(self, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True, eq=False)
class Constant(_Durations):
    """Every job takes ``duration / speed_i``.

    Example:
      >>> fa.clock.Constant(1.0, speed=np.array([1.0, 0.5, 2.0]))  # client 1 is twice as slow
    """

    _scale = "duration"

    duration: Positive = 1.0

    def __post_init__(self):
        super().__post_init__()
        self._check_span(self.duration, self.duration)

    def shortest(self, speed: np.ndarray) -> float:
        """The fastest client's job, as float32 computes it (``sample``)."""
        return float(np.float32(self.duration) / np.max(np.asarray(speed, np.float32)))

    def _base(self, key, shape):
        del key
        return jnp.full(shape, self.duration, jnp.float32)


@dataclasses.dataclass(frozen=True, eq=False)
class Exponential(_Durations):
    """Job durations ~ Exponential with the given mean (divided by the client's speed)."""

    _scale = "mean"

    mean: Positive = 1.0

    def __post_init__(self):
        super().__post_init__()
        self._check_span(self.mean * 1e-6, self.mean * 6 * math.log(10))

    def _base(self, key, shape):
        return self.mean * jax.random.exponential(key, shape, jnp.float32)


@dataclasses.dataclass(frozen=True, eq=False)
class LogNormal(_Durations):
    """Job durations ~ LogNormal with the given mean and log-scale sigma.

    ``duration = exp(mu + sigma Z)`` with ``mu = ln(mean) - sigma^2 / 2``, so the mean is
    ``mean`` whatever sigma (FLGo's and FedScale's heavy-tailed device latencies).
    """

    _scale = "mean"

    mean: Positive = 1.0
    sigma: NonNegative = 0.5

    def __post_init__(self):
        super().__post_init__()
        mu = math.log(self.mean) - self.sigma**2 / 2
        self._check_span(math.exp(max(mu - _Z * self.sigma, -700)),
                         math.exp(min(mu + _Z * self.sigma, 700)))

    def _base(self, key, shape):
        mu = math.log(self.mean) - self.sigma**2 / 2
        return jnp.exp(mu + self.sigma * jax.random.normal(key, shape, jnp.float32))


@dataclasses.dataclass(frozen=True)
class KofP:
    """WKAFL's protocol (its code's ``FederatedDataLoader(worker_num=K)``; ``wkafl.md`` 7.2).

    Every client always holds the model it last received and computes on it; at each server
    iteration K clients, drawn uniformly without replacement among the available ones, report.
    Those K receive the new model. A reporting client's staleness is then Geometric: with
    q = K/P it is s with probability ``(1 - q)^s q`` (s = 0, 1, ...; WKAFL counts ``tau = s +
    1``, mean P/K). Virtual time counts server iterations.

    Args:
      one_per_round: GSGM's scheduling (WKAFL P:L425; its code's ``worker_one_round``): a client
        that reported is not drawn again until every available client has reported once.
    """

    one_per_round: bool = False

    def __post_init__(self):
        check_fields(self)


Durations = Constant | Exponential | LogNormal
