"""The Python module against the CLI: every function of moesim (python/moesim/__init__.py) gives the numbers the
moesim binary gives for the same inputs, raises the CLI's one-line message as ValueError (FileNotFoundError for a
missing file), and never crashes on wrong dtypes, shapes, NaN, empty or non-contiguous arrays. Run by ctest
(python.moesim) with PYTHONPATH at the build's python/ folder; MOESIM_BINARY names the CLI it is held to.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
import warnings

import numpy as np

import moesim

BINARY = os.environ["MOESIM_BINARY"]
SOURCE = os.environ["MOESIM_SOURCE_DIR"]


def cli(*args, check=True):
    """The CLI's (exit code, stdout, stderr)."""
    p = subprocess.run([BINARY, *args], capture_output=True, text=True, cwd=SOURCE)
    if check and p.returncode != 0:
        raise AssertionError(f"moesim {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p.returncode, p.stdout, p.stderr


def cli_json(*args):
    return json.loads(cli(*args, "--format", "json")[1])


def without_provenance(report):
    """A report less what differs between two invocations of the same computation: when and how it was asked."""
    report = dict(report)
    report.pop("provenance", None)
    return report


def awkward_logits(tokens, experts, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, experts)).astype(np.float32)
    x[::7, 0] = x[::7, 1]  # ties between two experts
    return x


