#!/usr/bin/python3
"""Figures from results files (schema: data/README.md).

Usage: plots.py DATA_DIR_OR_FILES... OUTDIR

Every .h5 file given (or found directly in a given directory) is read, every
run in it. A measured run that `./sim --compare` predicted (a simulated run
of the same file names it in `compares`) is drawn beside its prediction:
its measured and simulated stream timelines one above the other on one time
axis, and its memory, measured and predicted; each file with such pairs
gets one figure of predicted against measured step time per policy, with
the error. Every other run gets a stream timeline and a memory timeline.
Across the runs of all files that are not part of a comparison (nor
timelines of a sweep's rows): one policy comparison. Every sweep
(/sweeps/NNNNNN, `./sim --sweep`, `--advise`, `--policy all` with --out)
gets its Pareto front of step time against peak memory, and, when it has a
what-if resource, the fastest configuration that fits of each sharding
family at each value of the resource, with the values between which the
fastest changes. Each figure is saved as PNG and PDF under OUTDIR with a
stable name:

    <file-stem>_run<N>_timeline.{png,pdf}
    <file-stem>_run<N>_memory.{png,pdf}
    <file-stem>_run<N>_vs_sim_timeline.{png,pdf}   (N: the measured run)
    <file-stem>_run<N>_vs_sim_memory.{png,pdf}
    <file-stem>_predicted_vs_measured.{png,pdf}
    <file-stem>_sweep<N>_pareto.{png,pdf}
    <file-stem>_sweep<N>_whatif.{png,pdf}
    policies.{png,pdf}

Run with Debian's /usr/bin/python3 (matplotlib, h5py and numpy from Debian
packages); `make plots` runs it on data/ into paper/figures.
"""
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import h5py  # noqa: E402
import numpy as np  # noqa: E402

GIB = float(1 << 30)
# Configuration keys that never label a policy: where the results went.
IGNORED_KEYS = {"run.out"}


class Run:
    """One /runs/NNNNNN group, read whole into memory."""

    def __init__(self, path, name, group):
        self.path = path
        self.stem = os.path.splitext(os.path.basename(path))[0]
        self.index = int(name)
        self.attrs = {k: _text(v) for k, v in group.attrs.items()}
        self.ops = group["ops"][()]
        self.memory = group["memory"][()]
        self.summary = dict(group["summary"].attrs.items())
        self.kind_names = _enum_names(group["ops"].dtype, "kind")
        self.stream_names = _enum_names(group["ops"].dtype, "stream")
        self.categories = [n for n in group["memory"].dtype.names if n not in ("t_ns", "reserved")]

    @property
    def config(self):
        """Configuration keys (`section.key`) and `source`, as text."""
        keys = {k: v for k, v in self.attrs.items() if "." in k and k not in IGNORED_KEYS}
        keys["source"] = self.attrs.get("source", "")
        return keys

    def title(self):
        return "%s run %d (%s)" % (self.stem, self.index, self.attrs.get("source", "?"))


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
    with h5py.File(path, "r") as f:
        if "runs" not in f:
            return runs
        for name in sorted(f["runs"]):
            runs.append(Run(path, name, f["runs"][name]))
    return runs


class Sweep:
    """One /sweeps/NNNNNN group: its description and its rows (schema: data/README.md)."""

    def __init__(self, path, name, group):
        self.path = path
        self.stem = os.path.splitext(os.path.basename(path))[0]
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
    with h5py.File(path, "r") as f:
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
    """The .h5 files named by args: files as given, directories' *.h5 sorted."""
    files = []
    for a in args:
        if os.path.isdir(a):
            files += sorted(os.path.join(a, n) for n in os.listdir(a) if n.endswith(".h5"))
        elif os.path.isfile(a):
            files.append(a)
        else:
            sys.exit("plots: %s: no such file or directory" % a)
    return files


