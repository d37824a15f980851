#!/usr/bin/python3
"""Figures from results files (schema: data/README.md).

Usage: plots.py DATA_DIR_OR_FILES... OUTDIR
       plots.py --cases CASES_DIR OUTDIR

Every .h5 file given (or found directly in a given directory) is read, every
run in it. A measured run that `./sim --compare` predicted (a simulated run
of the same file names it in `compares`) is drawn beside its prediction (the
newest priced by a calibration, else the newest: casedata.compared_pairs):
its measured and simulated stream timelines one above the other on one time
axis, and its memory, measured and predicted; each file with such pairs
gets one figure of predicted against measured step time per policy, with
the error, and one of every run as a point (measured against predicted);
with its comparison beside it (FILE.compare.json, `./sim --compare FILE
--json`) and profiled runs, one of each run's compute by class of kernel,
predicted against the profile.
Every other run gets a stream timeline and a memory timeline. The runs of
each file that are not part of a comparison (nor timelines of a sweep's
rows): one policy comparison (the newest run of each configuration). Every
sweep (/sweeps/NNNNNN, `./sim --sweep`, `--advise`, `--policy all` with
--out) gets its Pareto front of step time against peak memory, and, when
it has a what-if resource, the fastest configuration that fits of each
sharding family at each value of the resource, with the values between
which the fastest changes. Each figure is saved as PNG and PDF under
OUTDIR with a stable name:

    <file-stem>_run<N>_timeline.{png,pdf}
    <file-stem>_run<N>_memory.{png,pdf}
    <file-stem>_run<N>_vs_sim_timeline.{png,pdf}   (N: the measured run)
    <file-stem>_run<N>_vs_sim_memory.{png,pdf}
    <file-stem>_predicted_vs_measured.{png,pdf}
    <file-stem>_predicted_vs_measured_scatter.{png,pdf}
    <file-stem>_by_class.{png,pdf}
    <file-stem>_sweep<N>_pareto.{png,pdf}
    <file-stem>_sweep<N>_whatif.{png,pdf}
    policies.{png,pdf}          (<file-stem>_policies when several files)

With --cases: the report's case-study figures from the files
paper/cases.sh writes (below, "the report's case studies").

Run with Debian's /usr/bin/python3 (matplotlib, h5py and numpy from Debian
packages); `make plots` runs it on data/ into paper/figures.
"""
import concurrent.futures
import json
import multiprocessing
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import h5py  # noqa: E402
import numpy as np  # noqa: E402

import casedata  # noqa: E402  (paper/casedata.py: what the report computes from the runs)

# Configuration keys that never label a policy: where the results went.
IGNORED_KEYS = {"run.out"}
# Font sizes of the figures the report includes (the case studies, the
# policy comparison): about 10 inches wide, read at half size on a page.
CASE_RC = {"font.size": 11, "axes.titlesize": 11, "axes.labelsize": 11, "legend.fontsize": 9,
           "xtick.labelsize": 10, "ytick.labelsize": 10, "figure.titlesize": 12}


class Run:
    """One /runs/NNNNNN group, read whole into memory."""

    def __init__(self, path, name, group):
        self.path = path
        self.stem = casedata.results_stem(path)
        self.index = int(name)
        self.attrs = {k: _text(v) for k, v in casedata.read_attrs(group).items()}
        self.ops = group["ops"][()]
        # a PyTorch run (experiments/pytorch/) has no memory timeline, and ops without times
        self.memory = group["memory"][()] if "memory" in group else None
        self.timed = len(self.ops) > 0 and bool((self.ops["end_ns"] > self.ops["start_ns"]).any())
        self.summary = casedata.read_attrs(group["summary"])
        self.kind_names = _enum_names(group["ops"].dtype, "kind")
        self.stream_names = _enum_names(group["ops"].dtype, "stream")
        self.categories = [] if self.memory is None else [
            n for n in group["memory"].dtype.names if n not in ("t_ns", "reserved")]

    @property
    def config(self):
        """Configuration keys (`section.key`) and `source`, as text."""
        keys = {k: v for k, v in self.attrs.items() if "." in k and k not in IGNORED_KEYS}
        keys["source"] = self.attrs.get("source", "")
        return keys

    def title(self):
        """What was run: model, cluster, policy, simulated or measured on what."""
        return "%s, %s: %s (%s run %d)" % (casedata.cluster_text(self), _short_policy(self),
                                          casedata.how_text(self), self.stem, self.index)


