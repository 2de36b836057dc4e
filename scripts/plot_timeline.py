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
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pbplot  # noqa: E402

pbplot.require_plotting_python()

import pbresults as pr  # noqa: E402

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
    places = {int(r["span"]): (float(r["start_us"]), float(r["end_us"])) for r in g["timeline"][:]}
    return places, pick


def draw(ax, spans, places, bells, title):
    names = spans.dtype.names
    tracks = sorted({(int(spans["rank"][i]), int(spans["stream"][i]) if "stream" in names else 0) for i in places})
    y_of = {t: n for n, t in enumerate(tracks)}
    waits = set()
    if bells is not None:
        waits = {int(b["span"]) for b in bells if int(b["op"]) == 0}
    families = {}
    for i, (start, end) in places.items():
        fam = pr.text(spans["family"][i])
        track = (int(spans["rank"][i]), int(spans["stream"][i]) if "stream" in names else 0)
        y = y_of[track] * ROW
        colour = pbplot.family_colour(fam)
        ax.broken_barh([(start / 1e3, max(end - start, 0.0) / 1e3)], (y - BAR / 2, BAR), facecolors=colour,
                       hatch="xx" if i in waits else None, edgecolor="black" if i in waits else colour,
                       linewidth=0.2)
        families[fam] = families.get(fam, 0.0) + (end - start) / 1e3
    if bells is not None:  # each wait joined to the ring that met it, when both are drawn
        rings = {}
        for b in bells:
            if int(b["op"]) == 1 and int(b["span"]) in places:
                rings.setdefault((int(b["peer"]), int(b["flag"])), []).append(b)
        for b in bells:
            if int(b["op"]) != 0 or int(b["span"]) not in places:
                continue
            into = rings.get((int(b["rank"]), int(b["flag"])), [])
            if not into or int(b["value"]) < min(int(r["value"]) for r in into):
                continue  # met by an earlier rep's ring: values only grow
            for r in into:
                if int(r["rank"]) == int(b["peer"]) and int(r["value"]) >= int(b["value"]) and int(r["span"]) in places:
                    src, dst = int(r["span"]), int(b["span"])
                    ys = [y_of[(int(spans["rank"][k]), int(spans["stream"][k]) if "stream" in names else 0)] * ROW
                          for k in (src, dst)]
                    ax.plot([places[src][1] / 1e3, places[dst][0] / 1e3], ys, color="#555555", linewidth=0.4,
                            alpha=0.6)
                    break
    ax.set_yticks([y_of[t] * ROW for t in tracks])
    ax.set_yticklabels(["rank {}{}".format(r, "" if s == 0 else ", stream {}".format(s)) for r, s in tracks])
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.set_title(title, fontsize=9, loc="left")
    return families, tracks


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="a run or lane results file")
    ap.add_argument("--variant", help="the variant (default: the file's only one)")
    ap.add_argument("--rep", type=int, help="the rep (default: the last)")
    ap.add_argument("--link", help="the projected gang's link (default: measured, when present)")
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

    plt = pbplot.pyplot()
    panels = 2 if projected else 1
    ranks = len({int(spans["rank"][i]) for i in rows})
    height = max(2.4, 0.42 * ranks + 1.4)
    fig, axes = plt.subplots(panels, 1, figsize=(13, height * panels), constrained_layout=True, squeeze=False)
    title = "measured, rep {}{}".format(rep, " (no start times in the file: spans laid back to back)" if assumed else "")
    families, _ = draw(axes[0][0], spans, measured, bells, title)
    plotted = {"file": a.results, "variant": variant, "rep": rep, "assumed_starts": assumed,
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
    main()
