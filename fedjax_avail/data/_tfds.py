"""The one door to TensorFlow Datasets: an optional import and a data source whose failures
(no network, no prepared copy) become one clear error."""

from __future__ import annotations

from typing import Any


def import_tfds(purpose: str) -> Any:
    """``tensorflow_datasets``, or an ImportError saying how to install it for ``purpose``."""
    try:
        import tensorflow_datasets as tfds
    except ImportError as e:
        raise ImportError(f"{purpose} needs tensorflow-datasets: pip install "
                          "'fedjax_avail[tfds]'") from e
    return tfds


def data_source(name: str, split: str, data_dir: str | None, download: bool, how: str = ""
                ) -> Any:
    """``tfds.data_source(name, split=...)`` (random access, no TensorFlow).

    Raises:
      FileNotFoundError: the data set is neither prepared in ``data_dir`` nor downloadable
        (TFDS raises many types for that: network errors, missing files, not-prepared errors);
        the message names the data set, the cause and ``how`` to get the files instead.
    """
    tfds = import_tfds(f"loading {name!r} through TFDS")
    try:
        return tfds.data_source(name, split=split, data_dir=data_dir, download=download)
    except Exception as error:  # noqa: BLE001 (any TFDS failure here means: data not there)
        if not download:
            raise FileNotFoundError(f"TFDS data set {name!r} is not prepared in "
                                    f"{data_dir or 'TFDS data_dir'} and download=False. {how}"
                                    .strip()) from error
        cause = str(error).strip().splitlines()[0][:200].rstrip(":. ") if str(error).strip() else ""
        raise FileNotFoundError(
            f"TFDS data set {name!r} ({split}) could not be downloaded: {type(error).__name__}"
            f"{': ' + cause if cause else ''}. {how}".strip()) from error
