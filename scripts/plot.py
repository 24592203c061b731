#!/usr/bin/env python3
"""Turns `moesim sweep --format csv` (or `moesim validate --format csv`) output into PNG plots.

Sweep CSV -> three figures (one line per combination of the varied keys other than the batch):
  PREFIX-time.png        modeled time per batch, log-log, with the critical batch marked
                         (dense: B* tokens; MoE: B* x E / k tokens, where a balanced expert reaches B*)
  PREFIX-balanced.png    actual routing (solid) against perfectly balanced routing (dashed)
  PREFIX-efficiency.png  batching_efficiency (the balanced counterfactual's time over the routing's: what
                         imbalance costs; 1 is free), against the batch
  PREFIX-knee.png        time per token, actual (solid) against balanced (dashed), each curve's knee
                         marked (moesim's knee_tokens and balanced_knee_tokens columns)
  PREFIX-measured.png    measured layer time per batch, when the sweep ran with --measure
Validate CSV -> PREFIX-validate.png: predicted and measured expert time per batch, with the error.
`moesim validate --published --format csv` -> PREFIX-published.png: one panel per published table, the
                         measured kernel time and every modeled column (ideal, model, held_out) against the
                         batch, log-log, with each column's median |error| (balanced and uniform rows).

Curves with the same points are drawn once, their names joined in the legend; knees at one point are marked
once with every name; the batch axis is ticked at the sampled batches. tests/scripts/plot_test.py renders the
figures and checks the labels, the overprinting and the ticks.

Needs python3 and matplotlib (Debian: python3-matplotlib, installed by scripts/setup.sh).
Usage: python3 scripts/plot.py SWEEP.csv [--out DIR] [--prefix NAME] [--time quantized|ideal]
"""
import argparse
import csv
import math
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import matplotlib.transforms
except ImportError:
    sys.exit("plot.py: matplotlib is missing; install python3-matplotlib (scripts/setup.sh) and run it "
             "with the system python3 (/usr/bin/python3)")

BATCH_KEYS = ("workload.batch",)
# The first fixed column of a sweep CSV: the varied keys come before it.
FIRST_FIXED = "gating"


def read_csv(path):
    with open(path, newline="") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            sys.exit(f"plot.py: {path}: empty file")
        rows = [dict(zip(header, r)) for r in reader if r]
    if not rows:
        sys.exit(f"plot.py: {path}: no rows")
    return header, rows


def num(row, key):
    v = row.get(key, "")
    return float(v) if v not in ("", None) else math.nan


def groups_of(header, rows):
    """Rows grouped by the varied keys other than the batch, in first-seen order."""
    keys = header[: header.index(FIRST_FIXED)] if FIRST_FIXED in header else []
    group_keys = [k for k in keys if k not in BATCH_KEYS]
    groups = {}
    for r in rows:
        label = ", ".join(f"{k.split('.')[-1] if ',' not in k else 'width'}={r[k]}" for k in group_keys)
        groups.setdefault(label, []).append(r)
    for g in groups.values():
        g.sort(key=lambda r: num(r, "num_tokens"))
    return groups


def knee_tokens(row):
    """Tokens at which a balanced expert holds the critical batch: B* x E / k (B* for a dense layer)."""
    return num(row, "critical_batch") * num(row, "experts") / num(row, "top_k")


def mark_critical(ax, groups, colors):
    seen = set()
    for (label, g), color in zip(groups.items(), colors):
        x = knee_tokens(g[0])
        if not math.isfinite(x) or round(x, 3) in seen:
            continue
        seen.add(round(x, 3))
        dense = num(g[0], "experts") == 1
        text = f"critical batch {x:.0f}" if dense else f"B* x E/k = {x:.0f} tokens"
        # Named in the legend, not written over the curves.
        ax.axvline(x, color=color if len(groups) > 1 else "0.3", linestyle=":", linewidth=1.2, label=text)


def title_of(rows, args, what):
    r = rows[0]
    head = args.title or os.path.splitext(os.path.basename(args.csv))[0]
    layers = r.get("moe_layers", r.get("layers", "1"))  # modeled times cover the MoE layers
    def shared(key, text):
        return text if len({row.get(key) for row in rows}) == 1 else f"{key} varies"

    where = shared("profile", r.get("profile", "")) + ", " + shared("placement", r.get("placement", ""))
    if r.get("placement") == "expert_parallel" and len({row.get("devices") for row in rows}) == 1:
        where += f" x{r.get('devices', '')}"
    return f"{head}: {what}\n({where}; {layers} MoE layer{'s' if layers != '1' else ''})"


def integer_ticks(ax):
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))


