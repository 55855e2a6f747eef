"""A task: model initialisation, loss and metrics as pure functions of ``(params, batch)``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

Params = Any
Batch = Mapping[str, jax.Array]
Arrays = Mapping[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Task:
    """Model + loss (+ metrics), as pure functions.

    Attributes:
      init: ``key -> params`` (any pytree).
      loss: ``(params, batch) -> scalar``, the mean loss over the batch. ``batch`` is a dict like
        one client's arrays, with a leading batch axis.
      metrics: optional ``(params, batch) -> dict[str, scalar]`` of batch means (e.g. accuracy).
      validate: optional ``(arrays, name) -> None``, called by :func:`fedjax_avail.simulate` on
        the training and test arrays (host numpy, before anything is compiled); raises
        ``ValueError`` naming ``name`` for data the loss would silently misread (labels out of
        range, wrong shapes). The built-in tasks set it.

    The functions must be pure, as JAX's transformations require: whatever they read besides
    their arguments (a global, an attribute) is read when they are traced, and a task's
    evaluation programs are traced once per process, shared by every ``simulate`` of it (as
    ``jax.jit`` shares a function's traces). To change such a value, make a new ``Task``.

    Example:
      >>> task = Task(init=lambda key: jnp.zeros(()),
      ...             loss=lambda w, b: jnp.mean((w - b["y"]) ** 2))
    """

    init: Callable[[jax.Array], Params]
    loss: Callable[[Params, Batch], jax.Array]
    metrics: Callable[[Params, Batch], dict[str, jax.Array]] | None = None
    validate: Callable[[Arrays, str], None] | None = None


def normalize_images(x: jax.Array) -> jax.Array:
    """Pixels to float32: integers divided by their dtype's maximum, floats unchanged.

    uint8 (0..255, how images are stored) becomes [0, 1]; uint16 is divided by 65535; bool
    becomes 0/1. Float images pass through as they are: float pixels already in [0, 1] (the
    torchvision convention) stay in [0, 1], and raw 0-255 floats (WKAFL's code) stay 0-255.
    The classification tasks refuse other integer dtypes (:func:`check_pixels`).
    """
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.integer):
        return x.astype(jnp.float32) / float(jnp.iinfo(x.dtype).max)
    return x.astype(jnp.float32)


IMAGE_INTEGERS = (np.uint8, np.uint16)


def check_pixels(x: np.ndarray, name: str) -> None:
    """Raises ValueError for pixels :func:`normalize_images` would misread.

    Integer pixels are divided by their dtype's maximum, which is right for uint8 and uint16
    images; 0..255 pixels held as int64 (what ``np.array`` of Python ints gives) would become
    about 0, so other integer dtypes are refused.
    """
    if x.dtype == bool or np.issubdtype(x.dtype, np.floating):
        return
    if np.issubdtype(x.dtype, np.integer) and x.dtype.type in IMAGE_INTEGERS:
        return
    if np.issubdtype(x.dtype, np.integer):
        raise ValueError(
            f"{name} has dtype {x.dtype}: integer pixels are divided by their dtype's maximum "
            f"({np.iinfo(x.dtype).max}), which would make them about 0; store images as uint8 "
            f"(0..255) or uint16, or as floats (used as they are)")
    raise ValueError(f"{name} must hold numeric pixels, got dtype {x.dtype}")


def check_labels(arrays: Arrays, name: str, num_classes: int, key: str = "y") -> None:
    """Raises ValueError unless ``arrays[key]`` holds integer labels in ``[0, num_classes)``."""
    if key not in arrays:
        raise ValueError(f"{name} must hold labels under {key!r}; it has {sorted(arrays)}")
    labels = np.asarray(arrays[key])
    if not (np.issubdtype(labels.dtype, np.integer) or labels.dtype == bool):
        raise ValueError(f"{name}[{key!r}] must hold integer class labels, got dtype "
                         f"{labels.dtype} (cast them with .astype(int) if they are whole numbers)")
    if labels.ndim != 1:
        raise ValueError(f"{name}[{key!r}] must be [M] labels, got shape {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"{name}[{key!r}] must hold labels in [0, {num_classes}) for this "
                         f"{num_classes}-class task, got values in "
                         f"[{labels.min()}, {labels.max()}]")


def classification_task(
    init: Callable[[jax.Array], Params],
    logits: Callable[[Params, Batch], jax.Array],
    num_classes: int,
    check_inputs: Callable[[np.ndarray, str], None],
) -> Task:
    """A softmax cross-entropy task with an accuracy metric over a ``logits`` function.

    Args:
      init: ``key -> params``.
      logits: ``(params, batch) -> [B, num_classes]``.
      num_classes: C; ``batch["y"]`` must hold integer labels in ``[0, C)``.
      check_inputs: ``(x, name) -> None``, raises ValueError for inputs the model would misread.
    """

    def loss(params: Params, batch: Batch) -> jax.Array:
        return optax.softmax_cross_entropy_with_integer_labels(
            logits(params, batch), batch["y"]).mean()

    def metrics(params: Params, batch: Batch) -> dict[str, jax.Array]:
        return {"accuracy": jnp.mean(jnp.argmax(logits(params, batch), -1) == batch["y"])}

    def validate(arrays: Arrays, name: str) -> None:
        if "x" not in arrays:
            raise ValueError(f"{name} must hold inputs under 'x'; it has {sorted(arrays)}")
        check_inputs(np.asarray(arrays["x"]), name)
        check_labels(arrays, name, num_classes)

    return Task(init=init, loss=loss, metrics=metrics, validate=validate)


def _without_ones(shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` without its axes of size 1."""
    return tuple(int(d) for d in shape if d != 1)


def classification(module: nn.Module, input_shape: tuple[int, ...]) -> Task:
    """A softmax cross-entropy classification task over a Flax module.

    The module maps float images ``[B, *input_shape]`` to logits ``[B, classes]``;
    ``batch["x"]`` is normalised by :func:`normalize_images` (uint8 to [0, 1], floats unchanged)
    and ``batch["y"]`` holds int labels ``[B]`` in ``[0, classes)``. ``validate`` rejects labels
    out of range or not integers, and inputs whose examples do not hold ``prod(input_shape)``
    values; for an ``input_shape`` of several axes, also examples whose axes (those of size 1
    aside) are not ``input_shape``'s in its order, nor flattened (channels-first images of
    the same size among them).
    """
    input_shape = tuple(int(d) for d in input_shape)
    dummy = jnp.zeros((1, *input_shape), jnp.float32)
    out = jax.eval_shape(lambda: module.apply(module.init(jax.random.PRNGKey(0), dummy), dummy))
    num_classes = int(out.shape[-1])
    size = int(np.prod(input_shape))

    def init(key: jax.Array) -> Params:
        return module.init(key, dummy)["params"]

    def logits(params: Params, batch: Batch) -> jax.Array:
        x = normalize_images(batch["x"]).reshape((-1, *input_shape))
        return module.apply({"params": params}, x)

    squeezed = _without_ones(input_shape)

    def check_inputs(x: np.ndarray, name: str) -> None:
        if x.ndim < 1 or int(np.prod(x.shape[1:])) != size:
            raise ValueError(f"{name}['x'] must hold examples of {size} values (input_shape "
                             f"{input_shape}), got shape {x.shape}")
        # the same number of values in another order of axes (channels-first images [M, C,
        # H, W] for (H, W, C)) would be reshaped into scrambled examples; a vector of
        # features takes any layout, and axes of size 1 may move (torchvision's [M, 1, 28, 28]
        # for (28, 28, 1))
        example = _without_ones(x.shape[1:])
        if len(input_shape) > 1 and example not in (squeezed, (size,)):
            raise ValueError(
                f"{name}['x'] has examples of shape {tuple(x.shape[1:])}, but the task reads "
                f"input_shape {input_shape} (its axes in this order, those of size 1 aside, "
                f"or flattened to ({size},)): reorder the axes (channels-first images "
                "[M, C, H, W]: np.moveaxis(x, 1, -1))")
        check_pixels(x, f"{name}['x']")

    return classification_task(init, logits, num_classes, check_inputs)
