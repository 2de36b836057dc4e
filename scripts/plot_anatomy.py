#!/usr/bin/env python3
"""Stacked per-family bars per rank, one bar per variant, like an nsys anatomy,
with each bar's total on top and, from the second variant on, its change
against the first variant of the same rank.

    scripts/plot_anatomy.py results.h5 [--variants baseline,all] [-o anatomy.png]

A run or plan file gives ms per superstep (measured, or the roofline); a lane
file ms per MLA layer. Default: every variant in the file, in file order.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pbplot  # noqa: E402

pbplot.require_plotting_python()

import pbresults as pr  # noqa: E402

GROUP_GAP = 0.7  # between the bar groups of two ranks, in bar widths


def bar_positions(n_ranks, n_variants):
    step = n_variants + (GROUP_GAP if n_variants > 1 else 0)
    return [[g * step + j for j in range(n_variants)] for g in range(n_ranks)]


def family_order(per_variant):
    """Families by their summed time, largest first (drawn at the bottom)."""
    totals = {}
    for per_rank in per_variant.values():
        for fams in per_rank.values():
            for fam, ms in fams.items():
                totals[fam] = totals.get(fam, 0.0) + ms
    return [f for f in sorted(totals, key=totals.get, reverse=True) if totals[f] > 0]


def draw_stacks(ax, per_variant, variants, ranks, families, xs):
    for fam in families:
        colour = pbplot.family_colour(fam)
        for g, rank in enumerate(ranks):
            for j, v in enumerate(variants):
                fams = per_variant[v].get(rank, {})
                below = sum(fams.get(f, 0.0) for f in families[:families.index(fam)])
                ax.bar(xs[g][j], fams.get(fam, 0.0), 0.8, bottom=below, color=colour,
                       hatch=pbplot.FAMILY_HATCH.get(fam), edgecolor="white", linewidth=0.3,
                       label=fam if g == 0 and j == 0 else None)


def annotate_totals(ax, totals, variants, ranks, xs):
    for g, rank in enumerate(ranks):
        ref = totals[variants[0]].get(rank)
        for j, v in enumerate(variants):
            total = totals[v].get(rank)
            if total is not None:
                pbplot.annotate_bar(ax, xs[g][j], total, total, ref if j > 0 and ref else None)


def label_axis(ax, variants, ranks, xs, deep):
    flat = [x for group in xs for x in group]
    rank_names = ["{}{}".format(r, " (deep)" if r == deep and len(ranks) > 1 else "") for r in ranks]
    if len(variants) == 1:
        ax.set_xticks(flat)
        ax.set_xticklabels(rank_names)
        ax.set_xlabel("rank")
    elif len(ranks) == 1:
        ax.set_xticks(flat)
        ax.set_xticklabels(variants, rotation=30 if len(variants) > 4 else 0,
                           ha="right" if len(variants) > 4 else "center")
        ax.set_xlabel("variant (rank {})".format(ranks[0]))
    else:
        ax.set_xticks(flat, minor=True)
        ax.set_xticklabels(variants * len(ranks), minor=True)
        ax.set_xticks([sum(group) / len(group) for group in xs])
        ax.set_xticklabels(["rank " + name for name in rank_names])
        longest = max(len(v) for v in variants)
        ax.tick_params(axis="x", which="minor", length=2, labelsize=7, labelrotation=90)
        ax.tick_params(axis="x", which="major", length=0, pad=6 + 4.0 * longest)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="a run, plan or lane file")
    ap.add_argument("--variants", "--variant", help="comma-separated variants (default: all, in file order)")
    pbplot.add_output_args(ap, "anatomy.png")
    a = pbplot.parse(ap)
    f = pr.open_results(a.results)
    if pr.kind(f) not in pr.SPAN_KINDS:
        sys.exit("{}: a {} file has no per-launch spans; plot it with scripts/plot_bench.py".format(
            a.results, pr.kind(f)))
    variants = pbplot.split_list(a.variants) or pr.variant_names(f)
    pr.check_variants(a.results, f, variants)
    per_variant = {v: pr.family_ms(f, v) for v in variants}
    empty = [v for v in variants if not per_variant[v]]
    if empty:
        sys.exit("{}: variant(s) {} have no spans".format(a.results, ", ".join(empty)))
    ranks = sorted({r for per_rank in per_variant.values() for r in per_rank})
    families = family_order(per_variant)
    totals = {v: {r: sum(fams.values()) for r, fams in per_variant[v].items()} for v in variants}

    plt = pbplot.pyplot()
    n_bars = len(ranks) * len(variants)
    width = min(22.0, max(7.0, 0.55 * n_bars + 0.3 * len(ranks) + 3.5))
    fig, ax = plt.subplots(figsize=(width, 6.2), constrained_layout=True)
    xs = bar_positions(len(ranks), len(variants))
    draw_stacks(ax, per_variant, variants, ranks, families, xs)
    annotate_totals(ax, totals, variants, ranks, xs)
    deep = max(totals[variants[0]], key=totals[variants[0]].get)
    label_axis(ax, variants, ranks, xs, deep)
    top = max(t for per_rank in totals.values() for t in per_rank.values())
    ax.set_ylim(0, top * 1.14)
    ax.set_ylabel(pr.unit(f))
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              title="family", frameon=False)
    what = ", ".join(pr.variant_label(f, v) for v in variants)
    what = "variants {}; % against {}".format(what, variants[0]) if len(variants) > 1 else \
        "variant {} ({})".format(variants[0], pr.cuts_on(f, variants[0]) or "cuts not recorded")
    pbplot.set_title(fig, "Anatomy per rank: {}\n{}".format(pr.describe_file(a.results, f), what))
    pbplot.save(fig, a, {"file": a.results, "kind": pr.kind(f), "unit": pr.unit(f), "variants": variants,
                         "ranks": ranks, "families": families,
                         "ms": {v: {str(r): per_variant[v][r] for r in per_variant[v]} for v in variants},
                         "totals": {v: {str(r): totals[v][r] for r in totals[v]} for v in variants}})


if __name__ == "__main__":
    pbplot.run_main(main)
