"""Outputs that describe the run: figure titles, seed bands, table headers, compare legends."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

import fedjax_avail as fa
from fedjax_avail import experiments
from fedjax_avail.experiments import _folder, _sweep
from fedjax_avail.experiments._summary import summary_row
from fedjax_avail.history import History
from fedjax_avail.plotting import plot_histories, run_title
from fedjax_avail.testing import point_clients, quadratic_task


def _history(loss: float, rounds: int = 4, accuracy: float | None = 0.5) -> History:
    return History([{"round": r, "train_loss": loss / (r + 1),
                     **({} if accuracy is None else {"test_accuracy": accuracy + 0.01 * r})}
                    for r in range(rounds)])


def _per_seed() -> dict[str, list[History]]:
    return {"fedavg": [_history(1.0, accuracy=0.5), _history(2.0, accuracy=0.6)],
            "fedlaavg": [_history(3.0, accuracy=0.7), _history(5.0, accuracy=0.9)]}


def test_run_title_names_the_seeds_and_every_algorithm():
    title = run_title("fedlaavg-mnist", ["fedavg", "fedlaavg", "sequential"], 2)
    assert title == "fedlaavg-mnist: fedavg, fedlaavg, sequential; 2 seeds"
    assert run_title("digits-diurnal", ["fedavg"], 1).endswith("; 1 seed")


def test_result_figures_are_titled_from_the_run_and_get_the_seeds(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(_folder, "plot_histories",
                        lambda *args, **kwargs: calls.append((args, kwargs)))
    experiment = SimpleNamespace(name="subtrunc-mnist", description="... over 5 seeds")
    per_seed = _per_seed()
    _folder._write_files(tmp_path, {}, per_seed, [], experiment,
                             SimpleNamespace(x_axes=("round", "virtual_time")), True, [3, 4])
    assert len(calls) == 2  # one figure per x axis
    for _, kwargs in calls:
        assert kwargs["title"] == "subtrunc-mnist: fedavg, fedlaavg; 2 seeds"
        assert kwargs["spread"] is per_seed


def test_writing_figures_leaves_pyplot_and_its_backend_alone(tmp_path):
    """A notebook that ran an experiment with ``out`` keeps its inline backend and figures:
    the PNG writers neither switch matplotlib's backend nor leave figures in pyplot."""
    import matplotlib
    import matplotlib.pyplot as plt

    from fedjax_avail.availability import Markov, plot_availability
    from fedjax_avail.plotting import plot_grid

    before = matplotlib.get_backend()
    matplotlib.use("svg")  # what a notebook's own backend stands for here: not Agg
    try:
        mine = plt.figure()
        means = {name: _folder.mean_history(runs) for name, runs in _per_seed().items()}
        plot_histories(means, tmp_path / "h.png", spread=_per_seed())
        plot_grid({"a": means, "b": means}, tmp_path / "g.png")
        plot_availability(Markov(0.1, 0.2), 10, 20, path=tmp_path / "m.png")
        assert matplotlib.get_backend() == "svg" and plt.get_fignums() == [mine.number]
        for name in ("h", "g", "m"):
            assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert plot_histories(means).canvas.manager is not None  # no path: pyplot's, to show
    finally:
        plt.close("all")
        matplotlib.use(before)

def test_multi_seed_curves_get_a_min_max_band():
    per_seed = _per_seed()
    means = {name: _folder.mean_history(runs) for name, runs in per_seed.items()}
    figure = plot_histories(means, spread=per_seed)
    loss, accuracy, _legend_panel = figure.axes
    assert len(loss.collections) == len(accuracy.collections) == 2  # one band per algorithm
    band = loss.collections[1].get_paths()[0].vertices  # fedlaavg's: seeds 3.0 and 5.0
    expected = np.array([3.0, 5.0]) / np.arange(1, 5)[:, None]
    np.testing.assert_allclose(sorted(set(np.round(band[:, 1], 6))),
                               sorted(set(np.round(expected.ravel(), 6))))
    lone = plot_histories(means, spread={"fedavg": per_seed["fedavg"][:1]})
    assert not lone.axes[0].collections  # one seed: a line, no band
    assert not plot_histories(means).axes[0].collections


