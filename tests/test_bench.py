"""The benchmark CLI runs end to end (CPU everywhere, GPU when there is one) and writes what it promises."""

import json
import shutil
import subprocess

import pytest
import torch

from conftest import requires_cuda
import sdpa_ext.attention
from sdpa_ext import bench, timing


@pytest.mark.parametrize("option, bad", [("--rounds", "0"), ("--rounds", "-2"), ("--rounds", "x"),
                                         ("--sustained", "-1"), ("--sustained", "x"), ("--sustained", "nan")])
def test_bad_option_values_are_rejected(option, bad):
    with pytest.raises(SystemExit):
        bench.main([option, bad])


def test_rounds_report_the_median_of_every_pass(tmp_path, monkeypatch):
    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: False)
    report = run_bench(tmp_path, "--rounds", "3")
    for row in report["results"][0]["rows"]:
        assert len(row["rounds_us"]) == 3
        assert row["time_us"] == sorted(row["rounds_us"])[1]


def test_sustained_applies_to_the_gpu_only(tmp_path, monkeypatch):
    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: False)
    report = run_bench(tmp_path, "--sustained", "0.5")
    assert all("time_us" in row and "clocks" not in row for row in report["results"][0]["rows"])


def test_head_dims_without_kernels_time_the_kernel_on_padded_codes(tmp_path, monkeypatch):
    # At D = 80 the kernel rows run as the drop-in does (codes padded to 128, the softmax scale of 80, 80 output
    # dims), so they are as accurate as the drop-in's rows.
    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: False)
    rows = {row["name"]: row for row in run_bench(tmp_path, "--shape", "1,2,40,80")["results"][0]["rows"]}
    kernel, drop_in = rows["sdpa_ext[auto]"], rows["sdpa_ext end-to-end"]
    assert kernel["sqnr_db"] > 20 and abs(kernel["sqnr_db"] - drop_in["sqnr_db"]) < 0.01


def test_clock_power_lines_parse():
    assert timing.parse_clock_power("1770, 691.25\n") == (1770.0, 691.25)
    for bad in ("[N/A], 691.25", "", "1770"):
        assert timing.parse_clock_power(bad) is None


@requires_cuda
def test_nvidia_smi_names_the_gpu_that_torch_uses():
    # nvidia-smi counts every GPU and torch only those CUDA_VISIBLE_DEVICES leaves: the sampler names it by UUID.
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no nvidia-smi on this machine")
    device = torch.cuda.current_device()
    listed = subprocess.run(["nvidia-smi", "-i", timing.nvidia_smi_id(device), "--query-gpu=name",
                             "--format=csv,noheader"], capture_output=True, text=True, check=True)
    assert listed.stdout.strip() == torch.cuda.get_device_name(device)


@requires_cuda
def test_kernel_device_us_names_each_kernel_a_call_launches():
    # A fill kernel and a multiply kernel a call, each by its own name with its mean device time. (A plain copy
    # would not do: torch runs it as a cudaMemcpy, which CUPTI names "Memcpy DtoD".)
    x, y = (torch.zeros(1 << 20, device="cuda") for _ in range(2))
    shares = timing.kernel_device_us(lambda i: torch.mul(x.fill_(i), 2, out=y), calls=4)
    assert all(us > 0 for us in shares.values())
    assert any("fill" in name.lower() for name in shares) and any("mul" in name.lower() for name in shares)


def test_parse_shape_rejects_bad_input():
    assert bench.parse_shape("1,8,512,64") == (1, 8, 512, 64)
    for bad in ("1,8,512", "1,8,x,64", "1,0,4,64"):
        with pytest.raises(Exception, match="B,H,S,D"):
            bench.parse_shape(bad)


