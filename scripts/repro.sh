#!/usr/bin/env bash
# One command on a GPU machine: record the environment, build, run the tests and the benchmarks (mission and
# sweep, with JSON and plots), and bundle everything into $OUT/repro-<commit>.tar.gz.
#
#   SDPA_COMMIT=$(git rev-parse --short HEAD) bash scripts/repro.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT/repro"
export OUT SDPA_COMMIT=${SDPA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
PYTHON=${PYTHON:-python3}
{
  echo "commit: $SDPA_COMMIT"
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  $PYTHON -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
  nvcc --version | tail -1
} >"$OUT/repro/environment.txt" 2>&1
bash scripts/gpu_check.sh >"$OUT/repro/gpu_check.log" 2>&1
status=$?
for causal in "" "--causal"; do
  tag=sweep${causal:+-causal}
  $PYTHON -m sdpa_ext.bench --preset sweep $causal --json "$OUT/repro/$tag.json" --plot "$OUT/repro/$tag.png" \
    >"$OUT/repro/$tag.md" 2>"$OUT/repro/$tag.err"
done
cp "$OUT"/bench.json "$OUT"/junit.xml "$OUT"/errors.json "$OUT/repro/" 2>/dev/null
tar -czf "$OUT/repro-$SDPA_COMMIT.tar.gz" -C "$OUT" repro
tail -25 "$OUT/repro/gpu_check.log"
echo "bundle: $OUT/repro-$SDPA_COMMIT.tar.gz"
exit $status
