"""What the script test suites share: the repository's paths, a failure that
names what was wrong, and a book of named cases run from the command line.

    book = Casebook("test_x.py")
    @book.case
    def something(out): expect(..., "what went wrong")
    if __name__ == "__main__": book.main()   # test_x.py CASE|all OUT_DIR, or --list

A case passes by returning; `expect` raises Failed. The runner prints
"passed: <case>" or "FAILED <case>: <why>" (stderr) and exits 1 if any failed.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "scripts")
RESULTS = os.path.join(ROOT, "results", "h200")
if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)


class Failed(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Failed(what)


def committed(name):
    """A committed results file under results/h200."""
    return os.path.join(RESULTS, name)


class Casebook:
    def __init__(self, prog):
        self.prog = prog
        self.cases = {}

    def case(self, fn):
        self.cases[fn.__name__] = fn
        return fn

    def main(self, argv=None):
        argv = sys.argv[1:] if argv is None else argv
        if argv == ["--list"]:
            print("\n".join(self.cases))
            return
        if len(argv) != 2 or argv[0] not in list(self.cases) + ["all"]:
            sys.exit("usage: {} CASE|all OUT_DIR; cases: {}".format(self.prog, ", ".join(self.cases)))
        names = list(self.cases) if argv[0] == "all" else [argv[0]]
        os.makedirs(argv[1], exist_ok=True)
        failed = 0
        for name in names:
            try:
                self.cases[name](argv[1])
                print("passed: " + name)
            except Failed as e:
                print("FAILED {}: {}".format(name, e), file=sys.stderr)
                failed += 1
        sys.exit(1 if failed else 0)
