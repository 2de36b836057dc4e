#!/usr/bin/env python3
"""The summary plot of one results file, by its kind.

    scripts/plot_bench.py results.h5 [--variants a,b] [--family f,g] [-o bench.png]

kernels, fmha, kda, moe (the /bench table): per case, the fraction of the
  ceiling that binds it and the median time, the variants side by side, each
  time with its change against the reference variant (the first of
  --variants; by default the variant every speedup in the file is against).
  One panel per family, or per block where the variants are named
  <block>.<variant> (the moe benchmark's blocks), with the block's total.
  Page-sized: panels that do not fit one page (--page-height, 16 in, 2400 px)
  continue on further pages, written beside the output as <stem>-p2.png,
  <stem>-p3.png, ... (the moe file: four pages); a panel taller than a page is
  split by its cases.
lane: per rank, the median wall of one MLA layer per variant.
run: the median TTFT per variant (min to max over reps as the whisker): the
  file's headline TTFT (docs/results.md), the projected gang's for serialized
  ranks.
plan: per rank, the roofline superstep per variant.
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pbplot  # noqa: E402

pbplot.require_plotting_python()

import numpy as np  # noqa: E402

import pbresults as pr  # noqa: E402

BAR_IN = 0.15   # bar thickness, inches
GAP_IN = 0.12   # between two cases, inches
TITLE_IN = 0.3  # a panel's title row, inches
AXIS_IN = 0.45  # a panel's x axis, inches
GREY = "#8A8A8A"
WIDTH_IN = 15.0  # a /bench figure's width
TOP_IN = 1.0     # its title


# --- the /bench table -------------------------------------------------------

def assign_sections(rows):
    """Gives each row a section (the panel) and a side (its variant there):
    "<block>.<variant>" rows, and "<block>.total" rows, go to the block's
    panel; all other rows to their family's panel."""
    plain = {r["variant"] for r in rows}
    for r in rows:
        block, _, side = r["variant"].partition(".")
        if side and block not in plain:
            r["section"], r["side"] = block, side
        elif is_total(r["kernel"]):
            r["section"], r["side"] = r["kernel"][:-len(".total")], r["variant"]
        else:
            r["section"], r["side"] = r["family"], r["variant"]


def ordered(items):
    seen, out = set(), []
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def is_total(kernel):
    return kernel.endswith(".total")


def reference_first(sides, rows):
    """sides with the reference first: the first side whose every row (block
    totals aside) has speedup 1, what the benchmark measured the others
    against; else sides as they are."""
    for s in sides:
        speedups = [r["speedup"] for r in rows if r["side"] == s and not is_total(r["kernel"])]
        if speedups and all(abs(x - 1.0) < 1e-9 for x in speedups):
            return [s] + [x for x in sides if x != s]
    return sides


def build_sections(rows, wanted_sides):
    """[(section, sides, cases)], cases = [(label key, {side: row})]."""
    out = []
    for sec in ordered(r["section"] for r in rows):
        srows = [r for r in rows if r["section"] == sec]
        sides = [s for s in wanted_sides if any(r["side"] == s for r in srows)] if wanted_sides \
            else reference_first(ordered(r["side"] for r in srows), srows)
        if not sides:
            continue
        cases = {}
        for r in srows:
            if r["side"] in sides:
                cases.setdefault((r["kernel"], r["shape"]), {})[r["side"]] = r
        keys = sorted(cases, key=lambda k: is_total(k[0]))  # totals last, the rest in file order
        out.append((sec, sides, [(k, cases[k]) for k in keys]))
    return out


