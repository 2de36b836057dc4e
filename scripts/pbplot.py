"""What every plot script shares: a Python that has h5py and matplotlib, one
colour per kernel family, titles that wrap instead of clipping, and the
annotations on bars (totals, deltas).

This module imports only the standard library at its top, so that a script can
import it under any python3 and call require_plotting_python() before it
imports matplotlib or h5py. Keep its syntax readable by Python 3.6.
"""
import colorsys
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap

INSTALL_HINT = "needs h5py and matplotlib: apt install python3-h5py python3-matplotlib (scripts/setup.sh does it)"
_REEXEC_MARK = "PB_PLOT_REEXEC"  # set on the re-executed process; stops a second attempt
_PROBE = "import h5py, matplotlib"


def _has_plotting_modules(python):
    try:
        return subprocess.run([python, "-c", _PROBE], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def default_candidates():
    """The interpreters tried after the current one, in order."""
    out = []
    for python in ("/usr/bin/python3", shutil.which("python3")):
        if python and python not in out and os.access(python, os.X_OK):
            out.append(python)
    return out


def require_plotting_python(candidates=None):
    """Returns when this interpreter imports h5py and matplotlib. Otherwise
    re-executes the running script under the first candidate that does
    (default_candidates()), or exits 1 with INSTALL_HINT."""
    try:
        import h5py  # noqa: F401
        import matplotlib  # noqa: F401
        return
    except ImportError as e:
        missing = getattr(e, "name", None) or str(e)
    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] not in ("", "-c") else None
    if script and not os.environ.get(_REEXEC_MARK):
        for python in default_candidates() if candidates is None else candidates:
            if _has_plotting_modules(python):
                os.environ[_REEXEC_MARK] = python
                sys.stdout.flush()
                os.execv(python, [python, script] + sys.argv[1:])
    tried = [sys.executable] + ([] if os.environ.get(_REEXEC_MARK) else
                                list(default_candidates() if candidates is None else candidates))
    sys.stderr.write("{}: {} (no {} in {})\n".format(os.path.basename(script or "python"), INSTALL_HINT,
                                                      missing, ", ".join(tried)))
    sys.exit(1)


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 9, "axes.titlesize": 9, "axes.spines.top": False,
                         "axes.spines.right": False, "hatch.linewidth": 0.6})
    return plt


# --- colours ----------------------------------------------------------------

# One colour per family, in every plot. The families are plan.h's anatomy
# columns, and the kernel benchmarks' block totals (moe bench).
FAMILY_COLOURS = {
    "gemm": "#4477AA",
    "moe_gemm": "#1B2F6B",
    "fmha": "#CC3311",
    "mla": "#AA3377",
    "lse_merge": "#EE3377",
    "o_finalize": "#F4A6B7",
    "kda": "#7B4FA0",
    "conv": "#228833",
    "land": "#EE7733",
    "elementwise": "#33BBEE",
    "attnres": "#CCBB44",
    "rmsnorm": "#8C6D46",
    "moe": "#009988",
    "embed": "#BBBBBB",
    "sample": "#777777",
    "fabric": "#D9D9D9",
    "first_token": "#555555",
    "moe_block": "#00665C",
    "moe_block_cutlass": "#00665C",
    "moe_block_loop": "#00665C",
    "dense_ffn": "#5E8C31",
    "quant": "#88CCEE",
}
FAMILY_HATCH = {"fabric": "xx"}  # time that is waiting, not work

# Variants of a run: baseline and all in greys, a single cut in the colour of
# the family it changes (the file's /cuts table: pbresults.cut_families).
VARIANT_COLOURS = {"baseline": "#9E9E9E", "none": "#9E9E9E", "all": "#263238"}

FASTER = "#1B7837"
SLOWER = "#B2182B"


def fallback_colour(name):
    """A colour that depends only on the name (never on the run or the plot)."""
    digest = int(hashlib.md5(name.encode()).hexdigest()[:8], 16)
    hue = (digest % 360) / 360.0
    r, g, b = colorsys.hsv_to_rgb(hue, 0.55, 0.72)
    return "#{:02X}{:02X}{:02X}".format(int(r * 255), int(g * 255), int(b * 255))


def family_colour(family):
    return FAMILY_COLOURS.get(family) or fallback_colour(family)


def variant_colour(variant, cut_families=None):
    """cut_families: cut name -> family, from the file (pbresults.cut_families)."""
    if variant in VARIANT_COLOURS:
        return VARIANT_COLOURS[variant]
    if cut_families and variant in cut_families:
        return family_colour(cut_families[variant])
    return fallback_colour(variant)


def lighter(colour, amount):
    """colour mixed with white; amount 0 keeps it, 1 gives white."""
    h = colour.lstrip("#")
    rgb = [int(h[i:i + 2], 16) for i in (0, 2, 4)]
    return "#" + "".join("{:02X}".format(int(round(c + (255 - c) * amount))) for c in rgb)


