#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/ (deterministic).

config:   the shipped experiments (configs/*.yaml) and small variants with "#--set" override lines
npy:      small .npy files: float32/float64, C/Fortran order, versions 1 and 2, and broken ones
csv:      small .csv files, well-formed and broken
trace:    JSON Lines routing traces (first byte: num_experts - 1), with and without logits, and broken ones
load_profile: "NUM_EXPERTS KEY" then a profile JSON, from data/routing-traces (cut down) and small cases
megatron_npz: small Megatron-Core "mcore_ep_load_dump_v1" .npz dumps (stored and deflated zips) and broken ones
megatron_router_trace: Megatron-LM router traces (first byte: num_experts - 1, second: the top_k checked, 0 none),
          decoder and mtp lines, and broken ones
baseline: JSON from `moesim run/compare --format json --no-execute` (pass the moesim binary as the
          first argument; without it the baseline seeds are left as they are) and broken variants

Usage: tests/fuzz/make_seeds.py [path/to/moesim]
"""
import glob
import io
import json
import os
import random
import struct
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def put(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def npy(shape, descr="<f4", values=None, fortran=False, version=1, shape_text=None):
    n = 1
    for d in shape:
        n *= d
    rng = random.Random(sum(shape) * 31 + version)
    if values is None:
        values = [round(rng.gauss(0, 1), 3) for _ in range(n)]
    fmt = {"<f4": "<f", "<f8": "<d", ">f4": ">f", "<i4": "<i", "<f2": "<e", "<i8": "<q"}[descr]
    if descr in ("<i4", "<i8"):
        values = [int(v) for v in values]
    data = b"".join(struct.pack(fmt, v) for v in values)
    dims = shape_text or ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (descr, fortran, dims)
    pre = 10 if version == 1 else 12
    header += " " * ((64 - (pre + len(header) + 1) % 64) % 64) + "\n"
    hb = header.encode()
    size = struct.pack("<H", len(hb)) if version == 1 else struct.pack("<I", len(hb))
    return b"\x93NUMPY" + bytes([version, 0]) + size + hb + data


def config_seeds():
    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml"))):
        put("config", "shipped-" + os.path.basename(path), open(path, "rb").read())
    quick = open(os.path.join(ROOT, "configs", "quickstart.yaml")).read()
    put("config", "quickstart-sets.yaml", quick + "#--set\nmodel.top_k=4\nmodel.experts=16\nrouter.gating=sinkhorn\n")
    put("config", "sets-only.yaml", "#--set\nworkload.batch=64\nrouter={gating: expert_choice, capacity_factor: 2}\n")
    put("config", "inline-hardware.yaml",
        "name: inline\nmodel: {experts: 6, top_k: 3}\nhardware: {base: h100-sxm, sm_count: 100, "
        "memory_bandwidth_gbs: 2000, peak_tflops: {bf16: 500}}\n#--set\nhardware.sm_count=64\n")
    put("config", "expect-list.yaml",
        "name: e\nexpect:\n  - {metric: imbalance, max: 2.0, strategy: token_choice capacity_factor=1.5}\n"
        "  - {metric: drop_rate, aggregate: p95, min: 0, max: 0.1}\n#--set\nexpect.cv.max=3\n")
    put("config", "group-limited.yaml",
        "model: {experts: 256, top_k: 8}\nrouter: {gating: group_limited, groups: 8, topk_groups: 4, "
        "group_mask_fill: '0', score: sigmoid}\nplacement: {kind: expert_parallel, devices: 4, map: [0, 1, 2, 3]}\n"
        "#--set\nplacement.map=[]\n")
    put("config", "decoder.yaml",
        "workload: {source: decoder, batch: 4, prompt_len: 8..32, decode_steps: 2, topics: 3, seed: 18446744073709551615}\n")
    put("config", "anchors.yaml", "model: &m {experts: 4, top_k: 1}\nrouter: {gating: hash}\n#--set\nmodel.experts=8\n")
    put("config", "empty.yaml", "")


def npy_seeds():
    rng = random.Random(3)
    put("npy", "f4-8x4.npy", npy((8, 4)))
    put("npy", "f8-3x5.npy", npy((3, 5), "<f8"))
    put("npy", "fortran-4x3.npy", npy((4, 3), fortran=True))
    put("npy", "v2-2x2.npy", npy((2, 2), "<f8", version=2))
    put("npy", "zero-rows.npy", npy((0, 4)))
    put("npy", "one-col.npy", npy((5, 1)))
    put("npy", "rank1.npy", npy((6,)))
    put("npy", "rank3.npy", npy((1, 2, 3)))
    put("npy", "int32.npy", npy((2, 2), "<i4", [1, 2, 3, 4]))
    put("npy", "big-endian.npy", npy((2, 2), ">f4"))
    put("npy", "nan.npy", npy((2, 2), values=[0, float("nan"), 1, 2]))
    put("npy", "inf.npy", npy((2, 2), "<f8", values=[0, 1, float("-inf"), 2]))
    put("npy", "truncated.npy", npy((16, 4))[:150])
    put("npy", "huge-shape.npy", npy((2, 2), shape_text="99999999999, 2"))
    put("npy", "random-bytes.npy", bytes(rng.randrange(256) for _ in range(64)))


def csv_seeds():
    put("csv", "ok.csv", "0.5,-1,2\n3,4e-1,5\n")
    put("csv", "crlf-blank.csv", "1, 2 ,\t3\r\n\r\n4,5,6\r\n")
    put("csv", "one-value.csv", "7\n")
    put("csv", "ragged.csv", "1,2,3\n4,5\n")
    put("csv", "nan.csv", "1,nan\n")
    put("csv", "huge.csv", "1,1e300\n")
    put("csv", "hex.csv", "0x1p3,-0x10\n")
    put("csv", "empty-cell.csv", "1,,2\n")
    put("csv", "nul.csv", b"1,2\x003\n")
    put("csv", "empty.csv", "")


def trace_seeds():
    e8 = bytes([7])
    line = '{"step": %d, "layer": %d, "token": %d, "experts": [%s], "weights": [%s]%s}\n'
    plain = "".join(line % (s, l, t, "%d, %d" % (t % 8, (t + 3) % 8), "0.75, 0.25", "")
                    for s in range(2) for l in (0, 3) for t in range(3))
    put("trace", "plain.jsonl", e8 + plain.encode())
    logits = "".join(line % (0, 0, t, str(t % 4), "1.0", ', "logits": [%s], "phase": "prefill", "token_id": %d' %
                             (", ".join("%.2f" % ((t * 7 + e) % 5 - 2) for e in range(4)), 100 + t))
                     for t in range(4))
    put("trace", "logits.jsonl", bytes([3]) + logits.encode())
    put("trace", "kept.jsonl", e8 + b'{"step": 0, "layer": 0, "token": 0, "experts": [1, 2], "weights": [0.5, 0.5], "kept": [1, 0]}\n\n')
    put("trace", "expert-out-of-range.jsonl", e8 + b'{"step": 0, "layer": 0, "token": 0, "experts": [8], "weights": [1]}\n')
    put("trace", "duplicate-token.jsonl", e8 + (line % (0, 0, 1, "1", "1", "") * 2).encode())
    put("trace", "mixed-logits.jsonl", bytes([1]) + (line % (0, 0, 0, "1", "1", ', "logits": [0, 1]') +
                                                     line % (0, 0, 1, "0", "1", "")).encode())
    put("trace", "not-json.jsonl", e8 + b'{"step": 0, "layer": \n')
    put("trace", "empty.jsonl", e8)


def load_profile_seeds():
    data = json.load(open(os.path.join(ROOT, "data", "routing-traces", "olmoe-mixtral-expert-counts",
                                       "expert_counts.json")))["data"]
    keys = sorted(data)[:2]
    cut = {"data": {k: data[k] for k in keys}}
    put("load_profile", "shipped-cut.json", ("8 %s\n" % keys[0]) + json.dumps(cut))
    put("load_profile", "single.json", '4 \n{"only": {"0": [1, 2, 3, 4], "12": [0, 0, 0, 0]}}')
    put("load_profile", "nested.json", '2 a/b/c\n{"a": {"b": {"c": {"1": [5, 7]}}}}')
    put("load_profile", "negative.json", '2 k\n{"k": {"0": [-1, 3]}}')
    put("load_profile", "wrong-width.json", '3 k\n{"k": {"0": [1, 2]}}')
    put("load_profile", "bad-layer.json", '2 k\n{"k": {"x": [1, 2]}}')
    put("load_profile", "missing-key.json", '2 nope\n{"k": {"0": [1, 2]}}')


def npy_text(text):
    header = "{'descr': '<U%d', 'fortran_order': False, 'shape': (), }" % len(text)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    hb = header.encode()
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hb)) + hb + text.encode("utf-32-le")


def npz(members, deflate=False, zip64=False):
    """zip64: members written as numpy.savez writes them (ZipFile.open(..., force_zip64=True))."""
    out = io.BytesIO()
    mode = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(out, "w", mode) as z:
        for name, data in members.items():
            info = zipfile.ZipInfo(name + ".npy", date_time=(2025, 1, 1, 0, 0, 0))
            info.compress_type = mode
            if zip64:
                with z.open(info, "w", force_zip64=True) as f:
                    f.write(data)
            else:
                z.writestr(info, data)
    return out.getvalue()


def megatron_members(loads, L, F, G, layers, forwards, descr="<i4"):
    return {
        "dump_version": npy_text("mcore_ep_load_dump_v1"),
        "capture_id": npy_text("20250101_000000_pid1"),
        "loads": npy((L, F, G), descr, loads),
        "layer_numbers": npy((L,), "<i4", layers),
        "forward_counts": npy((L,), "<i4", forwards),
        "ep_group_ranks": npy((2,), "<i4", [0, 1]),
        "ep_rank": npy((), "<i4", [0], shape_text=""),
        "ep_size": npy((), "<i4", [2], shape_text=""),
        "global_rank": npy((), "<i4", [0], shape_text=""),
        "num_global_physical_experts": npy((), "<i4", [G], shape_text=""),
        "num_local_physical_experts": npy((), "<i4", [G // 2], shape_text=""),
    }


def megatron_npz_seeds():
    loads = [1, 2, 3, 4, 10, 0, 5, 1, 999, 999, 999, 999, 0, 0, 8, 0, 2, 2, 2, 2, 1, 0, 0, 7]
    m = megatron_members(loads, 2, 3, 4, [3, 7], [2, 3])
    put("megatron_npz", "two-layers.npz", npz(m))
    put("megatron_npz", "two-layers-deflated.npz", npz(m, deflate=True))
    put("megatron_npz", "two-layers-zip64.npz", npz(m, zip64=True))
    put("megatron_npz", "int64-loads.npz", npz(megatron_members(loads, 2, 3, 4, [3, 7], [2, 3], "<i8")))
    bad = dict(m)
    bad["dump_version"] = npy_text("mcore_ep_load_dump_v2")
    put("megatron_npz", "wrong-version.npz", npz(bad))
    put("megatron_npz", "truncated.npz", npz(m)[:300])


def baseline_seeds(moesim):
    small = ["--no-execute", "--format", "json", "--set", "workload.batch=64"]
    run = subprocess.run([moesim, "run"] + small, check=True, capture_output=True).stdout
    put("baseline", "run.json", run)
    both = subprocess.run([moesim, "compare", "--gating", "token_choice,hash",
                           "--vary", "router.capacity_factor=1,2"] + small, check=True, capture_output=True).stdout
    runs = {"schema_version": 1, "runs": [json.loads(run), dict(json.loads(both), experiment={"name": "other"})]}
    put("baseline", "runs.json", json.dumps(runs))
    j = json.loads(run)
    j["schema_version"] = 99
    put("baseline", "wrong-schema.json", json.dumps(j))
    j = json.loads(run)
    j["strategies"][0]["strategy"] = "token_choice capacity_factor=-1"
    put("baseline", "bad-label.json", json.dumps(j))
    put("baseline", "not-json.json", "{\"schema_version\": 1, \"strategies\": [")
    put("baseline", "no-name.json", "{\"schema_version\": 1, \"strategies\": []}")


def megatron_router_trace_seeds():
    def line(step, layer, rows, block="decoder", extra=""):
        return ('{"step": %d, "stage": "pre_dispatch", "block": "%s", "layer": %d, "rank": 0, "num_tokens": %d, '
                '"topk": %d, "top_indices": %s%s}\n' % (step, block, layer, len(rows), len(rows[0]) if rows else 2,
                                                          json.dumps(rows), extra))
    rows = [[0, 1], [1, 2], [1, 3]]
    good = line(0, 1, rows) + line(0, 4, [[3, 2], [3, 0], [1, 3]]) + line(0, 1, [[0, 1]], "mtp", ', "mtp_idx": 0')
    good += "\n" + line(1, 1, [[2, 3], [0, 2], [3, 0]], extra=', "logit_offset": 0, "logit_bytes": 24, "logit_shape": [3, 4]')
    put("megatron_router_trace", "two-layers.jsonl", bytes([3, 2]) + good.encode())
    put("megatron_router_trace", "unchecked-topk.jsonl", bytes([7, 0]) + good.encode())
    put("megatron_router_trace", "empty-batch.jsonl", bytes([3, 0]) + line(0, 0, []).encode())
    put("megatron_router_trace", "out-of-range.jsonl", bytes([1, 0]) + line(0, 0, rows).encode())
    put("megatron_router_trace", "repeated-id.jsonl", bytes([3, 0]) + line(0, 0, [[1, 1]]).encode())
    put("megatron_router_trace", "topk-changes.jsonl", bytes([3, 0]) + (line(0, 0, rows) + line(1, 0, [[0, 1, 2]])).encode())
    put("megatron_router_trace", "short-list.jsonl", bytes([3, 0]) + line(0, 0, rows).replace('"num_tokens": 3', '"num_tokens": 4').encode())
    put("megatron_router_trace", "only-mtp.jsonl", bytes([3, 0]) + line(0, 1, rows, "mtp").encode())
    put("megatron_router_trace", "not-json.jsonl", bytes([3, 0]) + b'{"step": 0, "top_indices": [[0\n')


def main():
    # Named seeds are (re)written in place; inputs that fuzzing added (named by their SHA-1, merged with
    # `<target>_fuzz -merge=1 tests/fuzz/corpus/<target> build-fuzz/corpus/<target>`) are kept.
    config_seeds()
    npy_seeds()
    csv_seeds()
    trace_seeds()
    load_profile_seeds()
    megatron_npz_seeds()
    megatron_router_trace_seeds()
    if len(sys.argv) > 1:
        baseline_seeds(sys.argv[1])


if __name__ == "__main__":
    main()
