"""Reading prefill-bench HDF5 results (schema in docs/results.md;
harness/results/results.h) for the plot scripts and tests.

A library: it never exits. A file that cannot be read as asked raises
ResultsError, whose message names the file and what is wrong; a command-line
script catches it at its entry point (pbplot.run_main). That holds for damaged
files and files not of the schema too: every reading function turns what h5py
and numpy raise on them into ResultsError (test/scripts/test_fuzz_readers.py).
"""
import functools
import os
import re

import h5py
import numpy as np

SCHEMA_VERSIONS = (1, 2, 3, 4)  # 2 added spans.stream, bells and projection/; 3 spans.start_us;
# 4 bench rows' verdicts (wrong, error, error_floor) and /cuts
SPAN_KINDS = ("run", "plan", "lane")             # files with /variants/<name>/spans
BENCH_KINDS = ("kernels", "fmha", "kda", "moe", "gemm")  # files with /bench


class ResultsError(Exception):
    """A results file that cannot be read as asked: "<file>: <what is wrong>"."""


# What h5py and numpy raise on a damaged file, or one not of the schema: an
# object, a link or a chunk that does not read (OSError, KeyError,
# RuntimeError), a table without a field or of other dimensions (ValueError,
# IndexError), a value of another type (TypeError).
_DAMAGE = (OSError, KeyError, RuntimeError, ValueError, IndexError, TypeError)


