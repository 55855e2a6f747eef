"""The argument checks every public constructor and function goes through.

One layer, driven by the annotations the code already carries: a dataclass's fields
(:func:`check_fields`, called first in every public dataclass's ``__post_init__``) and a
function's parameters (:func:`checked`, a decorator) are checked against their type hints
before anything is computed. A range is part of the hint::

    client_lr: Annotated[float, Range(0, low_open=True)] = 0.01   # a finite number > 0
    mixing: Annotated[float, Range(0, 1, low_open=True)] = 0.6     # in (0, 1]

What is checked, by hint: ``int`` (a Python or numpy integer, not a bool), ``float`` (a finite
real, not a bool, not text), ``bool``, ``str``, ``Literal[...]``, ``X | None``, unions, a
``Range`` (scalars, and every element of an array), ``np.ndarray`` (array-like), ``Path``-like,
classes (``isinstance``) and Protocols (their methods present); a class passed where an instance
is expected is refused whatever the hint. Errors name the parameter, the value and the allowed
type or range: ``TypeError`` for a wrong type, ``ValueError`` for a value out of range. Checks
that involve several parameters (or the number of clients) stay in the classes.

This module has no dependencies inside the package, so any module may import it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import types
import typing
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, TypeVar, Union

import jax
import numpy as np

__all__ = ["Annotated", "ArgumentTypeError", "Count", "Fraction", "Index", "NonNegative",
           "Positive", "Probability", "Range", "Seed", "Static", "check_fields", "check_value",
           "checked"]


@dataclasses.dataclass(frozen=True)
class Range:
    """The allowed interval of a number: ``[low, high]``, either end open or absent. Bools are
    refused (True is not read as 1) unless ``bools`` (a mask that means ids 0 and 1)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    bools: bool = False

    def contains(self, value: Any) -> bool:
        v = np.asarray(value, dtype=np.float64)
        ok = np.isfinite(v)
        if self.low is not None:
            ok &= (v > self.low) if self.low_open else (v >= self.low)
        if self.high is not None:
            ok &= (v < self.high) if self.high_open else (v <= self.high)
        return bool(np.all(ok))

    def text(self) -> str:
        if self.low is not None and self.high is not None:
            return (f"in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}"
                    f"{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {_num(self.low)}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {_num(self.high)}"
        return "finite"

    def outside(self) -> float | None:
        """A value just outside the range (for tests), or None if every number is inside."""
        if self.low is not None:
            return self.low if self.low_open else self.low - 1
        if self.high is not None:
            return self.high if self.high_open else self.high + 1
        return None


@dataclasses.dataclass(frozen=True)
class Static:
    """Marks a real-valued field that shapes the compiled program (``why``: what it sets), so
    that runs on one runs axis (:mod:`fedjax_avail.runs`) must share it, as they share every
    integer: ``over_selection: Annotated[float, Range(1), Static("the cohort's size")]``."""

    why: str


# The ranges most parameters share.
Count = Annotated[int, Range(1)]  # an integer >= 1 (clients, steps, batch sizes, rounds)
Index = Annotated[int, Range(0)]  # an integer >= 0
Positive = Annotated[float, Range(0, low_open=True)]  # a finite number > 0 (learning rates)
NonNegative = Annotated[float, Range(0)]  # a finite number >= 0 (penalties)
Fraction = Annotated[float, Range(0, 1, low_open=True)]  # in (0, 1] (mixing weights)
Probability = Annotated[float, Range(0, 1)]  # in [0, 1]
Seed = Annotated[int, Range(0, 2**32, high_open=True)]  # an integer in [0, 2^32)


def _num(x: float) -> str:
    return f"2^{int(math.log2(x))}" if x >= 2**20 and math.log2(x).is_integer() else f"{x:g}"


def is_int(value: Any) -> bool:
    """True for Python and numpy integers, False for bools and everything else."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_real(value: Any) -> bool:
    """True for finite Python and numpy reals, False for bools, NaN and infinities."""
    return (isinstance(value, (int, float, np.integer, np.floating))
            and not isinstance(value, (bool, np.bool_)) and math.isfinite(value))


def check_int(name: str, value: Any, low: int = 1, high: int | None = None) -> None:
    """Raises ValueError unless ``value`` is an integer in ``[low, high)``."""
    if not is_int(value) or value < low or (high is not None and value >= high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high})"
        raise ValueError(f"{name} must be an integer {allowed}, got {value!r}")


def check_optional_int(name: str, value: Any, low: int = 1) -> None:
    """Raises ValueError unless ``value`` is None or an integer >= ``low``."""
    if value is not None and (not is_int(value) or value < low):
        raise ValueError(f"{name} must be None or an integer >= {low}, got {value!r}")


def check_client_chunk(value: Any) -> None:
    """Raises ValueError unless ``value`` is None, ``"auto"`` or an integer >= 1 (``simulate``'s
    ``client_chunk``)."""
    if value is not None and value != "auto" and not (is_int(value) and value >= 1):
        raise ValueError(f"client_chunk must be None, 'auto' or an integer >= 1, got {value!r}")


# --- the annotation-driven layer ---------------------------------------------------------------


def real_field(owner: type, name: str) -> bool:
    """Whether field ``name`` of the dataclass ``owner`` is annotated as a real number
    (``float``, possibly with a range, or ``float | None``)."""
    base, _ = _split(_hints(owner).get(name, Any))
    members = [m for m in (_members(base) or (base,)) if m is not type(None)]
    return len(members) == 1 and _split(members[0])[0] is float


def static_reason(owner: type, name: str) -> str | None:
    """What the field ``name`` of ``owner`` sets when it is marked :class:`Static`, else None."""
    hint = _hints(owner).get(name)
    if typing.get_origin(hint) is not Annotated:
        return None
    return next((e.why for e in typing.get_args(hint)[1:] if isinstance(e, Static)), None)


def _split(hint: Any) -> tuple[Any, list[Range]]:
    """``Annotated[T, Range(...)]`` -> (T, [Range]); anything else -> (hint, [])."""
    if typing.get_origin(hint) is Annotated:
        base, *extras = typing.get_args(hint)
        return base, [e for e in extras if isinstance(e, Range)]
    return hint, []


def _members(hint: Any) -> tuple[Any, ...] | None:
    """The members of a union hint (``X | Y``, ``Optional[X]``), else None."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        return typing.get_args(hint)
    return None


def _describe(hint: Any) -> str:
    base, ranges = _split(hint)
    members = _members(base)
    if members is not None:
        texts = [_describe(m) for m in members]
        for i, m in enumerate(members):  # X | Sequence[X]: "X or a list of them"
            if _is_sequence(m) and _item_hint(m) in members:
                texts[i] = "a list of them"
        text = " or ".join(sorted(texts, key=lambda t: t != "None"))  # "None or ..."
    elif base is type(None):
        text = "None"
    elif typing.get_origin(base) is Literal:
        text = "one of " + ", ".join(repr(a) for a in typing.get_args(base))
    else:
        text = _describe_one(base)
    if ranges and (members is not None or base is np.ndarray):
        return text + ", with values " + " and ".join(r.text() for r in ranges)
    return text + "".join(f" {r.text()}" for r in ranges)


def _describe_one(base: Any) -> str:
    names = {int: "an integer", float: "a finite number", bool: "a bool (True/False)",
             str: "a string", np.ndarray: "an array"}
    if base in names:
        text = names[base]
    elif _is_sequence(base):
        text = f"a list of ({_describe(_item_hint(base))})"
    elif base is os.PathLike:
        text = "an os.PathLike"
    elif isinstance(base, type) and getattr(base, "_is_protocol", False):
        text = (f"an object with {' and '.join(_protocol_methods(base))} methods (an "
                f"{base.__name__})")
    elif isinstance(base, type):
        text = f"{'an' if base.__name__[0] in 'AEIOU' else 'a'} {base.__name__}"
    else:
        text = str(base)
    return text


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type: a TypeError, and a ValueError too (a bad argument value
    is what callers catch), so ``except ValueError`` still sees it."""


class _Mismatch(Exception):
    """The value is not of the hinted type (TypeError), or out of its range (ValueError)."""

    def __init__(self, kind: type[Exception]):
        super().__init__()
        self.kind = kind


def _protocol_methods(proto: type) -> list[str]:
    return [n for n, v in vars(proto).items() if callable(v) and not n.startswith("_")]


def _match(value: Any, hint: Any) -> None:
    """Returns if ``value`` fits ``hint``; raises _Mismatch(TypeError or ValueError) if not."""
    base, ranges = _split(hint)
    members = _members(base)
    if members is not None:
        errors = []
        for member in members:
            try:
                _match(value, member)
                break
            except _Mismatch as error:
                errors.append(error.kind)
        else:  # a value of the right type but out of range is a ValueError
            raise _Mismatch(ValueError if ValueError in errors else TypeError)
    elif base is Any or isinstance(base, TypeVar) or base is object:
        pass
    elif base is type(None):
        if value is not None:
            raise _Mismatch(TypeError)
    elif typing.get_origin(base) is Literal:
        if not isinstance(value, str | int) or value not in typing.get_args(base):
            raise _Mismatch(ValueError if isinstance(value, str) else TypeError)
    elif base is int:
        if not is_int(value):
            raise _Mismatch(TypeError)
    elif base is float:
        if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(
                value, (bool, np.bool_)):
            raise _Mismatch(TypeError)
        if not math.isfinite(value):
            raise _Mismatch(ValueError)
    elif base is bool:
        if not isinstance(value, (bool, np.bool_)):
            raise _Mismatch(TypeError)
    elif base is str:
        if not isinstance(value, str):
            raise _Mismatch(TypeError)
    elif base is np.ndarray:
        if isinstance(value, (str, bytes, dict, type)) or value is None:
            raise _Mismatch(TypeError)
        try:
            array = np.asarray(value)
        except Exception:
            raise _Mismatch(TypeError) from None
        if array.dtype.kind not in "biuf":
            raise _Mismatch(TypeError)
    elif base is os.PathLike:
        if not isinstance(value, (str, os.PathLike)):
            raise _Mismatch(TypeError)
    elif _is_sequence(base):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise _Mismatch(TypeError)
        item_hint = _item_hint(base)
        for item in value:
            _match(item, item_hint)
    elif isinstance(base, type) and getattr(base, "_is_protocol", False):
        if isinstance(value, type) or not all(
                callable(getattr(value, m, None)) for m in _protocol_methods(base)):
            raise _Mismatch(TypeError)
    elif isinstance(base, type):
        if not isinstance(value, base):
            raise _Mismatch(TypeError)
    if ranges and value is not None and not isinstance(value, str):
        if np.asarray(value).dtype.kind == "b" and not all(r.bools for r in ranges):
            raise _Mismatch(TypeError)
        if not all(r.contains(value) for r in ranges):
            raise _Mismatch(ValueError)


def _is_sequence(hint: Any) -> bool:
    return typing.get_origin(hint) in (Sequence, tuple, list)


def _item_hint(sequence: Any) -> Any:
    args = [a for a in typing.get_args(sequence) if a is not Ellipsis]
    return args[0] if args else Any


def check_value(name: str, value: Any, hint: Any) -> None:
    """Raises TypeError or ValueError, naming ``name``, unless ``value`` fits ``hint``.

    A traced value passes: it is one run's hyperparameter inside a compiled program
    (:func:`fedjax_avail.runs.bind`), checked on the host when the runs were made.
    """
    if isinstance(value, jax.core.Tracer):
        return
    if isinstance(value, type) and hint is not type:
        raise ArgumentTypeError(f"{name} must be an instance, not the class {value.__name__} "
                                f"(write {value.__name__}(...))")
    base, _ = _split(hint)
    sequences = [m for m in (_members(base) or (base,)) if _is_sequence(m)]
    if len(sequences) == 1 and isinstance(value, (list, tuple)):
        for i, item in enumerate(value):  # name the item: processes[1]
            check_value(f"{name}[{i}]", item, _item_hint(sequences[0]))
    try:
        _match(value, hint)
    except OverflowError:  # an integer too large for a float: out of any range
        raise ValueError(f"{name} must be {_describe(hint)}, got an integer of "
                         f"{len(str(value))} digits") from None
    except _Mismatch as error:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        if error.kind is TypeError:  # scalars: "2.5 (float)"; objects: "dict {...}"
            scalar = isinstance(value, (int, float, str, bytes, np.generic))
            shown = f"{shown} ({type(value).__name__})" if scalar else (
                f"{type(value).__name__} {shown}")
        kind = ArgumentTypeError if error.kind is TypeError else ValueError
        raise kind(f"{name} must be {_describe(hint)}, got {shown}") from None


@functools.cache
def _hints(owner: Any) -> dict[str, Any]:
    return typing.get_type_hints(owner, include_extras=True)


def field_hints(owner: type) -> dict[str, Any]:
    """The annotations of the dataclass ``owner``'s fields, ranges included."""
    return _hints(owner)


def describe_hint(hint: Any) -> str:
    """What a hint allows, in words: ``Positive`` -> ``"a finite number > 0"``."""
    return _describe(hint)


def hint_members(hint: Any) -> tuple[Any, ...]:
    """The types a hint allows, ranges stripped: ``Positive | None`` -> ``(float, NoneType)``;
    ``Annotated[int, Range(1)]`` -> ``(int,)``."""
    base, _ = _split(hint)
    members = _members(base)
    if members is None:
        return (base,)
    return tuple(m for member in members for m in hint_members(member))


def check_fields(obj: Any) -> None:
    """Checks every init field of the dataclass instance ``obj`` against its annotation."""
    hints = _hints(type(obj))
    for field in dataclasses.fields(obj):
        if field.init and field.name in hints:
            check_value(field.name, getattr(obj, field.name), hints[field.name])


F = TypeVar("F", bound=Callable[..., Any])


def checked(fn: F) -> F:
    """Checks a function's arguments against its annotations before it runs."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        hints = _hints(fn)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"{fn.__name__}(): {error}") from None
        for name, value in bound.arguments.items():
            parameter = signature.parameters[name]
            if name not in hints:
                continue
            if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
                for i, item in enumerate(value):
                    check_value(f"{name}[{i}]", item, hints[name])
            elif parameter.kind is not inspect.Parameter.VAR_KEYWORD:
                check_value(name, value, hints[name])
        return fn(*args, **kwargs)

    wrapper.__checked__ = True  # type: ignore[attr-defined]
    return typing.cast(F, wrapper)
