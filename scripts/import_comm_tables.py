#!/usr/bin/env python3
"""Writes moesim's communication validation tables (data/validation/*-a2a.csv) from the published
dispatch/combine measurements in data/ep-communication/ (facts with their sources; README.md there).

One row per (table row, phase). Times the source prints are copied as printed. Where a source prints only a
bandwidth, the time is derived as bytes / bandwidth with the bytes the source's own benchmark counts, in
expectation over its random routing (exact combinatorics, below), and the row's notes say so:
  DeepEP normal, intranode: recv_x.numel() x 2 x fp8_factor: every token each rank receives, its own
    included: ranks x tokens x P(a token has an expert on the rank);
  DeepEP normal, internode: num_rdma_token_sent x hidden x 2 x fp8_factor: a rank's tokens times the nodes
    each touches, its own node included; combine counts the same tokens in bf16;
  NCCL EP low-latency ("methodology aligned with DeepEP"): tokens x top-k copies of hidden x 2 bytes.
fp8_factor = (1 + 4 / 128) / 2 (DeepEP tests/test_internode.py, test_intranode.py). The uniform routing of
DeepEP's tests: each token's top-k experts a uniformly random k-subset (torch.randn scores), internode from
min(nodes, 4) nodes picked first (one group per node, num_topk_groups). Deterministic; standard library only.

Usage: scripts/import_comm_tables.py [SOURCE_DIR] [OUT_DIR]  (defaults: data/ep-communication, data/validation)
"""
import csv
import math
import os
import sys

HEADER = ["phase", "gpu", "kernel", "ep", "tokens_per_rank", "hidden", "top_k", "experts", "dtype", "routing",
          "measured_us", "source", "notes", "node_limit", "devices_per_node"]
FP8_FACTOR = (1 + 4 / 128) / 2


def miss(pool, held, draws):
    """Probability that `draws` distinct picks from `pool` miss all `held` of them."""
    return math.comb(pool - held, draws) / math.comb(pool, draws)


