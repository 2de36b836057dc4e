#!/usr/bin/env python3
"""A against B per family on one rank, with each family's change (ms and %).

    scripts/plot_ab.py results.h5 --variants A,B [-o ab.png]
    scripts/plot_ab.py A.h5 B.h5 --variants a,b  [-o ab.png]
    scripts/plot_ab.py A.h5 B.h5 --variants v    [-o ab.png]

One file: --variants names two of its variants, A then B. Two files:
--variants a,b takes variant a from the first file and b from the second; one
name takes that variant from both; without --variants each file must hold
exactly one variant. An unknown variant is refused with the file's variants.
Two files of different precisions (the root text `precision`; a file without
it predates fp8: bf16), e.g. bf16 against fp8:

    scripts/plot_ab.py results/h200/cp1-16k.h5 results/h200/cp1-16k-fp8.h5 --variants all

name each side by its precision and variant, in the legend, under each bar
and in the title's TTFT.
The rank is the deepest of A (largest total) unless --rank says which. Files
of different units (per superstep, per MLA layer) are not compared; a plan
(roofline) against a run (measured) is. Two runs are headed by their TTFT
(pbresults.ttft: the projected gang's for serialized ranks), the bars by the
rank's sum of spans.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pbplot  # noqa: E402

pbplot.require_plotting_python()

import numpy as np  # noqa: E402

import pbresults as pr  # noqa: E402


def pick_variants(a, files, handles):
    """[(path, file, variant) for A, B] following the semantics above."""
    names = pbplot.split_list(a.variants)
    if len(files) == 1:
        if len(names) != 2:
            sys.exit("{}: one file: give --variants A,B (two of: {})".format(
                files[0], ", ".join(pr.variant_names(handles[0]))))
        chosen = names
    else:
        if len(names) > 2:
            sys.exit("two files: --variants takes a,b (a from {}, b from {}) or one name for both".format(*files))
        if not names:
            lists = [pr.variant_names(h) for h in handles]
            if any(len(l) != 1 for l in lists):
                sys.exit("two files: give --variants a,b (a from {}, b from {}) or one name for both; "
                         "{} has {}; {} has {}".format(files[0], files[1], files[0], ", ".join(lists[0]),
                                                       files[1], ", ".join(lists[1])))
            names = [lists[0][0], lists[1][0]]
        chosen = names if len(names) == 2 else names * 2
    paths = files if len(files) == 2 else files * 2
    fs = handles if len(handles) == 2 else handles * 2
    for path, f, v in zip(paths, fs, chosen):
        pr.check_variants(path, f, [v])
    return list(zip(paths, fs, chosen))


def check_comparable(sides):
    (pa, fa, _), (pb, fb, _) = sides
    if pr.per_layer(fa) != pr.per_layer(fb):
        sys.exit("{} is a {} file ({}) and {} a {} file ({}): not comparable".format(
            pa, pr.kind(fa), pr.unit(fa), pb, pr.kind(fb), pr.unit(fb)))


def precision(f):
    """The file's precision (the root text `precision`: bf16, fp8, or per
    part); a file without it was written before the key, which came before
    fp8: bf16."""
    return pr.text(f.attrs["precision"]) if "precision" in f.attrs else "bf16"


def by_precision(sides):
    """Whether the two sides differ in precision (then they are named by it)."""
    return len({precision(f) for _, f, _ in sides}) > 1


def short_name(f, variant, with_precision):
    """'fp8 · all' (with_precision), else the variant."""
    return "{} · {}".format(precision(f), variant) if with_precision else variant


def side_label(letter, path, f, variant, same_file, with_precision=False):
    where = "" if same_file else os.path.basename(path) + " "
    what = pr.variant_label(f, variant)
    if with_precision:
        what = "{}, {}".format(precision(f), what)
    return "{}: {}[{}] ({})".format(letter, where, what, pr.kind(f))


def headline(sides):
    """{"a": {"ms", "label"}, "b": ...}: each side's pbresults.ttft and
    ttft_label; None unless both sides are runs."""
    if any(pr.kind(f) != "run" for _, f, _ in sides):
        return None
    return {letter: {"ms": pr.ttft(f, v), "label": pr.ttft_label(f, v)} for letter, (_, f, v) in zip("ab", sides)}


def headline_text(ttft, names=("", "")):
    """'TTFT: A 7846 ms → B 6514 ms (−1332 ms, −17.0%)'; with names, 'TTFT:
    A (bf16 · all) 6514 ms → B (fp8 · all) 4966 ms (...)'."""
    a, b = ttft["a"], ttft["b"]
    na, nb = (letter + (" ({})".format(name) if name else "") for letter, name in zip("AB", names))
    change = "({}, {})".format(pbplot.fmt_delta_ms(b["ms"], a["ms"]), pbplot.fmt_delta_pct(b["ms"], a["ms"]))
    if a["label"] == b["label"]:
        return "{}: {} {} ms → {} {} ms {}".format(a["label"], na, pbplot.fmt_ms(a["ms"]), nb, pbplot.fmt_ms(b["ms"]),
                                                   change)
    return "{} {} {} ms → {} {} {} ms {}".format(na, a["label"], pbplot.fmt_ms(a["ms"]), nb, b["label"],
                                                 pbplot.fmt_ms(b["ms"]), change)


