"""The report's numbers, read from results files (schema: data/README.md).

What the figures (paper/plots.py) and the text (paper/report.py) show of
the case studies, the bandwidth sweep, the policy front and the
validation, computed once here from the runs themselves: a figure and a
table of the same case always agree. Nothing here imports matplotlib.

A run is anything with the attributes of plots.Run: `attrs` (the run
group's attributes as text), `summary` (the summary group's attributes),
`ops` (the ops dataset as a numpy structured array), `kind_names` and
`stream_names` (enum value -> name), `index`, `stem`.

Results files are appended to, never rewritten, so a configuration run
twice appears twice: `latest()` keeps the newest run of each configuration,
so new data replaces old in the report without an edit.
"""
import functools
import gzip
import io
import json
import lzma
import os

import numpy as np

# Run keys that do not change what a step is: where results went, how many
# steps were measured, the seed.
NOT_CONFIG = {"run.out", "run.steps", "run.warmup", "run.seed", "run.timeout_s"}

def open_results(path):
    """A results file opened read-only with h5py: FILE.h5, or FILE.h5.xz as
    data/runs keeps most of its files (data/README.md), read into memory."""
    import h5py
    if path.endswith(".xz"):
        with lzma.open(path) as f:
            return h5py.File(io.BytesIO(f.read()), "r")
    return h5py.File(path, "r")


def read_attrs(group, keys=None):
    """A group's attributes as group.attrs gives them, but a scalar string
    (as bytes) or number read through h5py's low-level calls: attrs[name]
    works out the type anew for each, about 30 us, and a run's 110 over
    data/'s 9,000 runs were most of the report's time (this: 2.3 times
    faster). keys: those of them the group has, alone."""
    import h5py
    gid = group.id
    out = {}
    names = list(group.attrs) if keys is None else [k for k in keys if h5py.h5a.exists(gid, k.encode())]
    for name in names:
        at = h5py.h5a.open(gid, name.encode())
        t = at.get_type()
        cls = t.get_class()
        if at.get_space().get_simple_extent_type() != h5py.h5s.SCALAR:
            out[name] = group.attrs[name]
        elif cls == h5py.h5t.STRING and t.is_variable_str():
            dtype, mtype = _vstr()
            v = np.empty((), dtype=dtype)
            at.read(v, mtype=mtype)
            out[name] = v[()]
        elif cls in (h5py.h5t.INTEGER, h5py.h5t.FLOAT) and t.get_order() == h5py.h5t.ORDER_LE:
            v = np.empty((), dtype=at.dtype)
            at.read(v)
            out[name] = v[()]
        else:
            out[name] = group.attrs[name]
    return out


@functools.lru_cache(maxsize=None)
def _vstr():
    """The numpy dtype and HDF5 memory type a variable-length string is read as (h5py's object strings)."""
    import h5py
    dtype = h5py.string_dtype()
    return dtype, h5py.h5t.py_create(dtype)


def results_stem(path):
    """A results file's name without .h5 (and .xz): amd-epyc-2-cores-cpu-20261128-090527."""
    n = os.path.basename(path)
    n = n[:-3] if n.endswith(".xz") else n
    return n[:-3] if n.endswith(".h5") else os.path.splitext(n)[0]


def machine_of(path):
    """The machine and backend a data/runs file is of: its name less -<date>-<time>."""
    n = results_stem(path)
    return n.rsplit("-", 2)[0] if n.count("-") >= 2 else n


def results_in(d, every_xz=False):
    """A directory's results files, sorted: every .h5, and of the .h5.xz ones
    (data/runs keeps files compressed) the newest of each machine when no
    .h5 of it is newer (every_xz: all of them)."""
    if not os.path.isdir(d):
        return []
    names = sorted(os.listdir(d))
    plain = [os.path.join(d, n) for n in names if n.endswith(".h5")]
    packed = [os.path.join(d, n) for n in names if n.endswith(".h5.xz")]
    if not every_xz:
        newest = {}
        for p in plain + packed:
            m = machine_of(p)
            if m not in newest or results_stem(p) > results_stem(newest[m]):
                newest[m] = p
        packed = [p for p in packed if newest[machine_of(p)] == p]
    return sorted(plain + packed, key=results_stem)


# Byte units: the largest whose value is at least 1.
UNITS = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"), (1, "B"))


def unit(max_bytes):
    """(divisor, name) of the byte unit a quantity up to max_bytes reads in."""
    for div, name in UNITS:
        if max_bytes >= div:
            return div, name
    return 1, "B"


