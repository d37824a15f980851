#!/usr/bin/env python3
"""Give each PyTorch run of a results file the op rows of its schedule, so
that `./sim --compare FILE` can rebuild and predict it.

    experiments/pytorch/attach_schedule.py runs.h5 [--sim ./sim]

fsdp_bench.py runs where PyTorch is (the GPU machine, which has no HDF5 C
library to build ./sim); this runs where ./sim is. For every run with
source = "pytorch" or "published" (experiments/published/) and no `ops`
dataset it asks `./sim --schedule` for the
run's configuration (its section.key attributes) and writes the ops in
issue order with their kind, stream, unit, segment, microbatch, label,
bytes and FLOPs (data/README.md); start and end are 0: PyTorch's timeline
is the `profile` dataset, per kernel, not per schedule op. Where the run
holds the collectives FSDP2 issued in a step (fsdp_bench.py's
`collectives`), it sets them against the schedule's all-gathers,
reduce-scatters and all-reduces, kind and bytes, and says how they stand
(attribute `collectives_check`, and a line each).
"""
import argparse, re, subprocess, sys

import h5py
import numpy as np

KINDS = ["allgather", "copy_out", "forward", "recompute", "backward", "accum", "concat", "copy_in",
         "reduce_scatter", "allreduce", "optim", "d2h", "h2d", "cpu_optim", "free", "copy", "loss_backward"]
SHORT = ["AG", "COPYOUT", "FWD", "RECOMP", "BWD", "ACCUM", "CONCAT", "COPYIN", "RS", "AR", "OPTIM", "D2H",
         "H2D", "CPUOPT", "FREE", "COPY", "LOSSBWD"]
STREAMS = ["compute", "allgather", "reduce_scatter", "allreduce", "copy", "host"]
LINE = re.compile(r"^\s*(\d+) (.{22}) (\S+)\s+(\d+)\s+(\d+)")


def schedule(sim, attrs):
    args = [sim]
    for k, v in attrs.items():
        if "." in k and k.split(".")[0] in ("model", "cluster", "policy", "run"):
            args += ["--set", "%s=%s" % (k, v)]
    out = subprocess.run(args + ["--schedule"], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    rows = []
    for line in out.stdout.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        label = m.group(2).strip()
        kind = SHORT.index(label.split()[0])
        micro = int(label.rsplit(" m", 1)[1]) if re.search(r" m\d+$", label) else -1
        rows.append((int(m.group(1)), kind, STREAMS.index(m.group(3)), -1, -1, micro, label.encode()[:63],
                     0, 0, int(m.group(4)), int(m.group(5))))
    return rows


def collectives_check(rows, measured):
    """How the collectives PyTorch issued (fsdp_bench.py's `collectives`: kind, bytes, in issue order) stand
    against the schedule's: the same in the same order, the same in another order, or what differs."""
    want = [(KINDS[r[1]], int(r[9])) for r in rows if KINDS[r[1]] in ("allgather", "reduce_scatter", "allreduce")]
    got = [(k.decode() if isinstance(k, bytes) else str(k), int(b)) for k, b in measured]
    if got == want:
        return "the schedule's %d collectives, in its order" % len(want)
    if sorted(got) == sorted(want):
        return "the schedule's %d collectives, in another order" % len(want)
    extra = list(got)
    for c in want:
        if c in extra:
            extra.remove(c)
    missing = list(want)
    for c in got:
        if c in missing:
            missing.remove(c)
    fmt = lambda cs: ", ".join("%s %d" % c for c in cs[:4]) + (" ..." if len(cs) > 4 else "")
    return "differs from the schedule (%d collectives against %d): PyTorch's alone: %s; the schedule's alone: %s" % (
        len(got), len(want), fmt(extra) or "none", fmt(missing) or "none")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--sim", default="./sim")
    a = ap.parse_args()
    kind_t = h5py.enum_dtype({n: i for i, n in enumerate(KINDS)}, basetype="u1")
    stream_t = h5py.enum_dtype({n: i for i, n in enumerate(STREAMS)}, basetype="u1")
    dt = np.dtype([("op", "<u4"), ("kind", kind_t), ("stream", stream_t), ("unit", "<i4"), ("seg", "<i4"),
                   ("micro", "<i4"), ("label", "S64"), ("start_ns", "<u8"), ("end_ns", "<u8"), ("bytes", "<u8"),
                   ("flops", "<u8")])
    done = same = checked = 0
    with h5py.File(a.file, "a") as f:
        for name, run in f["runs"].items():
            if run.attrs.get("source") not in ("pytorch", "published") or "ops" in run:
                continue
            try:
                rows = schedule(a.sim, dict(run.attrs))
            except RuntimeError as e:
                print("%s: run %s: %s" % (a.file, name, e), file=sys.stderr)
                continue
            run.create_dataset("ops", data=np.array(rows, dtype=dt))
            done += 1
            if "collectives" in run:
                verdict = collectives_check(rows, run["collectives"][()])
                run.attrs["collectives_check"] = verdict
                print("%s: run %s: collectives: %s" % (a.file, name, verdict))
                same += verdict.startswith("the schedule's")
                checked += 1
    print("%s: %d runs given their schedule" % (a.file, done) +
          ("; %d of %d with the schedule's collectives" % (same, checked) if checked else ""))


if __name__ == "__main__":
    main()