def draw(ax, fams, A, B, labels, bar_names=None):
    """bar_names: (A's, B's) short names, written under each bar."""
    x = np.arange(len(fams))
    w = 0.4
    colours = [pbplot.family_colour(k) for k in fams]
    ax.bar(x - w / 2, [A.get(k, 0.0) for k in fams], w, color=[pbplot.lighter(c, 0.55) for c in colours],
           hatch="///", edgecolor="white", linewidth=0.3)
    ax.bar(x + w / 2, [B.get(k, 0.0) for k in fams], w, color=colours, edgecolor="white", linewidth=0.3)
    for i, k in enumerate(fams):
        a, b = A.get(k, 0.0), B.get(k, 0.0)
        top = max(a, b)
        text = "{}\n{}".format(pbplot.fmt_delta_ms(b, a), pbplot.fmt_delta_pct(b, a)) if a else "new"
        ax.annotate(text, (x[i], top), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                    fontsize=7, color=pbplot.delta_colour(b, a))
    if bar_names:
        ax.set_xticks([p for xi in x for p in (xi - w / 2, xi + w / 2)], minor=True)
        ax.set_xticklabels(list(bar_names) * len(fams), minor=True)
        ax.tick_params(axis="x", which="minor", length=2, labelsize=6.5, labelrotation=90)
        ax.set_xticks(x)
        ax.set_xticklabels(fams, rotation=35 if len(fams) > 8 else 0, ha="right" if len(fams) > 8 else "center")
        ax.tick_params(axis="x", which="major", length=0, pad=6 + 3.6 * max(len(n) for n in bar_names))
    else:
        ax.set_xticks(x)
        ax.set_xticklabels(fams, rotation=35 if len(fams) > 8 else 0, ha="right" if len(fams) > 8 else "center")
    grey = "#8A8A8A"
    from matplotlib.patches import Patch
    ax.legend([Patch(facecolor=pbplot.lighter(grey, 0.55), hatch="///", edgecolor="white"),
               Patch(facecolor=grey)], labels, loc="upper right", fontsize=8, frameon=False,
              title="each family in its own colour")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="one results file, or two (A then B)")
    ap.add_argument("--variants", "--variant", help="A,B (see above)")
    ap.add_argument("--rank", type=int, help="rank to show (default: A's deepest)")
    ap.add_argument("--log", action="store_true", help="logarithmic time axis (small families visible)")
    pbplot.add_output_args(ap, "ab.png")
    a = pbplot.parse(ap)
    if len(a.files) > 2:
        sys.exit("give one or two results files, not {}".format(len(a.files)))
    handles = [pr.open_results(p) for p in a.files]
    for path, f in zip(a.files, handles):
        if pr.kind(f) not in pr.SPAN_KINDS:
            sys.exit("{}: a {} file has no per-launch spans; plot it with scripts/plot_bench.py".format(
                path, pr.kind(f)))
    sides = pick_variants(a, a.files, handles)
    check_comparable(sides)
    (pa, fa, va), (pb, fb, vb) = sides
    ma, mb = pr.family_ms(fa, va), pr.family_ms(fb, vb)
    for path, v, m in ((pa, va, ma), (pb, vb, mb)):
        if not m:
            sys.exit("{}: variant '{}' has no spans".format(path, v))
    rank = a.rank if a.rank is not None else max(ma, key=lambda r: sum(ma[r].values()))
    for path, v, m in ((pa, va, ma), (pb, vb, mb)):
        if rank not in m:
            sys.exit("{} [{}]: no rank {}; its ranks: {}".format(path, v, rank, ", ".join(map(str, sorted(m)))))
    A, B = ma[rank], mb[rank]
    fams = [k for k in sorted(set(A) | set(B), key=lambda k: -max(A.get(k, 0.0), B.get(k, 0.0)))
            if A.get(k, 0.0) > 0 or B.get(k, 0.0) > 0]
    ta, tb = sum(A.values()), sum(B.values())
    same_file = len(a.files) == 1
    named = by_precision(sides)
    labels = [side_label("A", pa, fa, va, same_file, named), side_label("B", pb, fb, vb, same_file, named)]
    names = (short_name(fa, va, named), short_name(fb, vb, named)) if named else ("", "")
    ttft = headline(sides)
    for letter, path, v, f, total in (("A", pa, va, fa, ta), ("B", pb, vb, fb, tb)):
        line = "{}: {} [{}{}] rank {}: {} {}".format(letter, path, precision(f) + ", " if named else "", v, rank,
                                                    pbplot.fmt_ms(total), pr.unit(f))
        if ttft:
            side = ttft[letter.lower()]
            line += "; {} {} ms".format(side["label"], pbplot.fmt_ms(side["ms"]))
        print(line)

    plt = pbplot.pyplot()
    fig, ax = plt.subplots(figsize=(max(8.0, 0.75 * len(fams) + 3.0), 5.6), constrained_layout=True)
    draw(ax, fams, A, B, labels, names if named else None)
    top = max(max(A.values()), max(B.values()))
    if a.log:
        ax.set_yscale("log")
        ax.set_ylim(top * 1e-4, top * 4)
    else:
        ax.set_ylim(0, top * 1.18)
    ax.set_ylabel(pr.unit(fa) if pr.unit(fa) == pr.unit(fb) else "ms per superstep (A {}, B {})".format(
        "roofline" if pr.kind(fa) == "plan" else "measured", "roofline" if pr.kind(fb) == "plan" else "measured"))
    files = pr.describe_file(pa, fa) if same_file else "A {}\nB {}".format(pr.describe_file(pa, fa),
                                                                            pr.describe_file(pb, fb))
    per_rank = "per family, rank {}, the sum of its spans: A {} ms → B {} ms ({}, {})".format(
        rank, pbplot.fmt_ms(ta), pbplot.fmt_ms(tb), pbplot.fmt_delta_ms(tb, ta), pbplot.fmt_delta_pct(tb, ta))
    heading = "A/B, {}\n{}".format(headline_text(ttft, names), per_rank) if ttft else "A/B " + per_rank
    pbplot.set_title(fig, heading + "\n" + files)
    pbplot.save(fig, a, {"rank": rank, "unit": pr.unit(fa), "families": fams, "ttft": ttft,
                         "by_precision": named, "bar_names": list(names) if named else None,
                         "a": {"file": pa, "variant": va, "kind": pr.kind(fa), "precision": precision(fa), "ms": A,
                               "total": ta},
                         "b": {"file": pb, "variant": vb, "kind": pr.kind(fb), "precision": precision(fb), "ms": B,
                               "total": tb}})


if __name__ == "__main__":
    pbplot.run_main(main)
