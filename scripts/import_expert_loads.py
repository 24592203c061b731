#!/usr/bin/env python3
"""Converts expert loads recorded by serving/training engines into moesim's load-profile JSON.

Output (what `workload.source: load_profile` reads, src/workload/load_profile.hpp):
    {"_note": "...", NAME: {"LAYER": [count of expert 0, ..., count of expert E-1], ...}}
Counts are exact integers, summed over the recorded steps; physical (replicated) experts are folded into
logical experts with the engine's own map, or with --expert-map.

Formats (taken from the engines' sources; moesim copies no code, only the layout):
  sglang_stat       SGLang ExpertDistributionRecorder, mode "stat"/"stat_approx": a torch.save'd dict with
                    "logical_count" [buffered steps, layers, logical experts] (already logical, summed over
                    ranks). sgl-project/sglang python/sglang/srt/eplb/expert_distribution.py (_StatAccumulator).
  sglang_per_pass   the same recorder, mode "per_pass": {"records": [{"global_physical_count": [layers,
                    physical experts], ...}], "last_physical_to_logical_map": [layers, physical experts]}.
  sglang_per_token  mode "per_token": records hold "topk_ids_of_layer" [layers, tokens, top-k] of physical
                    expert ids (-1: none), counted per layer then folded with last_physical_to_logical_map.
  vllm_eplb         vLLM's EPLB state, saved by the user (vLLM writes no file): "expert_load_window"
                    [window, layers, physical experts] and "physical_to_logical_map" [layers, physical
                    experts], as JSON of plain numbers or a torch .pt. vllm-project/vllm
                    vllm/distributed/eplb/eplb_state.py (EplbModelState).
  olmoe_pickle      allenai/OLMoE scripts/run_routing_analysis.py output, routing_output/*/expert_counts*/*.pkl:
                    a list of collections.Counter (one per saved layer: 0, 7, 15) of expert id -> count. Read
                    by a restricted unpickler that builds only list/dict/Counter/int and NumPy integer scalars
                    (decoded without NumPy); any other global is refused.
Only the .pt formats need torch (python3-torch); everything else runs on Debian's python3 alone.
torch.load runs with weights_only=True (no arbitrary pickles). torch 1.13's (Debian bookworm) loader has no
float opcode: it refuses a SGLang stat dump whose average_utilization_rate_over_window is a float (set when
enable_expert_distribution_metrics is on); None, the default, loads. Later torch releases read floats.

Usage:
  scripts/import_expert_loads.py IN [--format F] [--experts E] [--expert-map 0,1,..] [--layers 0,7,15]
                                 [--name NAME] --out PROFILE.json
Exit 0 on success; 2 with one line "import_expert_loads: FILE: what was expected" on bad input.
Tested by tests/scripts/import_expert_loads_test.py (ctest scripts.import_expert_loads).
"""
import argparse
import collections
import io
import json
import os
import pickle
import sys
import tempfile


class InputError(Exception):
    pass


# ---- restricted unpickling (OLMoE pickles) -------------------------------------------------------------
class _NumpyDtype:
    """Stand-in for numpy.dtype inside a pickle: remembers the type code, nothing else."""

    def __init__(self, code, align=False, copy=True):
        if not isinstance(code, str):
            raise pickle.UnpicklingError("numpy.dtype: expected a type code string")
        self.code = code
        self.order = "<"

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) > 1 and state[1] in ("<", ">", "|", "="):
            self.order = state[1]


_INT_CODES = {"i1": (1, True), "i2": (2, True), "i4": (4, True), "i8": (8, True),
              "u1": (1, False), "u2": (2, False), "u4": (4, False), "u8": (8, False)}