def fmt_bytes(n):
    """A byte count in the unit that suits it: '2.54 MiB', '48.06 GiB'."""
    div, name = unit(float(n))
    return "%d B" % n if div == 1 else "%.2f %s" % (float(n) / div, name)


# ---- what a run is ---------------------------------------------------------

def is_measured(run):
    return run.attrs.get("source", "") != "sim"


def fabric(run):
    """'sim', or for a measured run 'real' (every rank ran) or 'emulated'."""
    if not is_measured(run):
        return "sim"
    return run.attrs.get("fabric", "real")


def cluster_text(run):
    """'llama3-8b on 2 x 8 h100-sxm'."""
    a = run.attrs
    return "%s on %s x %s %s" % (a.get("model.name", "?"), a.get("cluster.nodes", "?"),
                                 a.get("cluster.gpus_per_node", "?"), a.get("cluster.gpu", "?"))


def how_text(run):
    """'simulated', or 'measured on amd-epyc-2-cores (cpu backend)', with the
    emulated fabric's world when it was one rank of N, or 'measured with
    PyTorch FSDP2 on ...'."""
    if not is_measured(run):
        return "simulated"
    a = run.attrs
    if a.get("source") == "pytorch":  # experiments/pytorch/fsdp_bench.py
        return "measured with PyTorch FSDP2 on %s" % a.get("hardware", "?")
    if a.get("source") == "published":  # experiments/published/
        return "published for %s" % a.get("hardware", "?")
    what = "measured on %s (%s backend" % (a.get("hardware", "?"), a.get("backend", a.get("run.device", "?")))
    if a.get("fabric") == "emulated":
        what += ", rank 0 of %s on the emulated fabric" % a.get("fabric.world", "?")
    return what + ")"


def config_items(run):
    """The configuration keys that say what a step is (every key but those
    of NOT_CONFIG), as a dict."""
    return {k: v for k, v in run.attrs.items()
            if "." in k and k.split(".", 1)[0] in ("model", "cluster", "policy", "run") and k not in NOT_CONFIG}


def how_key(run):
    """How a run ran: source, hardware, backend, fabric, the run it predicts."""
    return tuple(run.attrs.get(k, "") for k in ("source", "hardware", "backend", "fabric", "fabric.world", "compares"))


def same_config(a, b):
    """Whether runs a and b are the same experiment run the same way: equal
    on every configuration key both record (a run written by an older build
    may lack keys added since) and in how they ran."""
    if getattr(a, "path", "") != getattr(b, "path", "") or how_key(a) != how_key(b):
        return False
    ca, cb = config_items(a), config_items(b)
    return all(ca[k] == cb[k] for k in ca.keys() & cb.keys())


def latest(runs):
    """The newest run of each configuration (same_config), in the order of
    the newest runs' first appearance among the runs given."""
    kept = []
    for r in reversed(runs):
        if not any(same_config(r, k) for k in kept):
            kept.append(r)
    order = {id(r): i for i, r in enumerate(runs)}
    return sorted(kept, key=lambda r: order[id(r)])


def fnum(run, key, default=0.0):
    try:
        return float(run.attrs.get(key, default))
    except ValueError:
        return default


def op_seconds(run, kinds, streams=None):
    """Summed duration of the ops of the given kinds (names), optionally
    only those on the given streams (names), in seconds."""
    ops = run.ops
    if not len(ops):
        return 0.0
    kv = [v for v, n in run.kind_names.items() if n in kinds]
    sel = np.isin(ops["kind"], kv)
    if streams is not None:
        sv = [v for v, n in run.stream_names.items() if n in streams]
        sel &= np.isin(ops["stream"], sv)
    return float((ops["end_ns"][sel] - ops["start_ns"][sel]).astype(np.float64).sum()) / 1e9


def op_bytes(run, kinds):
    ops = run.ops
    if not len(ops):
        return 0
    kv = [v for v, n in run.kind_names.items() if n in kinds]
    return int(ops["bytes"][np.isin(ops["kind"], kv)].sum())


def op_count(run, kinds):
    ops = run.ops
    if not len(ops):
        return 0
    kv = [v for v, n in run.kind_names.items() if n in kinds]
    return int(np.isin(ops["kind"], kv).sum())


