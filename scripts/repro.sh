#!/usr/bin/env bash
# One command on a GPU machine: record the environment, build, run the tests and the benchmarks (mission and
# sweep, with JSON and plots), and bundle everything into $OUT/repro-<commit>.tar.gz (the only file left in $OUT).
#
#   SDPA_COMMIT=$(git rev-parse --short HEAD) bash scripts/repro.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
export SDPA_COMMIT=${SDPA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
bundle=$(mktemp -d)/repro-$SDPA_COMMIT
mkdir -p "$bundle" "$OUT"
PYTHON=${PYTHON:-python3}
{
  echo "commit: $SDPA_COMMIT"
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  $PYTHON -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
  nvcc --version | tail -1
} >"$bundle/environment.txt" 2>&1
OUT=$bundle bash scripts/gpu_check.sh >"$bundle/gpu_check.log" 2>&1
status=$?
for causal in "" "--causal"; do
  tag=sweep${causal:+-causal}
  $PYTHON -m sdpa_ext.bench --preset sweep $causal --json "$bundle/$tag.json" --plot "$bundle/$tag.png" \
    >"$bundle/$tag.md" 2>"$bundle/$tag.err"
done
tar -czf "$OUT/repro-$SDPA_COMMIT.tar.gz" -C "$(dirname "$bundle")" "$(basename "$bundle")"
tail -40 "$bundle/gpu_check.log"
echo "bundle: $OUT/repro-$SDPA_COMMIT.tar.gz"
exit $status
