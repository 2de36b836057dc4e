#!/usr/bin/env python3
"""Checks of the plot scripts on the committed results (results/h200): each
writes page-sized PNGs (at most PAGE_PX on the long side) with no text outside
them and no two texts on each other, plots what it was asked to (read back
through --dump and checked against the file), and refuses bad requests with
a message and a non-zero exit.

    test_plots.py CASE|all OUT_DIR     (run under a python with h5py + matplotlib)
    test_plots.py --list
"""
import json
import os
import subprocess
import sys

from casebook import SCRIPTS, Casebook, Failed, committed, expect  # (sets sys.path for the scripts)

import h5py  # noqa: E402
import numpy as np  # noqa: E402

import pbplot  # noqa: E402

book = Casebook("test_plots.py")

PAGE_PX = 2400  # a page: the most pixels a default plot is wide or tall


def png_size(path):
    """(width, height) from the PNG's header (Failed when it is not a PNG)."""
    with open(path, "rb") as f:
        head = f.read(24)
    expect(head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", path + " is not a PNG")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def one_line(text):
    return " ".join((text or "").split())


def run(args, python=None, ok=True):
    """Runs a plot script; returns (rc, stdout + stderr)."""
    cmd = (python or [sys.executable]) + args
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
    if ok and p.returncode != 0:
        raise Failed("{} exited {}:\n{}".format(" ".join(cmd), p.returncode, p.stdout))
    return p.returncode, p.stdout


def plot(out, script, files, extra, name, page_px=PAGE_PX):
    """Runs script with -o/--dump under out; checks every PNG it wrote (each
    page) and that each is page-sized (page_px None: any size); returns the
    dump, with "sizes": each page's (width, height)."""
    png, dump = os.path.join(out, name + ".png"), os.path.join(out, name + ".json")
    _, text = run([os.path.join(SCRIPTS, script)] + files + extra + ["-o", png, "--overwrite", "--dump", dump])
    expect("wrote " + png in text, "no 'wrote {}' in:\n{}".format(png, text))
    with open(dump) as f:
        d = json.load(f)
    pages = d.get("outputs", [png])
    expect(pages[0] == png, "page 1 is {}, not the output {}".format(pages[0], png))
    d["sizes"] = []
    for page in pages:
        expect("wrote " + page in text, "no 'wrote {}' in:\n{}".format(page, text))
        size = png_size(page)
        expect(os.path.getsize(page) > 20000, page + " is suspiciously small")
        expect(page_px is None or max(size) <= page_px, "{} is {}x{} px: more than a page ({} px)".format(
            page, size[0], size[1], page_px))
        d["sizes"].append(size)
    expect(d["clipped"] == [], "text outside the figure: {}".format(d["clipped"]))
    expect(d.get("overlaps") == [], "texts on each other: {}".format(d.get("overlaps", "(not checked)")))
    d["stdout"] = text
    return d


def refused(out, script, args, message):
    png = os.path.join(out, "refused-{}.png".format(os.getpid()))  # cases may run in parallel
    if os.path.exists(png):
        os.remove(png)
    rc, text = run([os.path.join(SCRIPTS, script)] + args + ["-o", png], ok=False)
    expect(rc != 0, "{} {} exited 0; it should refuse".format(script, " ".join(args)))
    expect(message in text, "the refusal does not say '{}':\n{}".format(message, text))
    expect(not os.path.exists(png), "a refusal wrote " + png)


def family_sums_ms(path, variant, rank=0):
    """Per-family median-over-reps sums, computed here without pbresults."""
    spans = h5py.File(path, "r")["variants"][variant]["spans"][()]
    spans = spans[spans["rank"] == rank]
    out = {}
    for fam in set(spans["family"]):
        sel = spans[spans["family"] == fam]
        out[fam.decode()] = float(np.median([sel["time_us"][sel["rep"] == r].sum() for r in set(sel["rep"])])) / 1e3
    return out


def same_numbers(got, want, what):
    expect(set(got) == set(want), "{}: families {} != {}".format(what, sorted(got), sorted(want)))
    for k in want:
        expect(abs(got[k] - want[k]) <= 1e-6 * max(1.0, abs(want[k])), "{}: {} {} != {}".format(
            what, k, got[k], want[k]))


# --- anatomy ----------------------------------------------------------------

@book.case
def anatomy_run(out):
    path = committed("cp1-16k.h5")
    d = plot(out, "plot_anatomy.py", [path], [], "anatomy-run")
    expect(d["variants"] == ["baseline", "all"], "default variants: {}".format(d["variants"]))
    for v in d["variants"]:
        same_numbers(d["ms"][v]["0"], family_sums_ms(path, v), "anatomy " + v)
        expect(abs(d["totals"][v]["0"] - sum(d["ms"][v]["0"].values())) < 1e-6, "total of " + v)


@book.case
def anatomy_lane(out):
    d = plot(out, "plot_anatomy.py", [committed("lane-cp8-128k.h5")], ["--variants", "all"], "anatomy-lane")
    expect(d["unit"] == "ms per MLA layer (measured)", "lane unit: " + d["unit"])
    expect(d["variants"] == ["all"] and d["ranks"] == list(range(8)), "lane variants/ranks")
    expect("TTFT" not in json.dumps(d), "a lane plot mentions TTFT")


@book.case
def anatomy_wrapped(out):
    """Forty bars (cp4, ten variants a rank) wrap onto rows of panels within a
    page, every rank's bars in one row, no label on another (plot checks)."""
    path = committed("cp4-64k-each-cut.h5")
    d = plot(out, "plot_anatomy.py", [path], [], "anatomy-wrapped")
    variants = list(h5py.File(path, "r")["variants"].keys())
    expect(d["variants"] == variants and len(variants) == 10, "variants: {}".format(d["variants"]))
    rows = d.get("rows", [])
    expect(len(rows) > 1, "{} row(s) of panels; {} bars want more than one".format(len(rows), 4 * len(variants)))
    drawn = [(g["rank"], v) for row in rows for g in row for v in g["variants"]]
    expect(drawn == [(r, v) for r in range(4) for v in variants], "bars drawn: {}".format(drawn))
    expect(all(g["variants"] == variants for row in rows for g in row), "a rank's bars split across rows")
    for v in ("baseline", "all"):
        same_numbers(d["ms"][v]["3"], family_sums_ms(path, v, rank=3), "anatomy rank 3 " + v)


# --- A/B --------------------------------------------------------------------

@book.case
def ab_one_file(out):
    path = committed("cp1-16k.h5")
    d = plot(out, "plot_ab.py", [path], ["--variants", "baseline,all"], "ab-one-file")
    expect((d["a"]["variant"], d["b"]["variant"]) == ("baseline", "all"), "variants plotted")
    same_numbers(d["a"]["ms"], family_sums_ms(path, "baseline"), "A")
    same_numbers(d["b"]["ms"], family_sums_ms(path, "all"), "B")
    walls = h5py.File(path, "r")["variants"]
    for side, v in (("a", "baseline"), ("b", "all")):
        want = {"ms": float(np.median(walls[v]["ttft_ms"][()])), "label": "TTFT"}
        expect(d["ttft"][side] == want, "{} TTFT {} (want {})".format(side, d["ttft"][side], want))


@book.case
def ab_two_files(out):
    pa, pb = committed("cp1-16k.h5"), committed("cp1-16k-each-cut.h5")
    d = plot(out, "plot_ab.py", [pa, pb], ["--variants", "baseline,land"], "ab-two-files")
    expect((d["a"]["file"], d["a"]["variant"]) == (pa, "baseline"), "A: {}".format(d["a"]))
    expect((d["b"]["file"], d["b"]["variant"]) == (pb, "land"), "B: {}".format(d["b"]))
    same_numbers(d["a"]["ms"], family_sums_ms(pa, "baseline"), "A = baseline of " + pa)
    same_numbers(d["b"]["ms"], family_sums_ms(pb, "land"), "B = land of " + pb)
    expect(d["b"]["ms"]["land"] < 0.5 * family_sums_ms(pb, "baseline")["land"], "B's land is not the cut's")
    expect("A: {} [baseline]".format(pa) in d["stdout"] and "B: {} [land]".format(pb) in d["stdout"],
           "the summary lines:\n" + d["stdout"])


@book.case
def ab_two_files_one_name(out):
    pa, pb = committed("cp1-16k.h5"), committed("cp1-16k-each-cut.h5")
    d = plot(out, "plot_ab.py", [pa, "--variants", "all", pb], [], "ab-one-name")  # flags between files
    expect((d["a"]["variant"], d["b"]["variant"]) == ("all", "all"), "one name for both")
    same_numbers(d["b"]["ms"], family_sums_ms(pb, "all"), "B = all of " + pb)


@book.case
def ab_projected(out):
    """Serialized ranks: A/B of the projected gang's TTFT, not the serialized wall."""
    pa, pb = committed("cp4-64k.h5"), committed("cp4-64k-each-cut.h5")
    d = plot(out, "plot_ab.py", [pa, pb], ["--variants", "baseline,all"], "ab-projected")
    for side, path, v in (("a", pa, "baseline"), ("b", pb, "all")):
        reps = h5py.File(path, "r")["variants"][v]["projection"]["measured"]["reps"][()]
        want = {"ms": float(np.median(reps["ttft_ms"])), "label": "projected gang TTFT"}
        expect(d["ttft"][side] == want, "{} TTFT {} (want {})".format(side, d["ttft"][side], want))


@book.case
def ab_precision(out):
    """bf16 against fp8, two files of one scenario: each side named by its
    precision and variant (legend, under each bar, the title's TTFT)."""
    pa, pb = committed("cp1-16k.h5"), committed("cp1-16k-fp8.h5")
    d = plot(out, "plot_ab.py", [pa, pb], ["--variants", "all"], "ab-precision")
    expect((d["a"].get("precision"), d["b"].get("precision")) == ("bf16", "fp8"), "precisions: {} / {}".format(
        d["a"].get("precision"), d["b"].get("precision")))  # cp1-16k.h5 predates the key: bf16
    expect(d.get("bar_names") == ["bf16 · all", "fp8 · all"], "bar names: {}".format(d.get("bar_names")))
    expect(d["legend"] == ["A: cp1-16k.h5 [bf16, all (8 cuts)] (run)", "B: cp1-16k-fp8.h5 [fp8, all (9 cuts)] (run)"],
           "legend: {}".format(d["legend"]))
    same_numbers(d["a"]["ms"], family_sums_ms(pa, "all"), "A = all of " + pa)
    same_numbers(d["b"]["ms"], family_sums_ms(pb, "all"), "B = all of " + pb)
    expect("quant" in d["b"]["ms"] and "quant" not in d["a"]["ms"], "fp8's quant family")
    title = one_line(d["titles"][0])
    for side, path, name in (("a", pa, "A (bf16 · all)"), ("b", pb, "B (fp8 · all)")):
        want = float(np.median(h5py.File(path, "r")["variants"]["all"]["ttft_ms"][()]))  # both measured (cp 1)
        expect(d["ttft"][side] == {"ms": want, "label": "TTFT"}, "{} TTFT {}".format(side, d["ttft"][side]))
        expect("{} {} ms".format(name, pbplot.fmt_ms(want)) in title, "title has no '{} {} ms': {}".format(
            name, pbplot.fmt_ms(want), title))
    expect("[bf16, all]" in d["stdout"] and "[fp8, all]" in d["stdout"], "summary lines:\n" + d["stdout"])
    one = plot(out, "plot_ab.py", [pa], ["--variants", "baseline,all"], "ab-one-precision")
    expect(one["bar_names"] is None and "bf16" not in json.dumps(one["legend"]), "one precision: {} {}".format(
        one["bar_names"], one["legend"]))


@book.case
def ab_refusals(out):
    pa, pb = committed("cp1-16k.h5"), committed("cp1-16k-each-cut.h5")
    refused(out, "plot_ab.py", [pa, pb, "--variants", "baseline,nosuch"],
            "{}: no variant 'nosuch'; its variants: baseline, all, land, conv".format(pb))
    refused(out, "plot_ab.py", [pa, "--variants", "nosuch,all"], "{}: no variant 'nosuch'; its variants: baseline, all"
            .format(pa))
    refused(out, "plot_ab.py", [pa, pb], "two files: give --variants a,b")
    refused(out, "plot_ab.py", [pa, "--variants", "all"], "one file: give --variants A,B")
    refused(out, "plot_ab.py", [pa, committed("lane-cp8-128k.h5"), "--variants", "all"], "not comparable")
    refused(out, "plot_ab.py", [committed("kernels.h5"), "--variants", "baseline,cut"], "plot_bench.py")


# --- one plot per kind ------------------------------------------------------

def bench_case(out, name, reference):
    path = committed(name + ".h5")
    d = plot(out, "plot_bench.py", [path], [], "bench-" + name)
    table = h5py.File(path, "r")["bench"][()]
    plotted = sum(len(c["rows"]) for s in d["sections"] for c in s["cases"])
    expect(plotted == len(table), "{}: plotted {} of {} rows".format(name, plotted, len(table)))
    first = d["sections"][0]
    expect(first["variants"][0] == reference, "{}: reference {} (want {})".format(
        name, first["variants"][0], reference))
    for s in d["sections"]:
        for c in s["cases"]:
            for side, r in c["rows"].items():
                expect(r["variant"] in (side, s["section"] + "." + side), "{}: side {} of variant {}".format(
                    name, side, r["variant"]))
                match = table[(table["kernel"] == c["kernel"].encode()) & (table["shape"] == c["shape"].encode())
                              & (table["variant"] == r["variant"].encode())]
                expect(len(match) == 1 and match["fraction"][0] == r["fraction"]
                       and match["median_us"][0] == r["median_us"],
                       "{}: {} {} {} does not match the file".format(name, c["kernel"], c["shape"], side))
    return d


@book.case
def bench_kernels(out):
    bench_case(out, "kernels", "baseline")


@book.case
def bench_fmha(out):
    bench_case(out, "fmha", "native")


@book.case
def bench_kda(out):
    bench_case(out, "kda", "native")


@book.case
def bench_moe(out):
    """Six panels (three of 22 cases) do not fit a page: they continue on
    pages beside the output, in order, each page-sized (plot checks)."""
    d = bench_case(out, "moe", "loop")
    blocks = [s["section"] for s in d["sections"]]
    expect("moe_block" in blocks and d["sections"][blocks.index("moe_block")]["variants"] == ["none", "all"],
           "moe blocks: {}".format(blocks))
    expect(len(d["sizes"]) > 1, "one page of {}x{} px".format(*d["sizes"][0]))
    stem = os.path.join(out, "bench-moe")
    expect(d["outputs"] == [stem + ".png"] + ["{}-p{}.png".format(stem, k) for k in range(2, len(d["outputs"]) + 1)],
           "pages: {}".format(d["outputs"]))
    on_pages = [sec for page in d["pages"] for sec in page]
    expect(ordered_unique(on_pages) == blocks, "sections on the pages {} != {}".format(d["pages"], blocks))
    for k, title in enumerate(d["titles"]):
        expect("page {} of {}".format(k + 1, len(d["titles"])) in one_line(title), "title of page {}: {}".format(
            k + 1, title))
    whole = plot(out, "plot_bench.py", [committed("moe.h5")], ["--page-height", "0"], "bench-moe-one-page",
                 page_px=None)
    expect(len(whole["sizes"]) == 1 and whole["sizes"][0][1] > PAGE_PX, "--page-height 0: {}".format(whole["sizes"]))
    page2 = os.path.join(out, "refused-{}-p2.png".format(os.getpid()))  # refused()'s output, page 2
    with open(page2, "w") as f:
        f.write("a page 2 already there")
    try:
        refused(out, "plot_bench.py", [committed("moe.h5")], page2 + " exists; pass --overwrite")
    finally:
        os.remove(page2)


def ordered_unique(xs):
    out = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


@book.case
def bench_lane(out):
    path = committed("lane-cp8-128k.h5")
    d = plot(out, "plot_bench.py", [path], [], "bench-lane")
    expect(d["unit"] == "ms per MLA layer (measured)", "lane unit: " + d["unit"])
    expect("TTFT" not in json.dumps(d), "a lane plot mentions TTFT")
    walls = h5py.File(path, "r")["variants"]["all"]["rank_reps"][()]
    want = float(np.median(walls["wall_us"][walls["rank"] == 7])) / 1e3
    expect(abs(d["ms"]["all"]["7"] - want) < 1e-9, "lane rank 7 wall {} != {}".format(d["ms"]["all"]["7"], want))


@book.case
def bench_run(out):
    path = committed("cp1-16k-each-cut.h5")
    d = plot(out, "plot_bench.py", [path], ["--variants", "baseline,land"], "bench-run")
    expect(d["variants"] == ["baseline", "land"], "run variants: {}".format(d["variants"]))
    ttft = float(np.median(h5py.File(path, "r")["variants"]["land"]["ttft_ms"][()]))
    expect(abs(d["ttft_ms"]["land"] - ttft) < 1e-9, "TTFT of land")
    expect(d["headline"]["land"] == "measured" and d["unit"] == "TTFT ms", "{} {}".format(d["headline"], d["unit"]))


@book.case
def bench_run_projected(out):
    """Serialized ranks: the projected gang's TTFT, not the serialized wall."""
    path = committed("cp4-64k.h5")
    d = plot(out, "plot_bench.py", [path], [], "bench-run-projected")
    expect(d["unit"] == "projected gang TTFT ms", "unit: " + d["unit"])
    f = h5py.File(path, "r")
    for v in ("baseline", "all"):
        ttft = float(np.median(f["variants"][v]["projection"]["measured"]["reps"][()]["ttft_ms"]))
        expect(d["headline"][v] == "projected" and abs(d["ttft_ms"][v] - ttft) < 1e-9, "{}: {} ms (want {})".format(
            v, d["ttft_ms"][v], ttft))


@book.case
def bench_refusals(out):
    refused(out, "plot_bench.py", [committed("kernels.h5"), "--variants", "baseline,nosuch"],
            "no variant 'nosuch'; its variants: baseline, cut")
    refused(out, "plot_bench.py", [committed("kernels.h5"), "--family", "nosuch"], "no family or block 'nosuch'")
    refused(out, "plot_bench.py", [committed("lane-cp8-128k.h5"), "--variants", "nosuch"],
            "no variant 'nosuch'; its variants: baseline, all")


# --- what every plot is checked for -----------------------------------------

@book.case
def overlap_detector(out):
    """pbplot.overlapping_texts, which plot() holds every plot to, finds two
    labels on each other; not labels apart, nor a label over the tick labels
    of an axes turned off (not drawn)."""
    plt = pbplot.pyplot()
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.annotate("−20.5%", (0.5, 0.5))
    ax.annotate("−11.2%", (0.51, 0.5))
    ax.annotate("apart", (0.1, 0.1))
    off = fig.add_axes([0.1, 0.75, 0.8, 0.1])
    off.set_xticks([0.0, 0.5, 1.0])
    off.axis("off")
    fig.text(0.1, 0.75, "heading over the hidden ticks", va="top")
    got = pbplot.overlapping_texts(fig)
    expect(sorted(map(sorted, got)) == [["−11.2%", "−20.5%"]], "overlaps found: {}".format(got))
    off.axis("on")
    got = pbplot.overlapping_texts(fig)
    expect(any("heading over the hidden ticks" in pair for pair in got), "ticks shown under the heading: {}".format(
        got))
    plt.close(fig)


# --- finding a python -------------------------------------------------------

# --- timeline ---------------------------------------------------------------

@book.case
def timeline_layers(out):
    path = committed("cp8-128k.h5")
    d = plot(out, "plot_timeline.py", [path], ["--variant", "all", "--layers", "2-3"], "timeline-layers")
    expect(d["layers"] == [2, 3], "layers plotted: {}".format(d["layers"]))
    spans = h5py.File(path, "r")["variants"]["all"]["spans"][()]
    sel = spans[(spans["rep"] == spans["rep"].max()) & (spans["layer"] >= 2) & (spans["layer"] <= 3)]
    want = {}
    for fam in set(sel["family"]):
        want[fam.decode()] = float(sel["time_us"][sel["family"] == fam].sum()) / 1e3
    expect(set(d["measured_ms"]) == set(want), "families plotted: {}".format(d["measured_ms"]))
    for fam, ms in want.items():  # the dump rounds to µs
        expect(abs(d["measured_ms"][fam] - ms) <= 1e-3, "timeline layers 2-3: {} {} != {}".format(
            fam, d["measured_ms"][fam], ms))
    expect(set(d["projected_ms"]) == set(want), "the projected panel's families: {}".format(d["projected_ms"]))
    refused(out, "plot_timeline.py", [path, "--variant", "all", "--layers", "5-3"], "--layers wants 0 <= a <= b")


def layer_family_ms(path, variant, lo, hi):
    """The last rep's ms per family in layers lo..hi (None: every span)."""
    spans = h5py.File(path, "r")["variants"][variant]["spans"][()]
    sel = spans[spans["rep"] == spans["rep"].max()]
    if lo is not None:
        sel = sel[(sel["layer"] >= lo) & (sel["layer"] <= hi)]
    return {fam.decode(): float(sel["time_us"][sel["family"] == fam].sum()) / 1e3 for fam in set(sel["family"])}


def same_rounded(got, want, what):
    expect(set(got) == set(want), "{}: families {} != {}".format(what, sorted(got), sorted(want)))
    for fam, ms in want.items():  # the dump rounds to µs
        expect(abs(got[fam] - ms) <= 1e-3, "{}: {} {} != {}".format(what, fam, got[fam], ms))


@book.case
def timeline_default_window(out):
    """Without --layers a 93-layer run is drawn in its first four layers (one
    MLA period), and the title says so; --layers all draws every span; a lane
    file (one layer) needs no window."""
    path = committed("cp1-16k.h5")
    d = plot(out, "plot_timeline.py", [path], ["--variant", "all"], "timeline-default-window")
    expect(d["layers"] == [0, 3] and d.get("default_window") is True, "layers drawn: {}".format(d["layers"]))
    same_rounded(d["measured_ms"], layer_family_ms(path, "all", 0, 3), "the default window")
    expect(any("layers 0-3 of 0-92 (the default window" in t for t in d.get("panel_titles", [])),
           "the window is not said: {}".format(d.get("panel_titles")))
    every = plot(out, "plot_timeline.py", [path], ["--variant", "all", "--layers", "all"], "timeline-all-layers")
    expect(every["layers"] is None, "--layers all: {}".format(every["layers"]))
    same_rounded(every["measured_ms"], layer_family_ms(path, "all", None, None), "--layers all")
    lane = plot(out, "plot_timeline.py", [committed("lane-cp4-64k.h5")], ["--variant", "all"], "timeline-lane")
    expect(lane["layers"] is None, "a lane file's window: {}".format(lane["layers"]))


@book.case
def timeline_marks(out):
    """Every mark drawn has a legend entry: the hatched doorbell waits and the
    lines from a ring to the wait it met, beside the families."""
    path = committed("cp8-128k.h5")
    d = plot(out, "plot_timeline.py", [path], ["--variant", "all", "--layers", "2-3"], "timeline-marks")
    legend = d.get("legend", [])
    for label in ("doorbell wait (hatched)", "ring → the wait it met"):
        expect(label in legend, "no legend entry '{}': {}".format(label, legend))
    expect(sorted(set(d["measured_ms"])) == legend[:len(d["measured_ms"])], "the families' entries: {}".format(legend))
    lone = plot(out, "plot_timeline.py", [committed("cp1-16k.h5")], ["--variant", "all", "--layers", "2-3"],
                "timeline-no-marks")  # one rank: no doorbells, no entries for them
    expect(not any("doorbell" in x or "ring" in x for x in lone["legend"]), "cp1 legend: {}".format(lone["legend"]))


@book.case
def timeline_slimmed(out):
    """A slimmed file (no projected timeline): the measured panel, and one line
    on stderr (and in the title) that the projected one needs the full file or
    `prefill-bench trace`."""
    path = committed("cp4-64k-each-cut.h5")
    d = plot(out, "plot_timeline.py", [path], ["--variant", "all", "--layers", "2-3"], "timeline-slimmed")
    same_rounded(d["measured_ms"], layer_family_ms(path, "all", 2, 3), "the measured panel")
    expect("projected_ms" not in d, "a projected panel from a slimmed file")
    said = [l for l in d["stdout"].splitlines() if not l.startswith("wrote ")]
    expect(len(said) == 1 and "slimmed" in said[0] and "prefill-bench trace" in said[0] and "full file" in said[0],
           "what stderr says of the slimmed file:\n" + d["stdout"])
    expect("prefill-bench trace" in one_line(d["titles"][0]), "the title does not say it: " + d["titles"][0])


@book.case
def sweep_panels(out):
    """plot_sweep.py on the committed paper sweep (docs/sweep.md): one page,
    every point of both variants drawn as planned, the context where the FMHA
    overtakes the weight GEMMs found at every cp, the efficiency of each
    context starting at 1 at its smallest cp, the seed's points in the legend;
    a file that is not a sweep is refused."""
    d = plot(out, "plot_sweep.py", [committed("sweep-1m-plan.h5")], [], "sweep")
    points = d["points"]
    with h5py.File(committed("sweep-1m-plan.h5"), "r") as f:
        in_file = len(f["point_table"])
    expect(len(points) == 2 * in_file, "{} points drawn, want {} points x 2 variants".format(len(points), in_file))
    expect({p["status"] for p in points} == {"planned"}, "statuses {}".format({p["status"] for p in points}))
    expect(all(p["ttft_ms"] > 0 and 0 < p["mfu"] < 1 for p in points), "a point without TTFT or MFU")
    cps = {p["cp"] for p in points}
    crossed = {c["cp"] for c in d["crossings"] if c["variant"] == "all"}
    expect(crossed == cps, "FMHA overtakes the GEMMs at cp {}, want every cp {}".format(sorted(crossed), sorted(cps)))
    series = {(p["context"], p["precision"], p["variant"]) for p in points}  # each swept over several cp
    expect(len(d["efficiency"]) == len(series), "efficiency series {}, want {}".format(len(d["efficiency"]),
                                                                                         len(series)))
    for e in d["efficiency"]:
        expect(e["efficiency"][0] == 1.0 and all(0 < x <= 1.05 for x in e["efficiency"]),
               "efficiency {} at {}".format(e["efficiency"], e["context"]))
    expect(any("seed: GB300" in label for label in d["legend"]), "no seed points in the legend")
    expect(d["weak_efficiency"] == [], "weak scaling drawn beside the fixed-context efficiency")
    refused(out, "plot_sweep.py", [committed("cp1-16k.h5")], "not a sweep")
    # The measured sweep over cp at 16k tokens a rank: no fixed context, one weak-scaling series a variant,
    # starting at 1 at cp 1, each value the MFU's ratio to cp 1's.
    d = plot(out, "plot_sweep.py", [committed("sweep-cp-16k-per-rank.h5")], [], "sweep-cp")
    expect(d["efficiency"] == [], "fixed-context efficiency drawn for a sweep over tokens a rank")
    expect(len(d["weak_efficiency"]) == 2, "weak-scaling series {}".format(d["weak_efficiency"]))
    mfu = {(p["cp"], p["variant"]): p["mfu"] for p in d["points"]}
    for w in d["weak_efficiency"]:
        expect(w["segment"] == 16384 and w["cp"] == [1, 2, 4, 8], "series {}".format(w))
        want = [mfu[(c, w["variant"])] / mfu[(1, w["variant"])] for c in w["cp"]]
        expect(all(abs(a - b) < 1e-12 for a, b in zip(w["efficiency"], want)), "{} != {}".format(w, want))


@book.case
def sweep_measured_beside_plan(out):
    """plot_sweep.py on the measured cp 8 sweeps and their calibrated plan
    (docs/sweep.md): the TTFT panel draws each measured series and its planned
    one apart (their own legend entries), and the other panels read only the
    measured point where the plan has the same one."""
    files = [committed("sweep-cp8-context-{}.h5".format(p)) for p in ("fp8", "bf16", "plan")]
    d = plot(out, "plot_sweep.py", files, [], "sweep-beside")
    statuses = {}
    for p in d["points"]:
        statuses.setdefault((p["context"], p["precision"], p["variant"]), set()).add(p["status"])
    expect(len(statuses) == 16 and all(s == {"measured", "planned"} for s in statuses.values()),
           "every point measured and planned: {}".format(statuses))
    for precision in ("fp8", "bf16"):
        for variant in ("baseline", "all"):
            for status in ("measured", "planned"):
                label = "cp 8 {} {} {}".format(precision, variant, status)
                expect(label in d["legend"], "no legend entry '{}' in {}".format(label, d["legend"]))
    other = d["other_panels_points"]
    expect(len(other) == 16 and {s for _, _, s in other} == {"measured"},
           "the other panels drew {}".format(other))


def candidates_with_modules():
    return [p for p in pbplot.default_candidates() if pbplot._has_plotting_modules(p)]


@book.case
def python_reexec(out):
    """Under a python that cannot import them (-I -S hides site-packages), a
    script re-executes under one that can, or says how to get one."""
    png = os.path.join(out, "reexec.png")
    rc, text = run([os.path.join(SCRIPTS, "plot_bench.py"), committed("fmha.h5"), "-o", png, "--overwrite"],
                   python=[sys.executable, "-I", "-S"], ok=False)
    if candidates_with_modules():
        expect(rc == 0 and "wrote " + png in text, "no re-exec:\n" + text)
    else:
        expect(rc != 0 and pbplot.INSTALL_HINT in text, "no hint:\n" + text)


@book.case
def python_missing(out):
    code = ("import sys; sys.path.insert(0, {!r}); import pbplot; "
            "pbplot.require_plotting_python(candidates=['/nonexistent/python3'])").format(SCRIPTS)
    rc, text = run(["-c", code], python=[sys.executable, "-I", "-S"], ok=False)
    expect(rc == 1, "exit {} (want 1)".format(rc))
    expect(pbplot.INSTALL_HINT in text, "no hint:\n" + text)


if __name__ == "__main__":
    book.main()