def case_label(kernel, shape, shared_shape):
    if is_total(kernel):
        return "total ({})".format(shape)
    if shape.startswith("#"):
        return "{} {}".format(shape, kernel)
    return kernel if shape == shared_shape else "{}\n{}".format(kernel, shape)


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def section_title(sec, sides, cases):
    """'<section>: ref A → B (…)' with the totals, or the geomean speedups."""
    totals = [c for (k, c) in cases if is_total(k[0])]
    ref = sides[0]
    parts = []
    if totals:
        t = totals[0]
        for s in sides[1:]:
            if ref in t and s in t:
                a, b = t[ref]["median_us"] / 1e3, t[s]["median_us"] / 1e3
                parts.append("{} {} ms → {} {} ms ({}, {})".format(ref, pbplot.fmt_ms(a), s, pbplot.fmt_ms(b),
                                                                   pbplot.fmt_delta_ms(b, a),
                                                                   pbplot.fmt_delta_pct(b, a)))
    else:
        for s in sides[1:]:
            ratios = [c[ref]["median_us"] / c[s]["median_us"] for _, c in cases
                      if ref in c and s in c and c[s]["median_us"] > 0]
            g = geomean(ratios)
            if g:
                parts.append("{} ×{:.2f}".format(s, g))
        if parts:
            parts = ["speedup over {} ({}): {}".format(
                ref, "1 case" if len(cases) == 1 else "geomean of {} cases".format(len(cases)), ", ".join(parts))]
    return "{}: {}".format(sec, "; ".join(parts)) if parts else sec


def draw_row(ax_f, ax_t, y, height, r, ref, style, name):
    """One row's two bars: its fraction of the ceiling, and its median time
    with the change against ref (the reference variant's row, or None)."""
    light, hatch = style
    colour = pbplot.lighter(pbplot.family_colour(r["family"]), light)
    bar = {"color": colour, "hatch": hatch, "edgecolor": "white", "linewidth": 0.3}
    note = {"xytext": (2, 0), "textcoords": "offset points", "va": "center", "fontsize": 6.5}
    frac = r["fraction"]
    ax_f.barh(y, frac, height, **bar)
    text = "{:.2f}".format(frac) if frac > 0 else "no ceiling"
    ax_f.annotate(text + ("  " + name if name else ""), (frac, y), color="#222222" if frac > 0 else "#888888",
                  **note)
    us = r["median_us"]
    ax_t.barh(y, us, height, **bar)
    text, colour = pbplot.fmt_us(us), "#222222"
    if ref is not None and ref["median_us"] > 0:
        text += "  " + pbplot.fmt_delta_pct(us, ref["median_us"])
        colour = pbplot.delta_colour(us, ref["median_us"])
    ax_t.annotate(text, (us, y), color=colour, **note)


def scale_axes(ax_f, ax_t, labels, fractions, times, named):
    ax_f.set_yticks(range(len(labels)))
    ax_f.set_yticklabels(labels, fontsize=7)
    ax_f.set_ylim(len(labels) - 0.5, -0.5)
    ax_f.set_xlim(0, max(fractions + [1.0]) * (1.4 if named else 1.22))
    ax_f.axvline(1.0, color="#555555", linestyle="--", linewidth=0.8, zorder=0)
    ax_f.set_xlabel("fraction of the ceiling (dashed: the ceiling)")
    lo, hi = min(times), max(times)
    if hi / max(lo, 1e-9) > 100:
        ax_t.set_xscale("log")
        ax_t.set_xlim(lo / 2, hi * 5)
        ax_t.set_xlabel("median time, µs (log)")
    else:
        ax_t.set_xlim(0, hi * 1.4)
        ax_t.set_xlabel("median time, µs")
    ax_t.tick_params(axis="y", left=False, labelleft=False)


def variant_legend(ax_t, sides, shades):
    from matplotlib.patches import Patch
    handles = [Patch(facecolor=pbplot.lighter(GREY, light), hatch=hatch, edgecolor="white") for light, hatch in shades]
    names = ["{} (reference)".format(sides[0])] + sides[1:] if len(sides) > 1 else sides
    ax_t.legend(handles, names, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False,
                title="variant")


def section_heading(fig, title_ax, text):
    """text left-aligned at the figure's edge, in the row of title_ax."""
    import matplotlib.transforms as mtransforms
    title_ax.axis("off")
    at = mtransforms.blended_transform_factory(fig.transFigure, title_ax.transAxes)
    title_ax.text(0.01, 0.0, pbplot.wrap(text, fig.get_figwidth() - 0.5, 9), transform=at, ha="left",
                  va="bottom", fontsize=9, fontweight="bold")


