#!/usr/bin/env python3
"""Stacked per-family bars per rank, one bar per variant, like an nsys anatomy,
with each bar's total on top and, from the second variant on, its change
against the first variant of the same rank.

    scripts/plot_anatomy.py results.h5 [--variants baseline,all] [-o anatomy.png]

A run or plan file gives ms per superstep (measured, or the roofline); a lane
file ms per MLA layer. Default: every variant in the file, in file order.
Page-sized: bars that do not fit one row of a page (pbplot.PAGE_IN, 2400 px
at 150 dpi) wrap onto further rows of panels, every rank's bars in one row
where they fit, all rows on one time scale.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pbplot  # noqa: E402

pbplot.require_plotting_python()

import pbresults as pr  # noqa: E402

GROUP_GAP = 0.7  # between the bar groups of two ranks, in bar widths
BAR_IN = 0.55    # a bar's slot, inches: room for its total and change above it
FIXED_IN = 3.5   # a row's width besides its bars: the y axis and the legend, inches
ROW_IN = 6.2     # one row of bars, inches (several rows: ROW_MIN_IN to WRAPPED_ROW_IN each)
WRAPPED_ROW_IN = 4.4
ROW_MIN_IN = 3.0
TITLE_IN = 1.0


def row_units(groups):
    """A row's width in bar widths: its bars and the gaps between its groups."""
    n = sum(len(vs) for _, vs in groups)
    return n + (GROUP_GAP * (len(groups) - 1) if n > len(groups) else 0)


def row_width(groups):
    """The inches a row of bar groups needs."""
    return max(7.0, BAR_IN * sum(len(vs) for _, vs in groups) + 0.3 * len(groups) + FIXED_IN)


def layout(ranks, variants, page_in=pbplot.PAGE_IN):
    """The bars in rows that fit page_in inches across: [[(rank, [variants])]].
    Every rank's bars stay together in one row when they fit in one; a rank
    with more variants than a row holds continues on the next row."""
    most = max(1, int((page_in - FIXED_IN) / BAR_IN))  # bars a row holds, gaps aside
    groups = []
    for rank in ranks:
        for i in range(0, len(variants), most):
            groups.append((rank, variants[i:i + most]))
    rows = [[]]
    for g in groups:
        if rows[-1] and row_width(rows[-1] + [g]) > page_in:
            rows.append([])
        rows[-1].append(g)
    if len(rows) > 1:  # as even as the groups allow: the same number of groups per row
        per_row = -(-len(groups) // len(rows))
        even = [groups[i:i + per_row] for i in range(0, len(groups), per_row)]
        if all(row_width(r) <= page_in for r in even):
            rows = even
    return rows


def bar_positions(groups):
    xs, at = [], 0.0
    for _, vs in groups:
        xs.append([at + j for j in range(len(vs))])
        at += len(vs) + (GROUP_GAP if len(vs) > 1 else 0)
    return xs


def family_order(per_variant):
    """Families by their summed time, largest first (drawn at the bottom)."""
    totals = {}
    for per_rank in per_variant.values():
        for fams in per_rank.values():
            for fam, ms in fams.items():
                totals[fam] = totals.get(fam, 0.0) + ms
    return [f for f in sorted(totals, key=totals.get, reverse=True) if totals[f] > 0]


def draw_stacks(ax, per_variant, groups, families, xs):
    for fam in families:
        colour = pbplot.family_colour(fam)
        for g, (rank, variants) in enumerate(groups):
            for j, v in enumerate(variants):
                fams = per_variant[v].get(rank, {})
                below = sum(fams.get(f, 0.0) for f in families[:families.index(fam)])
                ax.bar(xs[g][j], fams.get(fam, 0.0), 0.8, bottom=below, color=colour,
                       hatch=pbplot.FAMILY_HATCH.get(fam), edgecolor="white", linewidth=0.3,
                       label=fam if g == 0 and j == 0 else None)


def annotate_totals(ax, totals, reference, groups, xs):
    for g, (rank, variants) in enumerate(groups):
        ref = totals[reference].get(rank)
        for j, v in enumerate(variants):
            total = totals[v].get(rank)
            if total is not None:
                pbplot.annotate_bar(ax, xs[g][j], total, total, ref if v != reference and ref else None)


def label_axis(ax, groups, xs, deep, one_variant, one_rank):
    flat = [x for group in xs for x in group]
    seen = set()
    rank_names = []
    for r, _ in groups:
        name = "{}{}".format(r, " (deep)" if r == deep and not one_rank else "")
        rank_names.append(name + (" (cont.)" if r in seen else ""))
        seen.add(r)
    if one_variant:
        ax.set_xticks(flat)
        ax.set_xticklabels(rank_names)
        ax.set_xlabel("rank")
    elif one_rank:
        names = [v for _, vs in groups for v in vs]
        ax.set_xticks(flat)
        ax.set_xticklabels(names, rotation=30 if len(names) > 4 else 0, ha="right" if len(names) > 4 else "center")
        ax.set_xlabel("variant (rank {})".format(groups[0][0]))
    else:
        names = [v for _, vs in groups for v in vs]
        ax.set_xticks(flat, minor=True)
        ax.set_xticklabels(names, minor=True)
        ax.set_xticks([sum(group) / len(group) for group in xs])
        ax.set_xticklabels(["rank " + name for name in rank_names])
        longest = max(len(v) for v in names)
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
    rows = layout(ranks, variants)
    units = max(row_units(r) for r in rows)
    width = min(pbplot.PAGE_IN, max(row_width(r) for r in rows))
    row_in = ROW_IN if len(rows) == 1 else \
        max(ROW_MIN_IN, min(WRAPPED_ROW_IN, (pbplot.PAGE_IN - TITLE_IN) / len(rows)))
    fig, axes = plt.subplots(len(rows), 1, figsize=(width, row_in * len(rows) + (TITLE_IN if len(rows) > 1 else 0)),
                             constrained_layout=True, squeeze=False)
    deep = max(totals[variants[0]], key=totals[variants[0]].get)
    top = max(t for per_rank in totals.values() for t in per_rank.values())
    for row, (ax,) in zip(rows, axes):
        xs = bar_positions(row)
        draw_stacks(ax, per_variant, row, families, xs)
        annotate_totals(ax, totals, variants[0], row, xs)
        label_axis(ax, row, xs, deep, len(variants) == 1, len(ranks) == 1)
        if len(rows) > 1:  # one scale for every row: a bar is as wide in each
            ax.set_xlim(-0.7, units - 0.3)
        ax.set_ylim(0, top * 1.14)
        ax.set_ylabel(pr.unit(f))
    ax = axes[0][0]
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              title="family", frameon=False)
    what = ", ".join(pr.variant_label(f, v) for v in variants)
    what = "variants {}; % against {}".format(what, variants[0]) if len(variants) > 1 else \
        "variant {} ({})".format(variants[0], pr.cuts_on(f, variants[0]) or "cuts not recorded")
    pbplot.set_title(fig, "Anatomy per rank: {}\n{}".format(pr.describe_file(a.results, f), what))
    pbplot.save(fig, a, {"file": a.results, "kind": pr.kind(f), "unit": pr.unit(f), "variants": variants,
                         "ranks": ranks, "families": families,
                         "rows": [[{"rank": r, "variants": vs} for r, vs in row] for row in rows],
                         "ms": {v: {str(r): per_variant[v][r] for r in per_variant[v]} for v in variants},
                         "totals": {v: {str(r): totals[v][r] for r in totals[v]} for v in variants}})


if __name__ == "__main__":
    pbplot.run_main(main)