@pytest.mark.parametrize("diff_status, label", [(0, "abc1234"), (1, "abc1234+changes")])
def test_commit_label_says_when_the_tree_differs_from_head(monkeypatch, diff_status, label):
    def fake_git(args, **kwargs):
        if args[1] == "rev-parse":
            return subprocess.CompletedProcess(args, 0, stdout="abc1234\n")
        return subprocess.CompletedProcess(args, diff_status, stdout="")

    monkeypatch.setattr(bench.subprocess, "run", fake_git)
    assert bench.git_commit() == label


def run_bench(tmp_path, *args):
    path = tmp_path / "bench.json"
    assert bench.main([*args, "--shape", "1,2,64,64", "--json", str(path)]) == 0
    return json.loads(path.read_text())


def test_cpu_run_writes_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: False)
    report = run_bench(tmp_path, "--causal")
    assert report["device"] == "cpu" and report["torch"] and report["commit"]
    rows = {r["name"]: r for r in report["results"][0]["rows"]}
    assert {"sdpa_ext[auto]", "sdpa_ext quantize q,k,v", "sdpa_ext end-to-end", "sdpa_ext end-to-end [fast]",
            "torch sdpa math"} <= set(rows)
    assert rows["sdpa_ext[auto]"]["cosine"] > 0.99 and rows["torch sdpa math"]["vs_best_sdpa"] == 1.0
    # The quantization's share of the drop-in: beyond the `auto` kernel's row for `auto`; the quantize row's for
    # `fast`, whose kernel row did not run.
    auto, fast = rows["sdpa_ext end-to-end"], rows["sdpa_ext end-to-end [fast]"]
    beyond_kernel = max(auto["time_us"] - rows["sdpa_ext[auto]"]["time_us"], 0.0)
    assert auto["cosine"] > 0.99 and auto["quantize_share"] == pytest.approx(beyond_kernel / auto["time_us"])
    quantize_us = rows["sdpa_ext quantize q,k,v"]["time_us"]
    assert fast["cosine"] > 0.99 and fast["quantize_share"] == pytest.approx(quantize_us / fast["time_us"])
    assert "| sdpa_ext[auto] |" in capsys.readouterr().out


def test_quantize_row_is_what_the_drop_in_quantizes(tmp_path, monkeypatch):
    # Where the kernel quantizes q (kernel_quantizes_query: from 4 MB of q, here from any size) the drop-in
    # quantizes k and v alone, and the bench's row says so.
    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(sdpa_ext.attention, "KERNEL_QUANTIZES_QUERY_BYTES", 0)
    rows = {r["name"] for r in run_bench(tmp_path)["results"][0]["rows"]}
    assert "sdpa_ext quantize k,v (q in the kernel)" in rows and "sdpa_ext quantize q,k,v" not in rows


def test_quantize_row_pads_k_and_v_at_head_dims_without_kernels(monkeypatch):
    # At D = 80 with q left to the kernel the drop-in quantizes k and v into codes padded to 128 (q stays at 80
    # dims): the row times that call, not unpadded codes.
    monkeypatch.setattr(sdpa_ext.attention, "KERNEL_QUANTIZES_QUERY_BYTES", 0)
    shape_bench = bench.ShapeBench((1, 2, 64, 80), False, torch.float16, "cpu", max_ms=1000)
    q, q_scale, k8, _, v8, _, mode = shape_bench.quantize(0)
    assert mode == "per_16_rows" and q_scale is None and q.shape[-1] == 80
    assert k8.shape[-1] == v8.shape[-1] == 128


@requires_cuda
def test_gpu_run_times_every_backend_and_plots(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed: no plot to check")
    plot = tmp_path / "plot.png"
    report = run_bench(tmp_path, "--variant", "auto", "--variant", "scalar", "--dtype", "bf16", "--plot", str(plot))
    rows = {r["name"]: r for r in report["results"][0]["rows"]}
    assert {"sdpa_ext[auto]", "sdpa_ext[scalar]", "torch sdpa math"} <= set(rows)
    for row in rows.values():
        assert row["graph"]["median_us"] > 0 and row["events"]["p90_us"] >= row["events"]["median_us"]
    assert plot.stat().st_size > 0
