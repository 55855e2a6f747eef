"""Exact records at every seam (issue 35): each case of the issue's sections 1 and 2.

Budgets, checkpoints and live outputs read one list of evaluated rounds; K-of-P follows the
event clock's rules; a stop that cuts nothing is no stop; runs axes of deadlines, integer
learning rates and availability parameters of different shapes run, and over-selection is
refused; a deadline no job can meet is refused or warned about; ``compare`` and ``--config``
refuse what they cannot read in one line; simultaneous updates have a documented rule.
"""

import csv

import numpy as np
import pytest
from conftest import point_clients, quadratic_task
from jax.flatten_util import ravel_pytree
from reference.events import simulate_events
from test_callbacks import _scalars

import fedjax_avail as fa
from fedjax_avail import cli

A, ALG, C = fa.availability, fa.algorithms, fa.clock
POINTS = point_clients(np.arange(6.0)[:, None])


def _flat(result):
    return np.asarray(ravel_pytree(result.params)[0])


def _budgeted(callbacks=(), **kw):
    """FedAvg with rounds of 1.2: a budget of 12 ends it after round 10 (at time 12.0)."""
    alg = ALG.FedAvg(clients_per_round=2, local_steps=1, batch_size=1, client_lr=0.1,
                     durations=C.Constant(1.2))
    return fa.simulate(quadratic_task(), POINTS, alg, A.AlwaysOn(), rounds=40, eval_every=4,
                       max_virtual_time=12.0, callbacks=list(callbacks), **kw)


def test_a_budgeted_run_writes_the_same_rows_to_its_history_csv_and_tensorboard(tmp_path):
    pytest.importorskip("tensorboardX")
    result = _budgeted([fa.callbacks.CSVLogger(tmp_path / "m.csv"),
                        fa.callbacks.TensorBoard(tmp_path / "tb")])
    assert len(result.round_metrics["virtual_time"]) == 10
    assert result.stopped == "max_virtual_time=12 reached"
    assert result.history["round"].tolist() == [0, 4, 8, 10]  # its last round, not round 12
    assert result.history.rows[-1]["virtual_time"] == pytest.approx(12.0)
    with open(tmp_path / "m.csv", newline="") as f:
        written = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]
    assert written == [{k: float(v) for k, v in row.items()} for row in result.history.rows]
    steps = sorted({step for tag, step, _ in _scalars(tmp_path / "tb") if tag == "train_loss"})
    assert steps == [0, 4, 8, 10]


def test_a_budgeted_run_s_record_does_not_depend_on_its_checkpoint_cadence(tmp_path):
    alone = _budgeted()
    for every in (1, 3, 5, 7, None):
        checkpointed = _budgeted([fa.callbacks.Checkpointing(tmp_path / str(every),
                                                             every=every)])
        assert checkpointed.history.rows == alone.history.rows, every
        np.testing.assert_array_equal(_flat(checkpointed), _flat(alone))
    # the last row scores the final model: the loss of the mean of the points it moved to
    points = np.arange(6.0)
    final = _flat(alone)[0]
    assert alone.history.rows[-1]["train_loss"] == pytest.approx(
        np.mean((final - points) ** 2), rel=1e-5)


def test_each_run_of_a_runs_axis_ends_at_its_own_budget_with_its_own_final_row():
    alg = ALG.FedBuff(buffer_size=2, concurrency=3, local_steps=1, batch_size=1,
                      durations=C.Exponential(1.0))
    args = (quadratic_task(), POINTS, alg, A.Bernoulli(0.5))
    several = fa.simulate(*args, rounds=400, eval_every=7, max_virtual_time=10.0,
                          seed=[0, 1, 2])
    lasts = []
    for seed, result in enumerate(several):
        alone = fa.simulate(*args, rounds=400, eval_every=7, max_virtual_time=10.0, seed=seed)
        lasts.append(len(alone.round_metrics["virtual_time"]))
        assert alone.history["round"].tolist()[-1] == lasts[-1]
        assert result.history["round"].tolist() == alone.history["round"].tolist()
        np.testing.assert_allclose(result.history["train_loss"], alone.history["train_loss"],
                                   rtol=1e-6)
        assert result.stopped == alone.stopped == "max_virtual_time=10 reached"
    assert len(set(lasts)) > 1 and any(last % 7 for last in lasts)  # off the schedule


def _kofp(table, rounds, **kw):
    alg = ALG.KAsyncSGD(clients_per_round=2, batch_size=1, client_lr=0.1, history=None)
    return fa.simulate(quadratic_task(), point_clients(np.arange(4.0)[:, None]), alg,
                       A.Trace(table, **kw), rounds=rounds, eval_every=rounds)


