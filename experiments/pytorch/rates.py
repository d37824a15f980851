#!/usr/bin/env python3
"""The rates of eager PyTorch's memory-bound kernels by the template each is,
from microbench.py's calibration files: what [runtime pytorch]'s norm_eff,
cast_up_sm_gbps, gather_sm_gbps, broadcast_sm_gbps, reduce_sm_gbps and
multi_tensor_eff (core/catalog.ini) are read from.

    python3 experiments/pytorch/rates.py [--sim ./sim] FILE.h5[:GPU] ...

Each file is a microbench.py session (its newest) of catalog GPU GPU
(default: the one its name gives, h100-sxm or h200), whose HBM bandwidth,
SMs and hbm_eff the catalog gives. Which template each element-wise kernel
is comes from `./sim --kernels` at microbench.py's shape (the last column
of an element-wise kernel: norm, cast-up, gather, broadcast, reduce; a
stream without one), matched by name and bytes. For each template and
file: the kernels' rates (bytes over time; the median of the template's
kernels), as a fraction of the HBM and per SM; for the optimizer, AdamW's
foreach (84 bytes an element) and fused (28) steps per element. Kernels of
under 64 MB are left out (their time is mostly the launch's tail), and so
is a kernel that moved its bytes faster than the HBM's datasheet rate: it
cannot have, from a cold L2, so its row's bytes are not what it moved
(the first H100 file's `mul` timed `g * g`, one tensor read for two;
listed apart).
Prints a table and, with --check, exits 1 when a rate of the catalog is
further than --tolerance from what the files give: a template bound by its
HBM (norm, the optimizer) against the files' mean fraction, one bound per
SM against their largest rate per SM, and each GPU's hbm_eff against its
file's streams, so that a change of the catalog without its data, or of
the data without the catalog, is seen.
"""
import argparse, os, re, statistics, subprocess, sys

import h5py

# microbench.py's shape (fsdp_bench.py's defaults): llama3-8b's block, T 8192, batch 1, one GPU
SHAPE = ["--model", "llama3-8b", "--layers", "1", "--hidden", "4096", "--ffn", "14336", "--heads", "32",
         "--kv-heads", "8", "--vocab", "128256", "--seq", "8192", "--batch", "1", "--nodes", "1",
         "--gpus-per-node", "1", "--runtime", "pytorch"]
GPUS = {"h100": "h100-sxm", "h200": "h200"}  # a file's GPU by its name (microbench.py's device names)
PATTERNS = ("norm", "cast-up", "gather", "broadcast", "reduce")
MIN_BYTES = 64 << 20
# the catalog's fields: the pattern's, and whether its rate follows the HBM (a fraction) or the SMs (per SM)
FIELDS = {"norm": ("norm_eff", "hbm"), "cast-up": ("cast_up_sm_gbps", "sm"), "gather": ("gather_sm_gbps", "sm"),
          "broadcast": ("broadcast_sm_gbps", "sm"), "reduce": ("reduce_sm_gbps", "sm"),
          "optimizer": ("multi_tensor_eff", "hbm")}


def patterns(sim):
    """{(name, bytes): pattern} of every element-wise kernel `sim --kernels` lists at microbench.py's shape."""
    out = subprocess.run([sim, *SHAPE, "--kernels"], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"^ {10}(\S+)\s+elementwise\s+(\d+)\s+\d+\s*(\S*)\s*$", line)
        if m:
            found[(m.group(1), int(m.group(2)))] = m.group(3) or "stream"
    return found


