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


def _drawn_texts(fig):
    """fig's visible, non-empty texts, each once; of the tick labels only those
    drawn (their axes shown, their tick inside the view)."""
    all_ticks, drawn_ticks = set(), set()
    for ax in fig.get_axes():
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            eps = 1e-9 * max(1.0, abs(hi - lo))
            shown = ax.axison and axis.get_visible()
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                labels = (tick.label1, tick.label2)
                all_ticks.update(id(t) for t in labels)
                loc = tick.get_loc()
                if shown and tick.get_visible() and loc is not None and lo - eps <= loc <= hi + eps:
                    drawn_ticks.update(id(t) for t in labels)
    from matplotlib.text import Text  # (not an offsetbox.TextArea: a box around a Text)
    seen, out = set(), []
    for t in fig.findobj(Text):
        if id(t) in seen or (id(t) in all_ticks and id(t) not in drawn_ticks):
            continue
        seen.add(id(t))
        if t.get_visible() and t.get_text().strip():
            out.append(t)
    return out


def overlapping_texts(fig):
    """Pairs of fig's drawn texts (tick labels, annotations, titles, legend
    entries) that overlap by more than a pixel each way (should be none):
    [[text, text], ...]."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = []
    for t in _drawn_texts(fig):
        e = t.get_window_extent(renderer)
        if e.width > 0 and e.height > 0:
            boxes.append((t.get_text(), e.x0 + 1, e.y0 + 1, e.x1 - 1, e.y1 - 1))
    boxes.sort(key=lambda b: b[1])
    out = []
    for i, (ta, ax0, ay0, ax1, ay1) in enumerate(boxes):
        for tb, bx0, by0, bx1, by1 in boxes[i + 1:]:
            if bx0 >= ax1:
                break
            if by0 < ay1 and ay0 < by1:
                out.append([ta, tb])
    return out


def legend_labels(fig):
    """Every legend's entries, in the order fig holds its legends."""
    from matplotlib.legend import Legend
    seen, out = set(), []
    for lg in fig.findobj(Legend):  # an axes' legend, and any it keeps beside it (add_artist)
        if id(lg) not in seen:
            seen.add(id(lg))
            out += [t.get_text() for t in lg.get_texts()]
    return out


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

DPI = 150        # every PNG's resolution
PAGE_IN = 16.0   # a page: a default plot's longest side, inches (2400 px at DPI); larger plots wrap or page

def add_output_args(ap, default):
    ap.add_argument("-o", "--output", default=default, help="PNG to write (default: %(default)s)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing output")
    ap.add_argument("--dump", metavar="JSON", help="also write what was plotted, as JSON")


def parse(ap):
    """Flags in any position, files anywhere among them."""
    a = ap.parse_intermixed_args() if hasattr(ap, "parse_intermixed_args") else ap.parse_args()
    check_output(a.output, a.overwrite)
    return a


def check_output(path, overwrite):
    """Refuses (exit 2, a user error) when path exists and overwrite is not given."""
    if os.path.exists(path) and not overwrite:
        sys.stderr.write("{}: error: {} exists; pass --overwrite or choose another -o\n".format(
            os.path.basename(sys.argv[0]), path))
        sys.exit(2)


def run_main(main):
    """Calls main(); a pbresults.ResultsError, or a refusal by sys.exit("why"),
    ends the script with one line, '<script>: error: <message>', on stderr and
    exit 2 (a user error: the README's exit-code table)."""
    import pbresults
    try:
        main()
    except pbresults.ResultsError as e:
        sys.stderr.write("{}: error: {}\n".format(os.path.basename(sys.argv[0]), e))
        sys.exit(2)
    except SystemExit as e:
        if not isinstance(e.code, str):
            raise
        sys.stderr.write("{}: error: {}\n".format(os.path.basename(sys.argv[0]), e.code))
        sys.exit(2)


def split_list(text):
    return [x.strip() for x in text.split(",") if x.strip()] if text else []


def page_paths(output, pages):
    """The files of a plot of pages pages: output alone for one; else output
    for page 1 and <stem>-p<k><ext> for page k (moe.png, moe-p2.png, ...)."""
    stem, ext = os.path.splitext(output)
    return [output] + ["{}-p{}{}".format(stem, k, ext or ".png") for k in range(2, pages + 1)]


def save(fig, a, plotted):
    """Writes the PNG (fig: a figure, or a list of them, one per page:
    page_paths) and, with --dump, plotted + what every page shows that it
    should not (clipped and overlapping texts), its legends' entries, its
    titles (the figure's, each panel's) and the files written, as JSON."""
    figs = list(fig) if isinstance(fig, (list, tuple)) else [fig]
    paths = page_paths(a.output, len(figs))
    for path in paths[1:]:  # (parse checked the first)
        check_output(path, a.overwrite)
    for f, path in zip(figs, paths):
        f.savefig(path, dpi=DPI)
    if a.dump:
        plotted = dict(plotted, output=a.output, outputs=paths,
                       clipped=[t for f in figs for t in clipped_texts(f)],
                       overlaps=[pair for f in figs for pair in overlapping_texts(f)],
                       legend=[t for f in figs for t in legend_labels(f)],
                       titles=[getattr(f, "_suptitle", None) and f._suptitle.get_text() for f in figs],
                       panel_titles=[t for f in figs for ax in f.get_axes() for t in
                                     (ax.get_title(loc) for loc in ("left", "center", "right")) if t])
        with open(a.dump, "w") as out:
            json.dump(plotted, out, indent=1, sort_keys=True)
    for path in paths:
        print("wrote {}".format(path))
