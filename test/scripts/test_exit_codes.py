"""Every command and script held to the README's exit-code table.

The README's table (under "The CLI") gives each code one meaning for every
command and script. Each case here runs one command or script in the
situations a user meets (ok, a user error, a check that fails, no GPU) and
requires the code the table gives that situation. "No GPU" is made with
CUDA_VISIBLE_DEVICES= so it holds on a machine with one too.

`coverage` reads the README: every `prefill-bench` command of its CLI block
and every script it names must have a case here, and every code a case
expects must be a row of its table.

    test_exit_codes.py CASE|all OUT_DIR      (PB_BUILD: the build folder)
"""
import os
import re
import subprocess

from casebook import ROOT, Casebook, expect

book = Casebook("test_exit_codes.py")
BUILD = os.environ.get("PB_BUILD", os.path.join(ROOT, "build"))
EXE = os.path.join(BUILD, "prefill-bench")
PYTHON = os.environ.get("PB_PYTHON", "/usr/bin/python3")
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}

# The situations, by the code the README's table gives them.
OK, FAILED, USER_ERROR, NO_DEVICE = 0, 1, 2, 3
COVERED = {}  # command or script -> the codes its case checked


def check(who, code, argv, out, env=None, timeout=120):
    """Runs argv from the repository root; requires `code` and, for 2, a message."""
    full_env = dict(os.environ, PB_BUILD=BUILD, PB_PREBUILT="1", **MPI_ENV, **(env or {}))
    p = subprocess.run(argv, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)
    text = (p.stdout + p.stderr).strip()
    last = text.splitlines()[-1] if text else ""
    expect(p.returncode == code, "{}: exit {} where the table gives {}: {}\n  last line: {}".format(
        who, p.returncode, code, " ".join(argv), last))
    if code == USER_ERROR:
        expect(text, "{}: exit 2 with no message: {}".format(who, " ".join(argv)))
    COVERED.setdefault(who, set()).add(code)


def tmp(out, name):
    path = os.path.join(out, name)
    if os.path.exists(path):
        os.remove(path)
    return path


def pb(*args):
    return [EXE] + list(args)


def mpirun(n, *args):
    return ["mpirun", "--oversubscribe", "-np", str(n), EXE] + list(args)


@book.case
def version(out):
    check("--version", OK, pb("--version"), out)


@book.case
def cli(out):
    check("cli", USER_ERROR, pb("bogus"), out)
    check("cli", USER_ERROR, pb(), out)


@book.case
def plan(out):
    check("plan", OK, pb("plan", "scenarios/smoke.yaml"), out)
    check("plan", OK, pb("plan", "scenarios/smoke.yaml", "-o", tmp(out, "plan.h5")), out)
    check("plan", USER_ERROR, pb("plan", "scenarios/smoke.yaml", "-o", os.path.join(out, "plan.h5")), out)  # exists
    check("plan", USER_ERROR, pb("plan", "scenarios/nope.yaml"), out)
    check("plan", USER_ERROR, pb("plan", "scenarios/smoke.yaml", "--set", "fabric=tcp"), out)
    check("plan", USER_ERROR, pb("plan", "scenarios/smoke.yaml", "--profile", "a100"), out)
    # fp4 experts are planned on a profile with an FP4 rate, refused on Hopper's
    check("plan", OK, pb("plan", "scenarios/smoke-fp8.yaml", "--set", "precision=fp4", "--profile", "gb300"), out)
    check("plan", USER_ERROR, pb("plan", "scenarios/smoke-fp8.yaml", "--set", "precision=fp4"), out)


@book.case
def run(out):
    check("run", USER_ERROR, pb("run", "scenarios/nope.yaml"), out)
    check("run", USER_ERROR, pb("run", "scenarios/smoke.yaml", "--cuts", "fast"), out)
    check("run", USER_ERROR, pb("run", "scenarios/smoke-cp2.yaml", "-o", tmp(out, "run.h5")), out)  # 1 of 2 ranks
    # fp4 is planned only: refused before any device work, with or without a GPU
    check("run", USER_ERROR, pb("run", "scenarios/smoke-fp8.yaml", "--set", "precision=fp4"), out, NO_GPU)
    check("run", NO_DEVICE, pb("run", "scenarios/smoke.yaml", "-o", tmp(out, "run.h5")), out, NO_GPU)


@book.case
def verify(out):
    check("verify", USER_ERROR, pb("verify", "scenarios/smoke.yaml", "--set", "cp=0"), out)
    check("verify", NO_DEVICE, pb("verify", "scenarios/smoke.yaml"), out, NO_GPU)