def draw_section(fig, title_ax, ax_f, ax_t, part, show_legend):
    """One section (or part of one: paginate) in its heading row and its two
    panels."""
    sides, cases = part["sides"], part["cases"]
    shapes = {k[1] for k, _ in cases if not is_total(k[0])}
    shared_shape = shapes.pop() if len(shapes) == 1 else None
    n = len(sides)
    shades = pbplot.variant_shades(n)
    named = n >= 3  # too many shades to tell apart: each bar names its variant
    slot = 1.0 / (n + 0.8)
    for i, ((kernel, shape), by_side) in enumerate(cases):
        for j, s in enumerate(sides):
            if s in by_side:
                ref = by_side.get(sides[0]) if j > 0 else None
                draw_row(ax_f, ax_t, i + (j - (n - 1) / 2.0) * slot, slot * 0.92, by_side[s], ref, shades[j],
                         s if named else None)
    rows = [r for _, c in cases for r in c.values()]
    scale_axes(ax_f, ax_t, [case_label(k, shape, shared_shape) for (k, shape), _ in cases],
               [r["fraction"] for r in rows], [r["median_us"] for r in rows], named)
    if show_legend:
        variant_legend(ax_t, sides, shades)
    section_heading(fig, title_ax, part["title"] + (" · shape " + shared_shape if shared_shape else "")
                    + (" · " + part["part"] if part["part"] else ""))


def ceiling_line(f):
    parts = []
    if "ceiling" in f.attrs:
        parts.append("ceiling: " + pr.text(f.attrs["ceiling"]))
    gemm = "TFLOP/s GEMM ({})".format(pr.text(f.attrs.get("gemm_ceiling", "burst")))  # the one fractions use
    for key, unit in (("copy_tbps", "TB/s copy"), ("gemm_tflops", gemm)):
        if key in f.attrs:
            parts.append("{:.3g} {}".format(float(f.attrs[key]), unit))
    if "gemm_tflops_sustained" in f.attrs and pr.text(f.attrs.get("gemm_ceiling", "burst")) == "burst":
        parts.append("{:.3g} TFLOP/s GEMM sustained".format(float(f.attrs["gemm_tflops_sustained"])))
    return "; ".join(parts)


def paginate(sections, budget):
    """The sections in order on pages of at most budget inches of panels:
    [[{section, sides, cases, title, part}]]. A section taller than a page is
    split by its cases (part "cases 1-11 of 22"), its heading on each part."""
    pages, used = [[]], 0.0
    for sec, sides, cases in sections:
        fixed, per_case = TITLE_IN + AXIS_IN, len(sides) * BAR_IN + GAP_IN
        most = max(1, int((budget - fixed) / per_case) if budget != float("inf") else len(cases))
        chunks = [cases[i:i + most] for i in range(0, len(cases), most)]
        title = section_title(sec, sides, cases)
        for k, chunk in enumerate(chunks):
            height = fixed + len(chunk) * per_case
            if pages[-1] and used + height > budget:
                pages.append([])
                used = 0.0
            first = k * most + 1
            part = "" if len(chunks) == 1 else "cases {}-{} of {}".format(first, first + len(chunk) - 1, len(cases))
            pages[-1].append({"section": sec, "sides": sides, "cases": chunk, "title": title, "part": part,
                              "height": height})
            used += height
    return pages


def draw_page(plt, page, title):
    heights = []
    for part in page:
        heights += [TITLE_IN, part["height"] - TITLE_IN]
    fig = plt.figure(figsize=(WIDTH_IN, sum(heights) + TOP_IN), constrained_layout=True)
    gs = fig.add_gridspec(len(heights), 2, height_ratios=heights, width_ratios=[1, 1.25])
    previous = None
    for i, part in enumerate(page):
        ax_f = fig.add_subplot(gs[2 * i + 1, 0])
        ax_t = fig.add_subplot(gs[2 * i + 1, 1], sharey=ax_f)
        draw_section(fig, fig.add_subplot(gs[2 * i, :]), ax_f, ax_t, part, show_legend=part["sides"] != previous)
        previous = part["sides"]
    pbplot.set_title(fig, title, fontsize=11)
    return fig