def catalog_section(path, section):
    """The numeric fields of one section of core/catalog.ini ("runtime pytorch", "gpu h200"): {field: value}."""
    found, inside = {}, False
    for line in open(path):
        line = line.strip()
        if line.startswith("["):
            inside = line == "[%s]" % section
        elif inside and "=" in line and not line.startswith("#"):
            k, v = (x.strip() for x in line.split("=", 1))
            try:
                found[k] = float(v)
            except ValueError:
                pass
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="FILE.h5[:GPU]")
    ap.add_argument("--sim", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sim"))
    ap.add_argument("--catalog", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                      "core", "catalog.ini"))
    ap.add_argument("--check", action="store_true", help="exit 1 when the catalog is off the files' rates")
    ap.add_argument("--tolerance", type=float, default=0.05, help="relative, for --check (default 0.05)")
    a = ap.parse_args()
    kinds = patterns(a.sim)
    per = {}  # pattern -> [(fraction of HBM, GB/s per SM)], one per file
    streams = []  # (GPU, its hbm_eff, its file's streams' fraction)
    print("%-34s %-10s %8s %10s %10s  %s" % ("file", "template", "kernels", "of HBM", "GB/s/SM", "kernels used"))
    for spec in a.files:
        path, *rest = spec.split(":")
        name = os.path.basename(path)
        gpu = rest[0] if rest else next((v for k, v in GPUS.items() if k in name), None)
        g = catalog_section(a.catalog, "gpu %s" % gpu) if gpu else {}
        if not g.get("hbm_gbps") or not g.get("sms"):
            sys.exit("rates.py: %s: name its catalog GPU as %s:GPU" % (path, path))
        hbm, sms = g["hbm_gbps"], int(g["sms"])
        with h5py.File(path, "r") as f:
            cal = f["calibration"]
            s = cal[sorted(cal.keys())[-1]]
            rows = [(r["name"].decode(), int(r["bytes"]), float(r["ns"])) for r in s["kernels"][:] if r["kind"] == 2]
            adamw = {"foreach": (84, s.attrs.get("adamw_ns_per_elem")), "fused": (28, s.attrs.get("adamw_fused_ns_per_elem"))}
        impossible = [n for n, b, ns in rows if kinds.get((n, b)) and b >= MIN_BYTES and ns > 0 and b / ns > hbm]
        if impossible:
            print("%-34s %-10s %8d %10s %10s  %s" % (name[:34], "left out", len(impossible), "> 1", "",
                                                     ", ".join(impossible) + ": faster than the HBM, so not the "
                                                     "bytes it moved"))
        for p in PATTERNS + ("stream",):
            used = [(n, b / ns) for n, b, ns in rows if kinds.get((n, b)) == p and b >= MIN_BYTES and ns > 0 and
                    n not in impossible]
            if not used:
                continue
            gbps = statistics.median(r for _, r in used)
            if p == "stream":
                streams.append((gpu, g.get("hbm_eff", 0), gbps / hbm))
            else:
                per.setdefault(p, []).append((gbps / hbm, gbps / sms))
            print("%-34s %-10s %8d %10.2f %10.1f  %s" % (name[:34], p, len(used), gbps / hbm, gbps / sms,
                                                         ", ".join(n for n, _ in used)))
        for form, (b, ns) in adamw.items():
            if ns and ns > 0:
                gbps = b / ns
                per.setdefault("optimizer", []).append((gbps / hbm, gbps / sms))
                print("%-34s %-10s %8s %10.2f %10.1f  AdamW %s, %d bytes an element" %
                      (name[:34], "optimizer", "-", gbps / hbm, gbps / sms, form, b))
    cat = catalog_section(a.catalog, "runtime pytorch")
    bad = 0
    print("\n%-10s %-18s %9s %9s" % ("template", "catalog field", "catalog", "files"))
    for p, (field, bound) in FIELDS.items():
        if p not in per or field not in cat:
            continue
        want = statistics.mean(x for x, _ in per[p]) if bound == "hbm" else max(y for _, y in per[p])
        off = abs(cat[field] / want - 1)
        bad += a.check and off > a.tolerance
        print("%-10s %-18s %9.3g %9.3g%s" % (p, field, cat[field], want,
                                             "  off by %.0f%%" % (100 * off) if off > a.tolerance else ""))
    for gpu, eff, got in streams:
        off = abs(eff / got - 1)
        bad += a.check and off > a.tolerance
        print("%-10s %-18s %9.3g %9.3g%s" % ("stream", "%s hbm_eff" % gpu, eff, got,
                                             "  off by %.0f%%" % (100 * off) if off > a.tolerance else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