@book.case
def lane(out):
    check("lane", USER_ERROR, pb("lane", "scenarios/smoke-cp2.yaml", "-o", tmp(out, "lane.h5")), out)
    check("lane", NO_DEVICE, mpirun(2, "lane", "scenarios/smoke-cp2.yaml", "-o", tmp(out, "lane.h5")), out, NO_GPU)


@book.case
def benchmarks(out):
    for command, bad in [("kernels", ["--family", "nope"]), ("fmha", ["--engine", "nope"]),
                         ("kda", ["--tokens", "x"]), ("moe", ["--reps", "0x"]),
                         ("gemm", ["--precision", "fp4"])]:
        check(command, USER_ERROR, pb(command, *bad), out)
        check(command, NO_DEVICE, pb(command, "-o", tmp(out, command + ".h5")), out, NO_GPU)


@book.case
def compare(out):
    base, slow = "test/data/gate-base.h5", "test/data/gate-slow.h5"
    check("compare", OK, pb("compare", "results/h200/cp1-16k.h5", "--variants", "baseline,all"), out)
    check("compare", OK, pb("compare", "--baseline", base, base), out)
    check("compare", FAILED, pb("compare", "--baseline", base, slow), out)
    check("compare", USER_ERROR, pb("compare", "--baseline", "results/h200/cp1-16k-each-cut.h5",
                                  "results/h200/cp1-16k.h5"), out)  # cannot judge
    check("compare", USER_ERROR, pb("compare", "/nope.h5"), out)
    check("compare", USER_ERROR, pb("compare", base, "--max-regression", "3"), out)
    check("compare", OK, pb("compare", "results/h200/cp4-64k.h5", "--links"), out)
    check("compare", USER_ERROR, pb("compare", "results/h200/kernels.h5", "--links"), out)  # no gang in it
    check("compare", USER_ERROR, pb("compare", "results/h200/cp4-64k.h5", base, "--links"), out)
    check("compare", USER_ERROR, pb("compare", "results/h200/sweep-1m-plan.h5"), out)  # sweep_table.py's


@book.case
def sweep(out):
    check("sweep", OK, pb("sweep", "scenarios/smoke-sweep.yaml", "--plan", "-o", tmp(out, "sweep.h5")), out)
    check("sweep", USER_ERROR, pb("sweep", "scenarios/smoke.yaml", "--plan"), out)  # no sweep in it
    check("sweep", USER_ERROR, pb("sweep", "scenarios/smoke-sweep.yaml", "--gpus", "0"), out)
    check("sweep", NO_DEVICE, pb("sweep", "scenarios/smoke-sweep.yaml", "-o", tmp(out, "sweep-run.h5")), out, NO_GPU)


@book.case
def trace(out):
    check("trace", OK, pb("trace", "results/h200/shared-memory-cp4-4layers.h5", "-o", tmp(out, "t.json.gz")), out)
    check("trace", USER_ERROR, pb("trace", "/nope.h5"), out)
    check("trace", USER_ERROR, pb("trace", "results/h200/shared-memory-cp4-4layers.h5", "--rep", "99",
                                "-o", tmp(out, "t.json.gz")), out)


@book.case
def slim(out):
    check("slim", OK, pb("slim", "results/h200/cp4-64k.h5", "-o", tmp(out, "slim.h5")), out)
    check("slim", USER_ERROR, pb("slim", "results/h200/cp4-64k.h5", "-o", os.path.join(out, "slim.h5")), out)
    check("slim", USER_ERROR, pb("slim", "/nope.h5"), out)


@book.case
def ranks(out):
    check("ranks", OK, pb("ranks", "scenarios/cp8-128k.yaml"), out)
    check("ranks", USER_ERROR, pb("ranks", "scenarios/nope.yaml"), out)


@book.case
def scripts(out):
    sh = lambda name, *args: ["bash", os.path.join("scripts", name)] + list(args)
    check("scripts/bench.sh", USER_ERROR, sh("bench.sh"), out)
    check("scripts/bench.sh", NO_DEVICE, sh("bench.sh", "scenarios/smoke.yaml", "-o", tmp(out, "b.h5")), out, NO_GPU)
    check("scripts/launch.sh", OK, sh("launch.sh", "test/data/hosts-2x4.txt", "scenarios/cp8-128k.yaml",
                                    "--dry-run"), out)
    check("scripts/launch.sh", USER_ERROR, sh("launch.sh"), out)
    check("scripts/regress.sh", USER_ERROR, sh("regress.sh", "scenarios/smoke.yaml", "/nope.h5"), out)
    check("scripts/regress.sh", USER_ERROR, sh("regress.sh"), out)
    check("scripts/regress.sh", NO_DEVICE, sh("regress.sh", "scenarios/smoke.yaml", "test/data/gate-base.h5"), out,
        NO_GPU)


