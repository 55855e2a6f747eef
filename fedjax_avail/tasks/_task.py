"""A task: model initialisation, loss and metrics as pure functions of ``(params, batch)``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn

Params = Any
Batch = Mapping[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class Task:
    """Model + loss (+ metrics), as pure functions.

    Attributes:
      init: ``key -> params`` (any pytree).
      loss: ``(params, batch) -> scalar``, the mean loss over the batch. ``batch`` is a dict like
        one client's arrays, with a leading batch axis.
      metrics: optional ``(params, batch) -> dict[str, scalar]`` of batch means (e.g. accuracy).

    Example:
      >>> task = Task(init=lambda key: jnp.zeros(()),
      ...             loss=lambda w, b: jnp.mean((w - b["y"]) ** 2))
    """

    init: Callable[[jax.Array], Params]
    loss: Callable[[Params, Batch], jax.Array]
    metrics: Callable[[Params, Batch], dict[str, jax.Array]] | None = None


def normalize_images(x: jax.Array) -> jax.Array:
    """uint8 pixels (as stored) to float32 in [0, 1]."""
    return x.astype(jnp.float32) / 255.0


def classification(module: nn.Module, input_shape: tuple[int, ...]) -> Task:
    """A softmax cross-entropy classification task over a Flax module.

    The module maps float images ``[B, *input_shape]`` in [0, 1] to logits ``[B, classes]``;
    ``batch["x"]`` is uint8 (normalised here) and ``batch["y"]`` int labels ``[B]``.
    """

    def init(key: jax.Array) -> Params:
        return module.init(key, jnp.zeros((1, *input_shape), jnp.float32))["params"]

    def logits(params: Params, batch: Batch) -> jax.Array:
        x = normalize_images(batch["x"]).reshape((-1, *input_shape))
        return module.apply({"params": params}, x)

    def loss(params: Params, batch: Batch) -> jax.Array:
        labels = batch["y"]
        return optax.softmax_cross_entropy_with_integer_labels(logits(params, batch), labels).mean()

    def metrics(params: Params, batch: Batch) -> dict[str, jax.Array]:
        return {"accuracy": jnp.mean(jnp.argmax(logits(params, batch), -1) == batch["y"])}

    return Task(init=init, loss=loss, metrics=metrics)