def _text(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v


def _enum_names(dtype, field):
    """Value -> name of an HDF5 enum field of a compound dtype."""
    mapping = h5py.check_enum_dtype(dtype[field]) or {}
    return {int(v): k for k, v in mapping.items()}


def load_runs(path):
    """Every run of one results file, in index order."""
    runs = []
    with casedata.open_results(path) as f:
        if "runs" not in f:
            return runs
        for name in sorted(f["runs"]):
            runs.append(Run(path, name, f["runs"][name]))
    return runs


class Sweep:
    """One /sweeps/NNNNNN group: its description and its rows (schema: data/README.md)."""

    def __init__(self, path, name, group):
        self.path = path
        self.stem = casedata.results_stem(path)
        self.index = int(name)
        self.attrs = {k: _text(v) for k, v in group.attrs.items()}
        self.rows = group["configs"][()]
        self.values = {k[len("values."):]: [_text(x) for x in v] for k, v in group.attrs.items()
                       if k.startswith("values.")}

    def column(self, name):
        """A column as a list of Python values (strings decoded, enums as their names)."""
        col = self.rows[name]
        enum = h5py.check_enum_dtype(self.rows.dtype[name])
        if enum:
            names = {int(v): k for k, v in enum.items()}
            return [names[int(x)] for x in col]
        return [_text(x) for x in col]

    def base_value(self, key):
        """The base experiment's value of section.key (the advice's own setting), or None."""
        section, name = key.split(".", 1)
        current = None
        for line in self.attrs.get("base_ini", "").splitlines():
            line = line.strip()
            if line.startswith("["):
                current = line.strip("[]")
            elif current == section and line.split("=")[0].strip() == name:
                return line.split("=", 1)[1].strip()
        return None


def load_sweeps(path):
    """Every sweep of one results file, in index order."""
    with casedata.open_results(path) as f:
        if "sweeps" not in f:
            return []
        return [Sweep(path, name, f["sweeps"][name]) for name in sorted(f["sweeps"])
                if "configs" in f["sweeps"][name]]


def _number(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _family(sweep):
    """Each row's sharding family, or None when the sweep does not vary it."""
    if "policy.sharding" in sweep.rows.dtype.names:
        return sweep.column("policy.sharding")
    return None


def _pareto(step, peak):
    """Indices of the front of step time against peak memory: each faster than all that need no more."""
    order = sorted(range(len(step)), key=lambda i: (peak[i], step[i]))
    front, best = [], np.inf
    for i in order:
        if step[i] < best:
            best = step[i]
            front.append(i)
    return front


def plot_sweep_pareto(sweep, outdir):
    rows = sweep.rows
    keep = np.isfinite(rows["step_time_s"])
    title = "%s sweep %d: step time against peak memory" % (sweep.stem, sweep.index)
    what_if = sweep.attrs.get("what_if", "")
    if what_if and what_if in rows.dtype.names:
        # one value of the resource: the experiment's own, as the advice takes it
        values = sweep.column(what_if)
        at = sweep.base_value(what_if)
        same = lambda v, w: str(v) == str(w) or (_number(v) is not None and _number(v) == _number(w))
        if at is None or not any(same(v, at) for v in values):
            at = values[0]
        keep &= np.array([same(v, at) for v in values])
        title += " (%s = %s)" % (what_if, at)
    idx = np.nonzero(keep)[0]
    if not len(idx):
        return
    step = rows["step_time_s"][idx]
    peak = rows["peak_reserved_bytes"][idx] / GIB
    fits = rows["fits"][idx] == 1
    fam = _family(sweep)
    fam = [fam[i] for i in idx] if fam else ["all"] * len(idx)
    names = sorted(set(fam))
    colors = dict(zip(names, _colors(len(names), "tab10")))
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for n in names:
        m = np.array([f == n for f in fam])
        ax.scatter(peak[m & fits], step[m & fits], s=10, color=colors[n], alpha=0.6, label=n)
        ax.scatter(peak[m & ~fits], step[m & ~fits], s=10, facecolors="none", edgecolors=colors[n], alpha=0.4)
    front = _pareto(list(step), list(peak))
    ax.step(peak[front], step[front], where="post", color="black", lw=1.2, label="Pareto front")
    budget = rows["budget_bytes"][idx].max() / GIB
    ax.axvline(budget, color="red", ls="--", lw=1, label="memory budget (%.1f GiB)" % budget)
    if fits.any():
        b = np.argmin(np.where(fits, step, np.inf))
        ax.scatter([peak[b]], [step[b]], marker="*", s=180, color="gold", edgecolors="black", zorder=5,
                   label="fastest that fits (%.3f s)" % step[b])
    ax.set_xlabel("peak reserved memory per GPU (GiB); hollow: does not fit")
    ax.set_ylabel("step time (s)")
    ax.set_yscale("log")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _save(fig, outdir, "%s_sweep%d_pareto" % (sweep.stem, sweep.index))


def plot_sweep_whatif(sweep, outdir):
    what_if = sweep.attrs.get("what_if", "")
    rows = sweep.rows
    if not what_if or what_if not in rows.dtype.names:
        return
    values = sweep.values.get(what_if) or sorted(set(str(v) for v in sweep.column(what_if)))
    col = [str(v) if not isinstance(v, float) else repr(v) for v in sweep.column(what_if)]
    try:
        x = [float(v) for v in values]
        col = [float(v) for v in sweep.column(what_if)]
        numeric = True
    except ValueError:
        x, numeric = list(range(len(values))), False
    fam = _family(sweep) or ["all"] * len(rows)
    ok = np.isfinite(rows["step_time_s"]) & (rows["fits"] == 1)
    names = sorted(set(fam))
    colors = dict(zip(names, _colors(len(names), "tab10")))
    fig, ax = plt.subplots(figsize=(9, 5.5))
    best_fam = []
    styles = ["-", "--", "-.", ":"]
    markers = ["o", "s", "^", "D"]
    for k, n in enumerate(names):
        y = []
        for v in values:
            key = float(v) if numeric else v
            m = ok & np.array([c == key for c in col]) & np.array([f == n for f in fam])
            y.append(rows["step_time_s"][m].min() if m.any() else np.nan)
        ax.plot(x, y, marker=markers[k % 4], ls=styles[k % 4], color=colors[n], label=n, alpha=0.85)
    for v in values:
        key = float(v) if numeric else v
        m = ok & np.array([c == key for c in col])
        if m.any():
            i = np.nonzero(m)[0][np.argmin(rows["step_time_s"][m])]
            best_fam.append((fam[i], rows["step_time_s"][i]))
        else:
            best_fam.append((None, np.nan))
    for k in range(1, len(values)):
        a, b = best_fam[k - 1][0], best_fam[k][0]
        if a and b and a != b:
            mid = (x[k - 1] * x[k]) ** 0.5 if numeric and x[k - 1] > 0 else (x[k - 1] + x[k]) / 2
            ax.axvline(mid, color="gray", ls=":", lw=1)
            ax.text(mid, 0.98, " %s overtakes %s" % (b, a), transform=ax.get_xaxis_transform(), fontsize=8,
                    rotation=90, va="top", ha="right")
    if numeric and min(x) > 0 and max(x) / min(x) > 8:
        ax.set_xscale("log", base=2)
    if not numeric:
        ax.set_xticks(x)
        ax.set_xticklabels(values)
    ax.set_yscale("log")
    ax.set_xlabel(what_if)
    ax.set_ylabel("fastest step that fits (s)")
    ax.set_title("%s sweep %d: what if %s changes" % (sweep.stem, sweep.index, what_if), fontsize=10)
    ax.legend(fontsize=8)
    _save(fig, outdir, "%s_sweep%d_whatif" % (sweep.stem, sweep.index))


def results_files(args):
    """The results files named by args: files as given, directories' *.h5 and
    the newest *.h5.xz of each machine (casedata.results_in), sorted."""
    files = []
    for a in args:
        if os.path.isdir(a):
            files += casedata.results_in(a)
        elif os.path.isfile(a):
            files.append(a)
        else:
            sys.exit("plots: %s: no such file or directory" % a)
    return files


def _colors(n, cmap="tab20"):
    """n distinct colors, stable by index."""
    cm = plt.get_cmap(cmap)
    return [cm(i % cm.N) for i in range(n)]


# The figures of each run and of each run beside its prediction, drawn by
# _draw on several cores: each is drawn and saved alone (names set by the
# run), so the order does not matter.
_JOBS = []


def _processes():
    """PLOTS_JOBS, else the cores; None when PLOTS_JOBS is not a whole number from 1."""
    v = os.environ.get("PLOTS_JOBS", "")
    if not v:
        return os.cpu_count() or 1
    return int(v) if v.isdigit() and int(v) >= 1 else None


def _job(i):
    fn, args = _JOBS[i]
    fn(*args)


def _draw(jobs):
    """Call each (function, arguments) of jobs, in forked processes, one per
    core (PLOTS_JOBS=N sets how many): matplotlib draws on one core, and a
    file of 750 runs is 1,500 figures, each saved twice (png, pdf)."""
    global _JOBS
    n = min(len(jobs), _processes())
    if n <= 1:
        for fn, args in jobs:
            fn(*args)
        return
    _JOBS = jobs  # the children inherit it (fork): nothing is pickled but an index
    try:
        # a process that dies (killed, out of memory) raises BrokenProcessPool here, not a wait
        with concurrent.futures.ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork")) as ex:
            list(ex.map(_job, range(len(jobs))))
    finally:
        _JOBS = []


def _save(fig, outdir, name):
    for ext in ("png", "pdf"):
        fig.savefig(os.path.join(outdir, "%s.%s" % (name, ext)), dpi=150, bbox_inches="tight")
    plt.close(fig)


def draw_timeline(ax, run, title):
    """A Gantt chart per stream on ax, ops colored by kind; the kinds drawn."""
    ops = run.ops
    streams = sorted(set(int(s) for s in ops["stream"])) if len(ops) else []
    colors = _colors(max(run.kind_names) + 1 if run.kind_names else 1)
    kinds_seen = set()
    for row, st in enumerate(streams):
        on_stream = ops[ops["stream"] == st]
        for kind in sorted(set(int(k) for k in on_stream["kind"])):
            sel = on_stream[on_stream["kind"] == kind]
            start = sel["start_ns"].astype(np.float64) / 1e6
            dur = (sel["end_ns"] - sel["start_ns"]).astype(np.float64) / 1e6
            ax.broken_barh(list(zip(start, dur)), (row - 0.4, 0.8), facecolors=colors[kind],
                           edgecolor="black", linewidth=0.2)
            kinds_seen.add(kind)
    ax.set_yticks(range(len(streams)))
    ax.set_yticklabels([run.stream_names.get(s, str(s)) for s in streams])
    ax.set_ylim(len(streams) - 0.5, -0.5)
    ax.set_ylabel("stream")
    ax.set_title(title, fontsize=10)
    if not streams:
        ax.text(0.5, 0.5, "no ops", transform=ax.transAxes, ha="center")
    return [matplotlib.patches.Patch(color=colors[k], label=run.kind_names.get(k, str(k)))
            for k in sorted(kinds_seen)]


def plot_timeline(run, outdir):
    """A Gantt chart per stream, ops colored by kind; time in ms."""
    nstreams = len(set(int(s) for s in run.ops["stream"])) if len(run.ops) else 1
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.6 * max(nstreams, 1)))
    handles = draw_timeline(ax, run, run.title() + ": streams")
    ax.set_xlabel("time (ms)")
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    _save(fig, outdir, "%s_run%d_timeline" % (run.stem, run.index))


