"""The interface every selection strategy implements.

A strategy is a frozen dataclass whose state lives in the algorithm's state (so it is
checkpointed and vmapped with it):

* ``init(params, num_clients) -> state``;
* ``prepare(state, params, problem) -> state`` (optional): run once before round 0, outside
  the scan (DivFL's gradients of all N clients at the initial model);
* ``select(state, context, k) -> (state, cohort [k] int32, valid [k] bool)``: the round's
  cohort, distinct clients, only available ones valid (the others are padding);
* ``update(state, context, cohort, valid) -> state``: after the round, ``valid`` the members
  that reported (their stamps, gradients and losses are refreshed).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax


class SelectionContext(NamedTuple):
    """What a strategy may read in round r."""

    key: jax.Array  # PRNG key of the selection
    available: jax.Array  # [N] bool, availability step r
    round: jax.Array  # [] int32, r
    params: Any  # the global model the cohort receives
    problem: Any  # fedjax_avail.local.Problem: task and data


def prepare_selection(selection: Any, state: Any, params: Any, problem: Any) -> Any:
    """``selection.prepare(...)`` if the strategy has one, else the state unchanged."""
    method = getattr(selection, "prepare", None)
    return state if method is None else method(state, params, problem)


def check_selection(selection: Any, k: int | None = None, num_clients: int | None = None) -> None:
    """Raises TypeError for an object without the interface; runs its own ``validate``."""
    if not all(callable(getattr(selection, m, None)) for m in ("init", "select", "update")):
        raise TypeError(f"selection must be a strategy with init, select and update methods "
                        f"(e.g. fa.selection.Uniform()), got {type(selection).__name__}")
    validate = getattr(selection, "validate", None)
    if validate is not None and k is not None:
        validate(k, num_clients)
