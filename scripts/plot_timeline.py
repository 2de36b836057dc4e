#!/usr/bin/env python3
"""One rep of a run as a timeline: a row per rank (and stream), a bar per span
coloured by family, doorbell waits hatched and their rings joined by a line.
With a projected gang in the file, a second panel draws it the same way.

    scripts/plot_timeline.py run.h5 [--variant all] [--rep 2] [--link measured] [-o timeline.png]

Spans lie at their measured start (files of schema 3 on); older files lay each
rank's spans back to back, and the title says so. The same data as
`prefill-bench trace` (Perfetto), as a picture for READMEs and reviews.
"""
import argparse
import bisect
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pbplot  # noqa: E402

pbplot.require_plotting_python()

import pbresults as pr  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402

ROW = 1.0     # height of a (rank, stream) row
BAR = 0.72    # bar height within it


def read_rep(f, variant, rep):
    spans = f["variants/{}/spans".format(variant)][:]
    if rep is None:
        rep = int(spans["rep"].max())
    rows = [i for i in range(len(spans)) if spans["rep"][i] == rep]
    if not rows:
        sys.exit("variant {} has no rep {} (reps 0..{})".format(variant, rep, int(spans["rep"].max())))
    bells_path = "variants/{}/bells".format(variant)
    bells = f[bells_path][:] if bells_path in f else None
    return spans, rows, bells, rep


def measured_places(spans, rows):
    """Row -> (start, end) in µs, and whether any start had to be assumed."""
    names = spans.dtype.names
    have = "start_us" in names and all(spans["start_us"][i] >= 0 for i in rows)
    cursor, places = {}, {}
    for i in rows:
        key = (int(spans["rank"][i]), int(spans["stream"][i]) if "stream" in names else 0)
        start = float(spans["start_us"][i]) if have else cursor.get(key, 0.0)
        end = start + float(spans["time_us"][i])
        cursor[key] = end
        places[i] = (start, end)
    return places, not have


def projected_places(f, variant, link):
    base = "variants/{}/projection".format(variant)
    if base not in f:
        return None, None
    links = list(f[base].keys())
    pick = link or ("measured" if "measured" in links else links[0])
    if pick not in links:
        sys.exit("variant {} has no projection over link '{}'; it has {}".format(variant, pick, ", ".join(links)))
    g = f["{}/{}".format(base, pick)]
    if "timeline" not in g:
        sys.exit("variant {}'s projection over link '{}' has no timeline: a slimmed file (prefill-bench slim); "
                 "`prefill-bench trace` replays it".format(variant, pick))
    places = {int(r["span"]): (float(r["start_us"]), float(r["end_us"])) for r in g["timeline"][:]}
    return places, pick


def track_of(spans, i):
    return int(spans["rank"][i]), int(spans["stream"][i]) if "stream" in spans.dtype.names else 0


def ring_index(bells, places):
    """(waiter, flag, ringer) -> sorted [(value, span)] of the rings drawn, and
    (waiter, flag) -> the smallest value rung (a smaller wait was met by an
    earlier rep's ring: values only grow)."""
    rings, lowest = {}, {}
    for b in bells:
        if int(b["op"]) != 1 or int(b["span"]) not in places:
            continue
        key = (int(b["peer"]), int(b["flag"]))
        value = int(b["value"])
        rings.setdefault(key + (int(b["rank"]),), []).append((value, int(b["span"])))
        lowest[key] = min(lowest.get(key, value), value)
    for v in rings.values():
        v.sort()
    return rings, lowest


def flow_segments(bells, places, y_at):
    """A line from each ring's end to the start of the wait it met."""
    rings, lowest = ring_index(bells, places)
    segments = []
    for b in bells:
        if int(b["op"]) != 0 or int(b["span"]) not in places:
            continue
        key = (int(b["rank"]), int(b["flag"]))
        value = int(b["value"])
        if key not in lowest or value < lowest[key]:
            continue
        into = rings.get(key + (int(b["peer"]),), [])
        k = bisect.bisect_left(into, (value, -1))
        if k == len(into):
            continue
        src, dst = into[k][1], int(b["span"])
        segments.append([(places[src][1] / 1e3, y_at(src)), (places[dst][0] / 1e3, y_at(dst))])
    return segments