def plot_vs_sim_timeline(meas, pred, outdir):
    """The measured step above its simulated prediction, on one time axis."""
    nstreams = len(set(int(s) for s in meas.ops["stream"])) if len(meas.ops) else 1
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 2.0 + 1.2 * max(nstreams, 1)), sharex=True)
    ms = float(meas.summary.get("step_time_s", 0)) * 1e3
    ps = float(pred.summary.get("step_time_s", 0)) * 1e3
    h1 = draw_timeline(top, meas, "%s\nmeasured step %.2f ms" % (meas.title(), ms))
    h2 = draw_timeline(bottom, pred, "predicted by ./sim (run %d%s), step %.2f ms (%+.1f%%)" % (
        pred.index, _calibration_text(pred), ps, 100 * (ps - ms) / ms if ms else 0))
    for ax, t in ((top, ms), (bottom, ps)):
        ax.axvline(t, color="black", linestyle=":", linewidth=1)
    bottom.set_xlabel("time from the step's start (ms)")
    seen = {}
    for h in h1 + h2:
        seen.setdefault(h.get_label(), h)
    top.legend(handles=list(seen.values()), loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    _save(fig, outdir, "%s_run%d_vs_sim_timeline" % (meas.stem, meas.index))


def plot_vs_sim_memory(meas, pred, outdir):
    """Allocated and reserved memory after each op the host issues, measured and predicted."""
    fig, ax = plt.subplots(figsize=(12, 4.0))
    div, uname = casedata.unit(max(float(r.summary.get("peak_reserved_bytes", 0)) for r in (meas, pred)))
    for run, style, what in ((meas, "-", "measured"), (pred, "--", "predicted")):
        mem = run.memory[np.argsort(run.memory["t_ns"], kind="stable")]
        alloc = sum(mem[c].astype(np.float64) for c in run.categories) / div if len(mem) else []
        x = np.arange(len(mem))
        ax.step(x, alloc, style, where="post", linewidth=1.4, label="%s allocated" % what)
        ax.step(x, mem["reserved"].astype(np.float64) / div, style, where="post", linewidth=1.0,
                label="%s reserved" % what)
    ax.set_xlabel("ops issued (the allocator runs in issue order)")
    ax.set_ylabel("memory (%s)" % uname)
    ax.set_ylim(bottom=0)
    ma = int(meas.summary.get("peak_alloc_bytes", 0))
    pa = int(pred.summary.get("peak_alloc_bytes", 0))
    ax.set_title("%s\nmemory: peak allocated %s measured, %s predicted" % (
        meas.title(), casedata.fmt_bytes(ma), casedata.fmt_bytes(pa)), fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    _save(fig, outdir, "%s_run%d_vs_sim_memory" % (meas.stem, meas.index))


def _short_policy(run):
    """The policy keys that differ from fsdp's defaults, compactly."""
    c = run.config
    parts = [c.get("policy.sharding", "?")]
    defaults = {"policy.accum": "sync-each", "policy.wrap": "block", "policy.ac": "none",
                "policy.optim": "foreach", "policy.optim_in_backward": "false", "policy.offload": "none",
                "policy.runtime": "testbed", "policy.flat_params": "false", "policy.loss": "full"}
    for k, d in defaults.items():
        v = c.get(k, d)
        if v != d:
            parts.append(k.split(".", 1)[1].replace("optim_in_backward", "in-bwd") + "=" + v
                         if v not in ("true",) else k.split(".", 1)[1].replace("optim_in_backward", "in-bwd"))
    if c.get("policy.sharding") in ("fsdp", "hsdp") and c.get("policy.reshard", "yes") != "yes":
        parts.append("reshard=" + c.get("policy.reshard"))
    if c.get("policy.microbatches", "1") != "1":
        parts.append("M=" + c.get("policy.microbatches"))
    return " ".join(parts)


def _calibration_text(pred):
    """', calibration FILE' for a prediction priced by one, else ', catalog prices'."""
    cal = pred.attrs.get("cluster.calibration", "")
    return ", calibration %s" % os.path.basename(cal) if cal else ", catalog prices"


def group_key(m):
    """'llama3-8b, 1 x 8 h100-sxm' ('1 x 2 ranks' on CPUs); a custom model by its
    shape (two custom models are two groups)."""
    c = m.config
    model = c.get("model.name", "?")
    if model == "custom":
        model = "custom %s layers x %s" % (c.get("model.layers", "?"), c.get("model.hidden", "?"))
    gpu = c.get("cluster.gpu", "cpu")
    return "%s, %s x %s %s" % (model, c.get("cluster.nodes", "?"), c.get("cluster.gpus_per_node", "?"),
                               "ranks" if gpu == "cpu" else gpu)


def _runs_text(n):
    return "%d run%s" % (n, "" if n == 1 else "s")


def _has_spread(pairs):
    """Whether any measured run of pairs has a spread (a published figure, one per run, has none)."""
    return any("step_time_p10_s" in m.summary for m, _ in pairs)


def _measured_label(pairs):
    """The legend's name for the measured bars or points."""
    if _has_spread(pairs):
        return "measured (median, p10-p90)"
    return "published" if all(m.attrs.get("source") == "published" for m, _ in pairs) else "measured"


def _how_all(pairs):
    """How the measured runs of pairs were made, in one phrase: 'published for a100-80g-64 and
    h100-96g-grand-teton', 'measured on ... (cpu backend)'."""
    texts = sorted(set(casedata.how_text(m) for m, _ in pairs))
    lead = "published for "
    if len(texts) > 1 and all(t.startswith(lead) for t in texts):
        return lead + " and ".join(t[len(lead):] for t in texts)
    return " and ".join(texts)


def plot_predicted_vs_measured(pairs, outdir, stem):
    """Per group of runs (model, ranks): measured step time with its spread beside the prediction."""
    groups = {}
    for m, p in pairs:
        groups.setdefault(group_key(m), []).append((m, p))
    keys = sorted(groups)
    fig, axes = plt.subplots(len(keys), 1, figsize=(max(8, 0.55 * max(len(g) for g in groups.values()) + 3),
                                                     3.2 * len(keys)), squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        g = groups[key]
        x = np.arange(len(g))
        ms = np.array([float(m.summary["step_time_s"]) for m, _ in g]) * 1e3
        lo = np.array([float(m.summary.get("step_time_p10_s", m.summary["step_time_s"])) for m, _ in g]) * 1e3
        hi = np.array([float(m.summary.get("step_time_p90_s", m.summary["step_time_s"])) for m, _ in g]) * 1e3
        ps = np.array([float(p.summary["step_time_s"]) for _, p in g]) * 1e3
        ax.bar(x - 0.2, ms, 0.4, yerr=[ms - lo, hi - ms] if _has_spread(g) else None, capsize=2,
               label=_measured_label(pairs), color="tab:blue")
        ax.bar(x + 0.2, ps, 0.4, label="predicted", color="tab:orange")
        for i in range(len(g)):
            ax.annotate("%+.0f%%" % (100 * (ps[i] - ms[i]) / ms[i]), (x[i], max(hi[i], ps[i])),
                        textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7)
        ax.set_ylim(0, 1.12 * max(hi.max(), ps.max()))  # room for the error labels
        ax.set_xticks(x)
        ax.set_xticklabels(policy_labels([m for m, _ in g]), rotation=40, ha="right", fontsize=7)
        ax.set_ylabel("step time (ms)")
        ax.set_title(key)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.suptitle("%s: step time %s, and predicted by ./sim" % (stem, _how_all(pairs)))
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))  # the title's line kept clear of the first plot
    _save(fig, outdir, "%s_predicted_vs_measured" % stem)


def plot_predicted_scatter(pairs, outdir, stem):
    """Every compared run as one point: measured step time (median, p10 to
    p90 as a bar) against the prediction, log-log, the diagonal and a band
    of +-25% around it; a color per model and world size."""
    groups = {}
    for m, p in pairs:
        groups.setdefault(group_key(m), []).append((m, p))
    with plt.rc_context(CASE_RC):
        fig, ax = plt.subplots(figsize=(8, 6.5))
        lo, hi = float("inf"), 0.0
        for i, key in enumerate(sorted(groups)):
            g = groups[key]
            ms = np.array([float(m.summary["step_time_s"]) for m, _ in g]) * 1e3
            p10 = np.array([float(m.summary.get("step_time_p10_s", m.summary["step_time_s"])) for m, _ in g]) * 1e3
            p90 = np.array([float(m.summary.get("step_time_p90_s", m.summary["step_time_s"])) for m, _ in g]) * 1e3
            ps = np.array([float(p.summary["step_time_s"]) for _, p in g]) * 1e3
            ax.errorbar(ms, ps, xerr=[ms - p10, p90 - ms], fmt="o", markersize=4, capsize=2, elinewidth=0.8,
                        color=plt.get_cmap("tab10")(i % 10), label="%s (%s)" % (key, _runs_text(len(g))))
            lo, hi = min(lo, p10.min(), ps.min()), max(hi, p90.max(), ps.max())
        x = np.array([lo / 1.3, hi * 1.3])
        ax.plot(x, x, "k-", linewidth=0.8, label="predicted = measured")
        ax.fill_between(x, x * 0.75, x * 1.25, color="gray", alpha=0.15, label="within 25%")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(x[0], x[1])
        ax.set_ylim(x[0], x[1])
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: "%g" % v))
            axis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
                lambda v, _: "%g" % v if ("%.0e" % v)[0] in "25" else ""))
        ax.tick_params(which="minor", labelsize=8)
        ax.set_xlabel("%s step time (ms)%s" % ("published" if _measured_label(pairs) == "published" else "measured",
                                                ", median and p10-p90" if _has_spread(pairs) else ""))
        ax.set_ylabel("predicted step time (ms)")
        ax.set_title("%s\nstep time %s, and predicted by ./sim" % (stem, _how_all(pairs)), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
        fig.tight_layout()
        _save(fig, outdir, "%s_predicted_vs_measured_scatter" % stem)


def plot_by_class(path, runs, outdir, stem):
    """From the comparison beside a results file (`./sim --compare FILE --json > FILE.compare.json`): each
    profiled run's compute by class of kernel (GEMM, attention, optimizer, the rest), each kernel alone, the
    prediction's error against the profile's sums, one row a run: which kinds of kernel carry a step's error.
    Returns whether it drew one."""
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return False
    rows = [r for r in d.get("runs", []) if r.get("compute_by_class")]
    if not rows:
        return False
    classes = []
    for r in rows:
        for c in r["compute_by_class"]:
            if c not in classes:
                classes.append(c)
    by_index = {"%06d" % r.index: r for r in runs}
    known = [by_index[r["run"]] for r in rows if r["run"] in by_index]
    labels = policy_labels(known) if len(known) == len(rows) else [r["policy"] for r in rows]
    err = np.full((len(rows), len(classes)), np.nan)
    for i, r in enumerate(rows):
        for j, c in enumerate(classes):
            v = r["compute_by_class"].get(c)
            if v and v.get("err") is not None:
                err[i, j] = 100 * v["err"]
    with plt.rc_context(CASE_RC):
        fig, ax = plt.subplots(figsize=(2.0 * len(classes) + 4, 0.42 * len(rows) + 1.8))
        lim = max(10.0, float(np.nanmax(np.abs(err))) if np.isfinite(err).any() else 10.0)
        im = ax.imshow(err, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        for i, r in enumerate(rows):
            for j, c in enumerate(classes):
                v = r["compute_by_class"].get(c)
                if v and v.get("measured_s") is not None:
                    dark = np.isfinite(err[i, j]) and abs(err[i, j]) > 0.6 * lim
                    ax.text(j, i, "%+.1f%%\n%.1f ms" % (err[i, j], 1e3 * v["measured_s"]) if np.isfinite(err[i, j])
                            else "%.1f ms" % (1e3 * v["measured_s"]), ha="center", va="center", fontsize=7,
                            color="white" if dark else "black")
        ax.set_xticks(range(len(classes)))
        ax.set_xticklabels(classes, fontsize=8)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(labels, fontsize=7)
        cal = sorted(set(r.get("calibration") or "the catalog" for r in rows))
        ax.set_title("%s: compute by class of kernel, predicted against the profile\n(each kernel alone; "
                     "priced by %s; the measured sum under each error)" % (stem, ", ".join(
                         os.path.basename(c) for c in cal)), fontsize=9)
        fig.colorbar(im, ax=ax, label="predicted - measured (%)")
        fig.tight_layout()
        _save(fig, outdir, "%s_by_class" % stem)
    return True


def _steps(t, y):
    """A step function (value held until the next sample) as plottable points."""
    if len(t) == 0:
        return t, y
    return np.repeat(t, 2)[1:], np.repeat(y, 2)[:-1]


def plot_memory(run, outdir):
    """Allocated memory stacked by category, reserved as a line, GPU capacity dashed."""
    mem = run.memory[np.argsort(run.memory["t_ns"], kind="stable")]
    fig, ax = plt.subplots(figsize=(12, 4.5))
    colors = _colors(len(run.categories), "tab10")
    t = mem["t_ns"].astype(np.float64) / 1e6
    top = max([float(run.summary.get("peak_reserved_bytes", 0))] +
              [float(mem["reserved"].max())] if len(mem) else [1.0])
    div, uname = casedata.unit(top)
    ys, labels, cols = [], [], []
    for i, cat in enumerate(run.categories):
        y = mem[cat].astype(np.float64) / div
        if len(y) and y.any():
            ys.append(_steps(t, y)[1])
            labels.append(cat)
            cols.append(colors[i])
    ts = _steps(t, t)[0]
    if ys:
        ax.stackplot(ts, ys, labels=labels, colors=cols, linewidth=0)
    if len(mem):
        ax.plot(ts, _steps(t, mem["reserved"].astype(np.float64) / div)[1], color="black",
                linewidth=1.2, label="reserved")
    else:
        ax.text(0.5, 0.5, "no memory samples", transform=ax.transAxes, ha="center")
    gpu = float(run.summary.get("gpu_bytes", 0))
    note = _capacity(ax, gpu, top, div)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("memory (%s)" % uname)
    ax.set_title(run.title() + "\nmemory by category" + note, fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    _save(fig, outdir, "%s_run%d_memory" % (run.stem, run.index))


def _capacity(ax, gpu_bytes, top_bytes, div, xmin=None, xmax=None):
    """Scale ax's memory axis (in units of div) to the data, top_bytes the
    largest value drawn; draw the GPU's capacity dashed when it is in range
    (at most twice the data's largest value). Returns a note for the title
    when it is not: ' (the GPU has 23 GiB, off the scale)'."""
    if gpu_bytes > 0 and gpu_bytes <= 2 * top_bytes:
        if xmin is None:
            ax.axhline(gpu_bytes / div, color="red", linestyle="--", linewidth=1.2, label="GPU capacity")
        else:
            ax.hlines(gpu_bytes / div, xmin, xmax, colors="red", linestyles="--", label="GPU capacity")
        ax.set_ylim(0, 1.08 * max(top_bytes, gpu_bytes) / div)
        return ""
    ax.set_ylim(0, 1.08 * top_bytes / div if top_bytes > 0 else 1)
    return " (the GPU has %s, off the scale)" % casedata.fmt_bytes(gpu_bytes) if gpu_bytes > 0 else ""


def policy_labels(runs):
    """One short label per run, naming what differs between the runs
    (casedata.policy_labels): `hsdp`, `fsdp + block+io`."""
    return casedata.policy_labels(runs)


def plot_policies(runs, outdir, name="policies"):
    """Step time split into compute, exposed communication and the rest; peak memory."""
    with plt.rc_context(CASE_RC):
        _plot_policies(runs, outdir, name)


def _plot_policies(runs, outdir, name):
    labels = policy_labels(runs)
    x = np.arange(len(runs))
    s = [r.summary for r in runs]
    step = np.array([float(v.get("step_time_s", 0)) for v in s])
    compute = np.array([float(v.get("compute_s", 0)) for v in s])
    comm = np.array([float(v.get("exposed_comm_s", 0)) for v in s])
    other = np.maximum(step - compute - comm, 0)
    top_bytes = max(float(v.get("peak_reserved_bytes", 0)) for v in s)
    div, uname = casedata.unit(top_bytes)
    alloc = np.array([float(v.get("peak_alloc_bytes", 0)) for v in s]) / div
    reserved = np.array([float(v.get("peak_reserved_bytes", 0)) for v in s]) / div
    gpus = set(int(v.get("gpu_bytes", 0)) for v in s)
    what = sorted(set("%s, %s" % (casedata.cluster_text(r), casedata.how_text(r)) for r in runs))

    width = max(7, 0.9 * len(runs) + 3)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(width, 7.5), sharex=True)
    top.bar(x, compute, 0.6, label="compute", color="tab:blue")
    top.bar(x, comm, 0.6, bottom=compute, label="exposed communication", color="tab:orange")
    top.bar(x, other, 0.6, bottom=compute + comm, label="other (idle, host)", color="tab:gray")
    top.set_ylabel("step time (s)")
    top.set_title("%s\nstep time and peak memory per policy" % "; ".join(what))
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))

    bottom.bar(x - 0.15, alloc, 0.3, label="peak allocated", color="tab:green")
    bottom.bar(x + 0.15, reserved, 0.3, label="peak reserved", color="tab:olive")
    if len(gpus) == 1:
        note = _capacity(bottom, gpus.pop(), top_bytes, div, -0.5, len(runs) - 0.5)
    else:
        note = ""
        gpu = np.array([float(v.get("gpu_bytes", 0)) for v in s]) / div
        bottom.hlines(gpu, x - 0.35, x + 0.35, colors="red", linestyles="--", label="GPU capacity")
    bottom.set_title("peak memory" + note)
    bottom.set_ylabel("memory (%s)" % uname)
    bottom.set_xticks(x)
    bottom.set_xticklabels(labels, rotation=30 if len(runs) > 4 else 0, ha="right" if len(runs) > 4 else "center")
    bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    _save(fig, outdir, name)


