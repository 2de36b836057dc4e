#!/usr/bin/env python3
"""Checks of scripts/pbresults.py: the headline TTFT (docs/results.md, "The
headline TTFT") on the committed results (results/h200) and on small files
written here, README.md's headline table against those files, and the
library's errors: ResultsError naming the file, and a plot script that turns
one into a single line on stderr and exit 2.

    test_pbresults.py CASE OUT_DIR     (CASE 'all': every case; needs h5py)
    test_pbresults.py --list
"""
import os
import re
import shutil
import subprocess
import sys

from casebook import ROOT, SCRIPTS, Casebook, Failed, committed, expect  # (sets sys.path for the scripts)

import h5py  # noqa: E402
import numpy as np  # noqa: E402

import pbresults as pr  # noqa: E402

book = Casebook("test_pbresults.py")

# README headline cells whose run is not <scenario>[-fp8].h5's baseline and
# all: (scenario, precision, side) -> (file, variant).
ELSEWHERE = {
    ("cp4-64k", "bf16", "all"): ("cp4-64k-each-cut.h5", "all"),
    ("cp8-128k", "bf16", "all"): ("cp8-128k-next-round.h5", "all"),
    ("cp1-16k", "fp8", "baseline"): ("cp1-16k-fp8-rerun.h5", "baseline"),
    ("cp1-16k", "fp8", "all"): ("cp1-16k-fp8-rerun.h5", "all"),
    ("cp4-64k", "fp8", "baseline"): ("cp4-64k-fp8-rerun.h5", "baseline"),
    ("cp4-64k", "fp8", "all"): ("cp4-64k-fp8-rerun.h5", "all"),
}


def raises(fn, *args):
    """The ResultsError message of fn(*args); Failed when it does not raise one."""
    try:
        fn(*args)
    except pr.ResultsError as e:
        return str(e)
    raise Failed("{}{} raised no ResultsError".format(fn.__name__, args))


def write_run(path, attrs, ttft_ms, projected_ms=None):
    """A minimal run file: variant v with ttft_ms and, given projected_ms, a
    measured projection's reps."""
    with h5py.File(path, "w") as f:
        f.attrs.update(dict({"schema_version": 4, "kind": "run"}, **attrs))
        g = f.create_group("variants/v")
        g["ttft_ms"] = np.asarray(ttft_ms, dtype=float)
        if projected_ms is not None:
            reps = np.zeros(len(projected_ms), dtype=[("rep", "i4"), ("ttft_ms", "f8")])
            reps["rep"], reps["ttft_ms"] = np.arange(len(projected_ms)), projected_ms
            g["projection/measured/reps"] = reps
    return path


# --- the rule ---------------------------------------------------------------

@book.case
def headline_committed(out):
    for name, want in (("cp1-16k", "measured"), ("cp1-16k-fp8", "measured"), ("cp4-64k", "projected"),
                       ("cp4-64k-fp8", "projected"), ("cp8-128k", "projected"), ("cp8-128k-fp8", "projected")):
        f = pr.open_results(committed(name + ".h5"))
        for v in ("baseline", "all"):
            got = pr.ttft_headline(f, v)
            expect(got == want, "{}.h5 {}: headline {} (want {})".format(name, v, got, want))
            label = pr.ttft_label(f, v)
            expect(label == ("projected gang TTFT" if want == "projected" else "TTFT"), "label " + label)


@book.case
def headline_rule(out):
    both = ([9.0, 10.0, 11.0], [3.0, 2.0, 4.0])
    for attrs, data, want, samples in (
            ({"memory_ranks_per_gpu": 4.0}, both, "projected", [3.0, 2.0, 4.0]),
            ({"memory_ranks_per_gpu": 1.0}, both, "measured", [9.0, 10.0, 11.0]),
            ({"memory_ranks_per_gpu": 4.0}, both[:1], "measured", [9.0, 10.0, 11.0]),
            ({}, both, "measured", [9.0, 10.0, 11.0]),
            ({"memory_ranks_per_gpu": 4.0, "ttft_headline": "measured"}, both, "measured", [9.0, 10.0, 11.0]),
            ({"memory_ranks_per_gpu": 1.0, "ttft_headline": np.bytes_(b"projected")}, both, "projected",
             [3.0, 2.0, 4.0])):
        f = pr.open_results(write_run(os.path.join(out, "rule.h5"), attrs, *data))
        what = "attrs {}, projection {}".format(attrs, len(data) > 1)
        expect(pr.ttft_headline(f, "v") == want, "{}: {} (want {})".format(what, pr.ttft_headline(f, "v"), want))
        expect(list(pr.ttft_samples(f, "v")) == samples, "{}: samples {}".format(what, pr.ttft_samples(f, "v")))
        expect(pr.ttft(f, "v") == float(np.median(samples)), "{}: ttft {}".format(what, pr.ttft(f, "v")))
        f.close()


@book.case
def planned(out):
    """A plan's TTFT: the largest sum of a rank's spans, or the calibrated value where the plan has one
    (harness/analysis/headline.h says the same)."""
    source = os.path.join(ROOT, "test", "data", "plan-smoke-cp2.h5")
    f = pr.open_results(source)
    for v in pr.variant_names(f):
        spans = f["variants"][v]["spans"][()]
        deepest = max(spans["time_us"][spans["rank"] == r].sum() for r in set(spans["rank"])) / 1e3
        expect(pr.ttft_headline(f, v) == "planned" and pr.ttft_label(f, v) == "planned TTFT", v)
        expect(abs(pr.ttft(f, v) - deepest) < 1e-9, "{}: {} (want {})".format(v, pr.ttft(f, v), deepest))
    f.close()
    copy = os.path.join(out, "calibrated-plan.h5")
    shutil.copyfile(source, copy)
    with h5py.File(copy, "r+") as g:
        v = list(g["variants"])[0]
        g.attrs["calibrated_ms." + v] = 123.5
    f = pr.open_results(copy)
    expect(pr.ttft(f, v) == 123.5, "calibrated: {}".format(pr.ttft(f, v)))


