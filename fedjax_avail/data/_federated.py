"""Federated data: every client's examples in one flat array, grouped by client.

Client ``i`` owns rows ``offsets[i] : offsets[i] + counts[i]`` of every array. Nothing is padded
per client, so memory is the size of the data set whatever the spread of client sizes, and a
minibatch of a cohort is drawn by index arithmetic on the device (:func:`sample_rows`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fedjax_avail._checks import check_int

_CONCRETE = (np.ndarray, np.generic, jax.Array, int, float, bool)


@struct.dataclass
class FederatedData:
    """Examples of N clients stored flat, as one pytree.

    Attributes:
      arrays: a dict of arrays with a leading example axis ``[M, ...]`` (for example ``x`` as uint8
        images and ``y`` as int labels), rows grouped by client.
      offsets: ``[N]`` int32, the first row of each client.
      counts: ``[N]`` int32, the number of rows of each client (every client has at least one).
      max_count: the largest client's row count (static metadata, set at construction): it
        sets the block width of per-client full-batch passes (DivFL's client gradients,
        Power-of-Choice's losses; :func:`fedjax_avail.local.block_width`), which read at most
        ``FULL_BATCH_BLOCK`` rows of a client at a time.

    Example:
      >>> fd = FederatedData.from_client_arrays([{"x": np.zeros((2, 3))}, {"x": np.ones((1, 3))}])
      >>> fd.num_clients, fd.counts.tolist()
      (2, [2, 1])
    """

    arrays: dict[str, np.ndarray]
    offsets: np.ndarray
    counts: np.ndarray
    max_count: int = struct.field(pytree_node=False, default=0)

    def __post_init__(self):
        # JAX rebuilds the pytree from other leaves (tracers inside jit/vmap, abstract values
        # when lowering): only an object of concrete data is checked; it was built from one.
        # A global array of a multi-process run is not readable here: its host data was checked.
        leaves = (self.offsets, self.counts, *jax.tree.leaves(self.arrays))
        if all(isinstance(leaf, _CONCRETE) and not isinstance(leaf, jax.core.Tracer)
               and getattr(leaf, "is_fully_addressable", True) for leaf in leaves):
            _validate_layout(self.arrays, self.offsets, self.counts)
            largest = int(np.max(np.asarray(self.counts)))
            if not self.max_count:
                object.__setattr__(self, "max_count", largest)
            elif self.max_count != largest:  # full-batch passes would read part of a client
                raise ValueError(f"max_count must be the largest of counts ({largest}), got "
                                 f"{self.max_count}; leave it out (replace(max_count=0) after "
                                 "replacing counts) to have it computed")

    @property
    def num_clients(self) -> int:
        """N, the number of clients."""
        return int(self.counts.shape[0])

    @property
    def num_examples(self) -> int:
        """M, the number of examples of all clients together."""
        return int(next(iter(self.arrays.values())).shape[0])

    @classmethod
    def from_client_arrays(cls, clients: Sequence[Mapping[str, np.ndarray]]) -> FederatedData:
        """Builds federated data from one dict of arrays per client.

        Args:
          clients: N dicts with the same keys; client i's arrays share a leading axis
            ``[m_i, ...]``.

        Raises:
          ValueError: no clients, differing keys, arrays of one client with different lengths,
            a client with no examples, a key whose kind of number differs between clients
            (unsigned, signed integers, floats...: uint8 images next to float ones would be
            joined as floats, and the uint8 ones no longer scaled to [0, 1]), or inputs
            ``"x"`` in unsigned integers of two dtypes (uint8 next to uint16 pixels: joined as
            uint16, the uint8 ones would be divided by 65535).
        """
        if len(clients) == 0:
            raise ValueError("clients must hold at least one client, got an empty sequence")
        keys = sorted(clients[0])
        if not keys:
            raise ValueError("clients[0] must hold at least one array, got an empty dict")
        counts = []
        for i, client in enumerate(clients):
            if sorted(client) != keys:
                raise ValueError(f"clients[{i}] has keys {sorted(client)}, expected {keys}")
            lengths = {k: len(client[k]) for k in keys}
            if len(set(lengths.values())) != 1:
                raise ValueError(f"clients[{i}] arrays differ in length: {lengths}")
            counts.append(lengths[keys[0]])
        for k in keys:  # int32 next to int64 joins exactly; unsigned pixels ("x") do not
            dtypes = [np.asarray(c[k]).dtype for c in clients]
            other = next((i for i, d in enumerate(dtypes) if d.kind != dtypes[0].kind
                          or (k == "x" and d.kind == "u" and d != dtypes[0])), None)
            if other is not None:
                raise ValueError(f"clients[{other}][{k!r}] has dtype {dtypes[other]} but "
                                 f"clients[0]'s is {dtypes[0]}; give every client's {k!r} one "
                                 "kind of number, and unsigned integers one dtype (integer "
                                 "pixels are scaled by their dtype's maximum: uint8 images "
                                 "joined with float ones would become floats, with uint16 ones "
                                 "uint16, and no longer be scaled to [0, 1])")
        arrays = {k: np.concatenate([np.asarray(c[k]) for c in clients]) for k in keys}
        return cls._from_counts(arrays, np.asarray(counts))

    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, np.ndarray],
        client_ids: np.ndarray,
        num_clients: int | None = None,
    ) -> FederatedData:
        """Builds federated data from pooled arrays and a client id per example.

        Args:
          arrays: dict of arrays ``[M, ...]`` (for example ``{"x": x, "y": y}``).
          client_ids: ``[M]`` integer ids in ``0..N-1``.
          num_clients: N. Default ``max(client_ids) + 1``. Every id in ``0..N-1`` must own at
            least one example: a client that would be empty is an error, never silently dropped.

        Raises:
          ValueError: length mismatch between arrays and ``client_ids``, ids that are not
            integers in ``0..N-1``, or a client id in ``0..N-1`` with no examples.
        """
        client_ids = np.asarray(client_ids)
        if client_ids.ndim != 1 or len(client_ids) == 0:
            raise ValueError(f"client_ids must be a non-empty [M] vector, got {client_ids.shape}")
        if not np.issubdtype(client_ids.dtype, np.integer):
            raise ValueError(f"client_ids must be integers, got dtype {client_ids.dtype}")
        for k, v in arrays.items():
            if len(v) != len(client_ids):
                raise ValueError(
                    f"arrays[{k!r}] has {len(v)} rows but client_ids has {len(client_ids)}; "
                    "they must have the same length"
                )
        if client_ids.min() < 0:
            raise ValueError(f"client_ids must be >= 0, got min {client_ids.min()}")
        if num_clients is not None:
            check_int("num_clients", num_clients)
            if client_ids.max() >= num_clients:
                raise ValueError(f"client_ids must be in [0, num_clients={num_clients}), got max "
                                 f"{client_ids.max()}")
        order = np.argsort(client_ids, kind="stable")
        counts = np.bincount(client_ids, minlength=num_clients or 0)
        return cls._from_counts({k: np.asarray(v)[order] for k, v in arrays.items()}, counts)

    @classmethod
    def _from_counts(cls, arrays: dict[str, np.ndarray], counts: np.ndarray) -> FederatedData:
        offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
        return cls(arrays=arrays, offsets=offsets.astype(np.int32), counts=counts.astype(np.int32))

    def client(self, i: int) -> dict[str, np.ndarray]:
        """Client i's arrays (host copies)."""
        lo, n = int(self.offsets[i]), int(self.counts[i])
        return {k: np.asarray(v[lo : lo + n]) for k, v in self.arrays.items()}

    def client_labels(self, key: str = "y") -> np.ndarray:
        """``[N]`` the smallest label each client holds (its only label under a one-label split).

        Raises:
          ValueError: labels that are not whole numbers (integers, booleans, or floats without
            a fraction).
        """
        labels = np.asarray(self.arrays[key])
        if np.issubdtype(labels.dtype, np.floating):
            fractional = labels[labels != np.round(labels)]  # NaN included
            if fractional.size:
                raise ValueError(f"arrays[{key!r}] must hold whole-number labels for "
                                 f"client_labels, got {fractional[0]} (dtype {labels.dtype})")
        elif not (np.issubdtype(labels.dtype, np.integer) or labels.dtype == bool):
            raise ValueError(f"arrays[{key!r}] must hold integer labels for client_labels, got "
                             f"dtype {labels.dtype}")
        return np.minimum.reduceat(labels, np.asarray(self.offsets)).astype(np.int32)

    def pooled(self) -> dict[str, np.ndarray]:
        """All examples as one dict of arrays ``[M, ...]``."""
        return dict(self.arrays)


def _validate_layout(arrays, offsets, counts) -> None:
    """Raises ValueError unless the arrays, offsets and counts form the flat layout."""
    if not isinstance(arrays, Mapping) or len(arrays) == 0:
        raise ValueError(f"arrays must be a non-empty dict of [M, ...] arrays, got {arrays!r}")
    lengths = {k: int(np.shape(v)[0]) if np.ndim(v) else None for k, v in arrays.items()}
    if None in lengths.values() or len(set(lengths.values())) != 1:
        raise ValueError(f"arrays must share one leading example axis, got lengths {lengths}")
    num_rows = next(iter(lengths.values()))
    offsets, counts = np.asarray(offsets), np.asarray(counts)
    for name, a in (("offsets", offsets), ("counts", counts)):
        if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"{name} must be an [N] integer vector, got {a.dtype} {a.shape}")
    if offsets.shape != counts.shape or counts.size == 0:
        raise ValueError(f"offsets and counts must both be [N] with N >= 1, got {offsets.shape} "
                         f"and {counts.shape}")
    empty = np.flatnonzero(counts < 1)
    if empty.size:
        raise ValueError(f"counts must be >= 1 (every client needs at least one example); "
                         f"{empty.size} clients are empty, e.g. clients {empty[:10].tolist()}")
    expected = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)[:-1]])
    if not np.array_equal(offsets, expected) or expected[-1] + counts[-1] != num_rows:
        raise ValueError(
            f"offsets must be the running sum of counts (client i owns rows offsets[i] : "
            f"offsets[i] + counts[i], grouped in client order) and sum(counts) must equal the "
            f"{num_rows} rows of the arrays; got offsets {offsets[:5].tolist()}..., sum(counts) "
            f"= {int(counts.sum())}. Build it with FederatedData.from_arrays or "
            "from_client_arrays"
        )
    if num_rows >= 2**31:
        raise ValueError(f"at most 2^31 - 1 examples are supported (int32 row indices), got "
                         f"{num_rows}")


