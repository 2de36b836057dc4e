#!/usr/bin/env python3
"""One rep of a run as a timeline: a row per rank (and stream), a bar per span
coloured by family, doorbell waits hatched and their rings joined by a line
(the legend names every mark). With a projected gang in the file, a second
panel draws it the same way.

    scripts/plot_timeline.py run.h5 [--variant all] [--rep 2] [--link measured] [--layers 2-3|all] [-o timeline.png]

By default a run of more than {n} layers is drawn in a window of its first {n}
(layers 0-{last}: one MLA period, three KDA layers and an MLA layer), the
title says so; --layers a-b picks others, --layers all draws every span.
Spans lie at their measured start (files of schema 3 on); older files lay each
rank's spans back to back, and the title says so. A slimmed file (`prefill-bench
slim`) holds no projected timeline: its measured panel is drawn, and a line (in
the title and on stderr) says that the projected panel needs the full file or
`prefill-bench trace`. The same data as `prefill-bench trace` (Perfetto), as a
picture for READMEs and reviews.
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
DEFAULT_LAYERS = 4  # the default window: the first layers of the rep (one MLA period)
__doc__ = __doc__.format(n=DEFAULT_LAYERS, last=DEFAULT_LAYERS - 1)
FLOW = "#555555"    # a ring's line to the wait it met
WAIT_HATCH = "xx"


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
    """(span row -> projected (start, end) µs, the link, None), or (None, link,
    why) where the file holds the projection but not its timeline (a slimmed
    file), or (None, None, None) where it holds no projection."""
    base = "variants/{}/projection".format(variant)
    if base not in f:
        return None, None, None
    links = list(f[base].keys())
    pick = link or ("measured" if "measured" in links else links[0])
    if pick not in links:
        sys.exit("variant {} has no projection over link '{}'; it has {}".format(variant, pick, ", ".join(links)))
    g = f["{}/{}".format(base, pick)]
    if "timeline" not in g:
        return None, pick, ("no projected panel: a slimmed file holds no projected timeline; plot the full file, "
                            "or `prefill-bench trace {}` replays it".format(os.path.basename(f.filename)))
    places = {int(r["span"]): (float(r["start_us"]), float(r["end_us"])) for r in g["timeline"][:]}
    return places, pick, None


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
    """Draws places on ax; returns (ms per family, tracks, the marks drawn:
    a subset of {"wait", "ring"})."""
    tracks = sorted({track_of(spans, i) for i in places})
    y_of = {t: n * ROW for n, t in enumerate(tracks)}
    waits = {int(b["span"]) for b in bells if int(b["op"]) == 0} if bells is not None else set()
    families, bars, marks = {}, {}, set()
    for i, (start, end) in places.items():  # one artist per row, family and kind of bar
        fam = pr.text(spans["family"][i])
        bars.setdefault((track_of(spans, i), fam, i in waits), []).append((start / 1e3, max(end - start, 0.0) / 1e3))
        families[fam] = families.get(fam, 0.0) + (end - start) / 1e3
    for (track, fam, wait), ranges in bars.items():
        colour = pbplot.family_colour(fam)
        ax.broken_barh(ranges, (y_of[track] - BAR / 2, BAR), facecolors=colour, hatch=WAIT_HATCH if wait else None,
                       edgecolor="black" if wait else colour, linewidth=0.2)
        if wait:
            marks.add("wait")
    if bells is not None:
        segments = flow_segments(bells, places, lambda i: y_of[track_of(spans, i)])
        ax.add_collection(LineCollection(segments, colors=FLOW, linewidths=0.4, alpha=0.6))
        if segments:
            marks.add("ring")
    starts = [s for s, _ in places.values()]
    ends = [e for _, e in places.values()]
    ax.set_xlim(min(starts) / 1e3, max(ends) / 1e3)
    ax.set_yticks([y_of[t] for t in tracks])
    ax.set_yticklabels(["rank {}{}".format(r, "" if s == 0 else ", stream {}".format(s)) for r, s in tracks])
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.set_title(title, fontsize=9, loc="left")
    return families, tracks, marks


MARKS = (("wait", "doorbell wait (hatched)"), ("ring", "ring → the wait it met"))


def legend(ax, families, marks):
    """One legend: the families' colours, then every mark drawn."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    handles = [Patch(color=pbplot.family_colour(fam)) for fam in sorted(families)]
    labels = sorted(families)
    style = {"wait": Patch(facecolor="white", edgecolor="black", hatch=WAIT_HATCH, linewidth=0.3),
             "ring": Line2D([0], [0], color=FLOW, linewidth=0.8)}
    for key, label in MARKS:
        if key in marks:
            handles.append(style[key])
            labels.append(label)
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7,
              title="family; marks" if marks else "family", frameon=False)


