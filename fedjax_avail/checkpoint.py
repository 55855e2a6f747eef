"""Checkpoints of a run at chunk boundaries, through orbax-checkpoint.

A checkpoint holds everything a run needs to continue **bit-identically**: the scan carry
(algorithm state, availability state, health flag), the rounds done, the history rows and the
per-round metrics. Random keys need no saving: round r's keys are ``fold_in(seed stream, r)``.
Each checkpoint also records a fingerprint of the run (algorithm, availability process, task,
training and test data, seed, ``eval_every``, JAX version and PRNG) and is refused for a
different run; the number of rounds may grow.

orbax writes a checkpoint into a temporary directory and renames it when complete, so a run
killed while saving leaves the previous checkpoint intact; a checkpoint that is complete on disk
but unreadable (a file lost afterwards) is skipped with a warning and the one before it is used.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

_KEEP = 2  # the newest and the one before it (the fallback)


class Restored(NamedTuple):
    done: int  # rounds completed
    carry: Any  # the scan carry, as saved
    rows: list[dict[str, float]]  # history rows
    round_metrics: dict[str, np.ndarray]  # each [done]


def fingerprint(*objects: Any) -> str:
    """A stable hash of a run's configuration: dataclasses, containers, arrays, functions.

    Arrays are hashed by dtype, shape and bytes; functions by module, qualified name and the
    values they close over (so two tasks built by one factory with different settings differ);
    other objects by their attributes, never by their memory address.
    """
    digest = hashlib.blake2b(digest_size=16)
    seen: set[int] = set()

    def visit(obj: Any) -> None:
        if id(obj) in seen and not isinstance(obj, (int, float, str, bool, type(None))):
            digest.update(b"<seen>")
            return
        seen.add(id(obj))
        if isinstance(obj, (np.ndarray, jax.Array)):
            a = np.ascontiguousarray(np.asarray(obj))
            digest.update(f"{a.dtype}{a.shape}".encode())
            digest.update(a.tobytes())
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            digest.update(type(obj).__qualname__.encode())
            for field in dataclasses.fields(obj):
                digest.update(field.name.encode())
                visit(getattr(obj, field.name))
        elif isinstance(obj, Mapping):
            for k in sorted(obj, key=str):
                digest.update(str(k).encode())
                visit(obj[k])
        elif isinstance(obj, (tuple, list)):
            digest.update(f"{type(obj).__name__}{len(obj)}".encode())
            for item in obj:
                visit(item)
        elif isinstance(obj, (int, float, str, bool, complex, type(None), np.generic)):
            digest.update(repr(obj).encode())
        elif isinstance(obj, type):
            digest.update(f"{obj.__module__}.{obj.__qualname__}".encode())
        elif callable(obj) and hasattr(obj, "__code__"):
            digest.update(f"{obj.__module__}.{obj.__qualname__}".encode())
            visit(obj.__defaults__)
            visit([cell.cell_contents for cell in obj.__closure__ or ()
                   if _has_contents(cell)])
        elif hasattr(obj, "__dict__"):
            digest.update(type(obj).__qualname__.encode())
            visit(vars(obj))
        else:
            digest.update(re.sub(r" at 0x[0-9a-fA-F]+", "", repr(obj)).encode())

    for obj in objects:
        visit(obj)
    return digest.hexdigest()


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


class RunCheckpointer:
    """Saves and restores one run in ``directory`` (one orbax step per saved round count).

    Args:
      directory: where the checkpoints live (created if missing).
      run_fingerprint: :func:`fingerprint` of the run's configuration.
    """

    def __init__(self, directory: str | Path, run_fingerprint: str):
        import orbax.checkpoint as ocp

        logging.getLogger("absl").setLevel(logging.WARNING)  # orbax logs every save at INFO
        self._ocp = ocp
        self.directory = Path(directory).expanduser().resolve()
        self.fingerprint = run_fingerprint
        self._manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=_KEEP,
                                                 enable_async_checkpointing=False),
            item_names=("carry", "round_metrics", "meta"),
        )

    def save(self, done: int, carry: Any, rows: list[dict[str, float]],
             round_metrics: Mapping[str, np.ndarray]) -> None:
        """Writes the checkpoint of round ``done`` (atomically, by orbax's rename)."""
        ocp = self._ocp
        metrics = {k: np.asarray(v) for k, v in round_metrics.items()}
        meta = {"fingerprint": self.fingerprint, "done": int(done), "rows": rows,
                "metrics": {k: [list(v.shape), str(v.dtype)] for k, v in metrics.items()}}
        self._manager.save(int(done), args=ocp.args.Composite(
            carry=ocp.args.StandardSave(carry),
            round_metrics=ocp.args.StandardSave(metrics),
            meta=ocp.args.JsonSave(meta)), force=True)
        self._manager.wait_until_finished()

    def restore(self, abstract_carry: Any) -> Restored | None:
        """The newest readable checkpoint of this run, or None if there is none.

        Raises:
          ValueError: the directory holds a checkpoint of a different run.
        """
        ocp = self._ocp
        unreadable: list[int] = []
        for step in sorted(self._manager.all_steps(), reverse=True):
            try:
                meta = self._manager.restore(step, args=ocp.args.Composite(
                    meta=ocp.args.JsonRestore())).meta
                if meta["fingerprint"] != self.fingerprint:
                    raise _Mismatch(step)
                shapes = {k: jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype))
                          for k, (shape, dtype) in meta["metrics"].items()}
                out = self._manager.restore(step, args=ocp.args.Composite(
                    carry=ocp.args.StandardRestore(abstract_carry),
                    round_metrics=ocp.args.StandardRestore(shapes)))
            except _Mismatch:
                raise ValueError(
                    f"checkpoint_dir {self.directory} holds a checkpoint (round {step}) of a "
                    "different run (another algorithm, availability process, task, data, "
                    "seed, eval_every or JAX version); use another directory, or delete it to "
                    "start afresh") from None
            except MemoryError:
                raise
            except Exception as error:  # incomplete or unreadable: fall back to the one before
                warnings.warn(f"checkpoint of round {step} in {self.directory} is incomplete or "
                              f"unreadable ({type(error).__name__}: {error}); trying the one "
                              "before it", stacklevel=3)
                unreadable.append(step)
                continue
            for bad in unreadable:  # never fall back to them later
                self._manager.delete(bad)
            metrics = {k: np.asarray(v) for k, v in out.round_metrics.items()}
            return Restored(int(meta["done"]), out.carry, list(meta["rows"]), metrics)
        return None


class _Mismatch(Exception):
    pass
