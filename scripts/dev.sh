#!/usr/bin/env bash
# Set up the project on a fresh machine and run the main job or the tests.
#   bash scripts/dev.sh example   # venv + install + real GRPO run with all guards (tiny offline model)
#   bash scripts/dev.sh test      # venv + install + the whole test suite (slow tests included), on the newest
#                                 # supported TRL (.venv) and again on the oldest (.venv-trl-oldest: TRL 1.13),
#                                 # then tests/verl on verl's stack (.venv-verl: verl 0.9.1 and its pins)
#   bash scripts/dev.sh test-verl # only the verl stack: .venv-verl + tests/verl
#   bash scripts/dev.sh setup     # venv + install only
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=${VENV:-.venv}

setup() {
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
  fi
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  # torch first and pinned: 2.13.0 is the CPU wheel; an unpinned spec can pull a multi-GB CUDA build.
  "$VENV/bin/python" -m pip install -q "torch==2.13.0"
  "$VENV/bin/python" -m pip install -q -e ".[dev,tinker]" "torch==2.13.0"
  # tinker-cookbook pinned and without its dependencies: the tinker extra has them, less tml-renderers (not on PyPI)
  "$VENV/bin/python" -m pip install -q --no-deps "tinker-cookbook==0.6.1" "torch==2.13.0"
  frameworks "$VENV"
}

frameworks() {
  # OpenRLHF's reward executor, which the audit's OpenRLHF caller is checked against: its package pins vLLM-era
  # versions (deepspeed, ray, transformers 5.15) that its executor does not need, so it goes in without them.
  "$1/bin/python" -m pip install -q --no-deps "openrlhf==0.11.2"
}

OLDEST_VENV=${OLDEST_VENV:-.venv-trl-oldest}
OLDEST_PINS=("trl==1.13.*" "transformers==5.0.*")  # the oldest stack pyproject admits

setup_oldest() {
  if [ ! -x "$OLDEST_VENV/bin/python" ]; then
    "$PY" -m venv "$OLDEST_VENV"
  fi
  "$OLDEST_VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  "$OLDEST_VENV/bin/python" -m pip install -q "torch==2.13.0"
  "$OLDEST_VENV/bin/python" -m pip install -q -e ".[dev]" "${OLDEST_PINS[@]}"
  frameworks "$OLDEST_VENV"
}

VERL_VENV=${VERL_VENV:-.venv-verl}
# verl 0.9.1 pins transformers < 5.11 and pulls Ray; TransferQueue, cachetools, fastapi and uvicorn are what its
# V1 trainer and agent-loop modules import. trl 1.16 accepts that transformers.
VERL_PINS=("verl==0.9.1" "transformers==5.10.4" "trl==1.16.0" "TransferQueue==0.1.11" "cachetools" "fastapi" "uvicorn")

setup_verl() {
  if [ ! -x "$VERL_VENV/bin/python" ]; then
    "$PY" -m venv "$VERL_VENV"
  fi
  "$VERL_VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  "$VERL_VENV/bin/python" -m pip install -q "torch==2.13.0"
  "$VERL_VENV/bin/python" -m pip install -q -e ".[dev,verl]" "torch==2.13.0" "${VERL_PINS[@]}"
}

test_verl() {
  setup_verl
  "$VERL_VENV/bin/python" -c "import verl, ray, transformers, torch; print(f'== tests/verl on verl {verl.__version__}, ray {ray.__version__}, transformers {transformers.__version__}, torch {torch.__version__}')"
  # one local Ray per test module (2 CPUs); only the verl driver's tests: the other stacks cover the rest
  RAY_USAGE_STATS_ENABLED=0 "$VERL_VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=5 tests/verl
}

stack() {
  "$1/bin/python" -c "import trl, transformers, torch; print(f'== suite on trl {trl.__version__}, transformers {transformers.__version__}, torch {torch.__version__}')"
}

ensure_chromium() {
  # The HTML report test renders the page in headless Chromium (Debian package).
  if ! command -v chromium >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
        || echo "warning: could not install chromium; the report screenshot test will be skipped" >&2
    fi
  fi
}

export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_SILENT=true
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

case "${1:-}" in
  setup)
    setup ;;
  example)
    setup
    WANDB_MODE=offline "$VENV/bin/python" examples/grpo_tiny.py --output_dir "${OUTPUT_DIR:-outputs/grpo_tiny}" ;;
  test)
    setup
    ensure_chromium
    "$VENV/bin/ruff" check .
    stack "$VENV"
    newest=0
    "$VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=15 || newest=$?
    setup_oldest
    stack "$OLDEST_VENV"
    oldest=0
    "$OLDEST_VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=5 || oldest=$?
    verl=0
    test_verl || verl=$?
    echo "== newest stack: exit $newest; oldest stack: exit $oldest; verl stack: exit $verl"
    [ "$newest" = 0 ] && [ "$oldest" = 0 ] && [ "$verl" = 0 ] ;;
  test-verl)
    test_verl ;;
  *)
    echo "usage: bash scripts/dev.sh {setup|example|test|test-verl}" >&2; exit 2 ;;
esac
