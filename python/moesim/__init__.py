"""moesim from Python: the same C++ library as the moesim command, over NumPy arrays and dicts.

    import moesim
    r = moesim.route(logits, gating="token_choice", top_k=2)   # logits: [tokens, experts]
    r.metrics["imbalance"], r.loads, r.experts, r.weights, r.kept
    report = moesim.run("configs/quickstart.yaml", set={"router.top_k": 4})   # = moesim run --format json
    moesim.compare(), moesim.sweep(vary={"workload.batch": [64, 256]})
    moesim.cost(loads, model={"hidden": 4096, "ffn": 14336}, hardware="h100-sxm",
                placement={"kind": "expert_parallel", "devices": 8})
    moesim.plan(loads, devices=8, replicas=8, format="sglang")
    moesim.hardware("h100-sxm"), moesim.config(), moesim.__version__

Every function calls the library the CLI runs, so its numbers are the CLI's: route() those of
`moesim route`, run() the report of `moesim run --format json`. The GIL is released while the library
works. A bad key or value raises ValueError with the CLI's one-line message, a file that does not exist
FileNotFoundError, a resource limit moesim.ResourceError; the CLI's warnings come as MoesimWarning.
"""

import json
import os
import warnings

import numpy as np

from . import _core

__version__ = _core.__version__
ResourceError = _core.ResourceError

__all__ = ["route", "run", "compare", "sweep", "cost", "plan", "hardware", "config", "Routing", "MoesimWarning",
           "CheckFailed", "ResourceError", "__version__"]


class MoesimWarning(UserWarning):
    """A line moesim printed on stderr: a key set to no effect, a note on what it kept."""


class CheckFailed(RuntimeError):
    """A command that finished but failed its check (exit code 1: --verify disagreed); .report holds its report."""

    def __init__(self, message, report):
        super().__init__(message)
        self.report = report


def _warn(stderr_text):
    for line in stderr_text.splitlines():
        if line.strip():
            warnings.warn(line, MoesimWarning, stacklevel=3)