def _colors(n, cmap="tab20"):
    """n distinct colors, stable by index."""
    cm = plt.get_cmap(cmap)
    return [cm(i % cm.N) for i in range(n)]


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
    ax.set_title(title)
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
    h1 = draw_timeline(top, meas, "%s: measured (%s), step %.2f ms" % (meas.title(), meas.attrs.get(
        "hardware", "?"), ms))
    h2 = draw_timeline(bottom, pred, "predicted by run %d, step %.2f ms (%+.1f%%)" % (
        pred.index, ps, 100 * (ps - ms) / ms if ms else 0))
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
    for run, style, what in ((meas, "-", "measured"), (pred, "--", "predicted")):
        mem = run.memory[np.argsort(run.memory["t_ns"], kind="stable")]
        alloc = sum(mem[c].astype(np.float64) for c in run.categories) / (1 << 20) if len(mem) else []
        x = np.arange(len(mem))
        ax.step(x, alloc, style, where="post", linewidth=1.4, label="%s allocated" % what)
        ax.step(x, mem["reserved"].astype(np.float64) / (1 << 20), style, where="post", linewidth=1.0,
                label="%s reserved" % what)
    ax.set_xlabel("ops issued (the allocator runs in issue order)")
    ax.set_ylabel("MiB")
    ax.set_ylim(bottom=0)
    ma = int(meas.summary.get("peak_alloc_bytes", 0))
    pa = int(pred.summary.get("peak_alloc_bytes", 0))
    ax.set_title("%s: memory, peak allocated %d B measured, %d B predicted" % (meas.title(), ma, pa))
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
    return " ".join(parts)


def plot_predicted_vs_measured(pairs, outdir, stem):
    """Per group of runs (model, ranks): measured step time with its spread beside the prediction."""
    groups = {}
    for m, p in pairs:
        key = "%s, %s x %s ranks" % (m.config.get("model.name", "?"), m.config.get("cluster.nodes", "?"),
                                     m.config.get("cluster.gpus_per_node", "?"))
        groups.setdefault(key, []).append((m, p))
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
        ax.bar(x - 0.2, ms, 0.4, yerr=[ms - lo, hi - ms], capsize=2, label="measured (median, p10-p90)",
               color="tab:blue")
        ax.bar(x + 0.2, ps, 0.4, label="predicted", color="tab:orange")
        for i in range(len(g)):
            ax.annotate("%+.0f%%" % (100 * (ps[i] - ms[i]) / ms[i]), (x[i], max(hi[i], ps[i])),
                        textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7)
        ax.set_xticks(x)
        ax.set_xticklabels([_short_policy(m) for m, _ in g], rotation=40, ha="right", fontsize=7)
        ax.set_ylabel("step time (ms)")
        ax.set_title(key)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.suptitle("%s: predicted vs measured step time" % stem)
    fig.tight_layout()
    _save(fig, outdir, "%s_predicted_vs_measured" % stem)


def compared_pairs(file_runs):
    """(measured, its latest prediction) for each measured run of a file that was compared."""
    by_name = {"%06d" % r.index: r for r in file_runs}
    latest = {}
    for r in file_runs:
        c = r.attrs.get("compares")
        if r.attrs.get("source") == "sim" and c in by_name:
            latest[c] = r
    return [(by_name[c], p) for c, p in sorted(latest.items())]


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
    ys, labels, cols = [], [], []
    for i, cat in enumerate(run.categories):
        y = mem[cat].astype(np.float64) / GIB
        if len(y) and y.any():
            ys.append(_steps(t, y)[1])
            labels.append(cat)
            cols.append(colors[i])
    ts = _steps(t, t)[0]
    if ys:
        ax.stackplot(ts, ys, labels=labels, colors=cols, linewidth=0)
    if len(mem):
        ax.plot(ts, _steps(t, mem["reserved"].astype(np.float64) / GIB)[1], color="black",
                linewidth=1.2, label="reserved")
    else:
        ax.text(0.5, 0.5, "no memory samples", transform=ax.transAxes, ha="center")
    gpu = float(run.summary.get("gpu_bytes", 0)) / GIB
    if gpu > 0:
        ax.axhline(gpu, color="red", linestyle="--", linewidth=1.2, label="GPU capacity")
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("GiB")
    ax.set_ylim(bottom=0)
    ax.set_title(run.title() + ": memory")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    _save(fig, outdir, "%s_run%d_memory" % (run.stem, run.index))


