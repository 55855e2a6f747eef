"""FedLaAvg's Sentiment140 model: GloVe embeddings, a two-layer LSTM of 16 units, two classes.

P:L339: "a two-layer LSTM binary classifier with 16 hidden units, using pretrained 25-dimensional
GloVe embeddings". The paper leaves open whether the embeddings are trained, the output head and
the initialisation (spec sec. 4.1). Here, by default, the GloVe matrix is frozen and kept out of
the parameters (a constant of the loss), so a client's model is the 4,834 LSTM and head
parameters rather than the V x 25 embedding table; a 2-way softmax reads the top layer's hidden
state at each tweet's last token; Flax's default initialisers are used.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from fedjax_avail.data import PAD
from fedjax_avail.tasks._models import DenseOI, positive
from fedjax_avail.tasks._task import Batch, Params, Task, classification_task


class LSTMClassifier(nn.Module):
    """Stacked LSTMs over a padded sequence, then a dense layer on the last token's hidden state.

    Inputs are ``[B, T]`` int32 token ids when ``vocab_size`` is set (a trainable ``nn.Embed``
    of ``embed_dim`` is then part of the parameters), or already embedded ``[B, T, D]`` floats
    otherwise. ``lengths`` ``[B]`` counts each sequence's real tokens (padding at the end); the
    LSTMs stop there (``nn.RNN(seq_lengths=...)``), so padding never changes the output.

    Attributes:
      hidden: units per LSTM layer (16 in FedLaAvg).
      num_layers: stacked LSTM layers (2).
      num_classes: output logits (2).
      vocab_size: V for a trainable embedding, or None for embedded inputs.
      embed_dim: D of the trainable embedding (25).
      embedding_init: initialiser of the trainable embedding (e.g. from a GloVe matrix).
    """

    hidden: int = 16
    num_layers: int = 2
    num_classes: int = 2
    vocab_size: int | None = None
    embed_dim: int = 25
    embedding_init: nn.initializers.Initializer = nn.initializers.normal(0.1)

    @nn.compact
    def __call__(self, inputs: jnp.ndarray, lengths: jnp.ndarray) -> jnp.ndarray:
        x = inputs
        if self.vocab_size is not None:
            x = nn.Embed(self.vocab_size, self.embed_dim, embedding_init=self.embedding_init)(x)
        for _ in range(self.num_layers):
            carry, x = nn.RNN(nn.OptimizedLSTMCell(self.hidden), return_carry=True)(
                x, seq_lengths=lengths
            )
        return DenseOI(self.num_classes)(carry[1])  # carry = (c, h) after the last real token


def lstm_classifier(
    vocab_size: int,
    embed_dim: int = 25,
    hidden: int = 16,
    num_layers: int = 2,
    num_classes: int = 2,
    embeddings: np.ndarray | None = None,
    train_embeddings: bool = False,
) -> Task:
    """FedLaAvg's Sentiment140 classifier (P:L339) as a softmax cross-entropy :class:`Task`.

    ``batch["x"]`` is ``[B, T]`` int32 token ids with 0 as padding at the end
    (:func:`fedjax_avail.data.encode`), ``batch["y"]`` ``[B]`` int labels; other arrays (e.g.
    ``hour``) are ignored. The loss is the batch mean of the cross-entropy; the metric is
    accuracy. An empty tweet (all padding) is read as one padding token.

    Args:
      vocab_size: V, token ids 0..V-1.
      embed_dim: D, the embedding size (25: GloVe Twitter 25d).
      hidden: LSTM units per layer (16).
      num_layers: LSTM layers (2).
      num_classes: classes (2).
      embeddings: ``[V, D]`` float matrix (:func:`fedjax_avail.data.load_glove`), or None for a
        random trainable embedding (with a warning: the paper uses GloVe).
      train_embeddings: with ``embeddings``, train them from that start (they then join the
        parameters, V x D more per client); False keeps them a constant outside the parameters.

    Returns:
      a :class:`Task` whose ``validate`` rejects token ids outside ``[0, vocab_size)`` and
      labels outside ``[0, num_classes)``; with frozen embeddings and the defaults its
      parameters number ``4 (D+H+1) H + 4 (2H+1) H + (H+1) 2 = 4,834``.

    Raises:
      ValueError: a size < 1, or ``embeddings`` not of shape ``[vocab_size, embed_dim]``.

    Example:
      >>> task = lstm_classifier(len(data.vocab), embeddings=load_glove(path, data.vocab))
    """
    positive(vocab_size=vocab_size, embed_dim=embed_dim, hidden=hidden, num_layers=num_layers,
              num_classes=num_classes)
    frozen = None
    if embeddings is None:
        warnings.warn("lstm_classifier: no embeddings given (e.g. fedjax_avail.data.load_glove); "
                      "using random trainable embeddings, unlike FedLaAvg's GloVe", stacklevel=2)
        module = LSTMClassifier(hidden, num_layers, num_classes, vocab_size, embed_dim)
    else:
        matrix = np.asarray(embeddings, np.float32)
        if matrix.shape != (vocab_size, embed_dim):
            raise ValueError(f"embeddings must have shape [vocab_size, embed_dim] = "
                             f"{[vocab_size, embed_dim]}, got {list(matrix.shape)}")
        if train_embeddings:
            def init_embedding(key, shape, dtype=jnp.float32):
                return jnp.asarray(matrix, dtype)

            module = LSTMClassifier(hidden, num_layers, num_classes, vocab_size, embed_dim,
                                    init_embedding)
        else:
            frozen = jnp.asarray(matrix)
            module = LSTMClassifier(hidden, num_layers, num_classes)

    return _token_task(module, frozen, vocab_size, num_classes)


def next_character_lstm(
    vocab_size: int,
    embed_dim: int = 8,
    hidden: int = 256,
    num_layers: int = 2,
) -> Task:
    """LEAF's and FedJAX's Shakespeare model: a trainable character embedding of 8, two LSTM
    layers of 256, a softmax over the vocabulary for the character after the window (LEAF
    ``models/shakespeare/stacked_lstm.py``; :func:`fedjax_avail.data.load_shakespeare`).

    ``batch["x"]`` is ``[B, T]`` character ids (0 is padding, which a full window never holds),
    ``batch["y"]`` ``[B]`` the next character's id. Smaller ``hidden`` (e.g. 64) suits CPUs.

    Raises:
      ValueError: a size < 1.
    """
    positive(vocab_size=vocab_size, embed_dim=embed_dim, hidden=hidden, num_layers=num_layers)
    module = LSTMClassifier(hidden, num_layers, vocab_size, vocab_size, embed_dim)
    return _token_task(module, None, vocab_size, vocab_size)


def _token_task(module: LSTMClassifier, frozen: jax.Array | None, vocab_size: int,
                num_classes: int) -> Task:
    """``module`` over ``batch["x"]`` token ids as a softmax cross-entropy task (``frozen``: an
    embedding matrix kept out of the parameters)."""

    def logits(params: Params, batch: Batch) -> jax.Array:
        tokens = batch["x"]
        lengths = jnp.maximum(jnp.sum(tokens != PAD, axis=-1), 1)
        inputs = tokens if frozen is None else frozen[tokens]
        return module.apply({"params": params}, inputs, lengths)

    def init(key: jax.Array) -> Params:
        return module.init(key, *_dummy(frozen))["params"]

    def check_tokens(x: np.ndarray, name: str) -> None:
        if x.ndim != 2 or not np.issubdtype(x.dtype, np.integer):
            raise ValueError(f"{name}['x'] must be [M, T] integer token ids, got {x.dtype} "
                             f"{x.shape}")
        if x.size and (x.min() < 0 or x.max() >= vocab_size):
            raise ValueError(f"{name}['x'] must hold token ids in [0, vocab_size={vocab_size}), "
                             f"got values in [{x.min()}, {x.max()}]")
        # the LSTMs read a row's first (number of non-padding tokens) tokens: padding at the
        # start or in the middle (Keras' pad_sequences pads at the start) would be misread
        token = x != PAD
        inside = np.flatnonzero(np.any(token[:, 1:] & ~token[:, :-1], axis=1))
        if inside.size:
            raise ValueError(f"{name}['x'] must hold padding ({PAD}) at the end of each row "
                             f"only; {inside.size} rows have it before a token, e.g. row "
                             f"{inside[0]}: {x[inside[0]][:12].tolist()} (pad at the end: "
                             "pad_sequences(..., padding='post'))")

    return classification_task(init, logits, num_classes, check_tokens)


def _dummy(frozen: jax.Array | None) -> tuple[jax.Array, jax.Array]:
    tokens = jnp.zeros((1, 1), jnp.int32)
    inputs = tokens if frozen is None else frozen[tokens]
    return inputs, jnp.ones((1,), jnp.int32)
