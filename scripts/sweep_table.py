#!/usr/bin/env python3
"""Sweep files' points as one table (`prefill-bench sweep`, docs/sweep.md):
text for a terminal, markdown for a pull request or the docs, csv and json
for a dashboard.

    scripts/sweep_table.py sweep.h5 [more.h5 ...] [--against plan.h5] [--variants baseline,all]
                           [--format text|markdown|csv|json]

One row per point (context, cp, precision), the files' points in order: its
status (measured or planned), the memory of its fullest GPU, each variant's
TTFT (a measured point's headline TTFT, a planned one's calibrated plan where
it was calibrated, else its roofline), the last variant's saving against the
first, each variant's MFU against the datasheet's dense bf16 peak, and the
last variant's parallel efficiency over cp at that context, as `sweep` stored
it (T(c0) x c0 / (T(cp) x cp), c0 the smallest cp swept there; "-" when the
context has one cp). --against names a calibrated plan of the same points
(`sweep --plan --calibrate`) and adds, per variant, its miss on each measured
point: planned / measured - 1 ("-" where the plan has no such point). csv and
json hold one record per point and variant. Failed points are listed after
the table (text, markdown) or with their error (csv, json). Exit 2 on a file
that is not a sweep, or an --against file that is not a calibrated plan.
"""
import argparse
import csv
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pbplot  # noqa: E402

pbplot.require_plotting_python()  # a python3 with h5py

import pbresults as pr  # noqa: E402


def context_label(tokens):
    return "{}M".format(tokens // (1 << 20)) if tokens >= (1 << 20) and tokens % (1 << 20) == 0 else \
        "{}k".format(tokens // 1024)


def seconds(ms):
    return "{:.1f} s".format(ms / 1e3) if ms >= 1e4 else "{:.2f} s".format(ms / 1e3)


def percent(x):
    return "-" if x is None else "{:.0f}%".format(100 * x)


def points_of(rows, variants):
    """[(point key, {variant: row})] in the file's order."""
    order, by_point = [], {}
    for r in rows:
        key = (r["file"], r["id"])
        if key not in by_point:
            order.append(key)
            by_point[key] = {}
        by_point[key][r["variant"]] = r
    return [(k, by_point[k]) for k in order]


def plan_misses(rows, plan_path, variants):
    """Sets each row's plan_ms and plan_miss (planned / measured - 1; None but
    on a measured point the plan file has, matched by context, cp, precision
    and variant); exits when a point of the plan file is not calibrated."""
    def key(r):
        return r["context"], r["cp"], r["precision"], r["variant"]

    planned, _ = pr.sweep_rows(plan_path, pr.open_results(plan_path), variants)
    out = {}
    for r in planned:
        if r["status"] != "planned" or not r["calibrated"]:
            sys.exit("{}: point {} is not a calibrated plan: --against takes the file of "
                     "`prefill-bench sweep --plan --calibrate`".format(plan_path, r["id"]))
        out[key(r)] = r["ttft_ms"]
    for r in rows:
        plan_ms = out.get(key(r)) if r["status"] == "measured" else None
        r["plan_ms"] = plan_ms
        r["plan_miss"] = None if plan_ms is None else plan_ms / r["ttft_ms"] - 1


def table_lines(rows, variants, against):
    head = ["context", "cp", "precision", "status", "GB a GPU"] + ["{} TTFT".format(v) for v in variants]
    if len(variants) > 1:
        head.append("{} vs {}".format(variants[-1], variants[0]))
    head += ["MFU {}".format(v) for v in variants] + ["efficiency ({})".format(variants[-1])]
    if against:
        head += ["plan miss {}".format(v) for v in variants]
    body = []
    for _, point in points_of(rows, variants):
        any_row = next(iter(point.values()))
        cells = [context_label(any_row["context"]), str(any_row["cp"]), any_row["precision"], any_row["status"],
                 "-" if any_row["memory_gb"] is None else "{:.0f}".format(any_row["memory_gb"])]
        cells += [seconds(point[v]["ttft_ms"]) if v in point else "-" for v in variants]
        if len(variants) > 1:
            first, last = point.get(variants[0]), point.get(variants[-1])
            cells.append("{:+.1f}%".format(100 * (last["ttft_ms"] / first["ttft_ms"] - 1)) if first and last else "-")
        cells += [percent(point[v]["mfu"]) if v in point else "-" for v in variants]
        last = point.get(variants[-1])
        cells.append(percent(last["efficiency"] if last else None))
        if against:
            cells += ["-" if v not in point or point[v]["plan_miss"] is None
                      else "{:+.1f}%".format(100 * point[v]["plan_miss"]) for v in variants]
        body.append(cells)
    return head, body


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="sweep files")
    ap.add_argument("--against", help="a calibrated plan of the same points (sweep --plan --calibrate)")
    ap.add_argument("--variants", default="baseline,all", help="variants (default baseline,all)")
    ap.add_argument("--format", default="text", choices=("text", "markdown", "csv", "json"))
    a = ap.parse_args()
    variants = pbplot.split_list(a.variants)
    if not variants:
        sys.exit("--variants names no variant")
    rows, failed, sources = [], [], []
    for path in a.files:
        f = pr.open_results(path)
        found, lost = pr.sweep_rows(path, f, variants)
        rows += found
        failed += [(path, pid, error) for pid, error in lost]
        sources.append({"file": path, "commit": pr.text(f.attrs.get("git_sha", b"unknown"))})
    if a.against:
        plan_misses(rows, a.against, variants)
    if a.format in ("csv", "json"):
        records = [{"file": r["file"], "id": r["id"], "context": r["context"], "cp": r["cp"],
                    "precision": r["precision"], "status": r["status"], "variant": r["variant"],
                    "ttft_ms": r["ttft_ms"], "roofline_ms": r["roofline_ms"], "memory_gb": r["memory_gb"],
                    "mfu_bf16_datasheet": r["mfu"], "parallel_efficiency": r["efficiency"],
                    "plan_ms": r.get("plan_ms"), "plan_miss": r.get("plan_miss"), "error": None}
                   for r in rows]
        records += [{"file": path, "id": pid, "status": "failed", "error": error} for path, pid, error in failed]
        if a.format == "json":
            print(json.dumps({"files": sources, "against": a.against, "points": records}, indent=2))
            return
        out = io.StringIO()
        fields = ["file", "id", "context", "cp", "precision", "status", "variant", "ttft_ms", "roofline_ms",
                  "memory_gb", "mfu_bf16_datasheet", "parallel_efficiency", "plan_ms", "plan_miss", "error"]
        w = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        for rec in records:
            w.writerow({k: ("" if rec.get(k) is None else rec.get(k)) for k in fields})
        sys.stdout.write(out.getvalue())
        return
    if not rows:
        sys.exit("{}: no measured or planned point of the variants {}".format(", ".join(a.files), ", ".join(variants)))
    head, body = table_lines(rows, variants, bool(a.against))
    if a.format == "markdown":
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" if i < 4 else "---:" for i in range(len(head))) + "|")
        for cells in body:
            print("| " + " | ".join(cells) + " |")
    else:
        widths = [max(len(c) for c in col) for col in zip(head, *body)]
        for cells in [head] + body:
            print("  ".join(c.rjust(w) if i >= 4 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))))
    for path, pid, error in failed:
        print("failed: {}: {}: {}".format(path, pid, error))


if __name__ == "__main__":
    pbplot.run_main(main)
