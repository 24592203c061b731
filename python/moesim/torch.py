"""Router logits recorded from a PyTorch MoE model, as a moesim trace.

    import moesim, moesim.torch
    with moesim.torch.record(model, "trace.jsonl") as rec:
        model(input_ids)                      # each forward of `model` is one step
    moesim.compare(rec.experiment(), gating="all")   # every gating on the model's own router logits

record() hooks the router of every Hugging Face-style MoE block of `model` (a module with a `gate` and
`experts`: Mixtral's MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock, Qwen3MoeSparseMoeBlock, OlmoeSparseMoeBlock,
DeepSeek-V2/V3's DeepseekV2MoE / DeepseekV3MoE; docs/workloads.md "Recording a PyTorch model"). A gate that is
an nn.Linear gives its output; any other gate with a 2-D `weight` [experts, hidden] (DeepSeek's router) gives
x @ weight.T in float32, the logits before its score function. The layer is the number in the block's module
path (model.layers.3.mlp -> 3); the step counts the forwards of `model`. The file is moesim's trace format
with logits (docs/workloads.md "Trace format"), one line per (step, layer): the batch's tokens in order, the
experts and weights of token choice top-k over the logits (softmax over the chosen: what the model computed
for Mixtral), and the logits. moesim re-routes a trace with logits under any gating. Written atomically when
the block ends; nothing is written if it raises.
"""

import contextlib
import json
import os
import re
import tempfile

import numpy as np

__all__ = ["record", "Recorder", "find_routers"]

_BLOCK_NAMES = re.compile(r"(SparseMoeBlock|MoE|MoeBlock|MoELayer)$")
_LAYER_NUMBER = re.compile(r"(?:^|\.)(?:layers|h|blocks|block|decoder\.layers)\.(\d+)(?:\.|$)")


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - exercised where torch is missing
        raise ImportError("moesim.torch needs PyTorch (Debian: python3-torch)") from e
    return torch


def _top_k_of(block, gate):
    for owner, name in ((block, "top_k"), (gate, "top_k"), (block, "num_experts_per_tok"),
                        (getattr(block, "config", None), "num_experts_per_tok")):
        value = getattr(owner, name, None) if owner is not None else None
        if isinstance(value, int) and value >= 1:
            return value
    return None


def find_routers(model):
    """(layer, module path, block, gate, top_k) for every MoE block of `model`, in module order."""
    torch = _torch()
    found = []
    for name, module in model.named_modules():
        gate = getattr(module, "gate", None)
        if not isinstance(gate, torch.nn.Module) or not hasattr(module, "experts"):
            continue
        if not _BLOCK_NAMES.search(type(module).__name__):
            continue
        weight = getattr(gate, "weight", None)
        if not isinstance(gate, torch.nn.Linear) and not (isinstance(weight, torch.Tensor) and weight.dim() == 2):
            continue
        m = _LAYER_NUMBER.search(name)
        layer = int(m.group(1)) if m else len(found)
        found.append((layer, name, module, gate, _top_k_of(module, gate)))
    return found


def _softmax_top_k(logits, k):
    """Token choice over logits [n, E]: the k largest (ties to the lower expert, as moesim's rule) and the softmax
    over those k."""
    order = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    chosen = np.take_along_axis(logits.astype(np.float64), order, axis=1)
    w = np.exp(chosen - chosen[:, :1])
    return order, (w / w.sum(axis=1, keepdims=True)).astype(np.float32)


def _number(x):
    return format(float(x), ".9g")


class Recorder:
    """The recording in progress: the trace's path, what was seen (`experts`, `top_k`, `hidden`, `layers`, `steps`),
    and experiment(), a moesim experiment that replays it."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.experts = None
        self.top_k = None
        self.hidden = None
        self.layers = set()
        self.steps = 0
        self.lines = 0
        folder = os.path.dirname(os.path.abspath(self.path))
        fd, self._tmp = tempfile.mkstemp(prefix=".moesim-trace-", suffix=".jsonl", dir=folder)
        self._file = os.fdopen(fd, "w")

    def _write(self, step, layer, logits, top_k):
        n, num_e = logits.shape
        if self.experts is None:
            self.experts = num_e
        elif num_e != self.experts:
            raise ValueError(f"moesim.torch.record: layer {layer} has {num_e} experts, an earlier one {self.experts}")
        k = min(top_k or 2, num_e)
        if self.top_k is None:
            self.top_k = k
        experts, weights = _softmax_top_k(logits, k)
        rows = ",".join("[" + ",".join(_number(v) for v in row) + "]" for row in logits)
        line = (f'{{"step": {step}, "layer": {layer}, "experts": {json.dumps(experts.tolist())}, '
                f'"weights": [{",".join("[" + ",".join(_number(v) for v in r) + "]" for r in weights)}], '
                f'"logits": [{rows}]}}\n')
        self._file.write(line)
        self.layers.add(layer)
        self.lines += 1

    def _finish(self, ok):
        self._file.close()
        if ok and self.lines > 0:
            os.replace(self._tmp, self.path)
        else:
            os.unlink(self._tmp)
            if ok:
                raise ValueError("moesim.torch.record: no router ran inside the block: nothing to write to " +
                                 self.path)

    def experiment(self, **model_keys):
        """An experiment (a dict for moesim.run/compare/sweep) that re-routes the recorded logits: the model's
        expert count and top-k, its hidden size where the gate showed it, and any model keys given here."""
        model = {"experts": self.experts, "top_k": self.top_k}
        if self.hidden:
            model["hidden"] = self.hidden
        model.update(model_keys)
        return {"name": "recorded", "model": model, "workload": {"source": "trace", "path": os.path.abspath(self.path)},
                "placement": {"kind": "single"}}


@contextlib.contextmanager
def record(model, path):
    """Records the router logits of every MoE block of `model` into the trace `path` while the block runs."""
    torch = _torch()
    routers = find_routers(model)
    if not routers:
        raise ValueError("moesim.torch.record: no MoE router found: expected modules with `gate` and `experts` "
                         "whose class name ends in SparseMoeBlock or MoE (Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3, OLMoE)")
    rec = Recorder(path)
    step = {"value": -1}

    def count_step(module, args):
        step["value"] += 1
        rec.steps = step["value"] + 1

    def router_hook(layer, top_k):
        def hook(gate, inputs, output):
            if isinstance(gate, torch.nn.Linear):
                logits = output
            else:  # a router module with its own score and top-k: the logits before them, as it computes them
                x = inputs[0]
                logits = torch.nn.functional.linear(x.reshape(-1, x.shape[-1]).float(), gate.weight.float())
            if rec.hidden is None:
                rec.hidden = int(inputs[0].shape[-1])
            values = logits.detach().reshape(-1, logits.shape[-1]).float().cpu().numpy()
            rec._write(max(step["value"], 0), layer, values, top_k)
        return hook

    handles = [model.register_forward_pre_hook(count_step)]
    handles += [gate.register_forward_hook(router_hook(layer, k)) for layer, _, _, gate, k in routers]
    ok = False
    try:
        yield rec
        ok = True
    finally:
        for h in handles:
            h.remove()
        rec._finish(ok)