def _numpy_scalar(dtype, data=None):
    """numpy.core.multiarray.scalar(dtype, bytes) for integer dtypes only, decoded without NumPy."""
    if not isinstance(dtype, _NumpyDtype) or dtype.code not in _INT_CODES:
        raise pickle.UnpicklingError("numpy scalar: expected an integer dtype")
    size, signed = _INT_CODES[dtype.code]
    if isinstance(data, str):  # protocol 2 pickles carry the bytes as a latin-1 string
        data = data.encode("latin-1")
    if not isinstance(data, bytes) or len(data) != size:
        raise pickle.UnpicklingError("numpy scalar: expected %d bytes" % size)
    return int.from_bytes(data, "big" if dtype.order == ">" else "little", signed=signed)


def _latin1_bytes(text, encoding):
    """_codecs.encode as protocol-2 pickles use it for bytes: latin-1 only."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode: expected a latin-1 string")
    return text.encode("latin-1")


class RestrictedUnpickler(pickle.Unpickler):
    """Builds only plain containers, Counter and NumPy integer scalars; refuses every other global."""

    _ALLOWED = {
        ("builtins", "list"): list,
        ("builtins", "dict"): dict,
        ("builtins", "int"): int,
        ("__builtin__", "list"): list,
        ("__builtin__", "dict"): dict,
        ("collections", "Counter"): collections.Counter,
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("_codecs", "encode"): _latin1_bytes,
        ("numpy", "dtype"): _NumpyDtype,
        ("numpy.core.multiarray", "scalar"): _numpy_scalar,
        ("numpy._core.multiarray", "scalar"): _numpy_scalar,
    }

    def find_class(self, module, name):
        found = self._ALLOWED.get((module, name))
        if found is None:
            raise pickle.UnpicklingError("refused global %s.%s" % (module, name))
        return found


def restricted_loads(data):
    return RestrictedUnpickler(io.BytesIO(data)).load()


# ---- helpers ------------------------------------------------------------------------------------------
def _count(v, where):
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise InputError("%s: expected a count >= 0, got %r" % (where, v))
    return v


def _nested(value, depth, where):
    """A nested list of ints of the given depth (torch tensors become lists)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if depth == 0:
        return value
    if not isinstance(value, list):
        raise InputError("%s: expected a list of %d dimension(s), got %s" % (where, depth, type(value).__name__))
    return [_nested(v, depth - 1, "%s[%d]" % (where, i)) for i, v in enumerate(value)]


def _fold(physical, p2l, num_logical, where):
    if len(physical) != len(p2l):
        raise InputError("%s: expected %d physical experts (the map's), got %d" % (where, len(p2l), len(physical)))
    out = [0] * num_logical
    for p, (c, e) in enumerate(zip(physical, p2l)):
        if isinstance(e, bool) or not isinstance(e, int) or not 0 <= e < num_logical:
            raise InputError("%s: physical-to-logical map[%d]: expected an expert in [0, %d), got %r"
                             % (where, p, num_logical, e))
        out[e] += _count(c, "%s[%d]" % (where, p))
    return out


def _num_logical(p2l_layers, explicit):
    if explicit:
        return explicit
    return max(max(row) for row in p2l_layers) + 1


# ---- readers: each returns {layer: [counts]} ----------------------------------------------------------
def read_olmoe_pickle(data, args, name):
    try:
        obj = restricted_loads(data)
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as e:
        raise InputError("%s: expected an OLMoE expert_counts pickle (a list of Counters), refused: %s" % (name, e))
    if not isinstance(obj, list) or not all(isinstance(c, dict) for c in obj) or not obj:
        raise InputError("%s: expected a list of Counters (one per saved layer), got %s" % (name, type(obj).__name__))
    layers = args.layers or ([0, 7, 15] if len(obj) == 3 else list(range(len(obj))))
    if len(layers) != len(obj):
        raise InputError("%s: --layers: expected %d layer numbers (one per Counter), got %d" % (name, len(obj), len(layers)))
    experts = args.experts or 1 + max((k for c in obj for k in c), default=-1)
    out = {}
    for layer, counter in zip(layers, obj):
        row = [0] * experts
        for k, v in counter.items():
            if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < experts:
                raise InputError("%s: layer %d: expected expert ids in [0, %d), got %r" % (name, layer, experts, k))
            row[k] += _count(v, "%s: layer %d, expert %d" % (name, layer, k))
        out[layer] = row
    return out


