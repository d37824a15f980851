#!/usr/bin/env python3
"""random_configs.py - configurations drawn at random (a fixed seed), checked
for what must hold whatever the policy.

    random_configs.py sim N SEED          ./sim --json on N configurations
    random_configs.py policy-all K SEED   K rows of --policy all against ./sim alone
    random_configs.py sweep K SEED        K rows of two drawn sweeps each against ./sim alone
    random_configs.py gpu-run N SEED      ./gpu_run (CPU backend, MPI) on N policies
    random_configs.py emulated N SEED     ./gpu_run as rank 0 of a larger world, N policies
    random_configs.py accuracy N SEED     how far ./sim is on N drawn policies, rank 0 of 8 emulated
    random_configs.py accuracy-real N SEED  the same on 2 real MPI ranks

sim: a model, a cluster, a runtime and every policy key drawn at random;
./sim exits 0, or 2 with a message naming the key; within a minute; and
its JSON holds: a positive step time, exposed communication and compute
within it, MFU within [0, 1], the categories at the peak summing to the
peak allocated, reserved at least allocated, and `fits` saying whether
reserved is within the GPU's memory; every fifth also writes --trace,
whose events lie within the step, one after another on each stream, and
whose memory counters stay within the peaks, and gives the same JSON
without it (no timeline kept: the allocator skips repeated microbatches;
a fifth of the draws have 8 or 12 microbatches), as do three
configurations of 8 to 12 microbatches.

policy-all: a row of the ranking (step time, peak reserved, fits) is what
./sim gives for that policy alone (the ranking shares schedules and
allocator runs between policies; a single run shares nothing).

sweep: the same for a sweep file of four drawn axes (links, cluster, model
and policy keys, runtimes, as lists and ranges), whose configurations
share schedules and allocator runs between the values of link axes, one
run alone and one under MPI on 2 ranks: a row of the fastest that fit
(step time, peak reserved) is ./sim on that configuration alone, and
--advise on the same file answers with the fastest (or none, when none
fits); under a memory budget that a middle row fits in, what --sweep
lists and what --advise answers fit in it, the answer the fastest listed.

gpu-run: with the same model and global batch, every policy trains to the
same losses and parameters (their sum and sum of squares) as fsdp, to
1e-5 relative, and its peak allocated and reserved bytes are ./sim's for
the same configuration, byte for byte; first the configurations that
once broke it, then N drawn.

emulated: one process runs rank 0 of a world of 4, 8 or 16
(--emulate-world) under a drawn policy: finite losses, and ./sim's peak
allocated and reserved bytes for that world, byte for byte.

accuracy (a measurement, not a test: make test does not run it): a
calibration as rank 0 of 2 x 4 emulated, N drawn policies of the tiny
model measured so (2 warm-up and 8 measured steps), a calibration again,
and ./sim --compare with each: the step-time error, median, signed median
and worst, and the worst policy; exit 1 only when something failed to run.
accuracy-real: the same with 2 MPI ranks, one node of two (the policies
drawn for 2 ranks).
Both write their runs to one results file (run.out), and ./sim --compare
then rebuilds each run's configuration from the attributes the run
stored: every run compared, its predicted peak allocated and reserved
bytes the measured ones (a key the run does not store, or ./sim does not
read back, predicts another configuration).

A line per failure with the command to rerun it, then a summary line;
exit status 1 when anything failed. Standard library only.
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

SIM = os.environ.get("SIM", "./sim")
GPU_RUN = os.environ.get("GPU_RUN", "./gpu_run")
TIMEOUT = int(os.environ.get("RANDOM_TIMEOUT_S", "60"))
TOL = 1e-5
failed = 0


def mpi_env():
    """The environment of a program under mpirun: under `make asan`, leaks unchecked, since Open MPI's
    plugins leave what LeakSanitizer cannot attribute (tests/run.sh)."""
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = (env["ASAN_OPTIONS"] + ":" if env.get("ASAN_OPTIONS") else "") + "detect_leaks=0"
    return env


def fail(what, cmd):
    global failed
    failed += 1
    print("FAIL %s: %s" % (what, " ".join(cmd)), flush=True)


# ---- sim ------------------------------------------------------------------------

def draw_sim(rng):
    pick = rng.choice
    model = pick(("tiny", "small", "llama3-8b", "llama3-70b", "llama3-405b", "llama2-7b"))
    layers = rng.randint(1, 6)
    rt = pick(("testbed", "pytorch", "pytorch-compile"))
    sh = pick(("ddp", "fsdp", "zero2", "hsdp"))
    acc = pick(("sync-each", "no-sync", "defer-replica" if sh == "hsdp" else "no-sync",
                "partial:%d" % rng.randint(1, layers)))
    acs = ("none", "full", "selective") + (() if rt == "testbed" else
                                           ("per-op", "per-layer:%d" % rng.randint(1, layers)))
    a = ["--model", model, "--layers", str(layers), "--nodes", str(pick((1, 2, 3, 4, 16))),
         "--gpus-per-node", str(pick((1, 2, 4, 8))), "--runtime", rt, "--policy", sh,
         "--microbatches", str(rng.randint(1, 5)), "--accum", acc, "--ac", pick(acs),
         "--wrap", pick(("block", "block+io", "whole", "every:%d" % rng.randint(1, layers))),
         "--optim", pick(("foreach", "fused", "per-param")),
         "--precision", pick(("mixed", "mixed", "pure-bf16", "fp32")), "--loss", pick(("full", "chunked")),
         "--prefetch", str(pick((0, 1, 2, 8))),
         "--gpu", pick(("h100-sxm", "a100-40g", "a100-80g", "h200", "h100-96g", "h100-pcie", "h100-nvl")),
         "--seq", str(pick((16, 100, 512, 2048, 8192, 32768))), "--batch", str(pick((1, 1, 2, 3)))]
    if sh not in ("ddp", "zero2"):
        a += ["--reshard", pick(("yes", "no", "all-but-last"))]
    if sh != "ddp":
        a += ["--offload", pick(("none", "none", "optim", "params"))]
        if rng.random() < .2:
            a += ["--flat-params"] + (["--concat-last-only"] if rng.random() < .4 else [])
    if rng.random() < .2:
        a += ["--optim-in-backward"]
    if rng.random() < .15:
        a += ["--accum-dtype", pick(("fp32", "bf16"))]
    if rng.random() < .15:
        a += ["--reduce-dtype", pick(("fp32", "bf16"))]
    if rt != "testbed":
        if rng.random() < .3:
            a += ["--expandable-segments"]
        if rng.random() < .3 and "chunked" not in a:
            a += ["--hold-logits"]
        if rng.random() < .3:
            a += ["--sdpa", pick(("flash", "cudnn", "runtime"))]
    if rt == "pytorch-compile" and rng.random() < .5:
        a += ["--compile", pick(("model", "model+loss"))]
    if rng.random() < .3:
        a += ["--steps", str(rng.randint(1, 5)), "--warmup", str(rng.randint(0, 2))]
    if sh == "hsdp" and rng.random() < .3:
        a += ["--shard-group", str(pick((1, 2, 4, 8)))]
    if rng.random() < .2:
        a += ["--inter-gbps", str(pick((1, 12.5, 50, 400)))]
    if rng.random() < .2:  # microbatches enough to repeat (core/memory.h, memory.skip)
        a[a.index("--microbatches") + 1] = str(pick((8, 12)))
    return a


def sim_json(args):
    """./sim's JSON for args; (None, why) when it failed."""
    cmd = [SIM] + args + ["--json"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, "over %d s" % TIMEOUT
    if p.returncode == 2:
        first = p.stderr.strip().splitlines()[0] if p.stderr.strip() else ""
        named = re.search(r"\b(model|cluster|policy|run)\.[a-z_]+", first)
        return None, "refused" if named else "exit 2 without naming a key: %r" % first
    if p.returncode != 0:
        return None, "exit %d: %s" % (p.returncode, p.stderr.strip()[-300:])
    try:
        return json.loads(p.stdout), None
    except ValueError as ex:
        return None, "not JSON (%s)" % ex


# the configurations that once broke it
SIM_ONCE_BROKEN = [
    # a unit (the whole model) larger than an expandable range: the allocator walked off the range's end
    ["--model", "llama3-70b", "--nodes", "1", "--gpus-per-node", "4", "--runtime", "pytorch", "--wrap", "whole",
     "--precision", "pure-bf16", "--gpu", "h100-96g", "--expandable-segments", "--microbatches", "2"],
]


def trace_errors(path, j):
    """What a --trace file breaks: JSON with complete events (an op each), each inside the step (its
    start at or after 0, its end by the step's time), the ops of a stream one after another, and
    the memory counters at most the step's peaks (GiB, to 6 decimals)."""
    t = json.load(open(path))
    ev = t["traceEvents"] if isinstance(t, dict) else t
    errs, step_us, by_tid = [], j["step_time_s"] * 1e6, {}
    for e in ev:
        if e.get("ph") == "X":
            by_tid.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
            if e["ts"] < 0 or e["dur"] < 0 or e["ts"] + e["dur"] > step_us * (1 + 1e-6) + 1e-3:
                errs.append("%s at %r us for %r us, in a step of %r us" % (e["name"], e["ts"], e["dur"], step_us))
    if not by_tid:
        errs.append("no complete events")
    for tid, xs in by_tid.items():
        xs.sort()
        for a, b in zip(xs, xs[1:]):
            if b[0] < a[1] - 1e-3:  # microseconds to 3 decimals
                errs.append("%s starts at %r us, before %s ends at %r us (thread %r)" % (b[2], b[0], a[2], a[1], tid))
                break
    alloc = max((sum(e["args"].values()) for e in ev if e.get("ph") == "C" and e.get("name") == "memory"),
                default=None)
    reserved = max((e["args"]["reserved"] for e in ev if e.get("ph") == "C" and e.get("name") == "memory reserved"),
                   default=None)
    if alloc is None or reserved is None:
        errs.append("no memory counters")
    else:
        if alloc * 2**30 > j["peak_alloc_bytes"] + 2**30 * 1e-6 * 16:
            errs.append("memory counter at %r GiB, over the peak of %d bytes" % (alloc, j["peak_alloc_bytes"]))
        if reserved * 2**30 > j["peak_reserved_bytes"] + 2**30 * 1e-6:
            errs.append("reserved counter at %r GiB, over the peak of %d bytes" % (reserved, j["peak_reserved_bytes"]))
    return errs


# microbatches that repeat (core/memory.h, memory.skip), each run with a trace and without
SIM_SKIPS = [
    ["--model", "llama3-8b", "--nodes", "2", "--gpus-per-node", "8", "--runtime", "pytorch", "--microbatches", "8"],
    ["--model", "llama3-70b", "--nodes", "128", "--gpus-per-node", "8", "--runtime", "pytorch", "--policy", "hsdp",
     "--microbatches", "8"],
    ["--model", "llama3-70b", "--nodes", "16", "--gpus-per-node", "8", "--runtime", "pytorch-compile",
     "--microbatches", "12", "--ac", "per-op", "--reshard", "no"],
]


def same_without_trace(args, j):
    """What ./sim's JSON without --trace (no timeline: repeated microbatches skipped) has other than with it."""
    i = args.index("--trace")
    k, why = sim_json(args[:i] + args[i + 2:])
    if k is None:
        return ["without --trace: " + why]
    return ["without --trace, %s %r, with it %r" % (key, k.get(key), j.get(key))
            for key in sorted(set(j) | set(k)) if j.get(key) != k.get(key)]


def check_sim(n, seed):
    rng = random.Random(seed)
    ran = refused = traced = 0
    tmp = tempfile.mkdtemp(prefix="random_configs.")
    fixed = SIM_ONCE_BROKEN + SIM_SKIPS
    for i, args in enumerate(fixed + [draw_sim(rng) for _ in range(n)]):
        # every fifth, and the fixed ones: its trace too
        trace = os.path.join(tmp, "t%d.json" % i) if i % 5 == 0 or i < len(fixed) else None
        if trace:
            args = args + ["--trace", trace]
        j, why = sim_json(args)
        if why == "refused":
            refused += 1
            continue
        if j is None:
            fail("sim " + why, [SIM] + args + ["--json"])
            continue
        ran += 1
        st, errs = j["step_time_s"], []
        if not st > 0:
            errs.append("step time %r" % st)
        if not -1e-12 <= j["exposed_comm_s"] <= st * (1 + 1e-9):
            errs.append("exposed communication %r of a step of %r" % (j["exposed_comm_s"], st))
        if j["compute_s"] > st * (1 + 1e-6):
            errs.append("compute %r over the step's %r" % (j["compute_s"], st))
        if not 0 <= j["mfu"] <= 1:
            errs.append("MFU %r" % j["mfu"])
        if sum(j["peak_by_category"].values()) != j["peak_alloc_bytes"]:
            errs.append("categories sum to %d, peak %d" % (sum(j["peak_by_category"].values()), j["peak_alloc_bytes"]))
        if j["peak_reserved_bytes"] < j["peak_alloc_bytes"]:
            errs.append("reserved %d below allocated %d" % (j["peak_reserved_bytes"], j["peak_alloc_bytes"]))
        if j["fits"] != (j["peak_reserved_bytes"] <= j["gpu_bytes"]):
            errs.append("fits %r with %d reserved of %d" % (j["fits"], j["peak_reserved_bytes"], j["gpu_bytes"]))
        if trace:
            errs += ["trace: " + x for x in trace_errors(trace, j)]
            traced += 1
            # without the trace no timeline is kept, and the allocator may skip repeated microbatches: the same
            errs += same_without_trace(args, j)
        if errs:
            fail("sim: " + "; ".join(errs), [SIM] + args + ["--json"])
    if not failed:  # else the failures' commands name their traces
        shutil.rmtree(tmp)
    print("sim: %d configurations (%d that once broke it, %d of repeated microbatches, %d drawn, seed %d), %d "
          "simulated (%d traced and run again without), %d refused with a message, %d failed"
          % (len(fixed) + n, len(SIM_ONCE_BROKEN), len(SIM_SKIPS), n, seed, ran, traced, refused, failed))


# ---- policy-all -----------------------------------------------------------------

def policy_flags(line):
    """The flags of report_policy_line()'s text ("fsdp no-sync x2, wrap block, ...")."""
    parts = [x.strip() for x in line.split(",")]
    sh, acc, xm = parts[0].split()
    f = ["--policy", sh, "--accum", acc, "--microbatches", xm[1:]]
    for x in parts[1:]:
        word = x.split()[0]
        if word in ("wrap", "reshard", "ac", "offload", "sdpa"):
            f += ["--" + word, x.split(None, 1)[1]]
        elif word in ("mixed", "pure-bf16", "fp32"):
            f += ["--precision", word]
        elif word in ("foreach", "fused", "per-param"):
            f += ["--optim", word] + (["--optim-in-backward"] if x.endswith("in backward") else [])
        elif x.startswith("flat params"):
            f += ["--flat-params"] + (["--concat-last-only"] if "concat last only" in x else [])
        elif x == "logits held":
            f += ["--hold-logits"]
        else:
            raise SystemExit("random_configs.py: a policy line's part it does not know: %r" % x)
    return f


def check_policy_all(k, seed):
    rng = random.Random(seed)
    rows_seen = 0
    for rt in ("testbed", "pytorch", "pytorch-compile"):
        base = ["--model", "tiny", "--nodes", "2", "--gpus-per-node", "2", "--microbatches", "2", "--runtime", rt]
        p = subprocess.run([SIM] + base + ["--policy", "all", "--json"], capture_output=True, text=True)
        if p.returncode != 0:
            fail("policy all: exit %d" % p.returncode, [SIM] + base + ["--policy", "all", "--json"])
            continue
        rows = json.loads(p.stdout)
        for r in rng.sample(rows, min(k, len(rows))):
            args = base + policy_flags(r["policy"])
            j, why = sim_json(args)
            rows_seen += 1
            if j is None:
                fail("policy all: %s alone: %s" % (r["policy"], why), [SIM] + args + ["--json"])
            elif (abs(j["step_time_s"] - r["step_time_s"]) > 1e-6 * r["step_time_s"]
                  or j["peak_reserved_bytes"] != r["peak_reserved_bytes"] or j["fits"] != r["fits"]):
                fail("policy all: %s ranked at %r s, %d bytes, alone %r s, %d bytes"
                     % (r["policy"], r["step_time_s"], r["peak_reserved_bytes"], j["step_time_s"],
                        j["peak_reserved_bytes"]), [SIM] + args + ["--json"])
    print("policy-all: %d rows of tiny's rankings (three runtimes, seed %d) against ./sim alone, %d failed"
          % (rows_seen, seed, failed))


# ---- sweep ----------------------------------------------------------------------

# axes a sweep may draw: (section, key, values; a string is a range as a sweep file writes it)
SWEEP_AXES = [
    ("cluster", "inter_gbps", ("6.25..100 times 4", "12, 48, 400", "25, 50")),
    ("cluster", "intra_gbps", ("150, 450", "100..900 step 400")),
    ("cluster", "nodes", ("1, 2, 4", "1, 16")),
    ("cluster", "gpu", ("h100-sxm, a100-80g", "h200, h100-96g")),
    ("policy", "sharding", ("fsdp, zero2, hsdp", "ddp, fsdp")),
    ("policy", "accum", ("sync-each, no-sync", "sync-each, partial:1, defer-replica")),
    ("policy", "reshard", ("yes, no", "yes, all-but-last")),
    ("policy", "microbatches", ("1, 2", "1..4")),
    ("policy", "ac", ("none, full, selective",)),
    ("policy", "wrap", ("block, block+io", "whole, every:2")),
    ("policy", "optim", ("foreach, fused, per-param",)),
    ("policy", "runtime", ("testbed, pytorch", "pytorch, pytorch-compile")),
    ("policy", "prefetch", ("1, 2",)),
    ("model", "seq", ("1024, 4096",)),
    ("run", "batch", ("1, 2",)),
]


def check_sweep(k, seed):
    """Two drawn sweeps, one run alone and one on 2 MPI ranks: k rows of each against ./sim alone."""
    rng = random.Random(seed)
    said = []
    for ranks in (1, 2):
        tmp = tempfile.mkdtemp(prefix="random_configs.")
        path = os.path.join(tmp, "sweep.ini")
        axes = rng.sample(SWEEP_AXES, 4)
        sections = {}
        for sec, key, vals in axes:
            sections.setdefault(sec, []).append((key, rng.choice(vals)))
        layers = rng.randint(1, 4)
        sections.setdefault("model", []).append(("layers", str(layers)))
        with open(path, "w") as f:
            f.write("[sweep]\nexperiment = %s\n" % os.path.abspath("experiments/llama3.ini"))
            for sec, kv in sections.items():
                f.write("[%s]\n" % sec + "".join("%s = %s\n" % x for x in kv))
        where = {key: sec for sec, kv in sections.items() for key, _ in kv}
        cmd = (MPIRUN + ["-np", "2"] if ranks == 2 else []) + [SIM, "--sweep", path, "--json", "--top", "100000"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=10 * TIMEOUT,
                           env=mpi_env() if ranks == 2 else None)
        rows, before = [], failed
        if p.returncode != 0:
            fail("sweep: exit %d: %s" % (p.returncode, p.stderr.strip()[-300:]), cmd)
        else:  # the fastest rows that fit, as many as --sweep lists (the others are in --out's table)
            rows = json.loads(p.stdout)["fastest"]
            # --advise on the same file: its answer is the fastest that fits
            acmd = [x for x in cmd if x not in ("--top", "100000")] + ["--advise"]
            a = subprocess.run(acmd, capture_output=True, text=True, timeout=10 * TIMEOUT,
                               env=mpi_env() if ranks == 2 else None)
            best = json.loads(a.stdout).get("best") if a.returncode == 0 else None
            # (--advise prints 17 digits, --sweep 9)
            top = rows[0]["step_time_s"] if rows else 0
            tied = [r["index"] for r in rows if abs(r["step_time_s"] - top) <= 1e-8 * top]
            if a.returncode != 0 or (rows and (not best or best["index"] not in tied)) or (not rows and best):
                fail("sweep: --advise (exit %d) answered %r; the fastest that fit: %r"
                     % (a.returncode, best and (best["index"], best["step_time_s"]), rows[:1]), acmd)
            if rows and ranks == 1:  # under a memory budget a row of the middle fits: what both list fits in it
                gib = "%.2f" % (rows[len(rows) // 2]["peak_reserved_bytes"] / 2**30 + 0.005)
                lim = float(gib) * 2**30
                b = subprocess.run(cmd + ["--memory-budget", gib], capture_output=True, text=True, timeout=10 * TIMEOUT)
                c = subprocess.run(acmd + ["--memory-budget", gib], capture_output=True, text=True,
                                   timeout=10 * TIMEOUT)
                under = json.loads(b.stdout)["fastest"] if b.returncode == 0 else []
                best = json.loads(c.stdout).get("best") if c.returncode == 0 else None
                if (b.returncode or c.returncode or not under or any(r["peak_reserved_bytes"] > lim for r in under)
                        or not best or best["peak_reserved_bytes"] > lim
                        or abs(best["step_time_s"] - under[0]["step_time_s"]) > 1e-8 * under[0]["step_time_s"]):
                    fail("sweep: --memory-budget %s GiB: --sweep (exit %d) listed %r, --advise (exit %d) answered %r"
                         % (gib, b.returncode, [(r["index"], r["peak_reserved_bytes"]) for r in under[:3]],
                            c.returncode, best and (best["index"], best["peak_reserved_bytes"])),
                         cmd + ["--memory-budget", gib])
        for r in rng.sample(rows, min(k, len(rows))):
            args = ["experiments/llama3.ini", "--set", "model.layers=%d" % layers]
            for kv in r["configuration"].split():
                key, val = kv.split("=", 1)
                args += ["--set", "%s.%s=%s" % (where[key], key, val)]
            one, why = sim_json(args)
            if one is None:
                fail("sweep: row %d (%s) alone: %s" % (r["index"], r["configuration"], why), [SIM] + args + ["--json"])
            elif (abs(one["step_time_s"] - r["step_time_s"]) > 1e-8 * r["step_time_s"]  # 9 digits in --json
                  or one["peak_reserved_bytes"] != r["peak_reserved_bytes"]):
                fail("sweep: row %d (%s) at %r s, %d bytes; alone %r s, %d bytes (the sweep: %s)"
                     % (r["index"], r["configuration"], r["step_time_s"], r["peak_reserved_bytes"],
                        one["step_time_s"], one["peak_reserved_bytes"], path), [SIM] + args + ["--json"])
        if failed == before:
            shutil.rmtree(tmp)
        said.append("%d rows of %s on %d rank%s" % (min(k, len(rows)), "/".join(a[1] for a in axes), ranks,
                                                    "" if ranks == 1 else "s"))
    print("sweep: %s (seed %d) against ./sim alone, %d failed" % ("; ".join(said), seed, failed))


# ---- gpu-run --------------------------------------------------------------------

BASE = ["experiments/tiny.ini", "--set", "run.warmup=0", "--set", "run.steps=3"]
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
# the configurations that once broke it: (ranks, layers, microbatches, settings)
ONCE_BROKEN = [
    # ./sim took the first step, which made the optimizer's state in the segments it had, for a
    # repeat of itself: the state dead in every forward (1.77 MB predicted, 2.80 MB run)
    (4, 2, 1, ["policy.sharding=ddp", "cluster.gpus_per_node=4", "policy.optim=per-param",
               "policy.runtime=pytorch"]),
]


def gpu_run(np, settings, extra=(), out=None):
    """Run ./gpu_run (appending the run to `out` when given): (exit status, losses and parameters, peak memory, cmd)."""
    cmd = (MPIRUN + ["-np", str(np), GPU_RUN] + BASE + [x for s in settings for x in ("--set", s)]
           + (["--set", "run.out=" + out] if out else []) + list(extra))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=10 * TIMEOUT, env=mpi_env())
    nums = []
    for line in p.stdout.splitlines():
        m = re.match(r"step \d+ loss (\S+)", line)
        if m:
            nums.append(float(m.group(1)))
        m = re.match(r"params sum (\S+) sumsq (\S+)$", line)
        if m:
            nums += [float(m.group(1)), float(m.group(2))]
    mem = re.search(r"^summary: peak memory (\d+) bytes allocated \(.*?\), (\d+) reserved", p.stdout, re.M)
    return p.returncode, nums, (int(mem.group(1)), int(mem.group(2))) if mem else None, cmd


def draw_gpu_run(rng):
    pick = rng.choice
    np, layers, m = pick((2, 3, 4)), rng.randint(1, 4), rng.randint(1, 3)
    sh = pick(("ddp", "fsdp", "zero2", "hsdp")) if np == 4 else pick(("ddp", "fsdp", "zero2"))
    s = ["policy.sharding=" + sh]
    s += ["cluster.nodes=2", "cluster.gpus_per_node=2"] if sh == "hsdp" else ["cluster.gpus_per_node=%d" % np]
    s += ["policy.accum=" + pick(("sync-each", "no-sync", "partial:%d" % rng.randint(1, layers))
                                  + (("defer-replica",) if sh == "hsdp" else ()))]
    if sh in ("fsdp", "hsdp"):
        s += ["policy.reshard=" + pick(("yes", "no", "all-but-last"))]
    s += ["policy.wrap=" + pick(("block", "block+io", "whole", "every:%d" % rng.randint(1, layers))),
          "policy.optim=" + pick(("foreach", "fused", "per-param")),
          "policy.runtime=" + pick(("testbed", "pytorch", "pytorch", "pytorch-compile")),
          "policy.ac=" + pick(("none", "full", "selective")),
          "policy.loss=" + pick(("full", "chunked"))]
    # (expandable segments, held logits and the sdpa backend are PyTorch's, which gpu_run refuses: ./sim prices them)
    if "policy.runtime=pytorch-compile" in s and rng.random() < .5:
        s += ["policy.compile=" + pick(("model", "model+loss"))]
    if rng.random() < .3:
        s += ["policy.optim_in_backward=true"]
    if sh != "ddp":
        s += ["policy.offload=" + pick(("none", "optim", "params"))]
        if rng.random() < .25:
            s += ["policy.flat_params=true"] + (["policy.concat_last_only=true"] if rng.random() < .5 else [])
    if rng.random() < .3:
        s += ["policy.prefetch=%d" % pick((0, 2))]
    return np, layers, m, s


def check_compare(what, out, cmds):
    """./sim --compare of the runs in `out` (one per command of cmds, in order): each run compared,
    its predicted peak allocated and reserved bytes the measured ones. Priced by the catalog
    (--calibration none): memory does not depend on the prices, and a machine with a calibration
    file of its own may lack sessions of a drawn world size on the run's fabric (refused, rightly)."""
    cmd = [SIM, "--compare", out, "--calibration", "none", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=10 * TIMEOUT)
    if p.returncode != 0:
        fail("%s: ./sim --compare exit %d: %s" % (what, p.returncode, p.stderr.strip()[-300:]), cmd)
        return
    runs = json.loads(p.stdout)["runs"]
    if len(runs) != len(cmds):
        fail("%s: ./sim --compare compared %d runs of %d" % (what, len(runs), len(cmds)), cmd)
        return
    for r, run_cmd in zip(runs, cmds):
        got = (r["predicted_peak_alloc_bytes"], r["predicted_peak_reserved_bytes"])
        want = (r["measured_peak_alloc_bytes"], r["measured_peak_reserved_bytes"])
        if got != want:
            fail("%s: ./sim --compare of run %s (%s) predicted %r bytes (allocated, reserved), measured %r; the run"
                 % (what, r["run"], r["policy"], got, want), run_cmd)


def check_gpu_run(n, seed):
    rng = random.Random(seed)
    refs = {}
    cases = ONCE_BROKEN + [draw_gpu_run(rng) for _ in range(n)]
    tmp = tempfile.mkdtemp(prefix="random_configs.")
    out, ran = os.path.join(tmp, "runs.h5"), []
    for np, layers, m, settings in cases:
        shape = ["model.layers=%d" % layers, "policy.microbatches=%d" % m]
        if (np, layers, m) not in refs:
            rc, nums, _, cmd = gpu_run(np, shape + ["cluster.gpus_per_node=%d" % np])
            if rc != 0 or not nums:
                fail("gpu_run: fsdp, the reference, exit %d" % rc, cmd)
                continue
            refs[(np, layers, m)] = nums
        # to the compared file when the calibration has sessions of that many ranks (2 and 4, not 3)
        rc, nums, mem, cmd = gpu_run(np, shape + settings, out=out if np != 3 else None)
        if rc != 0:
            fail("gpu_run: exit %d" % rc, cmd)
            continue
        if np != 3:
            ran.append(cmd)
        ref = refs[(np, layers, m)]
        worst = (max(abs(x - y) / max(abs(x), abs(y), 1e-30) for x, y in zip(nums, ref))
                 if len(nums) == len(ref) else float("inf"))
        if worst > TOL:
            fail("gpu_run: losses and parameters %.2e from fsdp's (at most %g)" % (worst, TOL), cmd)
        j, why = sim_json(BASE + [x for s in shape + settings for x in ("--set", s)])
        if j is None:
            fail("gpu_run: ./sim " + why, cmd)
        elif mem != (j["peak_alloc_bytes"], j["peak_reserved_bytes"]):
            fail("gpu_run: peak memory %r, ./sim's %r" % (mem, (j["peak_alloc_bytes"], j["peak_reserved_bytes"])),
                 cmd)
    if ran:
        check_compare("gpu_run", out, ran)
    if not failed:  # else the failures' commands name the file
        shutil.rmtree(tmp)
    print("gpu-run: %d policies (%d that once broke it, %d drawn, seed %d) against fsdp, ./sim and ./sim "
          "--compare, %d failed" % (len(cases), len(ONCE_BROKEN), n, seed, failed))


def check_emulated(n, seed):
    """One process as rank 0 of a world of 4, 8 or 16 (--emulate-world): ./sim's memory for that world."""
    rng = random.Random(seed)
    tmp = tempfile.mkdtemp(prefix="random_configs.")
    out, ran = os.path.join(tmp, "runs.h5"), []
    for _ in range(n):
        _, layers, m, settings = draw_gpu_run(rng)
        world = rng.choice((4, 8, 16))
        hsdp = "policy.sharding=hsdp" in settings
        settings = [x for x in settings if not x.startswith("cluster.")]
        settings += (["cluster.nodes=%d" % (world // 4), "cluster.gpus_per_node=4"] if hsdp
                     else ["cluster.nodes=1", "cluster.gpus_per_node=%d" % world])
        settings = ["model.layers=%d" % layers, "policy.microbatches=%d" % m] + settings
        rc, nums, mem, cmd = gpu_run(1, settings, ["--emulate-world", str(world)], out=out)
        if rc != 0:
            fail("emulated: exit %d" % rc, cmd)
            continue
        ran.append(cmd)
        if not nums or not all(abs(x) < 1e30 for x in nums):  # NaN fails the comparison too
            fail("emulated: losses and parameters %r" % nums, cmd)
        j, why = sim_json(BASE + [x for y in settings for x in ("--set", y)])
        if j is None:
            fail("emulated: ./sim " + why, cmd)
        elif mem != (j["peak_alloc_bytes"], j["peak_reserved_bytes"]):
            fail("emulated: peak memory %r, ./sim's for %d ranks %r"
                 % (mem, world, (j["peak_alloc_bytes"], j["peak_reserved_bytes"])), cmd)
    if ran:
        check_compare("emulated", out, ran)
    if not failed:  # else the failures' commands name the file
        shutil.rmtree(tmp)
    print("emulated: %d policies as rank 0 of 4, 8 or 16 (seed %d) against ./sim and ./sim --compare, %d failed"
          % (n, seed, failed))


def check_accuracy(n, seed, real=False):
    """Calibrate, measure n drawn policies as rank 0 of 2 x 4 emulated (real: on 2 MPI ranks), calibrate
    again, compare with each."""
    rng = random.Random(seed)
    tmp = tempfile.mkdtemp(prefix="random_configs.")
    cal, out = os.path.join(tmp, "cal.h5"), os.path.join(tmp, "runs.h5")
    if real:
        launch, cluster, where = MPIRUN + ["-np", "2"], ["--set", "cluster.gpus_per_node=2"], "on 2 MPI ranks"
    else:
        launch, where = [], "as rank 0 of 2 x 4 emulated"
        cluster = ["--set", "cluster.nodes=2", "--set", "cluster.gpus_per_node=4", "--emulate-world", "8"]
    calibrate = launch + [GPU_RUN, "experiments/tiny.ini"] + cluster + ["--calibrate", cal]
    for i in range(n + 2):
        if i in (0, n + 1):
            p = subprocess.run(calibrate, capture_output=True, text=True, timeout=60 * TIMEOUT, env=mpi_env())
            if p.returncode != 0:
                fail("accuracy: calibration exit %d: %s" % (p.returncode, p.stderr.strip()[-200:]), calibrate)
                return
            continue
        np, layers, m, settings = draw_gpu_run(rng)
        while real and np != 2:
            np, layers, m, settings = draw_gpu_run(rng)
        settings = ["model.layers=%d" % layers, "policy.microbatches=%d" % m, "run.warmup=2", "run.steps=8"] + \
            [x for x in settings if not x.startswith("cluster.")]
        cmd = (launch + [GPU_RUN, "experiments/tiny.ini"] + [y for x in settings for y in ("--set", x)] + cluster
               + ["--set", "run.out=" + out])
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=10 * TIMEOUT, env=mpi_env())
        if p.returncode != 0:
            fail("accuracy: exit %d" % p.returncode, cmd)
    for session in ("000000", "000001"):
        cmd = [SIM, "--compare", out, "--calibration", "%s@%s" % (cal, session), "--json"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=10 * TIMEOUT)
        if p.returncode != 0:
            fail("accuracy: ./sim --compare exit %d: %s" % (p.returncode, p.stderr.strip()[-300:]), cmd)
            continue
        runs = json.loads(p.stdout)["runs"]
        errs = sorted(r["step_err"] for r in runs)
        worst = max(runs, key=lambda r: abs(r["step_err"]))
        print("accuracy: %d policies %s (seed %d), calibrated %s: step time within "
              "%.1f%% at the median (signed %+.1f%%), %.1f%% at worst (%s)"
              % (len(runs), where, seed, "before" if session == "000000" else "after",
                 100 * sorted(abs(e) for e in errs)[len(errs) // 2], 100 * errs[len(errs) // 2],
                 100 * abs(worst["step_err"]), worst["policy"]))
    if not failed:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("sim", "policy-all", "sweep", "gpu-run", "emulated", "accuracy",
                                                 "accuracy-real"):
        sys.exit(__doc__.split("\n\n")[1])
    what, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    {"sim": check_sim, "policy-all": check_policy_all, "sweep": check_sweep, "gpu-run": check_gpu_run,
     "emulated": check_emulated, "accuracy": check_accuracy,
     "accuracy-real": lambda n, seed: check_accuracy(n, seed, real=True)}[what](count, seed)
    sys.exit(1 if failed else 0)