def plot_bench(f, a, plt):
    rows = pr.bench_rows(f)
    if not rows:
        sys.exit("{}: its /bench table is empty".format(a.results))
    assign_sections(rows)
    families = pbplot.split_list(a.family)
    if families:
        known = ordered([r["family"] for r in rows] + [r["section"] for r in rows])
        unknown = [x for x in families if x not in known]
        if unknown:
            sys.exit("{}: no family or block '{}'; it has: {}".format(a.results, unknown[0], ", ".join(known)))
        rows = [r for r in rows if r["family"] in families or r["section"] in families]
    wanted = pbplot.split_list(a.variants)
    if wanted:
        known = ordered(r["side"] for r in rows)
        unknown = [v for v in wanted if v not in known]
        if unknown:
            sys.exit("{}: no variant '{}'; its variants: {}".format(a.results, unknown[0], ", ".join(known)))
    sections = build_sections(rows, wanted)
    pages = paginate(sections, a.page_height - TOP_IN if a.page_height > 0 else float("inf"))
    title = "{} benchmark: {}\n{}".format(pr.kind(f), pr.describe_file(a.results, f), ceiling_line(f))
    figs = [draw_page(plt, page, title + ("" if len(pages) == 1 else " · page {} of {}".format(k + 1, len(pages))))
            for k, page in enumerate(pages)]
    dump = {"kind": pr.kind(f), "sections": [
        {"section": sec, "variants": sides, "cases": [
            {"kernel": k[0], "shape": k[1],
             "rows": {s: {"family": r["family"], "variant": r["variant"], "fraction": r["fraction"],
                          "median_us": r["median_us"]}
                      for s, r in c.items()}} for k, c in cases]} for sec, sides, cases in sections],
        "pages": [[part["section"] for part in page] for page in pages]}
    return figs, dump


# --- run, lane and plan files -------------------------------------------------

def plot_ttft(f, a, plt, variants):
    """A run: the headline TTFT per variant (pbresults.ttft), median with
    min..max whiskers over reps."""
    samples = {v: pr.ttft_samples(f, v) for v in variants}
    labels = ordered(pr.ttft_label(f, v) for v in variants)
    label = " / ".join(labels)
    med = [pr.ttft(f, v) for v in variants]
    lo = [m - float(np.min(samples[v])) for m, v in zip(med, variants)]
    hi = [float(np.max(samples[v])) - m for m, v in zip(med, variants)]
    fig, ax = plt.subplots(figsize=(max(7.0, 1.0 * len(variants) + 3), 5.6), constrained_layout=True)
    xs = list(range(len(variants)))
    ax.bar(xs, med, 0.7, color=[pbplot.variant_colour(v, pr.cut_families(f)) for v in variants], yerr=[lo, hi],
           error_kw={"elinewidth": 0.8, "capsize": 3, "ecolor": "#444444"})
    for x, m, h in zip(xs, med, hi):
        pbplot.annotate_bar(ax, x, m + h, m, med[0] if x > 0 else None, with_ms=True)
    ax.set_xticks(xs)
    ax.set_xticklabels([pr.variant_label(f, v) for v in variants], rotation=30 if len(variants) > 4 else 0,
                       ha="right" if len(variants) > 4 else "center")
    ax.set_ylim(0, max(m + h for m, h in zip(med, hi)) * 1.18)
    ax.set_ylabel("{}, ms (median; whiskers min to max)".format(label))
    reps = sorted({len(samples[v]) for v in variants})
    pbplot.set_title(fig, "{} per variant: {}\n{} rep(s) each; changes against {}".format(
        label[0].upper() + label[1:], pr.describe_file(a.results, f), "/".join(map(str, reps)), variants[0]))
    return fig, {"kind": "run", "unit": label + " ms", "variants": variants,
                 "headline": {v: pr.ttft_headline(f, v) for v in variants},
                 "ttft_ms": dict(zip(variants, med))}