def batch_ticks(ax, xs, most=9):
    """Ticks at sampled batches only (every n-th of them, at most `most`), never between the points."""
    xs = sorted({x for x in xs if math.isfinite(x) and x > 0})
    if not xs:
        return
    step = max(1, math.ceil(len(xs) / most))
    ticks = xs[::step]
    ax.set_xticks(ticks)
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xticklabels([f"{v:g}" for v in ticks])


def setup_axes(ax, ylabel, logy=True, xs=()):
    ax.set_xscale("log", base=2)
    integer_ticks(ax)
    batch_ticks(ax, xs)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("batch (tokens)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)


def same_curve(a, b):
    (xa, ya), (xb, yb) = a, b
    return len(xa) == len(xb) and all(p == q for p, q in zip(xa, xb)) and all(
        abs(p - q) <= 1e-9 * max(abs(p), abs(q), 1e-30) or (math.isnan(p) and math.isnan(q)) for p, q in zip(ya, yb))


def draw_curves(ax, curves):
    """Draws each curve (dict: x, y, label, and plot keywords) unless one with the same points is drawn already;
    then its label joins that one's in the legend ("balanced = expert_choice"), so no curve hides another."""
    drawn = []  # ((x, y), label, line)
    for c in curves:
        xy = (list(c["x"]), list(c["y"]))
        twin = next((d for d in drawn if same_curve(d[0], xy)), None)
        if twin is not None:
            if c["label"] and c["label"] not in twin[1]:
                twin[1].append(c["label"])
                twin[2].set_label(" = ".join(twin[1]))
            continue
        kw = {k: v for k, v in c.items() if k not in ("x", "y", "label")}
        # Curves that nearly coincide still show each: every solid curve a size thinner than the one before,
        # with its own marker, so that the one under it shows at its edges.
        style = kw.get("linestyle", "-")
        n = sum(1 for d in drawn if d[2].get_linestyle() == style)
        if style == "-" and "marker" in kw:
            kw["linewidth"] = max(1.0, 2.8 - 0.6 * n)
            kw["marker"] = "osD^v<>p"[n % 8]
            kw["markersize"] = max(3.0, 6.5 - 1.2 * n)
        elif style != "-":
            kw["linewidth"] = max(0.8, 2.2 - 0.5 * n)
        (line,) = ax.plot(xy[0], xy[1], label=c["label"], **kw)
        drawn.append((xy, [c["label"]], line))
    return drawn


def name_of(label, g):
    """A group's name for legends and knees: the varied values without their keys where one key varies."""
    if not label:
        return g[0].get("gating") or "actual routing"
    parts = label.split(", ")
    return ", ".join(p.split("=", 1)[1] if len(parts) == 1 and "=" in p else p for p in parts)


def finish(fig, ax, path):
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig


def all_batches(rows):
    return [num(r, "num_tokens") for r in rows]


def plot_time(header, rows, groups, args, path):
    fig, ax = plt.subplots(figsize=(7.5, 5))
    colors = [f"C{i % 10}" for i in range(len(groups))]
    col = f"time_{args.time}_s"
    curves = []
    for (label, g), color in zip(groups.items(), colors):
        x = [num(r, "num_tokens") for r in g]
        name = name_of(label, g) if label else ""
        curves.append(dict(x=x, y=[num(r, col) * 1e3 for r in g], marker="o", markersize=3, color=color,
                           label=(name + " " if name else "") + args.time))
        # The other columns, where they differ from the plotted one: grey for one group, else the group's
        # colour (the ideal column only, to keep the plot readable).
        others = (("ideal", "--"), ("quantized", "-.")) if len(groups) == 1 else (("ideal", "--"),)
        for other, style in others:
            if other == args.time:
                continue
            y = [num(r, f"time_{other}_s") * 1e3 for r in g]
            if any(abs(a - b) > 1e-12 * max(abs(b), 1e-30) for a, b in zip(y, [num(r, col) * 1e3 for r in g])):
                curves.append(dict(x=x, y=y, linestyle=style, color="0.45" if len(groups) == 1 else color, linewidth=1,
                                   label=(name + " " if name else "") + other))
    draw_curves(ax, curves)
    mark_critical(ax, groups, colors)
    setup_axes(ax, "modeled time per batch (ms)", xs=all_batches(rows))
    ax.set_title(title_of(rows, args, "time per batch"), fontsize=10)
    return finish(fig, ax, path)


def plot_balanced(header, rows, groups, args, path):
    fig, ax = plt.subplots(figsize=(7.5, 5))
    colors = [f"C{i % 10}" for i in range(len(groups))]
    curves, balanced = [], {}  # counterfactual curve -> the groups that share it (groups differing only in gating)
    for (label, g), color in zip(groups.items(), colors):
        x = [num(r, "num_tokens") for r in g]
        curves.append(dict(x=x, y=[num(r, f"time_{args.time}_s") * 1e3 for r in g], marker="o", markersize=3,
                           color=color, label=name_of(label, g) if label else "actual routing"))
        key = (tuple(x), tuple(num(r, f"balanced_{args.time}_s") * 1e3 for r in g))
        balanced.setdefault(key, []).append((name_of(label, g), color))
    for (x, yb), owners in balanced.items():
        shared = len(owners) > 1 or len(groups) == 1
        curves.append(dict(x=list(x), y=list(yb), linestyle="--", linewidth=1.6,
                           color="black" if shared else owners[0][1],
                           label="balanced counterfactual" + ("" if shared else f" ({owners[0][0]})")))
    draw_curves(ax, curves)
    mark_critical(ax, groups, colors)
    setup_axes(ax, f"modeled time per batch, {args.time} (ms)", xs=all_batches(rows))
    ax.set_title(title_of(rows, args, "actual routing (solid) vs perfectly balanced (dashed)"), fontsize=10)
    return finish(fig, ax, path)


def plot_efficiency(header, rows, groups, args, path):
    fig, ax = plt.subplots(figsize=(7.5, 5))
    colors = [f"C{i % 10}" for i in range(len(groups))]
    curves = []
    for (label, g), color in zip(groups.items(), colors):
        x = [num(r, "num_tokens") for r in g]
        curves.append(dict(x=x, y=[num(r, "batching_efficiency") for r in g], marker="o", markersize=3, color=color,
                           label=name_of(label, g) if label else "batching efficiency"))
    draw_curves(ax, curves)
    ax.axhline(1.0, color="0.3", linewidth=0.8)
    mark_critical(ax, groups, colors)
    # batching_efficiency (moesim's column): the balanced counterfactual's time over the routing's own.
    setup_axes(ax, "batching efficiency: balanced time / routing's time\n(1: imbalance costs nothing)", logy=False,
               xs=all_batches(rows))
    ax.set_ylim(bottom=0)
    ax.set_title(title_of(rows, args, "batching efficiency"), fontsize=10)
    return finish(fig, ax, path)


def drawn_path(ax, line, step=4.0):
    """A line's points in display coordinates, and points every `step` pixels along its segments."""
    pts = [(px, py) for px, py in ax.transData.transform(list(zip(line.get_xdata(), line.get_ydata())))
           if math.isfinite(px) and math.isfinite(py)]
    out = list(pts)
    if line.get_linestyle() in ("None", "", " "):
        return out
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        n = int(math.hypot(x1 - x0, y1 - y0) / step)
        out += [(x0 + (x1 - x0) * i / (n + 1), y0 + (y1 - y0) * i / (n + 1)) for i in range(1, n + 1)]
    return out


def place_labels(fig, ax, notes):
    """Writes each (x, y, text) beside its point where it overprints no label written before and stays inside
    the axes: the first free offset of a few around the point."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axes_box = ax.get_window_extent(renderer)
    legend = ax.get_legend()
    placed = [legend.get_window_extent(renderer)] if legend is not None else []
    # Every plotted point, and points along each line between them, as small boxes a label may not cover.
    points = []
    for line in ax.get_lines():
        for px, py in drawn_path(ax, line):
            points.append(matplotlib.transforms.Bbox([[px - 3, py - 3], [px + 3, py + 3]]))
    for x, y, text in notes:
        for dx, dy in [(sx * ax_, sy * ay_) for ay_ in (8, 24, 40, 56) for ax_ in (8, 24) for sy in (1, -1)
                       for sx in (1, -1)]:
            dy = dy if dy > 0 else dy - 12  # below the point: the text's own height too
            t = ax.annotate(text, xy=(x, y), xytext=(dx, dy), textcoords="offset points", fontsize=8,
                            ha="left" if dx > 0 else "right")
            box = t.get_window_extent(renderer)
            inside = axes_box.x0 <= box.x0 and box.x1 <= axes_box.x1 and axes_box.y0 <= box.y0 and box.y1 <= axes_box.y1
            if inside and not any(box.overlaps(p) for p in placed) and not any(box.overlaps(p) for p in points):
                placed.append(box)
                break
            t.remove()
        else:
            placed.append(ax.annotate(text, xy=(x, y), xytext=(8, 8), textcoords="offset points",
                                      fontsize=8).get_window_extent(renderer))


def plot_knee(header, rows, groups, args, path):
    fig, ax = plt.subplots(figsize=(7.5, 5))
    colors = [f"C{i % 10}" for i in range(len(groups))]
    curves = []
    knees = {}  # (x, y) -> {"knee": [names], "balanced knee": [names]}, each point marked once
    for (label, g), color in zip(groups.items(), colors):
        x = [num(r, "num_tokens") for r in g]
        tpt = [num(r, f"time_{args.time}_s") / n * 1e6 for r, n in zip(g, x)]
        btpt = [num(r, f"balanced_{args.time}_s") / n * 1e6 for r, n in zip(g, x)]
        name = name_of(label, g)
        curves.append(dict(x=x, y=tpt, marker="o", markersize=3, color=color, label=name))
        curves.append(dict(x=x, y=btpt, linestyle="--", color="black", linewidth=1.4,
                           label="balanced" + ("" if len(groups) == 1 else " counterfactual")))
        # The knees moesim found (quantized column): a filled marker on the routing's curve, an open square on
        # the balanced curve.
        for col, curve, kind in (("knee_tokens", tpt, "knee"), ("balanced_knee_tokens", btpt, "balanced knee")):
            k = num(g[0], col)
            if math.isfinite(k) and k in x:
                y = curve[x.index(k)]
                at = next((p for p in knees if p[0] == k and abs(p[1] - y) <= 1e-9 * max(abs(y), 1e-30)), (k, y))
                knees.setdefault(at, {}).setdefault(kind, []).append((name, color))
    draw_curves(ax, curves)
    notes = []
    for (k, y), kinds in knees.items():
        if "knee" in kinds:
            ax.plot([k], [y], marker="o", markersize=11, linestyle="none", markerfacecolor=kinds["knee"][0][1],
                    markeredgecolor=kinds["knee"][0][1], markeredgewidth=1.6, zorder=5)
        if "balanced knee" in kinds:
            ax.plot([k], [y], marker="s", markersize=13 if "knee" in kinds else 11, linestyle="none",
                    markerfacecolor="none", markeredgecolor="black", markeredgewidth=1.6, zorder=6)
        parts = []
        for kind in ("knee", "balanced knee"):
            names = [n for n, _ in kinds.get(kind, [])]
            if not names:
                continue
            who = "" if len(groups) == 1 else " (all)" if len(names) == len(groups) else f" ({', '.join(names)})"
            parts.append(f"{kind} {k:.0f}{who}")
        notes.append((k, y, "\n".join(parts)))
    setup_axes(ax, f"modeled time per token, {args.time} (us)", xs=all_batches(rows))
    ax.set_title(title_of(rows, args, "time per token: routing (solid) vs balanced (dashed), knees marked"), fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    place_labels(fig, ax, notes)
    fig.savefig(path, dpi=120)
    return fig


def plot_measured(header, rows, groups, args, path):
    fig, ax = plt.subplots(figsize=(7.5, 5))
    curves = []
    for i, (label, g) in enumerate(groups.items()):
        pts = [(num(r, "num_tokens"), num(r, "measured_layer_s") * 1e3) for r in g if r.get("measured_layer_s")]
        if pts:
            xs, ys = zip(*pts)
            curves.append(dict(x=list(xs), y=list(ys), marker="o", markersize=3, color=f"C{i % 10}",
                               label=name_of(label, g) if label else "measured layer"))
    draw_curves(ax, curves)
    setup_axes(ax, "measured layer time, executed size (ms)", xs=all_batches(rows))
    ax.set_title(title_of(rows, args, "measured on this CPU"), fontsize=10)
    return finish(fig, ax, path)


def plot_validate(rows, args, path):
    rows.sort(key=lambda r: num(r, "num_tokens"))
    x = [num(r, "num_tokens") for r in rows]
    err = [num(r, "error") for r in rows]
    fig, (ax, ax_err) = plt.subplots(2, 1, figsize=(7.5, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.plot(x, [num(r, "measured_s") * 1e3 for r in rows], marker="o", label="measured (median)")
    ax.plot(x, [num(r, "predicted_s") * 1e3 for r in rows], marker="s", linestyle="--", label="predicted (kernel model)")
    setup_axes(ax, "expert GEMM time (ms)")
    ax.set_xlabel("")
    ax.legend(fontsize=8)
    abs_err = sorted(abs(e) for e in err)
    mid = len(abs_err) // 2
    mdape = abs_err[mid] if len(abs_err) % 2 else 0.5 * (abs_err[mid - 1] + abs_err[mid])
    head = args.title or os.path.splitext(os.path.basename(args.csv))[0]
    ax.set_title(f"{head}: predicted vs measured expert time\nmedian absolute error {mdape * 100:.1f}%", fontsize=10)
    ax_err.bar(x, [e * 100 for e in err], width=[v * 0.5 for v in x], color=["C3" if e > 0 else "C0" for e in err])
    ax_err.axhline(0, color="0.3", linewidth=0.8)
    ax_err.set_xscale("log", base=2)
    integer_ticks(ax_err)
    ax_err.set_ylabel("error (%)")
    ax_err.set_xlabel("batch (tokens)")
    ax_err.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_published(rows, args, path):
    # The balanced and uniform rows as curves; a table's power-law rows (what skew costs) sit at the same
    # batches and are left to validate's skew-pair report.
    tables = {}
    for r in rows:
        if r.get("routing", "") == "power_law":
            continue
        tables.setdefault(r["table"], []).append(r)
    cols = ("ideal", "model", "held_out")
    n = len(tables)
    ncols = 3 if n > 4 else max(1, n)
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.6 * nrows), squeeze=False)
    for i, (name, trs) in enumerate(tables.items()):
        ax = axes[i // ncols][i % ncols]
        trs.sort(key=lambda r: num(r, "batch"))
        x = [num(r, "batch") for r in trs]
        ax.plot(x, [num(r, "measured_s") * 1e6 for r in trs], marker="o", color="black", label="measured")
        notes = []
        for j, c in enumerate(cols):
            y = [num(r, f"{c}_s") * 1e6 for r in trs]
            if all(math.isnan(v) for v in y):
                continue
            ax.plot(x, y, marker=".", linestyle="--", color=f"C{j}", label=c)
            errs = sorted(abs(num(r, f"{c}_error")) for r in trs)
            mid = len(errs) // 2
            med = errs[mid] if len(errs) % 2 else 0.5 * (errs[mid - 1] + errs[mid])
            notes.append(f"{c} {med * 100:.0f}%")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(f"{name}\n{trs[0]['gpu']} {trs[0]['dtype']}, E {trs[0]['experts']}, N {trs[0]['n']}, "
                     f"K {trs[0]['k']}, top-{trs[0]['top_k']}", fontsize=8)
        ax.set_xlabel("batch (tokens)", fontsize=8)
        ax.set_ylabel("kernel time (us)", fontsize=8)
        ax.text(0.02, 0.98, "median |error|: " + ", ".join(notes), transform=ax.transAxes, fontsize=6.5,
                va="top")
        if i == 0:
            ax.legend(fontsize=7, loc="lower right")
    for i in range(n, nrows * ncols):
        axes[i // ncols][i % ncols].axis("off")
    fig.suptitle(args.title or "published fused-MoE kernel times against the cost model", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", help="output of moesim sweep --format csv (or validate [--published] --format csv)")
    p.add_argument("--out", default=".", help="folder for the PNGs (default: .)")
    p.add_argument("--prefix", help="file name prefix (default: the CSV's name)")
    p.add_argument("--time", default="quantized", choices=("ideal", "quantized"),
                   help="modeled time column to plot (default: quantized)")
    p.add_argument("--title", help="plot title (default: the CSV's name)")
    args = p.parse_args(argv)
    header, rows = read_csv(args.csv)
    prefix = args.prefix or os.path.splitext(os.path.basename(args.csv))[0]
    os.makedirs(args.out, exist_ok=True)
    written = []
    if "held_out_s" in header and "table" in header:
        path = os.path.join(args.out, f"{prefix}-published.png")
        plot_published(rows, args, path)
        written.append(path)
    elif "predicted_s" in header and "measured_s" in header:
        path = os.path.join(args.out, f"{prefix}-validate.png")
        plot_validate(rows, args, path)
        written.append(path)
    else:
        for needed in ("num_tokens", f"time_{args.time}_s", "batching_efficiency", "critical_batch"):
            if needed not in header:
                sys.exit(f"plot.py: {args.csv}: expected a moesim sweep CSV with a '{needed}' column")
        groups = groups_of(header, rows)
        figures = [("time", plot_time), ("balanced", plot_balanced), ("efficiency", plot_efficiency)]
        if "knee_tokens" in header:
            figures.append(("knee", plot_knee))
        for name, fn in figures:
            path = os.path.join(args.out, f"{prefix}-{name}.png")
            plt.close(fn(header, rows, groups, args, path))
            written.append(path)
        if "measured_layer_s" in header:
            path = os.path.join(args.out, f"{prefix}-measured.png")
            plt.close(plot_measured(header, rows, groups, args, path))
            written.append(path)
    for w in written:
        print(w)


if __name__ == "__main__":
    main()