def sample_rows(
    key: jax.Array,
    clients: jax.Array,
    offsets: jax.Array,
    counts: jax.Array,
    steps: int,
    batch_size: int,
) -> jax.Array:
    """Draws minibatch rows for a cohort, uniformly with replacement from each client's examples.

    Client i's draws come from ``fold_in(key, i)``, so its batches in a round depend on the round
    key and its own index only, not on which other clients were selected or in which order: two
    algorithms that select the same client in the same round train it on the same batches.

    Row indices are drawn as integers with ``jax.random.randint(fold_in(key, i), (C, B), 0,
    counts_i)`` (64 random bits reduced modulo the count), so every row of a client of any size
    is drawn with probability ``1 / counts_i`` up to a relative error below ``2^-32``.

    Args:
      key: the round's PRNG key for batches.
      clients: ``[K]`` int32 client indices.
      offsets: ``[K]`` first row of each cohort member.
      counts: ``[K]`` number of rows of each cohort member (>= 1).
      steps: local steps C.
      batch_size: examples per step B.

    Returns:
      ``[K, C, B]`` int32 row indices into the flat arrays.
    """
    def member_rows(client, offset, count):
        k = jax.random.fold_in(key, client)
        return offset + jax.random.randint(k, (steps, batch_size), 0, count, jnp.int32)

    return jax.vmap(member_rows)(clients, offsets, counts)