def plot_per_rank(f, a, plt, variants):
    """A lane or plan file: per rank, one bar per variant."""
    per_variant = {v: pr.rank_ms(f, v) for v in variants}
    ranks = sorted({r for m in per_variant.values() for r in m})
    n = len(variants)
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(min(22.0, max(7.0, 0.5 * n * len(ranks) + 3)), 5.6), constrained_layout=True)
    for j, v in enumerate(variants):
        xs = [g + (j - (n - 1) / 2.0) * width for g in range(len(ranks))]
        vals = [per_variant[v].get(r, 0.0) for r in ranks]
        ax.bar(xs, vals, width * 0.95, color=pbplot.variant_colour(v, pr.cut_families(f)), label=pr.variant_label(f, v))
        for x, r, val in zip(xs, ranks, vals):
            ref = per_variant[variants[0]].get(r) if j > 0 else None
            pbplot.annotate_bar(ax, x, val, val, ref, fontsize=6.5 if n * len(ranks) > 16 else 7)
    ax.set_xticks(range(len(ranks)))
    ax.set_xticklabels(["rank {}".format(r) for r in ranks])
    top = max(v for m in per_variant.values() for v in m.values())
    ax.set_ylim(0, top * 1.16)
    what = "median wall of one MLA layer" if pr.kind(f) == "lane" else "roofline superstep"
    ax.set_ylabel(pr.unit(f))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title="variant", fontsize=8)
    reps = sorted({pr.reps(f, v) for v in variants})
    rep_note = "; {} rep(s)".format("/".join(map(str, reps))) if pr.kind(f) == "lane" else ""
    pbplot.set_title(fig, "Per rank, {}: {}\nchanges against {}{}".format(
        what, pr.describe_file(a.results, f), variants[0], rep_note))
    return fig, {"kind": pr.kind(f), "unit": pr.unit(f), "variants": variants, "ranks": ranks,
                 "ms": {v: {str(r): per_variant[v][r] for r in per_variant[v]} for v in variants}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="a kernels, fmha, kda, moe, lane, run or plan file")
    ap.add_argument("--variants", "--variant", help="comma-separated variants, the reference first "
                    "(default: all; for /bench files the file's reference first)")
    ap.add_argument("--family", help="/bench files: only these families or blocks (comma-separated)")
    ap.add_argument("--page-height", type=float, default=pbplot.PAGE_IN, metavar="INCHES",
                    help="/bench files: the most inches a page is tall (default %(default)s: {} px); a taller "
                         "plot continues on pages <output>-p2.png, -p3.png, ...; 0: one figure however tall"
                    .format(int(pbplot.PAGE_IN * pbplot.DPI)))
    pbplot.add_output_args(ap, "bench.png")
    a = pbplot.parse(ap)
    f = pr.open_results(a.results)
    plt = pbplot.pyplot()
    k = pr.kind(f)
    if k in pr.BENCH_KINDS or "bench" in f:
        fig, dump = plot_bench(f, a, plt)
    elif k in pr.SPAN_KINDS:
        if a.family:
            sys.exit("--family applies to /bench files (kernels, fmha, kda, moe), not a {} file".format(k))
        variants = pbplot.split_list(a.variants) or pr.variant_names(f)
        pr.check_variants(a.results, f, variants)
        fig, dump = plot_ttft(f, a, plt, variants) if k == "run" else plot_per_rank(f, a, plt, variants)
    else:
        sys.exit("{}: kind '{}' is not one this script plots (kernels, fmha, kda, moe, lane, run, plan)".format(
            a.results, k))
    pbplot.save(fig, a, dict(dump, file=a.results))


if __name__ == "__main__":
    pbplot.run_main(main)
