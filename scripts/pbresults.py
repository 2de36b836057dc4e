"""Reading prefill-bench HDF5 results (schema in docs/results.md;
harness/results/results.h) for the plot scripts."""
import os
import re
import sys

import h5py
import numpy as np

SCHEMA_VERSIONS = (1, 2, 3, 4)  # 2 added spans.stream, bells and projection/; 3 spans.start_us;
# 4 bench rows' verdicts (wrong, error, error_floor) and /cuts
SPAN_KINDS = ("run", "plan", "lane")             # files with /variants/<name>/spans
BENCH_KINDS = ("kernels", "fmha", "kda", "moe", "gemm")  # files with /bench


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def open_results(path):
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        sys.exit("{}: cannot open as HDF5 ({})".format(path, e))
    version = int(f.attrs.get("schema_version", -1))
    if version not in SCHEMA_VERSIONS:
        sys.exit("{}: schema_version {}, this script reads {}".format(
            path, version, ", ".join(map(str, SCHEMA_VERSIONS))))
    return f


def kind(f):
    return text(f.attrs.get("kind", "run"))


def variant_names(f):
    return list(f["variants"].keys()) if "variants" in f else []


def check_variants(path, f, wanted):
    """Exits naming the file and its variants when one of wanted is not in it."""
    names = variant_names(f)
    for name in wanted:
        if name not in names:
            sys.exit("{}: no variant '{}'; its variants: {}".format(path, name, ", ".join(names) or "(none)"))


def unit(f):
    """What one number of a span file measures."""
    k = kind(f)
    if k == "lane":
        return "ms per MLA layer (measured)"
    if k == "plan":
        return "ms per superstep (roofline, {} profile)".format(text(f.attrs.get("gpu_profile", "?")))
    return "ms per superstep (measured)"


def per_layer(f):
    return kind(f) == "lane"


def scenario_name(f):
    m = re.search(r"^name:\s*(\S+)", text(f.attrs.get("scenario_yaml", "")), re.M)
    return m.group(1) if m else ""


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


def provenance(f):
    sha = text(f.attrs.get("git_sha", "unknown"))
    dirty = text(f.attrs.get("git_dirty", "")) == "true"
    return "git {}{}".format(sha[:10], " (dirty)" if dirty else "")


def describe_file(path, f):
    """One line naming the file, its scenario, its kind and where it ran."""
    parts = [os.path.basename(path)]
    name = scenario_name(f)
    if name:
        parts.append(name)
    parts += [kind(f), gpus(f), provenance(f)]
    return " · ".join(p for p in parts if p)


def cuts_on(f, variant):
    """'cuts: land, conv' from 'land=on conv=off ...'; 'no cuts' / 'all cuts'."""
    spec = text(f["variants"][variant].attrs.get("cuts", ""))
    pairs = [p.split("=", 1) for p in spec.split() if "=" in p]
    on = [k for k, v in pairs if v == "on"]
    if not pairs:
        return ""
    if not on:
        return "no cuts"
    if len(on) == len(pairs):
        return "all cuts"
    return "cuts: " + ", ".join(on)


def cut_families(f):
    """Cut name -> the span family it changes, from the file's /cuts table
    (the cut table of the build that wrote it); empty for files without one."""
    if "cuts" not in f:
        return {}
    return {text(row["name"]): text(row["family"]) for row in f["cuts"][()]}


def variant_label(f, variant):
    """The variant's name, with its cuts when the name does not imply them."""
    cuts = cuts_on(f, variant)
    implied = {"baseline": "no cuts", "none": "no cuts", "all": "all cuts"}.get(variant, "cuts: " + variant)
    return variant if cuts in ("", implied) else "{} ({})".format(variant, cuts)


def family_ms(f, variant):
    """{rank: {family: ms}} of one variant: for measured runs the median over
    reps of each rep's per-family sum; for plans (rep -1) the plan's sum."""
    return {rank: {fam: float(np.median(per_rep)) for fam, per_rep in fams.items()}
            for rank, fams in family_rep_ms(f, variant).items()}


def family_rep_ms(f, variant):
    """{rank: {family: [ms per rep]}} of one variant, reps in order (a plan: its
    one rep -1)."""
    spans = f["variants"][variant]["spans"][()]
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


def rank_ms(f, variant):
    """{rank: ms}: the median wall over reps (run, lane), or the plan's sum of
    its spans' roofline times."""
    if kind(f) == "plan":
        return {r: sum(fams.values()) for r, fams in family_ms(f, variant).items()}
    rr = f["variants"][variant]["rank_reps"][()]
    return {int(r): float(np.median(rr["wall_us"][rr["rank"] == r])) / 1e3 for r in np.unique(rr["rank"])}


def reps(f, variant):
    g = f["variants"][variant]
    if kind(f) == "plan" or "rank_reps" not in g:
        return 0
    rr = g["rank_reps"][()]
    return len(np.unique(rr["rep"])) if len(rr) else 0


def ttft_ms(f, variant):
    """Median TTFT of a run's variant; None for plan and lane files."""
    if kind(f) != "run":
        return None
    t = f["variants"][variant]["ttft_ms"][()]
    return float(np.median(t)) if len(t) else None


def bench_rows(f):
    """The /bench table as a list of dicts with str fields decoded."""
    table = f["bench"][()]
    names = table.dtype.names
    return [{n: (text(r[n]) if isinstance(r[n], bytes) else r[n].item()) for n in names} for r in table]
