"""How long a client's job takes in virtual time: duration models, and WKAFL's K-of-P protocol.

A duration model draws the virtual time one job (download, local training, upload) takes. Each
client may have a speed factor ``s_i > 0``: its jobs take ``draw / s_i``. The draws are made when
a job starts, from that step's key, so nothing depends on a finish time before it happens.

The papers give no duration distribution (WKAFL and the FedBuff analysis set staleness only
through P/K and the buffer); these are the ones FLSim and FedScale offer (constant,
exponential, log-normal).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail._checks import check_positive, is_real


@dataclasses.dataclass(frozen=True, eq=False)
class _Durations:
    speed: np.ndarray | None = dataclasses.field(default=None, kw_only=True)  # [N] factors > 0

    def __post_init__(self):
        if self.speed is not None:
            speed = np.asarray(self.speed, np.float64)
            if speed.ndim != 1 or speed.size == 0 or not np.all(np.isfinite(speed) & (speed > 0)):
                raise ValueError(f"speed must be an [N] vector of finite factors > 0, got "
                                 f"{speed.dtype} {speed.shape} with values in "
                                 f"[{np.min(speed, initial=np.inf)}, "
                                 f"{np.max(speed, initial=-np.inf)}]")

    def speeds(self, num_clients: int) -> np.ndarray:
        """``[N]`` float32 speed factors (checked against N)."""
        if self.speed is None:
            return np.ones(num_clients, np.float32)
        speed = np.asarray(self.speed, np.float32)
        if speed.shape[0] != num_clients:
            raise ValueError(f"speed has {speed.shape[0]} entries but there are {num_clients} "
                             "clients")
        return speed

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

    duration: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        check_positive("duration", self.duration)

    def _base(self, key, shape):
        del key
        return jnp.full(shape, self.duration, jnp.float32)


@dataclasses.dataclass(frozen=True, eq=False)
class Exponential(_Durations):
    """Job durations ~ Exponential with the given mean (divided by the client's speed)."""

    mean: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        check_positive("mean", self.mean)

    def _base(self, key, shape):
        return self.mean * jax.random.exponential(key, shape, jnp.float32)


@dataclasses.dataclass(frozen=True, eq=False)
class LogNormal(_Durations):
    """Job durations ~ LogNormal with the given mean and log-scale sigma.

    ``duration = exp(mu + sigma Z)`` with ``mu = ln(mean) - sigma^2 / 2``, so the mean is
    ``mean`` whatever sigma (FLGo's and FedScale's heavy-tailed device latencies).
    """

    mean: float = 1.0
    sigma: float = 0.5

    def __post_init__(self):
        super().__post_init__()
        check_positive("mean", self.mean)
        if not is_real(self.sigma) or self.sigma < 0:
            raise ValueError(f"sigma must be a finite number >= 0, got {self.sigma!r}")

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
        if not isinstance(self.one_per_round, bool):
            raise ValueError(f"one_per_round must be True or False, got {self.one_per_round!r}")


Durations = Constant | Exponential | LogNormal