def test_k_of_p_waits_for_k_reports_and_an_outage_is_no_update():
    # One client available a slot, in turn (0, 1, 2, 3, ...), and slots 4-9 empty: every update
    # gathers K = 2 reports over two slots and is made at the end of the second; the outage
    # passes without one. A reporter of update t receives version t + 1, so update t's
    # staleness is t - (the reporters' previous update + 1), 0 for a first report.
    table = np.zeros((16, 4), bool)
    for slot in [*range(4), *range(10, 16)]:
        table[slot, slot % 4] = True
    m = _kofp(table, 5).round_metrics
    assert m["num_applied"].tolist() == [2] * 5
    np.testing.assert_array_equal(m["virtual_time"], [2.0, 4.0, 12.0, 14.0, 16.0])
    assert m["applied_clients"].tolist() == [[0, 1], [2, 3], [2, 3], [0, 1], [2, 3]]
    assert m["applied_staleness"].tolist() == [[0, 0], [1, 1], [0, 0], [2, 2], [1, 1]]


def test_k_of_p_stalls_naming_the_time_when_no_client_comes_back():
    table = np.ones((10, 4), bool)
    with pytest.raises(fa.StalledError, match="update 10 at virtual time 11") as info:
        _kofp(table, 40, cyclic=False)
    assert info.value.round == 10 and info.value.virtual_time == 11.0
    assert info.value.result.history["round"].tolist() == [0, 10]


def test_k_of_p_iterations_last_one_slot_of_any_length():
    alg = ALG.WKAFL(clients_per_round=2, batch_size=1)
    m = fa.simulate(quadratic_task(), POINTS, alg, A.AlwaysOn(), rounds=6,
                    slot_length=0.5).round_metrics
    np.testing.assert_allclose(m["virtual_time"], 0.5 * np.arange(1, 7))


@pytest.mark.parametrize("hook", ["on_evaluation", "on_run_end"])
def test_a_stop_when_every_round_ran_is_no_stop(hook):
    class Stop(fa.callbacks.Callback):
        def on_evaluation(self, run, rows):
            if hook == "on_evaluation" and run.done == run.rounds:
                run.stop("done anyway")

        def on_run_end(self, run):
            if hook == "on_run_end":
                run.stop("done anyway")

    result = fa.simulate(quadratic_task(), POINTS, ALG.FedAvg(clients_per_round=2),
                         A.AlwaysOn(), rounds=8, eval_every=4, callbacks=[Stop()])
    assert result.stopped is None and result.history["round"].tolist() == [0, 4, 8]


def _separately(algorithms, processes, seeds, **kw):
    """Each run of a runs axis and the same run alone."""
    several = fa.simulate(quadratic_task(), POINTS, algorithms, processes, seed=seeds,
                          rounds=12, eval_every=6, **kw)
    algorithms = algorithms if isinstance(algorithms, list) else [algorithms] * len(several)
    processes = processes if isinstance(processes, list) else [processes] * len(several)
    for alg, process, seed, result in zip(algorithms, processes, seeds, several, strict=True):
        alone = fa.simulate(quadratic_task(), POINTS, alg, process, seed=seed, rounds=12,
                            eval_every=6, **kw)
        np.testing.assert_array_equal(_flat(result), _flat(alone))
        for name, values in alone.round_metrics.items():
            np.testing.assert_array_equal(result.round_metrics[name], values, err_msg=name)
    return several


def test_deadlines_run_on_the_runs_axis_as_real_numbers():
    runs = _separately([ALG.FedAvg(clients_per_round=3, local_steps=1, batch_size=1,
                                   durations=C.LogNormal(1.0, 0.5), deadline=d)
                        for d in (0.8, 2.0)], A.AlwaysOn(), [0, 0])
    late = [r.round_metrics["num_late"].sum() for r in runs]
    assert late[0] > late[1]  # the shorter deadline drops more


def test_over_selection_on_a_runs_axis_is_refused_naming_it(no_compilation):
    algorithms = [ALG.FedAvg(clients_per_round=2, durations=C.Constant(1.0), over_selection=f)
                  for f in (1.0, 2.0)]
    with pytest.raises(ValueError, match=r"differ in over_selection \(\[1.0, 2.0\]\), which "
                                         r"sets how many clients a round selects"):
        fa.simulate(quadratic_task(), POINTS, algorithms, A.AlwaysOn(), rounds=2, seed=[0, 0])


