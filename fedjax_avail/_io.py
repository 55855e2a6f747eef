"""Atomic file writes: a reader never sees a half-written result."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Writes ``data`` to a temporary file beside ``path``, then renames it over ``path``.

    The file gets the mode an ordinary ``open(path, "w")`` would give it (0666 less the umask),
    not the 0600 of the temporary file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def check_writable_dir(path: str | Path, name: str = "out") -> Path:
    """Creates ``path`` as a directory if needed and checks a file can be written in it.

    Raises:
      ValueError: ``path`` exists and is not a directory, or cannot be created or written.
    """
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{name} {str(path)!r} exists and is not a directory; choose a "
                         "directory for the results")
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-check.")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise ValueError(f"{name} {str(path)!r} cannot be written: {error.strerror or error}"
                         ) from None
    return path
