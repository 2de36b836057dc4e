#!/usr/bin/env python3
"""Stacked per-rank family bars of one variant, like an nsys anatomy.

    scripts/plot_anatomy.py results.h5 [--variant all] [-o anatomy.png]
"""
import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pbresults import describe, family_ms, open_results, variant_names  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--variant", help="variant name (default: the first)")
    ap.add_argument("-o", "--output", default="anatomy.png")
    ap.add_argument("--overwrite", action="store_true")
    a = ap.parse_args()
    if os.path.exists(a.output) and not a.overwrite:
        sys.exit(f"{a.output} exists; pass --overwrite or choose another -o")
    f = open_results(a.results)
    names = variant_names(f)
    variant = a.variant or (names[0] if names else None)
    if variant not in names:
        sys.exit(f"{a.results}: no variant '{variant}'; variants: {', '.join(names)}")
    per_rank = family_ms(f, variant)
    if not per_rank:
        sys.exit(f"{a.results}: variant '{variant}' has no spans")
    ranks = sorted(per_rank)
    totals = {}
    for fams in per_rank.values():
        for fam, ms in fams.items():
            if fam != "fabric":
                totals[fam] = totals.get(fam, 0.0) + ms
    families = sorted(totals, key=totals.get, reverse=True)
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(ranks) + 4), 6))
    bottom = [0.0] * len(ranks)
    cmap = plt.get_cmap("tab20")
    for i, fam in enumerate(families):
        vals = [per_rank[r].get(fam, 0.0) for r in ranks]
        ax.bar([str(r) for r in ranks], vals, bottom=bottom, label=fam, color=cmap(i % 20))
        bottom = [b + v for b, v in zip(bottom, vals)]
    kind, cuts, gpu = describe(f, variant)
    ax.set_xlabel("rank")
    ax.set_ylabel("ms per superstep" + (" (roofline)" if kind == "plan" else " (measured)"))
    ax.set_title(f"{os.path.basename(a.results)} [{variant}] {gpu}\n{cuts}", fontsize=9)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    fig.savefig(a.output, dpi=120)
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
