"""pfl-research's CIFAR-10 benchmark shape, with synthetic pixels (timing only).

numpy only: ``pfl_fedavg.py`` imports it in the pfl venv and ``peer_comparison.py`` in the
project's, so both systems train on the same arrays. The shape is pfl's
``benchmarks/image_classification/configs/baseline.yaml`` (``cifar10_iid``): 1000 clients of 50
images ``[32, 32, 3]`` (``mean_datapoints_per_user: 50``, constant), normalised per channel
(float32, mean 0, std 1, what pfl's ``load_and_preprocess`` makes of the real images), labels
0..9; FedAvg with a cohort of 50, one local epoch of batches of 10 (5 steps), local lr 0.1,
central lr 1, every user weighted alike (``weight_by_samples: false``). pfl's ``simple_cnn``:
two 3 x 3 convolutions (32, 64 channels, no padding) with ReLU, 2 x 2 max pooling, a 128-unit
ReLU layer and 10 outputs (Glorot-uniform weights); its two dropout layers are left out here,
elementwise masks that cost nothing next to the convolutions (and ours has no dropout).
"""

from __future__ import annotations

import numpy as np

NUM_CLIENTS = 1000
IMAGES_PER_CLIENT = 50
IMAGE_SHAPE = (32, 32, 3)
NUM_CLASSES = 10
COHORT = 50
BATCH_SIZE = 10
LOCAL_EPOCHS = 1
LOCAL_STEPS = IMAGES_PER_CLIENT // BATCH_SIZE * LOCAL_EPOCHS  # 5: one epoch of batches of 10
CLIENT_LR = 0.1
SERVER_LR = 1.0
SEED = 0

# pfl's simple_cnn on [32, 32, 3]: conv 3x3x3x32 + 32, conv 3x3x32x64 + 64, dense
# (14 * 14 * 64) x 128 + 128, dense 128 x 10 + 10.
NUM_PARAMS = (3 * 3 * 3 * 32 + 32) + (3 * 3 * 32 * 64 + 64) + (14 * 14 * 64 * 128 + 128) \
    + (128 * 10 + 10)


# Multiply-adds of one image's forward pass: each layer's outputs times the inputs each one reads.
_CONV1 = 30 * 30 * 32 * (3 * 3 * 3)
_CONV2 = 28 * 28 * 64 * (3 * 3 * 32)
_DENSE = 14 * 14 * 64 * 128 + 128 * 10
# One SGD step on one image: the forward pass, then the backward pass's weight gradients (as
# many multiply-adds as the forward pass) and input gradients (the same, but the image's own,
# which nothing needs); 2 FLOP a multiply-add. 99.5 MFLOP.
FLOP_PER_IMAGE_STEP = 2 * (3 * (_CONV1 + _CONV2 + _DENSE) - _CONV1)
# One round: the cohort's clients each train one epoch over their images. 248.6 GFLOP.
FLOP_PER_ROUND = FLOP_PER_IMAGE_STEP * COHORT * IMAGES_PER_CLIENT * LOCAL_EPOCHS


def synthetic_clients(seed: int = SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, y, client)``: ``x`` float32 ``[M, 32, 32, 3]`` standard normal (normalised pixels),
    ``y`` int64 ``[M]`` uniform in 0..9 and ``client`` int64 ``[M]``, the owner of each row
    (client ``i`` holds rows ``50 i .. 50 i + 49``), ``M = 50,000``."""
    rng = np.random.default_rng(seed)
    m = NUM_CLIENTS * IMAGES_PER_CLIENT
    x = rng.standard_normal((m, *IMAGE_SHAPE), dtype=np.float32)
    y = rng.integers(0, NUM_CLASSES, size=m)
    return x, y, np.repeat(np.arange(NUM_CLIENTS), IMAGES_PER_CLIENT)