def policy_labels(runs):
    """One label per run from the configuration keys whose values differ."""
    keys = sorted(set().union(*(r.config.keys() for r in runs)))
    differing = [k for k in keys if len(set(r.config.get(k, "") for r in runs)) > 1]
    labels = []
    for r in runs:
        parts = ["%s=%s" % (k.split(".", 1)[-1], r.config.get(k, "-")) for k in differing]
        labels.append("\n".join(parts))
    if len(set(labels)) < len(labels):
        labels = [("%s\n" % l if l else "") + "%s run %d" % (r.stem, r.index)
                  for l, r in zip(labels, runs)]
    return labels


def plot_policies(runs, outdir):
    """Step time split into compute, exposed communication and the rest; peak memory."""
    labels = policy_labels(runs)
    x = np.arange(len(runs))
    s = [r.summary for r in runs]
    step = np.array([float(v.get("step_time_s", 0)) for v in s])
    compute = np.array([float(v.get("compute_s", 0)) for v in s])
    comm = np.array([float(v.get("exposed_comm_s", 0)) for v in s])
    other = np.maximum(step - compute - comm, 0)
    alloc = np.array([float(v.get("peak_alloc_bytes", 0)) for v in s]) / GIB
    reserved = np.array([float(v.get("peak_reserved_bytes", 0)) for v in s]) / GIB
    gpu = np.array([float(v.get("gpu_bytes", 0)) for v in s]) / GIB

    width = max(6, 1.3 * len(runs) + 2)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(width, 8), sharex=True)
    top.bar(x, compute, 0.6, label="compute", color="tab:blue")
    top.bar(x, comm, 0.6, bottom=compute, label="exposed communication", color="tab:orange")
    top.bar(x, other, 0.6, bottom=compute + comm, label="other (idle, host)", color="tab:gray")
    top.set_ylabel("step time (s)")
    top.set_title("policies: step time and peak memory")
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)

    bottom.bar(x - 0.15, alloc, 0.3, label="peak allocated", color="tab:green")
    bottom.bar(x + 0.15, reserved, 0.3, label="peak reserved", color="tab:olive")
    bottom.hlines(gpu, x - 0.35, x + 0.35, colors="red", linestyles="--", label="GPU capacity")
    bottom.set_ylabel("GiB")
    bottom.set_xticks(x)
    bottom.set_xticklabels(labels, fontsize=8)
    bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    _save(fig, outdir, "policies")


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        sys.stderr.write("usage: plots.py DATA_DIR_OR_FILES... OUTDIR\n")
        return 2
    files = results_files(argv[1:-1])
    outdir = argv[-1]
    if not files:
        sys.stderr.write("plots: no .h5 files in %s\n" % " ".join(argv[1:-1]))
        return 1
    os.makedirs(outdir, exist_ok=True)
    runs, status = [], 0
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
        pairs = compared_pairs(file_runs)
        paired = set()
        for m, p in pairs:
            plot_vs_sim_timeline(m, p, outdir)
            plot_vs_sim_memory(m, p, outdir)
            paired.update((m.index, p.index))
        if pairs:
            plot_predicted_vs_measured(pairs, outdir, file_runs[0].stem)
        for run in file_runs:
            if run.index in paired or run.attrs.get("source") == "sim" and run.attrs.get("compares"):
                continue
            plot_timeline(run, outdir)
            plot_memory(run, outdir)
            if "sweep" not in run.attrs:  # a sweep's timelines are its rows, not policies to compare
                runs.append(run)
    if runs:
        plot_policies(runs, outdir)
    print("plots: %d files into %s" % (len(files), outdir))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