def variant_shades(n):
    """(lightening, hatch) for n variants drawn in one family colour: the first
    (the reference) lightest and hatched, the last the family colour itself."""
    if n == 1:
        return [(0.0, None)]
    return [(0.62 * (1 - i / (n - 1)), "///" if i == 0 else None) for i in range(n)]


# --- text -------------------------------------------------------------------

def fmt_ms(ms):
    if abs(ms) >= 100:
        return "{:.0f}".format(ms)
    if abs(ms) >= 10:
        return "{:.1f}".format(ms)
    if abs(ms) >= 1:
        return "{:.2f}".format(ms)
    return "{:.3f}".format(ms)


def fmt_us(us):
    return "{} ms".format(fmt_ms(us / 1e3)) if abs(us) >= 1000 else "{:.0f} µs".format(us) if abs(us) >= 10 \
        else "{:.1f} µs".format(us)


def fmt_delta_pct(new, ref):
    if ref == 0:
        return ""
    pct = 100.0 * (new - ref) / ref
    return "±0.0%" if abs(pct) < 0.05 else "{:+.1f}%".format(pct).replace("-", "−")


def fmt_delta_ms(new, ref):
    size = fmt_ms(abs(new - ref))
    if float(size) == 0:
        return "±0 ms"
    return ("+" if new > ref else "−") + size + " ms"


def delta_colour(new, ref):
    return FASTER if new < ref else SLOWER if new > ref else "#444444"


def annotate_bar(ax, x, top, value, ref=None, with_ms=False, fontsize=7):
    """value (ms) on top of a vertical bar; above it, when ref is given, the
    change against ref in % (and in ms with with_ms), green when faster."""
    ax.annotate(fmt_ms(value), (x, top), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                fontsize=fontsize)
    if ref is None:
        return
    delta = fmt_delta_pct(value, ref)
    if with_ms:
        delta = fmt_delta_ms(value, ref) + "\n" + delta
    ax.annotate(delta, (x, top), xytext=(0, 2 + 1.3 * fontsize), textcoords="offset points", ha="center",
                va="bottom", fontsize=fontsize, color=delta_colour(value, ref))


def wrap(text, width_in, fontsize):
    """Wraps each line of text to the characters that fit width_in inches."""
    chars = max(20, int(width_in * 72 / (fontsize * 0.56)))
    return "\n".join(textwrap.fill(line, chars) for line in text.split("\n"))


def set_title(fig, text, fontsize=10):
    fig.suptitle(wrap(text, fig.get_figwidth() - 0.3, fontsize), fontsize=fontsize)


def clipped_texts(fig):
    """What of fig's drawn text reaches outside it (should be nothing): the
    texts by their content, an axis's tick labels as 'x axis: <axes title>'."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox

    def outside(e):
        return e.x0 < box.x0 - 1 or e.y0 < box.y0 - 1 or e.x1 > box.x1 + 1 or e.y1 > box.y1 + 1

    tick_labels = set()
    out = []
    for ax in fig.get_axes():
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            for minor in (False, True):
                tick_labels.update(id(t) for t in axis.get_ticklabels(minor=minor))
            e = axis.get_tightbbox(renderer)
            if e is not None and outside(e):
                out.append("{} axis: {}".format(name, ax.get_title() or ax.get_ylabel()))
    for t in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "get_window_extent")):
        if id(t) in tick_labels or not t.get_visible() or not t.get_text().strip():
            continue
        if outside(t.get_window_extent(renderer)):
            out.append(t.get_text())
    return out


# --- command line and output ------------------------------------------------

def add_output_args(ap, default):
    ap.add_argument("-o", "--output", default=default, help="PNG to write (default: %(default)s)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing output")
    ap.add_argument("--dump", metavar="JSON", help="also write what was plotted, as JSON")


def parse(ap):
    """Flags in any position, files anywhere among them."""
    a = ap.parse_intermixed_args() if hasattr(ap, "parse_intermixed_args") else ap.parse_args()
    if os.path.exists(a.output) and not a.overwrite:
        sys.exit("{} exists; pass --overwrite or choose another -o".format(a.output))
    return a


def run_main(main):
    """Calls main(); a pbresults.ResultsError ends the script with one line,
    '<script>: error: <message>', on stderr and exit 2 (a user error)."""
    import pbresults
    try:
        main()
    except pbresults.ResultsError as e:
        sys.stderr.write("{}: error: {}\n".format(os.path.basename(sys.argv[0]), e))
        sys.exit(2)


def split_list(text):
    return [x.strip() for x in text.split(",") if x.strip()] if text else []


def save(fig, a, plotted):
    """Writes the PNG and, with --dump, plotted + the clipped texts as JSON."""
    fig.savefig(a.output, dpi=150)
    if a.dump:
        plotted = dict(plotted, output=a.output, clipped=clipped_texts(fig))
        with open(a.dump, "w") as out:
            json.dump(plotted, out, indent=1, sort_keys=True)
    print("wrote {}".format(a.output))
