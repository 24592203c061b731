#!/usr/bin/env python3
"""Tests of scripts/import_expert_loads.py without torch or NumPy (ctest scripts.import_expert_loads):
an OLMoE expert_counts pickle (NumPy int64 keys, written here through stand-in modules exactly as NumPy
pickles its scalars) read by the restricted unpickler; a malicious pickle refused before it runs; vLLM EPLB
and SGLang stat/per_token dumps as JSON of plain numbers; each against hand-worked counts; one-line errors
with exit 2.
With torch importable (python3-torch), also the .pt inputs, written with torch.save in the engines' own
structures (SGLang stat, per_pass and per_token dumps; a vLLM EPLB window and map), each against hand-worked
counts, and malformed .pt files (exit 2, one line naming the file). Without torch those cases are skipped with a
printed reason and the script still exits 0; a .pt input with torch hidden must exit 2 asking for python3-torch."""
import collections
import json
import os
import pickle
import subprocess
import sys
import tempfile
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "import_expert_loads.py")
failures = []
passes = [0]


def check(cond, what):
    passes[0] += bool(cond)
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def run(*args):
    return subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True)


# Stand-ins with NumPy's pickled names, so that the pickle below carries the same globals and arguments as
# NumPy's own (numpy.dtype('i8', False, True) + state; numpy.core.multiarray.scalar(dtype, 8 bytes)).
def _dtype(*a):
    raise AssertionError("never called while writing")


def _scalar(*a):
    raise AssertionError("never called while writing")


np_mod = types.ModuleType("numpy")
np_mod.dtype = _dtype
_dtype.__module__, _dtype.__qualname__, _dtype.__name__ = "numpy", "dtype", "dtype"
core = types.ModuleType("numpy.core")
multi = types.ModuleType("numpy.core.multiarray")
multi.scalar = _scalar
_scalar.__module__, _scalar.__qualname__, _scalar.__name__ = "numpy.core.multiarray", "scalar", "scalar"
sys.modules.update({"numpy": np_mod, "numpy.core": core, "numpy.core.multiarray": multi})


class Int64Dtype:
    def __reduce__(self):
        return (_dtype, ("i8", False, True), (3, "<", None, None, None, -1, -1, 0))


class Int64:
    def __init__(self, v):
        self.v = v

    def __reduce__(self):
        return (_scalar, (Int64Dtype(), self.v.to_bytes(8, "little", signed=True)))

    def __hash__(self):
        return hash(self.v)

    def __eq__(self, other):
        return isinstance(other, Int64) and other.v == self.v


class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + os.path.join(tmp, "pwned"),))


tmp = tempfile.mkdtemp()
out = os.path.join(tmp, "p.json")

# OLMoE: three Counters (layers 0, 7, 15), NumPy int64 expert ids.
olmoe = [collections.Counter({Int64(0): 5, Int64(2): 1}), collections.Counter({Int64(1): 3}), collections.Counter()]
pkl = os.path.join(tmp, "arxiv.pkl")
for protocol in (2, 4):
    with open(pkl, "wb") as f:
        pickle.dump(olmoe, f, protocol=protocol)
    r = run(pkl, "--experts", "3", "--out", out)
    check(r.returncode == 0, "olmoe pickle, protocol %d: exit %d %s" % (protocol, r.returncode, r.stderr))
    if r.returncode == 0:
        doc = json.load(open(out))
        check(doc["arxiv"] == {"0": [5, 0, 1], "7": [0, 3, 0], "15": [0, 0, 0]}, "olmoe counts: %s" % doc)

# A malicious pickle: refused, never run.
evil = os.path.join(tmp, "evil.pkl")
with open(evil, "wb") as f:
    pickle.dump([Evil()], f)
r = run(evil, "--out", os.path.join(tmp, "e.json"))
check(r.returncode == 2, "evil pickle: exit %d" % r.returncode)
check("refused global posix.system" in r.stderr or "refused global os.system" in r.stderr, "evil: " + r.stderr)
check(r.stderr.count("\n") == 1 and evil in r.stderr, "evil: one line naming the file: " + r.stderr)
check(not os.path.exists(os.path.join(tmp, "pwned")), "evil pickle ran")
check(not os.path.exists(os.path.join(tmp, "e.json")), "evil pickle left an output")

