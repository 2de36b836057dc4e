#!/usr/bin/env python3
"""Every reader of results files, given damaged copies of committed ones.

    test_fuzz_readers.py EXE OUT_DIR [--cases N] [--seed S] [--timeout T] [--jobs J]
                         [--case I]... [--no-pbresults] [--unchecked-metadata]

EXE is prefill-bench, or results_reader_probe (test/cli: the same commands'
reading from the host libraries, built under the sanitizers). The inputs are
committed files of each kind: a run with doorbells and projections (schema 4,
slimmed), a run with projection timelines (schema 3), a lane file (3) and an
old one (1), a plan (test/data), and benchmark files (4, and 1). Case I
(0 <= I < N) mutates input I mod 7 with mutation (I div 7) mod 12, from a
random generator seeded by (S, I), so a case is rebuilt exactly by --case I:

  truncate        the file cut at an offset
  flip-superblock bits flipped in the first 96 bytes
  flip-metadata   bits flipped in an HDF5 metadata structure (object header,
                  B-tree node, heap, symbol table, ...; found by its signature)
  flip-data       bits flipped in a dataset's stored bytes
  overwrite       16 random bytes at a random offset
  swap-kinds      a dataset, a group or the kind replaced by another kind's
  wrong-dtype     a dataset, a table column or an attribute of another type
  wrong-dims      a dataset of other dimensions, or of 64 GiB declared and
                  nothing stored
  nonfinite       NaN, +inf, -inf or 1e308 in a timing column or attribute
  empty           no variants, no /variants, or a table of no rows
  rank-range      ranks, peers, reps, layers, streams, span rows out of range
  missing-attr    an attribute deleted, or the recorded scenario unparsable

The metadata of files in HDF5's earliest format (superblock 0: the schema 1
files) carries no checksums, and HDF5 1.10 itself crashes on some damage to
it (a segmentation fault in H5A__close, memcpy over overlapping memory in
H5HG_read: in the library, before any of our code sees a value). For those
inputs flip-superblock, flip-metadata and overwrite damage the data instead,
unless --unchecked-metadata. Files of the current format (superblock 2 or
later: object headers, heaps and v2 B-tree nodes checksummed; the chunk
indexes' v1 B-tree nodes not) get every mutation.

Each mutant goes to `compare M`, `compare M SEED`, the gate with M as the
candidate (even I) or the baseline (odd I), `trace`, `slim`, `plan --calibrate`
(benchmark files; runs as --measured) and, unless --no-pbresults, to
scripts/pbresults.py (each function a plot script calls). The rule, per tool:

  - it ends within --timeout seconds (else "hang"), by exit, not a signal;
  - exit 0, or 1 from the gate; or exit 2 with exactly one line on stderr,
    "... error: ...", that names the mutant (the two-file commands: the mutant
    or the seed, where the refusal is the seed's: a benchmark file has no
    variants to compare); the gate may instead exit 2 with its report,
    "result: cannot judge"; pbresults: success or ResultsError whose message
    names the mutant, never another exception;
  - nothing on stderr from a sanitizer; the mutant's bytes unchanged.

The committed inputs are checked unchanged at the end. Passing mutants are
deleted; failing ones stay in OUT_DIR/cases. The summary prints the case
count and each tool's outcomes and time per run; each failure prints its
case, mutation, tool, exit code, the line of output that says most (a
sanitizer's finding, a traceback's exception, else the first) and its
command, then a --case line that rebuilds the failing cases; the test exits 1.
The default, 168 cases (every input x mutation twice, 1104 tool runs), takes
about 80-130 s on 2 cores (prefill-bench) and 40-90 s (the probe, sanitized).
"""
import argparse
import concurrent.futures
import hashlib
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections import Counter

from casebook import ROOT, committed  # (sets sys.path for pbresults)

import h5py  # noqa: E402
import numpy as np  # noqa: E402

import pbresults as pr  # noqa: E402

SCENARIOS = os.path.join(ROOT, "scenarios")


class Seed:
    def __init__(self, name, path, kind, measured_scenario=None, variant=None):
        self.name, self.path, self.kind = name, path, kind
        self.measured_scenario = measured_scenario  # a run: the scenario plan --measured checks it against
        self.variant = variant                      # trace --variant


