#!/usr/bin/env python3
"""clocks.py - the GPU's SM clock and power during each phase of a device session.

    clocks.py CLOCKS.csv[.gz] PHASES.txt [--busy PCT]

CLOCKS is nvidia-smi's sampling (`--query-gpu=timestamp,clocks.sm,clocks.mem,
power.draw,temperature.gpu,utilization.gpu --format=csv -lms 250`, as
gpu/device_session.sh and gpu/device_steps.d/40-pytorch.sh run it); PHASES
has a line per phase, `YYYY/MM/DD HH:MM:SS.mmm NAME`, in the same clock as
nvidia-smi's timestamps: a phase lasts until the next line (the last line
names the end). Prints one row per phase: its length, its samples, those
with the GPU busy (utilization at least PCT, default 50), and over the busy
ones the SM clock's median with its 10th and 90th percentiles and the
board power's median.

Why: a kernel's time scales with the SM clock, and the clock falls when
the board reaches its power cap (the first H200 session: 1,980 MHz at
129 W while its microbenchmarks ran one kernel at a time, 1,575 MHz at
684 W while FSDP2's steps ran, gpu/README.md). A calibration priced at
one clock and a run at another differ by that ratio; this table says, per
session, what each phase ran at. Standard library only.
"""
import argparse
import datetime
import gzip
import statistics
import sys

FMT = "%Y/%m/%d %H:%M:%S.%f"


def number(field):
    """'1575 MHz' -> 1575.0; '[N/A]' or '' -> None."""
    try:
        return float(field.strip().split()[0])
    except (ValueError, IndexError):
        return None


def read_samples(path):
    """[(time, sm_mhz, power_w, util_pct)] in file order; a line that does not parse is skipped."""
    opener = gzip.open if path.endswith(".gz") else open
    out = []
    with opener(path, "rt") as f:
        for line in f:
            cols = line.split(",")
            if len(cols) < 6 or line.startswith("timestamp"):
                continue
            try:
                t = datetime.datetime.strptime(cols[0].strip(), FMT)
            except ValueError:
                continue
            sm, power, util = number(cols[1]), number(cols[3]), number(cols[5])
            if sm is not None:
                out.append((t, sm, power, util))
    return out


def read_phases(path):
    """[(start, name)] in file order."""
    out = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split(" ", 2)
            if len(parts) < 3:
                continue
            try:
                out.append((datetime.datetime.strptime(parts[0] + " " + parts[1], FMT), parts[2]))
            except ValueError:
                continue
    return out


def deciles(v):
    """The 10th and 90th percentiles of v, interpolated between the nearest ranks (one value: itself)."""
    if len(v) < 2:
        return v[0], v[0]
    d = statistics.quantiles(v, n=10, method="inclusive")
    return d[0], d[-1]


def table(samples, phases, busy_pct):
    """One dict per phase (the last line ends the one before it and is no phase of its own)."""
    rows = []
    for (start, name), (end, _) in zip(phases, phases[1:]):
        inside = [s for s in samples if start <= s[0] < end]
        busy = [s for s in inside if s[3] is not None and s[3] >= busy_pct]
        row = {"phase": name, "seconds": (end - start).total_seconds(), "samples": len(inside), "busy": len(busy)}
        if busy:
            sm = [s[1] for s in busy]
            power = [s[2] for s in busy if s[2] is not None]
            p10, p90 = deciles(sm)
            row.update(sm_mhz=statistics.median(sm), sm_p10=p10, sm_p90=p90,
                       power_w=statistics.median(power) if power else None)
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("clocks")
    ap.add_argument("phases")
    ap.add_argument("--busy", type=float, default=50, help="a sample is busy at this utilization (%%) or more")
    a = ap.parse_args()
    try:
        samples, phases = read_samples(a.clocks), read_phases(a.phases)
    except OSError as e:
        print("clocks.py: %s" % e, file=sys.stderr)
        return 2
    if len(phases) < 2:
        print("clocks.py: %s: %d phase line(s); a phase lasts until the next line, so at least 2 are needed"
              % (a.phases, len(phases)), file=sys.stderr)
        return 2
    print("%-36s %8s %7s %5s  %s" % ("phase", "seconds", "samples", "busy",
                                     "SM MHz median (p10-p90), power W median, over the busy samples"))
    for r in table(samples, phases, a.busy):
        line = "%-36.36s %8.1f %7d %5d  " % (r["phase"], r["seconds"], r["samples"], r["busy"])
        if r["busy"]:
            line += "%4.0f (%4.0f-%4.0f)" % (r["sm_mhz"], r["sm_p10"], r["sm_p90"])
            line += ", %3.0f W" % r["power_w"] if r["power_w"] is not None else ", power n/a"
        else:
            line += "no busy sample"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
