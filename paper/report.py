#!/usr/bin/python3
"""The report's numbers and tables, as LaTeX fragments generated from data/.

Usage: report.py DATA_DIR FIGURES_DIR OUTDIR

Reads every results file under DATA_DIR (schema: data/README.md):
DATA_DIR/runs/*.h5 (measured runs and their predictions, `make validate`),
DATA_DIR/pytorch/ and DATA_DIR/published/ (PyTorch FSDP2 steps and their
predictions), DATA_DIR/cases/ (the case studies, paper/cases.sh), DATA_DIR/calibration/
and DATA_DIR/*.h5, and writes into OUTDIR one .tex fragment per part of
paper/main.tex:

    abstract.tex     the findings in one paragraph
    validation.tex   predicted against measured: per run, per op kind, where
                     the model is wrong and what the measurement holds that
                     the prediction does not price
    pytorch.tex      PyTorch FSDP2 steps (data/pytorch/, measured on a GPU;
                     data/published/, others' published figures) against
                     the pytorch runtime's predictions
    case_accum.tex, case_wrap.tex, case_optim.tex, case_concat.tex
    bandwidth.tex    where hsdp overtakes fsdp
    pareto.tex       the time-memory front of every valid policy
    policies.tex     the reference experiment's policies
    limitations.tex  what was emulated, and what is missing from data/
    inventory.tex    the files this report was built from

A figure is included when FIGURES_DIR holds it (paper/plots.py makes
them); a part whose data is missing says so in the text. Every number in
the fragments comes from the files read; nothing is typed in.

Exit status 0; 2 on bad arguments. Run with Debian's /usr/bin/python3
(h5py, numpy); `make paper` runs it after paper/plots.py.
"""
import json
import lzma
import os
import statistics
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import casedata  # noqa: E402



# ---- reading ---------------------------------------------------------------

class Run:
    """One /runs/NNNNNN group: attributes, summary and ops (not the memory timeline)."""

    def __init__(self, path, name, group, keys=None):
        self.path = path
        self.stem = casedata.results_stem(path)
        self.index = int(name)
        if keys is not None:  # the attributes named alone, no summary and no ops (load(keys=...))
            self.attrs = _Named(keys, ((k, _text(v)) for k, v in casedata.read_attrs(group, keys).items()))
            self.summary, self.ops, self.kind_names, self.stream_names = {}, None, {}, {}
            return
        self.attrs = {k: _text(v) for k, v in casedata.read_attrs(group).items()}
        self.summary = casedata.read_attrs(group["summary"])
        self.ops = group["ops"][()]
        self.kind_names = _enum_names(group["ops"].dtype, "kind")
        self.stream_names = _enum_names(group["ops"].dtype, "stream")

    @property
    def config(self):
        keys = {k: v for k, v in self.attrs.items() if "." in k and k.split(".", 1)[0] in
                ("model", "cluster", "policy", "run") and k != "run.out"}
        keys["source"] = self.attrs.get("source", "")
        return keys


def _text(v):
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v if isinstance(v, str) else str(v)


class _Named(dict):
    """The attributes a run was loaded with (load(keys=...)): asking for
    another is an error, not its default, so that a reader of such runs
    cannot take a key it did not load for an absent one."""

    def __init__(self, keys, items):
        super().__init__(items)
        self.loaded = frozenset(keys)

    def _check(self, k):
        if k not in self.loaded:
            raise KeyError("%s: not among the attributes this run was loaded with" % k)

    def get(self, k, default=None):
        self._check(k)
        return super().get(k, default)

    def __getitem__(self, k):
        self._check(k)
        return super().__getitem__(k)


def _enum_names(dtype, field):
    mapping = h5py.check_enum_dtype(dtype[field]) or {}
    return {int(v): k for k, v in mapping.items()}


def load(path, keys=None):
    """Every run of a results file (.h5 or .h5.xz), in index order; [] for a file without /runs.
    keys: read those attributes alone (HDF5 reads a run's 80 attributes one by one, about 30 us
    each: over data/'s 9,000 runs, most of the report's time)."""
    with casedata.open_results(path) as f:
        if "runs" not in f:
            return []
        return [Run(path, n, f["runs"][n], keys) for n in sorted(f["runs"])]


def h5files(d):
    """A directory's results files, .h5 and xz-compressed .h5.xz (data/runs keeps most so)."""
    return casedata.results_in(d, every_xz=True)


# ---- LaTeX -----------------------------------------------------------------

TEX_ESC = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
           "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def tex(s):
    """Text from data, safe in LaTeX; '--' stays two hyphens."""
    return "".join(TEX_ESC.get(c, c) for c in str(s)).replace("--", "-{}-")


def tt(s):
    return r"\texttt{%s}" % tex(s)


def pct(x, digits=1):
    """A signed percentage: +1.8\,%, a math minus (no line break after it) for -7.0\,%."""
    v = (r"%." + str(digits) + r"f") % abs(100 * x)
    sign = "+" if x > 0 and float(v) else "$-$" if x < 0 and float(v) else ""
    return sign + v + r"\,\%"


def upct(x, digits=1):
    return (r"%." + str(digits) + r"f\,\%%") % (100 * x)


def secs(s):
    """A duration in the unit that reads: 1.234\\,s, 12.3\\,ms, 45\\,us."""
    if s >= 1:
        return r"%.3f\,s" % s
    if s >= 1e-3:
        return r"%.2f\,ms" % (s * 1e3)
    return r"%.1f\,\textmu s" % (s * 1e6)


def span_bytes(vals):
    """'-1.96 GiB at every length' or 'between -3.12 GiB and -5.24 GiB': signed byte changes."""
    def sb(v):
        return ("-" if v < 0 else "+" if v > 0 else "") + nbytes(abs(v))
    lo, hi = min(vals, key=abs), max(vals, key=abs)
    return "%s at every length" % sb(lo) if lo == hi else "between %s and %s" % (sb(lo), sb(hi))


def noise_note(a, b):
    """For two measured runs: ' (within the runs' p10--p90 spread)' when
    their spreads overlap, so the difference of medians is not telling."""
    if not (a["measured"] and b["measured"]):
        return ""
    if a["p10_s"] <= b["p90_s"] and b["p10_s"] <= a["p90_s"]:
        return r"; the difference is within the runs' p10--p90 spread"
    return ""


def sig3(v):
    """A value to about three significant digits, trailing zeros kept: 241, 13.0, 1.40."""
    a = abs(v)
    return "%.0f" % v if a >= 100 else "%.1f" % v if a >= 10 else "%.2f" % v if a >= 1 else "%.3g" % v


def nbytes(n):
    return casedata.fmt_bytes(n).replace(" ", r"\,")


def gbps(x):
    return r"%g\,GB/s" % x


def table(cols, rows, caption=None, label=None, align=None, long=False, notes=None, tight=False):
    """A booktabs table (a longtable when long); cells are LaTeX already; tight: half the space between
    columns."""
    align = align or ("l" + "r" * (len(cols) - 1))
    out = []
    for r in rows:
        assert isinstance(r, str) or len(r) == len(cols), (cols, r)
    if long:
        out.append(r"\begin{small}%s\begin{longtable}{%s}" % (r"\setlength{\tabcolsep}{3pt}" if tight else "", align))
        if caption:
            out.append(r"\caption{%s}%s\\" % (caption, r"\label{%s}" % label if label else ""))
        out += [r"\toprule", " & ".join(cols) + r" \\", r"\midrule", r"\endfirsthead",
                r"\multicolumn{%d}{l}{\emph{(continued)}} \\" % len(cols), r"\toprule", " & ".join(cols) + r" \\",
                r"\midrule", r"\endhead"]
        out += [(" & ".join(r) + r" \\") if not isinstance(r, str) else r for r in rows]
        out += [r"\bottomrule", r"\end{longtable}\end{small}"]
    else:
        out.append(r"\begin{table}[htbp]\centering\small" + (r"\setlength{\tabcolsep}{3pt}" if tight else ""))
        if caption:
            out.append(r"\caption{%s}%s" % (caption, r"\label{%s}" % label if label else ""))
        out += [r"\begin{tabular}{%s}" % align, r"\toprule", " & ".join(cols) + r" \\", r"\midrule"]
        out += [" & ".join(r) + r" \\" for r in rows]
        out += [r"\bottomrule", r"\end{tabular}"]
        if notes:
            out.append(r"\par\smallskip\footnotesize %s" % notes)
        out.append(r"\end{table}")
    return "\n".join(out)


class Figures:
    """The figures paper/plots.py made; include() only those that exist."""

    def __init__(self, figdir, reldir):
        self.figdir = figdir
        self.reldir = reldir

    def has(self, name):
        return os.path.isfile(os.path.join(self.figdir, name + ".pdf"))

    def include(self, name, caption, label, width=r"\textwidth"):
        if not self.has(name):
            body = r"\fbox{\parbox{0.8\textwidth}{\centering Figure %s is missing: paper/plots.py did not draw it " \
                   r"from this data.}}" % tex(name)
        else:
            body = r"\includegraphics[width=%s]{%s/%s.pdf}" % (width, self.reldir, name)
        return "\n".join([r"\begin{figure}[htbp]\centering", body, r"\caption{%s}\label{%s}" % (caption, label),
                          r"\end{figure}"])


def write(outdir, name, text):
    with open(os.path.join(outdir, name), "w") as f:
        f.write("%% generated by paper/report.py from data/: do not edit\n")
        f.write(text.rstrip() + "\n")


# ---- what a set of runs is -------------------------------------------------

def scale_text(runs):
    """'llama3-8b on 8 x 4 a100-80g' (the distinct ones, joined)."""
    return ", ".join(sorted(set(casedata.cluster_text(r) for r in runs)))


