#!/usr/bin/env python3
"""`prefill-bench compare --format markdown|csv|json` on the committed results:
markdown is well-formed tables, CSV parses with one row per variant, rank and
family, JSON parses; every form carries the headline TTFT that pbresults.ttft
reads from the same file, and the same savings. `scripts/sweep_table.py` in
the same formats over the committed cp 8 sweeps and their calibrated plan:
the plan's miss on each measured point as pbresults reads the two files.

    test_compare_formats.py PREFILL_BENCH   (under a python with h5py)
"""
import csv
import io
import json
import os
import subprocess
import sys

from casebook import RESULTS, ROOT, Failed, expect  # (sets sys.path for pbresults)

import pbresults as pr  # noqa: E402


def compare(exe, *args):
    p = subprocess.run([exe, "compare", *args], capture_output=True, text=True, timeout=120)
    expect(p.returncode == 0, "compare {} exited {}: {}".format(" ".join(args), p.returncode, p.stderr.strip()))
    return p.stdout


def markdown_tables(text):
    """The tables of a markdown text, each a list of rows of cells; checks
    that every row has the header's column count and a separator follows it."""
    tables, cur = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            expect(line.endswith("|"), "a table row does not end with '|': " + line)
            cur.append([c.strip() for c in line.strip("|").split("|")])
        elif cur:
            tables.append(cur)
            cur = []
    for t in tables:
        expect(len(t) >= 3, "a table without rows")
        expect(all(set(c) <= set("-:") and c for c in t[1]), "no separator under the header: {}".format(t[1]))
        expect(all(len(r) == len(t[0]) for r in t), "rows of different widths in a table headed {}".format(t[0]))
    return tables


def main():
    exe = sys.argv[1]
    each = os.path.join(RESULTS, "cp4-64k-each-cut.h5")
    f = pr.open_results(each)
    want = {v: pr.ttft(f, v) for v in pr.variant_names(f)}

    md = compare(exe, each, "--format", "markdown")
    tables = markdown_tables(md)
    expect(len(tables) == 2, "markdown: {} tables, want 2 (TTFT, families)".format(len(tables)))
    head = tables[0][0]
    expect("projected gang TTFT ms (median)" in head, "markdown: the TTFT column is not the projected gang's: {}".format(head))
    rows = {r[0].replace(" (cold)", ""): r for r in tables[0][2:]}
    expect(set(rows) == set(want), "markdown: variants {} want {}".format(sorted(rows), sorted(want)))
    # the baseline ran first with warmup 0 (its recorded overrides): marked, and the note says why
    cold = {r[0].replace(" (cold)", "") for r in tables[0][2:] if r[0].endswith(" (cold)")}
    expect(cold == {"baseline"}, "markdown: cold variants {}, want the baseline".format(sorted(cold)))
    expect("`baseline` may hold a cold start: it ran first with no warm-up rep (warmup: 0)" in md,
           "markdown: no note on the cold baseline")
    for name, ms in want.items():
        expect(rows[name][2] == "{:.1f}".format(ms), "markdown {}: TTFT {} want {:.1f}".format(name, rows[name][2], ms))
    expect(rows["all"][5] == "{:+.1f}%".format(100 * (want["all"] / want["baseline"] - 1)), "markdown: all's change")
    expect("commit" in md and "NVIDIA H200" in md, "markdown: no commit or device")

    text = compare(exe, each, "--format", "csv")
    table = list(csv.DictReader(io.StringIO(text)))
    expect(table, "csv: no rows")
    keys = {(r["variant"], r["rank"], r["family"]) for r in table}
    expect(len(keys) == len(table), "csv: a (variant, rank, family) appears twice")
    for r in table:
        expect(abs(float(r["ttft_ms"]) - want[r["variant"]]) < 1e-3, "csv: {} TTFT {}".format(r["variant"], r["ttft_ms"]))
        expect(r["ttft_form"] == "projected", "csv: form " + r["ttft_form"])
    expect({r["rank"] for r in table} == {"0", "1", "2", "3"}, "csv: ranks {}".format({r["rank"] for r in table}))

    doc = json.loads(compare(exe, os.path.join(RESULTS, "cp1-16k.h5"), os.path.join(RESULTS, "cp1-16k-fp8.h5"),
                             "--format", "json"))
    expect(doc["mode"] == "files" and len(doc["files"]) == 2, "json: mode/files")
    got = {(v["file"].endswith("fp8.h5"), v["variant"]): v for v in doc["variants"]}
    expect(len(got) == 4, "json: {} variants, want 4 (baseline and all of each file)".format(len(got)))
    for fp8, name in got:
        path = os.path.join(RESULTS, "cp1-16k-fp8.h5" if fp8 else "cp1-16k.h5")
        ms = pr.ttft(pr.open_results(path), name)
        expect(abs(got[(fp8, name)]["ttft_ms"] - ms) < 1e-6, "json: {} {} TTFT".format(path, name))
        expect(got[(fp8, name)]["ttft_form"] == "measured", "json: cp1 is measured")
        expect(got[(fp8, name)]["cold_start"] is None, "json: {} {} flagged cold: {}".format(
            path, name, got[(fp8, name)]["cold_start"]))
    expect(got[(True, "all")]["reference"]["variant"] == "all", "json: B's reference is A's same-named variant")

    # The gate's verdict in every format: the same verdicts and exit code as its text.
    base, slow = os.path.join(ROOT, "test", "data", "gate-base.h5"), os.path.join(ROOT, "test", "data", "gate-slow.h5")
    for candidate, code in ((slow, 1), (base, 0)):
        def gate(*fmt):
            p = subprocess.run([exe, "compare", "--baseline", base, candidate] + list(fmt), capture_output=True,
                               text=True)
            expect(p.returncode == code, "gate {} {}: exit {}, want {}".format(candidate, fmt, p.returncode, code))
            return p.stdout
        text = gate()
        verdict = "REGRESSED" if code else "ok"
        doc = json.loads(gate("--format", "json"))
        expect(doc["exit"] == code and [v["verdict"] for v in doc["judged"]] == [verdict, verdict],
               "gate json: {}".format(doc["judged"]))
        expect(doc["result"] in text, "gate json result '{}' not in the text verdict".format(doc["result"]))
        rows = list(csv.DictReader(io.StringIO(gate("--format", "csv"))))
        expect([r["verdict"] for r in rows] == [verdict, verdict] and {r["variant"] for r in rows} == {"baseline", "all"},
               "gate csv: {}".format(rows))
        md = gate("--format", "markdown")
        tables = markdown_tables(md)
        expect(len(tables) == 2 and [r[1] for r in tables[1][2:]] == [verdict, verdict], "gate markdown: " + md)
        expect("exit {}".format(code) in md, "gate markdown: no exit code")

    p = subprocess.run([exe, "compare", each, "--format", "xml"], capture_output=True, text=True)
    expect(p.returncode == 2 and "xml" in p.stderr, "--format xml: exit {} ({})".format(p.returncode, p.stderr.strip()))
    p = subprocess.run([exe, "compare", each, "--reference", "nope"], capture_output=True, text=True)
    expect(p.returncode == 2 and "'nope'" in p.stderr, "--reference nope: exit {}".format(p.returncode))
    sweep_table_formats()
    print("compare --format: markdown, csv and json agree with pbresults.ttft on {} and cp1-16k, and the gate's "
          "verdicts with its text; sweep_table.py's plan misses with pbresults".format(each))
    return 0