def read_vllm_eplb(obj, args, name):
    window = _nested(obj.get("expert_load_window"), 3, name + ": expert_load_window")
    p2l = _nested(obj.get("physical_to_logical_map"), 2, name + ": physical_to_logical_map")
    if not window or len(window[0]) != len(p2l):
        raise InputError("%s: expert_load_window: expected [window, %d layers, physical experts]" % (name, len(p2l)))
    num_logical = _num_logical(p2l, args.experts)
    out = {}
    for layer in range(len(p2l)):
        total = [0] * len(p2l[layer])
        for step, rows in enumerate(window):
            if len(rows) != len(p2l):
                raise InputError("%s: expert_load_window[%d]: expected %d layers" % (name, step, len(p2l)))
            for p, c in enumerate(rows[layer]):
                if p >= len(total):
                    raise InputError("%s: expert_load_window[%d][%d]: expected %d physical experts"
                                     % (name, step, layer, len(total)))
                total[p] += _count(c, "%s: expert_load_window[%d][%d][%d]" % (name, step, layer, p))
        out[layer] = _fold(total, p2l[layer], num_logical, "%s: layer %d" % (name, layer))
    return out


def read_sglang_stat(obj, args, name):
    counts = _nested(obj.get("logical_count"), 3, name + ": logical_count")
    if not counts:
        raise InputError("%s: logical_count: expected at least one buffered step" % name)
    num_layers, experts = len(counts[0]), len(counts[0][0]) if counts[0] else 0
    out = {layer: [0] * experts for layer in range(num_layers)}
    for s, step in enumerate(counts):
        for layer, row in enumerate(step):
            if len(row) != experts or len(step) != num_layers:
                raise InputError("%s: logical_count[%d]: expected [%d layers, %d experts]" % (name, s, num_layers, experts))
            for e, c in enumerate(row):
                out[layer][e] += _count(c, "%s: logical_count[%d][%d][%d]" % (name, s, layer, e))
    return out


def read_sglang_records(obj, args, name, per_token):
    records = obj.get("records")
    if not isinstance(records, list) or not records:
        raise InputError("%s: records: expected a list of forward-pass records" % name)
    p2l = _nested(obj.get("last_physical_to_logical_map"), 2, name + ": last_physical_to_logical_map")
    num_logical = _num_logical(p2l, args.experts)
    physical = [[0] * len(row) for row in p2l]
    for r, rec in enumerate(records):
        where = "%s: records[%d]" % (name, r)
        if per_token:
            ids = _nested(rec.get("topk_ids_of_layer"), 3, where + ".topk_ids_of_layer")
            for layer, tokens in enumerate(ids):
                for token in tokens:
                    for e in token:
                        if e == -1:
                            continue
                        if not 0 <= e < len(physical[layer]):
                            raise InputError("%s: layer %d: expected physical expert ids in [0, %d), got %r"
                                             % (where, layer, len(physical[layer]), e))
                        physical[layer][e] += 1
        else:
            counts = _nested(rec.get("global_physical_count"), 2, where + ".global_physical_count")
            for layer, row in enumerate(counts):
                for p, c in enumerate(row):
                    physical[layer][p] += _count(c, "%s[%d][%d]" % (where, layer, p))
    return {layer: _fold(physical[layer], p2l[layer], num_logical, "%s: layer %d" % (name, layer))
            for layer in range(len(p2l))}