def legend_height_in(entries):
    """The inches a legend of entries needs (fontsize 7, its title)."""
    return 0.155 * (entries + 1) + 0.3


def layer_range(text):
    """'a-b' or 'a' -> (a, b), inclusive; 'all' -> 'all'."""
    if text == "all":
        return text
    try:
        lo, _, hi = text.partition("-")
        lo, hi = int(lo), int(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError("--layers wants a or a-b (layer numbers), not '{}'".format(text))
    if lo < 0 or hi < lo:
        raise argparse.ArgumentTypeError("--layers wants 0 <= a <= b, not '{}'".format(text))
    return lo, hi


def default_window(spans, rows):
    """(first, last): the first DEFAULT_LAYERS layers the rep holds, or None
    when it holds no more than those."""
    layers = sorted({int(spans["layer"][i]) for i in rows} - {-1})
    return (layers[0], layers[DEFAULT_LAYERS - 1]) if len(layers) > DEFAULT_LAYERS else None


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
    ap.add_argument("--layers", type=layer_range, help="only the spans of these layers, a-b, or all of them "
                    "(default: the first {} layers of a run of more, 0-{}: a full-size run's 93 layers are too many "
                    "to read in one picture)".format(DEFAULT_LAYERS, DEFAULT_LAYERS - 1))
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
    projected, link, missing = projected_places(f, variant, a.link)
    if missing:
        sys.stderr.write("{}: {}\n".format(os.path.basename(sys.argv[0]), missing))
    window = default_window(spans, rows) if a.layers is None else None if a.layers == "all" else a.layers
    measured, projected = keep_layers(spans, measured, window), keep_layers(spans, projected, window)
    all_layers = sorted({int(spans["layer"][i]) for i in rows} - {-1})
    if window is None:
        layer_note = ""
    elif a.layers is None:
        layer_note = ", layers {}-{} of {}-{} (the default window; --layers a-b or all for others)".format(
            window[0], window[1], all_layers[0], all_layers[-1])
    else:
        layer_note = ", layers {}-{}".format(*window)

    plt = pbplot.pyplot()
    panels = 2 if projected else 1
    ranks = len({int(spans["rank"][i]) for i in rows})
    height = max(2.4, 0.42 * ranks + 1.4)
    fig, axes = plt.subplots(panels, 1, figsize=(13, height * panels), constrained_layout=True, squeeze=False)
    title = "measured, rep {}{}{}".format(rep, " (no start times in the file: spans laid back to back)" if assumed else "",
                                        layer_note)
    families, _, marks = draw(axes[0][0], spans, measured, bells, title)
    plotted = {"file": a.results, "variant": variant, "rep": rep, "assumed_starts": assumed,
               "layers": list(window) if window else None, "default_window": a.layers is None and window is not None,
               "measured_ms": {k: round(v, 3) for k, v in families.items()}, "projected_missing": missing}
    if projected:
        fam_p, _, marks_p = draw(axes[1][0], spans, projected, bells, "projected gang over link {} (each rank on "
                                 "its own GPU, docs/design.md §9)".format(link))
        marks |= marks_p
        plotted["projected_ms"] = {k: round(v, 3) for k, v in fam_p.items()}
        plotted["link"] = link
    legend(axes[0][0], families, marks)
    fig.set_size_inches(13, max(height * panels, legend_height_in(len(families) + len(marks)) + 1.2))
    plotted["marks"] = sorted(marks)
    pbplot.set_title(fig, "Timeline: {}\nvariant {}{}".format(pr.describe_file(a.results, f),
                                                             pr.variant_label(f, variant),
                                                             "\n" + missing if missing else ""))
    pbplot.save(fig, a, plotted)


if __name__ == "__main__":
    pbplot.run_main(main)
