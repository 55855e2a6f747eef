"""Staleness weights: how much a contribution computed on an older model counts.

Staleness s >= 0 counts server updates (0: computed on the current model).

* :func:`exponential_weights`: ``a_i = (e/2)^(-s_i)``, normalised over the update's
  contributions (TWAFL; WKAFL eq. 5, P:L252). Normalising makes them shift invariant: adding the
  same constant to every s_i changes nothing, so WKAFL's ``tau = s + 1`` gives the same weights.
* :func:`staleness_factor`: a per-contribution factor, FedAsync's ``s(t - tau)`` functions (Xie,
  Koyejo, Gupta 2019, "Asynchronous Federated Optimization", Sec. 5): ``"constant"`` 1,
  ``"polynomial"`` ``(s + 1)^(-a)``, ``"hinge"`` 1 for ``s <= b`` else ``1 / (a (s - b) + 1)``;
  FedBuff's optional ``1 / sqrt(1 + s)`` is the polynomial with a = 1/2.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

FUNCTIONS = ("constant", "polynomial", "hinge")


def exponential_weights(staleness: jax.Array, valid: jax.Array,
                        base: float = math.e / 2) -> jax.Array:
    """``[K]`` weights ``base^(-s_i) / sum_j base^(-s_j)`` over the valid contributions; 0 for
    invalid ones; all 0 when none is valid. Computed from ``s - min s`` so no weight underflows
    to 0 when every s is large."""
    s = jnp.where(valid, staleness, jnp.iinfo(jnp.int32).max).astype(jnp.float32)
    s = s - jnp.min(s)
    raw = jnp.where(valid, jnp.power(jnp.float32(base), -s), 0.0)
    total = jnp.sum(raw)
    return raw / jnp.where(total > 0, total, 1.0)


def staleness_factor(staleness: jax.Array, function: str, a: float = 0.5,
                     b: float = 4.0) -> jax.Array:
    """FedAsync's ``s(t - tau)`` for each contribution (see the module docstring)."""
    s = staleness.astype(jnp.float32)
    if function == "constant":
        return jnp.ones_like(s)
    if function == "polynomial":
        return jnp.power(s + 1.0, -a)
    if function == "hinge":
        return jnp.where(s <= b, 1.0, 1.0 / (a * (s - b) + 1.0))
    raise ValueError(f"staleness function must be one of {FUNCTIONS}, got {function!r}")


def check_function(function: str, a: float, b: float) -> None:
    if function not in FUNCTIONS:
        raise ValueError(f"staleness must be one of {FUNCTIONS}, got {function!r}")
    if not (math.isfinite(a) and a >= 0):
        raise ValueError(f"staleness_a must be a finite number >= 0, got {a!r}")
    if not (math.isfinite(b) and b >= 0):
        raise ValueError(f"staleness_b must be a finite number >= 0, got {b!r}")
