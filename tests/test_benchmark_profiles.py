"""The benchmarks' operation profiles (``benchmarks/_common.py``) count what ran, and only that.

``scaling.py --trace`` lists the costliest instructions of profiled ``fa.simulate`` rounds,
whose definitions come from the programs the engine compiles (``simulate_programs`` wraps its
compile step: if the engine stopped calling it, the definitions would be empty and the first
test fails), and ``profile_cnn_step.py --trace`` those of a compiled call. Which trace events
count is tested on a synthetic trace shaped as JAX's profiler writes them, a GPU's included
(device streams beside the host's thunks and the trace's summary lines).
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import REPO

import fedjax_avail as fa
from fedjax_avail import program

sys.path.insert(0, str(REPO / "benchmarks"))
import _common  # noqa: E402
from _common import (  # noqa: E402
    hlo_operations,
    operation_times,
    simulate_programs,
    traced_operations,
)


def test_simulate_programs_sees_the_round_program_and_unwraps():
    fd = fa.testing.point_clients(np.linspace(0.0, 1.0, 20)[:, None])
    algorithm = fa.algorithms.FedAvg(clients_per_round=4, local_steps=3, batch_size=2,
                                     client_lr=0.1)

    def run() -> fa.Result:
        return fa.simulate(fa.testing.quadratic_task(), fd, algorithm,
                           fa.availability.AlwaysOn(), rounds=2)

    compile_program = program._compile
    with simulate_programs() as definitions:
        run()
    assert program._compile is compile_program
    assert definitions and len({module for module, _ in definitions}) == 1
    profile = traced_operations(run, definitions, per=2, top=5)
    assert len(profile["operations"]) == 5 and profile["trace_events"] > 0
    assert all(op["hlo"] == definitions[next(k for k in definitions if k[1] == op["op"])]
               for op in profile["operations"])
    with pytest.raises(ValueError, match="inside"), simulate_programs():
        raise ValueError("inside")
    assert program._compile is compile_program


@pytest.mark.parametrize("per", [1, 37])
def test_traced_operations_count_a_loops_calls(per):
    """The loop body's instructions run 37 times a call; the loop itself is left out."""
    def loop(x, w):
        return jax.lax.fori_loop(0, 37, lambda i, y: jnp.tanh(y @ w + i), x)

    compiled = jax.jit(loop).lower(jnp.ones((64, 64)), jnp.eye(64)).compile()
    definitions = hlo_operations(compiled.as_text())
    assert any(hlo.endswith(" while") for hlo in definitions.values())  # tuple results parsed
    ops = traced_operations(lambda: compiled(jnp.ones((64, 64)), jnp.eye(64)), definitions,
                            per=per, top=10)["operations"]
    assert ops and not any(op["hlo"].endswith(" while") for op in ops)
    assert ops[0]["calls"] == 37 / per and "[64,64]" in ops[0]["hlo"], ops


def test_traced_operations_refuses_a_full_trace(monkeypatch):
    """A trace with as many events as the profiler keeps has lost some: no counts from it."""
    compiled = jax.jit(jnp.sin).lower(jnp.ones(8)).compile()
    monkeypatch.setattr(_common, "TRACE_EVENTS_CAP", 1)
    with pytest.raises(RuntimeError, match="events were dropped"):
        traced_operations(lambda: compiled(jnp.ones(8)), hlo_operations(compiled.as_text()),
                          per=1, top=5)


def test_hlo_operations_reads_tuple_results():
    text = ("HloModule jit_f, entry_computation_layout={}\n"
            "  %gemm = (f32[64,64]{1,0}, s8[4194304]{0}) custom-call(%a, %b), "
            "custom_call_target=\"__cublas$gemm\"\n"
            "  ROOT %fusion.2 = f32[64]{0} fusion(%gemm), kind=kLoop\n")
    assert hlo_operations(text) == {
        ("jit_f", "gemm"): "(f32[64,64]{1,0}, s8[4194304]{0}) custom-call",
        ("jit_f", "fusion.2"): "f32[64]{0} fusion"}


def _meta(kind: str, pid: int, name: str, tid: int = 0) -> dict:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}}


def _event(pid: int, tid: int, dur: float, **args: str) -> dict:
    return {"ph": "X", "name": args.get("hlo_op", "x"), "pid": pid, "tid": tid, "ts": 0,
            "dur": dur, "args": args}


DEFINITIONS = {("jit_run", "fusion.1"): "f32[8]{0} fusion",
               ("jit_run", "gemm"): "(f32[8,8]{1,0}, s8[64]{0}) custom-call",
               ("jit_run", "while.3"): "(s32[], f32[8]{0}) while",
               ("jit_eval", "fusion.1"): "f32[4]{0} fusion"}


