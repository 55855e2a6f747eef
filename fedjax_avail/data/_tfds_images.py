"""Image data sets through TensorFlow Datasets: EMNIST, CIFAR-10, CelebA (WKAFL's experiments).

Each loader returns ``(train, test)`` dicts of host arrays: ``x`` uint8 images ``[M, H, W, C]``
(stored dtype; tasks normalise them) and ``y`` int32 labels ``[M]``. They need
``pip install 'fedjax_avail[tfds]'`` and, the first time, a network connection to download
(``download=True``); these development machines have none, so the tests run them on
``tfds.testing.mock_data``. TFDS reads no TensorFlow (``tfds.data_source``).
"""

from __future__ import annotations

import numpy as np

from fedjax_avail.data._tfds import data_source

Split = dict[str, np.ndarray]
EMNIST_VARIANTS = ("mnist", "byclass", "balanced", "letters", "digits", "bymerge")


def load_tfds_images(
    name: str,
    *,
    data_dir: str | None = None,
    download: bool = True,
    splits: tuple[str, str] = ("train", "test"),
    fields: dict[str, str] | None = None,
) -> tuple[Split, Split]:
    """Reads a TFDS image data set into ``(train, test)`` dicts of numpy arrays.

    Args:
      name: the TFDS name, e.g. ``"emnist/mnist"``, ``"cifar10"``.
      data_dir: TFDS's data directory (default its own).
      download: download if missing (needs a network).
      splits: the two split names.
      fields: output key -> TFDS feature (default ``{"x": "image", "y": "label"}``); a nested
        feature is ``"attributes/Smiling"``.

    Returns:
      ``(train, test)``: ``x`` uint8 ``[M, H, W, C]``, other fields as int32 ``[M]``.
    """
    fields = fields or {"x": "image", "y": "label"}
    out = []
    for split in splits:
        source = data_source(name, split, data_dir, download)
        rows = [source[i] for i in range(len(source))]
        arrays = {}
        for key, feature in fields.items():
            values = [_get(row, feature) for row in rows]
            if key == "x":
                arrays[key] = np.stack([np.asarray(v, np.uint8) for v in values])
            else:
                arrays[key] = np.asarray(values).astype(np.int32)
        out.append(arrays)
    return out[0], out[1]


def _get(row, feature: str):
    for part in feature.split("/"):
        row = row[part]
    return row


def load_emnist(variant: str = "mnist", data_dir: str | None = None,
                download: bool = True) -> tuple[Split, Split]:
    """EMNIST through TFDS: ``"mnist"`` (WKAFL's EMNIST MNIST, 10 balanced digits) or
    ``"byclass"`` (62 unbalanced classes), or another TFDS variant; images ``[M, 28, 28, 1]``.

    TFDS stores EMNIST images transposed relative to MNIST's orientation; they are returned as
    stored (a model does not care, a plot does)."""
    if variant not in EMNIST_VARIANTS:
        raise ValueError(f"variant must be one of {EMNIST_VARIANTS}, got {variant!r}")
    return load_tfds_images(f"emnist/{variant}", data_dir=data_dir, download=download)


def load_cifar10(data_dir: str | None = None, download: bool = True) -> tuple[Split, Split]:
    """CIFAR-10 through TFDS: images ``[M, 32, 32, 3]`` uint8, labels 0..9."""
    return load_tfds_images("cifar10", data_dir=data_dir, download=download)


def load_celeba(
    attribute: str = "Smiling", size: int = 84, data_dir: str | None = None,
    download: bool = True,
) -> tuple[Split, Split]:
    """CelebA through TFDS, as LEAF uses it: a binary attribute, images at ``size`` x ``size``.

    Each 218 x 178 image is centre-cropped to 178 x 178 and resized (bilinear) to
    ``size`` x ``size`` (84 in LEAF and WKAFL). ``identity`` holds the celebrity of each image, so
    ``FederatedData.from_arrays(train, train["identity"])``-style splits by celebrity are LEAF's
    natural clients (ids are remapped to 0..).

    Returns:
      ``(train, test)``: ``x`` uint8 ``[M, size, size, 3]``, ``y`` int32 attribute (0/1),
      ``identity`` int32 ``[M]`` (consecutive ids shared by both splits).
    """
    import jax

    train, test = load_tfds_images(
        "celeb_a", data_dir=data_dir, download=download,
        fields={"x": "image", "y": f"attributes/{attribute}", "identity": "identity/Identity_No"})
    ids = np.unique(np.concatenate([train["identity"], test["identity"]]))
    for split in (train, test):
        images = split["x"]
        height, width = images.shape[1:3]
        side = min(height, width)
        top, left = (height - side) // 2, (width - side) // 2
        square = images[:, top:top + side, left:left + side].astype(np.float32)
        resized = jax.image.resize(square, (len(images), size, size, images.shape[-1]),
                                   "bilinear")
        split["x"] = np.asarray(np.clip(np.rint(resized), 0, 255), np.uint8)
        split["identity"] = np.searchsorted(ids, split["identity"]).astype(np.int32)
    return train, test