def summary_row(run):
    """The summary numbers every case shows."""
    s = run.summary
    step = float(s.get("step_time_s", 0))
    return {
        "run": run, "fabric": fabric(run), "measured": is_measured(run),
        "step_s": step,
        "p10_s": float(s.get("step_time_p10_s", step)), "p90_s": float(s.get("step_time_p90_s", step)),
        "compute_s": float(s.get("compute_s", 0)), "exposed_s": float(s.get("exposed_comm_s", 0)),
        "comm_bytes": int(s.get("comm_bytes_per_gpu", 0)),
        "alloc": int(s.get("peak_alloc_bytes", 0)), "reserved": int(s.get("peak_reserved_bytes", 0)),
        "gpu_bytes": int(s.get("gpu_bytes", 0)), "fits": bool(int(s.get("fits", 0))),
        "by_cat": dict(zip([str(c) for c in s.get("categories", [])],
                           [int(v) for v in s.get("peak_by_cat_bytes", [])])),
    }


# ---- labels ----------------------------------------------------------------

# Configuration keys in the order a label names them: the first that differs
# between the runs is always shown, the others only where a run departs from
# the usual value; a key whose values follow from those already named
# (zero2's reshard, hsdp's shard group, the dtypes a precision implies) is
# left out.
LABEL_ORDER = ("source", "policy.sharding", "policy.accum", "policy.microbatches", "policy.wrap",
               "policy.optim", "policy.optim_in_backward", "policy.ac", "policy.runtime", "policy.precision",
               "policy.offload", "policy.flat_params", "policy.concat_last_only", "policy.loss",
               "policy.prefetch", "policy.reshard", "policy.accum_dtype", "policy.reduce_dtype",
               "model.name", "model.seq", "run.batch", "cluster.gpu", "cluster.nodes", "cluster.gpus_per_node",
               "cluster.nic_gbps", "cluster.inter_gbps", "cluster.node_inter_gbps", "policy.shard_group")
# Keys whose value reads alone (`hsdp`, `no-sync`, `block+io`, `pytorch`).
LABEL_BARE = {"policy.sharding", "policy.accum", "policy.wrap", "policy.optim", "policy.runtime",
              "policy.precision", "model.name", "cluster.gpu"}
LABEL_BOOL = {"policy.optim_in_backward": "in backward", "policy.flat_params": "flat params",
              "policy.concat_last_only": "concat last only"}


def _label_part(key, value):
    if key == "source":
        return "simulated" if value == "sim" else "measured"
    if key in LABEL_BOOL:
        return LABEL_BOOL[key] if value == "true" else "no " + LABEL_BOOL[key]
    if key in LABEL_BARE:
        return value
    if key == "policy.microbatches":
        return "M=" + value
    if key.endswith("_gbps"):
        return "%s %s GB/s" % (key.split(".", 1)[-1][:-5].replace("_", " "), value)
    return "%s %s" % (key.split(".", 1)[-1].replace("_", " "), value)


def _implied(c, key):
    """Whether configuration c's value of key follows from its sharding:
    zero2 and ddp never reshard, and each sharding has its shard group."""
    sh = c.get("policy.sharding", "")
    if key == "policy.reshard":
        return sh in ("zero2", "ddp") and c.get(key) == "no"
    if key == "policy.shard_group":
        return sh != "hsdp" or c.get(key) == c.get("cluster.gpus_per_node")
    return False


def policy_labels(runs):
    """One short label per run (runs: anything with a `config` dict of
    `section.key` and `source` values), naming what differs between the runs:
    `hsdp`, `fsdp + block+io`, `fsdp + in backward + ac full`."""
    cfgs = [r.config for r in runs]
    keys = sorted(set().union(*(c.keys() for c in cfgs)))
    differing = [k for k in keys if len(set(c.get(k, "") for c in cfgs)) > 1]
    differing.sort(key=lambda k: (LABEL_ORDER.index(k) if k in LABEL_ORDER else len(LABEL_ORDER), k))
    kept = []
    for k in differing:
        seen = {}
        implied = bool(kept)
        for c in cfgs:
            by = tuple(c.get(j, "") for j in kept)
            if seen.setdefault(by, c.get(k, "")) != c.get(k, ""):
                implied = False
                break
        if not implied:
            kept.append(k)
    usual = {}
    for k in kept:
        vals = [c.get(k, "") for c in cfgs]
        usual[k] = max(vals, key=lambda v: (vals.count(v), -vals.index(v)))
    labels = []
    for c in cfgs:
        parts = [_label_part(k, c.get(k, "-")) for i, k in enumerate(kept)
                 if i == 0 or (c.get(k, "") != usual[k] and not _implied(c, k))]
        labels.append(" + ".join(parts))
    # a label that several runs share (a policy measured again) names its run, and its file if they differ
    stems = len(set(r.stem for r in runs)) > 1
    twice = set(l for l in labels if labels.count(l) > 1)
    labels = [("%s, " % l if l else "") + ("%s " % r.stem if stems else "") + "run %d" % r.index
              if l in twice else l for l, r in zip(labels, runs)]
    return labels


