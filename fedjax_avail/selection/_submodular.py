"""Client selection by submodular maximisation: DivFL, SubTrunc, UnionFL; and Power-of-Choice.

Castillo J. et al., "Submodular Maximization Approaches for Equitable Client Selection in
Federated Learning" (arXiv 2408.13683; spec ``subtrunc_unionfl.md``):

* ``DivFL`` (Balakrishnan et al., ICLR 2022; eq. 9-10): facility location on the Euclidean
  distances between clients' gradients, maximised by stochastic greedy;
* ``SubTrunc`` (eq. 11-13): DivFL plus ``lam * min(b, sum_{i in S} phi(f_i(w)))``, the clients'
  most recent losses truncated at b;
* ``UnionFL`` (eq. 14): DivFL minus ``mu * |S cap U_t|``, U_t the clients selected in the last
  ``window`` rounds (a flat penalty on every recent client, spec 2.2).

``SubTrunc(lam=0)`` and ``UnionFL(mu=0)`` are DivFL exactly (the same picks for the same key).

Scale (issue 18): G sums a distance over all N clients while SubTrunc's term is at most
``lam * b`` (1.05 at the paper's values), so as eq. 13 is written the truncation hardly ever
binds and SubTrunc picks what DivFL picks. ``normalize="mean"`` (the default) weighs the mean
coverage ``G / N`` against the extra term instead; ``normalize=None`` is the literal form
(:func:`_scaled`).

Gradient proxies follow DivFL's code (``melodi-lab/divfl``, ``fedavg.py``; spec 1.5): at round 0
every client's full-batch gradient (and loss) at the initial model is computed (``prepare``);
after each round the clients that reported refresh theirs at the model they received; the other
rows go stale. ``refresh="available"`` instead recomputes every available client's at every
round (the paper's oracle reading; O(N) work a round, for small N). Stochastic greedy draws
``candidates`` = r = 10 per step, the paper's value (L295); DivFL's code draws
``max(K, N // 10)`` (``candidates="code"``), which equals 10 at the paper's N = 100 but makes a
round O(K N^2 P / 10) at large N. Every client must be covered, so a round costs
O(K r N P) distance work whatever r (the README's selection benchmark).

Power-of-Choice (Cho, Wang, Joshi 2020): d candidates drawn without replacement with probability
proportional to their data size, the K with the highest local loss at the current model win.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_avail import cohort as cohort_lib
from fedjax_avail._checks import Count, NonNegative, Positive, check_fields
from fedjax_avail.local import flat_size, full_batch
from fedjax_avail.selection._base import FullBatchPass, Selection
from fedjax_avail.selection._facility import greedy

METHODS = ("stochastic", "greedy")
ALL_CLIENTS_CHUNK = 8  # clients whose full batches are held at once in a pass over all N
REFRESH = ("selected", "available")
PHIS = ("log1p", "identity")
NORMALIZE = ("mean",)  # the scalings of G against SubTrunc's and UnionFL's terms; or None
Normalize = Literal["mean"] | None


def _poison(grads: jax.Array, losses: jax.Array) -> jax.Array:
    """``losses`` ``[M]`` with NaN where the gradient row ``grads`` ``[M, P]`` holds NaN or Inf.

    The engine checks the state's vectors for NaN/Inf every round but not its ``[N, P]``
    tables (too costly), so a non-finite gradient stops the run in the round it appears
    (``DivergenceError``) instead of silently steering the greedy to the lowest indices.
    """
    return jnp.where(jnp.all(jnp.isfinite(grads), axis=1), losses, jnp.nan)


def _scaled(gain, normalize: Normalize, n: int):
    """The extra gain as greedy adds it to the facility-location gain, for ``normalize``.

    ``None``: ``gain`` itself, the objective as the paper writes it (``G + H``, eq. 13, L143;
    ``G - mu g``, eq. 14, L161). ``"mean"``: the objective is ``G / N + H``, G divided by the N
    clients it covers; greedy maximises the same argmax ``G + N H``, so only the extra term is
    scaled and ``lam = 0`` / ``mu = 0`` stay DivFL bit for bit.
    """
    if normalize is None:
        return gain
    return lambda columns, carry: n * gain(columns, carry)


class FacilityState(NamedTuple):
    features: jax.Array  # [N, P] float32, each client's latest full-batch gradient
    losses: jax.Array  # [N] float32, each client's latest full-batch loss; NaN if its gradient
    # is not finite (the engine checks vectors every round, not [N, P] tables)
    last_selected: jax.Array  # [N] int32, the last round it was selected in (picked while
    # available, whether it then reported or not: UnionFL's U_t), -1 if never


@dataclasses.dataclass(frozen=True)
class DivFL(Selection):
    """Diverse client selection: facility location on client gradients (module docstring).

    Args:
      candidates: r, stochastic greedy's candidates per step (10, the paper's), or ``"code"``
        for DivFL's code's ``max(K, N // 10)``.
      method: ``"stochastic"`` greedy or exact plain ``"greedy"`` (all N^2 distances at every
        step, O(k N^2 P) compute, in column blocks: no ``[N, N]`` matrix beyond small N).
      refresh: ``"selected"`` (DivFL's code) or ``"available"`` (every available client's
        gradient at every round).

    Example:
      >>> fa.algorithms.FedAvg(clients_per_round=10, selection=fa.selection.DivFL())
    """

    candidates: Count | Literal["code"] = 10
    method: str = "stochastic"
    refresh: str = "selected"
    prepares: ClassVar[bool] = True  # every client's gradient before round 0

    def __post_init__(self):
        check_fields(self)
        for name, value, allowed in (("method", self.method, METHODS),
                                     ("refresh", self.refresh, REFRESH)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")

    def full_batch_passes(self, k: int, num_clients: int) -> tuple[FullBatchPass, ...]:
        """The gradients of all N before round 0 (they become the ``[N, P]`` features table, a
        per-client table: no result rows), of the K members after each round (``[K, P]``), and
        with ``refresh="available"`` of all N every round (``[N, P]``)."""
        passes = (FullBatchPass(num_clients, ALL_CLIENTS_CHUNK, 0, True),
                  FullBatchPass(k, k, k, True))
        if self.refresh == "available":
            passes += (FullBatchPass(num_clients, ALL_CLIENTS_CHUNK, num_clients, True),)
        return passes

    def init(self, params, num_clients: int) -> FacilityState:
        size = flat_size(params)
        return FacilityState(jnp.zeros((num_clients, size), jnp.float32),
                             jnp.zeros((num_clients,), jnp.float32),
                             jnp.full((num_clients,), -1, jnp.int32))

    def prepare(self, state: FacilityState, params, problem) -> FacilityState:
        """Every client's gradient and loss at the initial model (DivFL's round 0), computed
        ``ALL_CLIENTS_CHUNK`` clients at a time."""
        grads, losses = full_batch(problem, params, jnp.arange(state.losses.shape[0]),
                                   chunk=problem.full_batch_chunk or ALL_CLIENTS_CHUNK)
        return state._replace(features=grads, losses=_poison(grads, losses))

    def select(self, state: FacilityState, context, k: int):
        if self.refresh == "available":
            grads, losses = full_batch(context.problem, context.params,
                                       jnp.arange(state.losses.shape[0]),
                                       chunk=context.problem.full_batch_chunk or ALL_CLIENTS_CHUNK)
            on = context.available
            state = state._replace(features=jnp.where(on[:, None], grads, state.features),
                                   losses=jnp.where(on, _poison(grads, losses), state.losses))
        n = state.losses.shape[0]
        r = None if self.method == "greedy" else (
            max(k, n // 10) if self.candidates == "code" else self.candidates)
        gain, init, step = self._extra(state, context)
        cohort, valid = greedy(context.key, state.features, context.available, k, r, gain,
                               init, step)
        stamps = cohort_lib.scatter(state.last_selected, cohort,
                                    jnp.full(cohort.shape, context.round, jnp.int32), valid)
        return state._replace(last_selected=stamps), cohort, valid

    def _extra(self, state, context):
        """The extra gain of a variant: ``(gain(candidates, carry), carry0, step)``."""
        del state, context
        return None, None, None

    def update(self, state: FacilityState, context, cohort, valid) -> FacilityState:
        """The members that reported send their gradient at the model they received."""
        grads, losses = full_batch(context.problem, context.params, cohort)
        return state._replace(
            features=cohort_lib.scatter(state.features, cohort, grads, valid),
            losses=cohort_lib.scatter(state.losses, cohort, _poison(grads, losses), valid))


@dataclasses.dataclass(frozen=True)
class SubTrunc(DivFL):
    """DivFL + ``lam * min(b, sum_{i in S} phi(f_i))`` (eq. 11-13), G scaled by ``normalize``.

    Maximises ``W(S) = G(S) / N + H(S)`` (``normalize="mean"``) or ``G(S) + H(S)`` (``None``,
    eq. 13 as written, L143), where ``G(S) = Gbar(empty) - sum_i min_{j in S} ||g_i - g_j||``
    (eq. 9-10, L125-L129), ``H(S) = lam * min(b, F(S))`` (eq. 11, L135) and
    ``F(S) = sum_{i in S} phi(f_i)`` (eq. 12, L139). The marginal gain of client e adds
    ``lam * (min(b, F + phi(f_e)) - min(b, F))``, F the sum over the clients picked so far.
    Defaults: the paper's MNIST Table I (lam = 0.95, b = 1.10, phi = ln(1 + x); spec 4.6).

    The scaling of G is this project's choice: the paper states none (L123-L155). Written
    literally, G sums N = 100 gradient distances (a pick gains ~3-190 on MNIST) while
    H <= lam b = 1.05, so the truncated term hardly ever outweighs G's differences between
    candidates and SubTrunc picks what DivFL picks (issue 18), although L155 says lam weighs
    fairness against performance and b decides how many worst-off clients get priority.
    ``G / N`` is bound (9) for the mean gradient ``grad f = (1/|N|) sum_i grad f_i`` of the
    paper's global objective (3) (L48), which the cohort's mean update approximates
    (assumption A3, eq. 18, L253-L261): a mean distance between a client's gradient and its
    representative's, in per-client units like the losses f_i in F. A pick then gains
    ~0.03-1.9 (MNIST, logistic regression, rounds 1-150), the order of ``lam * phi(f_i)``
    (0.3-1.05), and the truncation binds: the first picks favour high-loss clients until F
    reaches b (one pick when its loss is above ``e^b - 1 = 2.0``, as at the initial model), then
    DivFL's coverage decides. Losses are the latest reported, so clients not picked for long
    (stale, high losses) are the ones favoured (L155: "clients who have not participated").

    Args:
      lam: lambda >= 0 (0 is DivFL).
      b: truncation > 0.
      phi: ``"log1p"`` or ``"identity"`` (Table IV).
      normalize: ``"mean"`` (G / N, the default) or ``None`` (G as written: nearly always
        DivFL's picks at the paper's lam and b).

    Raises:
      ValueError: ``normalize`` (or another field) outside its allowed values, naming it.

    Example:
      >>> fa.selection.SubTrunc(lam=0.95, b=1.10, normalize="mean")
    """

    lam: NonNegative = 0.95
    b: Positive = 1.10
    phi: str = "log1p"
    normalize: Normalize = "mean"

    def __post_init__(self):
        super().__post_init__()
        if self.phi not in PHIS:
            raise ValueError(f"phi must be one of {PHIS}, got {self.phi!r}")

    def _extra(self, state, context):
        del context
        phi = jnp.log1p(jnp.maximum(state.losses, 0.0)) if self.phi == "log1p" else (
            state.losses)

        def gain(columns, total):
            return self.lam * (jnp.minimum(self.b, total + phi[columns])
                               - jnp.minimum(self.b, total))

        return (_scaled(gain, self.normalize, state.losses.shape[0]), jnp.float32(0.0),
                lambda total, chosen: total + phi[chosen])


@dataclasses.dataclass(frozen=True)
class UnionFL(DivFL):
    """DivFL - ``mu * |S cap U_t|``, U_t the clients selected in the last ``window`` rounds
    (eq. 14, L161; the sets S_i the server selected, L163-L165, so a selected client that
    drops out, misses a deadline or is cut by over-selection counts too), G scaled by
    ``normalize`` as in :class:`SubTrunc`: maximises ``G(S) / N - mu g_t(S)`` (``"mean"``) or
    ``G(S) - mu g_t(S)`` (``None``, as written).
    Defaults: the paper's mu = 1, window 5 (Tables I, III; spec 4.6).

    The scaling is this project's choice (the paper states none). With ``"mean"`` the penalty
    mu = 1 outweighs most coverage gains (~0.03-1.9 a pick on MNIST), so recent clients are
    passed over while other candidates are open; with ``None`` it only decides the late, nearly
    tied picks.

    Args:
      mu: penalty >= 0 (0 is DivFL).
      window: look-back rounds, >= 1.
      normalize: ``"mean"`` (G / N, the default) or ``None`` (G as written).

    Raises:
      ValueError: ``normalize`` (or another field) outside its allowed values, naming it.
    """

    mu: NonNegative = 1.0
    window: Count = 5
    normalize: Normalize = "mean"

    def _extra(self, state, context):
        recent = (state.last_selected >= 0) & (state.last_selected >= context.round - self.window)

        def gain(columns, carry):
            del carry
            return -self.mu * recent[columns].astype(jnp.float32)

        return (_scaled(gain, self.normalize, state.losses.shape[0]), jnp.float32(0.0),
                lambda carry, chosen: carry)


@dataclasses.dataclass(frozen=True)
class PowerOfChoice(Selection):
    """Power-of-Choice (module docstring): d candidates by data size, the K lossiest win.

    Args:
      d: candidates per round, ``K <= d <= N``; the losses of all d are computed each round.
    """

    d: Count

    def __post_init__(self):
        check_fields(self)

    def validate(self, k: int, num_clients: int) -> None:
        if not k <= self.d <= num_clients:
            raise ValueError(f"d must be in [clients_per_round={k}, num_clients="
                             f"{num_clients}], got {self.d}")

    def full_batch_passes(self, k: int, num_clients: int) -> tuple[FullBatchPass, ...]:
        """The losses of its d candidates, every round."""
        del k, num_clients
        return (FullBatchPass(self.d, self.d, 0, False),)

    def select(self, state, context, k: int):
        counts = context.problem.data.counts.astype(jnp.float32)
        gumbel = -jnp.log(-jnp.log(jax.random.uniform(context.key, counts.shape,
                                                      minval=1e-12, maxval=1.0)))
        scores = jnp.where(context.available, jnp.log(counts) + gumbel, -jnp.inf)
        _, candidates = jax.lax.top_k(scores, self.d)  # by size, without replacement
        ok = context.available[candidates]
        _, losses = full_batch(context.problem, context.params, candidates, with_grads=False)
        _, best = jax.lax.top_k(jnp.where(ok, losses, -jnp.inf), k)
        return state, candidates[best], ok[best]
