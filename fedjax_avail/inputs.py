"""Checks of everything :func:`fedjax_avail.simulate` is given, before anything is compiled.

Each check raises ``ValueError`` (or ``TypeError`` for a wrong kind of object) naming the
argument, echoing the value and stating what is allowed. Nothing is silently reinterpreted: data
with NaN/Inf, labels the task cannot read, or a drop-out hidden inside a wrapper are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from fedjax_avail._checks import (
    check_client_chunk,
    check_int,
    check_optional_int,
    check_value,
    is_int,
)
from fedjax_avail.algorithms import Algorithm
from fedjax_avail.availability import AvailabilityProcess, check_reports_forwarded
from fedjax_avail.data import FederatedData
from fedjax_avail.tasks import Task

__all__ = ["MAX_ROUNDS", "check_int", "check_optional_int", "check_simulate_args", "is_int",
           "process_state"]

MAX_ROUNDS = 2**24  # participation stamps are ranked as float32 (selection), exact below 2^24


def check_finite(arrays: Mapping[str, Any], name: str) -> None:
    """Raises ValueError if a floating-point array holds NaN or Inf."""
    for key, value in arrays.items():
        a = np.asarray(value)
        if np.issubdtype(a.dtype, np.inexact) and not np.isfinite(a).all():
            bad = np.argwhere(~np.isfinite(a))[0].tolist()
            raise ValueError(f"{name}[{key!r}] holds NaN or Inf (first at index {bad}); clean the "
                             "data before simulating")


def test_arrays(test_data: Any) -> dict[str, np.ndarray | jax.Array] | None:
    """The test set as one dict of ``[M, ...]`` arrays, checked; None when there is none.
    Anything else that converts to an array (``__array__``, a list) becomes one numpy array
    here, so the checks, the estimate and the evaluation all read the same arrays."""
    if test_data is None:
        return None
    if isinstance(test_data, FederatedData):
        arrays = dict(test_data.arrays)
    elif isinstance(test_data, Mapping):
        arrays = dict(test_data)
    else:
        raise TypeError(f"test_data must be None, a FederatedData or a dict of [M, ...] arrays "
                        f"such as {{'x': x, 'y': y}}, got {type(test_data).__name__}")
    arrays = {k: v if isinstance(v, jax.Array) else np.asarray(v) for k, v in arrays.items()}
    lengths = {k: np.shape(v)[0] if np.ndim(v) else None for k, v in arrays.items()}
    if None in lengths.values() or len(set(lengths.values())) != 1 or 0 in lengths.values():
        raise ValueError(f"test_data arrays must share one non-empty leading example axis, got "
                         f"lengths {lengths}")
    return arrays


def check_simulate_args(task: Any, data: Any, algorithm: Any, availability: Any, rounds: Any,
                        seeds: list[Any], client_chunk: Any) -> None:
    """Every check of ``simulate``'s arguments but the evaluation's (its callback checks its
    own: :class:`fedjax_avail.callbacks.Evaluation`)."""
    if not isinstance(task, Task):
        raise TypeError(f"task must be a fedjax_avail.Task, got {type(task).__name__}")
    if not isinstance(data, FederatedData):
        raise TypeError(f"data must be a FederatedData, got {type(data).__name__}")
    check_value("algorithm", algorithm, Algorithm)
    check_value("availability", availability, AvailabilityProcess)
    check_int("rounds", rounds, 1, MAX_ROUNDS)
    for value in seeds:  # PRNGKey(seed) keeps 32 bits without x64
        if not is_int(value) or not 0 <= value < 2**32:
            raise ValueError(f"seed must be an integer in [0, 2^32) (or a list of them), got "
                             f"{value!r}")
    check_client_chunk(client_chunk)
    check_finite(data.arrays, "data.arrays")
    if task.validate is not None:
        task.validate(data.arrays, "data.arrays")
    check_availability(availability)
    check_algorithm(algorithm, data.num_clients)


def check_algorithm(algorithm: Any, num_clients: int, name: str = "algorithm") -> None:
    """An algorithm's type and its own checks against N (``validate``)."""
    check_value(name, algorithm, Algorithm)
    algorithm.validate(num_clients)


def check_availability(availability: Any, name: str = "availability") -> None:
    """An availability process's interface, and drop-outs not hidden in a wrapper."""
    check_value(name, availability, AvailabilityProcess)
    check_reports_forwarded(availability)


def process_state(process: Any, key: Any, num_clients: int, name: str = "availability") -> Any:
    """``process.init(key, num_clients)``, its refusal named as ``name`` (the list entry of a
    runs axis's processes, ``availability[1]``)."""
    try:
        return process.init(key, num_clients)
    except ValueError as error:
        raise ValueError(f"{name} ({type(process).__name__}): {error}") from None