def load_torch(path):
    try:
        import torch  # python3-torch; only .pt inputs need it
    except ImportError:
        raise InputError("%s: expected python3-torch to read a .pt file (apt-get install python3-torch)" % path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for a bad file, some with no message (EOFError: empty file)
        first = (str(e).strip().splitlines() or [""])[0]
        raise InputError("%s: expected a torch.save file of tensors and plain objects: %s%s"
                         % (path, type(e).__name__, ": " + first if first else ""))


def detect(obj):
    if isinstance(obj, dict):
        if "logical_count" in obj:
            return "sglang_stat"
        if "expert_load_window" in obj:
            return "vllm_eplb"
        recs = obj.get("records")
        if isinstance(recs, list) and recs and isinstance(recs[0], dict):
            return "sglang_per_token" if "topk_ids_of_layer" in recs[0] else "sglang_per_pass"
    return None


def convert(path, args):
    with open(path, "rb") as f:
        data = f.read()
    fmt = args.format
    if fmt == "olmoe_pickle" or (fmt == "auto" and path.endswith(".pkl")):
        return "olmoe_pickle", read_olmoe_pickle(data, args, path)
    if data.lstrip()[:1] == b"{":
        try:
            obj = json.loads(data)
        except ValueError as e:
            raise InputError("%s: expected JSON, got a parse error: %s" % (path, e))
    else:
        obj = load_torch(path)
    if fmt == "auto":
        fmt = detect(obj)
        if fmt is None:
            raise InputError("%s: --format: expected a recognisable dump (logical_count, records or "
                             "expert_load_window), got none of them" % path)
    readers = {"sglang_stat": lambda: read_sglang_stat(obj, args, path),
               "sglang_per_pass": lambda: read_sglang_records(obj, args, path, False),
               "sglang_per_token": lambda: read_sglang_records(obj, args, path, True),
               "vllm_eplb": lambda: read_vllm_eplb(obj, args, path)}
    if not isinstance(obj, dict):
        raise InputError("%s: expected a dict of arrays, got %s" % (path, type(obj).__name__))
    return fmt, readers[fmt]()


def apply_expert_map(layers, text, experts, name):
    try:
        m = [int(x) for x in text.split(",")]
    except ValueError:
        raise InputError("--expert-map: expected comma-separated logical experts, got %r" % text)
    n = experts or max(m) + 1
    missing = sorted(set(range(n)) - set(m))
    if missing:
        raise InputError("--expert-map: expected every logical expert 0..%d on at least one slot, got none for %d"
                         % (n - 1, missing[0]))
    return {layer: _fold(row, m, n, "%s: layer %d (--expert-map)" % (name, layer)) for layer, row in layers.items()}


def write_atomic(path, text):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".import-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("input")
    p.add_argument("--format", default="auto", choices=["auto", "sglang_stat", "sglang_per_pass", "sglang_per_token",
                                                        "vllm_eplb", "olmoe_pickle"])
    p.add_argument("--experts", type=int, default=0, help="logical experts (default: from the map or the ids)")
    p.add_argument("--expert-map", default="", help="fold physical counts: logical expert of each slot, comma-separated")
    p.add_argument("--layers", default="", help="olmoe_pickle: layer number of each Counter (default 0,7,15)")
    p.add_argument("--name", default="", help="the profile's key in the output (default: the input's file name)")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    try:
        args.layers = [int(x) for x in args.layers.split(",")] if args.layers else []
        fmt, layers = convert(args.input, args)
        if args.expert_map:
            layers = apply_expert_map(layers, args.expert_map, args.experts, args.input)
        name = args.name or os.path.splitext(os.path.basename(args.input))[0]
        if not name or name.startswith("_") or name == "data":
            raise InputError("--name: expected a key not starting with '_' and not 'data', got %r" % name)
        doc = {"_note": "scripts/import_expert_loads.py %s of %s" % (fmt, args.input),
               name: {str(layer): layers[layer] for layer in sorted(layers)}}
        write_atomic(args.out, json.dumps(doc, indent=1) + "\n")
    except InputError as e:
        print("import_expert_loads: %s" % e, file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print("import_expert_loads: %s: %s" % (args.input, e), file=sys.stderr)
        return 2
    print("import_expert_loads: wrote %s (%s, %d layers)" % (args.out, fmt, len(layers)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