def test_operation_times_on_a_gpu_trace():
    """Host thunks, summary lines, another module and compiler passes are not counted."""
    events = [_meta("process_name", 1, "/host:CPU"), _meta("process_name", 2, "/device:GPU:0"),
              _meta("thread_name", 2, "Stream #13(Compute)", tid=13),
              _meta("thread_name", 2, "XLA Ops", tid=90),
              _event(2, 13, 300.0, hlo_op="gemm", hlo_module="jit_run"),
              _event(2, 13, 100.0, hlo_op="gemm", hlo_module="jit_run"),
              _event(2, 13, 50.0, hlo_op="fusion.1", hlo_module="jit_run"),
              _event(2, 13, 900.0, hlo_op="fusion.1", hlo_module="jit_eval"),
              _event(2, 90, 450.0, hlo_op="gemm", hlo_module="jit_run"),  # summary line
              _event(1, 5, 800.0, hlo_op="gemm", hlo_module="jit_run"),  # the host's thunk
              _event(2, 13, 999.0, hlo_op="while.3", hlo_module="jit_run"),
              {"ph": "X", "name": "fusion.1", "pid": 1, "tid": 5, "ts": 0, "dur": 70.0}]
    run_only = {k: v for k, v in DEFINITIONS.items() if k[0] == "jit_run"}
    ops = operation_times(events, run_only, per=2, top=5, accelerator=True)
    assert ops == [{"op": "gemm", "hlo": DEFINITIONS["jit_run", "gemm"], "ms": 0.2, "calls": 1},
                   {"op": "fusion.1", "hlo": "f32[8]{0} fusion", "ms": 0.025, "calls": 0.5}]
    with pytest.raises(RuntimeError, match="no device streams.*'XLA Ops'"):
        operation_times(events[:2] + events[3:], run_only, 1, 5, accelerator=True)
    with pytest.raises(RuntimeError, match="no kernel"):
        operation_times(events[:4], run_only, 1, 5, accelerator=True)


def test_operation_times_on_a_cpu_trace():
    """Every thread's thunks count; an event naming no module needs a name only one has."""
    events = [_event(1, 5, 40.0, hlo_op="gemm", hlo_module="jit_run"),
              _event(1, 6, 60.0, hlo_op="gemm"),
              _event(1, 6, 30.0, hlo_op="fusion.1"),  # jit_run's or jit_eval's: not counted
              _event(1, 7, 20.0, hlo_op="fusion.1", hlo_module="jit_eval")]
    ops = operation_times(events, DEFINITIONS, per=1, top=5, accelerator=False)
    assert ops == [{"op": "gemm", "hlo": DEFINITIONS["jit_run", "gemm"], "ms": 0.1, "calls": 2},
                   {"op": "fusion.1", "hlo": "f32[4]{0} fusion", "ms": 0.02, "calls": 1}]


def test_library_use_tells_library_fusions_from_xla_emitter():
    """``xla_cpu_options.py --workload cnn`` says where a program's convolutions run: those in
    a computation a library fusion calls (or oneDNN's convolution calls) against XLA's own, on
    a compiled program's text and on a synthetic one."""
    from xla_cpu_options import _library_use

    def _convolutions(hlo: str) -> dict[str, int]:
        return _library_use(hlo)["convolutions"]

    text = "\n".join([
        "%fused_computation (p0: f32[1,4,4,1], p1: f32[3,3,1,2]) -> f32[1,2,2,2] {",
        "  ROOT %convolution.2 = f32[1,2,2,2]{3,2,1,0} convolution(%p0, %p1), window={size=3x3}",
        "}",
        "%fused_computation.1 (p0.1: f32[1,4,4,1]) -> f32[1,4,4,1] {",
        "  ROOT %negate = f32[1,4,4,1]{3,2,1,0} negate(%p0.1)",
        "}",
        "ENTRY %main.9 (x: f32[1,4,4,1], k: f32[3,3,1,2]) -> f32[1,2,2,2] {",
        '  %ynn_fusion = f32[1,2,2,2]{3,2,1,0} fusion(%x, %k), kind=kCustom, '
        'calls=%fused_computation, backend_config={"fusion_config":{"kind":"__ynn_fusion"}}',
        "  %neg = f32[1,4,4,1]{3,2,1,0} fusion(%x), kind=kLoop, calls=%fused_computation.1",
        "  %c = f32[1,2,2,2]{3,2,1,0} convolution(%neg, %k), window={size=3x3}",
        '  %d = f32[1,2,2,2]{3,2,1,0} custom-call(%x, %k), '
        'custom_call_target="__onednn$convolution"',
        "  ROOT %e = f32[1,2,2,2]{3,2,1,0} convolution(%c, %k), window={size=1x1}",
        "}",
    ])
    assert _convolutions(text) == {"library": 2, "xla": 2}
    assert _library_use(text)["library_fusions"] == {"__ynn_fusion": 1,
                                                     "__onednn$convolution": 1}
    assert _convolutions(text.replace('"kind":"__ynn_fusion"', '"kind":"other"')) == {
        "library": 1, "xla": 3}

    def conv(x, k):
        return jax.lax.conv_general_dilated(x, k, (1, 1), "VALID",
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))

    compiled = jax.jit(conv).lower(jnp.ones((1, 6, 6, 2)), jnp.ones((3, 3, 2, 4))).compile()
    counts = _convolutions(compiled.as_text())
    assert counts["library"] + counts["xla"] == 1