def measured_text(runs):
    hw = sorted(set("%s (%s backend)" % (r.attrs.get("hardware", "?"), r.attrs.get("backend", "?"))
                    for r in runs if casedata.is_measured(r)))
    return ", ".join(hw)


def attr(runs, key, default="?"):
    vals = sorted(set(r.attrs.get(key, default) for r in runs))
    return vals[0] if len(vals) == 1 else " or ".join(vals)


def load_case(data, case):
    """(simulated runs, {hardware-backend: measured runs}) of a case."""
    d = os.path.join(data, "cases")
    sim, meas = [], {}
    if not os.path.isdir(d):
        return sim, meas
    for path in h5files(d):
        n = os.path.basename(path)
        if n == case + ".h5":
            sim += [r for r in load(path) if not casedata.is_measured(r)]
        elif n.startswith(case + "-"):
            for r in load(path):
                if casedata.is_measured(r):
                    key = "%s-%s" % (r.attrs.get("hardware", "unknown"), r.attrs.get("backend", "unknown"))
                    meas.setdefault(key, []).append(r)
    return sim, dict(sorted(meas.items()))


def missing(what, how):
    return r"\emph{No %s in data/: %s.}" % (what, how)


def case_text(out, case, sim, meas):
    """A case's paragraphs, saying which of its simulated and measured runs data/ lacks."""
    if not sim:
        out.insert(0, missing("simulated run of case %d" % case, "run paper/cases.sh"))
    if not meas:
        out.append(missing("measured run of case %d" % case, "run paper/cases.sh"))
    return "\n\n".join(out)


# ---- case 1 ----------------------------------------------------------------

def accum_table(rows, unit_s, caption, label, fabric=None):
    """Step time per bandwidth (rows) and policy (columns), the fastest
    fitting one in bold, a dagger where it does not fit."""
    rows = [r for r in rows if fabric is None or r["fabric"] == fabric]
    pols = []
    for r in rows:
        if r["policy"] not in pols:
            pols.append(r["policy"])
    div, un = unit_s
    body = []
    for bw in sorted(set(r["inter_gbps"] for r in rows)):
        cells = {r["policy"]: r for r in rows if r["inter_gbps"] == bw}
        fit = [r for r in cells.values() if r["fits"]]
        best = min(fit, key=lambda r: r["step_s"]) if fit else None
        line = ["%g" % bw]
        for p in pols:
            r = cells.get(p)
            if r is None:
                line.append("--")
                continue
            v = sig3(r["step_s"] / div)
            if r is best:
                v = r"\textbf{%s}" % v
            if not r["fits"]:
                v += r"$^\dagger$"
            line.append(v)
        body.append(line)
    cols = ["GB/s"] + [tex(p) for p in pols]
    return table(cols, body, caption + r" Step time in %s; bold: the fastest policy that fits; $^\dagger$: does not fit." % un,
                 label)


def per_policy(rows):
    out = {}
    for r in rows:
        out.setdefault(r["policy"], r)
    return out


def wins_text(rows):
    """'fsdp no-sync is fastest from 0.5 to 2 GB/s, hsdp ... from 4 to 50 GB/s'."""
    w = casedata.accum_winners(rows)
    if not w:
        return "No policy fits at any bandwidth."
    spans, cur = [], None
    for bw, best, second in w:
        if cur and cur[0] == best["policy"]:
            cur[2] = bw
        else:
            cur = [best["policy"], bw, bw]
            spans.append(cur)
    parts = []
    for p, lo, hi in spans:
        parts.append("%s from %s to %s" % (tt(p), gbps(lo), gbps(hi)) if lo != hi else "%s at %s" % (tt(p), gbps(lo)))
    return "The fastest policy that fits is " + "; ".join(parts) + "."


def ratio_text(rows, a, b):
    """'x.xx times at the lowest bandwidth, y.yy at the highest' of a's step over b's."""
    bws = sorted(set(r["inter_gbps"] for r in rows))
    t = {(r["policy"], r["inter_gbps"]): r["step_s"] for r in rows}
    vals = [(bw, t[(a, bw)] / t[(b, bw)]) for bw in bws if (a, bw) in t and (b, bw) in t and t[(b, bw)] > 0]
    if not vals:
        return None
    (lo_bw, lo), (hi_bw, hi) = vals[0], vals[-1]
    return r"%.2f times the step of %s at %s and %.2f times at %s" % (lo, tt(b), gbps(lo_bw), hi, gbps(hi_bw))


def case_accum(data, figs):
    sim, meas = load_case(data, "accum")
    out = []
    if sim:
        rows = casedata.accum_rows(sim)
        pp = per_policy(rows)
        m = rows[0]["microbatches"]
        bws = sorted(set(r["inter_gbps"] for r in rows))
        out.append(r"\paragraph{Simulated at scale.} %s (\texttt{experiments/cases/accum.ini}): %s, %d microbatches "
                   r"of %s tokens per optimizer step, the %s runtime, activation checkpointing %s; each policy at %d "
                   r"inter-node bandwidths from %s to %s per GPU (Figure~\ref{fig:accum-sim}, "
                   r"Table~\ref{tab:accum-sim})." % (
                       tex(scale_text(sim)), "simulated by \\texttt{./sim}", m, tex(attr(sim, "model.seq")),
                       tex(attr(sim, "policy.runtime")), tex(attr(sim, "policy.ac")), len(bws), gbps(bws[0]),
                       gbps(bws[-1])))
        facts = []
        r = ratio_text(rows, "fsdp sync-each", "fsdp no-sync")
        if r:
            facts.append("Syncing every microbatch takes " + r + ".")
        if "fsdp sync-each" in pp and "fsdp no-sync" in pp:
            a, b = pp["fsdp sync-each"], pp["fsdp no-sync"]
            facts.append("Per step one GPU sends %s with sync-each and %s with no-sync (%s); no-sync's unsharded "
                         "gradients raise the peak reserved memory from %s to %s." % (
                             nbytes(a["comm_bytes"]), nbytes(b["comm_bytes"]), pct(b["comm_bytes"] / a["comm_bytes"] - 1),
                             nbytes(a["reserved"]), nbytes(b["reserved"])))
        if "hsdp defer-replica" in pp and "hsdp sync-each" in pp:
            a, b = pp["hsdp sync-each"], pp["hsdp defer-replica"]
            facts.append("With hsdp, deferring the all-reduce across replicas to the last microbatch sends %s instead "
                         "of %s, at a peak of %s reserved (sync-each: %s)." % (
                             nbytes(b["comm_bytes"]), nbytes(a["comm_bytes"]), nbytes(b["reserved"]), nbytes(a["reserved"])))
        parts = [p for p in pp if p.split()[-1].startswith("partial")]
        for p in parts:
            facts.append("%s sends %s at a peak of %s reserved: between sync-each and no-sync in both." % (
                tt(p), nbytes(pp[p]["comm_bytes"]), nbytes(pp[p]["reserved"]))
                if "fsdp sync-each" in pp and "fsdp no-sync" in pp and
                pp["fsdp no-sync"]["comm_bytes"] <= pp[p]["comm_bytes"] <= pp["fsdp sync-each"]["comm_bytes"] and
                pp["fsdp sync-each"]["reserved"] <= pp[p]["reserved"] <= pp["fsdp no-sync"]["reserved"]
                else "%s sends %s at a peak of %s reserved." % (tt(p), nbytes(pp[p]["comm_bytes"]), nbytes(pp[p]["reserved"])))
        nofit = sorted(set(r["policy"] for r in rows if not r["fits"]))
        if nofit:
            facts.append("Not fitting the GPU's %s: %s." % (nbytes(rows[0]["gpu_bytes"]), ", ".join(tt(p) for p in nofit)))
        facts.append(wins_text(rows))
        out.append(" ".join(facts))
        out.append(figs.include("case_accum_sim", "Case 1 simulated: %s, %d microbatches. Step time across the "
                                "inter-node bandwidth per GPU, traffic one GPU sends per step, and peak memory, per "
                                "accumulation policy." % (tex(scale_text(sim)), m), "fig:accum-sim"))
        out.append(accum_table(rows, (1.0, "s"), "Case 1 simulated (%s): step time per inter-node bandwidth per GPU." %
                               tex(scale_text(sim)), "tab:accum-sim"))
    else:
        out.append(missing("simulated run of case 1", "run paper/cases.sh"))
    out += measured_accum(meas, figs, sim)
    return "\n\n".join(out)