# vLLM EPLB window [2 steps, 2 layers, 3 physical], map [[0,1,0],[0,1,1]]:
# layer 0 physical [5,2,3] -> logical [8,2]; layer 1 [1,1,7] -> [1,8].
vllm = {"expert_load_window": [[[1, 2, 3], [0, 0, 6]], [[4, 0, 0], [1, 1, 1]]],
        "physical_to_logical_map": [[0, 1, 0], [0, 1, 1]]}
vj = os.path.join(tmp, "vllm.json")
json.dump(vllm, open(vj, "w"))
r = run(vj, "--out", out)
check(r.returncode == 0, "vllm: exit %d %s" % (r.returncode, r.stderr))
if r.returncode == 0:
    check(json.load(open(out))["vllm"] == {"0": [8, 2], "1": [1, 8]}, "vllm counts: %s" % open(out).read())

# SGLang stat: logical_count [2 steps, 2 layers, 2 experts] summed over steps.
sj = os.path.join(tmp, "stat.json")
json.dump({"rank": 0, "logical_count": [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]}, open(sj, "w"))
r = run(sj, "--out", out)
check(r.returncode == 0, "sglang stat: exit %d %s" % (r.returncode, r.stderr))
if r.returncode == 0:
    check(json.load(open(out))["stat"] == {"0": [6, 8], "1": [10, 12]}, "stat counts: %s" % open(out).read())

# SGLang per_token: one layer, tokens picking physical [0,2] and [1,-1]; map [0,1,0] -> logical [2,1].
tj = os.path.join(tmp, "tok.json")
json.dump({"records": [{"topk_ids_of_layer": [[[0, 2], [1, -1]]]}], "last_physical_to_logical_map": [[0, 1, 0]]},
          open(tj, "w"))
r = run(tj, "--out", out)
check(r.returncode == 0, "sglang per_token: exit %d %s" % (r.returncode, r.stderr))
if r.returncode == 0:
    check(json.load(open(out))["tok"] == {"0": [2, 1]}, "per_token counts: %s" % open(out).read())

# --expert-map folds the stat profile's two experts into one.
r = run(sj, "--expert-map", "0,0", "--out", out)
check(r.returncode == 0 and json.load(open(out))["stat"] == {"0": [14], "1": [22]}, "expert map: " + r.stderr)

# Bad inputs: one line, exit 2.
bad = os.path.join(tmp, "bad.json")
json.dump({"logical_count": [[[1, -2]]]}, open(bad, "w"))
for args, needle in [([bad], "logical_count[0][0][1]"), ([os.path.join(tmp, "none.json")], "none.json"),
                     ([vj, "--expert-map", "0,5"], "none for 1"), ([vj, "--expert-map", "0,1,2"], "expected 3 physical")]:
    r = run(*(args + ["--out", os.path.join(tmp, "x.json")]))
    check(r.returncode == 2 and needle in r.stderr and r.stderr.count("\n") == 1,
          "%s: exit %d, %r" % (args, r.returncode, r.stderr))

# ---- .pt inputs (torch.load) ---------------------------------------------------------------------------
def one_line_error(r, path, needle, what):
    check(r.returncode == 2 and r.stderr.count("\n") == 1 and path in r.stderr and needle in r.stderr,
          "%s: expected exit 2 and one line naming %s with %r, got exit %d, %r"
          % (what, path, needle, r.returncode, r.stderr))


# Without torch (hidden by a torch.py that raises ImportError, as on CI): a .pt input asks for python3-torch.
# Runs whether or not torch is installed.
notorch = os.path.join(tmp, "notorch")
os.mkdir(notorch)
with open(os.path.join(notorch, "torch.py"), "w") as f:
    f.write("raise ImportError('torch hidden by import_expert_loads_test')\n")