# ---- the report's case studies (paper/cases.sh writes their files) --------
#
# data/cases/<case>.h5 holds ./sim's runs at the scale where the case was
# observed; every other .h5 file of the directory whose name starts with
# the case's (<case>-cpu.h5, <case>-gpu.h5, ...) holds measured runs. Each
# case gets one figure of its simulated runs, case_<case>_sim, and one per
# machine and backend that measured it, case_<case>_<hardware>-<backend>.
# The newest run of each configuration is drawn (casedata.latest). The
# figures are sized for a page (CASE_RC).

CASES = ("accum", "wrap", "optim", "concat")
POLICY_COLORS = {}


def _policy_color(name):
    """A stable color per policy name across the figures of one report."""
    if name not in POLICY_COLORS:
        POLICY_COLORS[name] = plt.get_cmap("tab10")(len(POLICY_COLORS) % 10)
    return POLICY_COLORS[name]


def _what(runs):
    """'tiny on 2 x 2 cpu, measured on amd-epyc-2-cores (cpu backend)' for a set of runs."""
    parts = sorted(set(casedata.cluster_text(r) for r in runs))
    hows = sorted(set(casedata.how_text(r).split(", rank 0")[0].rstrip(")") +
                      (")" if "(" in casedata.how_text(r) else "") for r in runs))
    return "%s, %s" % (" / ".join(parts), " / ".join(hows))