def measured_accum(meas, figs, sim):
    out = []
    if not meas:
        out.append(missing("measured run of case 1", "run paper/cases.sh"))
        return out
    sim_rows = casedata.accum_rows(sim) if sim else []
    for key, runs in meas.items():
        rows = casedata.accum_rows(runs)
        emu = [r for r in rows if r["fabric"] == "emulated"]
        real = [r for r in rows if r["fabric"] == "real"]
        world = attr(runs, "cluster.nodes") + r" $\times$ " + attr(runs, "cluster.gpus_per_node")
        out.append(r"\paragraph{Measured: %s.} %s, %s microbatches (\texttt{experiments/cases/accum-cpu.ini}), "
                   r"measured by \texttt{gpu\_run} on %s: each policy with %d real MPI ranks as %s, and as rank 0 of "
                   r"%s on the emulated fabric, its links paced to each inter-node bandwidth "
                   r"(Figure~\ref{fig:accum-%s})." % (
                       tex(key), tex(scale_text(runs)), tex(attr(runs, "policy.microbatches")), tex(measured_text(runs)),
                       len(set(r["run"].attrs.get("cluster.nodes", "0") for r in real)) and
                       int(casedata.fnum(runs[0], "cluster.nodes") * casedata.fnum(runs[0], "cluster.gpus_per_node")),
                       world, tex(attr([r["run"] for r in emu] or runs, "fabric.world")), tex(key)))
        facts = []
        pp = per_policy(rows)
        if "fsdp sync-each" in pp and "fsdp no-sync" in pp:
            a, b = pp["fsdp sync-each"], pp["fsdp no-sync"]
            facts.append("A rank sends %s per step with sync-each and %s with no-sync; peak allocated %s and %s." % (
                nbytes(a["comm_bytes"]), nbytes(b["comm_bytes"]), nbytes(a["alloc"]), nbytes(b["alloc"])))
        if emu:
            r = ratio_text(emu, "fsdp sync-each", "fsdp no-sync")
            if r:
                facts.append("On the emulated fabric syncing every microbatch takes " + r + ".")
            facts.append(wins_text(emu).replace("The fastest policy that fits is",
                                                "On the emulated fabric the fastest measured policy is"))
            w_meas = casedata.accum_winners(emu)
            w_sim = casedata.accum_winners(sim_rows)
            if w_meas and w_sim:
                same = w_meas[0][1]["policy"] == w_sim[0][1]["policy"]
                facts.append("At the lowest bandwidth of each, the measured winner (%s) %s the simulated one at "
                             "scale (%s)." % (tt(w_meas[0][1]["policy"]), "is" if same else "is not",
                                               tt(w_sim[0][1]["policy"])))
        if real:
            best = min(real, key=lambda r: r["step_s"])
            facts.append("With real ranks (the machine's own shared-memory transport, no pacing) the fastest is %s "
                         "at %s (median; p10--p90 %s--%s)." % (tt(best["policy"]), secs(best["step_s"]),
                                                                secs(best["p10_s"]), secs(best["p90_s"])))
        out.append(" ".join(facts))
        out.append(figs.include("case_accum_%s" % key, "Case 1 measured on %s: %s. Step time across the emulated "
                                "inter-node bandwidth (median, p10--p90), with real MPI ranks, traffic and peak memory, "
                                "per policy." % (tex(measured_text(runs)), tex(scale_text(runs))), "fig:accum-%s" % key))
        if emu:
            out.append(accum_table(emu, (1e-3, "ms"), "Case 1 measured on %s, emulated fabric: step time (median) per "
                                   "inter-node bandwidth per GPU." % tex(measured_text(runs)), "tab:accum-%s" % key))
    return out


# ---- case 2 ----------------------------------------------------------------

def case_wrap(data, figs):
    sim, meas = load_case(data, "wrap")
    out = []
    for what, runs in [("sim", sim)] + list(meas.items()):
        if not runs:
            continue
        rows = casedata.wrap_rows(runs)
        measured = what != "sim"
        seqs = sorted(set(r["seq"] for r in rows))
        longest = casedata.wrap_longest_fitting(rows)
        gpu = rows[0]["gpu_bytes"]
        if not measured:
            out.append(r"\paragraph{Simulated at scale.} %s (\texttt{experiments/cases/wrap.ini}): a %s-token "
                       r"vocabulary, the GPU's memory set to %s (\texttt{cluster.hbm\_gib} = %s, the %s's compute), "
                       r"optimizer state offloaded (%s), activation checkpointing %s, the %s runtime; each wrapping "
                       r"at sequence lengths from %d to %d (Figure~\ref{fig:wrap-sim})." % (
                           tex(scale_text(runs)), tex(attr(runs, "model.vocab")), nbytes(gpu),
                           tex(attr(runs, "cluster.hbm_gib")), tex(attr(runs, "cluster.gpu")),
                           tt(attr(runs, "policy.offload")), tex(attr(runs, "policy.ac")),
                           tex(attr(runs, "policy.runtime")), seqs[0], seqs[-1]))
        else:
            out.append(r"\paragraph{Measured: %s.} %s (\texttt{experiments/cases/wrap-cpu.ini}), a %s-token "
                       r"vocabulary, measured by \texttt{gpu\_run} on %s at sequence lengths %s "
                       r"(Figure~\ref{fig:wrap-%s})." % (
                           tex(what), tex(scale_text(runs)), tex(attr(runs, "model.vocab")), tex(measured_text(runs)),
                           ", ".join(str(s) for s in seqs), tex(what)))
        facts = []
        fits = ["%s: %s" % (tt(w), ("%d tokens" % longest[w]) if longest[w] else "none")
                for w in casedata.WRAPS if any(r["wrap"] == w for r in rows)]
        if not measured:
            facts.append("The longest sequence that fits %s: %s." % (nbytes(gpu), "; ".join(fits)))
        b = {r["seq"]: r for r in rows if r["wrap"] == "block"}
        io = {r["seq"]: r for r in rows if r["wrap"] == "block+io"}
        common = sorted(set(b) & set(io))
        if common:
            sav_r = [b[s]["reserved"] - io[s]["reserved"] for s in common]
            sav_a = [b[s]["alloc"] - io[s]["alloc"] for s in common]
            facts.append("Giving the embedding and the output projection units of their own (block+io) changes the "
                         "peak allocated memory against block by %s and the peak reserved by %s, over these "
                         "sequence lengths." % (span_bytes([-v for v in sav_a]), span_bytes([-v for v in sav_r])))
            focus = casedata.wrap_focus_seq(rows)
            if focus in b and focus in io:
                cats = {c: b[focus]["by_cat"].get(c, 0) - io[focus]["by_cat"].get(c, 0) for c in b[focus]["by_cat"]}
                big = sorted((c for c in cats if cats[c] > 0), key=lambda c: -cats[c])[:2]
                if big:
                    facts.append("At %d tokens the difference at the allocation peak is in %s." % (
                        focus, " and ".join("%s (%s)" % (tex(c.replace("_", " ")), nbytes(cats[c])) for c in big)))
        wh = [r for r in rows if r["wrap"] == "whole"]
        if wh:
            facts.append("One unit for the whole model peaks at %s to %s reserved." % (
                nbytes(min(r["reserved"] for r in wh)), nbytes(max(r["reserved"] for r in wh))))
        out.append(" ".join(facts))
        name = "case_wrap_sim" if not measured else "case_wrap_%s" % what
        out.append(figs.include(name, "Case 2 %s: %s. Peak memory of each wrapping across sequence lengths, and "
                                "the allocation peak by category." % (
                                    "simulated" if not measured else "measured on " + tex(measured_text(runs)),
                                    tex(scale_text(runs))), "fig:wrap-%s" % what))
        div, un = casedata.unit(max(r["reserved"] for r in rows))
        body = []
        for s in seqs:
            line = ["%d" % s]
            for w in casedata.WRAPS:
                r = [x for x in rows if x["seq"] == s and x["wrap"] == w]
                line.append("--" if not r else "%.2f / %.2f%s" % (r[0]["alloc"] / div, r[0]["reserved"] / div,
                                                                    "" if r[0]["fits"] else r"$^\dagger$"))
            body.append(line)
        out.append(table(["tokens"] + [tex(w) for w in casedata.WRAPS], body,
                         "Case 2 %s (%s): peak allocated / reserved memory in %s per wrapping; $^\\dagger$: does not "
                         "fit %s." % ("simulated" if not measured else "measured on " + tex(measured_text(runs)),
                                      tex(scale_text(runs)), un, nbytes(gpu)), "tab:wrap-%s" % what))
    return case_text(out, 2, sim, meas)


# ---- case 3 ----------------------------------------------------------------

def case_optim(data, figs):
    sim, meas = load_case(data, "optim")
    out = []
    for what, runs in [("sim", sim)] + list(meas.items()):
        if not runs:
            continue
        measured = what != "sim"
        pairs = casedata.optim_pairs(casedata.optim_rows(runs))
        if not measured:
            out.append(r"\paragraph{Simulated at scale.} %s (\texttt{experiments/cases/optim.ini}), %s tokens, "
                       r"activation checkpointing %s, the %s runtime: each optimizer form stepped after backward and "
                       r"in it (Figure~\ref{fig:optim-sim}, Table~\ref{tab:optim-sim})." % (
                           tex(scale_text(runs)), tex(attr(runs, "model.seq")), tex(attr(runs, "policy.ac")),
                           tex(attr(runs, "policy.runtime"))))
        else:
            out.append(r"\paragraph{Measured: %s.} %s (\texttt{experiments/cases/optim-cpu.ini}) measured by "
                       r"\texttt{gpu\_run} on %s; there the step in backward runs on the reduce-scatter stream's "
                       r"thread beside the compute thread (Figure~\ref{fig:optim-%s}, Table~\ref{tab:optim-%s}). "
                       r"Step times are medians over %s measured steps; op times are those of the one step closest to "
                       r"the median, so they carry that step's noise." % (
                           tex(what), tex(scale_text(runs)), tex(measured_text(runs)), tex(what), tex(what),
                           tex(attr(runs, "run.steps"))))
        facts = []
        for o, a, b in pairs:
            facts.append("%s: in backward the backward and recompute kernels take %s (%s against %s after backward), "
                         "the optimizer's ops %s instead of %s, the step %s (%s%s); peak allocated %s, peak reserved %s "
                         "(%s)." % (
                             tt(o), pct((b["backward_s"] - a["backward_s"]) / a["backward_s"]) if a["backward_s"] else "--",
                             secs(b["backward_s"]), secs(a["backward_s"]), secs(b["optim_s"]), secs(a["optim_s"]),
                             secs(b["step_s"]), pct((b["step_s"] - a["step_s"]) / a["step_s"]), noise_note(a, b),
                             "unchanged" if a["alloc"] == b["alloc"] else "%s to %s" % (nbytes(a["alloc"]), nbytes(b["alloc"])),
                             "unchanged" if a["reserved"] == b["reserved"] else "%s to %s" % (
                                 nbytes(a["reserved"]), nbytes(b["reserved"])),
                             pct((b["reserved"] - a["reserved"]) / a["reserved"]) if a["reserved"] else "--"))
        if pairs:
            slow = [(o, (b["backward_s"] - a["backward_s"]) / a["backward_s"]) for o, a, b in pairs if a["backward_s"]]
            if slow:
                least = min(slow, key=lambda x: x[1])
                most = max(slow, key=lambda x: x[1])
                facts.append("Over the forms, the change in the backward kernels' time ranges from %s with %s to %s "
                             "with %s." % (pct(least[1]), tt(least[0]), pct(most[1]), tt(most[0])))
            sg = [r["by_cat"].get("sharded_grads", 0) for _, a, b in pairs for r in (a, b)]
            if not any(sg):
                facts.append("The allocation peak holds no sharded gradients in any of these runs (it is reached "
                             "before backward has reduced them), so stepping in backward cannot lower it; what it "
                             "saves shows in the reserved memory.")
        out.append(" ".join(facts))
        out.append(figs.include("case_optim_%s" % what, "Case 3 %s: %s. Per optimizer form: step time after backward "
                                "and in it, what moving the step into backward changes, and peak memory." % (
                                    "simulated" if not measured else "measured on " + tex(measured_text(runs)),
                                    tex(scale_text(runs))), "fig:optim-%s" % what))
        rows = []
        div, un = casedata.unit(max(r["reserved"] for _, a, b in pairs for r in (a, b))) if pairs else (1, "B")
        for o, a, b in pairs:
            for r, where in ((a, "after"), (b, "in backward")):
                rows.append([tex(o), where, secs(r["step_s"]), secs(r["backward_s"]), secs(r["optim_s"]),
                             "%.2f" % (r["alloc"] / div), "%.2f" % (r["reserved"] / div)])
        if rows:
            out.append(table(["form", "step", "step time", "backward", "optimizer", "alloc (%s)" % un,
                              "reserved (%s)" % un], rows,
                             "Case 3 %s (%s). Backward: the backward and recompute ops' summed time on the compute "
                             "stream; optimizer: the optimizer ops' summed time." % (
                                 "simulated" if not measured else "measured on " + tex(measured_text(runs)),
                                 tex(scale_text(runs))), "tab:optim-%s" % what, align="llrrrrr"))
    return case_text(out, 3, sim, meas)


