"""Availability replayed from a recorded ``[T, N]`` table (or per-client on-intervals)."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail._checks import check_fields
from fedjax_avail.availability._process import State


@dataclasses.dataclass(frozen=True, eq=False)
class Trace:
    """Replays a recorded availability table: step t uses row ``t % T`` (or row t, once).

    With ``cyclic=True`` (the default, and FedScale's behaviour: its ``is_active`` walks a
    client's intervals modulo the trace length) the table repeats forever. With
    ``cyclic=False`` it is played once: at steps ``t >= T`` **every client is unavailable**
    (an all-False mask), so a run longer than the trace sees no one after it ends; pick
    ``rounds <= T`` or ``cyclic=True`` if that is not what you mean.

    Args:
      mask_table: ``[T, N]`` bool (or 0/1), True where client i is available at step t; T, N >= 1.
      cyclic: repeat the table (True) or play it once (False).

    Raises:
      ValueError: a table that is not ``[T, N]`` with T, N >= 1 or holds values other than 0/1
        (at construction); a width other than N (at ``init``).

    Example:
      >>> Trace(np.array([[1, 0], [1, 1], [0, 1]], bool), cyclic=False)
    """

    mask_table: np.ndarray
    cyclic: bool = True

    def __post_init__(self):
        check_fields(self)
        table = np.asarray(self.mask_table)
        if table.ndim != 2 or table.shape[0] == 0 or table.shape[1] == 0:
            raise ValueError(f"mask_table must be [T, N] with T >= 1 and N >= 1, got shape "
                             f"{table.shape}")
        if not np.isin(table, (0, 1)).all():
            bad = np.unique(table[~np.isin(table, (0, 1))])[:5].tolist()
            raise ValueError(f"mask_table must hold booleans (or 0/1), got values {bad}")

    @classmethod
    def from_file(cls, path: str | os.PathLike, cyclic: bool = True) -> Trace:
        """Reads a ``[T, N]`` 0/1 table from ``.npz``, ``.npy`` or ``.csv``.

        * ``.npz``: the array named ``mask``, or the file's only array.
        * ``.npy``: the array.
        * ``.csv``: comma-separated 0/1 values, T rows (steps) of N columns (clients), no header.

        Raises:
          ValueError: another suffix, an ``.npz`` with several arrays and none named ``mask``, an
            unreadable or ragged CSV, or a table :class:`Trace` rejects.
        """
        path = os.fspath(path)
        suffix = os.path.splitext(path)[1].lower()
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                names = list(archive.files)
                if "mask" in names:
                    table = archive["mask"]
                elif len(names) == 1:
                    table = archive[names[0]]
                else:
                    raise ValueError(f"{path} holds arrays {names}; expected one named 'mask' or "
                                     "a single array")
        elif suffix == ".npy":
            table = np.load(path, allow_pickle=False)
        elif suffix == ".csv":
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # empty file: checked below
                    table = np.loadtxt(path, delimiter=",", ndmin=2)
            except ValueError as error:
                raise ValueError(f"{path} must be a CSV of 0/1 with T rows and N columns, the "
                                 f"same N on every row and no header: {error}") from None
        else:
            raise ValueError(f"path must end in .npz, .npy or .csv, got {path!r}")
        return cls(np.asarray(table), cyclic)

    @classmethod
    def from_intervals(
        cls,
        intervals: Sequence[Sequence[tuple[int, int]]],
        num_steps: int,
        cyclic: bool = True,
    ) -> Trace:
        """Builds the table from per-client on-intervals (FedScale-style traces, in steps).

        Client i is available at step t iff ``start <= t < end`` for one of its
        ``intervals[i]`` (half-open; overlaps are fine; an empty list means never available).

        Args:
          intervals: N >= 1 lists of ``(start, end)`` integer pairs with
            ``0 <= start <= end <= num_steps``.
          num_steps: T >= 1, the table's length.
          cyclic: as in :class:`Trace`.

        Returns:
          a :class:`Trace` with a ``[num_steps, N]`` table.

        Example:
          >>> Trace.from_intervals([[(0, 3)], [(2, 4), (6, 8)]], num_steps=8)
        """
        if not isinstance(num_steps, (int, np.integer)) or num_steps < 1:
            raise ValueError(f"num_steps must be an integer >= 1, got {num_steps!r}")
        if len(intervals) == 0:
            raise ValueError("intervals must hold one list of (start, end) pairs per client, "
                             "got none")
        clients, bounds = [], []
        for i, client in enumerate(intervals):
            pairs = np.asarray(list(client))
            pairs = pairs.reshape(0, 2).astype(np.int64) if pairs.size == 0 else pairs
            integer = np.issubdtype(pairs.dtype, np.integer)
            if pairs.ndim != 2 or pairs.shape[1] != 2 or not integer:
                raise ValueError(f"intervals[{i}] must be a list of integer (start, end) pairs, "
                                 f"got {pairs.dtype} array of shape {pairs.shape}")
            bad = (pairs[:, 0] < 0) | (pairs[:, 0] > pairs[:, 1]) | (pairs[:, 1] > num_steps)
            if bad.any():
                raise ValueError(
                    f"intervals[{i}] has (start, end) = {tuple(pairs[bad][0].tolist())}; each "
                    f"pair must satisfy 0 <= start <= end <= num_steps = {num_steps}"
                )
            clients.append(np.full(len(pairs), i))
            bounds.append(pairs)
        clients, bounds = np.concatenate(clients), np.concatenate(bounds)
        # Difference array: +1 where an interval opens, -1 where it closes; on where the sum > 0.
        delta = np.zeros((num_steps + 1, len(intervals)), np.int32)
        np.add.at(delta, (bounds[:, 0], clients), 1)
        np.add.at(delta, (bounds[:, 1], clients), -1)
        return cls(np.cumsum(delta, axis=0)[:num_steps] > 0, cyclic)

    def init(self, key: jax.Array, num_clients: int) -> State:
        del key
        table = np.asarray(self.mask_table, bool)
        if table.shape[1] != num_clients:
            raise ValueError(f"mask_table is [T, N] = {table.shape} but there are {num_clients} "
                             "clients; its width must be N")
        return jnp.asarray(table)

    def step(self, state: State, t: jax.Array, key: jax.Array) -> tuple[State, jax.Array]:
        del key
        num_rows = state.shape[0]
        if self.cyclic:
            return state, state[t % num_rows]
        return state, state[jnp.minimum(t, num_rows - 1)] & (t < num_rows)

    def skip(self, state: State, t: jax.Array, k: jax.Array, key: jax.Array) -> State:
        del t, k, key  # a lookup by slot
        return state

    def ended(self, state: State, t: jax.Array) -> jax.Array:
        """Played once: from slot T on no client is ever available again."""
        return jnp.bool_(False) if self.cyclic else t >= state.shape[0]