def _time_unit(seconds):
    """(scale, name) to show durations up to `seconds` in: ms under a second."""
    return (1e3, "ms") if seconds < 1 else (1.0, "s")


def case_files(cases_dir, case):
    """(the simulated file or None, [measured files]) of one case."""
    sim, meas = None, []
    for n in sorted(os.listdir(cases_dir)):
        if not n.endswith(".h5"):
            continue
        if n == case + ".h5":
            sim = os.path.join(cases_dir, n)
        elif n.startswith(case + "-"):
            meas.append(os.path.join(cases_dir, n))
    return sim, meas


def measured_groups(runs):
    """Measured runs grouped by '<hardware>-<backend>', sorted by name."""
    groups = {}
    for r in runs:
        if casedata.is_measured(r):
            key = "%s-%s" % (r.attrs.get("hardware", "unknown"), r.attrs.get("backend", r.attrs.get(
                "run.device", "unknown")))
            groups.setdefault(key, []).append(r)
    return sorted(groups.items())


def _bars_memory(ax, rows, labels, title):
    """Peak allocated and reserved per row, the axis scaled to the data."""
    top = max(r["reserved"] for r in rows)
    div, uname = casedata.unit(top)
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["alloc"] / div for r in rows], 0.4, label="peak allocated", color="tab:green")
    ax.bar(x + 0.2, [r["reserved"] / div for r in rows], 0.4, label="peak reserved", color="tab:olive")
    gpus = set(r["gpu_bytes"] for r in rows)
    note = _capacity(ax, gpus.pop(), top, div, -0.5, len(rows) - 0.5) if len(gpus) == 1 else ""
    for i, r in enumerate(rows):
        if not r["fits"]:
            ax.annotate("does not fit", (x[i] + 0.2, r["reserved"] / div), textcoords="offset points",
                        xytext=(0, 2), ha="center", fontsize=8, color="red")
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=25, ha="right")
    ax.set_ylabel("peak memory (%s)" % uname)
    ax.set_title(title + note)
    ax.legend(loc="lower left")