# ---- case 4 ----------------------------------------------------------------

def case_concat(data, figs):
    sim, meas = load_case(data, "concat")
    out = []
    for what, runs in [("sim", sim)] + list(meas.items()):
        if not runs:
            continue
        measured = what != "sim"
        pairs = casedata.concat_pairs(casedata.concat_rows(runs))
        if not measured:
            out.append(r"\paragraph{Simulated at scale.} %s (\texttt{experiments/cases/concat.ini}), flat parameters, "
                       r"no-sync accumulation, %s tokens, the %s runtime: gradients concatenated on every microbatch "
                       r"or on the last only (Figure~\ref{fig:concat-sim}, Table~\ref{tab:concat-sim})." % (
                           tex(scale_text(runs)), tex(attr(runs, "model.seq")), tex(attr(runs, "policy.runtime"))))
        else:
            out.append(r"\paragraph{Measured: %s.} %s (\texttt{experiments/cases/concat-cpu.ini}) measured by "
                       r"\texttt{gpu\_run} on %s (Figure~\ref{fig:concat-%s}, Table~\ref{tab:concat-%s}). Step "
                       r"times are medians over %s measured steps; op times are those of the one step closest to the "
                       r"median." % (tex(what), tex(scale_text(runs)), tex(measured_text(runs)), tex(what), tex(what),
                                     tex(attr(runs, "run.steps"))))
        facts = []
        multi = [(m, a, b) for m, a, b in pairs if m > 1]
        if multi:
            m, a, b = multi[-1]
            facts.append("With %d microbatches, concatenating on the last one only copies %s per microbatch instead "
                         "of %s (%s), spends %s instead of %s in concatenation per step, and the step takes %s "
                         "instead of %s (%s%s)." % (
                             m, nbytes(b["concat_bytes_per_micro"]), nbytes(a["concat_bytes_per_micro"]),
                             pct(b["concat_bytes_per_micro"] / a["concat_bytes_per_micro"] - 1)
                             if a["concat_bytes_per_micro"] else "--",
                             secs(b["concat_s"]), secs(a["concat_s"]), secs(b["step_s"]), secs(a["step_s"]),
                             pct(b["step_s"] / a["step_s"] - 1), noise_note(a, b)))
            dstep, dcat = a["step_s"] - b["step_s"], a["concat_s"] - b["concat_s"]
            if dstep:
                facts.append("The concatenation ops' time accounts for %s of the %s step-time difference%s." % (
                    secs(abs(dcat)) if dcat >= 0 else "$-$" + secs(-dcat), ("$-$" if dstep < 0 else "") + secs(abs(dstep)),
                    "; the rest is not concatenation" if abs(dcat) < 0.5 * abs(dstep) else ""))
            saved = ["%d: %s" % (m, nbytes(a["concat_bytes"] - b["concat_bytes"])) for m, a, b in pairs]
            facts.append("Copy traffic saved per step, by microbatch count, %s." % "; ".join(saved))
        one = [(m, a, b) for m, a, b in pairs if m == 1]
        if one:
            m, a, b = one[0]
            facts.append("With one microbatch the two are the same step (%s and %s)." % (secs(a["step_s"]),
                                                                                       secs(b["step_s"])))
        out.append(" ".join(facts))
        out.append(figs.include("case_concat_%s" % what, "Case 4 %s: %s. Copy traffic into flat gradients per "
                                "microbatch, step time and time in concatenation, concatenating on every microbatch or "
                                "the last only." % (
                                    "simulated" if not measured else "measured on " + tex(measured_text(runs)),
                                    tex(scale_text(runs))), "fig:concat-%s" % what))
        rows = []
        for m, a, b in pairs:
            for r, where in ((a, "every"), (b, "last only")):
                rows.append(["%d" % m, where, nbytes(r["concat_bytes_per_micro"]), "%d" % r["concat_ops"],
                             secs(r["concat_s"]), secs(r["step_s"])])
        if rows:
            out.append(table(["M", "concat", "copied per microbatch", "concat ops", "concat time", "step time"], rows,
                             "Case 4 %s (%s), per step." % (
                                 "simulated" if not measured else "measured on " + tex(measured_text(runs)),
                                 tex(scale_text(runs))), "tab:concat-%s" % what, align="rlrrrr"))
    return case_text(out, 4, sim, meas)


# ---- the reference experiment: bandwidth, front, policies ------------------

def bandwidth(data, figs):
    path = os.path.join(data, "cases", "bandwidth.h5")
    if not os.path.isfile(path):
        return missing("bandwidth sweep", "run paper/cases.sh")
    runs = load(path)
    rows = casedata.bandwidth_rows(runs)
    x = casedata.crossover(rows)
    bws = sorted(set(r["inter_gbps"] for r in rows))
    text = [r"%s (\texttt{experiments/llama3.ini}), simulated with fsdp, hsdp and zero2 at %d inter-node bandwidths "
            r"per GPU from %s to %s (Figure~\ref{fig:bandwidth})." % (tex(scale_text(runs)), len(bws), gbps(bws[0]),
                                                                       gbps(bws[-1]))]
    if x:
        text.append("hsdp, whose only traffic across nodes is the gradient all-reduce between replicas, is faster "
                    "than fsdp up to %s and slower from %s on: hsdp overtakes fsdp below that bandwidth." % (
                        gbps(x[0]), gbps(x[1])))
    else:
        t = {}
        for r in rows:
            t.setdefault(r["sharding"], {})[r["inter_gbps"]] = r["step_s"]
        if "fsdp" in t and "hsdp" in t:
            faster = all(t["hsdp"].get(bw, 1e30) < t["fsdp"].get(bw, 0) for bw in bws)
            text.append("The order of hsdp and fsdp does not change over this range: %s is faster throughout." %
                        ("hsdp" if faster else "fsdp"))
    lo = [r for r in rows if r["inter_gbps"] == bws[0]]
    hi = [r for r in rows if r["inter_gbps"] == bws[-1]]
    for name, sel in (("lowest", lo), ("highest", hi)):
        if sel:
            best = min(sel, key=lambda r: r["step_s"])
            text.append("At the %s bandwidth the fastest is %s (%s)." % (name, tt(best["sharding"]), secs(best["step_s"])))
    text.append(figs.include("bandwidth_sharding", "%s, simulated: step time of each sharding across the inter-node "
                             "bandwidth per GPU; shaded: the interval in which hsdp stops being faster than fsdp." %
                             tex(scale_text(runs)), "fig:bandwidth", width=r"0.75\textwidth"))
    return " ".join(text[:-1]) + "\n\n" + text[-1]


def pareto(data, figs):
    path = casedata.find_policy_list([os.path.join(data, "cases")])
    if not path:
        return missing("policy listing", "run paper/cases.sh")
    pols, what = casedata.load_policy_list(path)
    front = casedata.pareto(pols)
    nfit = sum(1 for p in pols if p.get("fits", True))
    text = [r"\texttt{./sim -{}-policy all} on %s (\texttt{experiments/llama3.ini}) simulates %d valid policies, %d of "
            r"which fit; %d of those form the front on which no policy is both faster and uses less peak reserved "
            r"memory (Figure~\ref{fig:pareto}, Table~\ref{tab:pareto})." % (tex(what), len(pols), nfit, len(front))]
    if front:
        text.append("The fastest fitting policy takes %s at %s reserved; the one with the least memory takes %s at %s." % (
            secs(front[0]["step_time_s"]), nbytes(front[0]["peak_reserved_bytes"]), secs(front[-1]["step_time_s"]),
            nbytes(front[-1]["peak_reserved_bytes"])))
    out = [" ".join(text), figs.include("pareto_time_memory", "%s, simulated: step time against peak reserved memory "
                                        "of every valid policy; the front numbered fastest first, as in "
                                        "Table~\\ref{tab:pareto}." % tex(what), "fig:pareto")]
    rows = [["%d" % (i + 1), secs(p["step_time_s"]), nbytes(p["peak_reserved_bytes"]),
             r"\parbox[t]{0.62\textwidth}{\raggedright\footnotesize %s}" % tex(p["policy"])] for i, p in enumerate(front)]
    out.append(table(["", "step", "reserved", "policy"], rows, "The time-memory front of %s (simulated)." % tex(what),
                     "tab:pareto", align="rrrl"))
    return "\n\n".join(out)


