"""Bursty availability: a two-state (on/off) Markov chain per client."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail import _bits
from fedjax_avail._checks import Annotated, Range, check_fields
from fedjax_avail.availability._process import State

_INITIAL = ("stationary", "on", "off")
_SCALE = 2.0**31  # _bits' threshold scale


class MarkovState(NamedTuple):
    on: jax.Array  # [N] bool, X_t: the mask the next step returns
    to_on: jax.Array  # [N] uint32, round(p_on * 2^31): P(off -> on) per step
    to_off: jax.Array  # [N] uint32, round(p_off * 2^31): P(on -> off) per step


def _probabilities(value, name: str) -> np.ndarray:
    p = np.asarray(value, np.float64)
    if p.ndim > 1 or p.size == 0:  # its range: the annotation
        raise ValueError(f"{name} must be a probability or a non-empty [N] vector of them, got "
                         f"shape {p.shape}")
    return p


@dataclasses.dataclass(frozen=True, eq=False)
class Markov:
    """Client i is on or off, and switches state with per-client probabilities each step.

    ``X_t^i`` in {off, on} is a two-state Markov chain (a Gilbert-Elliott channel; the
    time-correlated availability of Rodio et al., "Federated Learning under Heterogeneous and
    Correlated Client Availability", INFOCOM 2023, arXiv 2301.04632):

        P(X_{t+1} = on  | X_t = off) = p_on[i]
        P(X_{t+1} = off | X_t = on)  = p_off[i]

    Client i is available at step t iff ``X_t^i`` is on. Its long-run on-share is the stationary
    probability ``pi_i = p_on / (p_on + p_off)``; on-runs last ``Geometric(p_off)`` steps (mean
    ``1 / p_off``) and off-runs ``Geometric(p_on)`` (mean ``1 / p_on``), so small switching
    probabilities give long bursts at the same share. ``p_on + p_off = 1`` is Bernoulli(p_on).

    The initial state ``X_0`` is drawn from the stationary distribution (``initial=
    "stationary"``, the default), so every step has the same marginal ``pi_i``; ``"on"`` (or
    ``"off"``) starts every client on (off) instead. Step t returns ``X_t`` and draws
    ``X_{t+1}`` with step t's key.

    Args:
      p_on: off -> on probability per step, in [0, 1], scalar or ``[N]``.
      p_off: on -> off probability per step, in [0, 1], scalar or ``[N]``.
      initial: ``"stationary"``, ``"on"`` or ``"off"``. ``"stationary"`` needs
        ``p_on + p_off > 0`` for every client (a frozen chain has no unique stationary law).

    Raises:
      ValueError: a probability outside [0, 1], two ``[N]`` vectors of different lengths, an
        unknown ``initial``, or ``p_on = p_off = 0`` under ``"stationary"`` (at construction);
        a ``[N]`` vector of the wrong width (at ``init``).

    Example:
      >>> process = Markov(p_on=0.05, p_off=0.2)  # on 20% of the time, in bursts of ~5 steps
    """

    p_on: Annotated[float | np.ndarray, Range(0, 1)]
    p_off: Annotated[float | np.ndarray, Range(0, 1)]
    initial: str = "stationary"
    run_parameters = ("p_on", "p_off")  # held in the state: runs of one program may differ in them

    def __post_init__(self):
        check_fields(self)
        p_on = _probabilities(self.p_on, "p_on")
        p_off = _probabilities(self.p_off, "p_off")
        if p_on.ndim == 1 and p_off.ndim == 1 and p_on.shape != p_off.shape:
            raise ValueError(f"p_on and p_off must have the same length when both are [N], got "
                             f"{p_on.shape[0]} and {p_off.shape[0]}")
        if self.initial not in _INITIAL:
            raise ValueError(f"initial must be one of {_INITIAL}, got {self.initial!r}")
        if self.initial == "stationary" and np.any(p_on + p_off == 0):
            bad = np.flatnonzero(np.atleast_1d(p_on + p_off == 0))
            raise ValueError(
                f"p_on + p_off must be > 0 for every client when initial='stationary' (no "
                f"stationary distribution otherwise), got 0 for clients {bad[:10].tolist()}; "
                "use initial='on' or 'off'"
            )

    def stationary_share(self) -> np.ndarray:
        """``p_on / (p_on + p_off)``, the long-run fraction of steps a client is on (float64)."""
        p_on, p_off = np.asarray(self.p_on, np.float64), np.asarray(self.p_off, np.float64)
        return p_on / (p_on + p_off)

    def init(self, key: jax.Array, num_clients: int) -> MarkovState:
        p_on, p_off = np.asarray(self.p_on, np.float64), np.asarray(self.p_off, np.float64)
        for name, p in (("p_on", p_on), ("p_off", p_off)):
            if p.ndim == 1 and p.shape[0] != num_clients:
                raise ValueError(f"{name} has {p.shape[0]} entries but there are {num_clients} "
                                 "clients")
        p_on, p_off = (np.broadcast_to(p, (num_clients,)) for p in (p_on, p_off))
        if self.initial == "stationary":
            share = _bits.threshold(p_on / (p_on + p_off))
            on = _bits.below(_bits.client_bits(key, num_clients), share)
        else:
            on = jnp.full((num_clients,), self.initial == "on")
        return MarkovState(on, _bits.threshold(p_on), _bits.threshold(p_off))

    def step(self, state: State, t: jax.Array, key: jax.Array) -> tuple[State, jax.Array]:
        del t
        words = _bits.client_bits(key, state.on.shape[0])  # one uniform draw per client
        # on: stays on unless the draw falls below p_off; off: turns on iff it falls below p_on.
        next_on = jnp.where(state.on, ~_bits.below(words, state.to_off),
                            _bits.below(words, state.to_on))
        return state._replace(on=next_on), state.on

    def skip(self, state: State, t: jax.Array, k: jax.Array, key: jax.Array) -> State:
        """``X_{t+k}`` from ``X_t`` in one draw per client, by the k-step transition of the
        two-state chain: with ``s = p_on + p_off`` and ``lambda = 1 - s``,

            P(X_{t+k} = on | X_t = off) = p_on (1 - lambda^k) / s
            P(X_{t+k} = on | X_t = on)  = 1 - p_off (1 - lambda^k) / s

        (``k`` steps when ``s = 0``: the chain is frozen). Equal in distribution to k steps,
        not draw for draw; ``k = 0`` returns the state unchanged.
        """
        del t
        a = state.to_on.astype(jnp.float32) / _SCALE
        b = state.to_off.astype(jnp.float32) / _SCALE
        total, kf = a + b, jnp.asarray(k, jnp.float32)
        lam = 1.0 - total
        # 1 - lambda^k, accurate for small switching probabilities (lambda near 1)
        below_one = total < 1.0
        gone = jnp.where(below_one, -jnp.expm1(kf * jnp.log1p(-jnp.where(below_one, total, 0.0))),
                         1.0 - jnp.where((lam < 0) & (k % 2 == 1), -1.0, 1.0) * jnp.abs(lam) ** kf)
        frac = jnp.where(total > 0, gone / jnp.where(total > 0, total, 1.0), kf)
        p_on = jnp.where(state.on, 1.0 - b * frac, a * frac)
        thresholds = jnp.round(jnp.clip(p_on, 0.0, 1.0) * _SCALE).astype(jnp.uint32)
        on = _bits.below(_bits.client_bits(key, state.on.shape[0]), thresholds)
        return state._replace(on=jnp.where(k > 0, on, state.on))