def _plain_log_ticks(ax, which="xy"):
    """Plain numbers on log axes (0.5, 1, 2, 5, 10, 20), not powers of ten."""
    fmt = matplotlib.ticker.FuncFormatter(lambda v, _: "%g" % v)
    minor = matplotlib.ticker.FuncFormatter(lambda v, _: "%g" % v if ("%.0e" % v)[0] in "25" else "")
    for axis in ((ax.xaxis,) if "x" in which else ()) + ((ax.yaxis,) if "y" in which else ()):
        axis.set_major_formatter(fmt)
        axis.set_minor_formatter(minor)


def _step_vs_bandwidth(ax, rows, key, title, measured):
    """Step time against the bandwidth per GPU across nodes, a line per key."""
    scale, tu = _time_unit(max(r["step_s"] for r in rows))
    names = sorted(set(r[key] for r in rows), key=lambda n: [r[key] for r in rows].index(n))
    for name in names:
        sel = sorted((r for r in rows if r[key] == name), key=lambda r: r["inter_gbps"])
        bw = np.array([r["inter_gbps"] for r in sel])
        t = np.array([r["step_s"] for r in sel]) * scale
        yerr = None
        if measured:
            yerr = [t - np.array([r["p10_s"] for r in sel]) * scale, np.array([r["p90_s"] for r in sel]) * scale - t]
        fits = all(r["fits"] for r in sel)
        ax.errorbar(bw, t, yerr=yerr, marker="o", markersize=4, linewidth=1.3, capsize=2,
                    linestyle="-" if fits else "--", label=name + ("" if fits else " (dashed, x: does not fit)"),
                    color=_policy_color(name))
        for r in sel:
            if not r["fits"]:
                ax.plot(r["inter_gbps"], r["step_s"] * scale, "x", color="black", markersize=9)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_ticks(ax)
    ax.tick_params(which="minor", labelsize=8)
    ax.set_xlabel("inter-node bandwidth per GPU (GB/s)" + (", emulated" if measured else ""))
    ax.set_ylabel("step time (%s)%s" % (tu, ", median, p10-p90" if measured else ""))
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()


def _bars_by_policy(ax, rows, value, ylabel, title, label):
    x = np.arange(len(rows))
    ax.bar(x, [value(r) for r in rows], 0.6, color=[_policy_color(r["policy"]) for r in rows], label=label)
    ax.set_xticks(x)
    ax.set_xticklabels([r["policy"] for r in rows], rotation=25, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()


def plot_case_accum(runs, outdir, name):
    """Case 1: step time across bandwidth, traffic and memory per accumulation policy."""
    rows = casedata.accum_rows(runs)
    varying = [r for r in rows if r["fabric"] in ("sim", "emulated")]
    real = [r for r in rows if r["fabric"] == "real"]
    measured = any(r["measured"] for r in rows)
    order = sorted(set(r["policy"] for r in rows), key=lambda p: [r["policy"] for r in rows].index(p))
    one = {}
    for r in rows:  # traffic and memory do not depend on the bandwidth: one row per policy
        one.setdefault(r["policy"], r)
    per_policy = [one[p] for p in order]
    fig = plt.figure(figsize=(10.5, 8.5))
    gs = fig.add_gridspec(2, 2)
    top = fig.add_subplot(gs[0, :]) if not real else fig.add_subplot(gs[0, 0])
    if varying:
        _step_vs_bandwidth(top, varying, "policy", "step time across the inter-node bandwidth", measured)
    else:
        top.text(0.5, 0.5, "no runs across bandwidth", transform=top.transAxes, ha="center")
    if real:
        ax = fig.add_subplot(gs[0, 1])
        scale, tu = _time_unit(max(r["step_s"] for r in real))
        t = np.array([r["step_s"] for r in real]) * scale
        lo = np.array([r["p10_s"] for r in real]) * scale
        hi = np.array([r["p90_s"] for r in real]) * scale
        x = np.arange(len(real))
        ax.bar(x, t, 0.6, yerr=[t - lo, hi - t], capsize=3, color=[_policy_color(r["policy"]) for r in real],
               label="median, p10-p90")
        ax.set_xticks(x)
        ax.set_xticklabels([r["policy"] for r in real], rotation=25, ha="right")
        ax.set_ylabel("step time (%s)" % tu)
        n = int(casedata.fnum(real[0]["run"], "cluster.nodes") * casedata.fnum(real[0]["run"], "cluster.gpus_per_node"))
        ax.set_title("step time, %d real MPI ranks" % n)
        ax.legend()
    div, uname = casedata.unit(max(r["comm_bytes"] for r in per_policy))
    _bars_by_policy(fig.add_subplot(gs[1, 0]), per_policy, lambda r: r["comm_bytes"] / div,
                    "per GPU per step (%s)" % uname, "wire traffic", "bytes one GPU sends")
    _bars_memory(fig.add_subplot(gs[1, 1]), per_policy, [r["policy"] for r in per_policy], "peak memory")
    m = per_policy[0]["microbatches"] if per_policy else 0
    fig.suptitle("Case 1, gradient accumulation, %d microbatches\n%s" % (m, _what(runs)))
    fig.tight_layout()
    _save(fig, outdir, name)


def plot_case_wrap(runs, outdir, name):
    """Case 2: peak memory per wrapping across sequence lengths, and by category."""
    rows = casedata.wrap_rows(runs)
    seqs = sorted(set(r["seq"] for r in rows))
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 5.2))
    top = max(r["reserved"] for r in rows)
    div, uname = casedata.unit(top)
    for w in casedata.WRAPS:
        sel = [r for r in rows if r["wrap"] == w]
        if not sel:
            continue
        c = _policy_color("wrap " + w)
        a.plot([r["seq"] for r in sel], [r["reserved"] / div for r in sel], "o-", color=c, label="%s, reserved" % w)
        a.plot([r["seq"] for r in sel], [r["alloc"] / div for r in sel], "s--", color=c, markersize=3,
               linewidth=1, label="%s, allocated" % w)
    gpus = set(r["gpu_bytes"] for r in rows)
    note = _capacity(a, gpus.pop(), top, div) if len(gpus) == 1 else ""
    if len(seqs) > 1:
        a.set_xscale("log", base=2)
    a.set_xticks(seqs)
    a.set_xticklabels([str(s) for s in seqs], rotation=30 if len(seqs) > 4 else 0)
    a.minorticks_off()
    a.set_xlabel("sequence length (tokens)")
    a.set_ylabel("peak memory (%s)" % uname)
    a.set_title("peak memory per wrapping")
    a.grid(True, alpha=0.3)
    a.legend(fontsize=8)
    focus = casedata.wrap_focus_seq(rows)
    sel = [r for r in rows if r["seq"] == focus]
    allcats = list(sel[0]["by_cat"]) if sel else []
    cats = [c for c in allcats if any(r["by_cat"].get(c, 0) for r in sel)]
    x = np.arange(len(sel))
    bottom = np.zeros(len(sel))
    colors = _colors(10, "tab10")
    for c in cats:
        v = np.array([r["by_cat"].get(c, 0) / div for r in sel])
        b.bar(x, v, 0.6, bottom=bottom, label=c.replace("_", " "), color=colors[allcats.index(c) % 10])
        bottom += v
    b.plot(x, [r["reserved"] / div for r in sel], "k_", markersize=28, markeredgewidth=2, label="peak reserved")
    gpus = set(r["gpu_bytes"] for r in sel)
    if len(gpus) == 1 and sel:
        _capacity(b, gpus.pop(), max(r["reserved"] for r in sel), div, -0.5, len(sel) - 0.5)
    b.set_xticks(x)
    b.set_xticklabels([r["wrap"] + ("" if r["fits"] else "\n(does not fit)") for r in sel])
    b.set_ylabel("memory (%s)" % uname)
    b.set_title("at %d tokens: allocated at the peak, by category" % focus)
    b.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle("Case 2, wrapping a %s-token vocabulary\n%s%s" % (runs[0].attrs.get("model.vocab", "?"), _what(runs),
                                                                   note))
    fig.tight_layout()
    _save(fig, outdir, name)