def policies(data, figs):
    files = [p for p in h5files(data)]
    runs = [r for p in files for r in load(p) if not casedata.is_measured(r) and not r.attrs.get("compares")]
    if not runs:
        return missing("simulated policy comparison", "run paper/sim\\_data.sh")
    runs = casedata.latest(runs)
    name = "policies" if len(set(r.stem for r in runs)) == 1 else "%s_policies" % runs[0].stem
    rows = []
    labels = casedata.policy_labels(runs)
    for r, l in zip(runs, labels):
        s = casedata.summary_row(r)
        rows.append([tex(l), secs(s["step_s"]), secs(s["compute_s"]), secs(s["exposed_s"]), nbytes(s["alloc"]),
                     nbytes(s["reserved"]), "yes" if s["fits"] else "no"])
    return "\n\n".join([
        r"The reference experiment, %s (\texttt{experiments/llama3.ini}, \texttt{paper/sim\_data.sh}), under the "
        r"main policies, simulated (Figure~\ref{fig:policies}, Table~\ref{tab:policies})." % tex(scale_text(runs)),
        figs.include(name, "%s, simulated: step time split into compute, exposed communication and the rest, and peak "
                     "memory, per policy (labelled by what differs from the others)." % tex(scale_text(runs)),
                     "fig:policies"),
        table(["policy", "step", "compute", "exposed comm.", "allocated", "reserved", "fits"], rows,
              "The reference experiment's policies (%s, simulated)." % tex(scale_text(runs)), "tab:policies",
              align="lrrrrrl")])


# ---- validation ------------------------------------------------------------

# What a measured op's time holds that its prediction does not price, by
# kind: statements about how gpu_run measures (gpu/run/README.md) and how
# the calibration measures (gpu/run/calibrate.c), offered where the data
# shows the prediction short or long.
KIND_MEASURED = {
    "allgather": "collective", "reduce_scatter": "collective", "allreduce": "collective",
    "forward": "kernel", "backward": "kernel", "recompute": "kernel", "loss_backward": "kernel",
    "optim": "pass", "accum": "pass", "concat": "pass", "copy_in": "pass", "copy_out": "pass",
    "cpu_optim": "host", "d2h": "copy", "h2d": "copy", "copy": "pass",
}
WHY = {
    ("collective", "short"): "a measured collective runs from the moment its stream reaches it to its completion, "
    "so it holds the time spent waiting for the other ranks to enter it; the prediction prices every rank as "
    "reaching it together, as the calibration measured it (every rank entering at once)%s",
    ("collective", "long"): "the calibration's collectives were measured with every rank entering at once and "
    "beside the largest kernel; in the runs they overlap less, or with smaller work, than priced",
    ("kernel", "short"): "the compute thread shares the machine's cores with the other ranks' threads and the "
    "communication threads' polling; the calibration priced each kernel alone and beside a collective, not beside "
    "several ranks' work at once",
    ("kernel", "long"): "the kernels ran faster in the runs than in the calibration's microbenchmarks (warm caches, "
    "or less contention than measured beside a collective)",
    ("pass", "short"): "memory-bound passes are priced from the calibration's memory passes by size; in a step they "
    "run beside other threads' traffic",
    ("pass", "long"): "memory-bound passes ran faster in the step than the calibration's passes of that size",
    ("host", "short"): "the host optimizer shares the cores with the ranks' stream threads",
    ("host", "long"): "the host optimizer ran faster than its calibrated rate",
    ("copy", "short"): "host-device copies are memory copies on the CPU backend, sharing memory bandwidth",
    ("copy", "long"): "host-device copies ran faster than priced",
}


# An op kind is named where the model is wrong when its median error over
# the runs exceeds WRONG_ERR and its summed difference WRONG_SHARE of all
# measured op time.
WRONG_ERR = 0.25
WRONG_SHARE = 0.01


def _why(kind, sign, hw):
    cls = KIND_MEASURED.get(kind)
    if not cls:
        return ""
    text = WHY.get((cls, sign), "")
    if "%s" in text:
        text %= ("; on %s the ranks share the cores, so they drift apart" % tex(hw) if hw else "")
    return text


def newest_per_machine(files):
    """The newest results file of each machine and backend: data/runs names
    them <hardware>-<backend>-<date>.h5 (or .h5.xz), so the last in name order."""
    by = {}
    for p in sorted(files, key=casedata.results_stem):
        by[casedata.machine_of(p)] = p
    return sorted(by.values())


def group_key(r):
    """Runs that differ only in policy share it (as ./sim --compare ranks them)."""
    return tuple(sorted((k, v) for k, v in r.attrs.items()
                        if (k.startswith("model.") or (k.startswith("cluster.") and k != "cluster.calibration") or
                            k in ("run.batch", "run.device")))) + (r.attrs.get("hardware", ""),)


def policy_tau(allpairs):
    """Kendall's tau between the measured and the predicted order of the (path, measured, predicted) runs that
    differ only in policy, within a file and a group (as ./sim --compare counts it: a policy measured again is
    not a pair); (tau, pairs), tau None without a pair."""
    groups = {}
    for path, m, p in allpairs:
        policy = tuple(sorted((k, v) for k, v in m.attrs.items() if k.startswith("policy.")))
        groups.setdefault((path, group_key(m)), []).append((float(m.summary["step_time_s"]),
                                                            float(p.summary["step_time_s"]), policy))
    npairs = conc = disc = 0
    for g in groups.values():
        for i in range(len(g)):
            for j in range(i + 1, len(g)):
                if g[i][2] == g[j][2]:
                    continue
                sgn = (g[i][0] - g[j][0]) * (g[i][1] - g[j][1])
                npairs += 1
                conc += sgn > 0
                disc += sgn < 0
    return ((conc - disc) / npairs if npairs else None), npairs


