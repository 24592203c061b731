#!/usr/bin/env python3
"""PyTorch CPU reference of the moesim benchmark shapes, written the way people write an MoE layer
(HuggingFace Mixtral's sparse MoE block): router linear, softmax, top-k, renormalise, then a loop over
experts with torch.where, index_select and index_add_; float32, torch.set_num_threads(THREADS).

Inputs are the ones moesim_bench uses (tests/bench/bench_inputs.hpp): x, the router weight and the
router-only / dispatch-only logits come from the same counter-based generator and seed, bit for bit.
Expert weight values do not change the timing; they are drawn here with torch's generator at the same
scale. `--check DIR` instead compares this layer with moesim's on the small layer moesim_bench
--export-check=DIR wrote (same weights), and exits 1 on disagreement.

Prints one JSON object per case on stdout: {"case", "median_s", "min_s", "times_s", "threads",
"wait_policy"}. Run by scripts/bench.sh; needs python3-torch (Debian) and numpy.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

# ---- the shared generator (twin of tests/bench/bench_inputs.hpp) ---------------------------------
MASK = (1 << 64) - 1
SEED = 2024
TENSOR_HIDDEN, TENSOR_ROUTER, TENSOR_LOGITS = 1, 2, 3

LAYER_SHAPES = [(512, 1024, 2816, 8, 2), (4096, 1024, 2816, 8, 2), (4096, 2048, 1408, 64, 6),
                (16384, 1024, 512, 64, 8)]
DISPATCH_SHAPES = [(16384, 4096, 64, 2), (65536, 1024, 256, 8)]
ROUTER_SHAPES = [(65536, 256, 8), (16384, 64, 6)]  # tests/bench/bench_inputs.hpp kRouterShapes


def mix64_int(z):
    z = (z + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def mix64(z):
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def uniform_tensor(seed, tensor, n, scale):
    """out[i] = (2 u_i - 1) * scale in float32, u_i = (mix64(key + i) >> 40) / 2^24."""
    key = np.uint64(mix64_int(seed ^ mix64_int(tensor)))
    out = np.empty(n, dtype=np.float32)
    chunk = 1 << 22
    with np.errstate(over="ignore"):
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            bits = mix64(np.arange(lo, hi, dtype=np.uint64) + key)
            u = (bits >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)
            out[lo:hi] = (np.float32(2.0) * u - np.float32(1.0)) * np.float32(scale)
    return out


def router_scale(hidden):
    return np.float32(math.sqrt(3.0 / hidden))


def layer_label(s):
    return "N%d_d%d_f%d_E%d_k%d" % s


def dispatch_label(s):
    return "N%d_d%d_E%d_k%d" % s


# ---- the reference layer ---------------------------------------------------------------------------
class Expert(torch.nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.w1 = torch.nn.Linear(hidden, ffn, bias=False)
        self.w2 = torch.nn.Linear(ffn, hidden, bias=False)
        self.w3 = torch.nn.Linear(hidden, ffn, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoe(torch.nn.Module):
    def __init__(self, hidden, ffn, num_experts, top_k):
        super().__init__()
        self.num_experts, self.top_k = num_experts, top_k
        self.gate = torch.nn.Linear(hidden, num_experts, bias=False)
        self.experts = torch.nn.ModuleList([Expert(hidden, ffn) for _ in range(num_experts)])

    def route(self, x):
        logits = self.gate(x)
        weights = F.softmax(logits, dim=1, dtype=torch.float)
        weights, selected = torch.topk(weights, self.top_k, dim=-1)
        weights /= weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), selected

    def forward(self, x, experts=True):
        weights, selected = self.route(x)
        y = torch.zeros_like(x)
        mask = F.one_hot(selected, num_classes=self.num_experts).permute(2, 1, 0)
        for e in range(self.num_experts):
            idx, top_x = torch.where(mask[e])
            if top_x.numel() == 0:
                continue
            current = x.index_select(0, top_x)
            if experts:
                current = self.experts[e](current)
            y.index_add_(0, top_x, current * weights[top_x, idx, None])
        return y


def make_layer(hidden, ffn, num_experts, top_k):
    torch.manual_seed(SEED)
    with torch.no_grad():
        layer = SparseMoe(hidden, ffn, num_experts, top_k)
        # The router weight moesim uses ([hidden, E] there; Linear keeps [E, hidden]).
        w = uniform_tensor(SEED, TENSOR_ROUTER, hidden * num_experts, router_scale(hidden))
        layer.gate.weight.copy_(torch.from_numpy(w.reshape(hidden, num_experts).T.copy()))
    return layer


def dispatch_only(x, logits, top_k):
    """The expert loop with identity experts: one_hot / where, index_select, weight, index_add_."""
    weights = F.softmax(logits, dim=1, dtype=torch.float)
    weights, selected = torch.topk(weights, top_k, dim=-1)
    weights /= weights.sum(dim=-1, keepdim=True)
    return dispatch_given(x, weights, selected, logits.shape[1])


def dispatch_given(x, weights, selected, num_experts):
    y = torch.zeros_like(x)
    mask = F.one_hot(selected, num_classes=num_experts).permute(2, 1, 0)
    for e in range(num_experts):
        idx, top_x = torch.where(mask[e])
        if top_x.numel() == 0:
            continue
        y.index_add_(0, top_x, x.index_select(0, top_x) * weights[top_x, idx, None])
    return y


def router_only(logits, top_k):
    weights = F.softmax(logits, dim=1, dtype=torch.float)
    weights, selected = torch.topk(weights, top_k, dim=-1)
    weights /= weights.sum(dim=-1, keepdim=True)
    return weights, selected


# ---- timing ----------------------------------------------------------------------------------------
def timed(name, fn, repeats, out):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    rec = {"case": name, "median_s": float(np.median(times)), "min_s": min(times), "times_s": times,
           "threads": torch.get_num_threads(), "wait_policy": os.environ.get("OMP_WAIT_POLICY", "default")}
    print(json.dumps(rec), file=out, flush=True)
    return rec


def run(args):
    out = open(args.json, "a") if args.json else sys.stdout
    wanted = lambda name: not args.filter or any(f in name for f in args.filter.split(","))
    with torch.inference_mode():
        for s in LAYER_SHAPES:
            n, d, f, e, k = s
            prefix = "layer/%s/" % layer_label(s)
            if not wanted(prefix):
                continue
            layer = make_layer(d, f, e, k)
            x = torch.from_numpy(uniform_tensor(SEED, TENSOR_HIDDEN, n * d, 1.0).reshape(n, d))
            heavy = 6.0 * n * k * d * f > 2e10
            reps = args.heavy_repeats if heavy else args.repeats
            logits = layer.gate(x)
            timed(prefix + "gating", lambda: router_only(logits, k), args.repeats, out)
            w, sel = layer.route(x)
            timed(prefix + "dispatch", lambda: dispatch_given(x, w, sel, e), args.repeats, out)
            timed(prefix + "layer", lambda: layer(x), reps, out)
            del layer, x
        for s in DISPATCH_SHAPES:
            n, d, e, k = s
            name = "dispatch/%s/dispatch" % dispatch_label(s)
            if not wanted(name):
                continue
            x = torch.from_numpy(uniform_tensor(SEED, TENSOR_HIDDEN, n * d, 1.0).reshape(n, d))
            logits = torch.from_numpy(uniform_tensor(SEED, TENSOR_LOGITS, n * e, 1.0).reshape(n, e))
            w, sel = router_only(logits, k)
            timed(name, lambda: dispatch_given(x, w, sel, e), args.repeats, out)
            del x, logits
        for n, e, k in ROUTER_SHAPES:
            name = "router/N%d_E%d_k%d/softmax_topk" % (n, e, k)
            if wanted(name):
                logits = torch.from_numpy(uniform_tensor(SEED, TENSOR_LOGITS, n * e, 1.0).reshape(n, e))
                timed(name, lambda: router_only(logits, k), args.repeats, out)


def check(directory):
    """This layer against moesim's on the small layer of moesim_bench --export-check."""
    load = lambda name: torch.from_numpy(np.load(os.path.join(directory, name + ".npy")))
    x, router_w, w1, w3, w2, y_moesim = (load(n) for n in ("x", "router_w", "w1", "w3", "w2", "y"))
    expert_moesim = np.load(os.path.join(directory, "expert.npy"))
    n, d = x.shape
    e, _, f = w1.shape
    k = expert_moesim.shape[1]
    # The inputs moesim exported must be the shared generator's.
    if not np.array_equal(x.numpy().ravel(), uniform_tensor(SEED, TENSOR_HIDDEN, n * d, 1.0)):
        sys.exit("check: x differs from the shared generator")
    if not np.array_equal(router_w.numpy().ravel(), uniform_tensor(SEED, TENSOR_ROUTER, d * e, router_scale(d))):
        sys.exit("check: the router weight differs from the shared generator")
    with torch.inference_mode():
        layer = SparseMoe(d, f, e, k)
        layer.gate.weight.copy_(router_w.T)
        for i, ex in enumerate(layer.experts):
            ex.w1.weight.copy_(w1[i].T)
            ex.w3.weight.copy_(w3[i].T)
            ex.w2.weight.copy_(w2[i].T)
        _, selected = layer.route(x)
        y = layer(x)
    same_sets = np.mean([set(a) == set(b) for a, b in zip(selected.numpy().tolist(), expert_moesim.tolist())])
    # float32 GEMMs in two libraries' summation orders, against each other: 1e-4 relative to the row scale.
    scale = y.abs().max(dim=1, keepdim=True).values + 1e-6
    err = ((y - y_moesim).abs() / scale).max().item()
    print(json.dumps({"check": "torch vs moesim", "tokens": n, "experts_agree": float(same_sets),
                      "max_rel_err": err}))
    if same_sets < 1.0 or err > 1e-4:
        sys.exit("check: the PyTorch layer and moesim's disagree")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5, help="timed runs of light cases (after one warm-up)")
    p.add_argument("--heavy-repeats", type=int, default=3, help="timed runs of layers over 20 GFLOP")
    p.add_argument("--filter", default="", help="comma list of substrings of case names to run")
    p.add_argument("--json", default="", help="append the JSON lines to this file instead of stdout")
    p.add_argument("--check", default="", help="compare with moesim_bench --export-check=DIR output")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.check:
        check(args.check)
    else:
        run(args)


if __name__ == "__main__":
    main()
