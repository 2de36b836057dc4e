#!/usr/bin/env python3
"""Checks of the plot scripts on the committed results (results/h200): each
writes a PNG with no text outside it, plots what it was asked to (read back
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


def run(args, python=None, ok=True):
    """Runs a plot script; returns (rc, stdout + stderr)."""
    cmd = (python or [sys.executable]) + args
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
    if ok and p.returncode != 0:
        raise Failed("{} exited {}:\n{}".format(" ".join(cmd), p.returncode, p.stdout))
    return p.returncode, p.stdout


def plot(out, script, files, extra, name):
    """Runs script with -o/--dump under out; checks the PNG; returns the dump."""
    png, dump = os.path.join(out, name + ".png"), os.path.join(out, name + ".json")
    _, text = run([os.path.join(SCRIPTS, script)] + files + extra + ["-o", png, "--overwrite", "--dump", dump])
    expect("wrote " + png in text, "no 'wrote {}' in:\n{}".format(png, text))
    with open(png, "rb") as f:
        head = f.read(8)
    expect(head == b"\x89PNG\r\n\x1a\n", png + " is not a PNG")
    expect(os.path.getsize(png) > 20000, png + " is suspiciously small")
    with open(dump) as f:
        d = json.load(f)
    expect(d["clipped"] == [], "text outside the figure: {}".format(d["clipped"]))
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
    d = bench_case(out, "moe", "loop")
    blocks = [s["section"] for s in d["sections"]]
    expect("moe_block" in blocks and d["sections"][blocks.index("moe_block")]["variants"] == ["none", "all"],
           "moe blocks: {}".format(blocks))


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
    refused(out, "plot_timeline.py", [committed("cp4-64k-each-cut.h5"), "--variant", "all"],
            "has no timeline: a slimmed file")


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
