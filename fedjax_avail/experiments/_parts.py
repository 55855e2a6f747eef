"""Every constructor field of an experiment's parts is a setting by a dotted name.

An experiment's parts are its algorithms (by the names in its ``algorithms`` setting) and its
availability process; a part's fields are the fields of its dataclass, and a field that is
itself a dataclass (``durations``, ``selection``) has its own fields below it::

    fedbuff.history=512            FedBuff(history=512)
    fedavg.selection.lam=0.5       FedAvg(selection=SubTrunc(lam=0.5, ...))
    fedbuff.durations.sigma=1.0    FedBuff(durations=LogNormal(sigma=1.0, ...))
    availability.period=50         Periodic(period=50, ...)

A setting replaces the field with :func:`dataclasses.replace`, so the value goes through the
same annotation checks as the Python API (:mod:`fedjax_avail._checks`): a wrong one is one line
naming the setting, the allowed values and the value. Text from the command line is read as the
field's annotation says (``none``, ``true``, numbers, text).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from collections.abc import Mapping
from typing import Any, Literal

from fedjax_avail._checks import describe_hint, field_hints, hint_members

# The availability process's part name; the algorithms' are their names in the setup.
AVAILABILITY = "availability"


def is_dotted(key: str) -> bool:
    """Whether ``key`` names a part's field (``fedbuff.history``), not an experiment setting."""
    return "." in key


def parts(setup: Any) -> dict[str, Any]:
    """The parts of a :class:`~fedjax_avail.experiments.Setup` by their setting prefix."""
    return {**setup.algorithms, AVAILABILITY: setup.availability}


def apply(setup: Any, settings: Mapping[str, Any]) -> Any:
    """``setup`` with every dotted setting of ``settings`` applied (the others are left out).

    Raises:
      ValueError: an unknown part or field (naming the known ones), or a value its field's
        annotation refuses, naming the setting.
    """
    dotted = {k: v for k, v in settings.items() if is_dotted(k)}
    if not dotted:
        return setup
    current = parts(setup)
    for key, value in dotted.items():
        part, *path = key.split(".")
        if part not in current:
            raise ValueError(f"setting {key}: no part {part!r}; parts: "
                             f"{', '.join(current)} (fields by dotted names, e.g. "
                             f"{next(iter(current))}.FIELD)")
        current[part] = _replace(current[part], path, value, key)
    algorithms = {name: current[name] for name in setup.algorithms}
    return setup._replace(algorithms=algorithms, availability=current[AVAILABILITY])


def _replace(obj: Any, path: list[str], value: Any, key: str) -> Any:
    """``obj`` with the field at ``path`` set to ``value``, rebuilt (and checked) upwards."""
    fields = settable_fields(obj)
    head, rest = path[0], path[1:]
    if head not in fields:
        where = type(obj).__name__
        known = ", ".join(fields) or "none"
        raise ValueError(f"setting {key}: {where} has no field {head!r}; its fields: {known}")
    if rest:
        inner = getattr(obj, head)
        if not dataclasses.is_dataclass(inner):
            raise ValueError(f"setting {key}: {type(obj).__name__}.{head} is "
                             f"{inner!r}, which has no fields to set")
        new = _replace(inner, rest, value, key)
    else:
        new = read_value(value, field_hints(type(obj))[head], key)
    try:
        return dataclasses.replace(obj, **{head: new})
    except (TypeError, ValueError) as error:  # the annotation layer's own words, named
        raise ValueError(f"setting {key}: {error}") from None


def settable_fields(obj: Any) -> dict[str, Any]:
    """A part's constructor fields and their current values ({} for a non-dataclass)."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return {}
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}


def read_value(value: Any, hint: Any, key: str) -> Any:
    """A command-line text as the annotation ``hint`` reads it: ``none`` for a field that may
    be None, ``true``/``false`` for a bool, an integer or number, one of a ``Literal``'s
    values, or text; a value that is not text (from TOML, from Python) is left as it is."""
    members = hint_members(hint)
    if not isinstance(value, str):
        if type(value) is int and bool in members and int not in members and value in (0, 1):
            return bool(value)
        if type(value) is int and float in members and int not in members:
            return float(value)
        if type(value) in (int, float) and str in members and not {int, float} & set(members):
            return str(value)  # a text field given a number-like word, e.g. "0"
        return value
    text = value.strip()
    if type(None) in members and text.lower() == "none":
        return None
    for member in members:
        if member is bool and text.lower() in ("true", "false", "1", "0"):
            return text.lower() in ("true", "1")
        if typing.get_origin(member) is Literal:
            for choice in typing.get_args(member):
                if str(choice) == text:
                    return choice
    for kind in (int, float):
        if kind in members:
            try:
                return kind(text)
            except ValueError:
                pass
    if str in members or not members:
        return text
    raise ValueError(f"setting {key} must be {describe_hint(hint)}, got {value!r}")


def leaf_values(setup: Any) -> dict[str, Any]:
    """Every dotted setting of ``setup``'s parts -> its value (nested fields flattened)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, obj: Any) -> None:
        for name, value in settable_fields(obj).items():
            if settable_fields(value):
                walk(f"{prefix}.{name}", value)
            else:
                out[f"{prefix}.{name}"] = value

    for part, obj in parts(setup).items():
        walk(part, obj)
    return out


def describe_fields(setup: Any) -> list[str]:
    """Every dotted setting of ``setup``'s parts, nested dataclass fields below theirs: a line
    ``name = value`` and, indented, what the field's annotation allows and the line its class
    docstring gives it (its ``Args:`` or ``Attributes:`` entry)."""
    lines: list[str] = []

    def walk(prefix: str, obj: Any) -> None:
        docs = field_docs(type(obj))
        hints = field_hints(type(obj))
        for name, value in settable_fields(obj).items():
            if settable_fields(value):
                walk(f"{prefix}.{name}", value)
                continue
            shown = repr(value) if len(repr(value)) <= 60 else f"<{type(value).__name__}>"
            lines.append(f"{prefix}.{name} = {shown}")
            doc = docs.get(name, "")
            if len(doc) > 100:
                doc = doc[:97].rstrip() + "..."
            about = "; ".join(t for t in (describe_hint(hints[name]) if name in hints else "",
                                          doc) if t)
            if about:
                lines.append(f"    {about}")

    for part, obj in parts(setup).items():
        walk(part, obj)
    return lines


_ENTRY = re.compile(r"^  (\w+(?:, \w+)*): (.*)$")


def field_docs(owner: type) -> dict[str, str]:
    """Field name -> its entry in the ``Args:`` or ``Attributes:`` section of ``owner``'s
    docstring or of a base class's (the nearest wins), on one line. An entry may name several
    fields (``durations, concurrency: see AsyncParts``): a field's own entry in a base class
    wins over it."""
    own: dict[str, str] = {}
    shared: dict[str, str] = {}
    for cls in owner.__mro__:
        entries: list[tuple[list[str], list[str]]] = []  # (names, lines of text)
        section = False
        for line in inspect.cleandoc(cls.__doc__ or "").splitlines():
            if line in ("Args:", "Attributes:"):
                section = True
            elif section and line and not line.startswith(" "):
                section = False
            elif section and (entry := _ENTRY.match(line)):
                entries.append((entry.group(1).split(", "), [entry.group(2).strip()]))
            elif section and line.startswith("    ") and entries:
                entries[-1][1].append(line.strip())
        for names, text in entries:
            for name in names:
                (own if len(names) == 1 else shared).setdefault(name, " ".join(text))
    return {**shared, **own}
