"""moesim.torch.record on a small MoE written here in torch (random weights, a Mixtral-shaped module tree:
model.layers.N.block_sparse_moe with a Linear `gate` and `experts`): the trace it writes, replayed by the moesim
CLI as token choice top-k, gives the experts the model chose, token by token; DeepSeek's router module (a gate
with its own weight, not a Linear) is recorded by its logits too. Skipped, saying why, where torch is not
importable (Debian: python3-torch). Run by ctest (python.torch_record).
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

try:
    import torch
except ImportError as e:  # the exit code ctest reads as skipped
    print(f"SKIPPED: torch is not importable ({e}); Debian: apt-get install python3-torch")
    sys.exit(77)

import moesim
import moesim.torch

BINARY = os.environ["MOESIM_BINARY"]
HIDDEN, EXPERTS, TOP_K, LAYERS = 24, 8, 2, 3


class MixtralSparseMoeBlock(torch.nn.Module):
    """Mixtral's routing: softmax over the gate's logits, the top k, renormalised; records what it chose."""

    def __init__(self):
        super().__init__()
        self.top_k = TOP_K
        self.gate = torch.nn.Linear(HIDDEN, EXPERTS, bias=False)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(EXPERTS))
        self.chosen = []

    def forward(self, x):
        flat = x.reshape(-1, HIDDEN)
        probs = torch.softmax(self.gate(flat), dim=-1)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        self.chosen.append(experts.clone())
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(flat)
        for j in range(self.top_k):
            for e in range(EXPERTS):
                rows = experts[:, j] == e
                if rows.any():
                    out[rows] += weights[rows, j, None] * self.experts[e](flat[rows])
        return out.reshape(x.shape)


class DecoderLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block_sparse_moe = MixtralSparseMoeBlock()

    def forward(self, x):
        return x + self.block_sparse_moe(x)


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(100, HIDDEN)
        self.layers = torch.nn.ModuleList(DecoderLayer() for _ in range(LAYERS))

    def forward(self, ids):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)
        return x


class TinyMixtral(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Inner()

    def forward(self, ids):
        return self.model(ids)


class DeepseekV3TopkRouter(torch.nn.Module):
    """A router with its own weight and score (DeepSeek's form): the module returns indices, not logits."""

    def __init__(self):
        super().__init__()
        self.top_k = TOP_K
        self.weight = torch.nn.Parameter(torch.randn(EXPERTS, HIDDEN))

    def forward(self, x):
        scores = torch.sigmoid(torch.nn.functional.linear(x.reshape(-1, HIDDEN).float(), self.weight.float()))
        return torch.topk(scores, self.top_k, dim=-1)


class DeepseekV3MoE(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = DeepseekV3TopkRouter()
        self.experts = torch.nn.ModuleList(torch.nn.Identity() for _ in range(EXPERTS))
        self.chosen = []

    def forward(self, x):
        _, idx = self.gate(x)
        self.chosen.append(idx.clone())
        return x


class TinyDeepseek(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.ModuleDict({"mlp": DeepseekV3MoE()}) for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = layer["mlp"](x)
        return x


def replay(path, *sets):
    """The CLI's routing of the trace: a --dump-routing of `moesim run` over it (token lines)."""
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "replayed.jsonl")
        args = [BINARY, "run", "--no-execute", "--format", "json", "--set", "workload.source=trace",
                "--set", f"workload.path={path}", "--set", f"model.experts={EXPERTS}", "--set", f"model.top_k={TOP_K}",
                "--set", "placement.kind=single", "--set", "router.capacity_factor=0", "--dump-routing", dump]
        for s in sets:
            args += ["--set", s]
        p = subprocess.run(args, capture_output=True, text=True)
        if p.returncode != 0:
            raise AssertionError(p.stderr)
        with open(dump) as f:
            return [json.loads(line) for line in f], json.loads(p.stdout)


class Record(unittest.TestCase):
    def test_rerouted_logits_give_the_experts_the_model_chose(self):
        torch.manual_seed(0)
        model = TinyMixtral()
        routers = moesim.torch.find_routers(model)
        self.assertEqual([(layer, name) for layer, name, _, _, _ in routers],
                         [(i, f"model.layers.{i}.block_sparse_moe") for i in range(LAYERS)])
        self.assertEqual({k for *_, k in routers}, {TOP_K})
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.jsonl")
            with torch.no_grad(), moesim.torch.record(model, path) as rec:
                for step in range(2):
                    model(torch.randint(0, 100, (3, 5 + step)))  # 15, then 18 tokens a layer
            self.assertEqual(rec.steps, 2)
            self.assertEqual(rec.lines, 2 * LAYERS)
            self.assertEqual((rec.experts, rec.top_k, rec.hidden), (EXPERTS, TOP_K, HIDDEN))
            with open(path) as f:
                first = json.loads(f.readline())
            self.assertEqual((first["step"], first["layer"], len(first["logits"])), (0, 0, 15))
            lines, report = replay(path, "router.gating=token_choice")
            chosen = {}
            for i, layer in enumerate(model.model.layers):
                for step, experts in enumerate(layer.block_sparse_moe.chosen):
                    chosen[(step, i)] = experts.tolist()
            self.assertEqual(len(lines), 15 * LAYERS + 18 * LAYERS)
            for line in lines:
                self.assertEqual(line["experts"], chosen[(line["step"], line["layer"])][line["token"]],
                                 f"step {line['step']} layer {line['layer']} token {line['token']}")
            # The same trace through the module: compare every gating on the model's own logits.
            table = moesim.compare(rec.experiment(), gating="all", no_execute=True)
            self.assertGreater(len(table["strategies"]), 5)
            self.assertEqual(table["experiment"]["config"]["workload"]["source"], "trace")

    def test_a_router_module_with_its_own_weight(self):
        torch.manual_seed(1)
        model = TinyDeepseek()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.jsonl")
            with torch.no_grad(), moesim.torch.record(model, path):
                model(torch.randn(2, 7, HIDDEN))
            # Sigmoid is increasing: token choice over the recorded logits picks the model's experts.
            lines, _ = replay(path, "router.gating=token_choice", "router.score=sigmoid")
            for line in lines:
                want = model.layers[line["layer"]]["mlp"].chosen[0][line["token"]].tolist()
                self.assertEqual(line["experts"], want)

    def test_nothing_is_written_when_the_block_fails_or_routes_nothing(self):
        model = TinyMixtral()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.jsonl")
            with self.assertRaises(RuntimeError):
                with moesim.torch.record(model, path):
                    raise RuntimeError("the user's forward failed")
            self.assertFalse(os.path.exists(path))
            with self.assertRaises(ValueError):
                with moesim.torch.record(model, path):
                    pass
            self.assertEqual(os.listdir(tmp), [])
        with self.assertRaises(ValueError):
            moesim.torch.record(torch.nn.Linear(2, 2), "x.jsonl").__enter__()


if __name__ == "__main__":
    unittest.main()
