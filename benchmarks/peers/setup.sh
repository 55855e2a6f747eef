#!/usr/bin/env bash
# Creates the virtual environments of the peer comparison (benchmarks/peer_comparison.py):
#
#   $FEDJAX_VENV (default /work/venvs/fedjax): FedJAX 0.0.17 on JAX 0.4.13 (the last JAX that
#       FedJAX 0.0.17's code and its haiku / optax / chex pins run on).
#   $FLOWER_VENV (default /work/venvs/flower): Flower with its Ray simulation engine, and numpy.
#   $PFL_VENV (default /work/venvs/pfl): pfl-research (`pfl`, Apple) with its PyTorch backend, on
#       the CPU build of PyTorch 2.13.0 (a plain `torch` requirement would pull a CUDA build of
#       several GB on Linux).
#   $FEDJAX_MODERN_SITE (default /work/venvs/fedjax_modern_site): stock FedJAX 0.0.17 and its
#       pure-Python dependencies for the project's own (current) JAX, put on PYTHONPATH with
#       jax_compat/sitecustomize.py (the `fedjax_modern` row; also how FedJAX ran on the GPU).
#
# All use python3.11 (override with $PYTHON). Idempotent: a venv whose packages already import
# at the pinned versions is left as it is; otherwise it is created if missing and pip installs
# the pins into it. Only PyPI is used.
#
# Usage: bash benchmarks/peers/setup.sh [fedjax|flower|pfl|fedjax-modern|all]   (default all)
set -euo pipefail

PYTHON="${PYTHON:-python3.11}"
FEDJAX_VENV="${FEDJAX_VENV:-/work/venvs/fedjax}"
FLOWER_VENV="${FLOWER_VENV:-/work/venvs/flower}"
PFL_VENV="${PFL_VENV:-/work/venvs/pfl}"
FEDJAX_MODERN_SITE="${FEDJAX_MODERN_SITE:-/work/venvs/fedjax_modern_site}"
MODERN_PYTHON="${MODERN_PYTHON:-.venv/bin/python}"  # the project's venv (run from the repo root)

# Pins known to install and run together here (Linux x86_64, Python 3.11).
FEDJAX_PINS=(
  "fedjax==0.0.17" "jax==0.4.13" "jaxlib==0.4.13" "numpy<2" "scipy<1.12"
  "optax==0.1.7" "dm-haiku==0.0.10" "chex==0.1.82"
)
# flwr 1.42.0 (the newest) does not install here: it requires certifi>=2026.10.19, which the
# package index does not have yet. 1.41.0 pulls ray 2.55.1 through its [simulation] extra.
FLOWER_VERSION="1.41.0"
FLOWER_PINS=("flwr[simulation]==${FLOWER_VERSION}" "numpy")
# pfl 0.6.0 (the newest) allows torch >=2.0.1,<3; 2.13.0+cpu is the CPU wheel.
PFL_VERSION="0.6.0"
PFL_PINS=("torch==2.13.0" "pfl[pytorch]==${PFL_VERSION}")

# check_venv VENV PYTHON_CODE: true when VENV's python runs PYTHON_CODE without error.
check_venv() {
  [[ -x "$1/bin/python" ]] && "$1/bin/python" -c "$2" >/dev/null 2>&1
}

# make_venv VENV PIN...: creates VENV (if missing) and installs the pins.
make_venv() {
  local venv="$1"; shift
  if [[ ! -x "$venv/bin/python" ]]; then
    echo "creating $venv with $PYTHON"
    mkdir -p "$(dirname "$venv")"
    "$PYTHON" -m venv "$venv"
  fi
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet "$@"
}

# ensure_venv NAME VENV PROBE "PACKAGE..." PIN...: leaves VENV alone if its python runs PROBE,
# else creates it / installs the pins and checks PROBE again; then prints the PACKAGEs' versions.
ensure_venv() {
  local name="$1" venv="$2" probe="$3" packages="$4"; shift 4
  if check_venv "$venv" "$probe"; then
    echo "$name venv ok: $venv"
  else
    make_venv "$venv" "$@"
    check_venv "$venv" "$probe" || { echo "$name venv check failed" >&2; exit 1; }
  fi
  "$venv/bin/python" -c "from importlib.metadata import version as v
print(*(f'{p} {v(p)}' for p in '$packages'.split()))"
}

setup_fedjax() {
  ensure_venv fedjax "$FEDJAX_VENV" "import fedjax, jax, haiku
from importlib.metadata import version
assert version('fedjax') == '0.0.17' and jax.__version__ == '0.4.13', 'versions'" \
    "fedjax jax jaxlib dm-haiku optax numpy" "${FEDJAX_PINS[@]}"
}

setup_flower() {
  ensure_venv flower "$FLOWER_VENV" "import flwr, ray, numpy
from flwr.simulation import run_simulation
from importlib.metadata import version
assert version('flwr') == '${FLOWER_VERSION}', 'version'" "flwr ray numpy" "${FLOWER_PINS[@]}"
}

setup_pfl() {
  ensure_venv pfl "$PFL_VENV" "import pfl, torch
from pfl.model.pytorch import PyTorchModel
from importlib.metadata import version
assert version('pfl') == '${PFL_VERSION}', 'version'" "pfl torch numpy" "${PFL_PINS[@]}"
}

setup_fedjax_modern() {
  "$MODERN_PYTHON" -m pip install --quiet --no-deps --upgrade --target "$FEDJAX_MODERN_SITE" \
    "fedjax==0.0.17" "dm-haiku==0.0.17" "jmp==0.0.4" "tabulate"
  cp "$(dirname "$0")/jax_compat/sitecustomize.py" "$FEDJAX_MODERN_SITE/"
  PYTHONPATH="$FEDJAX_MODERN_SITE" "$MODERN_PYTHON" -c "import fedjax, jax
from importlib.metadata import version as v
print('fedjax', v('fedjax'), 'on jax', jax.__version__)"
}

case "${1:-all}" in
  fedjax) setup_fedjax ;;
  flower) setup_flower ;;
  pfl) setup_pfl ;;
  fedjax-modern) setup_fedjax_modern ;;
  all) setup_fedjax; setup_flower; setup_pfl; setup_fedjax_modern ;;
  *) echo "usage: $0 [fedjax|flower|pfl|fedjax-modern|all]" >&2; exit 2 ;;
esac