def test_summary_headers_are_whole_and_columns_aligned():
    rows = [
        {"algorithm": "random", "status": "ok", "stopped_at_round": None,
         "final_train_loss": 0.3, "final_test_accuracy": 0.9, "amplitude_last_window": None,
         "client_dissimilarity": 4.5, "seconds": 12.3, "seeds": [0, 1],
         "final_train_loss_std": 0.01, "client_dissimilarity_std": 1.25},
        {"algorithm": "poc", "status": "diverged: loss NaN", "stopped_at_round": 7,
         "final_train_loss": 12345.5, "final_test_accuracy": None,
         "amplitude_last_window": 0.1, "client_dissimilarity": None, "seconds": 1.0},
    ]
    header, mean, std, diverged = experiments.format_summary(rows).splitlines()
    assert "client_dissimilarity" in header.split()
    end = header.index("client_dissimilarity") + len("client_dissimilarity")
    assert mean[:end].endswith(" 4.5000") and std[:end].endswith(" 1.2500")
    assert diverged[:end].endswith(" n/a") and diverged.endswith("(diverged at round 7)")
    loss_end = header.index("train loss") + len("train loss")
    assert mean[:loss_end].endswith(" 0.3000") and diverged[:loss_end].endswith(" 12345.5000")


def test_a_mean_over_seeds_says_how_many_seeds_measured_it():
    # Seed 1 never reaches 85%: the time to it is seed 0's alone, and the summary says so
    # (before, "time_to_85 20.0 +- 0.0" read as if every seed had reached it).
    from fedjax_avail.experiments._time_to_accuracy import time_to_accuracy

    def result(accuracies):
        rows = [{"round": 10 * i, "virtual_time": 10.0 * i, "train_loss": 1.0,
                 "test_accuracy": a} for i, a in enumerate(accuracies)]
        return SimpleNamespace(history=History(rows), timing={"earlier": 0.0, "compile": 0.0})

    setup = SimpleNamespace(window=2, summary=lambda h: time_to_accuracy(h, (0.85, 0.3)))
    row = summary_row("fedavg", "ok", [result([0.1, 0.5, 0.86]), result([0.1, 0.2, 0.6])],
                      setup, 0.0, None, [0, 1])
    assert (row["time_to_85"], row["time_to_85_count"]) == (20.0, 1)
    assert (row["time_to_30"], row["time_to_30_std"], row["time_to_30_count"]) == (15.0, 5.0, 2)
    assert row["final_test_accuracy_count"] == 2
    header, mean, _ = experiments.format_summary([row]).splitlines()
    assert "20.0000 (1/2 seeds)" in mean and "15.0000 (" not in mean
    assert header.split()[-1] == "sec" and "time_to_85_count" not in header


def _finished_run(directory, **settings):
    directory.mkdir(parents=True)
    History([{"algorithm": "fedavg", "round": r, "train_loss": 1.0 / (r + 1)}
             for r in range(3)]).to_csv(directory / "metrics.csv")
    config = {"experiment": "digits-diurnal", "rounds": 2, "lr": 0.05, **settings,
              "provenance": {"time": str(directory)}}  # differs, and is no setting
    (directory / "config.json").write_text(json.dumps(config))


def _legend(figure) -> list[str]:
    """The legend's entries: in the panel right of the axes."""
    return [text.get_text() for text in figure.axes[-1].get_legend().get_texts()]


def _table(figure) -> list[str]:
    return figure.axes[-1].get_legend().get_title().get_text().splitlines()


def test_compare_labels_runs_by_letter_with_their_settings_in_a_table(tmp_path):
    _finished_run(tmp_path / "a", lr=0.05)
    _finished_run(tmp_path / "b", lr=0.1, algorithms=["fedavg", "fedlaavg"])
    figure = experiments.compare_runs([tmp_path / "a", tmp_path / "b"], tmp_path / "ab.png")
    assert _legend(figure) == ["fedavg [A]", "fedavg [B]"]
    assert _table(figure) == ["A: lr=0.05", "B: lr=0.1, algorithms=fedavg,fedlaavg"]
    assert figure._suptitle.get_text() == "digits-diurnal: runs differing in lr, algorithms"
    loss = figure.axes[0]
    assert [line.get_linestyle() for line in loss.get_lines()] == ["-", "--"]  # a style a run
    assert len({line.get_color() for line in loss.get_lines()}) == 1  # a colour an algorithm
    assert not any(ax.get_legend() for ax in figure.axes[:-1])  # no legend over the curves
    assert (tmp_path / "ab.png").read_bytes()[:4] == b"\x89PNG"


