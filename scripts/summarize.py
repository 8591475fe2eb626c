#!/usr/bin/env python3
"""Prints the short table that ends scripts/gpu_check.sh: tests, worst errors per reference and per fast-tier
variant, timings, environment."""

import argparse
import json
import xml.etree.ElementTree as ET
from pathlib import Path


def test_counts(junit_path):
    if not Path(junit_path).exists():  # pytest died before writing it
        return {"tests": 0, "failures": 1, "errors": 0, "skipped": 0, "passed": 0}
    root = ET.parse(junit_path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    total["passed"] = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    return total


def worst_errors(errors_path):
    records = json.loads(Path(errors_path).read_text()) if Path(errors_path).exists() else []
    worst = {}
    for r in records:
        device = "cuda" if "[cuda" in r["test"] or "cuda" in r["test"].split("::")[-1] else "cpu"
        w = worst.setdefault((r["reference"], device), {"cases": 0, "min_sqnr_db": float("inf"), "max_abs": 0.0})
        w["cases"] += 1
        w["min_sqnr_db"] = min(w["min_sqnr_db"], r.get("sqnr_db", float("inf")))
        w["max_abs"] = max(w["max_abs"], r.get("max_abs", 0.0))
        if "lse_of_gate" in r:
            w["lse_of_gate"] = max(w.get("lse_of_gate", 0.0), r["lse_of_gate"])
        if "mean_abs" in r:
            w["max_mean_abs"] = max(w.get("max_mean_abs", 0.0), r["mean_abs"])
    return worst


def worst_by_fast_variant(errors_path):
    """Per variant of the fast tier (and `fast` itself), the worst kernel SQNR and the worst end-to-end max error over
    that of exact math on the same E4M3 inputs: the two numbers its gates bound (tests/test_attention.py)."""
    records = json.loads(Path(errors_path).read_text()) if Path(errors_path).exists() else []
    worst = {}
    for r in records:
        if "variant" not in r or not r["reference"].endswith(("-fast", "-fast_by_name")):
            continue
        w = worst.setdefault(r["variant"], {"cases": 0, "min_sqnr_db": float("inf"), "exact_factor": 0.0})
        w["cases"] += 1
        if r["reference"].startswith("kernel"):
            w["min_sqnr_db"] = min(w["min_sqnr_db"], r["sqnr_db"])
        elif r.get("exact_max_abs"):
            w["exact_factor"] = max(w["exact_factor"], r["max_abs"] / r["exact_max_abs"])
    return worst


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--junit", required=True)
    parser.add_argument("--errors", required=True)
    parser.add_argument("--bench", required=True)
    args = parser.parse_args()

    bench = json.loads(Path(args.bench).read_text()) if Path(args.bench).exists() else {}
    print("\n## summary")
    print(f"GPU: {bench.get('device', '?')} | torch {bench.get('torch', '?')} | CUDA {bench.get('cuda', '?')} | "
          f"commit {bench.get('commit', '?')}")
    counts = test_counts(args.junit)
    print(f"tests: {counts['passed']} passed, {counts['failures'] + counts['errors']} failed, "
          f"{counts['skipped']} skipped")
    print("| reference | device | checks | worst SQNR dB | max abs | worst mean abs | worst lse / its gate |")
    print("|---|---|---|---|---|---|---|")
    for (reference, device), w in sorted(worst_errors(args.errors).items()):
        mean = f"{w['max_mean_abs']:.4f}" if "max_mean_abs" in w else "-"
        lse = f"{w['lse_of_gate']:.2f}" if "lse_of_gate" in w else "-"
        print(f"| {reference} | {device} | {w['cases']} | {w['min_sqnr_db']:.1f} | {w['max_abs']:.4f} | {mean} | {lse} |")
    fast = worst_by_fast_variant(args.errors)
    if fast:
        print("| fast-tier variant | checks | worst kernel SQNR dB | worst end-to-end max abs / exact's |")
        print("|---|---|---|---|")
        for variant, w in sorted(fast.items()):
            print(f"| {variant} | {w['cases']} | {w['min_sqnr_db']:.2f} | {w['exact_factor']:.2f} |")
    for result in bench.get("results", []):
        shape = "x".join(map(str, result["shape"])) + (" causal" if result["causal"] else "")
        print(f"| {shape} | graph us | events us | vs best SDPA |")
        print("|---|---|---|---|")
        for r in result["rows"]:
            ratio = f"{r['vs_best_sdpa']:.2f}x" if r.get("vs_best_sdpa") else "-"
            events = f"{r['events']['median_us']:.1f}" if "events" in r else "-"
            time = f"{r['time_us']:.1f}" if "time_us" in r else "skipped"
            print(f"| {r['name']} | {time} | {events} | {ratio} |")


if __name__ == "__main__":
    main()
