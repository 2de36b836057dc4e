#!/usr/bin/env python3
"""A sweep file's points as a table (`prefill-bench sweep`, docs/sweep.md):
text for a terminal, markdown for a pull request or the docs, csv and json
for a dashboard.

    scripts/sweep_table.py sweep.h5 [--variants baseline,all] [--format text|markdown|csv|json]

One row per point (context, cp, precision): its status (measured or
planned), the memory of its fullest GPU, each variant's TTFT (a measured
point's headline TTFT, a planned one's calibrated plan where it was
calibrated, else its roofline), the last variant's saving against the
first, each variant's MFU against the datasheet's dense bf16 peak, and the
last variant's parallel efficiency over cp at that context, as `sweep` stored
it (T(c0) x c0 / (T(cp) x cp), c0 the smallest cp swept there; "-" when the
context has one cp). csv and json hold one record per point and variant. Failed points are
listed after the table (text, markdown) or with their error (csv, json).
Exit 2 on a file that is not a sweep.
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


def table_lines(rows, variants):
    head = ["context", "cp", "precision", "status", "GB a GPU"] + ["{} TTFT".format(v) for v in variants]
    if len(variants) > 1:
        head.append("{} vs {}".format(variants[-1], variants[0]))
    head += ["MFU {}".format(v) for v in variants] + ["efficiency ({})".format(variants[-1])]
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
        body.append(cells)
    return head, body


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", help="a sweep file")
    ap.add_argument("--variants", default="baseline,all", help="variants (default baseline,all)")
    ap.add_argument("--format", default="text", choices=("text", "markdown", "csv", "json"))
    a = ap.parse_args()
    variants = pbplot.split_list(a.variants)
    if not variants:
        sys.exit("--variants names no variant")
    f = pr.open_results(a.file)
    rows, failed = pr.sweep_rows(a.file, f, variants)
    if a.format in ("csv", "json"):
        records = [{"file": r["file"], "id": r["id"], "context": r["context"], "cp": r["cp"],
                    "precision": r["precision"], "status": r["status"], "variant": r["variant"],
                    "ttft_ms": r["ttft_ms"], "roofline_ms": r["roofline_ms"], "memory_gb": r["memory_gb"],
                    "mfu_bf16_datasheet": r["mfu"],
                    "parallel_efficiency": r["efficiency"], "error": None}
                   for r in rows]
        records += [{"file": a.file, "id": pid, "status": "failed", "error": error} for pid, error in failed]
        if a.format == "json":
            print(json.dumps({"file": a.file, "commit": pr.text(f.attrs.get("git_sha", b"unknown")),
                              "points": records}, indent=2))
            return
        out = io.StringIO()
        fields = ["file", "id", "context", "cp", "precision", "status", "variant", "ttft_ms", "roofline_ms",
                  "memory_gb", "mfu_bf16_datasheet", "parallel_efficiency", "error"]
        w = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        for rec in records:
            w.writerow({k: ("" if rec.get(k) is None else rec.get(k)) for k in fields})
        sys.stdout.write(out.getvalue())
        return
    if not rows:
        sys.exit("{}: no measured or planned point of the variants {}".format(a.file, ", ".join(variants)))
    head, body = table_lines(rows, variants)
    if a.format == "markdown":
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" if i < 4 else "---:" for i in range(len(head))) + "|")
        for cells in body:
            print("| " + " | ".join(cells) + " |")
    else:
        widths = [max(len(c) for c in col) for col in zip(head, *body)]
        for cells in [head] + body:
            print("  ".join(c.rjust(w) if i >= 4 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))))
    for pid, error in failed:
        print("failed: {}: {}".format(pid, error))


if __name__ == "__main__":
    pbplot.run_main(main)