def test_an_integer_learning_rate_is_a_real_number_on_the_runs_axis():
    _separately([ALG.FedAvg(clients_per_round=2, local_steps=1, batch_size=1, client_lr=lr)
                 for lr in (1, 0.25)], A.AlwaysOn(), [0, 0])


def test_availability_parameters_of_other_shapes_share_a_runs_axis():
    alg = ALG.FedAvg(clients_per_round=2, local_steps=1, batch_size=1)
    _separately(alg, [A.Bernoulli(0.3), A.Bernoulli(np.full(6, 0.9))], [0, 1])


def test_a_process_of_the_wrong_width_on_a_runs_axis_is_named(no_compilation):
    alg = ALG.FedAvg(clients_per_round=2, local_steps=1, batch_size=1)
    with pytest.raises(ValueError, match=r"availability\[1\] \(Bernoulli\): p has 5 entries"):
        fa.simulate(quadratic_task(), POINTS, alg, [A.Bernoulli(0.3),
                                                    A.Bernoulli(np.full(5, 0.9))],
                    rounds=2, seed=[0, 1])


def test_a_deadline_no_job_can_meet_is_refused_and_one_never_met_warns(no_compilation):
    impossible = ALG.FedAvg(clients_per_round=2, durations=C.Constant(2.0), deadline=1.0)
    with pytest.raises(ValueError, match=r"deadline=1.0 is shorter than every job: .*Constant"
                                         r"\(duration=2.0\) the fastest client's job takes 2"):
        fa.simulate(quadratic_task(), POINTS, impossible, A.AlwaysOn(), rounds=2)
    fast = C.Constant(2.0, speed=np.array([1.0, 1.0, 1.0, 1.0, 1.0, 4.0]))
    ALG.FedAvg(clients_per_round=2, durations=fast, deadline=1.0).validate(6)  # 0.5 fits


def test_a_deadline_met_in_no_round_warns_naming_it():
    never = ALG.FedAvg(clients_per_round=2, durations=C.LogNormal(2.0, 0.01), deadline=1.0)
    with pytest.warns(UserWarning, match=r"no selected client finished in time in any of the 5 "
                                         r"rounds: .*deadline=1.0"):
        result = fa.simulate(quadratic_task(), POINTS, never, A.AlwaysOn(), rounds=5)
    assert result.round_metrics["num_selected"].sum() == 0


def test_a_job_restarting_between_two_updates_at_one_instant_gets_the_first():
    # FedBuff with K = 1 and two clients whose jobs both take 1: at t = 1 two updates happen,
    # client 0's (the lower index first) and client 1's. Client 0 restarts while update 0 is
    # gathered and downloads version 1, not update 1's model made at that same instant; client
    # 1 downloads version 2. Each later contribution is then 1 update stale.
    alg = ALG.FedBuff(buffer_size=1, local_steps=1, batch_size=1, client_lr=0.1,
                      durations=C.Constant(1.0))
    m = fa.simulate(quadratic_task(), point_clients(np.arange(2.0)[:, None]), alg,
                    A.AlwaysOn(), rounds=8).round_metrics
    assert m["applied_clients"].ravel().tolist() == [0, 1] * 4
    assert m["applied_staleness"].ravel().tolist() == [0, 1, 1, 1, 1, 1, 1, 1]
    np.testing.assert_array_equal(m["virtual_time"], np.repeat([1.0, 2.0, 3.0, 4.0], 2))
    reference = simulate_events(np.ones((10, 2), bool), [1.0, 1.0], 1, 8)
    assert [s for _, _, stale in reference for s in stale] == m["applied_staleness"].ravel(
        ).tolist()


def test_fedbuff_with_every_client_is_fedavg_only_for_equal_durations():
    # With speed factors client 1's jobs take 0.5 and client 0's 1: client 1 uploads at 0.5 and
    # 1.0, client 0 at 1.0, so the second update of K = N = 2 uploads holds client 1 twice,
    # which FedAvg never does.
    alg = ALG.FedBuff(buffer_size=2, concurrency=2, local_steps=1, batch_size=1,
                      durations=C.Constant(1.0, speed=np.array([1.0, 2.0])))
    m = fa.simulate(quadratic_task(), point_clients(np.arange(2.0)[:, None]), alg,
                    A.AlwaysOn(), rounds=3).round_metrics
    assert [sorted(c) for c in m["applied_clients"].tolist()] == [[0, 1], [1, 1], [0, 1]]


def _history_csv(folder, text):
    folder.mkdir()
    (folder / "metrics.csv").write_text(text)
    return str(folder)


