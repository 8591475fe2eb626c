#!/usr/bin/env python3
"""The table of scripts/cycles.sh: per row (ROW=CSV, Nsight Compute's --csv output for one call), every kernel
with its duration and SM cycles at the locked clock, tensor-pipe use and DRAM traffic, then the row's total and its
cycles over those of the row named sdpa:cudnn."""

import collections
import csv
import sys


def kernel_metrics(path):
    """{(launch id, kernel name): {metric: value}} in launch order, from ncu's --csv page."""
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if len(r) > 10]  # program output and ==PROF== lines have fewer fields
    if not rows:
        return {}
    header, rows = rows[0], rows[1:]
    col = {name: header.index(name) for name in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
    kernels = collections.OrderedDict()
    for r in rows:
        value = float(r[col["Metric Value"]].replace(",", ""))
        kernels.setdefault((r[col["ID"]], r[col["Kernel Name"]]), {})[r[col["Metric Name"]]] = value
    return kernels


def short(name, width=48):
    name = name.replace("void ", "").replace("sdpa::", "").replace("(anonymous namespace)::", "")
    return name if len(name) <= width else name[: width - 3] + "..."


def main(args):
    table = []
    for arg in args:
        row, path = arg.split("=", 1)
        kernels = list(kernel_metrics(path).items())
        if not kernels:
            sys.exit(f"{row}: no kernel in the NVTX range 'measured' ({path})")
        table.append((row, kernels))
    totals = {row: sum(m["sm__cycles_elapsed.max"] for _, m in kernels) for row, kernels in table}
    base = totals.get("sdpa:cudnn")
    print("| row | kernel | us at base clock | SM cycles | tensor pipe % | DRAM read / write MB | cycles vs cuDNN |")
    print("|---|---|---|---|---|---|---|")
    for row, kernels in table:
        for (_, name), m in kernels:
            print(f"| {row} | {short(name)} | {m['gpu__time_duration.sum'] / 1000:.1f} | "
                  f"{m['sm__cycles_elapsed.max']:,.0f} | "
                  f"{m['sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed']:.1f} | "
                  f"{m['dram__bytes_read.sum'] / 1e6:.1f} / {m['dram__bytes_write.sum'] / 1e6:.1f} | |")
        ratio = f"{totals[row] / base:.3f}x" if base else "-"
        print(f"| {row} | **all kernels** | {sum(m['gpu__time_duration.sum'] for _, m in kernels) / 1000:.1f} | "
              f"{totals[row]:,.0f} | | | {ratio} |")


if __name__ == "__main__":
    main(sys.argv[1:])