def _annotate_change(ax, x, before, after, fmt="%+.1f%%"):
    """Write after's change relative to before above after's bar."""
    for xi, b, a in zip(x, before, after):
        if b:
            ax.annotate(fmt % (100.0 * (a - b) / b), (xi, a), textcoords="offset points", xytext=(0, 2),
                        ha="center", fontsize=8)


def _pair_bars(ax, pairs, key, scale, label_after="after backward", label_in="in backward", measured=False):
    """Per optimizer form, the value after backward and in it, side by side."""
    x = np.arange(len(pairs))
    for off, which, color, lab in ((-0.2, 1, "tab:blue", label_after), (0.2, 2, "tab:orange", label_in)):
        v = np.array([p[which][key] for p in pairs]) * scale
        yerr = None
        if measured and key == "step_s":
            yerr = [v - np.array([p[which]["p10_s"] for p in pairs]) * scale,
                    np.array([p[which]["p90_s"] for p in pairs]) * scale - v]
        ax.bar(x + off, v, 0.4, yerr=yerr, capsize=3, color=color, label=lab)
    _annotate_change(ax, x + 0.2, [a[key] * scale for _, a, _ in pairs], [b[key] * scale for _, _, b in pairs])
    ax.set_xticks(x)
    ax.set_xticklabels([p[0] for p in pairs])
    ax.set_xlabel("optimizer form")


def plot_case_optim(runs, outdir, name):
    """Case 3: per optimizer form, the step after backward and in it: step
    time, backward's kernels, what moving it into backward changes, memory."""
    pairs = casedata.optim_pairs(casedata.optim_rows(runs))
    measured = any(a["measured"] for _, a, _ in pairs)
    fig, axes = plt.subplots(2, 2, figsize=(10.5, 8.5))
    scale, tu = _time_unit(max(a["step_s"] for _, a, _ in pairs))
    ax = axes[0, 0]
    _pair_bars(ax, pairs, "step_s", scale, measured=measured)
    ax.set_ylabel("step time (%s)%s" % (tu, ", median, p10-p90" if measured else ""))
    ax.set_title("step time (change in backward)")
    ax.legend(loc="lower left")
    ax = axes[0, 1]
    bscale, btu = _time_unit(max(r["backward_s"] for _, a, b in pairs for r in (a, b)))
    _pair_bars(ax, pairs, "backward_s", bscale)
    ax.set_ylabel("summed op time (%s)" % btu)
    ax.set_title("backward + recompute kernels, compute stream")
    ax.legend(loc="lower left")
    ax = axes[1, 0]
    x = np.arange(len(pairs))
    d = {k: np.array([(b[k] - a[k]) * 1e3 for _, a, b in pairs]) for k in ("step_s", "backward_s", "optim_s")}
    for off, k, color, lab in ((-0.27, "step_s", "tab:gray", "step time"),
                               (0.0, "backward_s", "tab:purple", "backward + recompute kernels"),
                               (0.27, "optim_s", "tab:cyan", "optimizer ops")):
        ax.bar(x + off, d[k], 0.27, color=color, label=lab)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x)
    ax.set_xticklabels([p[0] for p in pairs])
    ax.set_xlabel("optimizer form")
    ax.set_ylabel("in backward minus after (ms)")
    ax.set_title("what moving the step into backward changes")
    ax.legend(fontsize=8)
    ax = axes[1, 1]
    rows = [r for _, a, b in pairs for r in (a, b)]
    top = max(r["reserved"] for r in rows)
    div, uname = casedata.unit(top)
    for off, which, key, color, hatch, lab in ((-0.3, 1, "alloc", "tab:green", "", "allocated, after"),
                                               (-0.1, 2, "alloc", "tab:green", "//", "allocated, in backward"),
                                               (0.1, 1, "reserved", "tab:olive", "", "reserved, after"),
                                               (0.3, 2, "reserved", "tab:olive", "//", "reserved, in backward")):
        ax.bar(x + off, [p[which][key] / div for p in pairs], 0.2, color=color, hatch=hatch, edgecolor="white",
               label=lab)
    _annotate_change(ax, x - 0.1, [a["alloc"] / div for _, a, _ in pairs], [b["alloc"] / div for _, _, b in pairs])
    _annotate_change(ax, x + 0.3, [a["reserved"] / div for _, a, _ in pairs],
                     [b["reserved"] / div for _, _, b in pairs])
    gpus = set(r["gpu_bytes"] for r in rows)
    note = _capacity(ax, gpus.pop(), top, div, -0.5, len(pairs) - 0.5) if len(gpus) == 1 else ""
    ax.set_xticks(x)
    ax.set_xticklabels([p[0] for p in pairs])
    ax.set_xlabel("optimizer form")
    ax.set_ylabel("peak memory (%s)" % uname)
    ax.set_title("peak memory" + note)
    ax.legend(fontsize=8, loc="best", framealpha=0.9)
    fig.suptitle("Case 3, the optimizer in backward\n%s" % _what(runs))
    fig.tight_layout()
    _save(fig, outdir, name)


def plot_case_concat(runs, outdir, name):
    """Case 4: gradient concatenation on every microbatch or the last only."""
    rows = casedata.concat_rows(runs)
    measured = any(r["measured"] for r in rows)
    fig, axes = plt.subplots(2, 2, figsize=(10.5, 8))
    div, uname = casedata.unit(max([r["concat_bytes_per_micro"] for r in rows] + [1]))
    scale, tu = _time_unit(max(r["step_s"] for r in rows))
    cscale, ctu = _time_unit(max(r["concat_s"] for r in rows))
    for last, style, lab in ((False, "o-", "concat every microbatch"), (True, "s--", "concat last microbatch only")):
        sel = [r for r in rows if r["last_only"] == last]
        if not sel:
            continue
        m = [r["microbatches"] for r in sel]
        axes[0, 0].plot(m, [r["concat_bytes_per_micro"] / div for r in sel], style, label=lab)
        axes[0, 1].plot(m, [r["concat_s"] * cscale for r in sel], style, label=lab)
        t = np.array([r["step_s"] for r in sel]) * scale
        yerr = None
        if measured:
            yerr = [t - np.array([r["p10_s"] for r in sel]) * scale, np.array([r["p90_s"] for r in sel]) * scale - t]
        axes[1, 0].errorbar(m, t, yerr=yerr, fmt=style, capsize=2, label=lab)
    pairs = casedata.concat_pairs(rows)
    sdiv, suname = casedata.unit(max([a["concat_bytes"] - b["concat_bytes"] for _, a, b in pairs] + [1]))
    axes[1, 1].bar(np.arange(len(pairs)), [(a["concat_bytes"] - b["concat_bytes"]) / sdiv for _, a, b in pairs],
                   0.6, color="tab:green", label="every minus last only")
    axes[1, 1].set_xticks(np.arange(len(pairs)))
    axes[1, 1].set_xticklabels([str(m) for m, _, _ in pairs])
    axes[1, 1].set_xlabel("microbatches per step (M)")
    axes[1, 1].set_ylabel("per step (%s)" % suname)
    axes[1, 1].set_title("copy traffic saved")
    axes[1, 1].legend()
    axes[0, 0].set_ylabel("per microbatch (%s)" % uname)
    axes[0, 0].set_title("bytes copied into flat gradients")
    axes[0, 1].set_ylabel("summed per step (%s)" % ctu)
    axes[0, 1].set_title("time in concatenation")
    axes[1, 0].set_ylabel("step time (%s)%s" % (tu, ", median, p10-p90" if measured else ""))
    axes[1, 0].set_title("step time")
    ms = sorted(set(r["microbatches"] for r in rows))
    for ax in (axes[0, 0], axes[0, 1], axes[1, 0]):
        ax.set_xlabel("microbatches per step (M)")
        if len(ms) > 1:
            ax.set_xscale("log", base=2)
        ax.set_xticks(ms)
        ax.set_xticklabels([str(m) for m in ms])
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Case 4, flat-parameter gradients under no-sync accumulation\n%s" % _what(runs))
    fig.tight_layout()
    _save(fig, outdir, name)


