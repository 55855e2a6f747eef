"""One run per directory: an advisory lock file naming the process that holds it.

Two runs writing the same output or checkpoint directory at once corrupt each other's files
(orbax's temporary directories collide, and which run dies varies). :class:`DirectoryLock`
takes ``DIR/.fedjax-avail.lock`` for the length of a run: the second run refuses at once,
naming the process (pid, host, command, start time) that holds it. The lock is an OS lock
(``fcntl.flock``) on the open file, so the OS releases it when the holder dies, even by
SIGKILL; the file it leaves behind only names the dead holder, and the next run takes it over
with a notice. On Windows the lock is ``msvcrt.locking`` on the file's first byte, which the OS
releases the same way. A filesystem that supports no file locks (some network mounts) gets a
warning and no lock.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import time
import warnings
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt

LOCK_NAME = ".fedjax-avail.lock"


class DirectoryBusyError(RuntimeError):
    """Another live process holds the directory's lock."""


def _holder_text(info: dict[str, Any]) -> str:
    started = info.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if started else "?"
    return (f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started {when}, "
            f"command: {info.get('command', '?')}")


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _try_lock(fd: int) -> None:
    """Takes the OS lock on ``fd`` without waiting; OSError if another process holds it."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    else:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)


class DirectoryLock:
    """``with DirectoryLock(path, "out_dir"):`` holds ``path/.fedjax-avail.lock``.

    Args:
      directory: the directory to lock (created if missing).
      name: the argument it came from, for messages (``out_dir``, ``checkpoint_dir``).

    Raises:
      DirectoryBusyError: another running process holds it (on entry, before any compute).
    """

    def __init__(self, directory: str | Path, name: str):
        self.path = Path(directory) / LOCK_NAME
        self.name = name
        self._fd: int | None = None

    def __enter__(self) -> DirectoryLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        previous = _read(self.path)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _try_lock(fd)
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES,
                                   errno.EDEADLK):
                warnings.warn(f"{self.name} {self.path.parent}: this filesystem gives no file "
                              f"locks ({error.strerror}); nothing stops a second run from "
                              "using the directory at the same time", stacklevel=2)
            else:
                os.close(fd)
                raise self._busy(_read(self.path)) from None
        if previous.get("pid") not in (None, os.getpid()):
            warnings.warn(f"{self.name} {self.path.parent}: taking over the lock left by a "
                          f"run that is no longer running ({_holder_text(previous)})",
                          stacklevel=2)
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "command": " ".join(sys.argv) or sys.executable, "started": time.time()}
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(info).encode())
        self._fd = fd
        return self

    def _busy(self, info: dict[str, Any]) -> DirectoryBusyError:
        return DirectoryBusyError(
            f"{self.name} {self.path.parent} is in use by another run ({_holder_text(info)}); "
            "wait for it to finish, or choose another directory")

    def __exit__(self, *exc: Any) -> None:
        if self._fd is None:
            return
        try:  # cleared, not removed: removing could race with a run that just opened it
            os.ftruncate(self._fd, 0)
        finally:
            os.close(self._fd)  # closing releases the lock
            self._fd = None