# ---- case 1: gradient accumulation ----------------------------------------

def accum_policy(run):
    """'fsdp sync-each', 'hsdp defer-replica', 'fsdp partial:2'."""
    return "%s %s" % (run.attrs.get("policy.sharding", "?"), run.attrs.get("policy.accum", "?"))


def accum_rows(runs):
    rows = []
    for r in latest(runs):
        row = summary_row(r)
        row.update(policy=accum_policy(r), inter_gbps=fnum(r, "cluster.inter_gbps"),
                   microbatches=int(fnum(r, "policy.microbatches", 1)))
        rows.append(row)
    return rows


def accum_winners(rows):
    """Per inter-node bandwidth (GB/s, ascending): the fastest policy of
    those that fit, its step time, and the runner-up's policy and time."""
    out = []
    for bw in sorted(set(r["inter_gbps"] for r in rows)):
        fit = sorted((r for r in rows if r["inter_gbps"] == bw and r["fits"]), key=lambda r: r["step_s"])
        if fit:
            out.append((bw, fit[0], fit[1] if len(fit) > 1 else None))
    return out


# ---- case 2: wrapping ------------------------------------------------------

WRAPS = ("block", "block+io", "whole")


def wrap_rows(runs):
    rows = []
    for r in latest(runs):
        row = summary_row(r)
        row.update(wrap=r.attrs.get("policy.wrap", "?"), seq=int(fnum(r, "model.seq")))
        rows.append(row)
    return sorted(rows, key=lambda x: (x["seq"], WRAPS.index(x["wrap"]) if x["wrap"] in WRAPS else 9))


def wrap_focus_seq(rows):
    """The sequence length the case turns on: the shortest at which the set
    of wrappings that fit differs from the set at the shortest length, else
    the shortest at which the wrappings disagree on fitting, else the
    longest at which one fits, else the longest."""
    seqs = sorted(set(r["seq"] for r in rows))
    fitting = [frozenset(r["wrap"] for r in rows if r["seq"] == s and r["fits"]) for s in seqs]
    for s, f in zip(seqs, fitting):
        if f != fitting[0]:
            return s
    for s in seqs:
        if len(set(r["fits"] for r in rows if r["seq"] == s)) > 1:
            return s
    fit = [r["seq"] for r in rows if r["fits"]]
    return max(fit) if fit else (seqs[-1] if seqs else 0)


def wrap_longest_fitting(rows):
    """Per wrapping: the longest sequence that fits (None when none does)."""
    out = {}
    for w in WRAPS:
        fit = [r["seq"] for r in rows if r["wrap"] == w and r["fits"]]
        out[w] = max(fit) if fit else None
    return out


# ---- case 3: the optimizer in backward ------------------------------------

OPTIMS = ("foreach", "fused", "per-param")


def optim_rows(runs):
    rows = []
    for r in latest(runs):
        row = summary_row(r)
        row.update(optim=r.attrs.get("policy.optim", "?"),
                   in_backward=r.attrs.get("policy.optim_in_backward", "false") == "true",
                   backward_s=op_seconds(r, ("backward", "loss_backward", "recompute"), ("compute",)),
                   optim_s=op_seconds(r, ("optim", "cpu_optim")),
                   optim_ops=op_count(r, ("optim", "cpu_optim")))
        rows.append(row)
    return sorted(rows, key=lambda x: (OPTIMS.index(x["optim"]) if x["optim"] in OPTIMS else 9, x["in_backward"]))


def optim_pairs(rows):
    """Per optimizer form: (after backward, in backward), when both ran."""
    out = []
    for o in OPTIMS:
        a = [r for r in rows if r["optim"] == o and not r["in_backward"]]
        b = [r for r in rows if r["optim"] == o and r["in_backward"]]
        if a and b:
            out.append((o, a[-1], b[-1]))
    return out


# ---- case 4: flat-parameter concatenation ---------------------------------

def concat_rows(runs):
    rows = []
    for r in latest(runs):
        row = summary_row(r)
        m = int(fnum(r, "policy.microbatches", 1))
        cb = op_bytes(r, ("concat",))
        row.update(microbatches=m, last_only=r.attrs.get("policy.concat_last_only", "false") == "true",
                   concat_bytes=cb, concat_bytes_per_micro=cb / m, concat_ops=op_count(r, ("concat",)),
                   concat_s=op_seconds(r, ("concat",)))
        rows.append(row)
    return sorted(rows, key=lambda x: (x["microbatches"], x["last_only"]))


