"""An experiment's parts as data, and every constructor field of them as a setting.

An experiment declares its algorithms as data (:class:`Part`): a library class and where each
field's value comes from, a constant or one of the experiment's settings (:class:`Setting`,
``client_lr=Setting("lr")``); a nested part (``durations``, ``selection``) is a :class:`Part`
too. So the settings a short name feeds are known without building anything
(:func:`feeds`): ``lr`` is checked by the annotation of every field it feeds, and ``run NAME
--help`` lists the parts' fields (:func:`describe_parts`). The built parts are its algorithms
(by the names in its ``algorithms`` setting) and its availability process; a part's fields are
the fields of its dataclass, and a field that is itself a dataclass (``durations``,
``selection``) has its own fields below it::

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
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

from fedjax_avail._checks import describe_hint, field_hints, hint_members

# The availability process's part name; the algorithms' are their names in the setup.
AVAILABILITY = "availability"


@dataclasses.dataclass(frozen=True)
class Setting:
    """A field's value from the experiment's setting ``name``.

    Attributes:
      name: the setting, e.g. ``"lr"`` for a ``client_lr``.
      read: ``config -> value`` where the field's value is not the setting's own (K from
        ``beta``, per-client speeds from ``speed_sigma``); None: ``config[name]``.
        Its docstring's first line says how (``--help`` shows it).
      checked_as: with ``read``, the ``(class, field)`` whose annotation checks the setting's
        value (None: its annotation in ``experiments/_settings.py``'s ``SETTINGS``, or its
        ``CHOICES``); without ``read`` the field it feeds checks it.
      default, has_default: the value where an experiment has no such setting (e.g.
        ``table_dtype``: ``"float32"``), when ``has_default``; without one, every experiment
        using the part must have the setting.
    """

    name: str
    read: Callable[[Mapping[str, Any]], Any] | None = None
    checked_as: tuple[type, str] | None = None
    default: Any = None
    has_default: bool = False

    def __post_init__(self):
        if self.checked_as is not None and self.read is None:
            raise ValueError(f"Setting {self.name!r}: checked_as goes with read (without read "
                             "the field it feeds checks it)")

    def value(self, config: Mapping[str, Any]) -> Any:
        if self.read is not None:
            return self.read(config)
        if self.name not in config and self.has_default:
            return self.default
        return config[self.name]


@dataclasses.dataclass(frozen=True)
class Part:
    """A part declared as data: ``kind(**fields)``, each field a constant, a :class:`Setting`
    or a nested :class:`Part`; the fields it does not name keep the class's defaults.

    Example:
      >>> fedprox = part(FedProx, clients_per_round=Setting("clients_per_round"),
      ...                client_lr=Setting("lr"), mu=Setting("mu"))
      >>> fedprox.build({"clients_per_round": 10, "lr": 0.1, "mu": 0.01}).mu
      0.01
    """

    kind: type
    fields: Mapping[str, Any]

    def build(self, config: Mapping[str, Any], prefix: str | None = None) -> Any:
        """The part under ``config`` (checked by the class, as any Python call).

        With ``prefix`` (the part's setting name, ``fedprox``), a field that a dotted setting
        of ``config`` sets (``fedprox.mu``, or a whole nested part: ``fedbuff.durations``)
        takes its value from an unrecorded copy of ``config``: :func:`apply` replaces it, so
        the setting it reads (``mu``) is not read by this field (a configuration recording its
        reads, as ``Experiment.setup``'s, then refuses ``mu`` set as well where nothing else
        reads it).
        """
        def field(name: str, value: Any) -> Any:
            path = None if prefix is None else f"{prefix}.{name}"
            source = dict(config) if path in config.keys() else config  # keys(): unrecorded
            if isinstance(value, Part):
                return value.build(source, path)
            return _built(value, source)

        return self.kind(**{name: field(name, value) for name, value in self.fields.items()})


def part(kind: type, **fields: Any) -> Part:
    """``Part(kind, fields)``, its field names checked against ``kind``'s constructor.

    Raises:
      ValueError: a name that is not a constructor field of ``kind``, naming its fields.
    """
    known = [f.name for f in dataclasses.fields(kind) if f.init]
    unknown = [name for name in fields if name not in known]
    if unknown:
        raise ValueError(f"part({kind.__name__}): no field {unknown[0]!r}; its fields: "
                         f"{', '.join(known)}")
    return Part(kind, fields)


def _built(value: Any, config: Mapping[str, Any]) -> Any:
    if isinstance(value, Setting):
        return value.value(config)
    return value.build(config) if isinstance(value, Part) else value


def build_parts(parts: Mapping[str, Part], config: Mapping[str, Any]) -> dict[str, Any]:
    """The parts named by ``config["algorithms"]``, built under ``config``.

    Raises:
      ValueError: a name that is not one of ``parts``.
    """
    names = tuple(config["algorithms"])
    unknown = [name for name in names if name not in parts]
    if unknown:
        raise ValueError(f"setting algorithms must list only {tuple(parts)}, got unknown "
                         f"{unknown}")
    return {name: parts[name].build(config, name) for name in names}


def _settings_in(parts: Mapping[str, Part]) -> Iterator[tuple[str, Part, str, Setting]]:
    """Every field a setting feeds in ``parts`` (name -> part), nested parts' included, in
    declaration order: ``(its dotted name, the part holding it, the field, the setting)``."""
    for prefix, p in parts.items():
        for name, value in p.fields.items():
            if isinstance(value, Part):
                yield from _settings_in({f"{prefix}.{name}": value})
            elif isinstance(value, Setting):
                yield f"{prefix}.{name}", p, name, value


def settings_of(p: Part) -> set[str]:
    """The names of the settings a part (and the parts within it) reads."""
    return {setting.name for *_, setting in _settings_in({"": p})}


def fed_paths(parts: Mapping[str, Part], setting: str) -> list[str]:
    """The dotted names of the fields ``setting`` feeds in ``parts`` (``mu`` ->
    ``["fedprox.mu"]``), nested parts' included."""
    return [path for path, _, _, fed in _settings_in(parts) if fed.name == setting]


def feeds(parts: Mapping[str, Part]) -> dict[str, list[tuple[type, str]]]:
    """Each setting the ``parts`` read -> the ``(class, field)`` pairs whose annotations check
    its value (every field it feeds as it is, or its ``checked_as``)."""
    out: dict[str, list[tuple[type, str]]] = {}
    for _, p, name, setting in _settings_in(parts):
        owner = (p.kind, name) if setting.read is None else setting.checked_as
        if owner is not None and owner not in out.setdefault(setting.name, []):
            out[setting.name].append(owner)
    return out


def describe_parts(parts: Mapping[str, Part], names: tuple[str, ...] = (),
                   settings: Mapping[str, Any] | None = None) -> list[str]:
    """Every field of each of ``parts`` (those in ``names`` first), nested parts' fields below
    theirs: ``fedavg.client_lr <- lr`` (fed by a setting; ``: HOW`` where a function reads
    it), ``fedlaavg_c1.local_steps = 1 (fixed)`` or ``fedavg.mu = 0.0`` (the class's
    default); below the first line of each class's field, indented, what its annotation
    allows and its docstring line. Built from the declarations alone (nothing is loaded).

    Args:
      parts: name -> :class:`Part`.
      names: the parts listed first (the ones an experiment runs by default).
      settings: the experiment's settings; a :class:`Setting` it lacks shows its default.
    """
    lines: list[str] = []
    explained: set[tuple[type, str]] = set()

    def walk(prefix: str, p: Part) -> None:
        docs, hints = field_docs(p.kind), field_hints(p.kind)
        for field in dataclasses.fields(p.kind):
            if not field.init:
                continue
            value = p.fields.get(field.name, field.default)
            if value is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
                value = field.default_factory()
            key, fixed = f"{prefix}.{field.name}", field.name in p.fields
            if isinstance(value, Setting) and settings is not None and (
                    value.name not in settings and value.has_default):
                value = value.default
            if isinstance(value, Part):
                if any(f.init for f in dataclasses.fields(value.kind)):
                    walk(key, value)
                else:  # a part with no fields: its class
                    lines.append(f"{key} = {value.kind.__name__}()")
                continue
            if isinstance(value, Setting):
                how = (value.read.__doc__ or "").strip().splitlines()[:1] if value.read else []
                lines.append(f"{key} <- {value.name}{': ' + how[0] if how else ''}")
            else:
                shown = repr(value) if len(repr(value)) <= 40 else f"<{type(value).__name__}>"
                lines.append(f"{key} = {shown}{' (fixed)' if fixed else ''}")
            if (p.kind, field.name) not in explained:
                explained.add((p.kind, field.name))
                about = "; ".join(t for t in (describe_hint(hints[field.name])
                                              if field.name in hints else "",
                                              docs.get(field.name, "")) if t)
                about = about if len(about) <= 88 else about[:85].rstrip() + "..."
                if about:
                    lines.append(f"    {about}")

    for name in sorted(parts, key=lambda n: (n not in names, list(parts).index(n))):
        walk(name, parts[name])
    return lines


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
