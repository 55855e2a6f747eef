"""The availability-process interface, and the memoryless processes (always on, Bernoulli).

A process is a frozen dataclass with two pure functions over all N clients at once:

* ``init(key, num_clients) -> state``: called once, outside ``jit``; validates against N.
* ``step(state, t, key) -> (state, mask)``: ``mask`` is ``[N]`` bool, True where client i is
  available in time slot t (virtual time ``[t L, (t + 1) L)``, L the slot length,
  :mod:`fedjax_avail.timeline`). A synchronous round without durations is one slot: round r
  uses step r.
* optional ``skip(state, t, k, key) -> state``: the state after slots ``t, ..., t + k - 1``
  passed unobserved (k >= 0, traced), in one call; ``k = 0`` must return ``state`` unchanged.
  A process whose state does not change with time returns it as is; the Markov chain uses its
  k-step transition. A process without ``skip`` is stepped k times (exact, O(k N)).
* optional ``ended(state, t) -> [] bool``: True when no client is ever available again from
  slot t on (a trace played once that has ended); default never.

Arrays a process needs (probabilities, group ids, trace tables) live in its state, so they are
device buffers passed to the compiled round, not constants baked into it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail import _bits
from fedjax_avail._checks import Annotated, Range, check_fields

State = Any


class AvailabilityProcess(Protocol):
    """What :func:`fedjax_avail.simulate` needs of an availability process."""

    def init(self, key: jax.Array, num_clients: int) -> State: ...

    def step(self, state: State, t: jax.Array, key: jax.Array) -> tuple[State, jax.Array]: ...


def skip(process: AvailabilityProcess, state: State, t: jax.Array, k: jax.Array,
         key: jax.Array) -> State:
    """``process``'s state after slots ``t, ..., t + k - 1`` passed unobserved (``k`` >= 0).

    Its own ``skip`` where it has one; else k steps, slot ``t + i`` with ``fold_in(key, i)``.
    """
    method = getattr(process, "skip", None)
    if method is not None:
        return method(state, t, k, key)
    return jax.lax.fori_loop(
        0, k, lambda i, s: process.step(s, t + i, jax.random.fold_in(key, i))[0], state)


def ended(process: AvailabilityProcess, state: State, t: jax.Array) -> jax.Array:
    """``[]`` bool: no client of ``process`` is available at slot t or ever after."""
    method = getattr(process, "ended", None)
    return jnp.bool_(False) if method is None else method(state, t)


@dataclasses.dataclass(frozen=True)
class AlwaysOn:
    """Every client is available at every step (E = 1 in FedLaAvg's Assumption 4)."""

    def init(self, key: jax.Array, num_clients: int) -> State:
        del key
        return jnp.ones((num_clients,), bool)  # the mask itself, constant

    def step(self, state: State, t: jax.Array, key: jax.Array) -> tuple[State, jax.Array]:
        del t, key
        return state, state

    def skip(self, state: State, t: jax.Array, k: jax.Array, key: jax.Array) -> State:
        del t, k, key
        return state


@dataclasses.dataclass(frozen=True, eq=False)
class Bernoulli:
    """Client i is available at each step independently with probability ``p_i``.

    The state is ``[N]`` uint32 thresholds ``round(p_i * 2^31)``; each step draws one Threefry
    word per client (``_bits``), so p is honoured to within 2^-32 and 0 and 1 are exact.

    Args:
      p: a probability in [0, 1], or ``[N]`` per-client probabilities.

    Raises:
      ValueError: a probability outside [0, 1] (at construction), or ``[N]`` of the wrong width
        (at ``init``).
    """

    p: Annotated[float | np.ndarray, Range(0, 1)]
    run_parameters = ("p",)  # held in the state: runs of one program may differ in them

    def __post_init__(self):
        check_fields(self)
        p = np.asarray(self.p, np.float64)
        if p.ndim > 1:  # its range: the annotation
            raise ValueError(f"p must be a probability or an [N] vector of them, got shape "
                             f"{p.shape}")

    @classmethod
    def uniform_range(
        cls, num_clients: int, low: float = 0.1, high: float = 0.9, seed: int = 0
    ) -> Bernoulli:
        """Per-client ``p_i ~ Uniform[low, high)``, drawn once on the host (MIFA's random mode).

        Follows ``gen_avail_prob_random`` in MIFA's code (``hmgxr128/MIFA_code``,
        ``data/gen_avail_prob.py``; Gu et al., NeurIPS 2021, arXiv 2106.04159), which draws
        ``rand() * (max_prob - min_prob) + min_prob`` per client, with numpy's generator here.

        Args:
          num_clients: N >= 1.
          low, high: the range, ``0 <= low <= high <= 1``.
          seed: seed of the host generator that draws the ``p_i`` (not the run's seed).

        Returns:
          ``Bernoulli(p)`` with ``p`` ``[N]`` float64.

        Example:
          >>> process = Bernoulli.uniform_range(1000, low=0.1, high=0.5, seed=0)
        """
        if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
            raise ValueError(f"num_clients must be an integer >= 1, got {num_clients!r}")
        _check_range(low, high, "low", "high")
        p = np.random.default_rng(seed).uniform(low, high, int(num_clients))
        return cls(p)

    @classmethod
    def label_correlated(
        cls, labels: np.ndarray, p_min: float, p_max: float, max_label: int | None = None
    ) -> Bernoulli:
        """MIFA's adversarial mode: ``p_i = p_min + (p_max - p_min) * label_i / max_label``.

        The availability probability rises with the client's smallest label, so the clients
        holding low digits are rarely seen and plain FedAvg is biased towards the high digits.
        Follows ``gen_avail_prob_adversarial`` in MIFA's code (``data/gen_avail_prob.py``), which
        uses ``min(class_info[client]) / 9`` for 10 classes: pass ``max_label=9`` to match it
        exactly when not every label occurs. FLGo's YMF mode is the same with
        ``p_max = 1, p_min = 1 - beta``.

        Args:
          labels: ``[N]`` ints >= 0, each client's smallest label
            (:meth:`fedjax_avail.FederatedData.client_labels`).
          p_min, p_max: ``0 <= p_min <= p_max <= 1``; label 0 gets ``p_min``, ``max_label`` gets
            ``p_max``.
          max_label: the label that gets ``p_max``, >= ``max(labels)`` and >= 1; default
            ``max(max(labels), 1)``.

        Returns:
          ``Bernoulli(p)`` with ``p`` ``[N]`` float64, non-decreasing in the label.

        Example:
          >>> labels = fd.client_labels()
          >>> process = Bernoulli.label_correlated(labels, p_min=0.1, p_max=0.9, max_label=9)
        """
        labels = np.asarray(labels)
        if labels.ndim != 1 or labels.size == 0 or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"labels must be a non-empty [N] integer vector, got {labels.dtype} "
                             f"{labels.shape}")
        if labels.min() < 0:
            raise ValueError(f"labels must be >= 0, got min {labels.min()}")
        _check_range(p_min, p_max, "p_min", "p_max")
        top = max(int(labels.max()), 1) if max_label is None else max_label
        if not isinstance(top, (int, np.integer)) or top < max(int(labels.max()), 1):
            raise ValueError(f"max_label must be an integer >= max(labels) = {labels.max()} and "
                             f">= 1, got {max_label!r}")
        return cls(p_min + (p_max - p_min) * labels.astype(np.float64) / top)

    def init(self, key: jax.Array, num_clients: int) -> State:
        del key
        p = np.asarray(self.p, np.float64)
        if p.ndim == 1 and p.shape[0] != num_clients:
            raise ValueError(f"p has {p.shape[0]} entries but there are {num_clients} clients")
        return _bits.threshold(np.broadcast_to(p, (num_clients,)))  # [N] uint32

    def step(self, state: State, t: jax.Array, key: jax.Array) -> tuple[State, jax.Array]:
        del t
        return state, _bits.below(_bits.client_bits(key, state.shape[0]), state)

    def skip(self, state: State, t: jax.Array, k: jax.Array, key: jax.Array) -> State:
        del t, k, key  # memoryless: slot t's mask depends on slot t's key only
        return state


def _check_range(low: float, high: float, low_name: str, high_name: str) -> None:
    if not 0.0 <= low <= high <= 1.0:
        raise ValueError(f"{low_name} and {high_name} must satisfy 0 <= {low_name} <= {high_name} "
                         f"<= 1, got {low_name}={low!r}, {high_name}={high!r}")