@book.case
def wall_is_not_ttft(out):
    path = committed("cp4-64k.h5")
    f = pr.open_results(path)
    wall, ttft = pr.wall_ttft_ms(f, "baseline"), pr.ttft(f, "baseline")
    expect(round(wall) == 37659 and round(ttft) == 10255,
           "{} baseline: serialized wall {} and TTFT {} (want 37659 and 10255)".format(path, wall, ttft))
    f = pr.open_results(committed("cp1-16k.h5"))
    expect(pr.ttft(f, "all") == pr.wall_ttft_ms(f, "all"), "cp1-16k.h5: a measured TTFT is the wall")


@book.case
def readme_headline(out):
    """Every bf16 and fp8 cell 'A → B ms (±x.y%)' of README.md's "## Headline"
    table is round(ttft()) of baseline and all, and its change."""
    with open(os.path.join(ROOT, "README.md")) as readme:
        section = readme.read().split("\n## Headline\n", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("|") and not line.startswith("|---")]
    header, rows = rows[0], rows[1:]
    checked = 0
    for row in rows:
        scenario = row[0]
        for precision in ("bf16", "fp8"):
            cell = row[header.index(precision)]
            m = re.match(r"(\d+) → (\d+) ms \(([−+-][\d.]+)%\)", cell)
            expect(m, "README {} {}: '{}' is not 'A → B ms (x%)'".format(scenario, precision, cell))
            got = {}
            for side, quoted in (("baseline", m.group(1)), ("all", m.group(2))):
                default = scenario + ("-fp8" if precision == "fp8" else "") + ".h5", side
                name, variant = ELSEWHERE.get((scenario, precision, side), default)
                got[side] = pr.ttft(pr.open_results(committed(name)), variant)
                expect(round(got[side]) == int(quoted), "README {} {} {}: {} ms, {} [{}] gives {:.1f} ms".format(
                    scenario, precision, side, quoted, name, variant, got[side]))
                checked += 1
            pct = "{:+.1f}".format(100 * (got["all"] / got["baseline"] - 1)).replace("-", "−")
            expect(pct == m.group(3), "README {} {}: {}%, the files give {}%".format(
                scenario, precision, m.group(3), pct))
    expect(checked == 12, "README's headline table: {} numbers checked (want 12)".format(checked))


# --- errors -----------------------------------------------------------------

@book.case
def errors_name_the_file(out):
    missing = os.path.join(out, "no-such.h5")
    msg = raises(pr.open_results, missing)
    expect(missing in msg and "no such file" in msg, msg)
    not_hdf5 = os.path.join(out, "not-hdf5.h5")
    with open(not_hdf5, "w") as f:
        f.write("not HDF5\n")
    msg = raises(pr.open_results, not_hdf5)
    expect(not_hdf5 in msg and "cannot open as HDF5" in msg, msg)
    old = os.path.join(out, "schema-99.h5")
    with h5py.File(old, "w") as f:
        f.attrs["schema_version"] = 99
    msg = raises(pr.open_results, old)
    expect(old in msg and "schema_version 99" in msg, msg)
    path = committed("cp1-16k.h5")
    f = pr.open_results(path)
    for fn in (pr.ttft, pr.ttft_samples, pr.ttft_headline, pr.family_ms):
        msg = raises(fn, f, "nosuch")
        expect(msg == "{}: no variant 'nosuch'; its variants: baseline, all".format(path), msg)
    msg = raises(pr.check_variants, path, f, ["all", "nosuch"])
    expect(path in msg and "'nosuch'" in msg, msg)
    empty = pr.open_results(write_run(os.path.join(out, "empty.h5"), {}, []))
    msg = raises(pr.ttft, empty, "v")
    expect(empty.filename in msg and "no measured TTFT" in msg, msg)
    bad = pr.open_results(write_run(os.path.join(out, "bad.h5"), {"ttft_headline": "wall"}, [1.0]))
    msg = raises(pr.ttft, bad, "v")
    expect(bad.filename in msg and "'wall'" in msg, msg)


@book.case
def library_never_exits(out):
    with open(os.path.join(SCRIPTS, "pbresults.py")) as f:
        source = f.read()
    expect("exit(" not in source and "import sys" not in source, "pbresults.py exits")


@book.case
def scripts_exit_2(out):
    """Each plot script, given a missing variant: exit 2, one line on stderr."""
    path = committed("cp1-16k.h5")
    png = os.path.join(out, "refused-{}.png".format(os.getpid()))
    for script, args in (("plot_anatomy.py", [path, "--variants", "nosuch"]),
                         ("plot_ab.py", [path, "--variants", "baseline,nosuch"]),
                         ("plot_bench.py", [path, "--variants", "nosuch"]),
                         ("plot_timeline.py", [path, "--variant", "nosuch"]),
                         ("plot_bench.py", [os.path.join(out, "no-such.h5")])):
        p = subprocess.run([sys.executable, os.path.join(SCRIPTS, script)] + args + ["-o", png],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
        lines = p.stderr.splitlines()
        what = "{} {}: exit {}, stderr:\n{}".format(script, " ".join(args), p.returncode, p.stderr)
        expect(p.returncode == 2 and len(lines) == 1, what)
        expect(lines[0].startswith(script + ": error: " + args[0] + ": "), what)
        expect(not os.path.exists(png), "a refusal wrote " + png)


if __name__ == "__main__":
    book.main()
