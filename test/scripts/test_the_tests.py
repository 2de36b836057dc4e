"""The test of the tests: each checker the suites lean on, given a broken
input, must fail, and say why.

  readme_*       test_readme.py (the README's and docs' commands): a command
                 whose exit code is not the one its comment gives, a failing
                 command with no note, a quoted output that drifted, a marker
                 without its block;
  expect_sh      test/cli/expect.sh (every cli.* test): a wrong exit code, an
                 output that does not match;
  exit_codes     test_exit_codes.py's reading of the README's exit-code table;
  markdown       test_compare_formats.py's reading of a markdown table;
  timeout_skip   the fabric's timeout probe without a device says SKIPPED,
                 which CTest counts as skipped (SKIP_REGULAR_EXPRESSION), not
                 passed.

    test_the_tests.py CASE|all OUT_DIR      (PB_BUILD: the build folder)
"""
import os
import subprocess
import sys

from casebook import ROOT, Casebook, Failed, expect

book = Casebook("test_the_tests.py")
BUILD = os.environ.get("PB_BUILD", os.path.join(ROOT, "build"))
TESTS = os.path.join(ROOT, "test")
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def run(argv, env=None):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=dict(os.environ, **MPI_ENV, **(env or {})))
    return p.returncode, p.stdout + p.stderr


def guide(out, name, text):
    """A guide written inside the repository's tree (test_readme.py looks for scenarios/ above it)."""
    path = os.path.join(out, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def readme_fails(out, name, text, says):
    path = guide(out, name, text)
    rc, output = run([sys.executable, os.path.join(TESTS, "scripts", "test_readme.py"), path, BUILD])
    expect(rc != 0, "test_readme.py passed a broken guide ({}):\n{}".format(name, output))
    expect(says in output, "test_readme.py failed without saying '{}':\n{}".format(says, output))


@book.case
def readme_wrong_exit(out):
    readme_fails(out, "wrong-exit.md", "<!-- ci -->\n```sh\nprefill-bench --version   # exit 2\n```\n",
                 "exited 0, the file says 2")


@book.case
def readme_unnoted_failure(out):
    readme_fails(out, "unnoted.md", "<!-- ci -->\n```sh\nprefill-bench bogus\n```\n", "exited 2, the file says 0")


@book.case
def readme_output_drift(out):
    readme_fails(out, "drift.md", "<!-- ci: output of prefill-bench --version -->\n```text\nno such line\n```\n",
                 "no longer prints")


@book.case
def readme_marker_without_block(out):
    readme_fails(out, "marker.md", "<!-- ci -->\n\nprefill-bench --version\n",
                 "a ci marker must stand right before a fenced block")


@book.case
def readme_sound(out):
    """The control: a sound guide passes, so the failures above are the inputs'."""
    path = guide(out, "sound.md", "<!-- ci -->\n```sh\nprefill-bench --version\nprefill-bench bogus   # exit 2\n```\n")
    rc, output = run([sys.executable, os.path.join(TESTS, "scripts", "test_readme.py"), path, BUILD])
    expect(rc == 0, "a sound guide failed:\n" + output)


@book.case
def expect_sh(out):
    script = ["bash", os.path.join(TESTS, "cli", "expect.sh")]
    rc, output = run(script + ["0", "x", "false"])
    expect(rc == 1 and "exit code 1, expected 0" in output, "a wrong exit code passed: rc {}\n{}".format(rc, output))
    rc, output = run(script + ["0", "^nothing$", "echo", "something"])
    expect(rc == 1 and "does not match" in output, "a wrong output passed: rc {}\n{}".format(rc, output))
    rc, output = run(script + ["1", "^$", "false"])
    expect(rc == 0, "the control failed: rc {}\n{}".format(rc, output))


@book.case
def exit_codes(out):
    import test_exit_codes
    try:
        test_exit_codes.readme_codes("# a README without the table\n| 0 | ok |\n")
    except Failed:
        pass
    else:
        raise Failed("test_exit_codes.readme_codes read a table where there is none")
    table = "| exit | every command |\n|---|---|\n| 0 | ok |\n| 2 | user |\n"
    expect(test_exit_codes.readme_codes(table) == {0, 2}, "the control table read wrong")


@book.case
def markdown(out):
    import test_compare_formats
    for broken in ("| a | b |\n|---|---|\n| 1 |\n", "| a | b |\n| 1 | 2 |\n"):  # ragged; no separator
        try:
            test_compare_formats.markdown_tables(broken)
        except Failed:
            continue
        raise Failed("markdown_tables took a broken table:\n" + broken)
    expect(len(test_compare_formats.markdown_tables("| a | b |\n|---|---|\n| 1 | 2 |\n")) == 1, "the control")


@book.case
def timeout_skip(out):
    probe = os.path.join(BUILD, "fabric_timeout_probe")
    rc, output = run(["mpirun", "--oversubscribe", "-np", "4", probe], env={"CUDA_VISIBLE_DEVICES": ""})
    expect("SKIPPED: no CUDA device" in output,
           "the probe without a device does not say SKIPPED (CTest would count it passed): rc {}\n{}".format(
               rc, output[-2000:]))


if __name__ == "__main__":
    book.main()
