#!/usr/bin/env python3
"""Two runs of one scenario timed two ways (scenario key timing: events and
cupti) agree per family: for every variant and rank, each family's median
superstep ms under B is within the tolerance of A's, give or take the runs'
own noise: two standard errors of the difference of the medians (each
1.2533 * sigma / sqrt(reps), sigma from the median absolute deviation of its
run's per-rep sums, so one slow rep does not widen it), so that only a
disagreement the reps resolve fails. (On the H200 two runs timed the same way
differed by up to 4.5% on FMHA at smoke size, whose reps spread by 8%.)

    test_timing_agree.py A.h5 B.h5 [--tolerance 0.02] [--min-ms 0] [--families a,b] [--expect events,cupti]

Families under --min-ms per superstep in A, or not in --families (when
given), are listed, not judged. --expect names the timing each file must
record. Prints one row per
variant, rank and family; exit 0 when all agree, 1 when one does not (or a
file is not what --expect says), 77 when a file is missing (its run was
skipped: no GPU).
"""
import argparse
import math
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import pbresults as pr  # noqa: E402


def timing(f):
    return pr.text(f.attrs.get("timing", "events"))  # files before the key were timed by events


def median_standard_error(per_rep):
    """The standard error of a median of these reps (normal approximation,
    sigma = 1.4826 * MAD); 0 for one rep."""
    n = len(per_rep)
    sigma = 1.4826 * float(np.median(np.abs(np.asarray(per_rep) - np.median(per_rep))))
    return 1.2533 * sigma / math.sqrt(n) if n > 1 else 0.0


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
    try:
        fa, fb = pr.open_results(args.a), pr.open_results(args.b)
    except pr.ResultsError as e:
        print("test_timing_agree: error: {}".format(e), file=sys.stderr)
        return 2
    if args.expect:
        want = args.expect.split(",")
        got = [timing(fa), timing(fb)]
        if got != want:
            print("timing: the files record {}, expected {}".format(",".join(got), args.expect))
            return 1
    failures, rows = 0, 0
    print("{:<10}{:>5}  {:<14}{:>12}{:>12}{:>9}{:>9}".format("variant", "rank", "family", timing(fa), timing(fb),
                                                            "diff", "noise"))
    for variant in pr.variant_names(fa):
        if variant not in pr.variant_names(fb):
            print("variant {}: in {} only".format(variant, args.a))
            failures += 1
            continue
        ra, rb = pr.family_rep_ms(fa, variant), pr.family_rep_ms(fb, variant)
        for rank in sorted(ra):
            for family in sorted(ra[rank]):
                reps_b = rb.get(rank, {}).get(family)
                if reps_b is None:
                    print("variant {} rank {}: family {} in {} only".format(variant, rank, family, args.a))
                    failures += 1
                    continue
                a, b = float(np.median(ra[rank][family])), float(np.median(reps_b))
                diff = b / a - 1 if a > 0 else (0.0 if b == 0 else float("inf"))
                noise = 2 * math.hypot(median_standard_error(ra[rank][family]), median_standard_error(reps_b))
                noise = noise / a if a > 0 else 0.0
                judged = a >= args.min_ms and (not args.families or family in args.families.split(","))
                bad = judged and abs(diff) > args.tolerance + noise
                failures += bad
                rows += judged
                note = "  DISAGREE" if bad else ("" if judged else "  (not judged)")
                print("{:<10}{:>5}  {:<14}{:>12.4f}{:>12.4f}{:>+8.2f}%{:>8.2f}%{}".format(
                    variant, rank, family, a, b, 100 * diff, 100 * noise, note))
    print("{} families compared, {} outside {:.1f}% and the noise".format(rows, failures, 100 * args.tolerance))
    return 1 if failures or rows == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