fake_pt = os.path.join(tmp, "nt.pt")
with open(fake_pt, "wb") as f:
    f.write(b"PK\x03\x04")
r = subprocess.run([sys.executable, SCRIPT, fake_pt, "--out", os.path.join(tmp, "nt.json")], capture_output=True,
                   text=True, env=dict(os.environ, PYTHONPATH=notorch))
one_line_error(r, fake_pt, "expected python3-torch", "a .pt input without torch")

# The NumPy stand-ins above must not be what torch imports.
for mod in ("numpy.core.multiarray", "numpy.core", "numpy"):
    if sys.modules.get(mod) in (np_mod, core, multi):
        del sys.modules[mod]
try:
    import torch  # python3-torch; the script runs under this same interpreter (sys.executable) and environment
except Exception as e:  # ImportError on CI; anything else torch raises while importing is a skip too
    torch = None
    print("skipped: the .pt cases (SGLang stat/per_pass/per_token, vLLM EPLB, malformed .pt): torch not "
          "importable by %s: %s" % (sys.executable, (str(e).splitlines() or [type(e).__name__])[0]))

if torch is not None:
    print("torch %s: running the .pt cases" % torch.__version__)

    def run_pt(path, *extra):
        if os.path.exists(out):
            os.unlink(out)  # no stale profile in a failure message
        r = run(path, "--out", out, *extra)
        check(r.returncode == 0, "%s: exit %d %s" % (path, r.returncode, r.stderr))
        if r.returncode != 0:
            return None
        doc = json.load(open(out))
        return doc.get(os.path.splitext(os.path.basename(path))[0])

    # SGLang stat / stat_approx (_StatAccumulator.dump): rank 0 saves dict(rank, logical_count: int32
    # [buffered steps, layers, logical experts], average_utilization_rate_over_window: None unless metrics are on).
    # logical_count step 0: layer 0 [1,0,2,3], layer 1 [0,4,0,1]; step 1: [2,2,0,0], [1,0,3,5]
    # -> layer 0 [3,2,2,3], layer 1 [1,4,3,6].
    logical_count = torch.tensor([[[1, 0, 2, 3], [0, 4, 0, 1]], [[2, 2, 0, 0], [1, 0, 3, 5]]], dtype=torch.int32)
    stat_pt = os.path.join(tmp, "stat_pt.pt")
    torch.save(dict(rank=0, logical_count=logical_count, average_utilization_rate_over_window=None), stat_pt)
    check(run_pt(stat_pt) == {"0": [3, 2, 2, 3], "1": [1, 4, 3, 6]}, "stat .pt counts: " + open(out).read())
    # --expert-map 0,0,1,1 folds experts {0,1} and {2,3}: layer 0 [5,5], layer 1 [5,9].
    check(run_pt(stat_pt, "--expert-map", "0,0,1,1") == {"0": [5, 5], "1": [5, 9]},
          "stat .pt --expert-map counts: " + open(out).read())

    # The same dump as a GPU rank writes it (SGLang saves the CUDA tensor itself): storages tagged cuda:0, read
    # on this CPU-only machine through map_location="cpu".
    stat_cuda = os.path.join(tmp, "stat_cuda.pt")
    import torch.serialization as _ts
    _tag = _ts.location_tag
    _ts.location_tag = lambda storage: "cuda:0"
    try:
        torch.save(dict(rank=0, logical_count=logical_count, average_utilization_rate_over_window=None), stat_cuda)
    finally:
        _ts.location_tag = _tag
    import zipfile
    with zipfile.ZipFile(stat_cuda) as z:
        tagged = any(n.endswith("data.pkl") and b"cuda:0" in z.read(n) for n in z.namelist())
    if tagged:
        check(run_pt(stat_cuda) == {"0": [3, 2, 2, 3], "1": [1, 4, 3, 6]}, "stat cuda .pt: " + open(out).read())
    else:
        print("skipped: the cuda-tagged stat .pt: this torch's save does not go through location_tag")

    # With metrics on, average_utilization_rate_over_window is a float. torch 1.13's weights_only loader has no
    # float opcode and refuses the file (exit 2, one line); a torch whose loader reads floats gives the counts.
    stat_float = os.path.join(tmp, "stat_float.pt")
    torch.save(dict(rank=0, logical_count=logical_count, average_utilization_rate_over_window=0.75), stat_float)
    probe = os.path.join(tmp, "probe.pt")
    torch.save({"x": 0.5}, probe)
    try:
        floats_ok = torch.load(probe, map_location="cpu", weights_only=True) == {"x": 0.5}
    except Exception:
        floats_ok = False
    if floats_ok:
        check(run_pt(stat_float) == {"0": [3, 2, 2, 3], "1": [1, 4, 3, 6]}, "stat float .pt: " + open(out).read())
    else:
        r = run(stat_float, "--out", os.path.join(tmp, "sf.json"))
        one_line_error(r, stat_float, "Weights only load failed",
                       "stat .pt with a float (torch %s)" % torch.__version__)

    # physical_to_logical_map as SGLang's init_trivial builds it: arange(6).repeat(2, 1) % 4 -> each layer
    # [0,1,2,3,0,1] (6 physical slots, 4 logical experts; physical 4 and 5 replicate logical 0 and 1), int64.
    p2l_sglang = torch.arange(0, 6).repeat(2, 1) % 4

    # SGLang per_pass (_DetailAccumulator.dump): dict(records=[dict(forward_pass_id, rank, gatherer_key,
    # global_physical_count: int32 [layers, physical])], last_physical_to_logical_map).
    # Physical sums: layer 0 [1,2,3,4,5,6]+[1,1,1,1,1,1] = [2,3,4,5,6,7] -> logical [2+6, 3+7, 4, 5] = [8,10,4,5];
    # layer 1 [0,0,1,1,2,2]+[3,0,0,0,0,7] = [3,0,1,1,2,9] -> [3+2, 0+9, 1, 1] = [5,9,1,1].
    passes_gpc = [[[1, 2, 3, 4, 5, 6], [0, 0, 1, 1, 2, 2]], [[1, 1, 1, 1, 1, 1], [3, 0, 0, 0, 0, 7]]]
    records = [dict(forward_pass_id=i, rank=0, gatherer_key="primary",
                    global_physical_count=torch.tensor(g, dtype=torch.int).cpu().clone())
               for i, g in enumerate(passes_gpc)]
    pass_pt = os.path.join(tmp, "pass_pt.pt")
    torch.save(dict(records=records, last_physical_to_logical_map=p2l_sglang), pass_pt)
    check(run_pt(pass_pt) == {"0": [8, 10, 4, 5], "1": [5, 9, 1, 1]}, "per_pass .pt counts: " + open(out).read())

    # SGLang per_token (_DetailSinglePassGatherer.collect): the record also carries the batch metadata and
    # topk_ids_of_layer, int32 [layers, tokens, 8] of physical ids, -1 where no expert was picked.
    # Layer 0 tokens [0,4] [1,5] [4,3]: physical 0:1 1:1 3:1 4:2 5:1 -> logical [1+2, 1+1, 0, 1] = [3,2,0,1];
    # layer 1 tokens [2,2] [5,0] [3]: physical 0:1 2:2 3:1 5:1 -> logical [1, 1, 2, 1].
    topk = torch.full((2, 3, 8), -1, dtype=torch.int32)
    for layer, tokens in enumerate([[[0, 4], [1, 5], [4, 3]], [[2, 2], [5, 0], [3]]]):
        for t, ids in enumerate(tokens):
            topk[layer, t, :len(ids)] = torch.tensor(ids, dtype=torch.int32)
    gpc = torch.zeros((2, 6), dtype=torch.int32)
    for layer in range(2):
        for e in topk[layer].flatten().tolist():
            if e != -1:
                gpc[layer, e] += 1
    rec = dict(forward_pass_id=3, rank=0, gatherer_key="primary", input_ids=[11, 12, 13], positions=[0, 1, 2],
               extend_seq_lens=[3], forward_mode=1, topk_ids_of_layer=topk.clone().cpu(), misc_objects=[],
               global_physical_count=gpc)
    tok_pt = os.path.join(tmp, "tok_pt.pt")
    torch.save(dict(records=[rec], last_physical_to_logical_map=p2l_sglang), tok_pt)
    check(run_pt(tok_pt) == {"0": [3, 2, 0, 1], "1": [1, 1, 2, 1]}, "per_token .pt counts: " + open(out).read())

    # vLLM EplbState, saved by the user: expert_load_window int32 [window 3, layers 2, physical 6] (slot 2 not yet
    # filled: zeros) and physical_to_logical_map int64 [2, 6] (the example in eplb_state.py).
    # Physical sums: layer 0 [3,2,3,4,6,7] with map [0,1,2,3,0,1] -> [3+6, 2+7, 3, 4] = [9,9,3,4];
    # layer 1 [4,1,0,4,0,1] with map [0,2,0,1,0,3] -> [4+0+0, 4, 1, 1] = [4,4,1,1].
    window = torch.zeros((3, 2, 6), dtype=torch.int32)
    window[0] = torch.tensor([[1, 2, 3, 4, 5, 6], [0, 1, 0, 1, 0, 1]], dtype=torch.int32)
    window[1] = torch.tensor([[2, 0, 0, 0, 1, 1], [4, 0, 0, 3, 0, 0]], dtype=torch.int32)
    p2l_vllm = torch.tensor([[0, 1, 2, 3, 0, 1], [0, 2, 0, 1, 0, 3]])
    vllm_pt = os.path.join(tmp, "vllm_pt.pt")
    torch.save({"expert_load_window": window, "physical_to_logical_map": p2l_vllm}, vllm_pt)
    check(run_pt(vllm_pt) == {"0": [9, 9, 3, 4], "1": [4, 4, 1, 1]}, "vllm .pt counts: " + open(out).read())

    # Malformed .pt files: exit 2, one line naming the file, no output written.
    class EvilPt:
        def __reduce__(self):
            return (os.system, ("touch " + os.path.join(tmp, "pwned_pt"),))

    malformed = []

    def save_bad(name, obj, needle):
        path = os.path.join(tmp, name)
        torch.save(obj, path)
        malformed.append((path, needle))

    save_bad("stat_rank2.pt", {"logical_count": logical_count[0]}, "logical_count[0][0]: expected a list")
    save_bad("stat_floatcounts.pt", {"logical_count": logical_count.float()}, "expected a count >= 0, got 1.0")
    save_bad("vllm_rank2.pt", {"expert_load_window": window[0], "physical_to_logical_map": p2l_vllm},
             "expert_load_window[0][0]: expected a list")
    save_bad("vllm_badmap.pt", {"expert_load_window": window, "physical_to_logical_map": p2l_vllm[:, :5]},
             "expected 5 physical experts")
    save_bad("tok_badid.pt",
             dict(records=[dict(rec, topk_ids_of_layer=topk + 6)], last_physical_to_logical_map=p2l_sglang),
             "expected physical expert ids in [0, 6)")
    save_bad("unknown_pt.pt", {"something": torch.zeros(2)}, "expected a recognisable dump")
    save_bad("evil_pt.pt", {"logical_count": logical_count, "x": EvilPt()}, "Unsupported class")
    for name, data, needle in [("empty.pt", b"", "EOFError"),
                               ("notzip.pt", b"PK\x03\x04 not a zip archive", "expected a torch.save file"),
                               ("text.pt", b"hello, not a torch file\n", "expected a torch.save file")]:
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        malformed.append((path, needle))
    for path, needle in malformed:
        bad_out = os.path.join(tmp, os.path.basename(path) + ".json")
        r = run(path, "--out", bad_out)
        one_line_error(r, path, needle, "malformed " + os.path.basename(path))
        check(not os.path.exists(bad_out), "malformed %s left an output" % path)
    check(not os.path.exists(os.path.join(tmp, "pwned_pt")), "the malicious .pt ran")

if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("import_expert_loads: all %d checks passed%s"
      % (passes[0], "" if torch is not None else " (the .pt cases skipped: no torch)"))