SEEDS = [
    Seed("run", committed("cp4-64k-fp8.h5"), "run", "cp4-64k.yaml", "all"),
    Seed("run-timeline", committed("shared-memory-cp4-4layers.h5"), "run", "cp4-64k.yaml", "cli"),
    Seed("lane", committed("lane-cp4-64k.h5"), "lane", variant="all"),
    Seed("lane-v1", committed("lane-cp4-64k-native.h5"), "lane", variant="baseline"),
    Seed("plan", os.path.join(ROOT, "test", "data", "plan-smoke-cp2.h5"), "plan", variant="all"),
    Seed("bench", committed("gemm.h5"), "bench"),
    Seed("bench-v1", committed("fmha.h5"), "bench"),
]
# Byte damage that reaches HDF5's metadata; see the docstring for files in the earliest format.
METADATA_DAMAGE = ("flip-superblock", "flip-metadata", "overwrite")
MUTATIONS = ["truncate", "flip-superblock", "flip-metadata", "flip-data", "overwrite", "swap-kinds", "wrong-dtype",
             "wrong-dims", "nonfinite", "empty", "rank-range", "missing-attr"]

# HDF5's metadata signatures (file format spec): object headers, B-trees, heaps, symbol tables, free space.
SIGNATURES = [b"OHDR", b"OCHK", b"TREE", b"BTHD", b"BTIN", b"BTLF", b"HEAP", b"SNOD", b"FRHP", b"FHDB", b"FHIB",
              b"FSHD", b"FSSE", b"GCOL", b"SMTB", b"SMLI", b"FADB", b"FAHD", b"EADB", b"EAHD", b"EAIB", b"EASB"]
TIMING = {"time_us", "start_us", "wall_us", "wait_us", "ttft_ms", "median_us", "min_us", "max_us", "t_ms", "end_us",
          "busy_us", "idle_us", "serialized_ttft_ms", "host_ms", "stall_us", "path_us", "waited_us", "nccl_us",
          "ipc_wait_us", "nccl_wait_us", "launch_gap_us", "path_compute_us", "bytes", "flops", "speedup", "fraction"}
INDICES = {"rank", "peer", "rep", "layer", "stream", "span", "flag", "op", "reps", "wrong"}
BAD_INDICES = [-1, -7, -2 ** 31, 2 ** 31 - 1, 1000, 65536]
BAD_NUMBERS = [float("nan"), float("inf"), float("-inf"), 1e308, -1e308]
GARBAGE_YAML = [b"{{{ not: yaml", b"name: x\ncp: 0\n", b"cp: -3\ncontext: 1\nbucket: 1\n", b"\xff\xfe\x00",
                b"name: cp4-64k\ncp: 4\ncontext: 65536\nbucket: 16896\nmodel: {preset: nope}\n"]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ---- byte-level mutations ----------------------------------------------------------

def metadata_offsets(data):
    found = []
    for sig in SIGNATURES:
        start = data.find(sig)
        while start >= 0:
            found.append(start)
            start = data.find(sig, start + 1)
    return sorted(found)


def data_ranges(path):
    """(offset, bytes) of each stored dataset's raw data: contiguous or each chunk."""
    ranges = []
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if not isinstance(obj, h5py.Dataset):
                return
            try:
                if obj.chunks:
                    for i in range(obj.id.get_num_chunks()):
                        info = obj.id.get_chunk_info(i)
                        ranges.append((info.byte_offset, info.size))
                elif obj.id.get_offset() is not None:
                    ranges.append((obj.id.get_offset(), obj.id.get_storage_size()))
            except Exception:
                pass
        f.visititems(visit)
    return [(o, n) for o, n in ranges if n > 0]


def flip_bits(data, offsets, rng, what):
    for at in offsets:
        bit = rng.randrange(8)
        data[at] ^= 1 << bit
    return "{} at {}".format(what, ",".join("0x{:x}".format(o) for o in offsets))


