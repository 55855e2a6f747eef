"""Each client's full-batch loss and gradient of softmax regression, one client at a time.

Plain numpy in float64 from the closed form, nothing from the library: for client i with rows
``z_ij = (x_ij, y_ij)``, ``p_ij = softmax(W x_ij + b)``, the loss is
``f_i = (1 / n_i) sum_j -log p_ij[y_ij]`` and its gradient
``dW = (1 / n_i) sum_j (p_ij - e_{y_ij}) x_ij^T``, ``db = (1 / n_i) sum_j (p_ij - e_{y_ij})``.
"""

from __future__ import annotations

import numpy as np


def logistic_full_batch(kernel, bias, x, y, offsets, counts, clients):
    """``(dW [K, C, D], db [K, C], losses [K])`` of ``clients``; ``x`` as the model reads it
    (float, already scaled), ``kernel`` ``[C, D]`` (the library's ``DenseOI`` layout)."""
    kernel, bias = np.asarray(kernel, np.float64), np.asarray(bias, np.float64)
    grads_w, grads_b, losses = [], [], []
    for i in clients:
        rows = slice(int(offsets[i]), int(offsets[i]) + int(counts[i]))
        xi, yi = np.asarray(x[rows], np.float64), np.asarray(y[rows])
        logits = xi @ kernel.T + bias
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        losses.append(-np.mean(np.log(p[np.arange(len(yi)), yi])))
        residual = p - np.eye(len(bias))[yi]
        grads_w.append(residual.T @ xi / len(yi))
        grads_b.append(residual.mean(axis=0))
    return np.stack(grads_w), np.stack(grads_b), np.asarray(losses)
