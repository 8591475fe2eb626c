#!/usr/bin/env bash
# Per-cycle comparison at one shape, free of the GPU's power state: Nsight Compute with the clocks locked at base
# (--clock-control base) profiles the kernels of one call of each row (scripts/run_case.py, NVTX range
# "measured") and scripts/cycles_table.py prints their durations, SM cycles, tensor-pipe use and DRAM traffic,
# with each row's cycles over cuDNN's. Run on the GPU machine after building:
#
#   bash scripts/cycles.sh B,H,S,D [--causal] [ROW ...]     rows: sdpa_ext variants or sdpa:BACKEND
#                                                             (default: auto fast sdpa:cudnn)
set -euo pipefail
cd "$(dirname "$0")/.."
shape=${1:?B,H,S,D}
shift
causal=()
if [[ "${1:-}" == --causal ]]; then
  causal=(--causal)
  shift
fi
rows=("$@")
[[ ${#rows[@]} -gt 0 ]] || rows=(auto fast sdpa:cudnn)
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
metrics=gpu__time_duration.sum,sm__cycles_elapsed.max,dram__bytes_read.sum,dram__bytes_write.sum
metrics+=,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed
csvs=()
for row in "${rows[@]}"; do
  if [[ "$row" == sdpa:* ]]; then case_args=(--sdpa "${row#sdpa:}"); else case_args=(--variant "$row"); fi
  csv="$OUT/cycles-${shape//,/x}${causal[*]:+-causal}-${row//[:+]/_}.csv"
  ncu --clock-control base --print-units base --nvtx --nvtx-include "measured/" --metrics "$metrics" --csv \
    ${PYTHON:-python3} scripts/run_case.py "${case_args[@]}" --shape "$shape" "${causal[@]}" >"$csv"
  csvs+=("$row=$csv")
done
${PYTHON:-python3} scripts/cycles_table.py "${csvs[@]}"
