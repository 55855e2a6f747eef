"""Drop-outs: a selected client fails to report its update.

Drop-out is not availability: a client that drops out was available and selected, trained, and
its upload was lost. A process says so through an optional method

    ``reports(available, t, key) -> [N] bool or None``  (False: a selected client fails to report)

which the engine calls every round with the round's availability key. :class:`Dropout` draws
it; :class:`~fedjax_avail.availability.Combined` and a :class:`Dropout` around another process
forward the reports of the processes inside them, so drop-out composes with every combinator.
A user-written wrapper that holds a process with ``reports`` but has none itself would hide
the drop-outs: :func:`check_reports_forwarded` (called by ``simulate``) refuses it.
"""

from __future__ import annotations

import dataclasses

import jax

from fedjax_avail._checks import Probability, check_fields, checked
from fedjax_avail.availability._process import AvailabilityProcess, State, ended, skip

_REPORTS_STREAM = 0x5D0  # folded into the availability key; the wrapped process keeps its own


@dataclasses.dataclass(frozen=True, eq=False)
class Dropout:
    """Wraps a process: availability is unchanged, but each client that is selected fails to
    report its update with probability q, independently per round.

    The algorithms drop the updates of selected clients that do not report
    (``algorithms.reported``): they do not count as participants, and their participation
    stamps are not renewed. Under an asynchronous server a job whose client drops out still
    takes one of the K places of its update, which applies the others (``num_applied``). The
    wrapped process sees the same keys as it would unwrapped, so a
    run with and without drop-outs shares its availability masks. Drop-outs compose: inside
    ``all_of``/``any_of``, or around another ``Dropout`` (a client then reports only if it
    reports under every drop-out).

    Args:
      process: the availability process.
      q: drop-out probability in [0, 1].

    Raises:
      ValueError: q outside [0, 1].
    """

    process: AvailabilityProcess
    q: Probability

    def __post_init__(self):
        check_fields(self)

    def init(self, key: jax.Array, num_clients: int) -> State:
        return self.process.init(key, num_clients)

    def step(self, state: State, t: jax.Array, key: jax.Array) -> tuple[State, jax.Array]:
        return self.process.step(state, t, key)

    def skip(self, state: State, t: jax.Array, k: jax.Array, key: jax.Array) -> State:
        return skip(self.process, state, t, k, key)

    def ended(self, state: State, t: jax.Array) -> jax.Array:
        return ended(self.process, state, t)

    def reports(self, available: jax.Array, t: jax.Array, key: jax.Array) -> jax.Array:
        own, inner_key = jax.random.split(jax.random.fold_in(key, _REPORTS_STREAM))
        reports = jax.random.uniform(own, available.shape) >= self.q
        # A drop-out inside this one draws from its own stream: the two are independent.
        inner = reports_of(self.process, available, t, inner_key)
        return reports if inner is None else reports & inner


@checked
def dropout(process: AvailabilityProcess, q: Probability) -> Dropout:
    """``process`` with drop-out probability ``q`` for selected clients (see :class:`Dropout`)."""
    return Dropout(process, q)


def reports_of(
    process: AvailabilityProcess, available: jax.Array, t: jax.Array, key: jax.Array
) -> jax.Array | None:
    """``[N]`` bool, False where a selected client would fail to report; None: all report."""
    method = getattr(process, "reports", None)
    return None if method is None else method(available, t, key)


def check_reports_forwarded(process: AvailabilityProcess, where: str = "availability") -> None:
    """Raises ValueError if a process with drop-outs sits inside one without ``reports``.

    The engine asks only the outermost process for ``reports``; a wrapper that does not forward
    them would silently turn drop-outs off.
    """
    for name, child in _children(process, where):
        if getattr(process, "reports", None) is None and _drops_out(child):
            raise ValueError(
                f"{where} is a {type(process).__name__} that holds a process with drop-outs "
                f"({name} = {type(child).__name__}) but has no reports() method to forward "
                "them, so the drop-outs would be ignored. Put dropout(...) outermost, use "
                "all_of/any_of (they forward reports), or give the wrapper a reports(available, "
                "t, key) method"
            )
        check_reports_forwarded(child, name)


def _drops_out(process) -> bool:
    """True if ``process`` or a process inside it makes selected clients fail to report."""
    if getattr(process, "reports", None) is None:
        return any(_drops_out(child) for _, child in _children(process, ""))
    if getattr(process, "forwards_reports", False):  # all_of / any_of: only their children's
        return any(_drops_out(child) for _, child in _children(process, ""))
    return True


def _children(process, where: str):
    if dataclasses.is_dataclass(process):
        fields = {f.name: getattr(process, f.name) for f in dataclasses.fields(process)}
    else:
        fields = dict(getattr(process, "__dict__", {}))  # a plain class: its attributes
    for name, value in fields.items():
        items = enumerate(value) if isinstance(value, (tuple, list)) else [(None, value)]
        for i, item in items:
            if callable(getattr(item, "init", None)) and callable(getattr(item, "step", None)):
                suffix = "" if i is None else f"[{i}]"
                yield f"{where}.{name}{suffix}", item
