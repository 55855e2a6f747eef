"""Settings explained: every setting of every experiment has a meaning, and the choices of a
choice-valued setting are the same in ``describe``, ``run NAME --help`` and the error a bad
value gets, and are exactly what the experiment builds."""

import re

import numpy as np
import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

from fedjax_avail import cli, data, experiments

NAMES = list(experiments.REGISTRY)


def _own(experiment) -> experiments.Experiment:
    """The experiment whose definitions a sweep's settings come from."""
    return experiment.base if isinstance(experiment, experiments.Sweep) else experiment


def _comment(text: str, key: str) -> str:
    """The comment lines above setting ``key`` in describe's output, joined."""
    match = re.search(rf"^# {key}: (.*?)\n(?:{key} = |# {key} = )", text, re.S | re.M)
    assert match, f"no explanation of {key}"
    return " ".join(line.lstrip("# ") for line in match.group(1).splitlines())


@pytest.mark.parametrize("name", NAMES)
def test_every_setting_has_a_meaning(name):
    experiment = experiments.get(name)
    for key in cli._defaults(experiment):
        assert _own(experiment).meaning(key).strip(), f"{name}: setting {key} has no meaning"


@pytest.mark.parametrize("name", NAMES)
def test_describe_and_run_help_explain_each_setting_and_list_choices(name, capsys):
    experiment = experiments.get(name)
    assert cli.main(["describe", name]) == 0
    described = capsys.readouterr().out
    assert cli.main(["run", name, "--help"]) == 0
    helped = capsys.readouterr().out
    tomllib.loads(described)  # still a config file
    choices = _own(experiment).all_choices()
    assert {"algorithms"} <= set(choices)
    for key in cli._defaults(experiment):
        for text in (described, helped):
            comment = _comment(text, key)
            assert _own(experiment).meaning(key) in comment
            if key in choices:
                listed = re.escape(", ".join(choices[key]))
                assert re.search(rf"; (one|any) of: {listed}$", comment), (key, comment)


@pytest.mark.parametrize("name", [n for n in NAMES if not isinstance(
    experiments.REGISTRY[n], experiments.Sweep)])
def test_a_bad_choice_is_refused_naming_every_valid_value(name):
    experiment = experiments.get(name)
    for key, choices in experiment.all_choices().items():
        bad = ("fedavg", "nope") if isinstance(experiment.defaults[key], tuple) else "nope"
        with pytest.raises(ValueError, match=f"setting {key} must") as error:
            experiment.config({key: bad})
        assert "nope" in str(error.value) and all(repr(c) in str(error.value) for c in choices)


def _fake_mnist(*args, **kwargs):
    rng = np.random.default_rng(0)
    split = {"x": rng.integers(0, 256, (600, 28, 28)).astype(np.uint8),
             "y": (np.arange(600) % 10).astype(np.int32)}
    return split, dict(split)


BUILDS = [n for n in NAMES if not isinstance(experiments.REGISTRY[n], experiments.Sweep)
          and "sentiment140" not in n]  # Sentiment140 needs its data; it shares FedLaAvg's


@pytest.mark.parametrize("name", BUILDS)
def test_every_choice_builds(name, monkeypatch):
    monkeypatch.setattr(data, "load_mnist", _fake_mnist)
    experiment = experiments.get(name)
    small = {k: v for k, v in {"num_clients": 20, "clients_per_round": 2, "buffer_size": 2,
                               "concurrency": 4}.items()
             if k in experiment.defaults}
    for key, choices in experiment.all_choices().items():
        if key == "source":  # the other sources download (TFDS)
            continue
        values = [choices] if key == "algorithms" else choices
        for value in values:
            setup = experiment.build(experiment.config({**small, key: value}))
            if key == "algorithms":
                assert list(setup.algorithms) == list(choices)