class Route(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def npy(self, x):
        path = os.path.join(self.tmp.name, "logits.npy")
        np.save(path, x)
        return path

    def cli_routing(self, path, *args):
        """The CLI's report and its routing, from --dump-routing (one line per token)."""
        dump = os.path.join(self.tmp.name, "routing.jsonl")
        code, out, err = cli("route", "--logits", path, "--format", "json", "--dump-routing", dump, *args)
        with open(dump) as f:
            lines = [json.loads(line) for line in f]
        return json.loads(out), lines

    def test_numbers_are_the_clis_for_every_gating(self):
        x = awkward_logits(257, 13, seed=1)
        path = self.npy(x)
        cases = [
            dict(gating="token_choice", top_k=3),
            dict(gating="token_choice", top_k=2, capacity_factor=1.0),
            dict(gating="token_choice", top_k=2, capacity_factor=0.75, drop_policy="score"),
            dict(gating="expert_choice", top_k=2),
            dict(gating="sinkhorn", top_k=1),
            dict(gating="hash", top_k=2),
            dict(gating="group_limited", top_k=2, set={"router.groups": 1}),
            dict(gating="aux_free_bias", top_k=2),
            dict(gating="token_choice", top_k=2, renormalize=False, semantics="megatron"),
        ]
        for case in cases:
            with self.subTest(**{k: str(v) for k, v in case.items()}):
                args = ["--gating", case["gating"], "--top-k", str(case["top_k"])]
                if "capacity_factor" in case:
                    args += ["--capacity-factor", str(case["capacity_factor"])]
                if case.get("renormalize") is False:
                    args.append("--no-renormalize")
                for key in ("drop_policy", "semantics"):
                    if key in case:
                        args += ["--set", f"router.{key}={case[key]}"]
                for k, v in case.get("set", {}).items():
                    args += ["--set", f"{k}={v}"]
                report, lines = self.cli_routing(path, *args)
                r = moesim.route(x, **case)
                self.assertEqual(r.metrics, report["metrics"])
                self.assertEqual(without_provenance(r.report)["metrics"], report["metrics"])
                self.assertEqual(r.loads.tolist(), report["metrics"]["load"])
                # The assignments as the CLI dumped them: token order, slot order.
                if case["gating"] != "expert_choice":
                    self.assertEqual(r.experts.shape, (257, case["top_k"]))
                    for line in lines[:40] + lines[-40:]:
                        t = line["token"]
                        self.assertEqual(r.experts[t].tolist(), line["experts"])
                        self.assertEqual([float(w) for w in r.weights[t]], [np.float32(w) for w in line["weights"]])
                        self.assertEqual(r.kept[t].astype(int).tolist(), line.get("kept", [1] * case["top_k"]))
                self.assertEqual(r.experts.dtype, np.int32)
                self.assertEqual(r.weights.dtype, np.float32)
                self.assertEqual(r.kept.dtype, np.bool_)

    def test_any_float_array_routes_as_its_float32_copy(self):
        x = awkward_logits(64, 20, seed=2)
        want = moesim.route(x, top_k=4)
        for variant in (x.astype(np.float64), np.asfortranarray(x), np.repeat(x, 2, axis=1)[:, ::2],
                        x.T.copy().T, x.astype(np.float16).astype(np.float32)):
            got = moesim.route(variant, top_k=4)
            ref = moesim.route(np.ascontiguousarray(variant, dtype=np.float32), top_k=4)
            self.assertTrue(np.array_equal(got.experts, ref.experts))
            self.assertEqual(got.metrics, ref.metrics)
        self.assertTrue(np.array_equal(moesim.route(x.astype(np.float64), top_k=4).experts, want.experts))
        # A list of lists is an array too.
        self.assertEqual(moesim.route(x.tolist(), top_k=4).metrics, want.metrics)

    def test_bad_inputs_raise_the_clis_message(self):
        x = awkward_logits(8, 4, seed=3)
        path = self.npy(x)
        code, _, err = cli("route", "--logits", path, "--set", "router.top_k_typo=3", check=False)
        self.assertEqual(code, 2)
        with self.assertRaises(ValueError) as ctx:
            moesim.route(x, set={"router.top_k_typo": 3})
        self.assertEqual(str(ctx.exception), err.strip())
        code, _, err = cli("route", "--logits", path, "--gating", "nope", check=False)
        with self.assertRaises(ValueError) as ctx:
            moesim.route(x, gating="nope")
        self.assertEqual(str(ctx.exception), err.strip())
        code, _, err = cli("route", "--logits", path, "--top-k", "5", check=False)
        with self.assertRaises(ValueError) as ctx:
            moesim.route(x, top_k=5)
        self.assertEqual(str(ctx.exception), err.strip())

    def test_wrong_arrays_raise_and_never_crash(self):
        bad = [
            np.zeros((0, 4), np.float32), np.zeros((4, 0), np.float32), np.zeros(4, np.float32),
            np.zeros((2, 3, 4), np.float32), np.arange(12).reshape(3, 4), np.array([["a", "b"]]),
            np.array([[1, None]], dtype=object), np.ones((3, 4), dtype=bool), np.array(3.0),
        ]
        nan = awkward_logits(5, 4, seed=4)
        nan[4, 3] = np.nan
        inf = awkward_logits(5, 4, seed=4)
        inf[0, 0] = np.inf
        bad += [nan, inf, nan.astype(np.float64)]
        for x in bad:
            with self.subTest(dtype=str(x.dtype), shape=x.shape):
                with self.assertRaises(ValueError):
                    moesim.route(x)
        for kw in (dict(top_k=0), dict(top_k=-1), dict(top_k=2.5), dict(capacity_factor=-1),
                   dict(capacity_factor="x"), dict(drop_policy=3), dict(set=["no_equals_sign"])):
            with self.subTest(**{k: str(v) for k, v in kw.items()}):
                with self.assertRaises(ValueError):
                    moesim.route(awkward_logits(5, 4, seed=5), **kw)

    def test_nan_message_is_the_clis(self):
        x = awkward_logits(5, 4, seed=6)
        x[4, 3] = np.nan
        code, _, err = cli("route", "--logits", self.npy(x), check=False)
        self.assertEqual(code, 2)
        with self.assertRaises(ValueError) as ctx:
            moesim.route(x)
        # The CLI names its file where the module names the array: the rest is the same line.
        self.assertEqual(str(ctx.exception).replace("<array>", "X"), err.strip().replace(self.npy(x), "X"))

    def test_warnings_are_the_clis_lines(self):
        x = awkward_logits(16, 4, seed=7)
        code, _, err = cli("route", "--logits", self.npy(x), "--set", "router.sinkhorn_iterations=5")
        self.assertIn("has no effect", err)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            moesim.route(x, sinkhorn_iterations=5)
        self.assertEqual([str(w.message) for w in caught], [line for line in err.splitlines() if line.strip()])
        self.assertTrue(all(issubclass(w.category, moesim.MoesimWarning) for w in caught))


class Commands(unittest.TestCase):
    def test_run_is_the_clis_report(self):
        want = cli_json("run", "--no-execute")
        got = moesim.run(no_execute=True)
        self.assertEqual(without_provenance(got), without_provenance(want))
        self.assertEqual(got["provenance"]["command"], "run")

    def test_run_a_file_with_overrides(self):
        path = os.path.join(SOURCE, "configs", "mixtral-8x7b.yaml")
        want = cli_json("run", path, "--no-execute", "--set", "model.top_k=1", "--set", "workload.batch=64")
        got = moesim.run(path, set={"model.top_k": 1, "workload.batch": 64}, no_execute=True)
        self.assertEqual(without_provenance(got), without_provenance(want))

    def test_a_dict_runs_as_its_file(self):
        path = os.path.join(SOURCE, "configs", "quickstart.yaml")
        effective = moesim.config(path)
        from_file = moesim.run(path, no_execute=True)
        from_dict = moesim.run(effective, no_execute=True)
        self.assertEqual(from_dict["strategies"], from_file["strategies"])
        self.assertEqual(from_dict["experiment"]["config"], from_file["experiment"]["config"])
        self.assertEqual(from_dict["experiment"]["source"], "<dict>")

    def test_compare_and_sweep_are_the_clis(self):
        want = cli_json("compare", "--gating", "all", "--no-execute")
        self.assertEqual(without_provenance(moesim.compare(no_execute=True)), without_provenance(want))
        want = cli_json("sweep", "--vary", "workload.batch=16,256", "--vary", "model.top_k=1,2")
        got = moesim.sweep(vary={"workload.batch": [16, 256], "model.top_k": [1, 2]})
        self.assertEqual(without_provenance(got), without_provenance(want))

    def test_hardware_config_and_version(self):
        self.assertEqual(moesim.hardware(), cli_json("hardware"))
        self.assertEqual(moesim.hardware("h100-sxm"), cli_json("hardware", "h100-sxm"))
        self.assertEqual(cli("--version")[1].split()[1], moesim.__version__)
        c = moesim.config(set={"model.top_k": 3})
        self.assertEqual(c["model"]["top_k"], 3)

    def test_errors(self):
        with self.assertRaises(FileNotFoundError) as ctx:
            moesim.run("no/such/experiment.yaml")
        self.assertEqual(ctx.exception.filename, "no/such/experiment.yaml")
        with self.assertRaises(FileNotFoundError) as ctx:
            moesim.run(set={"model.hf_config": "no/such/config.json"}, no_execute=True)
        self.assertIn("no/such/config.json", str(ctx.exception))
        code, _, err = cli("run", "--set", "router.gating=nope", "--no-execute", check=False)
        with self.assertRaises(ValueError) as ctx:
            moesim.run(set={"router.gating": "nope"}, no_execute=True)
        self.assertEqual(str(ctx.exception), err.strip())
        with self.assertRaises(ValueError):
            moesim.run({"model": {"experts": "many"}})
        with self.assertRaises(ValueError):
            moesim.sweep(vary={"no.such_key": [1, 2]})
        with self.assertRaises(ValueError):
            moesim.run(no_such_flag=True)
        with self.assertRaises(moesim.ResourceError):
            moesim.run(memory_limit="1KiB")


class Cost(unittest.TestCase):
    def test_cost_is_what_a_run_models_for_the_same_loads(self):
        loads = [[300, 20, 0, 40, 100, 20, 16, 16], [64] * 8]  # 512 assignments each: 256 tokens at top-2
        sets = {"workload.batch": 256, "placement.kind": "expert_parallel", "placement.devices": 4,
                "hardware": "h100-sxm"}
        with tempfile.TemporaryDirectory() as tmp:
            profile = os.path.join(tmp, "loads.json")
            with open(profile, "w") as f:
                json.dump({"p": {"0": loads[0], "1": loads[1]}}, f)
            args = ["run", "--no-execute", "--records", "--set", "workload.source=load_profile",
                    "--set", f"workload.path={profile}", "--set", "workload.profile_key=p"]
            for k, v in sets.items():
                args += ["--set", f"{k}={v}"]
            report = cli_json(*args)
        records = report["strategies"][0]["records"]
        got = moesim.cost(np.array(loads), tokens=256, hardware="h100-sxm",
                          placement={"kind": "expert_parallel", "devices": 4})
        for layer, rec in zip(got["layers"], records):
            self.assertEqual(layer["modeled"], rec["modeled"]["moe"])
        one = moesim.cost(loads[0], hardware="h100-sxm", placement={"kind": "expert_parallel", "devices": 4})
        self.assertEqual(one["modeled"], records[0]["modeled"]["moe"])
        ep = one["modeled"]["expert_parallel"]
        for key in ("erosion", "all_to_all", "plan"):
            self.assertIn(key, ep)
        # Balanced loads: no imbalance part.
        parts = got["layers"][1]["modeled"]["single"]["erosion"]["parts"]
        self.assertEqual(parts["imbalance_s"], 0)

    def test_cost_inputs(self):
        for bad in ([-1, 2], [[1, 2], [3]], np.zeros((2, 2, 2)), ["a"], [1.5, 2.0], [np.nan, 1]):
            with self.subTest(bad=str(bad)):
                with self.assertRaises(ValueError):
                    moesim.cost(bad)
        with self.assertRaises(ValueError):
            moesim.cost([10] * 8, tokens=2)  # more assignments than tokens x top_k
        with self.assertRaises(ValueError):
            moesim.cost([10] * 7, model={"experts": 8})
        with self.assertRaises(FileNotFoundError):
            moesim.cost([10] * 8, model="no/such/config.json")
        with self.assertRaises(ValueError):
            moesim.cost([10] * 8, hardware="no-such-gpu")


class Plan(unittest.TestCase):
    def test_plan_is_the_clis_file(self):
        loads = [[10, 2, 3, 1], [1, 1, 7, 7]]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "loads.json")
            with open(path, "w") as f:
                json.dump({"p": {"0": loads[0], "1": loads[1]}}, f)
            for fmt in ("vllm", "sglang", "trtllm"):
                want = cli("plan", path, "--devices", "2", "--replicas", "2", "--format", fmt)[1]
                got = moesim.plan(np.array(loads), devices=2, replicas=2, format=fmt)
                if fmt == "trtllm":  # its comment names the loads' file: the module's is a temporary one
                    got, want = got.splitlines()[1:], want.splitlines()[1:]
                self.assertEqual(got, want)
            # A path is planned as the CLI plans it.
            self.assertEqual(moesim.plan(path, devices=2, replicas=2, format="vllm"),
                             cli("plan", path, "--devices", "2", "--replicas", "2", "--format", "vllm")[1])
            out = os.path.join(tmp, "plan.json")
            self.assertIsNone(moesim.plan(path, devices=2, replicas=2, out=out))
            with open(out) as f:
                self.assertEqual(json.load(f)["layers"][0]["physical_to_logical"], [0, 0, 3, 0, 2, 1])
            # The model's decoder layers: SGLang wants a row for each, the trivial map where no loads were
            # recorded (DeepSeek-V3: 61 rows, 58 of them MoE). layers= is the CLI's --layers; a Hugging Face
            # config.json as model= sets it from num_hidden_layers.
            rows = moesim.plan(np.array(loads), devices=2, replicas=2, format="sglang", layers=5)
            self.assertEqual(rows, cli("plan", path, "--devices", "2", "--replicas", "2", "--format", "sglang",
                                       "--layers", "5")[1])
            self.assertEqual(len(json.loads(rows)["physical_to_logical_map"]), 5)
            hf = os.path.join(SOURCE, "tests", "data", "hf", "mixtral-8x7b", "config.json")
            eight = [[10, 2, 3, 1, 4, 4, 4, 4]]
            self.assertEqual(len(json.loads(moesim.plan(np.array(eight), devices=2, format="sglang", model=hf))
                                 ["physical_to_logical_map"]), 32)
            with self.assertRaises(ValueError):
                moesim.plan(np.array(loads), devices=2, layers=0)
        with self.assertRaises(ValueError):
            moesim.plan([10, 2, 3, 1], devices=3, replicas=0)  # 3 devices do not divide 4 slots
        with self.assertRaises(FileNotFoundError):
            moesim.plan("no/such/loads.json", devices=2)

    def test_config_is_the_runs_effective_experiment(self):
        self.assertEqual(moesim.config(), cli_json("run", "--no-execute")["experiment"]["config"])


class Readme(unittest.TestCase):
    def test_the_readme_python_example_runs(self):
        with open(os.path.join(SOURCE, "README.md")) as f:
            text = f.read()
        section = text.split("## From Python", 1)
        self.assertEqual(len(section), 2, "README has no 'From Python' section")
        blocks = re.findall(r"```python\n(.*?)```", section[1].split("\n## ", 1)[0], re.S)
        self.assertTrue(blocks)
        # The first block runs as written from the repository's root; the recorder's (it needs the user's model)
        # is held by test_torch_record.py.
        cwd = os.getcwd()
        os.chdir(SOURCE)
        try:
            exec(compile(blocks[0], "README.md", "exec"), {})
        finally:
            os.chdir(cwd)


if __name__ == "__main__":
    unittest.main()