def test_compare_reads_every_metrics_csv_the_package_writes(tmp_path, capsys):
    history = fa.History([{"round": 0, "train_loss": 2.0}, {"round": 5, "train_loss": 1.0}])
    plain = _history_csv(tmp_path / "plain", history.to_csv())
    logged = _history_csv(tmp_path / "logged", "seed,round,train_loss\n0,0,2.0\n1,0,2.2\n"
                                               "0,5,1.0\n1,5,1.2\n")
    figure = tmp_path / "both.png"
    assert cli.main(["compare", plain, logged, "--out", str(figure)]) == 0
    assert figure.is_file()
    read = fa.experiments.read_histories(logged)
    assert list(read) == ["logged"] and read["logged"]["train_loss"].tolist() == [2.1, 1.1]


@pytest.mark.parametrize("text, message", [
    ("", "holds no rows"), ("round,train_loss\n", "holds no rows"),
    ("step,loss\n1,2\n", "has no 'round' column")])
def test_compare_refuses_a_metrics_csv_it_cannot_read_in_one_line(tmp_path, capsys, text,
                                                                   message):
    folder = _history_csv(tmp_path / "bad", text)
    assert cli.main(["compare", folder, "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedjax-avail: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("text, message", [
    ("data_dir = 5\n", "setting data_dir must be None or a string, got 5 (int)"),
    ("rounds = true\n", "rounds must be an integer, got True"),
    ("rounds = \"ten\"\n", "rounds: expected an integer, got 'ten'"),
])
def test_config_values_of_the_wrong_type_are_one_line_errors(tmp_path, capsys, text, message):
    config = tmp_path / "c.toml"
    config.write_text(text)
    name = "fedlaavg-mnist" if "data_dir" in text else "digits-diurnal"
    assert cli.main(["run", name, "--config", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedjax-avail: error: ") and message in err and err.count("\n") == 1


def test_an_algorithm_named_twice_is_refused(tmp_path, capsys):
    assert cli.main(["run", "--set", "algorithms=fedavg,fedavg", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "setting algorithms must be a non-empty list of distinct algorithm names" in err
    assert err.count("\n") == 1


def _diverging(seeds, rounds):
    """FedSGD on the quadratic: lr 5 diverges (|1 - 2 lr| > 1) in round 21, lr 0.1 does not."""
    lrs = [0.1, 5.0] if isinstance(seeds, list) else 5.0
    algorithms = ([ALG.FedSGD(clients_per_round=2, batch_size=1, client_lr=lr) for lr in lrs]
                  if isinstance(lrs, list) else ALG.FedSGD(clients_per_round=2, batch_size=1,
                                                           client_lr=lrs))
    return fa.simulate(quadratic_task(), POINTS, algorithms, A.AlwaysOn(), rounds=rounds,
                       seed=seeds, eval_every=7)


@pytest.mark.parametrize("seeds, rounds", [(0, 21), ([0, 1], 70)])
def test_a_divergence_in_the_last_chunk_is_the_run_s_stop_reason(seeds, rounds):
    with pytest.raises(fa.DivergenceError) as info:
        _diverging(seeds, rounds)
    results = info.value.result if isinstance(seeds, list) else [info.value.result]
    # the run that diverged; the other (lr 0.1) ran all its rounds: None (Result.stopped)
    assert [r.stopped for r in results] == (["diverged"] if seeds == 0 else [None, "diverged"])


def _stalling(tmp_path=None):
    """Two runs in one program: under Bernoulli(0) nobody ever reports (run 0 stalls at update
    0); under Bernoulli(1) run 1 goes on to the end."""
    alg = ALG.KAsyncSGD(clients_per_round=2, batch_size=1, client_lr=0.1)
    callbacks = [] if tmp_path is None else [fa.callbacks.Checkpointing(tmp_path, every=5)]
    return fa.simulate(quadratic_task(), POINTS, alg, [A.Bernoulli(0.0), A.Bernoulli(1.0)],
                       rounds=12, seed=[0, 1], eval_every=5, callbacks=callbacks)


def test_a_stalled_run_ends_on_its_own_and_the_others_finish(tmp_path):
    for _ in range(2):  # and resumed from its final checkpoint, the same error again
        with pytest.raises(fa.StalledError, match=r"run 0 \(seed 0\): update 0 at virtual "
                                                  r"time 100000") as info:
            _stalling(tmp_path)
        stalled, healthy = info.value.result
        assert stalled.history["round"].tolist() == [0] and len(stalled.round_metrics[
            "virtual_time"]) == 0
        assert healthy.history["round"].tolist() == [0, 5, 10, 12]
        assert [stalled.stopped, healthy.stopped] == ["stalled", None]  # it ran them all


def test_a_stalled_run_s_last_row_summarises_the_rounds_it_ran():
    table = np.ones((10, 4), bool)
    with pytest.raises(fa.StalledError) as info:
        _kofp(table, 40, cyclic=False)
    result = info.value.result
    assert result.history["round"].tolist() == [0, 10]
    assert result.history.rows[-1]["virtual_time"] == result.round_metrics["virtual_time"][-1]
    assert result.round_metrics["virtual_time"][-1] == 10.0  # not 11, the failed update's


def test_a_stop_asked_by_a_later_action_still_gets_the_final_row(tmp_path):
    class StopEvery3(fa.callbacks.Callback):
        cadence = fa.callbacks.Cadence(every=3)

        def on_due(self, run):
            if run.done == 6:
                run.stop("enough")

    result = fa.simulate(quadratic_task(), POINTS, ALG.FedAvg(clients_per_round=2),
                         A.AlwaysOn(), rounds=30, eval_every=20, checkpoint_dir=tmp_path,
                         callbacks=[StopEvery3()])
    assert result.history["round"].tolist() == [0, 6] and result.stopped == "enough"
    assert "6" in {p.name for p in tmp_path.iterdir()}


def test_a_resumed_run_tells_tensorboard_to_drop_what_came_after_its_checkpoint(tmp_path):
    pytest.importorskip("tensorboardX")
    from tensorboardX.proto import event_pb2

    def run(rounds, stop_at=None):
        class Stop(fa.callbacks.Callback):
            def on_chunk_end(self, run, metrics):
                if run.done == stop_at:
                    run.stop("enough")

        return fa.simulate(quadratic_task(), POINTS, ALG.FedAvg(clients_per_round=2),
                           A.AlwaysOn(), rounds=rounds, eval_every=4,
                           callbacks=[fa.callbacks.Checkpointing(tmp_path / "c", every=3),
                                      fa.callbacks.TensorBoard(tmp_path / "tb"), Stop()])

    assert run(20, stop_at=6).history["round"].tolist() == [0, 4, 6]  # the stop's row
    assert run(20).history["round"].tolist() == [0, 4, 8, 12, 16, 20]  # not 6
    purges = []
    for events in sorted((tmp_path / "tb").glob("events.out.tfevents.*")):
        data, at = events.read_bytes(), 0
        while at < len(data):
            length = int.from_bytes(data[at:at + 8], "little")
            event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
            at += 12 + length + 4
            if event.session_log.status == event_pb2.SessionLog.START:
                purges.append(event.step)
    assert purges == [5]  # TensorBoard drops the first process's step 6 from there on


def test_gsgm_each_client_reports_once_a_round_also_across_an_update():
    # N = 6, K = 4, everyone available: update 1 ends round 1 with 2 clients and begins round
    # 2 with 2 more; update 2 completes round 2. Each round holds each client once.
    alg = ALG.GSGM(clients_per_round=4, batch_size=1, client_lr=0.1)
    m = fa.simulate(quadratic_task(), POINTS, alg, A.AlwaysOn(), rounds=6,
                    eval_every=6).round_metrics
    reports = m["applied_clients"].ravel().tolist()
    assert all(sorted(reports[i:i + 6]) == list(range(6)) for i in range(0, 24, 6))


def test_a_deadline_equal_to_the_fastest_job_is_met():
    alg = ALG.FedAvg(clients_per_round=2, local_steps=1, batch_size=1,
                     durations=C.Constant(0.1), deadline=0.1)
    m = fa.simulate(quadratic_task(), POINTS, alg, A.AlwaysOn(), rounds=3).round_metrics
    assert m["num_selected"].tolist() == [2, 2, 2] and m["num_late"].tolist() == [0, 0, 0]


def test_mifa_s_authors_fill_round_refuses_a_selection_reading_all_data():
    with pytest.raises(ValueError, match=r"selection=DivFL\(\) cannot go with "
                                         r"start='authors_code'"):
        ALG.MIFA(clients_per_round=2, start="authors_code", selection=fa.selection.DivFL())


def test_defining_prepare_is_asking_for_it():
    class Counted(fa.selection.Uniform):
        def prepare(self, state, params, problem):
            return state

    assert Counted().prepares and not fa.selection.Uniform().prepares
    assert ALG.FedAvg(clients_per_round=2, selection=Counted()).prepares