def rank_hit(experts, ranks, top_k):
    """P(a token's top-k, a uniform k-subset of the experts, has one on a given rank)."""
    return 1 - miss(experts, experts // ranks, top_k)


def nodes_touched(experts, nodes, top_k, node_limit):
    """Expected nodes a token's experts touch: node_limit nodes picked uniformly, then a uniform k-subset of
    their experts."""
    chosen = min(nodes, node_limit)
    pool = experts // nodes * chosen
    return chosen * (1 - miss(pool, experts // nodes, top_k))


def write(out_dir, name, rows):
    path = os.path.join(out_dir, name + ".csv")
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(HEADER)
        for r in rows:
            w.writerow([r.get(k, "") for k in HEADER])
    print(f"{path}: {len(rows)} rows")


def us(x):
    return f"{x:.2f}"


def deepep_normal(src, out_dir):
    by_version = {}
    with open(os.path.join(src, "deepep_v1_normal_h800.csv")) as f:
        for r in csv.DictReader(f):
            by_version.setdefault(r["readme_version"], []).append(r)
    for version, rows in sorted(by_version.items()):
        out = []
        for r in rows:
            ep, tokens, hidden, k = int(r["ep_size"]), int(r["tokens_per_rank"]), int(r["hidden"]), int(r["topk"])
            experts = int(r["num_experts_test_default"])
            source = f"deepseek-ai/DeepEP@{r['source_commit'][:12]} README (normal kernels, {version})"
            if r["type"] == "Intranode":
                recv = ep * tokens * rank_hit(experts, ep, k)
                basis = (f"tokens each rank receives, its own included: {ep} x {tokens} x P(hit) = {recv:.1f} "
                         f"(uniform top-{k} of {experts}; tests/test_intranode.py recv_x)")
                limit = ""
                copies = recv
            else:
                nodes = ep // 8
                limit = min(nodes, 4)
                touched = nodes_touched(experts, nodes, k, limit)
                copies = tokens * touched
                basis = (f"num_rdma_token_sent = {tokens} x {touched:.4f} nodes a token touches, its own included "
                         f"(top-{k} of {experts} from {limit} of {nodes} nodes; tests/test_internode.py)")
            for phase, dtype, col, factor in (("dispatch", "fp8", "dispatch_bottleneck_bw_GBps", FP8_FACTOR),
                                              ("combine", "bf16", "combine_bottleneck_bw_GBps", 1.0)):
                bw = float(r[col])
                nbytes = copies * hidden * 2 * factor
                out.append({"phase": phase, "gpu": "h800", "kernel": "normal", "ep": ep, "tokens_per_rank": tokens,
                            "hidden": hidden, "top_k": k, "experts": experts, "dtype": dtype,
                            "routing": "uniform_random", "measured_us": us(nbytes / (bw * 1e9) * 1e6),
                            "source": source,
                            "notes": (f"derived: {nbytes / 1e6:.3f} MB / the published {bw:g} GB/s "
                                      f"{r[col.replace('bottleneck_bw_GBps', 'bw_domain')]} bottleneck bandwidth; "
                                      f"bytes = {basis} x hidden x {2 * factor:g} B"),
                            "node_limit": limit})
        write(out_dir, f"deepep-normal-{version}-h800-a2a", out)


def deepep_low_latency(src, out_dir):
    by_version = {}
    with open(os.path.join(src, "deepep_v1_low_latency_h800.csv")) as f:
        for r in csv.DictReader(f):
            by_version.setdefault(r["readme_version"], []).append(r)
    for version, rows in sorted(by_version.items()):
        out = []
        for r in rows:
            nvlink = r["nvlink_used_intranode"] == "yes"
            source = f"deepseek-ai/DeepEP@{r['source_commit'][:12]} README (low-latency kernels, {version})"
            for phase, dtype in (("dispatch", "fp8"), ("combine", "bf16")):
                out.append({"phase": phase, "gpu": "h800", "kernel": "low_latency", "ep": r["ep_size"],
                            "tokens_per_rank": r["tokens_per_rank"], "hidden": r["hidden"], "top_k": r["topk"],
                            "experts": r["num_experts_test_default"], "dtype": dtype, "routing": "uniform_random",
                            "measured_us": r[f"{phase}_latency_us"], "source": source,
                            "notes": (f"{phase} latency as published ({r[f'{phase}_rdma_bw_GBps']} GB/s RDMA); "
                                      + ("NVLink within a node (PR #173)" if nvlink else
                                         "pure RDMA: every peer over the NIC, its node-mates included")),
                            "devices_per_node": "" if nvlink else 1})
        write(out_dir, f"deepep-low-latency-{version}-h800-a2a", out)


def nccl_ep(src, out_dir):
    out = []
    with open(os.path.join(src, "nccl_ep_ll_h100.csv")) as f:
        for r in csv.DictReader(f):
            tokens, hidden, k = int(r["tokens_per_rank"]), int(r["hidden"]), int(r["topk"])
            nbytes = tokens * k * hidden * 2  # bf16 both ways, one copy per (token, selected expert)
            for phase in ("dispatch", "combine"):
                bw = float(r[f"{phase}_bw_GBps"])
                out.append({"phase": phase, "gpu": "h100-sxm", "kernel": "low_latency", "ep": r["num_gpus"],
                            "tokens_per_rank": tokens, "hidden": hidden, "top_k": k, "experts": r["num_experts"],
                            "dtype": "bf16", "routing": "uniform_random",
                            "measured_us": us(nbytes / (bw * 1e9) * 1e6),
                            "source": "NVIDIA/nccl@02c72f845f2b contrib/nccl_ep/README.md (reference performance, NCCL v2.29u1)",
                            "notes": (f"derived: {tokens} x {k} x {hidden} x 2 B = {nbytes / 1e6:.3f} MB / the published "
                                      f"{bw:g} GB/s ({r['node_count']} nodes of {r['gpus_per_node']}; low-latency mode)")})
    write(out_dir, "nccl-ep-low-latency-h100-a2a", out)


def trtllm(src, out_dir):
    out = []
    with open(os.path.join(src, "trtllm_nvlink_one_sided_gb200.csv")) as f:
        for r in csv.DictReader(f):
            for phase in ("dispatch", "combine"):
                out.append({"phase": phase, "gpu": "gb200-nvl72", "kernel": "normal", "ep": r["ep_size"],
                            "tokens_per_rank": r["batch_size_tokens_per_rank"], "hidden": 7168, "top_k": 8,
                            "experts": 256, "dtype": "bf16", "routing": "balanced",
                            "measured_us": r[f"{phase}_us"],
                            "source": "NVIDIA/TensorRT-LLM@22de8b34df71 docs/source/blogs/tech_blog/blog18 (one-sided NVLink all-to-all)",
                            "notes": (f"{phase} latency as published ({r[f'{phase}_GBps']} GB/s logical); "
                                      "--perfect_router: each token on min(top_k, ep) GPUs")})
    write(out_dir, "trtllm-one-sided-gb200-a2a", out)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "data", "ep-communication")
    out_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "data", "validation")
    deepep_normal(src, out_dir)
    deepep_low_latency(src, out_dir)
    nccl_ep(src, out_dir)
    trtllm(src, out_dir)


if __name__ == "__main__":
    main()