@book.case
def plots(out):
    for script, ok_args in [
            ("plot_ab.py", ["results/h200/cp1-16k.h5", "--variants", "baseline,all"]),
            ("plot_anatomy.py", ["results/h200/cp1-16k.h5", "--variant", "all"]),
            ("plot_bench.py", ["results/h200/kernels.h5"]),
            ("plot_timeline.py", ["results/h200/shared-memory-cp4-4layers.h5"]),
            ("plot_sweep.py", ["results/h200/sweep-1m-plan.h5"])]:
        who = "scripts/" + script
        png = tmp(out, script + ".png")
        check(who, OK, [PYTHON, os.path.join("scripts", script)] + ok_args + ["-o", png], out)
        check(who, USER_ERROR, [PYTHON, os.path.join("scripts", script)] + ok_args + ["-o", png], out)  # exists
        check(who, USER_ERROR, [PYTHON, os.path.join("scripts", script), "/nope.h5", "-o", tmp(out, "n.png")], out)


@book.case
def tables(out):
    py = lambda script, *args: [PYTHON, os.path.join("scripts", script)] + list(args)
    check("scripts/sweep_table.py", OK, py("sweep_table.py", "results/h200/sweep-1m-plan.h5", "--format", "csv"), out)
    check("scripts/sweep_table.py", USER_ERROR, py("sweep_table.py", "results/h200/cp4-64k.h5"), out)  # not a sweep
    check("scripts/sweep_table.py", USER_ERROR, py("sweep_table.py", "/nope.h5"), out)
    page = tmp(out, "page.md")
    with open(page, "w") as f:
        f.write("<!-- generated by: echo one -->\none\n<!-- end generated -->\n")
    env = {"PATH": BUILD + os.pathsep + os.environ.get("PATH", "")}
    check("scripts/docs_tables.py", OK, py("docs_tables.py", page, "--build", BUILD, "--root", ROOT), out, env)
    with open(page, "w") as f:
        f.write("<!-- generated by: echo two -->\none\n<!-- end generated -->\n")
    check("scripts/docs_tables.py", FAILED, py("docs_tables.py", page, "--build", BUILD, "--root", ROOT), out, env)  # drifted
    with open(page, "w") as f:
        f.write("<!-- generated by: exit 3 -->\n<!-- end generated -->\n")
    check("scripts/docs_tables.py", USER_ERROR, py("docs_tables.py", page, "--build", BUILD, "--root", ROOT), out, env)
    check("scripts/docs_tables.py", USER_ERROR, py("docs_tables.py", "/nope.md"), out)


def readme():
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def readme_codes(text):
    """The codes of the README's exit-code table: rows '| <code> | ... |' under a header '| exit |'."""
    table = re.search(r"^\| exit \|.*\n\|[-| ]+\|\n((?:\|.*\|\n)+)", text, re.M)
    expect(table, "README: no exit-code table (a header '| exit | ...')")
    return {int(m.group(1)) for m in re.finditer(r"^\| (\d) \|", table.group(1), re.M)}


@book.case
def coverage(out):
    for case in book.cases.values():
        if case is not coverage:
            case(out)
    text = readme()
    codes = readme_codes(text)
    expect(codes == {OK, FAILED, USER_ERROR, NO_DEVICE}, "README's exit codes {} differ from the cases' {}".format(
        sorted(codes), [OK, FAILED, USER_ERROR, NO_DEVICE]))
    cli_block = re.search(r"## The CLI\n+```\n(.*?)```", text, re.S)
    expect(cli_block, "README: no CLI block under '## The CLI'")
    commands = set(re.findall(r"^prefill-bench (\S+)", cli_block.group(1), re.M))
    scripts = set(re.findall(r"\b(scripts/(?:bench|launch|regress)\.sh|scripts/(?:plot|sweep|docs)_\w+\.py)", text))
    missing = sorted((commands | scripts) - set(COVERED))
    expect(not missing, "README names commands or scripts no case holds to the table: {}".format(missing))
    print("exit codes: {} commands and scripts, {} situations checked against the README's table".format(
        len(COVERED), sum(len(c) for c in COVERED.values())))


if __name__ == "__main__":
    book.main()