def _value(v):
    """A Python value as --set writes it: YAML scalars, lists as flow sequences."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, (np.integer, np.floating)):
        v = v.item()
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _overrides(set=None, **sections):
    """--set KEY=VALUE lines: from `set` (a dict of dotted keys, or a list of "KEY=VALUE"), then each section
    dict as SECTION.KEY=VALUE."""
    out = []
    if set is not None:
        if isinstance(set, dict):
            out += [f"{k}={_value(v)}" for k, v in set.items()]
        elif isinstance(set, str):
            out.append(set)
        else:
            out += [str(s) for s in set]
    for section, keys in sections.items():
        if keys is None:
            continue
        if not isinstance(keys, dict):
            raise ValueError(f"moesim: {section}: expected a dict of {section} keys, got {type(keys).__name__}")
        out += [f"{section}.{k}={_value(v)}" for k, v in keys.items()]
    return out


def _flag_args(options):
    """Keyword options as command-line flags: no_execute=True -> --no-execute, threads=2 -> --threads 2."""
    args = []
    for k, v in options.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            args.append(flag)
        elif v is False or v is None:
            continue
        else:
            args += [flag, str(v)]
    return args


def _experiment_args(experiment, command):
    """The experiment argument: (positional args, inline YAML text or None)."""
    if experiment is None:
        return [], None
    if isinstance(experiment, dict):
        return [], json.dumps(experiment)  # JSON is YAML: the library reads it as an experiment file
    path = os.fspath(experiment)
    if not os.path.exists(path):
        raise FileNotFoundError(2, f"moesim {command}: {path}: cannot open the experiment file", path)
    return [path], None


def _command(args, inline=None):
    code, out, err = _core.command(args, inline, "<dict>")
    _warn(err)
    return code, out


def _json_command(args, inline=None):
    code, out = _command(args, inline)
    report = json.loads(out) if out.strip() else None
    if code == 1:
        raise CheckFailed(f"moesim {args[0]}: the check failed (exit code 1)", report)
    return report


class Routing:
    """One routed batch: experts [tokens, k] int32 (slot j in descending score), weights [tokens, k] float32,
    kept [tokens, k] bool (False: dropped by the capacity), loads [experts] int64 (kept assignments), metrics
    (the balance metrics, as `moesim route --format json` names them) and report (its whole JSON)."""

    __slots__ = ("experts", "weights", "kept", "loads", "metrics", "report")

    def __init__(self, experts, weights, kept, loads, report):
        self.experts, self.weights, self.kept, self.loads = experts, weights, kept, loads
        self.report = report
        self.metrics = report["metrics"]

    def __repr__(self):
        t, k = self.experts.shape
        return (f"moesim.Routing({t} tokens x top-{k} of {self.loads.shape[0]} experts, "
                f"imbalance {self.metrics['imbalance']:.4f}, drop_rate {self.metrics['drop_rate']:.4f})")


def _logits_array(logits):
    arr = np.asarray(logits)  # a CPU torch tensor arrives through __array__
    if arr.dtype.kind != "f":
        raise ValueError(f"moesim route: logits: expected a float32 or float64 array, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"moesim route: logits: expected a 2-D array [tokens, experts], got shape {arr.shape}")
    if arr.dtype != np.float32 or not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr, dtype=np.float32)  # a contiguous float32 array is used in place
    return arr


def route(logits, *, gating=None, top_k=None, capacity_factor=None, renormalize=None, set=None, **router_keys):
    """Routes logits [tokens, experts] once, as `moesim route` does: the built-in experiment's router, dropless
    unless capacity_factor, then any router key as a keyword (semantics="megatron", drop_policy="score", ...)
    and `set` ({"KEY": value} or ["KEY=VALUE"]). Returns a Routing."""
    arr = _logits_array(logits)
    overrides = _overrides(set, router=router_keys or None)
    if top_k is not None and (isinstance(top_k, bool) or int(top_k) != top_k or top_k < 1):
        raise ValueError(f"moesim route: --top-k: expected an integer >= 1, got {top_k!r}")
    experts, weights, kept, loads, report, err = _core.route(
        arr, gating or "", int(top_k or 0), "" if capacity_factor is None else _value(capacity_factor), renormalize,
        overrides)
    _warn(err)
    return Routing(experts, weights, kept, loads, json.loads(report))


def run(experiment=None, *, set=None, **options):
    """`moesim run [EXPERIMENT] --format json`: EXPERIMENT a path, a dict (an experiment file's keys) or None (the
    built-in experiment); `set` overrides keys; options are the command's flags (no_execute=True, threads=2,
    backend="cpu", repeats=3, records=True, verify=True). Returns the JSON report as a dict."""
    pos, inline = _experiment_args(experiment, "run")
    return _json_command(["run", *pos, "--format", "json", *_set_args(set), *_flag_args(options)], inline)


def compare(experiment=None, *, gating="all", vary=None, set=None, **options):
    """`moesim compare [EXPERIMENT] --gating GATING --format json`: every gating strategy (or a comma list) side
    by side; vary={"router.capacity_factor": [1.0, 1.25]} adds --vary axes. Returns the JSON report."""
    pos, inline = _experiment_args(experiment, "compare")
    args = ["compare", *pos, "--format", "json", "--gating", gating, *_vary_args(vary), *_set_args(set),
            *_flag_args(options)]
    return _json_command(args, inline)


def sweep(experiment=None, *, vary, set=None, **options):
    """`moesim sweep [EXPERIMENT] --vary KEY=V1,V2 --format json`: vary={"workload.batch": [1, 64, 4096]}.
    Returns the JSON report."""
    pos, inline = _experiment_args(experiment, "sweep")
    args = ["sweep", *pos, "--format", "json", *_vary_args(vary), *_set_args(set), *_flag_args(options)]
    return _json_command(args, inline)


def _set_args(set):
    out = []
    for s in _overrides(set):
        out += ["--set", s]
    return out


def _vary_args(vary):
    if vary is None:
        return []
    items = vary.items() if isinstance(vary, dict) else [(None, v) for v in ([vary] if isinstance(vary, str) else vary)]
    out = []
    for k, v in items:
        text = v if k is None else f"{k}=" + (",".join(_value(x) for x in v) if isinstance(v, (list, tuple)) else _value(v))
        out += ["--vary", text]
    return out


def _loads_array(loads, what="loads"):
    arr = np.asarray(loads)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise ValueError(f"moesim cost: {what}: expected whole, finite counts")
    elif arr.dtype.kind not in "iu":
        raise ValueError(f"moesim cost: {what}: expected an integer array of counts, got dtype {arr.dtype}")
    if arr.ndim not in (1, 2):
        raise ValueError(f"moesim cost: {what}: expected a 1-D [experts] or 2-D [layers, experts] array, "
                         f"got shape {arr.shape}")
    if arr.size and (arr < 0).any():
        raise ValueError(f"moesim cost: {what}: expected counts >= 0")
    return np.ascontiguousarray(arr.reshape(1, -1) if arr.ndim == 1 else arr, dtype=np.int64)


def _model_overrides(model, hardware, placement, router):
    sets = []
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise FileNotFoundError(2, f"moesim cost: {path}: cannot open the Hugging Face config.json", path)
        sets.append(f"model.hf_config={path}")
        model = None
    if hardware is not None:
        if not isinstance(hardware, (str, os.PathLike)):
            raise ValueError("moesim cost: hardware: expected a profile name (moesim.hardware()) or a profile YAML file")
        sets.append(f"hardware={os.fspath(hardware)}")
    if isinstance(placement, str):
        placement = {"kind": placement}
    return sets + _overrides(None, model=model, placement=placement, router=router)


def cost(loads, *, model=None, hardware=None, placement=None, router=None, tokens=None, set=None):
    """One MoE layer's modeled cost for per-expert loads (kept assignments): 1-D [experts], or 2-D [layers,
    experts] for one result per layer. model: a dict of model keys or a Hugging Face config.json path; hardware:
    a profile name or YAML file; placement: a dict of placement keys (or "expert_parallel"); tokens: the batch
    (default ceil(sum / top_k)). The rest is the built-in experiment's. Returns, per layer, its metrics and
    `modeled`: each placement's times, erosion parts, and under expert parallelism its plan and all-to-all, as
    `moesim run --format json` names them (a 2-D input: {"experiment", "layers": [...]})."""
    arr = _loads_array(loads)
    one = np.ndim(loads) == 1
    overrides = _model_overrides(model, hardware, placement, router) + _overrides(set)
    text, err = _core.cost(arr, int(tokens or 0), overrides)
    _warn(err)
    doc = json.loads(text)
    if one:
        layer = doc["layers"][0]
        layer["experiment"] = doc["experiment"]
        return layer
    return doc


def plan(loads, *, devices, replicas=0, policy=None, format="json", experts=None, layers=None, model=None, set=None,
         out=None):
    """`moesim plan`: an expert-parallel placement of `devices` GPUs with `replicas` redundant experts for the
    loads (1-D [experts] or 2-D [layers, experts], or a path to any load source moesim reads), made by the EPLB
    code `run` uses, as format json (moesim's plan), vllm, sglang or trtllm. `layers` is the model's decoder
    layer count (`--layers`: sglang writes a row for each, the trivial map where no loads were recorded; by
    default the model's num_hidden_layers when `model` names a Hugging Face config, else the last loaded layer
    + 1). Returns the file's text; with out=PATH writes it (atomically) and returns None."""
    import tempfile
    args = ["plan"]
    tmp = None
    try:
        if isinstance(loads, (str, os.PathLike)):
            path = os.fspath(loads)
            if not os.path.exists(path):
                raise FileNotFoundError(2, f"moesim plan: {path}: cannot open the load profile", path)
            args.append(path)
        else:
            arr = _loads_array(loads)
            fd, tmp = tempfile.mkstemp(suffix=".json", prefix="moesim-loads-")
            with os.fdopen(fd, "w") as f:
                json.dump({"loads": {str(i): [int(x) for x in row] for i, row in enumerate(arr)}}, f)
            args.append(tmp)
            if experts is None:
                experts = arr.shape[1]
        args += ["--devices", str(devices), "--replicas", str(replicas), "--format", format]
        if policy is not None:
            args += ["--policy", policy]
        if experts is not None:
            args += ["--experts", str(experts)]
        if layers is not None:
            if isinstance(layers, bool) or int(layers) != layers or layers < 1:
                raise ValueError(f"moesim plan: --layers: expected an integer >= 1, got {layers!r}")
            args += ["--layers", str(int(layers))]
        if out is not None:
            args += ["--out", os.fspath(out)]
        for s in _model_overrides(model, None, None, None) + _overrides(set):
            args += ["--set", s]
        code, text = _command(args)
        return None if out is not None else text
    finally:
        if tmp is not None:
            os.unlink(tmp)


def hardware(name=None):
    """`moesim hardware [NAME] --format json`: every built-in profile (a list), or one profile (a dict) by name
    or YAML file."""
    args = ["hardware", "--format", "json"]
    if name is not None:
        args.append(os.fspath(name))
    return json.loads(_command(args)[1])


def config(experiment=None, *, set=None):
    """The effective experiment (every key, defaults filled in) of a path, a dict or the built-in, as a dict."""
    pos, inline = _experiment_args(experiment, "config")
    text, err = _core.config(pos[0] if pos else None, inline, "<dict>", _overrides(set))
    _warn(err)
    return json.loads(text)
