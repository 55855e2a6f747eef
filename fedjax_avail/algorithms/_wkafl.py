"""WKAFL: weighted K-asynchronous FL (Zhou et al., WKAFL paper Algorithms 1-3, P:L190-307).

One server iteration j (paper line numbers of Algorithm 2, ``wkafl.md`` 2.2-2.4):

* L6-9: receive the first K (loss l_i, gradient g_i, staleness tau_i) (:func:`local_gradients`
  at each client's stale model);
* L8, eq. 4: ``g~_i = g_i + alpha * m``, m the previous iteration's aggregate (the authors' code
  and the analysis, L311) or the previous estimate (eq. 4's wording; ``momentum_source``);
* L10-12: stage 2 from the iteration ``switch_round`` on (the code) or once the mean (text,
  L293) or sum (box, L209) of the K losses is <= ``loss_threshold``; never back;
* L13: clip each to norm CB: ``g^_i = g~_i min(1, CB / ||g~_i||)``;
* L14, eq. 5: the estimate ``g_bar = sum_i a_i g^_i``, ``a_i = (e/2)^(-tau_i)`` normalised;
* L15, Alg. 3: ``sim_i = cos(g^_i, g_bar)``; ``p'_i = exp(beta sim_i)`` if ``sim_i >= sim_min``
  else 0 (eq. 7); in stage 2 ``g^_i <- g^_i min(1, B ||g_bar|| / ||g^_i||)`` (eq. 9);
  ``g = sum_i p_i g^_i`` with ``p = p' / sum p'`` (eq. 8); if no gradient passes, ``g = g_bar``
  (the code's rule; the paper leaves 0/0 open);
* L16, eq. 10: ``eta_j = eta_0 / (gamma tau_min + 1)``, tau_min the least staleness (0 when a
  gradient is fresh; the code counts from 1);
* L17: ``w <- w - eta_j g``.

Ablations (Fig. 5, P:L435-437) are parameters: ``gradient_selection=False`` (no Alg. 3: the
update is the estimate), ``staleness_weighting=False`` (uniform 1/K in eq. 5 and a constant
eta_0), ``alpha=0`` (no momentum), ``clipping=False`` (no CB clip); the authors' ablation scripts
also drop the CB clip in each (``wkafl.md`` 7.6). With all four off, ``beta=0`` and stage 1
only, WKAFL is K-async SGD (``wkafl.md`` 6, fact 1).

Defaults: the authors' EMNIST-MNIST script (``wkafl.md`` 7.1): eta_0 = 0.005, alpha = 0.1,
CB = 100, B = 10, sim_min = 0.3, beta = 10, gamma = 0.1, stage 2 from iteration 1000.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_avail import server
from fedjax_avail._checks import (
    Annotated,
    Count,
    Index,
    NonNegative,
    Positive,
    Range,
    check_fields,
)
from fedjax_avail.algorithms._async import AsyncParts
from fedjax_avail.algorithms._base import Metrics, RoundInput
from fedjax_avail.algorithms._staleness import exponential_weights
from fedjax_avail.local import Problem, flat_size, local_gradients

SWITCHES = ("round", "loss")
REDUCTIONS = ("mean", "sum")
SOURCES = ("aggregate", "estimate")
SIMILARITY_WEIGHTS = ("similarity", "similarity_x_staleness")


class WKAFLState(NamedTuple):
    params: Any  # global model pytree, P parameters
    clock: Any  # the clock's state
    store: Any  # ([H, P] model history or [N, P] per-client start models, row scales)
    momentum: jax.Array  # [P] float32, m of eq. 4 (0 before the first iteration)
    stage: jax.Array  # [] int32, 1 or 2


def _clip(vectors: jax.Array, bound: jax.Array) -> jax.Array:
    """Rows scaled to norm at most ``bound`` (``[K]`` or scalar): ``v min(1, bound / ||v||)``."""
    norms = jnp.linalg.norm(vectors, axis=-1)
    scale = jnp.minimum(1.0, bound / jnp.where(norms > 0, norms, 1.0))
    return vectors * scale[:, None]


@dataclasses.dataclass(frozen=True)
class WKAFL(AsyncParts):
    """WKAFL (module docstring for the update and its paper lines).

    Args:
      clients_per_round: K, gradients per iteration.
      batch_size: m.
      client_lr: eta_0 > 0.
      alpha: momentum constant >= 0 (0 removes eq. 4).
      clip: CB > 0, the absolute clip of every gradient.
      relative_clip: B > 0, the stage-2 clip relative to the estimate's norm.
      sim_min: cosine threshold in [-1, 1] (paper: [0, 1]).
      beta: temperature >= 0 of ``exp(beta sim)``.
      gamma: learning-rate adjustment >= 0 (paper: (0, 1)).
      stage_switch: ``"round"`` (from iteration ``switch_round``, the code) or ``"loss"``
        (``loss_reduction`` of the K losses <= ``loss_threshold``, the paper).
      switch_round, loss_threshold, loss_reduction: as above (``"mean"`` text, ``"sum"`` box).
      momentum_source: ``"aggregate"`` (previous g, code and analysis) or ``"estimate"``
        (previous g_bar, eq. 4's wording).
      similarity_weights: ``"similarity"`` (eq. 7) or ``"similarity_x_staleness"``
        (``exp(beta sim) a_i``, the MNIST and CIFAR scripts).
      gradient_selection, staleness_weighting, clipping: the ablation switches.
      durations, concurrency, history, offline: :class:`AsyncParts` (default ``KofP()``).

    References:
      Zhou, Li, Ren, Yang. IEEE TPDS 2022, arXiv:2203.01214; code github.com/zzh816/WKAFL-code.
    """

    clients_per_round: Count
    batch_size: Count = 4
    client_lr: Positive = 0.005
    alpha: NonNegative = 0.1
    clip: Positive = 100.0
    relative_clip: Positive = 10.0
    sim_min: Annotated[float, Range(-1, 1)] = 0.3
    beta: NonNegative = 10.0
    gamma: NonNegative = 0.1
    stage_switch: str = "round"
    switch_round: Index = 1000
    loss_threshold: float = 0.0
    loss_reduction: str = "mean"
    momentum_source: str = "aggregate"
    similarity_weights: str = "similarity"
    gradient_selection: bool = True
    staleness_weighting: bool = True
    clipping: bool = True

    def __post_init__(self):
        check_fields(self)
        for name, value, allowed in (("stage_switch", self.stage_switch, SWITCHES),
                                     ("loss_reduction", self.loss_reduction, REDUCTIONS),
                                     ("momentum_source", self.momentum_source, SOURCES),
                                     ("similarity_weights", self.similarity_weights,
                                      SIMILARITY_WEIGHTS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        self._check_async()

    def init(self, params: Any, num_clients: int) -> WKAFLState:
        clock, store = self.init_parts(params, num_clients)
        return WKAFLState(params, clock, store, jnp.zeros((flat_size(params),), jnp.float32),
                          jnp.int32(1))

    def round(
        self, state: WKAFLState, inputs: RoundInput, problem: Problem
    ) -> tuple[WKAFLState, Metrics, Any]:  # Any: the cursor
        clock, c, cursor = self.completions(state, inputs)
        grads, losses = local_gradients(problem, state.params, c.clients, c.train_key,
                                        batch_size=self.batch_size, starts=c.starts,
                                        batch_ids=c.batch_ids)  # L6-9
        valid = c.valid
        count = jnp.sum(valid)
        g = grads + self.alpha * state.momentum  # L8, eq. 4
        stage = self._stage(state.stage, inputs.round, losses, valid, count)  # L10-12
        if self.clipping:
            g = _clip(g, self.clip)  # L13
        if self.staleness_weighting:  # L14, eq. 5
            a = exponential_weights(c.staleness, valid)
        else:
            a = valid / jnp.maximum(count, 1)
        estimate = jnp.tensordot(a, g, 1)
        if self.gradient_selection:  # L15, Algorithm 3
            update, chosen = self._select(g, estimate, a, valid, stage)
        else:
            update, chosen = estimate, count
        tau_min = jnp.min(jnp.where(valid, c.staleness, jnp.iinfo(jnp.int32).max))
        lr = self.client_lr / (self.gamma * tau_min + 1.0) if self.staleness_weighting else (
            jnp.float32(self.client_lr))  # L16, eq. 10
        lr = jnp.where(count > 0, lr, 0.0)
        params = server.add_delta(state.params, -lr * update)  # L17
        momentum = update if self.momentum_source == "aggregate" else estimate
        momentum = jnp.where(count > 0, momentum, state.momentum)
        store = self.record(state, inputs.round, params, c)
        metrics = {**c.metrics, "stage": stage, "lr": lr, "num_consistent": chosen}
        return WKAFLState(params, clock, store, momentum, stage), metrics, cursor

    def _stage(self, stage, round_index, losses, valid, count):
        if self.stage_switch == "round":
            switch = round_index >= self.switch_round
        else:
            total = jnp.sum(jnp.where(valid, losses, 0.0))
            reported = total / jnp.maximum(count, 1) if self.loss_reduction == "mean" else total
            switch = (count > 0) & (reported <= self.loss_threshold)
        return jnp.where(switch | (stage == 2), 2, 1).astype(jnp.int32)

    def _select(self, g, estimate, a, valid, stage):
        """Algorithm 3 (SAGrad): consistent gradients, exp(beta sim) weights, stage-2 clip."""
        norms = jnp.linalg.norm(g, axis=-1)
        est_norm = jnp.linalg.norm(estimate)
        cos = g @ estimate / jnp.where((norms > 0) & (est_norm > 0), norms * est_norm, 1.0)
        sim = jnp.where(norms > 0, cos, 1.0)  # the code's rule for a zero gradient
        passed = valid & (sim >= self.sim_min)  # eq. 7
        logits = self.beta * sim
        raw = jnp.where(passed, jnp.exp(logits - jnp.max(jnp.where(passed, logits, -jnp.inf))),
                        0.0)
        if self.similarity_weights == "similarity_x_staleness":
            raw = raw * a
        g = jnp.where(stage == 2, _clip(g, self.relative_clip * est_norm), g)  # eq. 9
        total = jnp.sum(raw)
        p = raw / jnp.where(total > 0, total, 1.0)  # eq. 8
        update = jnp.where(total > 0, jnp.tensordot(p, g, 1), estimate)
        return update, jnp.sum(passed)
