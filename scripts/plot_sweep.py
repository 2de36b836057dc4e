#!/usr/bin/env python3
"""How TTFT grows with context and cp: the points of one or more sweep files
(`prefill-bench sweep`, docs/sweep.md), on one page of four panels.

    scripts/plot_sweep.py sweep.h5 [more.h5 ...] [--variants baseline,all] [-o sweep.png]

  TTFT against context (log-log), a line per cp, precision, variant and
  status: measured points filled, planned ones hollow on a thinner line (the
  calibrated plan where the plan was calibrated, its roofline dotted beside
  it), so a calibrated plan of the measured points (a second file) draws
  beside them; the seed's fleet points (GB300, MXFP4 experts, CP8) as stars:
  another GPU and precision. The other panels read a measured point where a
  file also plans it.
  The FMHA's share of the deepest rank against context, beside the weight
  GEMMs' (gemm + moe_gemm), with the context where FMHA overtakes them marked.
  MFU against context (model FLOPs / (TTFT x GPUs x the datasheet's dense
  bf16 peak), as `run` and `plan` record it: harness/analysis/efficiency.h).
  Parallel efficiency against cp at each context, as `sweep` stored it:
  T(c0) x c0 / (T(cp) x cp), c0 the smallest cp swept at that context
  (harness/results/sweep_file.h); in a sweep where no context has two cp (a
  sweep over `segment`), at a fixed number of tokens a rank instead:
  MFU(cp) / MFU(c0), since the work grows with cp.

Failed points are listed on stderr and left out.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pbplot  # noqa: E402

pbplot.require_plotting_python()

import pbresults as pr  # noqa: E402

# The seed's fleet TTFTs (../shared/seed/pr-1026-five-cuts.txt): GB300, CP8,
# MXFP4/NVFP4 experts, baseline -> the five cuts, ms.
SEED_POINTS = [(16384, 1150, 946), (65536, 2810, 2231), (131072, 6387, 5021)]
WEIGHT_GEMMS = ("gemm", "moe_gemm")
LINE_COLOURS = ["#1F77B4", "#FF7F0E", "#2CA02C", "#9467BD", "#8C564B", "#E377C2", "#17BECF", "#7F7F7F"]


def series(rows, key):
    """{key tuple: rows sorted by context}."""
    out = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in key), []).append(r)
    return {k: sorted(v, key=lambda r: r["context"]) for k, v in out.items()}


def context_label(tokens):
    return "{}M".format(tokens // 1048576) if tokens >= 1048576 else "{}k".format(tokens // 1024)


def style(variant):
    return "-" if variant != "baseline" else "--"


def measured_first(rows):
    """The rows less the planned ones of a (cp, precision, variant, context) also measured."""
    def key(r):
        return r["cp"], r["precision"], r["variant"], r["context"]

    measured = {key(r) for r in rows if r["status"] == "measured"}
    return [r for r in rows if r["status"] == "measured" or key(r) not in measured]


def draw_ttft(ax, rows, colours):
    both = len({r["status"] for r in rows}) > 1
    for (cp, precision, variant, status), pts in sorted(series(rows, ("cp", "precision", "variant", "status")).items()):
        colour = colours[(cp, precision)]
        xs, ys = [r["context"] for r in pts], [r["ttft_ms"] / 1e3 for r in pts]
        planned_beside = both and status == "planned"
        ax.plot(xs, ys, style(variant), color=colour, lw=0.8 if planned_beside else 1.4,
                alpha=0.7 if planned_beside else 1.0,
                label="cp {} {} {}{}".format(cp, precision, variant, " " + status if both else ""))
        for r in pts:
            ax.plot(r["context"], r["ttft_ms"] / 1e3, "o", ms=5, color=colour,
                    mfc=colour if r["status"] == "measured" else "white")
        roof = [(r["context"], r["roofline_ms"] / 1e3) for r in pts if r["roofline_ms"] and r["roofline_ms"] != r["ttft_ms"]]
        if roof and variant != "baseline":
            ax.plot(*zip(*roof), ":", color=colour, lw=0.9)
    for tokens, base, cuts in SEED_POINTS:
        ax.plot(tokens, base / 1e3, "*", color="#B2182B", ms=9, mfc="white")
        ax.plot(tokens, cuts / 1e3, "*", color="#B2182B", ms=9)
    ax.plot([], [], "o", color="grey", label="measured (projected gang)")
    ax.plot([], [], "o", color="grey", mfc="white", label="planned (calibrated where it was)")
    ax.plot([], [], ":", color="grey", label="the plan's roofline")
    ax.plot([], [], "*", color="#B2182B", ms=9, label="seed: GB300 MXFP4, CP8, base / five cuts")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context, tokens")
    ax.set_ylabel("TTFT, s (93 layers)")
    ax.set_title("TTFT against context (solid: the later variant, dashed: baseline)", fontsize=9)
    ax.legend(fontsize=6.5, ncol=2, loc="upper left")


def draw_shares(ax, rows, colours):
    marks = []
    for (cp, precision, variant), pts in sorted(series(rows, ("cp", "precision", "variant")).items()):
        if variant == "baseline" and len({r["variant"] for r in rows}) > 1:
            continue
        colour = colours[(cp, precision)]
        xs = [r["context"] for r in pts]
        fmha = [r["shares"].get("fmha", 0.0) for r in pts]
        gemms = [sum(r["shares"].get(k, 0.0) for k in WEIGHT_GEMMS) for r in pts]
        ax.plot(xs, fmha, "-", color=colour, lw=1.4, marker="o", ms=3,
                label="FMHA, cp {} {} {}".format(cp, precision, variant))
        ax.plot(xs, gemms, "--", color=colour, lw=1.0, marker="s", ms=3)
        for (x0, f0, g0), (x1, f1, g1) in zip(zip(xs, fmha, gemms), list(zip(xs, fmha, gemms))[1:]):
            if f0 < g0 and f1 >= g1:  # crosses between x0 and x1: linear in log2(context)
                import math
                t = (g0 - f0) / ((f1 - f0) - (g1 - g0))
                x = 2 ** (math.log2(x0) + t * (math.log2(x1) - math.log2(x0)))
                ax.axvline(x, color=colour, lw=0.8, alpha=0.6)
                marks.append({"cp": cp, "precision": precision, "variant": variant, "context": x})
    ax.plot([], [], "--", color="grey", label="weight GEMMs (gemm + moe_gemm)")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1)
    ax.set_xlabel("context, tokens")
    ax.set_ylabel("share of the deepest rank's superstep")
    ax.set_title("FMHA against the weight GEMMs (a vertical line: FMHA overtakes)", fontsize=9)
    ax.legend(fontsize=6.5, loc="upper left")
    return marks


def draw_mfu(ax, rows, colours):
    for (cp, precision, variant), pts in sorted(series(rows, ("cp", "precision", "variant")).items()):
        pts = [r for r in pts if r["mfu"] is not None]
        if not pts:
            continue
        ax.plot([r["context"] for r in pts], [100 * r["mfu"] for r in pts], style(variant),
                color=colours[(cp, precision)], lw=1.4, marker="o", ms=3,
                label="cp {} {} {}".format(cp, precision, variant))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context, tokens")
    ax.set_ylabel("MFU, % of the datasheet dense bf16 peak")
    ax.set_title("Model FLOPs utilization", fontsize=9)
    ax.legend(fontsize=6.5, ncol=2)


def draw_efficiency(ax, rows):
    efficiency = []
    shade = {k: LINE_COLOURS[i % len(LINE_COLOURS)]
             for i, k in enumerate(sorted({(r["context"], r["precision"]) for r in rows}))}
    for (context, precision, variant), pts in sorted(series(rows, ("context", "precision", "variant")).items()):
        pts = sorted((r for r in pts if r["efficiency"] is not None), key=lambda r: r["cp"])
        if len(pts) < 2:
            continue
        cps = [r["cp"] for r in pts]
        eff = [r["efficiency"] for r in pts]
        ax.plot(cps, eff, style(variant), marker="o", ms=3, lw=1.2, color=shade[(context, precision)],
                label="{} {} {}".format(context_label(context), precision, variant))
        efficiency.append({"context": context, "precision": precision, "variant": variant, "cp": cps,
                           "efficiency": eff})
    weak = [] if efficiency else draw_weak_scaling(ax, rows)  # one view a panel: weak scaling where no context has two cp
    ax.set_xscale("log", base=2)
    ax.set_xlabel("cp (GPUs)")
    ax.set_ylabel("efficiency against the smallest cp swept, c0")
    ax.set_title("Scaling over cp: at a fixed context T(c0) c0 / (T(cp) cp) (circles); "
                 "at fixed tokens a rank MFU(cp) / MFU(c0) (squares)", fontsize=8)
    if efficiency or weak:
        ax.legend(fontsize=6.5, ncol=2)
    else:
        ax.text(0.5, 0.5, "no context or tokens a rank swept over two or more cp", ha="center", va="center",
                transform=ax.transAxes)
    return efficiency, weak


def draw_weak_scaling(ax, rows):
    """Points of the same tokens a rank (context / cp) and precision over two or
    more cp: the work grows with cp (the FMHA with the keys before a rank), so
    the efficiency is the MFU's ratio to the smallest cp's, model FLOPs per GPU
    second against c0's (at a fixed context it equals T(c0) c0 / (T(cp) cp))."""
    weak = []
    groups = {}
    for r in rows:
        if r["mfu"] is not None:
            groups.setdefault((r["context"] // r["cp"], r["precision"], r["variant"]), []).append(r)
    shade = {k: LINE_COLOURS[(i + 3) % len(LINE_COLOURS)] for i, k in enumerate(sorted({k[:2] for k in groups}))}
    for (segment, precision, variant), pts in sorted(groups.items()):
        pts = sorted(pts, key=lambda r: r["cp"])
        if len({r["cp"] for r in pts}) < 2:
            continue  # one cp: nothing scales (a point's context fixes its cp within a segment)
        cps = [r["cp"] for r in pts]
        eff = [r["mfu"] / pts[0]["mfu"] for r in pts]
        ax.plot(cps, eff, style(variant), marker="s", ms=3, lw=1.2, color=shade[(segment, precision)],
                label="{} a rank {} {}".format(context_label(segment), precision, variant))
        weak.append({"segment": segment, "precision": precision, "variant": variant, "cp": cps, "efficiency": eff})
    return weak


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="sweep files")
    ap.add_argument("--variants", default="baseline,all", help="variants to draw (default baseline,all)")
    pbplot.add_output_args(ap, "sweep.png")
    a = pbplot.parse(ap)
    variants = pbplot.split_list(a.variants)
    rows = []
    for path in a.files:
        f = pr.open_results(path)
        if pr.kind(f) != "sweep":
            sys.exit("{}: a '{}' file, not a sweep (prefill-bench sweep writes one)".format(path, pr.kind(f)))
        found, failed = pr.sweep_rows(path, f, variants)
        for pid, error in failed:
            sys.stderr.write("{}: point {} failed: {}\n".format(path, pid, error))
        rows += found
    if not rows:
        sys.exit("no measured or planned point of the variants {} in {}".format(", ".join(variants),
                                                                                ", ".join(a.files)))
    keys = sorted({(r["cp"], r["precision"]) for r in rows})
    colours = {k: LINE_COLOURS[i % len(LINE_COLOURS)] for i, k in enumerate(keys)}

    plt = pbplot.pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(14.0, 10.0), constrained_layout=True)
    draw_ttft(axes[0][0], rows, colours)
    one_a_point = measured_first(rows)
    crossings = draw_shares(axes[0][1], one_a_point, colours)
    draw_mfu(axes[1][0], one_a_point, colours)
    efficiency, weak = draw_efficiency(axes[1][1], one_a_point)
    for ax in (axes[0][0], axes[0][1], axes[1][0]):
        contexts = sorted({r["context"] for r in rows} | ({t for t, _, _ in SEED_POINTS} if ax is axes[0][0] else set()))
        ax.set_xticks(contexts)
        ax.set_xticklabels([context_label(c) for c in contexts], fontsize=7)
    statuses = sorted({r["status"] for r in rows})
    pbplot.set_title(fig, "prefill-bench sweep: {} ({} points, {})".format(
        ", ".join(a.files), len({(r["file"], r["id"]) for r in rows}), " and ".join(statuses)))
    for r in sorted(rows, key=lambda r: (r["precision"], r["variant"], r["cp"], r["context"])):
        print("{:<26} {:<9} {:<8} {:>12} ms  MFU {}".format(r["id"], r["variant"], r["status"],
                                                           pbplot.fmt_ms(r["ttft_ms"]),
                                                           "-" if r["mfu"] is None else "{:.1f}%".format(100 * r["mfu"])))
    pbplot.save(fig, a, {"points": [{k: v for k, v in r.items()} for r in rows],
                         "other_panels_points": [(r["id"], r["variant"], r["status"]) for r in one_a_point],
                         "crossings": crossings,
                         "efficiency": efficiency, "weak_efficiency": weak})


if __name__ == "__main__":
    pbplot.run_main(main)
