#!/usr/bin/env bash
# Issue 36's GPU checks (its target 3) as one command for a lent GPU machine, run from the
# repository root; each result's JSON and a log go to $OUT (the device tool's folder) or, where
# that is unset, to benchmarks/results/gpu/. Each step has a time limit (8 minutes in all, inside
# one device call's 10; not yet timed on a GPU), and a step that fails or runs out leaves the
# others' results; the script exits with the worst step's status.
#
#   1. K = 10^3, 10^4, 10^5 against the memory floor (scaling.py's k part, N = max(10^4, 4K)),
#      with the HBM bandwidth measured in the same run and each K's 12 costliest kernels;
#   2. the availability processes at N = 10^6, interval traces among them
#      (availability_overhead.py).
#
# The package runs from this tree (PYTHONPATH) on the machine's own JAX and libraries, which
# reach no network. K_VALUES and CLIENTS override the Ks and the N of step 2 (a CPU smoke run:
# K_VALUES=100 CLIENTS=20000).
set -uo pipefail
out=${OUT:-benchmarks/results/gpu}
mkdir -p "$out"
log="$out/device_checks.log"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
python=${PYTHON:-python3}
worst=0
step() {  # step SECONDS NAME COMMAND...: runs COMMAND under a time limit, logged
    local limit=$1 name=$2 rc
    shift 2
    echo "== $(date -u +%FT%TZ) $name (limit ${limit}s)" | tee -a "$log"
    timeout -k 15 "$limit" "$@" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    echo "== $name rc=$rc" | tee -a "$log"
    if [ "$rc" -gt "$worst" ]; then worst=$rc; fi
}
step 60 devices "$python" -c "import jax, fedjax_avail; print(jax.__version__, jax.devices())"
step 240 scaling-k "$python" benchmarks/scaling.py --parts k --k-values "${K_VALUES:-1000,10000,100000}" \
    --rounds 50 --repeats 2 --trace 12 --out "$out/scaling_gpu_k_floor.json"
step 180 availability "$python" benchmarks/availability_overhead.py --num-clients "${CLIENTS:-1000000}" \
    --rounds 100 --repeats 3 --out "$out/availability_overhead_gpu.json"
exit "$worst"  # the worst step's status (124: one ran out of time)
