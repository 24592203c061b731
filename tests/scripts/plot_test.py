#!/usr/bin/env python3
"""scripts/plot.py checked by rendering (ctest scripts.plot): the README's sweeps (three gatings of Mixtral-8x7B
on 8 H100s, the seed MLP on a T4) drawn through plot.py's own functions, then the drawn figures measured:
  - the efficiency axis is labelled with batching_efficiency's meaning (the balanced counterfactual's time over
    the routing's), not roofline_efficiency's formula;
  - no curve hides another: no two drawn lines have the same points (plot.py draws such curves once, both
    names in the legend);
  - every knee point is labelled once, and no label overprints another label, the legend or a curve;
  - the batch axis is ticked at sampled batches only.
Needs matplotlib (python3-matplotlib) and the moesim binary (MOESIM_BINARY); without matplotlib it exits 77
(skipped), saying why."""
import importlib.util
import math
import os
import subprocess
import sys
import tempfile

try:
    import matplotlib

    matplotlib.use("Agg")
except ImportError:
    print("skipped: matplotlib is not importable by " + sys.executable + " (apt-get install python3-matplotlib)")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("MOESIM_BINARY") or os.path.join(ROOT, "build", "moesim")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


spec = importlib.util.spec_from_file_location("plot", os.path.join(ROOT, "scripts", "plot.py"))
plot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot)


class Args:
    time = "quantized"
    title = None
    csv = "sweep.csv"


def sweep(tmp, name, *args):
    path = os.path.join(tmp, name + ".csv")
    subprocess.run([BINARY, "sweep", *args, "--format", "csv", "--out", path], check=True, cwd=ROOT)
    return path


def measure(fig, name, sampled):
    """The checks on one drawn figure."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        lines = [l for l in ax.get_lines() if len(l.get_xdata()) > 1]
        for i in range(len(lines)):
            for j in range(i + 1, len(lines)):
                a, b = lines[i], lines[j]
                same = plot.same_curve((list(a.get_xdata()), list(a.get_ydata())), (list(b.get_xdata()), list(b.get_ydata())))
                check(not same, f"{name}: '{a.get_label()}' and '{b.get_label()}' are drawn over each other")
        texts = [t for t in ax.texts if t.get_text().strip()]
        boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                check(not boxes[i][1].overlaps(boxes[j][1]), f"{name}: '{boxes[i][0]}' overprints '{boxes[j][0]}'")
        names = [t for t, _ in boxes]
        check(len(names) == len(set(names)), f"{name}: a label is written twice: {names}")
        # One label a point: two labels anchored at one point would be written over each other.
        anchors = [tuple(round(v, 9) for v in t.xy) for t in texts if hasattr(t, "xy")]
        check(len(anchors) == len(set(anchors)), f"{name}: two labels at one point: {names}")
        legend = ax.get_legend()
        points = []  # every plotted point, and points along the drawn lines
        for line in lines:
            points += plot.drawn_path(ax, line)
        for text, box in boxes:
            if legend is not None:
                check(not box.overlaps(legend.get_window_extent(renderer)), f"{name}: '{text}' overprints the legend")
            for px, py in points:
                check(not box.contains(px, py), f"{name}: '{text}' overprints a curve at ({px:.0f}, {py:.0f})")
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        check(ticks and all(any(abs(t - s) <= 1e-9 * s for s in sampled) for t in ticks),
              f"{name}: x ticks {ticks} are not all sampled batches {sorted(sampled)}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        three = sweep(tmp, "three", "configs/experiments/mixtral-8x7b-batch.yaml", "--vary", "workload.batch=1..16384*4",
                      "--vary", "router.gating=balanced,token_choice,expert_choice")
        seed = sweep(tmp, "seed", "configs/experiments/seed-t4-mlp.yaml", "--vary", "workload.batch=1..1024*2")
        for path in (three, seed):
            header, rows = plot.read_csv(path)
            groups = plot.groups_of(header, rows)
            sampled = {plot.num(r, "num_tokens") for r in rows}
            args = Args()
            args.csv = path
            for fn in (plot.plot_time, plot.plot_balanced, plot.plot_efficiency, plot.plot_knee):
                out = os.path.join(tmp, f"{os.path.basename(path)}-{fn.__name__}.png")
                fig = fn(header, rows, groups, args, out)
                measure(fig, f"{os.path.basename(path)} {fn.__name__}", sampled)
                if fn is plot.plot_efficiency:
                    label = fig.axes[0].get_ylabel()
                    check("balanced time / routing's time" in label, f"efficiency axis label: {label!r}")
                    check("reference + imbalance" not in label, f"efficiency axis label: {label!r}")
                plot.plt.close(fig)
        # The three gatings: the balanced gating's curve and the balanced counterfactual are one curve, named
        # both ways in the legend, and expert_choice's knee sits where the balanced one does: one label there.
        header, rows = plot.read_csv(three)
        fig = plot.plot_knee(header, rows, plot.groups_of(header, rows), Args(), os.path.join(tmp, "k.png"))
        labels = [l.get_label() for l in fig.axes[0].get_lines()]
        check(any("balanced" in l and "counterfactual" in l and " = " in l for l in labels),
              f"knee legend: the balanced curve and the counterfactual are not named as one: {labels}")
        texts = [t.get_text() for t in fig.axes[0].texts]
        check(any("knee 1024 (balanced, expert_choice)" in t for t in texts), f"knee labels: {texts}")
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("plot.py: every check passed")


if __name__ == "__main__":
    main()
