"""The argument checks every module shares (no dependencies, so any module may import it)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def is_int(value: Any) -> bool:
    """True for Python and numpy integers, False for bools and everything else."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_int(name: str, value: Any, low: int = 1, high: int | None = None) -> None:
    """Raises ValueError unless ``value`` is an integer in ``[low, high)``."""
    if not is_int(value) or value < low or (high is not None and value >= high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high})"
        raise ValueError(f"{name} must be an integer {allowed}, got {value!r}")


def check_optional_int(name: str, value: Any, low: int = 1) -> None:
    """Raises ValueError unless ``value`` is None or an integer >= ``low``."""
    if value is not None and (not is_int(value) or value < low):
        raise ValueError(f"{name} must be None or an integer >= {low}, got {value!r}")


def is_real(value: Any) -> bool:
    """True for finite Python and numpy reals, False for bools, NaN and infinities."""
    return (isinstance(value, (int, float, np.integer, np.floating))
            and not isinstance(value, (bool, np.bool_)) and math.isfinite(value))


def check_positive(name: str, value: Any) -> None:
    """Raises ValueError unless ``value`` is a finite number > 0."""
    if not is_real(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