def test_compare_falls_back_to_folder_names_when_no_setting_differs(tmp_path):
    _finished_run(tmp_path / "first")
    _finished_run(tmp_path / "again")
    figure = experiments.compare_runs([tmp_path / "first", tmp_path / "again"],
                                      tmp_path / "c.png")
    assert _legend(figure) == ["fedavg [A]", "fedavg [B]"]
    assert _table(figure) == ["A: first", "B: again"]
    assert figure._suptitle.get_text() == "digits-diurnal: first, again"


def _seeded_run(directory, seeds, algorithms, **settings):
    """A finished run's files: per seed s and algorithm i, loss (i + 1 + s) / (r + 1) at rounds
    0, 5, 10, virtual time 2 per round from round 1 (none recorded at round 0)."""
    directory.mkdir(parents=True)
    History([{"algorithm": name, "seed": seed, "round": r,
              "virtual_time": float("nan") if r == 0 else 2.0 * r,
              "train_loss": (i + 1 + seed) / (r + 1), "test_accuracy": 0.1 * seed}
             for i, name in enumerate(algorithms) for seed in seeds
             for r in (0, 5, 10)]).to_csv(directory / "metrics.csv")
    config = {"experiment": "async-mnist", "seeds": list(seeds), **settings}
    (directory / "config.json").write_text(json.dumps(config))


def test_compare_draws_each_curve_with_its_seeds_band_and_round_0_on_every_axis(tmp_path):
    algorithms = ("fedavg", "fedbuff", "fedasync", "mifa")
    _seeded_run(tmp_path / "one", (0, 1, 2, 3, 4), algorithms, lr=0.01)
    _seeded_run(tmp_path / "two", (0, 1, 2, 3, 4), algorithms,
                lr=0.02, experiment="time-to-accuracy-mnist-with-a-long-name", concurrency=7,
                duration_mean=2.0, duration_sigma=1.0, speed_sigma=1.0, local_steps=5,
                batch_size=10, eval_every=50, max_virtual_time=900.0)
    figure = experiments.compare_runs([tmp_path / "one", tmp_path / "two"],
                                      tmp_path / "t.png", x="virtual_time")
    assert len(_legend(figure)) == 8  # every curve has its entry
    loss = figure.axes[0]
    assert len(loss.get_lines()) == 8 and len(loss.collections) == 8  # a band each
    for line in loss.get_lines():
        assert list(line.get_xdata()) == [0.0, 10.0, 20.0]  # round 0 at virtual time 0
    fedavg = loss.collections[0].get_paths()[0].vertices[:, 1]
    assert np.isclose(fedavg.max(), 5.0) and np.isclose(fedavg.min(), 1.0 / 11)  # seeds 0..4
    assert np.allclose(loss.get_lines()[0].get_ydata(), [3.0, 3.0 / 6, 3.0 / 11])  # the mean
    title = figure._suptitle.get_text()
    assert "async-mnist / time-to-accuracy-mnist-with-a-long-name" in title.replace("\n", " ")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(figure).get_renderer()
    drawn = figure._suptitle.get_window_extent(renderer)
    assert 0 <= drawn.x0 and drawn.x1 <= figure.bbox.x1  # the title fits the figure
    figure._suptitle.set_text(title.replace("\n", " "))  # on one line it would not
    assert figure._suptitle.get_window_extent(renderer).width > figure.bbox.width


def test_a_sweep_folder_compares_as_one_curve_per_algorithm_and_setting(tmp_path):
    rows = [{"setting": f"lr={lr}", "lr": lr, "algorithm": "fedavg", "round": r,
             "train_loss": lr * (r + 1)} for lr in (0.1, 0.2) for r in range(3)]
    (tmp_path / "s").mkdir()
    History(rows).to_csv(tmp_path / "s" / "metrics.csv")
    histories = experiments.read_histories(tmp_path / "s")
    assert list(histories) == ["fedavg (lr=0.1)", "fedavg (lr=0.2)"]  # not averaged together
    np.testing.assert_allclose(histories["fedavg (lr=0.2)"]["train_loss"], [0.2, 0.4, 0.6])


