#!/usr/bin/env python3
"""Runs a guide's commands that need no GPU, exactly as written, and checks
the outputs it quotes, so that the README (and docs/*.md) cannot drift from
the code.

    test_readme.py README.md|docs/<page>.md <build dir>

Marked blocks (an HTML comment on the line before the fence):
  <!-- ci -->                    a ```sh block: every command runs from the
                                  repository's root (in a scratch copy of its
                                  layout) with prefill-bench on PATH; it must
                                  exit 0, or N when its comment says "exit N"
  <!-- ci: output of CMD -->     a ```text block: CMD runs the same way and
                                  every line of the block must appear in its
                                  output, in order
Exit 0 when every command did what the file says, 1 otherwise.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

LINKED = ("results", "scenarios", "scripts", "test", "docs", "harness", "kernels", "cmake")
EXIT_NOTE = re.compile(r"#.*\bexit (\d+)\b")


def blocks(readme):
    """(kind, argument, lines, line number) for every marked block."""
    lines = open(readme).read().split("\n")
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"<!-- ci(?:: output of (.*?))? -->\s*$", line.strip())
        if not m:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            sys.exit("{}:{}: a ci marker must stand right before a fenced block".format(readme, i + 1))
        body = []
        for j in range(i + 2, len(lines)):
            if lines[j].startswith("```"):
                break
            body.append(lines[j])
        out.append(("output" if m.group(1) else "run", m.group(1), body, i + 1))
    return out


def scratch_root(repo):
    root = tempfile.mkdtemp(prefix="pb-readme-")
    for name in LINKED:
        os.symlink(os.path.join(repo, name), os.path.join(root, name))
    return root


def run(command, cwd, env):
    p = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=600)
    return p.returncode, p.stdout.decode(errors="replace")


def main():
    readme, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    repo = os.path.dirname(readme)
    while not os.path.isdir(os.path.join(repo, "scenarios")):  # docs/*.md: the repository above
        if os.path.dirname(repo) == repo:
            sys.exit("{} is not inside the repository (no scenarios/ above it)".format(readme))
        repo = os.path.dirname(repo)
    name = os.path.relpath(readme, repo)
    env = dict(os.environ, PATH=build + os.pathsep + os.environ.get("PATH", ""), PB_BUILD=build)
    root = scratch_root(repo)
    failures, ran = [], 0
    for kind, command, body, line in blocks(readme):
        if kind == "run":
            for text in body:
                cmd = text.strip()
                if not cmd or cmd.startswith("#"):
                    continue
                m = EXIT_NOTE.search(cmd)
                want = int(m.group(1)) if m else 0
                rc, output = run(cmd, root, env)
                ran += 1
                if rc != want:
                    failures.append("{}:{}: `{}` exited {}, the file says {}\n{}".format(
                        name, line, cmd, rc, want, output[-2000:]))
        else:
            rc, output = run(command, root, env)
            ran += 1
            printed = [l.rstrip() for l in output.split("\n")]
            at = 0
            for quoted in (l.rstrip() for l in body if l.strip()):
                while at < len(printed) and printed[at] != quoted:
                    at += 1
                if at == len(printed):
                    failures.append("{}:{}: `{}` (exit {}) no longer prints, in order:\n  {}".format(
                        name, line, command, rc, quoted))
                    break
                at += 1
    shutil.rmtree(root, ignore_errors=True)
    for f in failures:
        print(f)
    print("{} commands: {} run, {} failed".format(name, ran, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
