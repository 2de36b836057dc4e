#!/usr/bin/env python3
"""Two runs of one scenario timed two ways (scenario key timing: events and
cupti) agree per family: for every variant and rank, each family's median
superstep ms under B is within the tolerance of A's.

    test_timing_agree.py A.h5 B.h5 [--tolerance 0.02] [--min-ms 0] [--families a,b] [--expect events,cupti]

Families under --min-ms per superstep in A, or not in --families (when
given), are listed, not judged. --expect names the timing each file must
record. Prints one row per
variant, rank and family; exit 0 when all agree, 1 when one does not (or a
file is not what --expect says), 77 when a file is missing (its run was
skipped: no GPU).
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import pbresults as pr  # noqa: E402


def timing(f):
    return pr.text(f.attrs.get("timing", "events"))  # files before the key were timed by events


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--tolerance", type=float, default=0.02)
    p.add_argument("--min-ms", type=float, default=0.0, help="judge only families of at least this many ms in A")
    p.add_argument("--families", default="", help="judge only these families (comma list; default all)")
    p.add_argument("--expect", default="", help="the timing of A and B, e.g. events,cupti")
    args = p.parse_args()
    for path in (args.a, args.b):
        if not os.path.exists(path):
            print("{}: missing (its run was skipped?)".format(path))
            return 77
    fa, fb = pr.open_results(args.a), pr.open_results(args.b)
    if args.expect:
        want = args.expect.split(",")
        got = [timing(fa), timing(fb)]
        if got != want:
            print("timing: the files record {}, expected {}".format(",".join(got), args.expect))
            return 1
    failures, rows = 0, 0
    print("{:<10}{:>5}  {:<14}{:>12}{:>12}{:>9}".format("variant", "rank", "family", timing(fa), timing(fb), "diff"))
    for variant in pr.variant_names(fa):
        if variant not in pr.variant_names(fb):
            print("variant {}: in {} only".format(variant, args.a))
            failures += 1
            continue
        ma, mb = pr.family_ms(fa, variant), pr.family_ms(fb, variant)
        for rank in sorted(ma):
            for family in sorted(ma[rank]):
                a = ma[rank][family]
                b = mb.get(rank, {}).get(family)
                if b is None:
                    print("variant {} rank {}: family {} in {} only".format(variant, rank, family, args.a))
                    failures += 1
                    continue
                diff = b / a - 1 if a > 0 else (0.0 if b == 0 else float("inf"))
                judged = a >= args.min_ms and (not args.families or family in args.families.split(","))
                bad = judged and abs(diff) > args.tolerance
                failures += bad
                rows += judged
                note = "  DISAGREE" if bad else ("" if judged else "  (not judged)")
                print("{:<10}{:>5}  {:<14}{:>12.4f}{:>12.4f}{:>+8.2f}%{}".format(
                    variant, rank, family, a, b, 100 * diff, note))
    print("{} families compared, {} outside {:.1f}%".format(rows, failures, 100 * args.tolerance))
    return 1 if failures or rows == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