def _reads(fn):
    """fn, its file's damage raised as ResultsError naming the file."""
    @functools.wraps(fn)
    def reading(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _DAMAGE as e:
            files = [_where(a) for a in args if isinstance(a, h5py.Group)] or args[:1]
            raise ResultsError("{}: damaged, or not a results file of the schema ({} in {}: {})".format(
                files[0], type(e).__name__, fn.__name__, str(e).replace("\n", " "))) from e
    return reading


def _where(f):
    """The file, or for a group inside one (a sweep's point) "<file>:<group>"."""
    return f.filename if isinstance(f, h5py.File) else "{}:{}".format(f.file.filename, f.name)


def _read(ds):
    """A dataset's values; ResultsError, before reading, when it declares far
    more than the file stores for it (a damaged dimension, chunks never
    written: results files store every element, deflated at most 1032:1)."""
    if not isinstance(ds, h5py.Dataset):
        raise ResultsError("{}: {} is not a dataset".format(ds.file.filename, ds.name))
    stored = ds.id.get_storage_size()
    if float(ds.size) * ds.dtype.itemsize > 2048.0 * stored:
        raise ResultsError("{}: {} declares {} elements but the file stores {} bytes of it".format(
            ds.file.filename, ds.name, " x ".join(map(str, ds.shape)), stored))
    return ds[()]


def text(v):
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


@_reads
def open_results(path):
    if not os.path.isfile(path):
        raise ResultsError("{}: no such file".format(path))
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise ResultsError("{}: cannot open as HDF5 ({})".format(path, e))
    try:
        version = int(f.attrs.get("schema_version", -1))
    except _DAMAGE:
        f.close()
        raise
    if version not in SCHEMA_VERSIONS:
        f.close()
        raise ResultsError("{}: schema_version {}, this library reads {}".format(
            path, version, ", ".join(map(str, SCHEMA_VERSIONS))))
    return f


@_reads
def kind(f):
    return text(f.attrs.get("kind", "run"))


@_reads
def variant_names(f):
    return list(f["variants"].keys()) if "variants" in f else []


@_reads
def check_variants(path, f, wanted):
    """Raises ResultsError naming the file and its variants when one of wanted
    is not in it."""
    names = variant_names(f)
    for name in wanted:
        if name not in names:
            raise ResultsError("{}: no variant '{}'; its variants: {}".format(path, name, ", ".join(names) or "(none)"))


@_reads
def variant_group(f, variant):
    """/variants/<variant>; ResultsError when the file has no such variant."""
    check_variants(_where(f), f, [variant])
    return f["variants"][variant]


@_reads
def unit(f):
    """What one number of a span file measures."""
    k = kind(f)
    if k == "lane":
        return "ms per MLA layer (measured)"
    if k == "plan":
        return "ms per superstep (roofline, {} profile)".format(text(f.attrs.get("gpu_profile", "?")))
    return "ms per superstep (measured)"


@_reads
def per_layer(f):
    return kind(f) == "lane"


@_reads
def scenario_name(f):
    m = re.search(r"^name:\s*(\S+)", text(f.attrs.get("scenario_yaml", "")), re.M)
    return m.group(1) if m else ""


@_reads
def gpus(f):
    """'8 ranks on 1 NVIDIA H200', 'NVIDIA H200', or the plan's profile."""
    if kind(f) == "plan":
        return "{} profile".format(text(f.attrs.get("gpu_profile", "?")))
    lines = [l for l in text(f.attrs.get("gpus", "")).splitlines() if l.strip()]
    models, ids = [], set()
    for line in lines:
        m = re.match(r"rank \d+: (.*?) (GPU-[0-9a-f-]+)", line)
        if m:
            models.append(m.group(1))
            ids.add(m.group(2))
    if not models:
        return lines[0] if lines else ""
    model = models[0] if len(set(models)) == 1 else "/".join(sorted(set(models)))
    if len(models) == 1:
        return model
    return "{} ranks on {} {}".format(len(models), len(ids), model)


@_reads
def provenance(f):
    sha = text(f.attrs.get("git_sha", "unknown"))
    dirty = text(f.attrs.get("git_dirty", "")) == "true"
    return "git {}{}".format(sha[:10], " (dirty)" if dirty else "")


@_reads
def describe_file(path, f):
    """One line naming the file, its scenario, its kind and where it ran."""
    parts = [os.path.basename(path)]
    name = scenario_name(f)
    if name:
        parts.append(name)
    parts += [kind(f), gpus(f), provenance(f)]
    return " · ".join(p for p in parts if p)


@_reads
def cuts_on(f, variant):
    """'cuts: land, conv' from 'land=on conv=off ...'; 'no cuts'; 'all 8 cuts' (every
    cut the run knew: files of older builds knew fewer)."""
    spec = text(variant_group(f, variant).attrs.get("cuts", ""))
    pairs = [p.split("=", 1) for p in spec.split() if "=" in p]
    on = [k for k, v in pairs if v == "on"]
    if not pairs:
        return ""
    if not on:
        return "no cuts"
    if len(on) == len(pairs):
        return "all {} cuts".format(len(on))
    return "cuts: " + ", ".join(on)


@_reads
def cut_families(f):
    """Cut name -> the span family it changes, from the file's /cuts table
    (the cut table of the build that wrote it); empty for files without one."""
    if "cuts" not in f:
        return {}
    return {text(row["name"]): text(row["family"]) for row in _read(f["cuts"])}


@_reads
def variant_label(f, variant):
    """The variant's name, with its cuts when the name does not imply them;
    "all" always with how many it ran ("all (8 cuts)")."""
    cuts = cuts_on(f, variant)
    if variant == "all" and cuts.startswith("all "):
        return "all ({})".format(cuts[len("all "):])
    implied = {"baseline": "no cuts", "none": "no cuts"}.get(variant, "cuts: " + variant)
    return variant if cuts in ("", implied) else "{} ({})".format(variant, cuts)


@_reads
def family_ms(f, variant):
    """{rank: {family: ms}} of one variant: for measured runs the median over
    reps of each rep's per-family sum; for plans (rep -1) the plan's sum."""
    return {rank: {fam: float(np.median(per_rep)) for fam, per_rep in fams.items()}
            for rank, fams in family_rep_ms(f, variant).items()}


@_reads
def family_rep_ms(f, variant):
    """{rank: {family: [ms per rep]}} of one variant, reps in order (a plan: its
    one rep -1)."""
    spans = _read(variant_group(f, variant)["spans"])
    if len(spans) == 0:
        return {}
    reps = spans["rep"]
    ranks = spans["rank"]
    fams = np.array([text(x) for x in spans["family"]])
    times = spans["time_us"] / 1e3
    out = {}
    for rank in np.unique(ranks):
        per_family = {}
        for fam in np.unique(fams[ranks == rank]):
            sel = (ranks == rank) & (fams == fam)
            per_family[str(fam)] = [float(times[sel & (reps == r)].sum()) for r in np.unique(reps[sel])]
        out[int(rank)] = per_family
    return out


@_reads
def rank_ms(f, variant):
    """{rank: ms}: the median wall over reps (run, lane), or the plan's sum of
    its spans' roofline times."""
    if kind(f) == "plan":
        return {r: sum(fams.values()) for r, fams in family_ms(f, variant).items()}
    rr = _read(variant_group(f, variant)["rank_reps"])
    return {int(r): float(np.median(rr["wall_us"][rr["rank"] == r])) / 1e3 for r in np.unique(rr["rank"])}


@_reads
def reps(f, variant):
    g = variant_group(f, variant)
    if kind(f) == "plan" or "rank_reps" not in g:
        return 0
    rr = _read(g["rank_reps"])
    return len(np.unique(rr["rep"])) if len(rr) else 0


@_reads
def wall_ttft_ms(f, variant):
    """The median of /variants/<variant>/ttft_ms, the last rank's host time from
    the gang barrier to the first token; None for plan and lane files or no
    reps. Where the ranks took turns on one GPU this is the serialized wall
    (the sum of the ranks), not the file's TTFT: that is ttft()."""
    if kind(f) != "run":
        return None
    t = _read(variant_group(f, variant)["ttft_ms"])
    return float(np.median(t)) if len(t) else None


# The headline TTFT: docs/results.md, "The headline TTFT".

@_reads
def ttft_headline(f, variant):
    """Which TTFT the file reports for variant: "projected" (the gang replayed
    over the measured links), "measured", or "planned" (a plan file: the
    calibrated plan's deepest rank where it was calibrated, else the
    roofline's). The root text ttft_headline when present; else projected
    when memory_ranks_per_gpu > 1 and the variant holds a measured
    projection."""
    g = variant_group(f, variant)
    if kind(f) == "plan":
        return "planned"
    if "ttft_headline" in f.attrs:
        headline = text(f.attrs["ttft_headline"])
        if headline not in ("projected", "measured"):
            raise ResultsError("{}: ttft_headline '{}', not projected or measured".format(_where(f), headline))
        return headline
    shared = float(f.attrs.get("memory_ranks_per_gpu", 1)) > 1
    return "projected" if shared and "projection/measured" in g else "measured"


@_reads
def ttft_samples(f, variant):
    """The headline TTFT of each rep, ms (numpy array): projected,
    projection/measured/reps ttft_ms; measured, ttft_ms; planned, the one
    value of the plan (calibrated_ms.<variant>, else the largest sum of a
    rank's spans). ResultsError when there is none."""
    g = variant_group(f, variant)
    headline = ttft_headline(f, variant)
    if headline == "planned":
        calibrated = f.attrs.get("calibrated_ms." + variant)
        if calibrated is not None and float(calibrated) > 0:
            return np.asarray([float(calibrated)])
        spans = _read(g["spans"])
        ranks = {}
        for rank, us in zip(spans["rank"], spans["time_us"]):
            ranks[int(rank)] = ranks.get(int(rank), 0.0) + float(us)
        if not ranks or max(ranks.values()) <= 0:
            raise ResultsError("{}: variant '{}' has no planned spans".format(_where(f), variant))
        return np.asarray([max(ranks.values()) / 1e3])
    projected = headline == "projected"
    where = "projection/measured/reps" if projected else "ttft_ms"
    samples = np.empty(0)
    if where in g:
        data = _read(g[where])
        samples = np.asarray(data["ttft_ms"] if projected else data, dtype=float)
    if not len(samples):
        raise ResultsError("{}: variant '{}' has no {} TTFT (/variants/{}/{})".format(
            _where(f), variant, "projected" if projected else "measured", variant, where))
    return samples


@_reads
def ttft(f, variant):
    """The file's TTFT of variant, ms: the median of ttft_samples."""
    return float(np.median(ttft_samples(f, variant)))


@_reads
def ttft_label(f, variant):
    """What to call ttft() in a plot: "projected gang TTFT", "planned TTFT" or "TTFT"."""
    return {"projected": "projected gang TTFT", "planned": "planned TTFT"}.get(ttft_headline(f, variant), "TTFT")


@_reads
def bench_rows(f):
    """The /bench table as a list of dicts with str fields decoded."""
    table = _read(f["bench"])
    names = table.dtype.names
    return [{n: (text(r[n]) if isinstance(r[n], bytes) else r[n].item()) for n in names} for r in table]


# Sweep files (harness/results/sweep_file.h, docs/sweep.md). A point's group
# is the point's own results file copied in whole: every function above reads it.

@_reads
def sweep_points(f):
    """The points of a sweep file, in the sweep's order: dicts of id, context,
    cp, precision, status (measured, planned, failed), error, and group."""
    if kind(f) != "sweep":
        raise ResultsError("{}: a '{}' file, not a sweep".format(_where(f), kind(f)))
    points = []
    for pid in (f["points"] if "points" in f else []):
        g = f["points"][pid]
        points.append({"id": pid, "context": int(g.attrs["sweep_context"]), "cp": int(g.attrs["sweep_cp"]),
                       "precision": text(g.attrs["sweep_precision"]), "status": text(g.attrs["sweep_status"]),
                       "error": text(g.attrs["sweep_error"]), "group": g})
    return points


@_reads
def point_families(g, variant):
    """{family: (ms, calibrated_ms)} of a point's deepest rank (its families
    table; calibrated_ms NaN where the plan was not calibrated)."""
    rows = _read(g["families"])
    return {text(r["family"]): (float(r["ms"]), float(r["calibrated_ms"]))
            for r in rows if text(r["variant"]) == variant}


@_reads
def point_ttft(g, variant):
    """{"ms", "roofline_ms", "calibrated"} of a sweep's point: a run's ttft();
    a plan's calibrated superstep (root number calibrated_ms.<variant>) where
    it was calibrated (calibrated True), else its roofline, the deepest rank's
    sum (roofline_ms; None for a run)."""
    if kind(g) != "plan":
        return {"ms": ttft(g, variant), "roofline_ms": None, "calibrated": False}
    roofline = sum(ms for ms, _ in point_families(g, variant).values())
    calibrated = g.attrs.get("calibrated_ms." + variant)
    return {"ms": float(calibrated) if calibrated is not None else roofline, "roofline_ms": roofline,
            "calibrated": calibrated is not None}


@_reads
def deep_rank_shares(g, variant):
    """{family: its share of a sweep point's deepest rank}: calibrated where
    the plan was, else measured or the roofline."""
    families = {k: (c if c == c else ms) for k, (ms, c) in point_families(g, variant).items()}
    total = sum(families.values())
    return {k: v / total for k, v in families.items()} if total > 0 else {}


@_reads
def recorded_mfu(f, variant):
    """The MFU against the datasheet's dense bf16 peak that `run` or `plan`
    recorded (root number mfu_bf16_datasheet.<variant>), None without it."""
    value = f.attrs.get("mfu_bf16_datasheet." + variant)
    return None if value is None else float(value)


@_reads
def point_memory_gb(g):
    """A sweep point's memory on its fullest GPU, GB (weights + arena + its
    ranks' own buffers, as `run` and `plan` record them); None without them."""
    keys = ("memory_weights_bytes", "memory_arena_bytes", "memory_rank_bytes")
    if any(k not in g.attrs for k in keys):
        return None
    return sum(float(g.attrs[k]) for k in keys) / 1e9


@_reads
def point_efficiency(g, variant):
    """A sweep point's parallel efficiency over cp (sweep_efficiency.<variant>,
    harness/results/sweep_file.h), None without it."""
    value = g.attrs.get("sweep_efficiency." + variant)
    return None if value is None else float(value)


def sweep_rows(path, f, variants):
    """One dict per measured or planned point of the sweep file and variant:
    file, id, context, cp, precision, status, variant, ttft_ms, roofline_ms,
    calibrated (a planned TTFT from the calibrated plan), shares (of the
    deepest rank), mfu, memory_gb, efficiency (the parallel efficiency over cp
    that `sweep` stored: sweep_efficiency.<variant>, None where the point has
    none); and the failed points as (id, error) pairs, apart."""
    rows, failed = [], []
    for p in sweep_points(f):
        if p["status"] == "failed":
            failed.append((p["id"], p["error"]))
            continue
        g = p["group"]
        for v in variants:
            if v not in variant_names(g):
                continue
            t = point_ttft(g, v)
            rows.append(dict(file=path, id=p["id"], context=p["context"], cp=p["cp"], precision=p["precision"],
                             status=p["status"], variant=v, ttft_ms=t["ms"], roofline_ms=t["roofline_ms"],
                             calibrated=t["calibrated"],
                             shares=deep_rank_shares(g, v), mfu=recorded_mfu(g, v), memory_gb=point_memory_gb(g),
                             efficiency=point_efficiency(g, v)))
    return rows, failed
