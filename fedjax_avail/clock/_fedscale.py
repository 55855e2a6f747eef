"""Job durations from FedScale's device capacities (``client_device_capacity``).

FedScale's capacity file maps a device key to ``{"computation": c, "communication": b}``: ``c``
the device's inference latency in milliseconds per sample and ``b`` its bandwidth in kbit/s.
A training job's completion time is (``fedscale/cloud/internal/client_metadata.py``,
``ClientMetadata.get_completion_time``)::

    computation   = augmentation_factor * batch_size * local_steps * c / 1000   (seconds;
                    augmentation_factor = 3: a backward pass costs about twice the forward)
    communication = (upload_size + download_size) / b                          (seconds)

with the sizes in kbit (FedScale's aggregator passes the pickled model's size in kbit for
both). Simulated client i takes the entry ``keys[i % len(keys)]``, as FedScale's client
manager assigns device entries (``fedscale/cloud/client_manager.py``, ``register_client``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedjax_avail._checks import Count, Positive, checked
from fedjax_avail.availability._fedscale import assigned_keys, load_fedscale_pickle
from fedjax_avail.clock._durations import Constant


def capacity_seconds(
    capacity: Mapping[Any, Mapping[str, float]],
    num_clients: int,
    batch_size: int,
    local_steps: int,
    model_kbits: float,
    augmentation_factor: float = 3.0,
    assignment: Sequence[Any] | None = None,
) -> np.ndarray:
    """``[N]`` seconds a training job takes on each client's device (module docstring).

    Raises:
      ValueError: an empty capacity dict (:func:`~fedjax_avail.availability._fedscale.
        assigned_keys`), an entry without ``computation`` or
        ``communication`` or with a value that is not a number > 0 (the key and field named),
        an assignment of the wrong length or naming a key the dict lacks.
    """
    for name, value in (("batch_size", batch_size), ("local_steps", local_steps),
                        ("model_kbits", model_kbits),
                        ("augmentation_factor", augmentation_factor)):
        if not (isinstance(value, (int, float, np.number)) and np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a number > 0, got {value!r}")
    chosen = assigned_keys(capacity, num_clients, assignment, "capacity")
    seconds = {}
    for key in dict.fromkeys(chosen):
        entry = capacity[key]
        fields = {}
        for field in ("computation", "communication"):
            value = entry.get(field) if isinstance(entry, Mapping) else None
            try:
                fields[field] = float(value)
            except (TypeError, ValueError):
                fields[field] = float("nan")
            if not (np.isfinite(fields[field]) and fields[field] > 0):
                raise ValueError(f"capacity[{key!r}][{field!r}] must be a number > 0, got "
                                 f"{value!r}")
        compute = augmentation_factor * batch_size * local_steps * fields["computation"] / 1000
        seconds[key] = compute + 2 * model_kbits / fields["communication"]
    return np.array([seconds[key] for key in chosen])


@checked
def from_fedscale_capacity(
    capacity: Mapping | str | os.PathLike,
    num_clients: Count,
    batch_size: Count,
    local_steps: Count,
    model_kbits: Positive,
    augmentation_factor: Positive = 3.0,
    seconds_per_unit: Positive = 1.0,
    assignment: Sequence[Any] | None = None,
) -> Constant:
    """FedScale's completion-time model as a duration model: client i's every job takes
    :func:`capacity_seconds`'s ``[N]`` seconds divided by ``seconds_per_unit``.

    For synchronous rounds (``durations=``, a ``deadline``) and asynchronous servers alike. With
    an interval availability trace (:func:`fedjax_avail.availability.from_fedscale`) keep the
    units together: virtual time in seconds (``seconds_per_unit=1``) reads a trace of
    ``seconds_per_slot=L`` with ``simulate(slot_length=L)``; virtual time in minutes
    (``seconds_per_unit=60``) with ``slot_length=L / 60``.

    Args:
      capacity: the dict (device key -> ``{"computation": ms per sample, "communication":
        kbit/s}``) or the path of FedScale's pickle (read without running code from it, as
        :func:`fedjax_avail.availability.load_fedscale_pickle`).
      num_clients: N.
      batch_size, local_steps: B and the local steps of one job.
      model_kbits: the model's size in kbit, sent down and up once a job (FedScale: the pickled
        model's bytes / 1024 * 8).
      augmentation_factor: forward + backward cost over the forward's (FedScale: 3).
      seconds_per_unit: the seconds one unit of virtual time stands for.
      assignment: None (``keys[i % len(keys)]``) or N device keys.

    Returns:
      ``fa.clock.Constant(1.0, speed=seconds_per_unit / seconds)``.
    """
    if not isinstance(capacity, Mapping):
        capacity = load_fedscale_pickle(capacity)
    seconds = capacity_seconds(capacity, num_clients, batch_size, local_steps, model_kbits,
                               augmentation_factor, assignment)
    return Constant(1.0, speed=seconds_per_unit / seconds)
