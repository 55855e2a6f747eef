"""Flax models of the papers, each wrapped as a classification :class:`Task`."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_avail._checks import check_int
from fedjax_avail.tasks._conv import conv_general_dilated
from fedjax_avail.tasks._matmul import dot_general
from fedjax_avail.tasks._pool import max_pool
from fedjax_avail.tasks._task import Task, classification

# flax's convolution with ours (fast inside loops on a CPU; parameters and names unchanged)
Conv = functools.partial(nn.Conv, conv_general_dilated=conv_general_dilated)
# flax's dense layer with our product (gradients without transposes on a CPU; same parameters)
Dense = functools.partial(nn.Dense, dot_general=dot_general)


class DenseOI(nn.Module):
    """A dense layer whose kernel is stored ``[out, in]`` (``nn.Dense`` stores ``[in, out]``).

    Same function as ``nn.Dense``; the layout is for speed: per-client weights make every matmul
    a batched one (``[K, B, in] x [K, out, in]``), and on XLA:CPU this layout ran the forward
    pass 1.3x and the weight gradient 3.5x faster than ``[in, out]`` for MNIST logistic
    regression (K=100, B=5; ``benchmarks/README.md``).
    """

    features: int
    kernel_init: nn.initializers.Initializer = nn.initializers.lecun_normal(
        in_axis=-1, out_axis=-2
    )
    bias_init: nn.initializers.Initializer = nn.initializers.zeros

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        kernel = self.param("kernel", self.kernel_init, (self.features, x.shape[-1]))
        bias = self.param("bias", self.bias_init, (self.features,))
        return jnp.einsum("...i,oi->...o", x, kernel) + bias


INITS = ("flax", "torch")  # the initialisations of the papers' models (see :func:`_conv`)


def _check_init(init: str) -> None:
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")


def _uniform(bound: float) -> nn.initializers.Initializer:
    """``U(-bound, bound)``."""
    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)
    return init


def _conv(features: int, size: tuple[int, int], padding: str, init: str,
         channels: int) -> nn.Conv:
    """A convolution initialised as ``init`` says, on inputs with ``channels`` channels.

    ``"flax"``: Flax's defaults (LeCun normal kernel, zero bias). ``"torch"``: PyTorch's
    ``nn.Conv2d``/``nn.Linear`` defaults, what the authors' PyTorch code trained from (WKAFL):
    kernel and bias ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``, fan_in = channels x kernel area,
    a third of LeCun's variance. On WKAFL's raw 0-255 pixels this matters: the CNN's first
    logits are ~10x larger under Flax's defaults (about 3^(4/2) = 9 over four layers; initial
    loss ~100 on MNIST against ~10).
    """
    _check_init(init)
    if init == "flax":
        return Conv(features, size, padding=padding)
    bound = 1.0 / math.sqrt(channels * math.prod(size))
    return Conv(features, size, padding=padding, bias_init=_uniform(bound),
                   kernel_init=nn.initializers.variance_scaling(1 / 3, "fan_in", "uniform"))


def _dense(features: int, init: str, inputs: int) -> DenseOI:
    """A :class:`DenseOI` initialised as ``init`` says (:func:`_conv`), on ``inputs`` features."""
    _check_init(init)
    if init == "flax":
        return DenseOI(features)
    return DenseOI(features, bias_init=_uniform(1.0 / math.sqrt(inputs)),
                   kernel_init=nn.initializers.variance_scaling(1 / 3, "fan_in", "uniform",
                                                                in_axis=-1, out_axis=-2))


class LogisticRegression(nn.Module):
    """Multinomial logistic regression (FedLaAvg's convex MNIST model, P:L337); zero init."""

    num_classes: int

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        x = x.reshape((x.shape[0], -1))
        return DenseOI(self.num_classes, kernel_init=nn.initializers.zeros)(x)


class MLP(nn.Module):
    """ReLU multi-layer perceptron."""

    hidden: Sequence[int]
    num_classes: int

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        x = x.reshape((x.shape[0], -1))
        for width in self.hidden:
            x = nn.relu(DenseOI(width)(x))
        return DenseOI(self.num_classes)(x)


class LeNet5(nn.Module):
    """LeNet-5 (LeCun et al. 1998) with ReLU and max pooling; inputs ``[B, H, W, C]``.

    ``padding`` of the first convolution: ``"SAME"`` for 28 x 28 digits (16 x 5 x 5 features
    after the second pooling, as LeNet-5 on 32 x 32), ``"VALID"`` as WKAFL's CIFAR-10 code
    (``Conv2d(3, 6, 5)``: 62,006 parameters on 32 x 32 x 3).
    """

    num_classes: int
    padding: str = "SAME"

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        x = max_pool(nn.relu(Conv(6, (5, 5), padding=self.padding)(x)), (2, 2), (2, 2))
        x = max_pool(nn.relu(Conv(16, (5, 5), padding="VALID")(x)), (2, 2), (2, 2))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(Dense(120)(x))
        x = nn.relu(Dense(84)(x))
        return Dense(self.num_classes)(x)


class CNN(nn.Module):
    """WKAFL's EMNIST CNN (``wkafl.md`` 4.2): two 5 x 5 convolutions (32, 64 channels, no
    padding), each with ReLU and 2 x 2 max pooling, a 512-unit ReLU layer and the output layer;
    582,026 parameters on 28 x 28 digits with 10 classes (608,702 with 62); ``initializer`` as
    :func:`_conv` (the authors' code: ``"torch"``)."""

    num_classes: int
    initializer: str = "flax"

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        init = self.initializer
        x = max_pool(nn.relu(_conv(32, (5, 5), "VALID", init, x.shape[-1])(x)), (2, 2), (2, 2))
        x = max_pool(nn.relu(_conv(64, (5, 5), "VALID", init, x.shape[-1])(x)), (2, 2), (2, 2))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(_dense(512, init, x.shape[-1])(x))
        return _dense(self.num_classes, init, 512)(x)


class CelebACNN(nn.Module):
    """WKAFL's CelebA model (``wkafl.md`` 4.2): one 4 x 4 convolution (10 channels, no padding),
    ReLU, 2 x 2 max pooling, a 100-unit ReLU layer (16,000 inputs at 84 x 84) and 2 outputs;
    1,600,792 parameters."""

    num_classes: int = 2

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        x = max_pool(nn.relu(Conv(10, (4, 4), padding="VALID")(x)), (2, 2), (2, 2))
        x = x.reshape((x.shape[0], -1))
        return DenseOI(self.num_classes)(nn.relu(DenseOI(100)(x)))


def positive(**kwargs: int) -> None:
    """Raises ValueError naming the first argument that is not an integer >= 1."""
    for name, value in kwargs.items():
        check_int(name, value)


def logistic_regression(num_features: int = 784, num_classes: int = 10) -> Task:
    """Softmax regression on flattened uint8 inputs of ``num_features`` pixels."""
    positive(num_features=num_features, num_classes=num_classes)
    return classification(LogisticRegression(num_classes), (num_features,))


def mlp(num_features: int = 784, hidden: Sequence[int] = (200, 200), num_classes: int = 10) -> Task:
    """A ReLU MLP on flattened uint8 inputs."""
    positive(num_features=num_features, num_classes=num_classes,
             **{f"hidden[{i}]": width for i, width in enumerate(hidden)})
    return classification(MLP(tuple(hidden), num_classes), (num_features,))


def _image_shape(input_shape, num_classes: int) -> tuple[int, int, int]:
    if len(tuple(input_shape)) != 3:
        raise ValueError(f"input_shape must be (H, W, C), got {input_shape!r}")
    height, width, channels = input_shape
    positive(num_classes=num_classes, height=height, width=width, channels=channels)
    return tuple(input_shape)


def lenet5(input_shape: tuple[int, int, int] = (28, 28, 1), num_classes: int = 10,
           padding: str = "SAME") -> Task:
    """LeNet-5 on uint8 images of ``input_shape`` (H, W, C); ``padding="VALID"`` is the
    CIFAR-10 LeNet of WKAFL's code."""
    if padding not in ("SAME", "VALID"):
        raise ValueError(f"padding must be 'SAME' or 'VALID', got {padding!r}")
    return classification(LeNet5(num_classes, padding), _image_shape(input_shape, num_classes))


def cnn(input_shape: tuple[int, int, int] = (28, 28, 1), num_classes: int = 10,
        init: str = "flax") -> Task:
    """WKAFL's EMNIST CNN (:class:`CNN`) on uint8 images of ``input_shape``; ``init``
    ``"flax"`` or ``"torch"`` (PyTorch's defaults, the authors' code; :func:`_conv`)."""
    _check_init(init)
    return classification(CNN(num_classes, init), _image_shape(input_shape, num_classes))


def celeba_cnn(input_shape: tuple[int, int, int] = (84, 84, 3), num_classes: int = 2) -> Task:
    """WKAFL's CelebA model (:class:`CelebACNN`) on uint8 images of ``input_shape``."""
    return classification(CelebACNN(num_classes), _image_shape(input_shape, num_classes))
