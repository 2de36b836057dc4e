#!/usr/bin/env python3
"""A/B per family for one rank (default: the deepest of A): two variants of one
file, or the same variant in two files.

    scripts/plot_ab.py results.h5 --variants baseline,all [-o ab.png]
    scripts/plot_ab.py A.h5 B.h5 [--variant all] [-o ab.png]
"""
import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pbresults import describe, family_ms, open_results, variant_names  # noqa: E402


def pick(f, path, name):
    names = variant_names(f)
    name = name or (names[0] if names else None)
    if name not in names:
        sys.exit(f"{path}: no variant '{name}'; variants: {', '.join(names)}")
    return name


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--variants", help="A,B inside one file")
    ap.add_argument("--variant", help="the variant to take from both files")
    ap.add_argument("--rank", type=int, help="rank to show (default: A's deepest)")
    ap.add_argument("-o", "--output", default="ab.png")
    ap.add_argument("--overwrite", action="store_true")
    a = ap.parse_args()
    if os.path.exists(a.output) and not a.overwrite:
        sys.exit(f"{a.output} exists; pass --overwrite or choose another -o")
    fa = open_results(a.files[0])
    if len(a.files) == 1:
        if not a.variants or "," not in a.variants:
            sys.exit("one file: give --variants A,B")
        va, vb = a.variants.split(",", 1)
        fb, labels = fa, (va, vb)
        va, vb = pick(fa, a.files[0], va), pick(fa, a.files[0], vb)
    else:
        fb = open_results(a.files[1])
        va, vb = pick(fa, a.files[0], a.variant), pick(fb, a.files[1], a.variant)
        labels = (f"{os.path.basename(a.files[0])} [{va}]", f"{os.path.basename(a.files[1])} [{vb}]")
    ma, mb = family_ms(fa, va), family_ms(fb, vb)
    rank = a.rank if a.rank is not None else max(ma, key=lambda r: sum(ma[r].values()))
    A, B = ma.get(rank, {}), mb.get(rank, {})
    families = sorted((set(A) | set(B)) - {"fabric"}, key=lambda k: -max(A.get(k, 0), B.get(k, 0)))
    x = np.arange(len(families))
    fig, ax = plt.subplots(figsize=(max(7, 0.7 * len(families) + 3), 5))
    ax.bar(x - 0.2, [A.get(k, 0) for k in families], 0.4, label=labels[0])
    ax.bar(x + 0.2, [B.get(k, 0) for k in families], 0.4, label=labels[1])
    ax.set_xticks(x)
    ax.set_xticklabels(families, rotation=45, ha="right")
    ax.set_ylabel("ms per superstep")
    kind, _, gpu = describe(fa, va)
    ax.set_title(f"rank {rank}: A {sum(A.values()):.1f} ms vs B {sum(B.values()):.1f} ms ({kind}) {gpu}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.output, dpi=120)
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
