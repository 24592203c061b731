#!/usr/bin/env python3
"""Writes moesim validation tables (data/validation/*.csv) from the aiconfigurator vLLM MoE collector's
measurements (data/kernel-imbalance/aiconfigurator_vllm_moe_pairs.csv, its README gives the source and
licence): each shape's balanced-routing row and, beside it, its power-law rows (routing power_law:ALPHA),
so that validate --published reports what skew costs, modeled against measured.

One table per GPU, kernel shape, dtype, TP and EP. Every measured row is taken: the Triton
fused MoE (vllm_fused_moe) in bf16 or per-tensor fp8 (W8A8) and vLLM's Marlin W4A16 MoE (dtype int4), gated
(SwiGLU) shapes and the relu2 non-gated Nemotron ones (gated 0). Anything else (another kernel, dtype or
GPU) is left out and listed on stderr. Shapes measured under power laws alone (no balanced row) are
tables too: the fits never see power-law rows, so these are held out whole.

  scripts/import_kernel_tables.py [PAIRS_CSV] [OUT_DIR]
"""
import csv
import os
import sys

HEADER = ["gpu", "dtype", "experts", "n", "k", "top_k", "tp", "batch", "measured_us", "source", "date", "tool",
          "kernel_config", "routing", "notes", "scope", "ep", "gated"]
GPUS = {"NVIDIA A100-SXM4-80GB": "a100-80gb", "NVIDIA H100 80GB HBM3": "h100-sxm", "NVIDIA H200": "h200"}
DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "int4_wo": "int4"}
# The kernel each collector ran, as the tool cell names it.
KERNELS = {"vllm_fused_moe": "fused_experts", "vllm_marlin_int4_moe": "fused_marlin_moe"}
# The distributions measured per row, and their routing cell: balanced first, then the power laws.
DISTRIBUTIONS = [("balanced", "balanced"), ("power_law_1.01", "power_law:1.01"), ("power_law_1.2", "power_law:1.2")]


def slug(text):
    keep = "".join(c.lower() if c.isalnum() else "-" for c in text.split(" (")[0].split("/")[-1])
    return "-".join(p for p in keep.split("-") if p)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    pairs = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "data", "kernel-imbalance",
                                                               "aiconfigurator_vllm_moe_pairs.csv")
    out_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "..", "data", "validation")
    tables = {}
    for r in csv.DictReader(open(pairs, newline="")):
        why = None
        if r["kernel_source"] not in KERNELS:
            why = "kernel " + r["kernel_source"]
        elif r["moe_dtype"] not in DTYPES:
            why = "dtype " + r["moe_dtype"]
        elif r["device"] not in GPUS:
            why = "device " + r["device"]
        key = (r["device"], r["moe_dtype"], r["model_shape_name"], r["moe_tp_size"], r["moe_ep_size"],
               r["kernel_source"])
        if why:
            tables.setdefault(("skip",) + key, why)
            continue
        tables.setdefault(key, []).append(r)
    written = 0
    for key, rows in sorted(tables.items()):
        if key[0] == "skip":
            print("skipped %s: %s" % (" ".join(key[1:]), rows), file=sys.stderr)
            continue
        device, dtype, shape, tp, ep, kernel = key
        gated = "0" if "non-gated" in shape else "1"
        gpu = GPUS[device]
        name = "aiconfigurator-%s-%s-%s-tp%s-ep%s.csv" % (slug(shape), gpu, DTYPES[dtype], tp, ep)
        rows.sort(key=lambda r: int(r["num_tokens"]))
        with open(os.path.join(out_dir, name), "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(HEADER)
            for r in rows:
                for dist, routing in DISTRIBUTIONS:
                    if not r["lat_ms_" + dist]:
                        continue
                    us = float(r["lat_ms_" + dist]) * 1000.0
                    w.writerow([gpu, DTYPES[dtype], r["num_experts"], r["local_inter_size"], r["hidden_size"],
                                r["topk"], tp, r["num_tokens"], "%.4g" % us, "ai-dynamo/aiconfigurator#990", "",
                                "aiconfigurator collector/vllm/collect_moe_v2.py, vLLM %s %s, CUDA graph"
                                % (r["framework_version"], KERNELS[kernel]),
                                "vLLM default/tuned Triton config" if kernel == "vllm_fused_moe"
                                else "vLLM Marlin MoE, group size 128", routing,
                                "%s@%s %s; lat_ms_%s x 1000; %s; %s local experts of %s (EP %s), routing excluded"
                                % (r["source_path"], r["source_commit"][:8], r["device"], dist, shape,
                                   r["local_experts"], r["num_experts"], ep),
                                "experts", ep, gated])
        written += 1
    print("wrote %d tables to %s" % (written, out_dir))


if __name__ == "__main__":
    main()
