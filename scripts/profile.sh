#!/usr/bin/env bash
# Nsight Compute on one variant and shape (run on the GPU machine after building):
#
#   bash scripts/profile.sh VARIANT B,H,S,D [--causal]
#
# Profiles the last of three calls of the attention kernel with the sections that matter for it (speed of
# light, memory workload, compute workload, occupancy, warp stall reasons) plus tensor-pipe, DRAM and L2
# utilization, leaving the clocks alone (--clock-control none). Saves the report and a text summary to $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:?variant}
shape=${2:?B,H,S,D}
shift 2
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
name="profile-${variant//+/_}-${shape//,/x}"
metrics=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
metrics+=,sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active
metrics+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_throughput.avg.pct_of_peak_sustained_elapsed
metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum
ncu --clock-control none --kernel-name regex:attention_ --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
  --section Occupancy --section WarpStateStats --section LaunchStats --metrics "$metrics" \
  --export "$OUT/$name" --force-overwrite \
  ${PYTHON:-python3} scripts/run_case.py --variant "$variant" --shape "$shape" "$@" >"$OUT/$name.log" 2>&1
ncu --import "$OUT/$name.ncu-rep" --page details >"$OUT/$name.txt"
grep -E "Duration|Throughput|hmma|Achieved Occupancy|Registers Per|Shared Memory Configuration Size|Stall|Warp Cycles Per Issued|dram__|lts__|sm__warps" \
  "$OUT/$name.txt" | head -40
