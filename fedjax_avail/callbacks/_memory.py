"""The device memory a run holds, measured after its first chunk."""

from __future__ import annotations

import jax
import numpy as np

from fedjax_avail.callbacks._callback import Callback
from fedjax_avail.run import Run


def live_bytes() -> int:
    """Bytes of every live device buffer of this process, over all the devices that hold it (a
    copy on each of D devices counts D times; a split array, each part once). A buffer two
    arrays share (one device's copy of a replicated array, ``Array.addressable_data``) counts
    once."""
    total, seen = 0, set()
    for a in jax.live_arrays():
        if a.is_deleted():  # donated since it was listed: holds nothing now
            continue
        try:
            parts = ([a] if len(a.sharding.device_set) == 1
                     else [shard.data for shard in a.addressable_shards])
            for part in parts:
                try:
                    key = (next(iter(part.devices())).id, part.unsafe_buffer_pointer())
                except Exception:  # a backend without buffer pointers: counted as its own
                    key = id(part)
                if key not in seen:
                    seen.add(key)
                    total += part.nbytes
        except RuntimeError:  # deleted by another thread in between
            pass
    return total


class MeasureHeld(Callback):
    """Records ``run.memory["held"]``: the bytes of the device arrays alive after the run's
    first chunk (data, states) less those alive when the callback was made (before the run)."""

    def __init__(self):
        self.baseline = live_bytes()

    def on_chunk_end(self, run: Run, metrics: dict[str, np.ndarray]) -> None:
        if "held" not in run.memory:
            run.memory["held"] = live_bytes() - self.baseline