@pytest.mark.parametrize("name, seeds", [("subtrunc-mnist-table2", 5),
                                         ("fedlaavg-mnist-fig4", 1)])
def test_sweep_titles_come_from_what_was_run(name, seeds):
    sweep = experiments.get(name)
    panels = experiments.sweep_settings(sweep, {"algorithms": ("fedavg",)} if seeds == 1 else {})
    outcomes = {label: SimpleNamespace(histories={a: None for a in
                                                  sweep.base.config(panel)["algorithms"]})
                for label, panel in panels.items()}
    title = _sweep.sweep_title(sweep, panels, outcomes)
    algorithms = ", ".join(sweep.base.config(next(iter(panels.values())))["algorithms"])
    varied = ", ".join(dict.fromkeys(k for s in sweep.settings.values() for k in s))
    assert title == (f"{name}: {algorithms}; {seeds} seed{'s' * (seeds > 1)}; over {varied}")


def test_seeds_stopped_at_their_own_rounds_are_averaged_round_by_round():
    """A time budget stops each seed at its own round: the mean (and the band, and the
    summary) compare the seeds at the rounds all of them recorded, not row by row."""
    algorithm = fa.algorithms.FedAvg(clients_per_round=4, local_steps=2, batch_size=1,
                                     client_lr=0.1, durations=fa.clock.Exponential(1.0))
    results = fa.simulate(quadratic_task(2), point_clients(np.arange(16.0).reshape(8, 2)),
                          algorithm, fa.availability.Bernoulli(0.8), rounds=100, seed=[0, 1, 2],
                          eval_every=10, max_virtual_time=30.0)
    histories = [r.history for r in results]
    done = [int(h["round"][-1]) for h in histories]
    assert len(set(done)) > 1  # the seeds stopped at rounds of their own
    shared = sorted(set.intersection(*(set(h["round"].tolist()) for h in histories)))
    mean = _folder.mean_history(histories)
    assert mean["round"].tolist() == shared
    for k, r in enumerate(shared):  # each a plain mean of the seeds' rows at that round
        rows = [next(row for row in h if row["round"] == r) for h in histories]
        assert mean.rows[k]["train_loss"] == pytest.approx(
            np.mean([row["train_loss"] for row in rows]), rel=1e-12)
    setup = SimpleNamespace(summary=None, window=20)
    row = summary_row("fedavg", "ok", results, setup, 0.0, None, [0, 1, 2])
    assert row["rounds_done"] == min(done) and row["rounds_done_per_seed"] == done
    figure = plot_histories({"fedavg": mean}, spread={"fedavg": histories})
    band = figure.axes[0].collections[0].get_paths()[0].vertices  # the train loss panel's
    at_shared = [[row["train_loss"] for row in h if row["round"] in shared] for h in histories]
    edges = np.concatenate([np.min(at_shared, 0), np.max(at_shared, 0)])
    assert set(np.round(band[:, 1], 6)) == set(np.round(edges, 6))


def test_a_mean_of_one_row_is_drawn_as_a_visible_point():
    """Seeds a budget stops before their second evaluation share round 0 alone: one row, which
    a plain line would not draw at all."""
    one = History([{"round": 0, "train_loss": 2.0, "test_accuracy": 0.1}])
    figure = plot_histories({"fedavg": one, "fedbuff": _history(1.0)})
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    assert lines["fedavg"].get_marker() == "o"
    assert lines["fedbuff"].get_marker() in ("None", None, "")  # longer curves stay lines


def test_dominant_period_reads_the_evenly_spaced_evaluations_only():
    # A period of 40 rounds sampled every 5, and the run's last round (203) off the grid, with
    # a value far off the curve: before, it was read as the next sample of the grid.
    rounds = np.arange(0, 201, 5)
    rows = [{"round": int(r), "train_loss": float(np.sin(2 * np.pi * r / 40))} for r in rounds]
    history = History([*rows, {"round": 203, "train_loss": 50.0}])
    assert experiments.dominant_period(history) == pytest.approx(40.0, rel=0.05)
    uneven = History([{"round": r, "train_loss": 1.0} for r in (0, 5, 10, 20, 25, 30, 35)])
    with pytest.raises(ValueError, match="evenly spaced evaluations of 'train_loss'"):
        experiments.dominant_period(uneven)