def byte_mutation(mutation, seed, data, rng, layout):
    """Mutates `data` (a bytearray of the seed) in place; returns the detail, or the new bytes."""
    size = len(data)
    if mutation == "truncate":
        at = rng.choice([0, 8, 47, 96, 512, size // 2, size - 1, rng.randrange(size), rng.randrange(size)])
        del data[at:]
        return "at {} of {}".format(at, size)
    if mutation == "flip-superblock":
        return flip_bits(data, sorted(rng.sample(range(96), rng.randint(1, 3))), rng, "bits")
    if mutation == "flip-metadata":
        start = rng.choice(layout["metadata"])
        return flip_bits(data, sorted({min(size - 1, start + rng.randrange(4, 96)) for _ in range(rng.randint(1, 3))}),
                         rng, "bits of the structure at 0x{:x}".format(start))
    if mutation == "flip-data":
        offset, n = rng.choice(layout["data"])
        return flip_bits(data, sorted({offset + rng.randrange(n) for _ in range(rng.randint(1, 8))}), rng,
                         "bits of the data at 0x{:x}+{}".format(offset, n))
    if mutation == "overwrite":
        at = rng.randrange(size)
        data[at:at + 16] = bytes(rng.randrange(256) for _ in range(16))[:max(0, size - at)]
        return "16 bytes at 0x{:x}".format(at)
    raise ValueError(mutation)


# ---- structured mutations (h5py) ----------------------------------------------------

def all_datasets(f):
    out = []
    f.visititems(lambda name, obj: out.append(name) if isinstance(obj, h5py.Dataset) else None)
    return sorted(out)


def all_attributes(f):
    """(object path, attribute name) of every attribute, the root's first."""
    out = [("/", a) for a in sorted(f.attrs)]
    f.visititems(lambda name, obj: out.extend((name, a) for a in sorted(obj.attrs)))
    return out


def replace(f, path, data, dtype=None):
    attrs = dict(f[path].attrs)
    del f[path]
    ds = f.create_dataset(path, data=data, dtype=dtype)
    for k, v in attrs.items():
        ds.attrs[k] = v
    return ds


def columns_named(f, names):
    """(dataset path, field or None) of the numeric columns whose name is in names."""
    out = []
    for path in all_datasets(f):
        dt = f[path].dtype
        if dt.names:
            out += [(path, n) for n in dt.names if n in names and np.issubdtype(dt[n], np.number)]
        elif os.path.basename(path) in names and np.issubdtype(dt, np.number):
            out.append((path, None))
    return out


def set_column(f, path, field, value, rng):
    data = f[path][()]
    if np.ndim(data) == 0 or not len(data):
        return "{} has no rows".format(path)
    rows = slice(None) if rng.random() < 0.5 else sorted(rng.sample(range(len(data)), min(len(data), 3)))
    target = data[field] if field else data
    if np.issubdtype(target.dtype, np.integer):
        info = np.iinfo(target.dtype)
        value = int(min(max(value, info.min), info.max)) if np.isfinite(value) else info.max
    target[rows] = value
    if field:
        data[field] = target
    f[path][...] = data
    return "{}{} = {} ({} rows)".format(path, "." + field if field else "", value,
                                       "all" if rows == slice(None) else len(rows))


def swap_kinds(f, seed, rng):
    donor_seed = rng.choice([s for s in SEEDS if s.kind != seed.kind])
    with h5py.File(donor_seed.path, "r") as donor:
        choice = rng.randrange(3)
        if choice == 0:  # the kind attribute of another kind
            kind = donor.attrs.get("kind", b"run")
            f.attrs["kind"] = kind
            return "kind = {} ({})".format(kind, donor_seed.name)
        donated = all_datasets(donor)
        mine = all_datasets(f)
        if choice == 1 and donated and mine:  # one dataset for another
            src, dst = rng.choice(donated), rng.choice(mine)
            del f[dst]
            donor.copy(donor[src], f[os.path.dirname(dst) or "/"], name=os.path.basename(dst))
            return "{} = {}:{}".format(dst, donor_seed.name, src)
        for top in ("variants", "bench"):  # a top-level group or table of the donor's
            if top in donor:
                if top in f:
                    del f[top]
                donor.copy(donor[top], f, name=top)
                return "/{} = {}:/{}".format(top, donor_seed.name, top)
    return "nothing to swap"


def wrong_dtype(f, rng):
    if rng.random() < 0.3:
        obj, name = rng.choice(all_attributes(f))
        node = f[obj]
        old = node.attrs[name]
        new = rng.choice([np.float64(3.5), np.bytes_(b"seven"), np.array([1, 2, 3], dtype="i4"), np.int8(-1)])
        node.attrs[name] = new
        return "attribute {}@{}: {!r} -> {!r}".format(obj, name, old if np.size(old) < 4 else "...", new)
    path = rng.choice(all_datasets(f))
    data = f[path][()]
    dt = data.dtype
    if dt.names:
        field = rng.choice(dt.names)
        ftype = dt[field]
        new_type = "S8" if ftype.kind != "S" else "<f8"
        if rng.random() < 0.25:  # the column missing
            fields = [(n, dt[n]) for n in dt.names if n != field]
            new = np.zeros(data.shape, dtype=fields)
            for n, _ in fields:
                new[n] = data[n]
            replace(f, path, new)
            return "{}: column {} missing".format(path, field)
        fields = [(n, new_type if n == field else dt[n]) for n in dt.names]
        new = np.zeros(data.shape, dtype=fields)
        for n in dt.names:
            if n != field:
                new[n] = data[n]
        replace(f, path, new)
        return "{}: column {} {} -> {}".format(path, field, ftype, new_type)
    new_type = rng.choice(["S8", "<i1", ">f4", "<u8", [("x", "<f8")]])
    new = np.zeros(np.shape(data), dtype=new_type)
    replace(f, path, new)
    return "{}: {} -> {}".format(path, dt, new_type)


def wrong_dims(f, rng):
    path = rng.choice(all_datasets(f))
    data = f[path][()]
    flat = np.reshape(data, -1)
    shape = rng.choice(["column", "row", "scalar", "empty-2d", "3d", "huge"])
    if shape == "huge":  # 64 GiB declared, nothing stored (chunks never written read as fill values)
        del f[path]
        f.create_dataset(path, shape=(2 ** 36 // data.dtype.itemsize,), dtype=data.dtype, chunks=(1024,))
        return "{}: {} -> {} rows, none stored".format(path, np.shape(data), 2 ** 36 // data.dtype.itemsize)
    if shape == "column":
        new = flat.reshape(-1, 1)
    elif shape == "row":
        new = flat.reshape(1, -1)
    elif shape == "scalar":
        new = flat[0] if len(flat) else np.zeros((), dtype=data.dtype)
    elif shape == "empty-2d":
        new = np.zeros((0, 3), dtype=data.dtype)
    else:
        new = np.zeros((2, 1, 2), dtype=data.dtype)
    replace(f, path, new)
    return "{}: {} -> {}".format(path, np.shape(data), np.shape(new))


def nonfinite(f, rng):
    value = rng.choice(BAD_NUMBERS)
    attrs = [(o, a) for o, a in all_attributes(f) if a in TIMING]
    columns = columns_named(f, TIMING)
    if attrs and (not columns or rng.random() < 0.2):
        obj, name = rng.choice(attrs)
        f[obj].attrs[name] = value
        return "attribute {}@{} = {}".format(obj, name, value)
    if not columns:
        return "no timing column"
    path, field = rng.choice(columns)
    return set_column(f, path, field, value, rng)


def empty(f, rng):
    choice = rng.randrange(3)
    if choice == 0 and "variants" in f:
        for name in list(f["variants"]):
            del f["variants"][name]
        return "/variants holds no variant"
    if choice == 1 and "variants" in f:
        del f["variants"]
        return "no /variants"
    path = rng.choice(all_datasets(f))
    data = f[path][()]
    replace(f, path, data[:0] if data.ndim else data.reshape(1)[:0])
    return "{}: no rows".format(path)


def rank_range(f, rng):
    columns = columns_named(f, INDICES)
    attrs = [(o, a) for o, a in all_attributes(f) if a in ("rep", "first_token", "world_size", "memory_ranks_per_gpu")]
    if attrs and (not columns or rng.random() < 0.15):
        obj, name = rng.choice(attrs)
        value = rng.choice(BAD_INDICES)
        old = np.asarray(f[obj].attrs[name])
        f[obj].attrs[name] = np.asarray(value).astype(old.dtype) if old.dtype.kind in "iuf" else value
        return "attribute {}@{} = {}".format(obj, name, value)
    if not columns:
        return "no index column"
    path, field = rng.choice(columns)
    return set_column(f, path, field, rng.choice(BAD_INDICES), rng)


def missing_attr(f, rng):
    if "scenario_yaml" in f.attrs and rng.random() < 0.25:
        text = rng.choice(GARBAGE_YAML)
        f.attrs["scenario_yaml"] = np.bytes_(text)
        return "scenario_yaml = {!r}".format(text)
    obj, name = rng.choice(all_attributes(f))
    del f[obj].attrs[name]
    return "no attribute {}@{}".format(obj, name)


STRUCTURED = {"swap-kinds": lambda f, seed, rng: swap_kinds(f, seed, rng),
              "wrong-dtype": lambda f, seed, rng: wrong_dtype(f, rng),
              "wrong-dims": lambda f, seed, rng: wrong_dims(f, rng),
              "nonfinite": lambda f, seed, rng: nonfinite(f, rng),
              "empty": lambda f, seed, rng: empty(f, rng),
              "rank-range": lambda f, seed, rng: rank_range(f, rng),
              "missing-attr": lambda f, seed, rng: missing_attr(f, rng)}


def make_mutant(case, layouts, folder):
    """Writes case's mutant; returns (seed, mutation, detail, path)."""
    seed = SEEDS[case % len(SEEDS)]
    mutation = MUTATIONS[(case // len(SEEDS)) % len(MUTATIONS)]
    rng = random.Random("{}/{}".format(layouts["seed"], case))
    path = os.path.join(folder, "{:04d}-{}-{}.h5".format(case, seed.name, mutation))
    if mutation in STRUCTURED:
        shutil.copyfile(seed.path, path)
        with h5py.File(path, "r+") as f:
            detail = STRUCTURED[mutation](f, seed, rng)
    else:
        with open(seed.path, "rb") as f:
            data = bytearray(f.read())
        layout = layouts[seed.name]
        applied = mutation
        if mutation in METADATA_DAMAGE and layout["unchecked"] and not layouts["unchecked_metadata"]:
            applied = "flip-data"  # (the docstring says why)
        detail = byte_mutation(applied, seed, data, rng, layout)
        if applied != mutation:
            detail = "unchecked metadata: {} {}".format(applied, detail)
        with open(path, "wb") as f:
            f.write(data)
    return seed, mutation, detail, path


# ---- the tools ----------------------------------------------------------------------------

def tool_commands(exe, seed, mutant, case, folder, pbresults):
    """(tool name, argv, the gate?) for each tool that reads the mutant."""
    stem = os.path.join(folder, "{:04d}".format(case))
    trace = ["trace", mutant, "-o", stem + ".trace.json", "--overwrite"]
    if seed.variant:
        trace += ["--variant", seed.variant]
    gate = ["compare", mutant, "--baseline", seed.path] if case % 2 == 0 else \
        ["compare", seed.path, "--baseline", mutant]
    tools = [("compare", [exe, "compare", mutant], False),
             ("compare-2", [exe, "compare", mutant, seed.path], False),
             ("gate-candidate" if case % 2 == 0 else "gate-baseline", [exe] + gate, True),
             ("trace", [exe] + trace, False),
             ("slim", [exe, "slim", mutant, "-o", stem + "-slim.h5", "--overwrite"], False)]
    if seed.kind == "bench":
        tools.append(("calibrate", [exe, "plan", os.path.join(SCENARIOS, "smoke.yaml"), "--calibrate", mutant], False))
    elif seed.measured_scenario:
        tools.append(("measured", [exe, "plan", os.path.join(SCENARIOS, seed.measured_scenario), "--calibrate",
                                   committed("gemm.h5"), "--measured", mutant], False))
    if pbresults:
        tools.append(("pbresults", [sys.executable, os.path.abspath(__file__), "--pbresults-worker", mutant], False))
    return tools


SANITIZER = re.compile(r"Sanitizer|runtime error:|Segmentation fault|core dumped")


def judge(gate, rc, out, err, named):
    """None when the tool kept the rule; else what it broke. `named`: the
    files its error may name (the mutant, and the seed it is compared with)."""
    lines = [line for line in err.splitlines() if line.strip()]
    if rc < 0 or rc > 128:
        return "signal {}".format(-rc if rc < 0 else rc - 128)
    if SANITIZER.search(err):
        return "a sanitizer's report on stderr"
    if "Traceback (most recent call last)" in err:
        return "a Python traceback"
    if rc == 0 or (gate and rc == 1):
        return None
    if rc != 2:
        return "exit {}".format(rc)
    if gate and not lines and "result: cannot judge" in out:
        return None
    if len(lines) != 1:
        return "exit 2 with {} lines on stderr".format(len(lines))
    if "error: " not in lines[0]:
        return "exit 2 without 'error: ' on stderr"
    if not any(path in lines[0] for path in named):
        return "exit 2 with an error that names no file it was given" if len(named) > 1 else \
            "exit 2 with an error that does not name the mutant"
    return None


def telling_line(out, err):
    """The line of a tool's output that says most: a sanitizer's finding, a
    traceback's exception, else the first line of stderr, else of stdout."""
    lines = [line for line in err.splitlines() if line.strip()]
    finding = [line for line in lines if re.search(r"ERROR: \w+Sanitizer|runtime error:", line)]
    if finding:
        return finding[0]
    if any(line.startswith("Traceback") for line in lines):
        return lines[-1]
    return next(iter(lines + [line for line in out.splitlines() if line.strip()]), "")


def outcome(tool, gate, rc, out):
    if rc == 0:
        return "ok"
    if gate and rc == 1:
        return "regressed"
    if gate and "result: cannot judge" in out:
        return "cannot judge"
    return "refused"


def run_case(args, case, layouts, folder, env):
    seed, mutation, detail, mutant = make_mutant(case, layouts, folder)
    digest = sha256(mutant)
    # Isolated singletons all take job family 0: a session folder of the case's own, or
    # two at once race on /tmp/ompi.<host>.<uid>/jf.0 (mkdir fails, MPI_Init aborts).
    env = dict(env, OMPI_MCA_orte_tmpdir_base=os.path.join(folder, "{:04d}.mpi".format(case)))
    os.makedirs(env["OMPI_MCA_orte_tmpdir_base"])
    results, failures = [], []
    for tool, argv, gate in tool_commands(args.exe, seed, mutant, case, folder, not args.no_pbresults):
        started = time.monotonic()
        try:
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=args.timeout, env=env,
                               universal_newlines=True, errors="replace")
            rc, out, err = p.returncode, p.stdout, p.stderr
            broken = judge(gate, rc, out, err, [mutant] + ([seed.path] if seed.path in argv else []))
        except subprocess.TimeoutExpired as e:
            rc, out, err = None, "", (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else ""
            broken = "hang (over {} s)".format(args.timeout)
        except OSError as e:
            rc, out, err, broken = None, "", str(e), "cannot start"
        if broken is None and sha256(mutant) != digest:
            broken = "wrote to its input"
        first = telling_line(out, err)
        results.append((tool, "FAILED" if broken else outcome(tool, gate, rc, out), time.monotonic() - started))
        if broken:
            failures.append("case {} ({} {}: {}): {}: {}, exit {}: {}\n    {}".format(
                case, seed.name, mutation, detail, tool, broken, rc, first[:300], " ".join(argv)))
    if not failures:  # the mutant, the outputs, the session folder
        for name in os.listdir(folder):
            if name.startswith("{:04d}".format(case)):
                path = os.path.join(folder, name)
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    return case, results, failures


# ---- pbresults.py, in its own process --------------------------------------------------------

def pbresults_worker(path):
    """Every reading function a plot script calls, on one file: exit 0, or 2
    with the ResultsError (one line naming the file); anything else escapes."""
    try:
        f = pr.open_results(path)
        try:
            pr.kind(f), pr.unit(f), pr.per_layer(f), pr.scenario_name(f), pr.gpus(f), pr.provenance(f)
            pr.describe_file(path, f), pr.cut_families(f)
            if pr.kind(f) in pr.BENCH_KINDS:
                pr.bench_rows(f)
            names = pr.variant_names(f)
            pr.check_variants(path, f, names)
            for v in names:
                pr.cuts_on(f, v), pr.variant_label(f, v), pr.family_ms(f, v), pr.rank_ms(f, v), pr.reps(f, v)
                pr.wall_ttft_ms(f, v), pr.ttft_headline(f, v), pr.ttft_label(f, v)
                try:
                    pr.ttft(f, v)
                except pr.ResultsError as e:
                    if path not in str(e):
                        raise
        finally:
            f.close()
    except pr.ResultsError as e:
        print("pbresults: error: {}".format(str(e).replace("\n", " ")), file=sys.stderr)
        return 2
    return 0


# ---- main ----------------------------------------------------------------------------------

def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--pbresults-worker":
        return pbresults_worker(sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("exe")
    parser.add_argument("out_dir")
    parser.add_argument("--cases", type=int, default=168, help="mutants (default 168: each input x mutation twice)")
    parser.add_argument("--seed", type=int, default=1, help="the random generator's seed (default 1)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds one tool may take on one mutant")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="cases run at once")
    parser.add_argument("--case", type=int, action="append", help="run only this case (repeat for more)")
    parser.add_argument("--no-pbresults", action="store_true", help="skip pbresults.py (the probe's run)")
    parser.add_argument("--unchecked-metadata", action="store_true",
                        help="damage the metadata of files in HDF5's earliest format too (crashes libhdf5 1.10)")
    args = parser.parse_args()
    args.exe = os.path.abspath(args.exe)

    folder = os.path.join(os.path.abspath(args.out_dir), "cases")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    seed_digests = {s.path: sha256(s.path) for s in SEEDS}
    layouts = {"seed": args.seed, "unchecked_metadata": args.unchecked_metadata}
    for s in SEEDS:
        with open(s.path, "rb") as f:
            data = f.read()
        # superblock versions 0 and 1 (byte 8): the earliest file format, no metadata checksums
        layouts[s.name] = {"metadata": metadata_offsets(data), "data": data_ranges(s.path), "unchecked": data[8] < 2}
    # prefill-bench alone is an MPI singleton: no daemon, no UCX (0.1 s a start instead of 0.4 s).
    env = dict(os.environ, OMPI_MCA_ess_singleton_isolated="1", OMPI_MCA_pml="ob1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("PB_DEBUG", None)

    cases = args.case or list(range(args.cases))
    started = time.monotonic()
    tally, seconds, failures, failed_cases = {}, Counter(), [], []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for case, results, failed in pool.map(lambda c: run_case(args, c, layouts, folder, env), cases):
            for tool, result, took in results:
                tally.setdefault(tool, Counter())[result] += 1
                seconds[tool] += took
            failures += failed
            failed_cases += [case] if failed else []
    for path, digest in seed_digests.items():
        if sha256(path) != digest:
            failures.append("the committed input {} changed".format(path))

    runs = sum(sum(c.values()) for c in tally.values())
    print("test_fuzz_readers: {} cases ({} inputs x {} mutations, seed {}), {} tool runs in {:.0f} s with {}".format(
        len(cases), len(SEEDS), len(MUTATIONS), args.seed, runs, time.monotonic() - started,
        os.path.basename(args.exe)))
    for tool in sorted(tally):
        print("  {:<15} {:<50} {:.2f} s a run".format(tool, ", ".join(
            "{} {}".format(k, n) for k, n in sorted(tally[tool].items())), seconds[tool] / sum(tally[tool].values())))
    if failures:
        print("FAILED: {} tool runs broke the rule (mutants kept in {}):".format(len(failures), folder),
              file=sys.stderr)
        for failure in failures:
            print("  " + failure, file=sys.stderr)
        if failed_cases:
            print("rerun: {} {} {} --seed {}{}".format(os.path.basename(__file__), args.exe, args.out_dir, args.seed,
                                                      "".join(" --case {}".format(c) for c in failed_cases)),
                  file=sys.stderr)
        return 1
    print("passed: every tool ended in a result or one named error on every mutant")
    return 0


if __name__ == "__main__":
    sys.exit(main())
