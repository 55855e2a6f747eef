"""Checkpoints of a run at chunk boundaries, through orbax-checkpoint, verified on restore.

A checkpoint holds everything a run needs to continue **bit-identically**: the scan carry
(algorithm state, availability state, health flag), the rounds done, the history rows and the
per-round metrics. Random keys need no saving: round r's keys are ``fold_in(seed stream, r)``.

Nothing restored is trusted unread:

* **Fingerprint.** Each checkpoint records one hash per setting that can change a recorded
  number (:func:`run_settings`: algorithm, availability process, task, data, seed,
  ``eval_every``, ``train_eval_examples``, this package's version and a digest of its source,
  the JAX version and backend, ...). A checkpoint of a different run is refused, naming the
  settings that differ, or, when other code wrote it, that code's version, source digest and
  git commit; the number of rounds may grow.
* **Checksums.** Every saved array has a checksum (:func:`checksum`, computed where the array
  lives, so a sharded table is never gathered), and the JSON part (history rows, fingerprint,
  checksums) a hash of its own. A checkpoint whose contents do not match, or that orbax cannot
  read (a file lost or damaged afterwards), is skipped with a warning and the one before it is
  used, so the final result is the same as an uninterrupted run's; if none is intact the
  restore is refused.

orbax writes a checkpoint into a temporary directory and renames it when complete, so a run
killed while saving leaves the previous checkpoint intact.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail import _provenance

KEEP = 2  # the newest and the one before it (the fallback)


class Restored(NamedTuple):
    done: int  # rounds completed
    carry: Any  # the scan carry, as saved
    rows: list[dict[str, float]]  # history rows
    round_metrics: dict[str, np.ndarray]  # each [done]
    seconds: float = 0.0  # wall time of the calls that made it


def fingerprint(*objects: Any) -> str:
    """A stable hash of a run's configuration: dataclasses, containers, arrays, functions.

    Arrays are hashed by dtype, shape and bytes; functions by module, qualified name and the
    values they close over (so two tasks built by one factory with different settings differ);
    other objects by their attributes, never by their memory address.
    """
    digest = hashlib.blake2b(digest_size=16)
    seen: dict[int, Any] = {}  # id -> the object, kept alive so that no id is reused

    def visit(obj: Any) -> None:
        if id(obj) in seen and not isinstance(obj, (int, float, str, bool, type(None))):
            digest.update(b"<seen>")
            return
        seen[id(obj)] = obj
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
        elif isinstance(obj, (tuple, list)):  # a list and a tuple of equal items are equal
            digest.update(f"seq{len(obj)}".encode())
            for item in obj:
                visit(item)
        elif isinstance(obj, (bool, np.bool_)):
            digest.update(repr(bool(obj)).encode())
        elif isinstance(obj, (int, float, np.integer, np.floating)):  # 1 == 1.0 == np.int64(1)
            value = obj.item() if isinstance(obj, np.generic) else obj
            exact = isinstance(value, int) and abs(value) > 2**53
            digest.update(repr(value if exact else float(value)).encode())
        elif isinstance(obj, (str, complex, type(None), np.generic)):
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


def run_settings(**settings: Any) -> dict[str, str]:
    """The fingerprint a checkpoint records: one :func:`fingerprint` per named setting, so a
    refused resume can name the settings that changed."""
    return {name: fingerprint(value) for name, value in settings.items()}


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


def _words(a: jax.Array) -> jax.Array:
    """The bits of ``a`` as uint32 words (one per element; two for 64-bit dtypes)."""
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
        a = jax.random.key_data(a)
    if a.dtype == jnp.bool_:
        return a.astype(jnp.uint32)
    size = np.dtype(a.dtype).itemsize
    if size == 8:
        return jax.lax.bitcast_convert_type(a, jnp.uint32)
    unsigned = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}[size]
    return jax.lax.bitcast_convert_type(a, unsigned).astype(jnp.uint32)


def _leaf_checksum(a: jax.Array) -> jax.Array:
    """``[2]`` uint32: two position-weighted sums of the words, mod 2^32.

    Word w_i at flat position i adds ``w_i (2i + 1)`` to the first and ``(w_i xor h(i))
    (2 h'(i) + 1)`` to the second. A flipped bit changes w_i by +-2^j, and 2^j times an odd
    number is never 0 mod 2^32: **every single-bit error is detected**; other errors escape
    both sums with probability about 2^-64. Integer sums are exact in any order, so the value
    does not depend on sharding or on the device.
    """
    w = _words(a)
    idx = jnp.zeros(w.shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(w.ndim)):
        idx = idx + jax.lax.broadcasted_iota(jnp.uint32, w.shape, axis) * jnp.uint32(stride)
        stride = (stride * w.shape[axis]) % 2**32
    first = jnp.sum(w * (2 * idx + 1), dtype=jnp.uint32)
    mixed = (w ^ (idx * jnp.uint32(0x9E3779B9))) * ((idx * jnp.uint32(0x85EBCA6B)) | 1)
    return jnp.stack([first, jnp.sum(mixed, dtype=jnp.uint32)])


@jax.jit
def _checksums(leaves: list[jax.Array]) -> jax.Array:  # [len(leaves), 2] uint32
    return jnp.stack([_leaf_checksum(leaf) for leaf in leaves])


def checksum(tree: Any) -> dict[str, str]:
    """Each array leaf's checksum as hex, keyed by its path.

    Device arrays: :func:`_leaf_checksum`, computed where they live (one compiled reduction; a
    sharded array is never gathered). Host numpy arrays: a hash of their bytes.
    """
    out: dict[str, str] = {}
    on_device = []
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        name = jax.tree_util.keystr(path)
        if isinstance(leaf, jax.Array):
            on_device.append((name, leaf))
        else:
            a = np.ascontiguousarray(leaf)
            out[name] = hashlib.blake2b(f"{a.dtype}{a.shape}".encode() + a.tobytes(),
                                        digest_size=8).hexdigest()
    if on_device:
        sums = _checksums([leaf for _, leaf in on_device])
        if not sums.is_fully_addressable:  # a replicated result of a multi-process run
            sums = sums.addressable_data(0)
        for (name, _), (a, b) in zip(on_device, np.asarray(sums), strict=True):
            out[name] = f"{int(a):08x}{int(b):08x}"
    return out


def _json_digest(body: Mapping[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True, allow_nan=True)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


class RunCheckpointer:
    """Saves and restores one run in ``directory`` (one orbax step per saved round count).

    Args:
      directory: where the checkpoints live (created if missing).
      settings: the run's settings that can change a recorded number, each as a
        :func:`fingerprint` (see :func:`run_settings`); a checkpoint is restored only into a run
        with the same settings.
    """

    def __init__(self, directory: str | Path, settings: Mapping[str, str], keep: int = KEEP):
        import orbax.checkpoint as ocp

        logging.getLogger("absl").setLevel(logging.WARNING)  # orbax logs every save at INFO
        self._ocp = ocp
        self.directory = Path(directory).expanduser().resolve()
        self.settings = dict(settings)
        self.code = _provenance.code()  # readable: the message when a checkpoint's differs
        self._manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=keep,
                                                 enable_async_checkpointing=False),
            item_names=("carry", "round_metrics", "meta"),
        )

    def save(self, done: int, carry: Any, rows: list[dict[str, float]],
             round_metrics: Mapping[str, np.ndarray], seconds: float = 0.0) -> None:
        """Writes the checkpoint of round ``done`` (atomically, by orbax's rename), with the
        checksums of its arrays; ``seconds``: the wall time spent on the run so far."""
        ocp = self._ocp
        metrics = {k: np.asarray(v) for k, v in round_metrics.items()}
        body = {"settings": self.settings, "written_by": self.code, "done": int(done),
                "rows": rows,
                "seconds": float(seconds),
                "metrics": {k: [list(v.shape), str(v.dtype)] for k, v in metrics.items()},
                "checksums": {"carry": checksum(carry), "round_metrics": checksum(metrics)}}
        self._manager.save(int(done), args=ocp.args.Composite(
            carry=ocp.args.StandardSave(carry),
            round_metrics=ocp.args.StandardSave(metrics),
            meta=ocp.args.JsonSave({**body, "digest": _json_digest(body)})), force=True)
        self._manager.wait_until_finished()

    def _restore_step(self, step: int, abstract_carry: Any) -> Restored:
        """One checkpoint, verified. Raises _Corrupt, or _Mismatch for another run's."""
        ocp = self._ocp
        try:
            meta = self._manager.restore(step, args=ocp.args.Composite(
                meta=ocp.args.JsonRestore())).meta
        except MemoryError:
            raise
        except Exception as error:
            raise _Corrupt(f"unreadable: {type(error).__name__}: {error}") from None
        if not isinstance(meta, dict) or "digest" not in meta:
            raise _Corrupt("written without checksums (by an earlier version)")
        body = {k: v for k, v in meta.items() if k != "digest"}
        if _json_digest(body) != meta["digest"]:
            raise _Corrupt("its history rows or settings do not match their hash")
        differ = sorted(k for k in {*body["settings"], *self.settings}
                        if body["settings"].get(k) != self.settings.get(k))
        if differ:
            raise _Mismatch(differ, body.get("written_by"))
        shapes = {k: jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype))
                  for k, (shape, dtype) in body["metrics"].items()}
        try:
            out = self._manager.restore(step, args=ocp.args.Composite(
                carry=ocp.args.StandardRestore(abstract_carry),
                round_metrics=ocp.args.StandardRestore(shapes)))
        except MemoryError:
            raise
        except Exception as error:
            raise _Corrupt(f"unreadable: {type(error).__name__}: {error}") from None
        metrics = {k: np.asarray(v) for k, v in out.round_metrics.items()}
        for item, tree in (("carry", out.carry), ("round_metrics", metrics)):
            found, saved = checksum(tree), body["checksums"][item]
            bad = [k for k in saved if found.get(k) != saved[k]] + [
                k for k in found if k not in saved]
            if bad:
                raise _Corrupt(f"checksum mismatch in {item}{bad[0]}")
        return Restored(int(body["done"]), out.carry, list(body["rows"]), metrics,
                        float(body.get("seconds", 0.0)))

    def restore(self, abstract_carry: Any) -> Restored | None:
        """The newest intact checkpoint of this run, or None if the directory holds none.

        A damaged checkpoint is skipped with a warning (and deleted once an older one restores).

        Raises:
          ValueError: the directory holds a checkpoint of a different run (the message names
            the settings that differ), or checkpoints of which none is intact.
        """
        damaged: list[tuple[int, str]] = []
        for step in sorted(self._manager.all_steps(), reverse=True):
            try:
                restored = self._restore_step(step, abstract_carry)
            except _Mismatch as mismatch:
                raise ValueError(self._refusal(step, mismatch)) from None
            except _Corrupt as corrupt:
                warnings.warn(f"checkpoint of round {step} in {self.directory} is damaged "
                              f"({corrupt}); trying the one before it", stacklevel=3)
                damaged.append((step, str(corrupt)))
                continue
            for bad, _ in damaged:  # never fall back to them later
                self._manager.delete(bad)
            return restored
        if damaged:
            raise ValueError(
                f"checkpoint_dir {self.directory} holds no intact checkpoint of this run ("
                + "; ".join(f"round {step}: {why}" for step, why in damaged)
                + "); delete it to start afresh")
        return None


    def _refusal(self, step: int, mismatch: _Mismatch) -> str:
        """Why the checkpoint of round ``step`` is not this run's: the settings that differ,
        and the code that wrote it where that differs from this process's."""
        where = f"checkpoint_dir {self.directory} holds a checkpoint (round {step})"
        afresh = "use another directory (or delete it) to start afresh"
        settings = [name for name in mismatch.settings if name not in self.code]
        codes = [name for name in mismatch.settings if name in self.code]
        message = (f"{where} of a different run (different {', '.join(settings)}); resume with "
                   f"the same settings, or {afresh}") if settings else ""
        if codes:
            other = (f"written by other code (different {', '.join(codes)}: "
                     f"{_describe(mismatch.written_by)}; this is {_describe(self.code)}), and a "
                     "run resumed under other code equals neither code's uninterrupted run: "
                     "continue it with the code that wrote it")
            message = (f"{message}; it was also {other}" if settings
                       else f"{where} {other}, or {afresh}")
        return message


def _describe(code: Mapping[str, Any] | None) -> str:
    """The code that wrote a checkpoint (``_provenance.code``), for people."""
    if not code:
        return "fedjax_avail from before checkpoints recorded their code (2026-11-25)"
    source = code.get("fedjax_avail_source") or "unknown"
    return (f"fedjax_avail {code.get('fedjax_avail_version')}, source {source[:12]}, commit "
            f"{code.get('fedjax_avail_commit') or 'unknown'}")


class _Corrupt(Exception):
    pass


class _Mismatch(Exception):
    def __init__(self, settings: list[str], written_by: Mapping[str, Any] | None = None):
        super().__init__(settings)
        self.settings, self.written_by = settings, written_by
