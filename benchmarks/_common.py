"""What every benchmark records: the machine, and its JSON result written atomically."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

import jax

from fedjax_avail._io import atomic_write_text


def machine_info() -> dict[str, Any]:
    """Platform, CPU count and JAX version/backend/devices of this run."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "jax_version": jax.__version__,
        "jax_backend": jax.default_backend(),
        "jax_devices": [str(d) for d in jax.devices()],
    }


def write_json(path: str | Path, payload: dict[str, Any]) -> None:
    """Writes ``payload`` as indented JSON, atomically."""
    atomic_write_text(path, json.dumps(payload, indent=2) + "\n")
