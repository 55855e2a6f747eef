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


@struct.dataclass
class FederatedData:
    """Examples of N clients stored flat, as one pytree.

    Attributes:
      arrays: a dict of arrays with a leading example axis ``[M, ...]`` (for example ``x`` as uint8
        images and ``y`` as int labels), rows grouped by client.
      offsets: ``[N]`` int32, the first row of each client.
      counts: ``[N]`` int32, the number of rows of each client (every client has at least one).

    Example:
      >>> fd = FederatedData.from_client_arrays([{"x": np.zeros((2, 3))}, {"x": np.ones((1, 3))}])
      >>> fd.num_clients, fd.counts.tolist()
      (2, [2, 1])
    """

    arrays: dict[str, np.ndarray]
    offsets: np.ndarray
    counts: np.ndarray

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
          ValueError: no clients, differing keys, arrays of one client with different lengths, or
            a client with no examples.
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
        arrays = {k: np.concatenate([np.asarray(c[k]) for c in clients]) for k in keys}
        return cls._from_counts(arrays, np.asarray(counts))

    @classmethod
    def from_arrays(
        cls, arrays: Mapping[str, np.ndarray], client_ids: np.ndarray
    ) -> FederatedData:
        """Builds federated data from pooled arrays and a client id per example.

        Args:
          arrays: dict of arrays ``[M, ...]`` (for example ``{"x": x, "y": y}``).
          client_ids: ``[M]`` ints in ``0..N-1``; N is ``max(client_ids) + 1`` and every id in that
            range must own at least one example.

        Raises:
          ValueError: length mismatch between arrays and ``client_ids``, negative ids, or a client
            id in ``0..N-1`` with no examples.
        """
        client_ids = np.asarray(client_ids)
        if client_ids.ndim != 1 or len(client_ids) == 0:
            raise ValueError(f"client_ids must be a non-empty [M] vector, got {client_ids.shape}")
        for k, v in arrays.items():
            if len(v) != len(client_ids):
                raise ValueError(
                    f"arrays[{k!r}] has {len(v)} rows but client_ids has {len(client_ids)}; "
                    "they must have the same length"
                )
        if client_ids.min() < 0:
            raise ValueError(f"client_ids must be >= 0, got min {client_ids.min()}")
        order = np.argsort(client_ids, kind="stable")
        counts = np.bincount(client_ids)
        return cls._from_counts({k: np.asarray(v)[order] for k, v in arrays.items()}, counts)

    @classmethod
    def _from_counts(cls, arrays: dict[str, np.ndarray], counts: np.ndarray) -> FederatedData:
        lengths = {k: len(v) for k, v in arrays.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"arrays must share their leading length, got {lengths}")
        empty = np.flatnonzero(counts == 0)
        if empty.size:
            raise ValueError(
                f"every client needs at least one example; clients {empty[:10].tolist()} are empty"
            )
        offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
        return cls(arrays=arrays, offsets=offsets.astype(np.int32), counts=counts.astype(np.int32))

    def client(self, i: int) -> dict[str, np.ndarray]:
        """Client i's arrays (host copies)."""
        lo, n = int(self.offsets[i]), int(self.counts[i])
        return {k: np.asarray(v[lo : lo + n]) for k, v in self.arrays.items()}

    def client_labels(self, key: str = "y") -> np.ndarray:
        """``[N]`` the smallest label each client holds (its only label under a one-label split)."""
        labels = np.asarray(self.arrays[key])
        return np.minimum.reduceat(labels, np.asarray(self.offsets)).astype(np.int32)

    def pooled(self) -> dict[str, np.ndarray]:
        """All examples as one dict of arrays ``[M, ...]``."""
        return dict(self.arrays)


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
    keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, clients)
    u = jax.vmap(lambda k: jax.random.uniform(k, (steps, batch_size)))(keys)
    local = jnp.floor(u * counts[:, None, None]).astype(jnp.int32)
    local = jnp.minimum(local, counts[:, None, None] - 1)
    return offsets[:, None, None] + local
