"""Every public argument is checked before compute, naming the parameter (issue 14, section 5).

The cases are generated from the public API itself: every public dataclass of
``fa.algorithms``, ``fa.availability``, ``fa.selection`` and ``fa.clock`` (each field) and every
public function that takes numbers or processes (each parameter). For each parameter whose
annotation says what it accepts, the test passes a value of the wrong type (text for a number,
a float for an integer, a class for an instance, ...) and, where the annotation carries a
:class:`~fedjax_avail._checks.Range`, a value just outside it. Each call must raise TypeError or
ValueError whose message names the parameter, and must compile nothing.

The valid arguments each call starts from are in ``VALID`` (required parameters only); a new
public class with a required field fails ``test_every_public_class_is_covered`` until it has an
entry, so nothing public escapes the generated cases.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import typing

import numpy as np
import pytest

import fedjax_avail as fa
from fedjax_avail import _checks
from fedjax_avail._checks import Range

A, ALG, S, C = fa.availability, fa.algorithms, fa.selection, fa.clock
MODULES = (ALG, A, S, C)

# Required parameters of each public class, valid values.
VALID: dict[str, dict[str, typing.Any]] = {
    "GSGM": dict(clients_per_round=2), "MIFA": dict(clients_per_round=2),
    "SASGD": dict(clients_per_round=2), "TWAFL": dict(clients_per_round=2),
    "WKAFL": dict(clients_per_round=2), "FedAdam": dict(clients_per_round=2),
    "FedAvg": dict(clients_per_round=2), "FedBuff": dict(buffer_size=2),
    "FedLaAvg": dict(clients_per_round=2), "FedProx": dict(clients_per_round=2),
    "FedSGD": dict(clients_per_round=2), "KAsyncSGD": dict(clients_per_round=2),
    "SequentialSGD": dict(clients_per_round=2),
    "Bernoulli": dict(p=0.5), "Markov": dict(p_on=0.2, p_off=0.3),
    "Combined": dict(processes=(A.AlwaysOn(),)), "Dropout": dict(process=A.AlwaysOn(), q=0.1),
    "HourOfDay": dict(start_hour=3), "Periodic": dict(groups=np.array([0, 1]), period=2),
    "Trace": dict(mask_table=np.ones((3, 2), bool)), "PowerOfChoice": dict(d=3),
    "Intervals": dict(starts=np.array([[0.0]]), ends=np.array([[1.0]])),
    "EventClock": dict(durations=C.Exponential(1.0), concurrency=None, events=2),
    "KofPClock": dict(events=2), "RoundClock": dict(durations=C.Constant(1.0)),
}
SKIP = {"AsyncParts": "a mixin: its fields are checked in every asynchronous algorithm",
        "SyncParts": "a mixin: its fields are checked in every synchronous algorithm"}


def _train():
    train, _ = fa.data.load_digits()
    return fa.data.one_label_per_client(train["x"], train["y"], 10, seed=0)


FUNCTIONS: dict[str, tuple[typing.Callable, dict[str, typing.Any]]] = {
    "simulate": (fa.simulate, dict(task=fa.tasks.logistic_regression(64, 10), data=_train(),
                                   algorithm=ALG.FedAvg(2), availability=A.AlwaysOn(),
                                   rounds=2)),
    "sample": (A.sample, dict(process=A.AlwaysOn(), num_clients=3, steps=2)),
    "minimal_availability": (A.minimal_availability,
                             dict(process=A.AlwaysOn(), num_clients=3, steps=2)),
    "plot_availability": (A.plot_availability, dict(process=A.AlwaysOn(), num_clients=3,
                                                    steps=2)),
    "dropout": (A.dropout, dict(process=A.AlwaysOn(), q=0.1)),
    "from_fedscale": (A.from_fedscale, dict(
        trace={"d": {"active": [0], "inactive": [5], "finish_time": 9}}, num_clients=2)),
    "from_fedscale_capacity": (C.from_fedscale_capacity, dict(
        capacity={"d": {"computation": 1.0, "communication": 9.0}}, num_clients=2,
        batch_size=1, local_steps=1, model_kbits=1.0)),
}


def _classes():
    for module in MODULES:
        for name in module.__all__:
            obj = getattr(module, name)
            if (inspect.isclass(obj) and dataclasses.is_dataclass(obj)
                    and name not in SKIP and any(f.init for f in dataclasses.fields(obj))):
                yield name, obj


def _wrong_values(hint) -> list[tuple[str, typing.Any]]:
    """(what, value) pairs that ``hint`` must refuse: a wrong type, and out of its range."""
    base, ranges = _checks._split(hint)
    members = [m for m in (_checks._members(base) or (base,)) if m is not type(None)]
    kinds = set()
    for member in members:
        member_base, member_ranges = _checks._split(member)
        ranges = ranges + member_ranges
        if typing.get_origin(member_base) is typing.Literal:
            kinds.add("literal")
        elif member_base in (int, float, bool, str, np.ndarray):
            kinds.add(member_base)
        elif isinstance(member_base, type) and getattr(member_base, "_is_protocol", False):
            kinds.add("protocol")
        elif isinstance(member_base, type):
            kinds.add("class")
    out = []
    if kinds & {int, float, np.ndarray} and str not in kinds and "literal" not in kinds:
        out.append(("text for a number", "1"))
    if kinds == {int} or kinds == {int, "literal"}:
        out.append(("a float for an integer", 2.5))
    if kinds == {bool}:
        out.append(("text for a bool", "yes"))
    if kinds == {str}:
        out.append(("a number for text", 3))
    if kinds & {"protocol", "class"}:
        out.append(("a number for an object", 0.5))
        out.append(("a class for an instance", A.AlwaysOn))
    for r in ranges:
        outside = r.outside()
        if outside is not None:
            out.append((f"out of {r.text()}", int(outside) if kinds <= {int, "literal"}
                        and float(outside).is_integer() else outside))
    return out


def _cases():
    for name, cls in _classes():
        hints = typing.get_type_hints(cls, include_extras=True)
        for field in dataclasses.fields(cls):
            if field.init and field.name in hints:
                for what, value in _wrong_values(hints[field.name]):
                    yield pytest.param(cls, VALID.get(name, {}), field.name, value,
                                       id=f"{name}.{field.name}: {what}")
    for name, (fn, valid) in FUNCTIONS.items():
        hints = typing.get_type_hints(inspect.unwrap(fn), include_extras=True)
        for param in inspect.signature(fn).parameters:
            if param in hints:
                for what, value in _wrong_values(hints[param]):
                    yield pytest.param(fn, valid, param, value, id=f"{name}({param}): {what}")


CASES = list(_cases())


def test_the_generated_cases_cover_the_public_api():
    assert len(CASES) > 150
    names = {c.id.split(".")[0].split("(")[0] for c in CASES}
    assert {name for name, _ in _classes()} - names <= {"AlwaysOn"}
    assert set(FUNCTIONS) <= names


def test_every_public_class_is_covered():
    for name, cls in _classes():
        required = [f.name for f in dataclasses.fields(cls) if f.init
                    and f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING]
        assert set(required) <= set(VALID.get(name, {})), (name, required)
        cls(**VALID.get(name, {}))  # the valid base is valid


def test_every_public_function_that_takes_numbers_goes_through_the_checks():
    for fn, _ in FUNCTIONS.values():
        assert getattr(fn, "__checked__", False), fn.__name__


@pytest.mark.parametrize("make, valid, param, value", CASES)
def test_a_bad_argument_is_refused_naming_it_before_compilation(make, valid, param, value,
                                                                no_compilation, tmp_path):
    arguments = {**valid, param: value}
    if make is A.plot_availability:
        arguments.setdefault("path", os.fspath(tmp_path / "a.png"))
    with pytest.raises((TypeError, ValueError)) as info:
        make(**arguments)
    message = str(info.value)
    assert re.search(rf"(^|\W){re.escape(param)}(\[\d+\])?( must|=)", message), message


# --- the cases the issue lists, one by one ---------------------------------------------------


@pytest.mark.parametrize("make, fragments", [
    (lambda: ALG.FedAsync(mixing="0.5"), ["mixing", "'0.5' (str)"]),
    (lambda: ALG.FedProx(2, mu="1"), ["mu", "'1' (str)"]),
    (lambda: A.dropout(0.5, 0.1), ["process", "init and step", "0.5"]),
    (lambda: ALG.FedAvg(2, selection=S.DivFL), ["selection", "not the class DivFL"]),
    (lambda: A.sample(A.AlwaysOn(), 3, 2.5), ["steps", "2.5"]),
    (lambda: A.sample(A.AlwaysOn(), 2.5, 2), ["num_clients", "2.5"]),
    (lambda: A.sample(A.AlwaysOn(), 3, 2, seed=-1), ["seed", "[0, 2^32)", "-1"]),
    (lambda: A.sample(A.AlwaysOn(), 3, 2, seed=1.5), ["seed", "1.5"]),
    (lambda: C.Constant(1e39), ["duration=1e+39", "float32"]),
    (lambda: C.Constant(1.0, speed=np.array([1e-40, 1.0])), ["speed", "float32"]),
    (lambda: C.LogNormal(1.0, 20.0), ["sigma=20.0", "underflow"]),
    (lambda: ALG.WKAFL(2, concurrency=10), ["concurrency=10", "KofP"]),
    (lambda: ALG.FedBuff(2, durations=C.KofP(), offline="late"), ["offline='late'", "KofP"]),
    (lambda: C.staleness_histogram({"num_available": np.ones(3)}), ["applied_staleness",
                                                                    "asynchronous"]),
])
def test_each_case_the_issue_lists(make, fragments, no_compilation):
    with pytest.raises((TypeError, ValueError)) as info:
        make()
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


@pytest.mark.parametrize("change, fragments", [
    (dict(algorithm=ALG.FedAvg), ["algorithm", "not the class FedAvg"]),
    (dict(availability=A.AlwaysOn), ["availability", "not the class AlwaysOn"]),
    (dict(mesh="clients"), ["mesh", "Mesh", "'clients'"]),
    (dict(checkpoint_dir=3), ["checkpoint_dir", "3 (int)"]),
    (dict(data={"x": np.ones(3)}), ["data", "FederatedData"]),
    (dict(seed=[0, 1.5]), ["seed[1]", "1.5"]),
])
def test_simulate_refuses_before_compilation(change, fragments, no_compilation):
    fn, valid = FUNCTIONS["simulate"]
    with pytest.raises((TypeError, ValueError)) as info:
        fn(**{**valid, **change})
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


@pytest.mark.slow
def test_equal_duration_models_are_equal_so_runs_may_differ_in_client_lr():
    assert C.Exponential(1.0) == C.Exponential(1.0)
    assert C.LogNormal(2.0, speed=np.ones(3)) == C.LogNormal(2.0, speed=np.ones(3))
    assert C.Constant(1.0) != C.Constant(2.0) and C.Constant(1.0) != C.Exponential(1.0)
    assert len({C.Exponential(1.0), C.Exponential(1.0)}) == 1
    fn, valid = FUNCTIONS["simulate"]
    for make in (lambda lr: ALG.FedBuff(2, client_lr=lr), lambda lr: ALG.FedAsync(client_lr=lr)):
        results = fn(**{**valid, "algorithm": [make(0.01), make(0.02)], "seed": [0, 0],
                        "rounds": 3, "eval_every": 3})
        assert len(results) == 2


def test_range_text_and_outside_values():
    assert Range(0, 1, low_open=True).text() == "in (0, 1]"
    assert Range(1).text() == ">= 1" and Range(1).outside() == 0
    assert Range(0, low_open=True).outside() == 0 and not Range(0, low_open=True).contains(0)
    assert Range(0, 2**32, high_open=True).text() == "in [0, 2^32)"
    assert not Range(0, 1).contains(np.array([0.5, np.nan]))
