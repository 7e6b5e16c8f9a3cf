#!/bin/bash
# Regenerate tests/data/engines/ from the engines (see validation/README.md).
#   bash validation/run_all.sh [ENGINES_DIR] [run_all.py options, e.g. --phase serial]
# ENGINES_DIR holds venv-vllm and venv-sglang made by ../shared/engines/install.sh
# (default /work/engines). Scratch output goes to $VALIDATION_WORK (default ENGINES_DIR/validation_work).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ENG=${1:-/work/engines}
shift || true
export VLLM_PY=${VLLM_PY:-$ENG/venv-vllm/bin/python}
export SGLANG_PY=${SGLANG_PY:-$ENG/venv-sglang/bin/python}
export VALIDATION_WORK=${VALIDATION_WORK:-$ENG/validation_work}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
exec python3 "$HERE/run_all.py" "$@"
