"""Device values read on the host."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np


def to_host(tree: Any) -> Any:
    """Device values on the host. In a multi-process run the values the engine reads (metrics,
    evaluations, the health flag) are replicated global arrays: their local copy is read."""
    def one(a):
        if isinstance(a, jax.Array) and not a.is_fully_addressable:
            return np.asarray(a.addressable_data(0))
        return np.asarray(jax.device_get(a))

    return jax.tree.map(one, tree)