def validation(data, figs):
    d = os.path.join(data, "runs")
    files = h5files(d)
    out = []
    if not files:
        return (r"\emph{data/runs/ holds no measured runs: \texttt{make validate} (calibrate, run every policy family "
                r"with \texttt{gpu\_run} on the CPU backend, \texttt{./sim -{}-compare}) produces them. This section "
                r"has no numbers until it has run.}"), {}
    used = newest_per_machine(files)
    older = [f for f in files if f not in used]
    allpairs = []
    for path in used:
        allpairs += [(path, m, p) for m, p in casedata.compared_pairs(load(path))]
    if not allpairs:
        return (r"\emph{data/runs/ holds %d file(s) (%s) but no measured run with a prediction: run \texttt{./sim "
                r"-{}-compare} on them (\texttt{make validate} does).}" % (len(files), ", ".join(tt(os.path.basename(f))
                                                                                    for f in files))), {}
    meas = [m for _, m, _ in allpairs]
    errs = [(float(p.summary["step_time_s"]) - float(m.summary["step_time_s"])) / float(m.summary["step_time_s"])
            for _, m, p in allpairs]
    inside = sum(1 for _, m, p in allpairs if float(m.summary.get("step_time_p10_s", 0)) <= float(
        p.summary["step_time_s"]) <= float(m.summary.get("step_time_p90_s", 0)))
    mem_eq = sum(1 for _, m, p in allpairs if int(m.summary["peak_alloc_bytes"]) == int(p.summary["peak_alloc_bytes"])
                 and int(m.summary["peak_reserved_bytes"]) == int(p.summary["peak_reserved_bytes"]))
    cals = sorted(set(os.path.basename(p.attrs.get("cluster.calibration", "")) or "the catalog" for _, _, p in allpairs))
    spread = [(float(m.summary.get("step_time_p90_s", 0)) - float(m.summary.get("step_time_p10_s", 0))) /
              float(m.summary["step_time_s"]) for m in meas]
    tau, npairs = policy_tau(allpairs)
    abserr = sorted(abs(e) for e in errs)
    facts = {"n": len(allpairs), "median_abs_err": statistics.median(abserr), "worst_abs_err": abserr[-1],
             "inside": inside, "tau": tau, "mem_eq": mem_eq, "hardware": measured_text(meas)}
    out.append(r"The measured runs are %d runs of %s in %s, each with the prediction \texttt{./sim -{}-compare} made of "
               r"it, priced by %s. A step's measured time is the median of its measured steps (warm-up excluded); its "
               r"spread from the 10th to the 90th percentile is %s of the median for the median run. " % (
                   len(allpairs), ", ".join(sorted(set(tex(casedata.cluster_text(m).split(" on ")[0]) for m in meas))),
                   ", ".join(tt("data/runs/" + os.path.basename(p)) for p in used),
                   ", ".join(tt(c) if c != "the catalog" else "the catalog" for c in cals),
                   upct(statistics.median(spread), 0)) +
               r"Over these runs the median absolute step-time error is %s and the worst %s; %d of %d predictions fall "
               r"inside their run's p10--p90 spread. %s Predicted peak memory equals the measured, allocated and "
               r"reserved, byte for byte, in %d of %d runs (one allocator serves both binaries)." % (
                   upct(facts["median_abs_err"]), upct(facts["worst_abs_err"]), inside, len(allpairs),
                   (r"Ranking the runs that differ only in policy by step time, measured and predicted orders agree "
                    r"with Kendall's $\tau = %.2f$ over %d pairs." % (tau, npairs)) if tau is not None else
                   "No two runs differ only in policy, so no ranking is compared.", mem_eq, len(allpairs)))
    if older:
        out.append(r"Older files in data/runs/, not used here (a newer one of the same machine is): %s." %
                   ", ".join(tt(os.path.basename(f)) for f in older))
    # figures
    for path in used:
        stem = casedata.results_stem(path)
        out.append(figs.include("%s_predicted_vs_measured_scatter" % stem, "Each run of %s: its measured step time "
                                "(median, p10--p90) against \\texttt{./sim}'s prediction, by model and world size; on "
                                "the diagonal the prediction is exact, in the band within 25\\,\\%%. Per policy: "
                                "Table~\\ref{tab:val-policy} (and \\texttt{paper/figures/%s\\_predicted\\_vs\\_measured})." % (
                                    tt(os.path.basename(path)), tex(stem)), "fig:pvm-%s" % stem, width=r"0.7\textwidth"))
    # per-policy table
    rows, last_group = [], None
    by_file = {}
    for path, m, p in allpairs:
        by_file.setdefault((path, casedata.cluster_text(m)), []).append((m, p))
    for (path, ct), ps in sorted(by_file.items()):
        labels = casedata.policy_labels([m for m, _ in ps])
        rows.append(r"\midrule\multicolumn{6}{l}{\textit{%s, %s}} \\" % (tex(ct), tex(os.path.basename(path))))
        for (m, p), l in zip(ps, labels):
            ms, ps_ = float(m.summary["step_time_s"]), float(p.summary["step_time_s"])
            lo, hi = float(m.summary.get("step_time_p10_s", ms)), float(m.summary.get("step_time_p90_s", ms))
            rows.append([tex(l), secs(ms), "%s--%s" % (secs(lo), secs(hi)), secs(ps_), pct((ps_ - ms) / ms),
                         "yes" if lo <= ps_ <= hi else ""])
    out.append(table(["policy", "measured", "p10--p90", "predicted", "error", "in spread"], rows,
                     "Predicted against measured step time per run (%s)." % tex(facts["hardware"]), "tab:val-policy",
                     align="lrrrrl", long=True))
    # per op kind
    kinds = {}
    for _, m, p in allpairs:
        km, kp = casedata.op_kind_seconds(m), casedata.op_kind_seconds(p)
        for k in set(km) | set(kp):
            e = kinds.setdefault(k, {"runs": 0, "meas": 0.0, "pred": 0.0, "errs": []})
            e["runs"] += 1
            e["meas"] += km.get(k, 0.0)
            e["pred"] += kp.get(k, 0.0)
            if km.get(k, 0.0) > 0:
                e["errs"].append((kp.get(k, 0.0) - km[k]) / km[k])
    order = sorted((k for k in kinds if kinds[k]["meas"] + kinds[k]["pred"] > 0),
                   key=lambda k: -abs(kinds[k]["pred"] - kinds[k]["meas"]))
    rows = []
    for k in order:
        e = kinds[k]
        rows.append([tex(k), "%d" % e["runs"], secs(e["meas"]), secs(e["pred"]),
                     pct((e["pred"] - e["meas"]) / e["meas"]) if e["meas"] else "--",
                     pct(statistics.median(e["errs"])) if e["errs"] else "--"])
    out.append(table(["op kind", "runs", "measured", "predicted", "error of sums", "median error"], rows,
                     "Op time by kind, summed over the compared runs (each op's duration on its stream), largest "
                     "absolute difference first; median error: over the runs, of each run's summed time of the kind.",
                     "tab:val-kind", align="lrrrrr"))
    # where it is wrong, and what the measurement holds
    wrong = [k for k in order if kinds[k]["errs"] and abs(statistics.median(kinds[k]["errs"])) > WRONG_ERR
             and abs(kinds[k]["pred"] - kinds[k]["meas"]) > WRONG_SHARE * sum(kinds[j]["meas"] for j in kinds)]
    hw = ", ".join(sorted(set(m.attrs.get("hardware", "") for m in meas)))
    if wrong:
        items, causes = [], {}
        for k in wrong[:6]:
            e = kinds[k]
            sign = "short" if e["pred"] < e["meas"] else "long"
            items.append(r"\item \textbf{%s}: predicted %s against %s measured over %d runs (median error %s): the "
                         r"prediction is too %s." % (tex(k), secs(e["pred"]), secs(e["meas"]), e["runs"],
                                                     pct(statistics.median(e["errs"])), sign))
            why = _why(k, sign, hw)
            if why:
                causes.setdefault(why, []).append(k)
        if causes:
            items.append(r"\end{itemize}" + "\n" + "What the measurement holds that the prediction does not price:"
                         + "\n" + r"\begin{itemize}")
            for why, ks in causes.items():
                items.append(r"\item %s: %s." % (", ".join(tex(k) for k in ks), why))
        out.append(r"\paragraph{Where the model is wrong.} The op kinds whose median error exceeds %s and whose "
                   r"summed difference is at least %s of the measured op time, largest first:" % (
                       upct(WRONG_ERR, 0), upct(WRONG_SHARE, 0)) + "\n" +
                   r"\begin{itemize}" + "\n" + "\n".join(items) + "\n" + r"\end{itemize}")
    else:
        out.append(r"\paragraph{Where the model is wrong.} No op kind has a median error above %s with a summed "
                   r"difference of at least %s of the measured op time." % (upct(WRONG_ERR, 0), upct(WRONG_SHARE, 0)))
    label_of = {}
    for (path, ct), ps in by_file.items():
        for (m, _), l in zip(ps, casedata.policy_labels([m for m, _ in ps])):
            label_of[(path, m.index)] = l
    worst = sorted(allpairs, key=lambda x: -abs((float(x[2].summary["step_time_s"]) - float(x[1].summary[
        "step_time_s"])) / float(x[1].summary["step_time_s"])))
    best = worst[-1]
    for tag, (path, m, p) in (("worst", worst[0]), ("best", best)):
        stem = casedata.results_stem(path)
        e = (float(p.summary["step_time_s"]) - float(m.summary["step_time_s"])) / float(m.summary["step_time_s"])
        out.append(figs.include("%s_run%d_vs_sim_timeline" % (stem, m.index), "The %s-predicted run: %s, %s "
                                "(run %d of %s), measured (top) and predicted (bottom) on one time axis; step-time "
                                "error %s." % (tag, tex(casedata.cluster_text(m)), tex(label_of[(path, m.index)]), m.index,
                                               tt(os.path.basename(path)), pct(e)), "fig:val-%s" % tag))
    return "\n\n".join(out), facts


# ---- against PyTorch FSDP2 -------------------------------------------------

def _url(u):
    """An address as a short link: a file of a GitHub repository at a commit as 'REPO PATH at SHA', else the
    address; one with characters a link would need escaped, as text."""
    if any(c in u for c in "{}\\%#^~ "):
        return tt(u)
    parts = u.split("/")
    if u.startswith("https://github.com/") and len(parts) > 7 and parts[5] == "blob":
        return r"\href{%s}{%s \texttt{%s} at %s}" % (u, tex(parts[4]), tex("/".join(parts[7:])), tex(parts[6][:7]))
    return r"\url{%s}" % u


def _model_text(r):
    """'llama3-8b', or a custom model by its shape: '40 x 5120' (layers x hidden)."""
    name = r.attrs.get("model.name", "?")
    if name != "custom":
        return name
    return "%s x %s" % (r.attrs.get("model.layers", "?"), r.attrs.get("model.hidden", "?"))


def _policy_text(r):
    """What a PyTorch run's policy is, in the words of its keys: 'eager, ac per-op, fused' (a sharding
    other than fsdp first)."""
    a = r.attrs
    parts = [] if a.get("policy.sharding") == "fsdp" else [a.get("policy.sharding", "?")]
    parts += ["compiled" if a.get("policy.runtime") == "pytorch-compile" else "eager", "ac " + a.get("policy.ac", "none"),
              a.get("policy.optim", "foreach")]
    if a.get("policy.microbatches", "1") != "1":
        parts.append("%s microbatches" % a["policy.microbatches"])
    return ", ".join(parts)


