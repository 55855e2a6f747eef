"""The server's model step: an optax transformation applied to the negated aggregate delta.

``x <- x + server_lr * Delta`` is SGD with learning rate ``server_lr`` on the pseudo-gradient
``-Delta`` (Reddi et al. 2021, "Adaptive Federated Optimization", Alg. 2); FedAdam is Adam on the
same pseudo-gradient.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree


def server_optimizer(name: str, server_lr: float) -> optax.GradientTransformation:
    """The server optimizer by name: ``"sgd"`` or ``"adam"`` (b1=0.9, b2=0.99, eps=1e-3).

    The Adam constants are FedAdam's in Reddi et al. 2021 (Sec. 5: beta1 = 0.9, beta2 = 0.99,
    tau = 1e-3); the FedLaAvg supplement compares against FedAdam without giving its constants.
    """
    if name == "sgd":
        return optax.sgd(server_lr)
    if name == "adam":
        return optax.adam(server_lr, b1=0.9, b2=0.99, eps=1e-3)
    raise ValueError(f"server_optimizer must be 'sgd' or 'adam', got {name!r}")


def apply_delta(
    optimizer: optax.GradientTransformation, params, opt_state, delta: jax.Array,
    received: jax.Array | bool = True,
) -> tuple:
    """Moves the global model along the aggregate delta ``[P]``; returns ``(params, opt_state)``.

    ``received`` (``[]`` bool): whether any update came in. Without one the server takes no
    step: model and optimizer state stay as they were (Adam's moments would otherwise move the
    model along their momentum in a round nobody took part in, and count a step).
    """
    _, unravel = ravel_pytree(params)
    pseudo_grad = unravel(-delta)
    updates, new_state = optimizer.update(pseudo_grad, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    return jax.tree.map(lambda new, old: jnp.where(received, new, old),
                        (new_params, new_state), (params, opt_state))


def add_delta(params, delta: jax.Array):
    """``x + delta`` for a pytree x and a flat ``[P]`` delta."""
    flat, unravel = ravel_pytree(params)
    return unravel(flat + delta)