def draw(ax, spans, places, bells, title):
    tracks = sorted({track_of(spans, i) for i in places})
    y_of = {t: n * ROW for n, t in enumerate(tracks)}
    waits = {int(b["span"]) for b in bells if int(b["op"]) == 0} if bells is not None else set()
    families, bars = {}, {}
    for i, (start, end) in places.items():  # one artist per row, family and kind of bar
        fam = pr.text(spans["family"][i])
        bars.setdefault((track_of(spans, i), fam, i in waits), []).append((start / 1e3, max(end - start, 0.0) / 1e3))
        families[fam] = families.get(fam, 0.0) + (end - start) / 1e3
    for (track, fam, wait), ranges in bars.items():
        colour = pbplot.family_colour(fam)
        ax.broken_barh(ranges, (y_of[track] - BAR / 2, BAR), facecolors=colour, hatch="xx" if wait else None,
                       edgecolor="black" if wait else colour, linewidth=0.2)
    if bells is not None:
        segments = flow_segments(bells, places, lambda i: y_of[track_of(spans, i)])
        ax.add_collection(LineCollection(segments, colors="#555555", linewidths=0.4, alpha=0.6))
    starts = [s for s, _ in places.values()]
    ends = [e for _, e in places.values()]
    ax.set_xlim(min(starts) / 1e3, max(ends) / 1e3)
    ax.set_yticks([y_of[t] for t in tracks])
    ax.set_yticklabels(["rank {}{}".format(r, "" if s == 0 else ", stream {}".format(s)) for r, s in tracks])
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.set_title(title, fontsize=9, loc="left")
    return families, tracks


def layer_range(text):
    """'a-b' or 'a' -> (a, b), inclusive."""
    try:
        lo, _, hi = text.partition("-")
        lo, hi = int(lo), int(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError("--layers wants a or a-b (layer numbers), not '{}'".format(text))
    if lo < 0 or hi < lo:
        raise argparse.ArgumentTypeError("--layers wants 0 <= a <= b, not '{}'".format(text))
    return lo, hi


def keep_layers(spans, places, layers):
    if places is None or layers is None:
        return places
    lo, hi = layers
    kept = {i: p for i, p in places.items() if lo <= int(spans["layer"][i]) <= hi}
    if not kept:
        sys.exit("no spans in layers {}-{}".format(lo, hi))
    return kept


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="a run or lane results file")
    ap.add_argument("--variant", help="the variant (default: the file's only one)")
    ap.add_argument("--rep", type=int, help="the rep (default: the last)")
    ap.add_argument("--link", help="the projected gang's link (default: measured, when present)")
    ap.add_argument("--layers", type=layer_range, help="only the spans of these layers, a-b (a full-size run's "
                    "93 layers are too many to read in one picture)")
    pbplot.add_output_args(ap, "timeline.png")
    a = pbplot.parse(ap)
    f = pr.open_results(a.results)
    variants = pr.variant_names(f)
    variant = a.variant or (variants[0] if len(variants) == 1 else None)
    if variant is None:
        sys.exit("{} holds variants {}; pick one with --variant".format(a.results, ", ".join(variants)))
    pr.check_variants(a.results, f, [variant])
    spans, rows, bells, rep = read_rep(f, variant, a.rep)
    measured, assumed = measured_places(spans, rows)
    projected, link = projected_places(f, variant, a.link)
    measured, projected = keep_layers(spans, measured, a.layers), keep_layers(spans, projected, a.layers)

    plt = pbplot.pyplot()
    panels = 2 if projected else 1
    ranks = len({int(spans["rank"][i]) for i in rows})
    height = max(2.4, 0.42 * ranks + 1.4)
    fig, axes = plt.subplots(panels, 1, figsize=(13, height * panels), constrained_layout=True, squeeze=False)
    title = "measured, rep {}{}{}".format(rep, " (no start times in the file: spans laid back to back)" if assumed else "",
                                        ", layers {}-{}".format(*a.layers) if a.layers else "")
    families, _ = draw(axes[0][0], spans, measured, bells, title)
    plotted = {"file": a.results, "variant": variant, "rep": rep, "assumed_starts": assumed,
               "layers": list(a.layers) if a.layers else None,
               "measured_ms": {k: round(v, 3) for k, v in families.items()}}
    if projected:
        fam_p, _ = draw(axes[1][0], spans, projected, bells,
                        "projected gang over link {} (each rank on its own GPU, docs/design.md §9)".format(link))
        plotted["projected_ms"] = {k: round(v, 3) for k, v in fam_p.items()}
        plotted["link"] = link
    handles = [plt.Rectangle((0, 0), 1, 1, color=pbplot.family_colour(fam)) for fam in sorted(families)]
    axes[0][0].legend(handles, sorted(families), loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7,
                      title="family", frameon=False)
    pbplot.set_title(fig, "Timeline: {}\nvariant {}".format(pr.describe_file(a.results, f),
                                                           pr.variant_label(f, variant)))
    pbplot.save(fig, a, plotted)


if __name__ == "__main__":
    pbplot.run_main(main)