def pytorch_validation(data, figs):
    """The runs of real PyTorch FSDP2 (data/pytorch/, experiments/pytorch/ on a lent GPU) and the figures
    others measured and published (data/published/), each beside ./sim --runtime pytorch's prediction."""
    dirs = [("pytorch", "measured with \\texttt{experiments/pytorch/} on a GPU"),
            ("published", "published by others (\\texttt{experiments/published/})")]
    out, facts, allpairs = [], {}, []
    for sub, _ in dirs:
        for path in h5files(os.path.join(data, sub)):
            allpairs += [(path, m, p) for m, p in casedata.compared_pairs(load(path))]
    have = {sub: [f for f in h5files(os.path.join(data, sub))] for sub, _ in dirs}
    if not allpairs:
        what = ", ".join(tt("data/%s/" % sub) + (" holds %d file(s) without predictions" % len(have[sub]) if have[sub]
                                                 else " holds no file") for sub, _ in dirs)
        return (r"\emph{No run of PyTorch FSDP2 with its prediction is in data/: %s. \texttt{experiments/pytorch/} "
                r"measures such runs on a GPU, \texttt{experiments/published/torchtitan.py} writes torchtitan's "
                r"published ones, and \texttt{./sim -{}-compare} predicts them.}" % what), facts
    errs = [(float(p.summary["step_time_s"]) - float(m.summary["step_time_s"])) / float(m.summary["step_time_s"])
            for _, m, p in allpairs]
    abserr = sorted(abs(e) for e in errs)
    res = [(int(p.summary["peak_reserved_bytes"]) - int(m.summary["peak_reserved_bytes"])) /
           int(m.summary["peak_reserved_bytes"]) for _, m, p in allpairs if int(m.summary.get("peak_reserved_bytes", 0))]
    tau, npairs = policy_tau(allpairs)
    sources = sorted(set(m.attrs.get("source", "?") for _, m, _ in allpairs))
    cals = sorted(set(os.path.basename(p.attrs.get("cluster.calibration", "")) or "the catalog" for _, _, p in allpairs))
    facts = {"n": len(allpairs), "median_abs_err": statistics.median(abserr), "worst_abs_err": abserr[-1],
             "fast": sum(1 for e in errs if e < 0), "tau": tau, "npairs": npairs, "sources": sources,
             "hardware": sorted(set(m.attrs.get("hardware", "?") for _, m, _ in allpairs))}
    refs = sorted(set(m.attrs.get("reference", "") for _, m, _ in allpairs if m.attrs.get("reference")))
    out.append(r"%d step%s of FSDP2 with a known configuration are in data/, %s, on %s; each was predicted "
               r"by \texttt{./sim -{}-compare}, priced by %s, with nothing fitted to these steps." % (
                   len(allpairs), "" if len(allpairs) == 1 else "s",
                   "; ".join("%d %s" % (sum(1 for _, m, _ in allpairs if m.attrs.get("source") == src),
                                        dict(dirs).get(src, tex(src))) for src in sources),
                   tex(", ".join(facts["hardware"])),
                   ", ".join(tt(c) if c != "the catalog" else r"the catalog's constants (\texttt{core/catalog.ini})"
                             for c in cals)))
    out.append(r"The median absolute step-time error is %s and the worst %s; %d of the %d steps are predicted "
               r"faster than %s. %s%s" % (
                   upct(facts["median_abs_err"]), upct(facts["worst_abs_err"]), facts["fast"], len(allpairs),
                   "measured" if "published" not in sources else "measured or published",
                   (r"Ranking the steps that differ only in policy, the predicted and the measured orders agree with "
                    r"Kendall's $\tau = %.2f$ over %d pairs. " % (tau, npairs)) if tau is not None else
                   "No two steps differ only in policy. ",
                   (r"Where the peak reserved memory was reported (%d steps), the prediction is off by %s at the "
                    r"median (from %s to %s)." % (len(res), pct(statistics.median(res)), pct(min(res)), pct(max(res))))
                   if res else "No step reports its peak reserved memory."))
    rows = []
    for path, m, p in allpairs:
        ms, ps_ = float(m.summary["step_time_s"]), float(p.summary["step_time_s"])
        mr, pr = int(m.summary.get("peak_reserved_bytes", 0)), int(p.summary["peak_reserved_bytes"])
        gpus = int(casedata.fnum(m, "cluster.nodes") * casedata.fnum(m, "cluster.gpus_per_node"))
        rows.append([tex(_model_text(m)), "%d %s" % (gpus, tex(m.attrs.get("cluster.gpu", "?"))),
                     tex(_policy_text(m)), secs(ms), secs(ps_), pct((ps_ - ms) / ms), nbytes(mr) if mr else "--",
                     nbytes(pr), pct((pr - mr) / mr) if mr else "--"])
    by_url = {}
    for r in refs:  # 'ADDRESS (table, row)': the tables of each address together
        u, _, where = r.partition(" ")
        by_url.setdefault(u, []).append(where.strip().strip("()"))
    notes = (r"Sources of the published figures: %s." % "; ".join(
        "%s (%s)" % (_url(u), tex("; ".join(w for w in ws if w))) if any(ws) else _url(u)
        for u, ws in sorted(by_url.items()))) if refs else None
    out.append(table(["model", "GPUs", "policy", "step", "pred.", "error", "reserved", "pred.", "error"],
                     rows, "FSDP2 steps against \\texttt{./sim}'s prediction (pred.): step time and peak reserved "
                     "memory (-{}- where none was reported). Policy: eager or compiled (torch.compile), the activation "
                     "checkpointing, the optimizer's kernels; every step is FSDP%s." % (
                         "" if all(m.attrs.get("policy.sharding") == "fsdp" for _, m, _ in allpairs) else
                         " unless named"), "tab:pytorch", align="lllrrrrrr", long=True, tight=True))
    if notes:
        out.append(notes)
    for sub, _ in dirs:
        for path in have[sub]:
            stem = casedata.results_stem(path)
            if any(pp == path for pp, _, _ in allpairs):
                out.append(figs.include("%s_predicted_vs_measured_scatter" % stem,
                                        "Each FSDP2 step of %s against \\texttt{./sim}'s prediction; on the diagonal "
                                        "the prediction is exact, in the band within 25\\,\\%%." % tt(
                                            "data/%s/%s" % (sub, os.path.basename(path))),
                                        "fig:pytorch-%s" % tex(stem).replace("\\", ""), width=r"0.7\textwidth"))
    work = pytorch_work(sorted(set(path for path, _, _ in allpairs)))
    if work:
        out.append(work)
    else:
        out.append(r"No step here has kernel times: a published step is one figure (tokens per second, and for some "
                   r"the peak reserved memory), so it says how far the whole step is off, not which kinds of work carry "
                   r"the error. Runs of \texttt{experiments/pytorch/} on a GPU, with the profiler's kernel times, "
                   r"would.")
    return "\n\n".join(out), facts


def compare_json(path):
    """What ./sim --compare --json said of a results file, kept beside it (FILE.h5.compare.json or
    FILE.compare.json, or either xz-compressed, .compare.json.xz), or None."""
    path = path[:-3] if path.endswith(".xz") else path
    for p in (path + ".compare.json", os.path.splitext(path)[0] + ".compare.json"):
        for q, opener in ((p, open), (p + ".xz", lzma.open)):
            if os.path.isfile(q):
                try:
                    with opener(q, "rt") as f:
                        return json.load(f)
                except (ValueError, lzma.LZMAError):
                    return None
    return None


def pytorch_work(paths):
    """The measured kernels of PyTorch steps by the kind of work they do, against the predicted ops of that
    kind, summed over the runs whose kernels were timed, from the files' --compare JSON (./sim --compare sorts
    a PyTorch run's profiler kernels into compute and each collective); '' when no run has kernel times."""
    sums, runs = {}, 0
    for path in paths:
        cmp = compare_json(path)
        for r in (cmp or {}).get("runs", []):
            if r.get("op_times_measured") or not any(w.get("measured_s") is not None
                                                      for w in r.get("by_kind", {}).values()):
                continue
            runs += 1
            for name, w in r["by_kind"].items():
                e = sums.setdefault(name, {"kernels": 0, "meas": 0.0, "pred": 0.0, "errs": []})
                e["kernels"] += int(w.get("kernels", 0))
                e["meas"] += w.get("measured_s") or 0.0
                e["pred"] += w.get("predicted_s") or 0.0
                if w.get("err") is not None:
                    e["errs"].append(w["err"])
    if not runs:
        return ""
    rows = [[tex(k), "%d" % e["kernels"], secs(e["meas"]), secs(e["pred"]),
             pct((e["pred"] - e["meas"]) / e["meas"]) if e["meas"] else "--",
             pct(statistics.median(e["errs"])) if e["errs"] else "--"]
            for k, e in sorted(sums.items(), key=lambda kv: -abs(kv[1]["pred"] - kv[1]["meas"]))]
    return table(["work", "kernels", "measured", "predicted", "error of sums", "median error"], rows,
                 "The device time of the PyTorch steps' kernels (the profiler's, %d step%s) by the kind of work, "
                 "against the predicted ops of that kind, largest absolute difference first." % (
                     runs, "" if runs == 1 else "s"), "tab:pytorch-work", align="lrrrrr")


# ---- limitations, inventory, abstract -------------------------------------

# What limitations() and inventory_tex() read of each run of data/: all_runs loads these alone.
INVENTORY_KEYS = ("source", "hardware", "backend", "fabric", "fabric.world", "compares", "cluster.calibration",
                  "cluster.gpu", "cluster.hbm_gib", "model.name", "cluster.nodes", "cluster.gpus_per_node", "created")


def all_runs(data):
    files = h5files(data) + sum((h5files(os.path.join(data, d)) for d in ("runs", "cases", "pytorch", "published")), [])
    out = []
    for p in files:
        try:
            out.append((p, load(p, INVENTORY_KEYS)))
        except (OSError, KeyError):
            out.append((p, None))
    return out


