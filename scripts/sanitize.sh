#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over every variant and the quantizer (or those named: bash
# scripts/sanitize.sh wgmma quantize) on a small shape grid (scripts/sanitize_cases.py), one process per name. Run
# on the GPU machine after building (scripts/gpu_check.sh builds). Exits non-zero on any reported error.
#   SDPA_SANITIZE_TOOLS  the tools (default "memcheck racecheck"). synccheck passed `scalar`, `decode` and `wgmma`
#                        called alone, but fails launches of 16-block clusters (the quantizer's, which every name here
#                        runs first) with an illegal address, reporting 0 errors; 8-block clusters of the same kernel
#                        pass, and memcheck and racecheck find nothing at either size (H200, 2026-11-29,
#                        benchmarks/results/h200-2026-11-29-decode-sanitizer.md)
#   SDPA_SANITIZE_JOBS   processes at once (default 1); one at a time, racecheck of every variant takes longer than
#                        a device call (H100, 2026-11-28: memcheck of 21 variants and part of racecheck in 380 s)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHON=${PYTHON:-python3}
# The names that racecheck takes longest over start first: alone on an H100 (5 at once) 360 s, where the other 21
# (8 at once) took 300 s in all.
if [ $# -eq 0 ]; then
  names=$($PYTHON -c '
import sdpa_ext
built = sdpa_ext.variant_names(sdpa_ext.device_arch())
slow = [name for name in ("scalar", "cp_async", "decode", "decode_wgmma") if name in built]
print(*slow, "quantize", *(name for name in built if name not in slow))') || exit 1
  # shellcheck disable=SC2086  # a list of names
  set -- $names
fi

# One name under one tool: a line with the tool's summary, and the log's tail when it reports anything.
sanitize_one() {
  local log rc
  log=$(compute-sanitizer --tool "$1" --error-exitcode 1 $PYTHON scripts/sanitize_cases.py "$2" 2>&1)
  rc=$?
  echo "$1 $2: exit $rc, $(grep -E "(ERROR|RACECHECK) SUMMARY" <<<"$log" | tail -1)"
  [ $rc -eq 0 ] || tail -20 <<<"$log"
  return $rc
}
export -f sanitize_one

status=0
for tool in ${SDPA_SANITIZE_TOOLS:-memcheck racecheck}; do
  echo "== compute-sanitizer --tool $tool"
  printf '%s\n' "$@" | xargs -P "${SDPA_SANITIZE_JOBS:-1}" -I NAME bash -c "sanitize_one $tool NAME" || status=1
done
exit $status
