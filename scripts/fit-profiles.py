#!/usr/bin/env python3
"""Ships the kernel model's fitted figures (docs/cost-model.md "Fitted profiles"), from one command:

  scripts/fit-profiles.sh            (builds moesim, runs this, rebuilds, runs it again for the doc)
  scripts/fit-profiles.py MOESIM     (one pass with a built binary)

Reads `MOESIM validate --published all --format json`, which fits the four figures (efficiency_bw,
efficiency_flops, launch_overhead_us, k_step_us) as moesim ships them: the pooled fit over every table,
and each GPU's fit to its own tables near the pooled fit. Then:
  - writes each GPU's fit into configs/hardware/GPU.yaml (calibrated: true, source notes naming the tables);
  - removes the four figures from the profiles of GPUs with no table (they take the pooled fit, and say so);
  - writes the pooled fit into src/cost/hardware_profile.hpp (PooledFit), and the weight-only shares
    (WeightOnlyFit);
  - writes the table of figures and errors between the markers of docs/cost-model.md.
Profiles named in KEEP are left as they are (the measured CPU, the founding text's idealised T4).
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURES = ["efficiency_bw", "efficiency_flops", "launch_overhead_us", "k_step_us"]
KEEP = {"cpu-local", "t4-founding"}
BEGIN, END = "<!-- fitted-profiles: begin -->", "<!-- fitted-profiles: end -->"


def num(v):
    return "%.4g" % v


def figures_of(fit):
    return {"efficiency_bw": fit["efficiency_bw"], "efficiency_flops": fit["efficiency_flops"],
            "launch_overhead_us": fit["launch_overhead_s"] * 1e6, "k_step_us": fit["k_step_s"] * 1e6}


def rewrite_profile(path, figures, note):
    """Drops the figures (and calibrated) with their source notes; with `figures`, writes them back."""
    lines = open(path).read().split("\n")
    out, in_sources = [], False
    for line in lines:
        if line.startswith("sources:"):
            in_sources = True
        elif line and not line.startswith(" "):
            in_sources = False
        key = line.strip().split(":")[0]
        if key in FIGURES + ["calibrated"] and (in_sources == line.startswith("  ")):
            continue
        out.append(line)
    at = out.index("sources:") if "sources:" in out else len(out)
    if figures:
        top = ["%s: %s" % (k, num(figures[k])) for k in FIGURES] + ["calibrated: true"]
        notes = ["  %s: \"%s\"" % (k, note) for k in FIGURES] + ["  calibrated: \"%s\"" % note]
        if at == len(out):
            out += top + ["sources:"] + notes
        else:
            out = out[:at] + top + ["sources:"] + notes + out[at + 1:]
    open(path, "w").write("\n".join(out))


def main():
    moesim = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "moesim")
    doc_only = len(sys.argv) > 2 and sys.argv[2] == "--doc-only"
    v = json.loads(subprocess.run([moesim, "validate", "--published", "all", "--format", "json"], check=True,
                                  capture_output=True, text=True).stdout)
    pooled = figures_of(v["pooled_fit"])
    hw_dir = os.path.join(ROOT, "configs", "hardware")
    if not doc_only:
        for f in sorted(os.listdir(hw_dir)):
            name = f[:-5]
            if not f.endswith(".yaml") or name in KEEP:
                continue
            gpu = v["gpus"].get(name)
            note = ""
            if gpu:
                note = ("scripts/fit-profiles.sh: fitted to %s "
                        "(%d points) near the pooled fit of every published table" %
                        (", ".join(gpu["fitted_tables"]), gpu["fit"]["points"]))
            rewrite_profile(os.path.join(hw_dir, f), figures_of(gpu["fit"]) if gpu else None, note)
        header = os.path.join(ROOT, "src", "cost", "hardware_profile.hpp")
        text = open(header).read()
        for k in FIGURES:
            text = re.sub(r"(static constexpr double %s = )[^;]*;" % k, r"\g<1>%s;" % num(pooled[k]), text)
        for k in ["bw_share", "flops_share", "reread_share", "k_step_share"]:
            text = re.sub(r"(static constexpr double %s = )[^;]*;" % k, r"\g<1>%s;" % num(v["weight_only_fit"][k]),
                          text)
        decode = [r for r in v["regimes"] if r["regime"].startswith("decode, ep >= 8")][0]["held_out"]
        text = re.sub(r"(static constexpr double decode_median_abs = )[^;]*;",
                      r"\g<1>%.6g;" % decode["median_abs_error"], text)
        # Six digits: the answer line rounds them to the tenth of a percent validate prints.
        text = re.sub(r"(static constexpr double decode_mean = )[^;]*;", r"\g<1>%.6g;" % decode["mean_error"], text)
        text = re.sub(r"(static constexpr int decode_points = )[^;]*;", r"\g<1>%d;" % decode["points"], text)
        open(header, "w").write(text)
    rows = ["| profile | efficiency_bw | efficiency_flops | launch_us | k_step_us | fitted on | points | model median / worst | held-out median / worst |",
            "|---|---:|---:|---:|---:|---|---:|---:|---:|"]

    def cell(e):
        return "%.1f %% / %+.0f %%" % (e["median_abs_error"] * 100, e["worst_error"] * 100) if e else "-"
    for name, gpu in sorted(v["gpus"].items()):
        fg = figures_of(gpu["fit"])
        rows.append("| %s | %s | %s | %s | %s | %s | %d | %s | %s |" % (
            name, num(fg["efficiency_bw"]), num(fg["efficiency_flops"]), num(fg["launch_overhead_us"]),
            num(fg["k_step_us"]), ", ".join(gpu["fitted_tables"]), gpu["errors"]["model"]["points"],
            cell(gpu["errors"].get("model")), cell(gpu["errors"].get("held_out"))))
    rows.append("| pooled (every other profile) | %s | %s | %s | %s | every table | %d | | |" % (
        num(pooled["efficiency_bw"]), num(pooled["efficiency_flops"]), num(pooled["launch_overhead_us"]),
        num(pooled["k_step_us"]), v["pooled_fit"]["points"]))
    wo = v["weight_only_fit"]
    rows.append("| weight-only 4-bit kernels (int4, mxfp4) | x %s | x %s | | x %s | the int4 balanced rows (a row block's weight stream: x %s of a memory read) | %d | | |" % (
        num(wo["bw_share"]), num(wo["flops_share"]), num(wo["k_step_share"]), num(wo["reread_share"]), wo["points"]))
    rows.append("| **overall** | | | | | | %d | %s | %s |" % (
        v["overall"]["model"]["points"], cell(v["overall"].get("model")), cell(v["overall"].get("held_out"))))
    rows.append("")
    rows.append("Per table (median / worst):")
    rows.append("")
    rows.append("| table | gpu | points | model | held-out |")
    rows.append("|---|---|---:|---:|---:|")
    for t in v["tables"]:
        rows.append("| %s | %s | %d | %s | %s |" % (t["name"], t["gpu"], t["errors"]["model"]["points"],
                                                   cell(t["errors"].get("model")), cell(t["errors"].get("held_out"))))
    doc = os.path.join(ROOT, "docs", "cost-model.md")
    text = open(doc).read()
    block = BEGIN + "\n" + "\n".join(rows) + "\n" + END
    if BEGIN in text:
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda m: block, text, flags=re.S)
    else:
        text += "\n" + block + "\n"
    open(doc, "w").write(text)
    print("pooled fit: " + ", ".join("%s %s" % (k, num(pooled[k])) for k in FIGURES))
    print("overall: model %s, held-out %s" % (cell(v["overall"]["model"]), cell(v["overall"]["held_out"])))


if __name__ == "__main__":
    main()