def limitations(data, inventory):
    runs = [r for _, rs in inventory if rs for r in rs]
    meas = [r for r in runs if casedata.is_measured(r)]
    cuda = [r for r in meas if r.attrs.get("backend") == "cuda"]
    torch = [r for r in meas if r.attrs.get("source") == "pytorch"]
    emu = [r for r in meas if r.attrs.get("fabric") == "emulated"]
    cal = h5files(os.path.join(data, "calibration"))
    items = []
    if not cuda:
        items.append(r"\item \textbf{No GPU run.} None of the %d measured runs in data/ ran on a GPU: every measured "
                     r"number is the CPU backend's (%s), which computes the fp32 reference kernels on CPU cores and "
                     r"communicates through MPI. The CUDA backend (bf16, NCCL) has not produced a run in data/, so "
                     r"nothing here validates the simulator's GPU prices (GEMM tiles and waves, NCCL's SMs and HBM "
                     r"traffic, attention efficiency); the case studies at scale are simulated only." % (
                         len(meas), tex(", ".join(sorted(set(r.attrs.get("hardware", "?") for r in meas))) or "none")))
    else:
        items.append(r"\item %d measured runs ran on GPUs (%s)." % (
            len(cuda), tex(", ".join(sorted(set(r.attrs.get("hardware", "?") for r in cuda))))))
    published = [r for r in meas if r.attrs.get("source") == "published"]
    if not torch:
        items.append(r"\item \textbf{No PyTorch measurement.} The pytorch runtime's prices (kernel recipes, caching "
                     r"allocator, launch and dispatch costs) come from the catalog; no run of real PyTorch FSDP2 "
                     r"(\texttt{experiments/pytorch/}) is in data/ to check them%s." % (
                         (r" kernel by kind; the %d published steps (Section~\ref{sec:pytorch}) check whole steps "
                          r"only, as others configured and measured them" % len(published)) if published else ""))
    if emu:
        worlds = sorted(set(r.attrs.get("fabric.world", "?") for r in emu))
        items.append(r"\item \textbf{Emulated links.} %d measured runs ran as rank 0 of a %s-rank job on the emulated "
                     r"fabric: each collective moved the bytes rank 0 moves in a ring, paced to the configured link, "
                     r"with no other rank. Their times are real for that rank's work and the paced traffic; contention "
                     r"between real ranks, and the numerics of the whole job, were not measured." % (
                         len(emu), "- or ".join(worlds)))
    preds = [r for r in runs if not casedata.is_measured(r) and r.attrs.get("compares")]
    priced = sorted(set(os.path.basename(r.attrs.get("cluster.calibration", "")) for r in preds))
    if not cal:
        items.append(r"\item \textbf{No calibration file} in data/calibration/: %s" % (
            r"the predictions of measured runs here were priced by %s, which data/ does not hold." % ", ".join(
                tt(c) if c else "the catalog's datasheet constants" for c in priced) if preds else
            r"no price in this report comes from microbenchmarks of a machine; the simulated results use the "
            r"catalog's datasheet constants (\texttt{core/catalog.ini})."))
    wrap = [r for p, rs in inventory if rs and os.path.basename(p) == "wrap.h5" for r in rs]
    if wrap:
        items.append(r"\item \textbf{The 24\,GB GPU of case 2} is the catalog's %s with its memory set to %s "
                     r"(\texttt{cluster.hbm\_gib}); its compute is that GPU's. The case is about memory." % (
                         tex(attr(wrap, "cluster.gpu")), tex(attr(wrap, "cluster.hbm_gib")) + r"\,GiB"))
    cpu = [r for r in meas if r.attrs.get("backend") == "cpu"]
    if cpu:
        models = sorted(set(r.attrs.get("model.name", "?") for r in cpu))
        items.append(r"\item \textbf{Scale of the measurements.} The measured runs ran the %s model%s on "
                     r"%s CPU ranks of one machine shared with other work; their absolute times say how that machine "
                     r"ran those schedules, not how a GPU cluster would. What carries over is the schedule: the same "
                     r"ops, the same traffic and, byte for byte, the same memory." % (
                         tex(" and ".join(models)), "s" if len(models) > 1 else "",
                         " or ".join(sorted(set(str(int(casedata.fnum(r, "cluster.nodes") *
                                                     casedata.fnum(r, "cluster.gpus_per_node"))) for r in cpu
                                                if r.attrs.get("fabric") != "emulated"), key=int)) or "1"))
    if not h5files(os.path.join(data, "runs")):
        items.append(r"\item \textbf{No validation runs} in data/runs/: the simulator's accuracy is not measured in "
                     r"this report (\texttt{make validate}).")
    return r"\begin{itemize}" + "\n" + "\n".join(items) + "\n" + r"\end{itemize}"


def inventory_tex(inventory, data):
    rows = []
    for p, rs in inventory:
        rel = os.path.relpath(p, os.path.dirname(os.path.abspath(data)))
        if rs is None:
            rows.append([tt(rel), "--", "not readable", "", ""])
            continue
        src = {}
        for r in rs:
            k = r.attrs.get("source", "?") + ("" if not casedata.is_measured(r) else
                                              " (%s)" % r.attrs.get("hardware", "?"))
            src[k] = src.get(k, 0) + 1
        dates = sorted(r.attrs.get("created", "") for r in rs)
        rows.append([tt(rel), "%d" % len(rs), tex(", ".join("%s: %d" % kv for kv in sorted(src.items()))),
                     tex(dates[0][:10]) if dates else "", tex(dates[-1][:10]) if dates else ""])
    for p in h5files(os.path.join(data, "calibration")):
        try:
            with h5py.File(p, "r") as f:
                n = len(f["calibration"]) if "calibration" in f else 0
                dates = sorted(str(f["calibration"][s].attrs.get("date", "")) for s in f["calibration"]) if n else []
        except OSError:
            n, dates = 0, []
        rows.append([tt(os.path.relpath(p, os.path.dirname(os.path.abspath(data)))), "%d" % n, "calibration sessions",
                     tex(dates[0][:10]) if dates else "", tex(dates[-1][:10]) if dates else ""])
    pl = casedata.find_policy_list([os.path.join(data, "cases")])
    if pl:
        pols, what = casedata.load_policy_list(pl)
        rows.append([tt(os.path.relpath(pl, os.path.dirname(os.path.abspath(data)))), "%d" % len(pols),
                     "policies (./sim --policy all)", "", ""])
    return table(["file", "runs", "what", "first", "last"], rows,
                 "The files this report was built from (dates: when the runs were appended, UTC).", "tab:inventory",
                 align="p{0.47\\textwidth}rp{0.22\\textwidth}ll", long=True, tight=True)


def abstract(data, vfacts, pfacts=None):
    parts = []
    sim, _ = load_case(data, "accum")
    if sim:
        rows = casedata.accum_rows(sim)
        r = ratio_text(rows, "fsdp sync-each", "fsdp no-sync")
        if r:
            parts.append("For %s, syncing gradients on every microbatch takes %s." % (tex(scale_text(sim)), r))
    sim, _ = load_case(data, "wrap")
    if sim:
        lf = casedata.wrap_longest_fitting(casedata.wrap_rows(sim))
        if lf.get("block+io") and (lf.get("block") or 0) < lf["block+io"]:
            parts.append("On four 24\\,GB GPUs, wrapping Llama 3's embedding and output projection apart fits "
                         "sequences of %d tokens where wrapping by block fits %s." % (
                             lf["block+io"], ("%d" % lf["block"]) if lf.get("block") else "none"))
    sim, _ = load_case(data, "concat")
    if sim:
        pairs = [(m, a, b) for m, a, b in casedata.concat_pairs(casedata.concat_rows(sim)) if m > 1]
        if pairs:
            m, a, b = pairs[-1]
            parts.append("Concatenating flat gradients on the last of %d microbatches only copies %s less per "
                         "microbatch." % (m, nbytes(a["concat_bytes_per_micro"] - b["concat_bytes_per_micro"])))
    if vfacts:
        parts.append("Against %d runs measured on %s, the simulator's median step-time error is %s%s, and its "
                     "peak memory is exact in %d of the %d." % (
                         vfacts["n"], tex(vfacts["hardware"]), upct(vfacts["median_abs_err"]),
                         (r" (Kendall's $\tau$ of the policy ranking %.2f)" % vfacts["tau"]) if vfacts["tau"] is not None
                         else "", vfacts["mem_eq"], vfacts["n"]))
    else:
        parts.append("No measured validation runs are in data/ yet, so the simulator's accuracy is not stated.")
    if pfacts:
        tau = pfacts["tau"]
        if tau == 1.0:
            rank = ", and it orders the policies as they ran in all %d pairs that differ only in policy" % pfacts["npairs"]
        elif tau is not None:
            rank = r", Kendall's $\tau$ of the policy ranking %.2f" % tau
        else:
            rank = ""
        parts.append("Against %d steps of PyTorch FSDP2 %s on %s, the pytorch runtime's median step-time error is %s "
                     "(worst %s)%s." % (
                         pfacts["n"], "published by others" if pfacts["sources"] == ["published"] else
                         "measured or published", tex(", ".join(pfacts["hardware"])), upct(pfacts["median_abs_err"]),
                         upct(pfacts["worst_abs_err"]), rank))
    return " ".join(parts)


def main(argv):
    if len(argv) != 4 or argv[1] in ("-h", "--help"):
        sys.stderr.write("usage: report.py DATA_DIR FIGURES_DIR OUTDIR\n")
        return 2
    data, figdir, outdir = argv[1:]
    if not os.path.isdir(data):
        sys.stderr.write("report: %s: no such directory\n" % data)
        return 2
    os.makedirs(outdir, exist_ok=True)
    # figures are named relative to the document (paper/main.tex)
    figs = Figures(figdir, os.path.relpath(figdir, os.path.dirname(os.path.abspath(outdir))))
    inventory = all_runs(data)
    vtext, vfacts = validation(data, figs)
    write(outdir, "validation.tex", vtext)
    ptext, pfacts = pytorch_validation(data, figs)
    write(outdir, "pytorch.tex", ptext)
    write(outdir, "case_accum.tex", case_accum(data, figs))
    write(outdir, "case_wrap.tex", case_wrap(data, figs))
    write(outdir, "case_optim.tex", case_optim(data, figs))
    write(outdir, "case_concat.tex", case_concat(data, figs))
    write(outdir, "bandwidth.tex", bandwidth(data, figs))
    write(outdir, "pareto.tex", pareto(data, figs))
    write(outdir, "policies.tex", policies(data, figs))
    write(outdir, "limitations.tex", limitations(data, inventory))
    write(outdir, "inventory.tex", inventory_tex(inventory, data))
    write(outdir, "abstract.tex", abstract(data, vfacts, pfacts))
    print("report: %d fragments from %s into %s" % (12, data, outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
