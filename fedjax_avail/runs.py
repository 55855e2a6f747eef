"""Runs of one configuration in one program: seeds and hyperparameter values on a runs axis.

``simulate`` takes, aligned run by run, a list of seeds, a list of algorithms and/or a list of
availability processes (a single value is shared by every run). The runs share one compiled
program (the whole state gets a leading runs axis, ``cohort.map_runs``), so they must share
every shape:

* algorithms must be of one class and differ only in real-valued hyperparameters (learning
  rates, ``mu``, ``alpha``...): inside the program those become traced per-run values.
  Integers (K, C, B: shapes) and strings (options: code paths) must be equal;
* availability processes must be of one class and differ only in parameters their state holds
  (``Bernoulli.p``, ``Markov.p_on``/``p_off``; a class lists them in ``run_parameters``).

Example:
  >>> lrs = [0.003, 0.01, 0.03]
  >>> results = fa.simulate(task, fd, [fa.algorithms.FedAvg(clients_per_round=10, client_lr=lr)
  ...                                  for lr in lrs], process, rounds=500, seed=[0, 0, 0])
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedjax_avail._checks import is_int, is_real


def is_runs(value: Any) -> bool:
    """A list or tuple of runs (seeds, algorithms or processes), as opposed to one value."""
    return isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim == 1)


def run_count(*values: Any) -> int | None:
    """The number of runs the list-valued arguments ask for (None: a single run).

    Raises:
      ValueError: lists of different lengths, or an empty list.
    """
    lengths = {len(v) for v in values if is_runs(v)}
    if not lengths:
        return None
    if 0 in lengths:
        raise ValueError("a list of runs (seeds, algorithms or availability processes) must "
                         "not be empty")
    if len(lengths) > 1:
        raise ValueError(f"the lists of seeds, algorithms and availability processes must have "
                         f"one length (one entry a run), got lengths {sorted(lengths)}")
    return lengths.pop()


def _fields(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b))) if (
            isinstance(a, np.ndarray) or isinstance(b, np.ndarray)) else a == b
    except Exception:
        return a is b


def swept_values(objects: Sequence[Any], role: str,
                 allowed: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """The per-run values of the fields in which ``objects`` differ, ``{field: [S] array}``.

    Args:
      objects: S frozen dataclasses of one class.
      role: ``"algorithm"`` or ``"availability"`` (for messages).
      allowed: the fields that may differ (None: any real-valued field).

    Raises:
      ValueError: objects of different classes, or differing in a field that may not differ.
    """
    first = objects[0]
    if not dataclasses.is_dataclass(first):
        raise ValueError(f"{role} runs must be dataclasses, got {type(first).__name__}")
    for i, obj in enumerate(objects):
        if type(obj) is not type(first):
            raise ValueError(f"{role}[{i}] is a {type(obj).__name__}, but {role}[0] is a "
                             f"{type(first).__name__}: runs in one program share one class")
    swept = {}
    for name, value in _fields(first).items():
        values = [getattr(obj, name) for obj in objects]
        if all(_same(value, v) for v in values[1:]):
            continue
        if allowed is not None and name not in allowed:
            raise ValueError(f"{role} runs differ in {name} ({values[:3]}...), which one compiled "
                             f"program cannot vary; only {list(allowed) or 'nothing'} may "
                             f"differ between runs of a {type(first).__name__}")
        if allowed is None and not all(is_real(v) and not is_int(v) for v in values):
            raise ValueError(f"{role} runs differ in {name} ({values[:3]}...); only real-valued "
                             "hyperparameters (learning rates, mu, ...) may differ between runs "
                             "of one program, not integers (shapes) or options")
        swept[name] = np.asarray(values, np.float32 if allowed is None else None)
    return swept


def bind(base: Any, values: dict[str, Any]) -> Any:
    """A copy of ``base`` with ``values`` (traced, one run's) set, without re-validating: every
    run's object was validated on the host."""
    if not values:
        return base
    out = copy.copy(base)
    for name, value in values.items():
        object.__setattr__(out, name, value)
    return out