def sweep_table(*args, code=0):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sweep_table.py"), *args], capture_output=True,
                       text=True, timeout=120)
    expect(p.returncode == code, "sweep_table.py {}: exit {}, want {}: {}".format(" ".join(args), p.returncode, code,
                                                                                p.stderr.strip()))
    return p.stdout if code == 0 else p.stderr


def sweep_table_formats():
    measured = [os.path.join(RESULTS, "sweep-cp8-context-{}.h5".format(p)) for p in ("fp8", "bf16")]
    plan = os.path.join(RESULTS, "sweep-cp8-context-plan.h5")
    variants = ["baseline", "all"]
    # the misses as pbresults reads the files: (context, precision, variant) -> planned / measured - 1
    planned = {(r["context"], r["precision"], r["variant"]): r["ttft_ms"]
               for r in pr.sweep_rows(plan, pr.open_results(plan), variants)[0]}
    want = {}
    for path in measured:
        for r in pr.sweep_rows(path, pr.open_results(path), variants)[0]:
            expect(r["status"] == "measured", "{} {}: {}".format(path, r["id"], r["status"]))
            want[(r["context"], r["precision"], r["variant"])] = planned[(r["context"], r["precision"],
                                                                         r["variant"])] / r["ttft_ms"] - 1
    expect(len(want) == 16, "{} measured (point, variant) pairs, want 16".format(len(want)))

    tables = markdown_tables(sweep_table(*measured, "--against", plan, "--format", "markdown"))
    expect(len(tables) == 1 and len(tables[0]) == 2 + 8, "sweep_table markdown: {} tables".format(len(tables)))
    head = tables[0][0]
    for row in tables[0][2:]:
        cells = dict(zip(head, row))
        tokens = int(cells["context"].rstrip("k")) * 1024
        for v in variants:
            got = cells["plan miss " + v]
            expect(got == "{:+.1f}%".format(100 * want[(tokens, cells["precision"], v)]),
                   "sweep_table markdown {} {} {}: plan miss {}".format(cells["context"], cells["precision"], v, got))

    doc = json.loads(sweep_table(*measured, "--against", plan, "--format", "json"))
    expect([f["file"] for f in doc["files"]] == measured and doc["against"] == plan, "sweep_table json: files")
    expect(len(doc["points"]) == 16, "sweep_table json: {} records".format(len(doc["points"])))
    for rec in doc["points"]:
        miss = want[(rec["context"], rec["precision"], rec["variant"])]
        expect(abs(rec["plan_miss"] - miss) < 1e-12, "sweep_table json {}: miss {}".format(rec["id"], rec["plan_miss"]))
    rows = list(csv.DictReader(io.StringIO(sweep_table(measured[0], "--format", "csv"))))
    expect(len(rows) == 8 and all(r["plan_miss"] == "" for r in rows), "sweep_table csv without --against: {}".format(
        rows))
    # --against takes a calibrated plan, not a measured sweep
    said = sweep_table(measured[0], "--against", measured[1], code=2)
    expect("not a calibrated plan" in said, "sweep_table --against a measured sweep: " + said)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failed as e:
        print("test_compare_formats: FAILED: {}".format(e), file=sys.stderr)
        sys.exit(1)
