#!/usr/bin/env bash
# Regenerate tests/data/engines/dynamo/ (agentic Dynamo traces served by vLLM's own KV-cache
# manager on several workers; README.md "Dynamo traces"). Usage: bash validation/run_dynamo.sh [VLLM_PY]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-/work/engines/venv-vllm/bin/python}
OUT=tests/data/engines/dynamo
mkdir -p "$OUT"
: > "$OUT/summaries.jsonl.tmp"
for c in tiny2 tinythink2 clean3 kv2 burst2 think2 kv4 think100 verbatim4; do
  extra=()
  if [ "$c" = tiny2 ] || [ "$c" = tinythink2 ]; then extra=(--tokens-out "$OUT/agentic_$c.tokens.jsonl"); fi
  "$PY" validation/drive_vllm_dynamo.py --config "$c" --out "$OUT/agentic_$c.jsonl" "${extra[@]}" 2>/dev/null >> "$OUT/summaries.jsonl.tmp"
done
python3 validation/drive_vllm_dynamo.py --manifest "$OUT/summaries.jsonl.tmp" "$OUT/manifest.json"
rm "$OUT/summaries.jsonl.tmp"
