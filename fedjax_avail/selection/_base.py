"""The base every selection strategy subclasses, and what a strategy may read in a round.

A strategy is a frozen dataclass whose state lives in the algorithm's state (so it is
checkpointed and vmapped with it). It defines ``select`` and overrides what it needs of the
defaults:

* ``init(params, num_clients) -> state`` (default: no state, ``()``);
* ``prepare(state, params, problem) -> state``, with ``prepares = True``: run once before
  round 0, outside the scan (DivFL's gradients of all N clients at the initial model);
  default: nothing to prepare;
* ``select(state, context, k) -> (state, cohort [k] int32, valid [k] bool)``: the round's
  cohort, distinct clients, only available ones valid (the others are padding);
* ``update(state, context, cohort, valid) -> state``: after the round, ``valid`` the members
  that reported (e.g. DivFL refreshes their gradients and losses); default: unchanged;
* ``validate(k, num_clients)``: checks against the cohort size and N (default: none);
* ``full_batch_passes(k, num_clients)``: the passes over clients' whole data the strategy
  makes, for :func:`fedjax_avail.estimate_memory` (default: none).
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import jax


class SelectionContext(NamedTuple):
    """What a strategy may read in round r."""

    key: jax.Array  # PRNG key of the selection
    available: jax.Array  # [N] bool, availability step r
    round: jax.Array  # [] int32, r
    params: Any  # the global model the cohort receives
    problem: Any  # fedjax_avail.local.Problem: task and data


class FullBatchPass(NamedTuple):
    """A pass of a strategy over clients' whole local data (:func:`fedjax_avail.local.
    full_batch`), as the memory estimate counts it."""

    members: int  # clients whose full batches the pass reads
    at_once: int  # of them at a time, unless client_chunk bounds it
    result_rows: int  # [rows, P] gradients the pass adds to a round's working set
    grads: bool  # gradients, not only losses


class Selection:
    """Who trains among the available clients: the base of every strategy (module docstring).

    Example (a strategy of one's own: the K available clients of lowest index)::

        @dataclasses.dataclass(frozen=True)
        class FirstAvailable(fa.selection.Selection):
            def select(self, state, context, k):
                scores = jnp.where(context.available, -jnp.arange(len(context.available)), -2**30)
                _, cohort = jax.lax.top_k(scores.astype(jnp.float32), k)
                return state, cohort, context.available[cohort]
    """

    prepares: ClassVar[bool] = False  # True: prepare() runs before round 0

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if "prepare" in vars(cls) and "prepares" not in vars(cls):
            cls.prepares = True  # defining prepare is asking for it

    def init(self, params: Any, num_clients: int) -> Any:
        del params, num_clients
        return ()

    def prepare(self, state: Any, params: Any, problem: Any) -> Any:
        del params, problem
        return state

    def select(self, state: Any, context: SelectionContext, k: int
               ) -> tuple[Any, jax.Array, jax.Array]:
        raise NotImplementedError(f"{type(self).__name__} must define select")

    def update(self, state: Any, context: SelectionContext, cohort: jax.Array,
               valid: jax.Array) -> Any:
        del context, cohort, valid
        return state

    def validate(self, k: int, num_clients: int) -> None:
        del k, num_clients

    def full_batch_passes(self, k: int, num_clients: int) -> tuple[FullBatchPass, ...]:
        del k, num_clients
        return ()


def check_selection(selection: Any, k: int | None = None, num_clients: int | None = None) -> None:
    """Raises TypeError unless ``selection`` is a :class:`Selection` instance; with ``k`` and
    ``num_clients``, runs its own ``validate``."""
    if not isinstance(selection, Selection):
        raise TypeError(f"selection must be a fa.selection.Selection (e.g. "
                        f"fa.selection.Uniform()), got {type(selection).__name__}")
    if k is not None:
        selection.validate(k, num_clients)
