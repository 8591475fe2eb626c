#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over every variant (or those named: bash scripts/sanitize.sh wgmma)
# on a small shape grid (scripts/sanitize_cases.py). Run on the GPU machine after building (scripts/gpu_check.sh
# builds). Exits non-zero on any reported error. SDPA_SANITIZE_TOOLS picks the tools: racecheck over every variant
# takes longer than one device call (H100, 2026-11-28: memcheck of 21 variants and part of racecheck in 380 s), so
# a run may split them: SDPA_SANITIZE_TOOLS=racecheck bash scripts/sanitize.sh decode decode_wgmma
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
status=0
for tool in ${SDPA_SANITIZE_TOOLS:-memcheck racecheck}; do
  echo "== compute-sanitizer --tool $tool"
  compute-sanitizer --tool "$tool" --error-exitcode 1 $PYTHON scripts/sanitize_cases.py "$@" 2>&1 | tail -5 || status=1
done
exit $status