def plot_bandwidth(runs, outdir, name="bandwidth_sharding"):
    """Step time of each sharding across the inter-node bandwidth: where hsdp overtakes fsdp."""
    rows = casedata.bandwidth_rows(runs)
    fig, ax = plt.subplots(figsize=(9, 5.2))
    _step_vs_bandwidth(ax, rows, "sharding", "", any(r["measured"] for r in rows))
    x = casedata.crossover(rows)
    if x:
        ax.axvspan(x[0], x[1], color="gray", alpha=0.2, label="hsdp stops being faster than fsdp")
        ax.legend()
    ax.set_title("%s\nstep time per sharding across the inter-node bandwidth" % _what(runs))
    fig.tight_layout()
    _save(fig, outdir, name)


def plot_pareto(policies, what, outdir, name="pareto_time_memory"):
    """Every valid policy's step time against its peak reserved memory; the
    front numbered fastest first (the report lists it)."""
    front = casedata.pareto(policies)
    fig, ax = plt.subplots(figsize=(10, 6))
    t = np.array([p["step_time_s"] for p in policies])
    m = np.array([p["peak_reserved_bytes"] for p in policies], dtype=np.float64)
    fits = np.array([bool(p.get("fits", True)) for p in policies])
    div, uname = casedata.unit(m.max() if len(m) else 1)
    ax.scatter(m[fits] / div, t[fits], s=4, color="tab:blue", alpha=0.3, label="fits (%d policies)" % fits.sum())
    if (~fits).any():
        ax.scatter(m[~fits] / div, t[~fits], s=4, color="lightgray", alpha=0.6,
                   label="does not fit (%d)" % (~fits).sum())
    fm = [p["peak_reserved_bytes"] / div for p in front]
    ft = [p["step_time_s"] for p in front]
    ax.step(fm, ft, "-", where="post", color="tab:red", linewidth=1.2)
    ax.plot(fm, ft, "o", color="tab:red", markersize=5,
            label="front, numbered fastest first: no policy is faster with less memory")
    for i in range(len(front)):
        ax.annotate(str(i + 1), (fm[i], ft[i]), textcoords="offset points", xytext=(-4, -13 if i % 2 else 5),
                    fontsize=8, color="tab:red")
    ax.set_xlabel("peak reserved memory per GPU (%s)" % uname)
    ax.set_ylabel("step time (s)")
    ax.set_title("%s: every valid policy (./sim --policy all), simulated" % what)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    _save(fig, outdir, name)


CASE_PLOTS = {"accum": plot_case_accum, "wrap": plot_case_wrap, "optim": plot_case_optim,
              "concat": plot_case_concat}


def main_cases(cases_dir, outdir):
    """Every case-study figure from the files paper/cases.sh writes in cases_dir."""
    if not os.path.isdir(cases_dir):
        sys.stderr.write("plots: %s: no such directory\n" % cases_dir)
        return 2
    os.makedirs(outdir, exist_ok=True)
    n = 0
    with plt.rc_context(CASE_RC):
        for case in CASES:
            sim, meas = case_files(cases_dir, case)
            if sim:
                runs = [r for r in load_runs(sim) if not casedata.is_measured(r)]
                if runs:
                    CASE_PLOTS[case](runs, outdir, "case_%s_sim" % case)
                    n += 1
            runs = [r for path in meas for r in load_runs(path)]
            for key, group in measured_groups(runs):
                CASE_PLOTS[case](group, outdir, "case_%s_%s" % (case, key))
                n += 1
        bw = os.path.join(cases_dir, "bandwidth.h5")
        if os.path.isfile(bw):
            plot_bandwidth(load_runs(bw), outdir)
            n += 1
        pl = casedata.find_policy_list([cases_dir])
        if pl:
            plot_pareto(*casedata.load_policy_list(pl), outdir)
            n += 1
    print("plots: %d case figures from %s into %s" % (n, cases_dir, outdir))
    return 0


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        sys.stderr.write("usage: plots.py DATA_DIR_OR_FILES... OUTDIR\n"
                         "       plots.py --cases CASES_DIR OUTDIR\n")
        return 2
    if argv[1] == "--cases":
        if len(argv) != 4:
            sys.stderr.write("usage: plots.py --cases CASES_DIR OUTDIR\n")
            return 2
        return main_cases(argv[2], argv[3])
    if _processes() is None:
        sys.stderr.write("plots: PLOTS_JOBS=%s: how many processes draw, a whole number from 1\n" %
                         os.environ["PLOTS_JOBS"])
        return 2
    files = results_files(argv[1:-1])
    outdir = argv[-1]
    if not files:
        sys.stderr.write("plots: no .h5 files in %s\n" % " ".join(argv[1:-1]))
        return 1
    os.makedirs(outdir, exist_ok=True)
    runs, status, jobs = [], 0, []
    for path in files:
        try:
            file_runs = load_runs(path)
            sweeps = load_sweeps(path)
        except (OSError, KeyError) as e:
            sys.stderr.write("plots: %s: not a readable results file: %s\n" % (path, e))
            status = 1
            continue
        if not file_runs and not sweeps:
            sys.stderr.write("plots: %s: no runs\n" % path)
        for sweep in sweeps:
            plot_sweep_pareto(sweep, outdir)
            plot_sweep_whatif(sweep, outdir)
        pairs = casedata.compared_pairs(file_runs)
        paired = set()
        for m, p in pairs:
            if m.timed:
                jobs.append((plot_vs_sim_timeline, (m, p, outdir)))
            if m.memory is not None:
                jobs.append((plot_vs_sim_memory, (m, p, outdir)))
            paired.update((m.index, p.index))
        if pairs:
            plot_predicted_vs_measured(pairs, outdir, file_runs[0].stem)
            plot_predicted_scatter(pairs, outdir, file_runs[0].stem)
            plot_by_class(path + ".compare.json", file_runs, outdir, file_runs[0].stem)
        for run in file_runs:
            if run.index in paired or run.attrs.get("source") == "sim" and run.attrs.get("compares"):
                continue
            if run.timed:
                jobs.append((plot_timeline, (run, outdir)))
            if run.memory is not None:
                jobs.append((plot_memory, (run, outdir)))
            if "sweep" not in run.attrs:  # a sweep's timelines are its rows, not policies to compare
                runs.append(run)
    _draw(jobs)
    stems = sorted(set(r.stem for r in runs))
    for stem in stems:
        plot_policies(casedata.latest([r for r in runs if r.stem == stem]), outdir,
                      "policies" if len(stems) == 1 else "%s_policies" % stem)
    print("plots: %d files into %s" % (len(files), outdir))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
