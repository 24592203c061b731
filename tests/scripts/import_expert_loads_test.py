#!/usr/bin/env python3
"""Tests of scripts/import_expert_loads.py without torch or NumPy (ctest scripts.import_expert_loads):
an OLMoE expert_counts pickle (NumPy int64 keys, written here through stand-in modules exactly as NumPy
pickles its scalars) read by the restricted unpickler; a malicious pickle refused before it runs; vLLM EPLB
and SGLang stat/per_token dumps as JSON of plain numbers; each against hand-worked counts; one-line errors
with exit 2."""
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


def check(cond, what):
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

if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("import_expert_loads: all checks passed")
