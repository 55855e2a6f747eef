"""The shape every named experiment shares: its settings and its parts.

An experiment is a name, a dict of default settings, its algorithms declared as data
(:mod:`fedjax_avail.experiments._parts`) and a ``build(config) -> Setup`` function that loads the
data and makes the availability process; :meth:`Experiment.config` checks a configuration and
:meth:`Experiment.setup` builds it. Running one is :mod:`fedjax_avail.experiments._run`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from fedjax_avail.algorithms import Algorithm
from fedjax_avail.availability import AvailabilityProcess
from fedjax_avail.data import FederatedData
from fedjax_avail.experiments import _parts
from fedjax_avail.experiments._settings import CHOICES, MEANINGS, check_settings
from fedjax_avail.history import History
from fedjax_avail.tasks import Task


class Setup(NamedTuple):
    """Everything an experiment's algorithms run on."""

    task: Task
    train: FederatedData
    test: dict[str, np.ndarray] | None
    availability: AvailabilityProcess
    algorithms: dict[str, Algorithm]
    window: int  # rounds over which the final oscillation amplitude is measured (2E)
    summary: Callable[[History], dict[str, float]] | None = None  # extra summary columns
    x_axes: tuple[str, ...] = ("round",)  # history columns the curves are drawn against
    rounds: Mapping[str, int] = {}  # per-algorithm rounds instead of the setting rounds
    max_virtual_time: float | None = None  # every algorithm's virtual-time budget
    eval_every: Mapping[str, int] = {}  # per-algorithm eval_every instead of the setting's
    # the window as the availability process sets it (so that a dotted availability setting,
    # e.g. availability.period, moves it too); None: ``window`` as given
    window_of: Callable[[AvailabilityProcess], int] | None = None
    # the settings this run reads (its build, the parts it built, the runner): a setting
    # changed from its default that no point of a call reads is refused (Experiment.check_read)
    read: frozenset[str] = frozenset()

    def rounds_of(self, name: str, config: Mapping[str, Any]) -> int:
        return int(self.rounds.get(name, config["rounds"]))

    def eval_every_of(self, name: str, config: Mapping[str, Any]) -> int:
        return int(self.eval_every.get(name, config["eval_every"]))


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A named, versioned configuration.

    Attributes:
      name: the CLI name.
      description: one line, shown by ``fedjax-avail list``.
      defaults: every setting with its default; ``--set key=value`` may override any of them.
      build: ``config -> Setup``.
      measured: where its recorded outcome is: the page and section that show it, and the
        results folder under ``docs/results/`` its tables are generated from.
      meanings: setting -> one line on what it does here, where the shared ``MEANINGS`` line
        (``experiments/_settings.py``) does not fit this experiment.
      choices: setting -> its valid values, added to (or replacing) the shared ``CHOICES``.
      parts: the algorithms it can run, as data (name -> :class:`~fedjax_avail.experiments.
        _parts.Part`): the choices of its ``algorithms`` setting; a setting that feeds a field
        of one is checked by that field's annotation.

    Every experiment also has ``seeds`` (default ``()``: one run with ``seed``; several: one
    program on the runs axis, mean and std in the summary), and every field of its parts by a
    dotted name (``fedbuff.history``: :mod:`fedjax_avail.experiments._parts`).
    """

    name: str
    description: str
    defaults: Mapping[str, Any]
    build: Callable[[dict[str, Any]], Setup]
    measured: str = ""
    meanings: Mapping[str, str] = dataclasses.field(default_factory=dict)
    choices: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    parts: Mapping[str, _parts.Part] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if "seed" in self.defaults and "seeds" not in self.defaults:  # every experiment's
            object.__setattr__(self, "defaults", {**self.defaults, "seeds": ()})

    def setup(self, config: Mapping[str, Any]) -> Setup:
        """The experiment's parts under ``config`` (checked by :meth:`config`), its dotted
        settings applied to them, and ``read``: the settings the run reads."""
        reads = _Reads(config)
        setup = _parts.apply(self.build(reads), config)
        if setup.window_of is not None:
            setup = setup._replace(window=setup.window_of(setup.availability))
        return setup._replace(read=frozenset(reads.keys_read | _run_reads(setup)))

    def check_read(self, configs: Sequence[Mapping[str, Any]],
                   reads: Sequence[frozenset[str]]) -> None:
        """Refuses a setting that one of a call's ``configs`` changes from its default and that
        none of their setups reads (``reads``: each :meth:`setup`'s ``read``): a run would
        record it and ignore it, and a sweep over it label identical runs differently (one
        point at the default or not). A sweep checks all its points together: a setting one of
        them reads (``mu`` where one point runs ``fedprox``) is kept.

        Raises:
          ValueError: naming the setting, its value and why it is unread, before compute.
        """
        read = frozenset().union(*reads)
        unread = next(((k, v) for config in configs for k, v in config.items()
                       if k in self.defaults and k not in read
                       and not _same(v, self.defaults[k])), None)
        if unread is None:
            return
        key, value = unread
        readers = [name for name, p in self.parts.items() if key in _parts.settings_of(p)]
        running = sorted({name for config in configs for name in config.get("algorithms", ())})
        dotted = sorted({k for config in configs for k in config if _parts.is_dotted(k)
                         and k.split(".")[0] in running})
        fed = _parts.fed_paths({name: self.parts[name] for name in running
                                if name in self.parts}, key)
        replacing = [k for k in dotted if any(p == k or p.startswith(k + ".") for p in fed)]
        if replacing:
            why = f"dotted settings set every field it feeds: {', '.join(replacing)}"
        elif readers:
            why = f"it feeds {', '.join(readers)}, which algorithms={','.join(running)} leaves out"
        else:
            why = f"{self.name} does not use it under these settings" + (
                f", where dotted settings set {', '.join(dotted)}" if dotted else "")
        raise ValueError(f"setting {key}={_text(value)}: nothing in this run reads it "
                         f"({why}); leave it out")

    def meaning(self, key: str) -> str:
        """One line on what setting ``key`` does ("" for a setting nobody described)."""
        return self.meanings.get(key, MEANINGS.get(key, ""))

    def all_choices(self) -> dict[str, tuple[str, ...]]:
        """Each choice-valued setting of this experiment -> its valid values."""
        own = {"algorithms": tuple(self.parts)} if self.parts else {}
        return {k: v for k, v in {**CHOICES, **own, **self.choices}.items()
                if k in self.defaults}

    def config(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The defaults with ``overrides`` applied, checked (unknown keys and values out of
        range are errors naming the setting)."""
        config = dict(self.defaults)
        for key, value in (overrides or {}).items():
            if key not in config and not _parts.is_dotted(key):
                raise ValueError(f"{self.name} has no setting {key!r}; settings: "
                                 f"{sorted(config)}, or a part's field by a dotted name "
                                 "(fedavg.client_lr, availability.period)")
            config[key] = value
        overrides = overrides or {}
        if overrides.get("beta") is not None and "clients_per_round" in overrides:
            raise ValueError("set either beta or clients_per_round, not both (beta sets "
                             "clients_per_round = round(beta * num_clients))")
        check_settings(config, self.defaults, self.all_choices(), _parts.feeds(self.parts))
        return config


class _Reads(dict):
    """A configuration that records which settings were read from it (``keys_read``)."""

    def __init__(self, config: Mapping[str, Any]):
        super().__init__(config)
        self.keys_read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.keys_read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.keys_read.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.keys_read.add(key)
        return super().__contains__(key)


def _run_reads(setup: Setup) -> set[str]:
    """The settings :func:`~fedjax_avail.experiments.run` reads itself: the seeds, the
    algorithms, the training examples evaluated, and ``rounds`` and ``eval_every`` where an
    algorithm has no number of its own (``Setup.rounds``, ``Setup.eval_every``)."""
    read = {"seed", "seeds", "algorithms", "train_eval_examples"}
    if any(name not in setup.rounds for name in setup.algorithms):
        read.add("rounds")
    if any(name not in setup.eval_every for name in setup.algorithms):
        read.add("eval_every")
    return read


def _same(value: Any, default: Any) -> bool:
    """Whether a setting's value is its default: a list for a tuple, an int for a float
    (``mu = 1`` in a TOML file) alike; a bool only as itself."""
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return tuple(value) == tuple(default)
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default
    return type(value) is type(default) and value == default or (
        isinstance(value, (int, float)) and isinstance(default, (int, float))
        and value == default)


def _text(value: Any) -> str:
    """A setting's value as ``--set`` takes it (a tuple as ``a,b``)."""
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def parse_value(text: str, default: Any) -> Any:
    """Parses ``--set`` text to the type of the default (bool, int, float, str, a tuple of str
    or of int, or of float where the default's items are floats: ``targets=0.35,0.4``).

    A default of None accepts ``none``, a number (int, else float) or any other text.
    """
    if isinstance(default, bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"expected true/false, got {text!r}")
        return text.lower() in ("true", "1")
    if isinstance(default, int):
        return _number(int, text, "an integer")
    if isinstance(default, float):
        return _number(float, text, "a number")
    if isinstance(default, tuple):
        items = [item.strip() for item in text.split(",") if item.strip()]
        if default and all(isinstance(item, float) for item in default):
            return tuple(_number(float, item, "numbers separated by commas") for item in items)
        if items and all(item.lstrip("-").isdigit() for item in items):  # e.g. seeds=0,1,2
            return tuple(int(item) for item in items)
        return tuple(items)
    if default is None:
        if text.lower() == "none":
            return None
        for kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                pass
    return text


def _number(kind: type, text: str, words: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"expected {words}, got {text!r}") from None


def seeds_of(config: Mapping[str, Any]) -> list[int]:
    """The seeds a configuration trains: its ``seeds``, else its one ``seed``."""
    return list(config["seeds"]) if config.get("seeds") else [config["seed"]]


