"""Reading prefill-bench HDF5 results (schema in README.md, "Results schema")."""
import h5py
import numpy as np

SCHEMA_VERSIONS = (1, 2)  # 2 added spans.stream, bells and projection/


def _text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def open_results(path):
    f = h5py.File(path, "r")
    version = int(f.attrs.get("schema_version", -1))
    if version not in SCHEMA_VERSIONS:
        raise SystemExit(f"{path}: schema_version {version}, this script reads {', '.join(map(str, SCHEMA_VERSIONS))}")
    return f


def variant_names(f):
    return list(f["variants"].keys()) if "variants" in f else []


def family_ms(f, variant):
    """{rank: {family: ms per superstep}}: for measured runs the median over
    reps of each rep's per-family sum; for plans (rep -1) the plan's sum."""
    spans = f["variants"][variant]["spans"][()]
    if len(spans) == 0:
        return {}
    reps = spans["rep"]
    ranks = spans["rank"]
    fams = np.array([_text(x) for x in spans["family"]])
    times = spans["time_us"] / 1e3
    out = {}
    for rank in np.unique(ranks):
        per_family = {}
        for fam in np.unique(fams[ranks == rank]):
            sel = (ranks == rank) & (fams == fam)
            per_rep = [times[sel & (reps == r)].sum() for r in np.unique(reps[sel])]
            per_family[str(fam)] = float(np.median(per_rep))
        out[int(rank)] = per_family
    return out


def describe(f, variant):
    g = f["variants"][variant]
    kind = _text(f.attrs.get("kind", "run"))
    gpus = _text(f.attrs.get("gpus", f.attrs.get("gpu_profile", "")))
    return kind, _text(g.attrs.get("cuts", "")), gpus.splitlines()[0] if gpus else ""
