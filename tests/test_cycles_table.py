"""scripts/cycles_table.py on Nsight Compute --csv pages written here: one kernel per row, a row of two, units."""

import csv
import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "cycles_table", Path(__file__).parent.parent / "scripts" / "cycles_table.py")
cycles_table = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(cycles_table)

HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
          "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]


def write_ncu_csv(path, kernels):
    """kernels: [(name, ns, cycles)], in ncu's long format (a line per metric) after a line of program output."""
    with open(path, "w", newline="") as f:
        f.write("auto 4x16x2048x128 causal=False: finite=True\n")
        out = csv.writer(f, quoting=csv.QUOTE_ALL)
        out.writerow(HEADER)
        for i, (name, ns, cycles) in enumerate(kernels):
            metrics = {"gpu__time_duration.sum": f"{ns:,}", "sm__cycles_elapsed.max": f"{cycles:,}",
                       "dram__bytes_read.sum": "2,000,000", "dram__bytes_write.sum": "1,000,000",
                       "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed": "68.9"}
            for metric, value in metrics.items():
                out.writerow([str(i), "1", "python3", "host", name, "1", "7", "(384, 1, 1)", "(1024, 1, 1)", "0",
                              "9.0", "Command line profiler metrics", metric, "", value])


def test_totals_and_ratio_against_cudnn(tmp_path, capsys):
    ours, theirs = tmp_path / "auto.csv", tmp_path / "cudnn.csv"
    write_ncu_csv(ours, [("void sdpa::kv_to_half_kernel(sdpa::AttentionParams)", 8_000, 12_000),
                         ("void sdpa::attention_wgmma_kernel<...>(sdpa::AttentionParams)", 280_000, 372_000)])
    write_ncu_csv(theirs, [("cudnn_generated_fort_native_sdpa_sm90_flash_fprop", 279_000, 370_000)])
    cycles_table.main([f"auto={ours}", f"sdpa:cudnn={theirs}"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| row | kernel |")
    assert "| auto | kv_to_half_kernel(AttentionParams) | 8.0 | 12,000 | 68.9 | 2.0 / 1.0 | |" in lines
    assert "| auto | **all kernels** | 288.0 | 384,000 | | | 1.038x |" in lines
    assert "| sdpa:cudnn | **all kernels** | 279.0 | 370,000 | | | 1.000x |" in lines


def test_no_ratio_without_a_cudnn_row(tmp_path, capsys):
    ours = tmp_path / "fast.csv"
    write_ncu_csv(ours, [("void sdpa::attention_wgmma_kernel<...>(sdpa::AttentionParams)", 260_000, 350_000)])
    cycles_table.main([f"fast={ours}"])
    assert "| fast | **all kernels** | 260.0 | 350,000 | | | - |" in capsys.readouterr().out


def test_a_row_without_kernels_names_its_file(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("no kernels were profiled\n")
    with pytest.raises(SystemExit, match="auto: no kernel"):
        cycles_table.main([f"auto={empty}"])