def concat_pairs(rows):
    """Per microbatch count: (every microbatch, last only), when both ran."""
    out = []
    for m in sorted(set(r["microbatches"] for r in rows)):
        a = [r for r in rows if r["microbatches"] == m and not r["last_only"]]
        b = [r for r in rows if r["microbatches"] == m and r["last_only"]]
        if a and b:
            out.append((m, a[-1], b[-1]))
    return out


# ---- bandwidth sweep and the policy front ---------------------------------

def bandwidth_rows(runs):
    rows = []
    for r in latest(runs):
        row = summary_row(r)
        row.update(sharding=r.attrs.get("policy.sharding", "?"), inter_gbps=fnum(r, "cluster.inter_gbps"))
        rows.append(row)
    return rows


def crossover(rows, a="fsdp", b="hsdp"):
    """The bandwidths (GB/s per GPU) between which b stops being faster
    than a, scanning upward: (last where b is faster, first where a is),
    or None when the order never changes in the data."""
    t = {}
    for r in rows:
        t.setdefault(r["inter_gbps"], {})[r["sharding"]] = r["step_s"]
    bws = [bw for bw in sorted(t) if a in t[bw] and b in t[bw]]
    for lo, hi in zip(bws, bws[1:]):
        if t[lo][b] < t[lo][a] and t[hi][b] >= t[hi][a]:
            return lo, hi
    return None


def load_policy_list(path):
    """(policies, what) from a listing paper/cases.sh wrote (plain or
    gzipped JSON): `policies` is the list `./sim --policy all --json`
    printed, `config` the experiment's (`./sim --json`'s "config"), from
    which `what` says 'llama3-8b on 2 x 8 h100-sxm'. A bare list is read
    too (what: the file's name)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    what = os.path.basename(path)
    if isinstance(data, dict):
        c = data.get("config", {})
        if c:
            what = "%s on %s x %s %s" % (c["model"]["name"], c["cluster"]["nodes"], c["cluster"]["gpus_per_node"],
                                         c["cluster"]["gpu"])
        data = data.get("policies", [])
    return [p for p in data if "step_time_s" in p and "peak_reserved_bytes" in p], what


def pareto(policies):
    """The policies no other fitting policy beats in both step time and
    peak reserved memory, fastest first."""
    fit = sorted((p for p in policies if p.get("fits", True)),
                 key=lambda p: (p["step_time_s"], p["peak_reserved_bytes"]))
    front, best_mem = [], None
    for p in fit:
        if best_mem is None or p["peak_reserved_bytes"] < best_mem:
            front.append(p)
            best_mem = p["peak_reserved_bytes"]
    return front


def find_policy_list(dirs):
    """The first policy listing (policy_all_*.json[.gz]) in dirs, or None."""
    for d in dirs:
        if os.path.isdir(d):
            for n in sorted(os.listdir(d)):
                if n.startswith("policy_all_") and (n.endswith(".json") or n.endswith(".json.gz")):
                    return os.path.join(d, n)
    return None


# ---- validation: measured runs and their predictions ----------------------

def compared_pairs(runs):
    """(measured, its prediction) for each measured run of one file that
    `./sim --compare` predicted: the newest priced by a calibration, else
    the newest (a GPU session compares with its calibration, then with the
    catalog alone, in that order)."""
    by_name = {"%06d" % r.index: r for r in runs}
    newest, calibrated = {}, {}
    for r in runs:
        c = r.attrs.get("compares")
        if r.attrs.get("source") == "sim" and c in by_name:
            newest[c] = r
            if r.attrs.get("cluster.calibration", "") not in ("", "none"):
                calibrated[c] = r
    return [(by_name[c], calibrated.get(c, p)) for c, p in sorted(newest.items())]


def op_kind_seconds(run):
    """Summed duration per op kind name, seconds."""
    out = {}
    ops = run.ops
    if not len(ops):
        return out
    d = (ops["end_ns"] - ops["start_ns"]).astype(np.float64) / 1e9
    for v in sorted(set(int(k) for k in ops["kind"])):
        out[run.kind_names.get(v, str(v))] = float(d[ops["kind"] == v].sum())
    return out


def kendall_tau(xs, ys):
    """Kendall's tau-a between two equally long sequences (pairs tied in
    either count as neither concordant nor discordant); None under 2."""
    n = len(xs)
    if n < 2:
        return None
    c = d = 0
    for i in range(n):
        for j in range(i + 1, n):
            s = (xs[i] - xs[j]) * (ys[i] - ys[j])
            c += s > 0
            d += s < 0
    return (c - d) / (n * (n - 1) / 2)
