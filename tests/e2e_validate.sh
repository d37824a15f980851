#!/usr/bin/env bash
# e2e_validate.sh - the calibrate, run, compare loop, quickly (make validate
# runs it whole; its accuracy is a benchmark figure, not a test):
#
#   1. gpu/run/validate.sh --quick calibrates a few points, runs four
#      policies of the tiny model on 2 ranks and compares them;
#   2. the calibration file has a session of 2 ranks with kernels, GEMMs,
#      passes and collectives of every kind the shardings use, each
#      value a rate a CPU core reaches (GFLOP/s, GB/s, a collective's
#      latency), more FLOPs taking longer, a large message cheaper per byte;
#   3. "$SIM" --compare --json is one well-formed object with a run per
#      measured run and the fields the schema names; the predicted peak
#      allocated and reserved memory equal the measured, byte for byte;
#      the errors are what the step times say; Kendall's tau is in [-1, 1];
#   4. each measured run holds every rank's timings of its recorded step
#      (rank 0's are its ops); the predictions were appended once, each naming the run it predicts,
#      with the calibration it used; comparing again appends nothing and
#      leaves every run as it was, with the calibration named by another
#      path to it too; two comparisons of one file at once append each
#      prediction once; a write that fails (a file size limit) exits 1,
#      counts none appended and leaves the file as it was;
#   4b. a configuration measured three times: the report compares each
#      configuration at the median of its runs (the medians, worst and
#      Kendall's tau the runs' JSON gives), besides each run alone;
#   4d. one configuration on a real fabric and as rank 0 of an emulated
#      one is two configurations, neither measured again;
#   4c. the ranking where the noise separates configurations: two
#      configurations each measured more than once, every run of one
#      faster than every run of the other, are one pair whose tau is the
#      predictions' sign; when their runs overlap, no pair;
#   4e. a run that says its attention was cuDNN's is priced at the cuDNN
#      figures, one of this project's kernel at its own (forward and
#      backward apart);
#   4g. a calibration of the pytorch runtime's job times the copies its
#      schedule launches (FSDP2's per-tensor unpack and pack), each kind
#      and size a kernels row, and ./sim prices those ops at them, not as
#      passes;
#   4f. --catalog-now prices a run by today's catalog's efficiencies and
#      tiles, the machine's figures as the run recorded them;
#   (6) the build of gpu_run that measured the calibration (its session's
#      binary) and that ran each run (the run's): the same, said true; a
#      session of another build named in each run's report and false; a
#      session that does not say, null;
#   5. --compare on a missing file, with a configuration flag, or with
#      --calibration missing, empty or given twice, exits 2;
#      on a file that is no results file (text, empty, /dev/null, a
#      directory, an HDF5 file without /runs), one with no measured run, or
#      one that cannot be appended to (a read-only directory), exits 2
#      saying so before any prediction; a run without a source is refused (exit 1,
#      one line); none of these files is written; runs with attributes of
#      many values where one is expected, a NaN step, no step measured, a
#      NaN compute time, step percentiles out of order or op times out of
#      order are refused with the reason, the others compared;
#   6. the same loop as one process on an emulated fabric (validate.sh
#      --quick --emulate: rank 0 of 2 nodes x 4): the calibration is a
#      session of 8 ranks on the emulated fabric, with the collectives of
#      the groups the shardings have (8 across nodes, hsdp's 4 inside a
#      node and 2 across); every emulated run is compared (none refused),
#      memory byte for byte; the emulated all-reduces of ddp across nodes
#      take the latency ./sim's catalog prices (a double binary tree's,
#      core/fabric.h), not the ring's; a real 8-rank session appended
#      after the emulated one leaves the emulated runs' prices as they
#      were (a run is priced by its own fabric's sessions), a file whose
#      8-rank sessions are all real refuses them naming the fabric, and
#      --calibration none prices them by the catalog; each comparison says
#      when its calibration was measured and how long before the run;
#   7. a PyTorch run (fsdp_bench.py's schema): its kernels by kind of work
#      against the predicted ops, null for what it did not measure; its
#      collectives against the schedule's (attach_schedule.py);
#   8. published runs (experiments/published/torchtitan.py): each becomes a
#      measured run whose step is its tokens per step over the published
#      rate, compared with its reserved peak alone where that is published
#      (the allocated peak null, not an infinite error), as one figure with
#      no noise band; a per-layer:K policy is named with its K; only runs
#      of the same model, cluster and batch are ranked against each other.
# One line per check, then `N passed, N failed`; non-zero exit on failure.
set -u
cd "$(dirname "$0")/.."
. tests/mpi_local.sh
SIM=${SIM:-./sim}
GPU_RUN=${GPU_RUN:-./gpu_run}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
printf 'leak:%s\n' libmpi.so libopen-pal.so libopen-rte.so libpmix.so libhwloc.so libevent mca_ >"$tmp/lsan.supp"
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$tmp/lsan.supp"

ok() { echo "ok   validate $1"; passed=$((passed + 1)); }
bad() { echo "FAIL validate $1: $2"; failed=$((failed + 1)); }

if ! bash gpu/run/validate.sh --quick --out "$tmp" >"$tmp/log" 2>&1; then
	bad "pipeline" "validate.sh --quick failed: $(tail -5 "$tmp/log")"
	echo "$passed passed, $failed failed"
	exit 1
fi
ok "pipeline: calibrate, 4 runs, compare"
runs=$(ls "$tmp"/runs/*.h5)
cal=$(ls "$tmp"/calibration/*.h5)

# 2. the calibration
if out=$(/usr/bin/python3 - "$cal" <<'EOF'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
s = f["calibration"]
assert len(s) == 1, "%d sessions" % len(s)
g = s[list(s)[0]]
assert g.attrs["ranks"] == 2, g.attrs["ranks"]
for d in ("kernels", "gemm", "passes", "collectives"):
    assert len(g[d]) > 0, d + " is empty"
seen = set(int(k) for k in g["collectives"]["kind"])
assert len(seen) == 3, "collective kinds measured: %s (all-gather, reduce-scatter, all-reduce expected)" % seen
assert all(v > 0 for v in g["kernels"]["ns"]), "a kernel of no time"
# every model kernel also beside a collective, beside two at once (fsdp's all-gather and reduce-scatter
# streams) and beside an all-reduce (ddp's, a calibrated variant); the GEMM grid alone only
for field in ("ns_comm", "ns_comm2", "ns_ar"):
    assert all(v > 0 for v in g["kernels"][field]), "a kernel not measured beside: " + field
assert all(v == 0 for v in g["gemm"]["ns_comm2"]) and all(v == 0 for v in g["gemm"]["ns_ar"])
assert g.attrs["dispatch_ns"] > 0 and g.attrs["wake_ns"] > 0
# the values are measurements of this machine, in the units the schema names: rates a CPU core reaches
# (a time stored in microseconds, or a loop that does nothing, lands a factor of 1000 or more outside)
def within(what, v, lo, hi):
    assert lo <= v <= hi, "%s: %.4g, outside [%g, %g]" % (what, v, lo, hi)
gemm = g["gemm"][()]
for r in gemm:
    within("GEMM %dx%dx%d, GFLOP/s" % (r["m"], r["n"], r["k"]), r["flops"] / r["ns"], 0.02, 1000)
# more work takes longer: the GEMM of the most FLOPs against that of the fewest (20 times fewer or more)
big, small = gemm[gemm["flops"].argmax()], gemm[gemm["flops"].argmin()]
assert big["flops"] >= 20 * small["flops"], (big["flops"], small["flops"])
assert big["ns"] > small["ns"] * big["flops"] / small["flops"] / 8, "GEMM time %g ns at %d FLOPs, %g ns at %d" % (
    big["ns"], big["flops"], small["ns"], small["flops"])
for d in ("passes", "copies"):
    for r in g[d][()]:
        within("%s of %d bytes, GB/s" % (d, r["bytes"]), r["bytes"] / r["ns"], 0.05, 1000)
# a collective of two processes: at least a microsecond, under a second; per byte, a large message is far
# cheaper than one of 1 KiB (whose time is the latency)
coll = g["collectives"][()]
for kind in set(coll["kind"]):
    c = coll[coll["kind"] == kind]
    for r in c:
        within("collective %d of %d bytes, ns" % (kind, r["bytes"]), r["ns"], 1e3, 1e9)
    lo, hi = c[c["bytes"].argmin()], c[c["bytes"].argmax()]
    assert lo["bytes"] <= 1024 and hi["bytes"] >= 64 * 1024, (lo["bytes"], hi["bytes"])
    assert hi["bytes"] / hi["ns"] > 4 * lo["bytes"] / lo["ns"], "collective %d: %g B/ns at %d bytes, %g at %d" % (
        kind, hi["bytes"] / hi["ns"], hi["bytes"], lo["bytes"] / lo["ns"], lo["bytes"])
for a in ("dispatch_ns", "wake_ns", "issue_ns"):
    within(a, g.attrs[a], 1, 1e6)
within("adamw_ns_per_elem", g.attrs["adamw_ns_per_elem"], 0.01, 1000)
print("%d kernels, %d GEMMs, %d collective points" % (len(g["kernels"]), len(g["gemm"]), len(g["collectives"])))
EOF
); then ok "calibration: $out"; else bad "calibration" "$out"; fi

# 3. the comparison, as JSON
"$SIM" --compare "$runs" --calibration "$cal" --json >"$tmp/cmp.json" 2>"$tmp/cmp.err"
rc=$?
if [ $rc = 0 ] && out=$(/usr/bin/python3 - "$tmp/cmp.json" "$runs" <<'EOF'
import json, math, sys
import h5py
d = json.load(open(sys.argv[1]))
f = h5py.File(sys.argv[2], "r")
runs = d["runs"]
assert len(runs) == 4, "%d runs" % len(runs)
need = ["run", "policy", "measured_step_s", "predicted_step_s", "step_err", "measured_peak_alloc_bytes",
        "predicted_peak_alloc_bytes", "peak_alloc_err", "by_kind", "by_stream", "within_noise"]
errs, beside = [], []
for r in runs:
    for k in need:
        assert k in r, "run %s lacks %s" % (r.get("run"), k)
    assert r["measured_step_s"] > 0 and r["predicted_step_s"] > 0
    e = (r["predicted_step_s"] - r["measured_step_s"]) / r["measured_step_s"]
    assert abs(e - r["step_err"]) < 1e-7 * max(1, abs(e)), "step_err %g, the times say %g" % (r["step_err"], e)
    assert r["predicted_peak_alloc_bytes"] == r["measured_peak_alloc_bytes"], "run %s: peak alloc %d vs %d" % (
        r["run"], r["predicted_peak_alloc_bytes"], r["measured_peak_alloc_bytes"])
    assert r["predicted_peak_reserved_bytes"] == r["measured_peak_reserved_bytes"], "run %s: reserved" % r["run"]
    assert r["peak_alloc_err"] == 0
    for k in ("forward", "backward", "allgather", "reduce_scatter"):
        if "ddp" in r["policy"] and k in ("allgather", "reduce_scatter"):
            continue
        assert k in r["by_kind"], "run %s (%s) has no %s" % (r["run"], r["policy"], k)
    assert r["measured_step_p10_s"] <= r["measured_step_s"] <= r["measured_step_p90_s"]
    # the compute stream's timed ops, alone or beside a collective as measured: together the stream's time
    co, cs = r["compute_ops"], r["by_stream"]["compute"]
    # counted again from the run's own timeline: a compute op (stream 0) of some time is beside a
    # collective (all-gather 0, reduce-scatter 8, all-reduce 9) that overlaps over 1% of it
    ops = f["runs"][r["run"]]["ops"][()]
    coll = [(int(o["start_ns"]), int(o["end_ns"])) for o in ops if int(o["kind"]) in (0, 8, 9)]
    n = [0, 0]
    for o in ops:
        b0, e0 = int(o["start_ns"]), int(o["end_ns"])
        if int(o["stream"]) == 0 and int(o["kind"]) not in (0, 8, 9) and e0 > b0:
            n[sum(max(0, min(e, e0) - max(b, b0)) for b, e in coll) > 0.01 * (e0 - b0)] += 1
    assert [co["alone"]["ops"], co["beside_collective"]["ops"]] == n, (co, n)
    assert abs(co["alone"]["measured_s"] + co["beside_collective"]["measured_s"] - cs["measured_s"]) <= \
        1e-6 * cs["measured_s"], (co, cs)
    beside.append(co["beside_collective"]["ops"])
    errs.append(abs(e))
    # the ranks' skew: at each collective of the two ranks, the first's wait for the last to start it
    if "hsdp" not in r["policy"]:
        br = f["runs"][r["run"]]["ops_by_rank"][()]
        k = len(ops)
        w = sum(abs(int(br["start_ns"][k + i]) - int(br["start_ns"][i])) for i in range(k)
                if int(ops["kind"][i]) in (0, 8, 9)) * 1e-9
        assert w > 0 and abs(r["measured_rank_wait_s"] - w) <= 1e-6 * w + 1e-9, (r["run"], r["measured_rank_wait_s"], w)
assert max(beside) > 0, beside  # fsdp gathers the next block while this one computes
errs.sort()
med = (errs[1] + errs[2]) / 2
# the times are printed to 9 significant digits: the errors they give agree to about that
assert abs(med - d["median_abs_step_err"]) < 1e-7 * max(1, med), "median %.12g, the runs say %.12g" % (
    d["median_abs_step_err"], med)
assert abs(errs[-1] - d["worst_abs_step_err"]) < 1e-7 * max(1, errs[-1])
# 4 policies of one group: 6 pairs, fsdp against fsdp with the chunked loss among them (a policy key the
# policy line leaves out: those are two policies, not one measured twice)
assert d["ranked_pairs"] == 6, "%d ranked pairs (4 runs of one group: 6)" % d["ranked_pairs"]
assert d["repeated_configs"] == 0, "%d configurations measured more than once (none was)" % d["repeated_configs"]
assert -1 <= d["kendall_tau"] <= 1
# Kendall's tau counted again over the 6 pairs of the 4 policies: concordant less discordant, ties neither
# (the JSON prints 9 significant digits)
sgn = lambda x: (x > 0) - (x < 0)
pairs = [(a, b) for i, a in enumerate(runs) for b in runs[i + 1:]]
tau = sum(sgn(a["measured_step_s"] - b["measured_step_s"]) * sgn(a["predicted_step_s"] - b["predicted_step_s"])
          for a, b in pairs) / len(pairs)
assert len(pairs) == 6 and abs(tau - d["kendall_tau"]) < 1e-8, (tau, d["kendall_tau"])
assert d["compared"] == 4 and d["failed"] == 0
# none repeated: each configuration is its run
assert d["configurations"] == 4 and d["config_ranked_pairs"] == 6, (d["configurations"], d["config_ranked_pairs"])
assert d["config_median_abs_step_err"] == d["median_abs_step_err"] and d["config_kendall_tau"] == d["kendall_tau"]
print("4 runs, median |err| %.1f%%, tau %.2f" % (100 * med, d["kendall_tau"]))
EOF
); then ok "--json: $out"; else bad "--json" "rc $rc: $out $(head -3 "$tmp/cmp.err")"; fi

# 4. what was appended
if out=$(/usr/bin/python3 - "$runs" "$cal" <<'EOF'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
r = f["runs"]
names = sorted(r)
assert len(names) == 8, "%d runs (4 measured + 4 predictions)" % len(names)
measured = [n for n in names if r[n].attrs["source"] == "gpu_run"]
sims = [n for n in names if r[n].attrs["source"] == "sim"]
assert len(measured) == 4 and len(sims) == 4
assert sorted(r[n].attrs["compares"] for n in sims) == measured
for n in measured:
    ops, br = r[n]["ops"][()], r[n]["ops_by_rank"][()]
    assert len(br) == 2 * len(ops), "run %s: %d rows of ops_by_rank for 2 ranks of %d ops" % (n, len(br), len(ops))
    assert (br["rank"][:len(ops)] == 0).all() and (br["rank"][len(ops):] == 1).all()
    assert (br["start_ns"][:len(ops)] == ops["start_ns"]).all() and (br["end_ns"][:len(ops)] == ops["end_ns"]).all(), \
        "run %s: rank 0's rows are not the ops dataset's times" % n
    assert (br["end_ns"] >= br["start_ns"]).all() and br["end_ns"][len(ops):].max() > 0
# each prediction names the calibration as it stood: the file and its newest session (core/calibration.h)
pinned = sys.argv[2] + "@" + max(h5py.File(sys.argv[2], "r")["calibration"])
for n in sims:
    assert r[n].attrs["cluster.calibration"] == pinned, (n, r[n].attrs["cluster.calibration"], pinned)
    m = r[r[n].attrs["compares"]]
    assert r[n]["ops"].shape == m["ops"].shape, "ops of %s and %s" % (n, r[n].attrs["compares"])
print("4 predictions, each naming its run")
EOF
); then ok "appended: $out"; else bad "appended" "$out"; fi
sum1=$(md5sum <"$runs")
"$SIM" --compare "$runs" --calibration "$cal" >"$tmp/cmp2.txt" 2>&1
if grep -q '^0 predictions appended' "$tmp/cmp2.txt" && [ "$(md5sum <"$runs")" = "$sum1" ]; then
	ok "comparing again appends nothing and leaves the file as it was"
else
	bad "compare again" "$(tail -2 "$tmp/cmp2.txt")"
fi
# the same calibration spelled as another path to it (./, .., absolute) is the same: nothing appended
same=1
for spelled in "$(dirname "$cal")/../calibration/$(basename "$cal")" "$(realpath --relative-to=. "$cal")"; do
	"$SIM" --compare "$runs" --calibration "$spelled" >"$tmp/cmp3.txt" 2>&1 || same=0
	grep -q '^0 predictions appended' "$tmp/cmp3.txt" || same=0
done
if [ $same = 1 ] && [ "$(md5sum <"$runs")" = "$sum1" ]; then
	ok "the calibration named by another path to it: nothing appended again"
else
	bad "the calibration by another path" "$(tail -1 "$tmp/cmp3.txt")"
fi
# two comparisons of one file at once: each prediction appended once (the second writer, under the file's
# lock, finds the first one's and leaves them out)
cp "$runs" "$tmp/par.h5"
/usr/bin/python3 -c '
import sys, h5py
f = h5py.File(sys.argv[1], "r+")
for n in [n for n in f["runs"] if f["runs"][n].attrs["source"] == "sim"]:
    del f["runs"][n]' "$tmp/par.h5"
"$SIM" --compare "$tmp/par.h5" --calibration "$cal" >"$tmp/par1.txt" 2>&1 &
"$SIM" --compare "$tmp/par.h5" --calibration "$cal" >"$tmp/par2.txt" 2>&1
wait $!
n1=$(sed -n 's/^\([0-9]*\) predictions* appended.*/\1/p' "$tmp/par1.txt")
n2=$(sed -n 's/^\([0-9]*\) predictions* appended.*/\1/p' "$tmp/par2.txt")
if [ "$(/usr/bin/python3 -c 'import sys, h5py; print(len(h5py.File(sys.argv[1], "r")["runs"]))' "$tmp/par.h5")" = 8 ] &&
	[ "$((n1 + n2))" = 4 ]; then
	ok "two comparisons at once: 4 predictions in all ($n1 and $n2 appended)"
else
	bad "two comparisons at once" "appended $n1 and $n2: $(tail -1 "$tmp/par1.txt"); $(tail -1 "$tmp/par2.txt")"
fi
# a write that fails says so, and counts nothing appended (the directory made read-only after the read is
# too late for the check before: a full disk is what this stands for)
cp "$tmp/par.h5" "$tmp/fail.h5"
/usr/bin/python3 -c '
import sys, h5py
f = h5py.File(sys.argv[1], "r+")
for n in [n for n in f["runs"] if f["runs"][n].attrs["source"] == "sim"]:
    del f["runs"][n]' "$tmp/fail.h5"
sumf=$(md5sum <"$tmp/fail.h5")
(trap '' XFSZ; ulimit -f $(($(stat -c %s "$tmp/fail.h5") / 1024)); exec "$SIM" --compare "$tmp/fail.h5" \
	--calibration "$cal" --json) >"$tmp/fail.json" 2>"$tmp/fail.err"
rc=$?
if [ $rc = 1 ] && grep -q "the predictions were not appended (the file is as it was)" "$tmp/fail.err" &&
	/usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["appended"] == 0, d["appended"]' \
		"$tmp/fail.json" && [ "$(md5sum <"$tmp/fail.h5")" = "$sumf" ]; then
	ok "a write that fails (a file size limit): exit 1, 0 appended in the JSON, the file as it was"
else
	bad "a write that fails" "exit $rc: $(head -2 "$tmp/fail.err"); $(tail -c 80 "$tmp/fail.json")"
fi
if grep -q "^run 000000 .*fsdp" "$tmp/cmp2.txt" && grep -q "step-time error median" "$tmp/cmp2.txt"; then
	ok "text report: per run and over the runs"
else
	bad "text report" "$(head -3 "$tmp/cmp2.txt")"
fi

# 4g. the schedules' own copies: a calibration of the pytorch runtime's job times each kind and size of copy
# its schedule launches (FSDP2's per-tensor unpack and pack: copy_out, copy_in) as a kernels row of that name
# and bytes, and ./sim prices those ops at it: the same run priced without the rows (a copy of the file that
# lacks them) prices them as passes, another figure
pyjob=(experiments/tiny.ini --set cluster.nodes=1 --set cluster.gpus_per_node=2 --set policy.runtime=pytorch)
if mpirun --allow-run-as-root --oversubscribe -np 2 "$GPU_RUN" "${pyjob[@]}" --calibrate "$tmp/pycal.h5" --quick \
	>"$tmp/pycal.log" 2>&1 &&
	mpirun --allow-run-as-root --oversubscribe -np 2 "$GPU_RUN" "${pyjob[@]}" --set run.warmup=1 --set run.steps=2 \
		--set run.out="$tmp/pyruns.h5" >"$tmp/pyrun.log" 2>&1 &&
	"$SIM" "${pyjob[@]}" --schedule >"$tmp/pysched.txt" 2>/dev/null &&
	/usr/bin/python3 - "$tmp/pycal.h5" "$tmp/pycal-none.h5" <<'EOF' >"$tmp/pycopy.log" 2>&1 &&
import sys, h5py, numpy as np
src, dst = sys.argv[1], sys.argv[2]
with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
    f.copy(f["calibration"], g, "calibration")
    k = g["calibration"]["000000"]["kernels"]
    rows = k[()]
    keep = np.array([r["name"].decode() not in ("copy_out", "copy_in") for r in rows])
    assert not keep.all(), "no copy rows"
    del g["calibration"]["000000"]["kernels"]
    g["calibration"]["000000"].create_dataset("kernels", data=rows[keep])
EOF
	"$SIM" --compare "$tmp/pyruns.h5" --calibration "$tmp/pycal.h5" --json >"$tmp/pycmp.json" 2>/dev/null &&
	cp "$tmp/pyruns.h5" "$tmp/pyruns2.h5" &&
	"$SIM" --compare "$tmp/pyruns2.h5" --calibration "$tmp/pycal-none.h5" --json >"$tmp/pycmp-none.json" 2>/dev/null &&
	out=$(/usr/bin/python3 - "$tmp/pycal.h5" "$tmp/pysched.txt" "$tmp/pycmp.json" "$tmp/pycmp-none.json" <<'EOF'
import json, sys, h5py
k = h5py.File(sys.argv[1], "r")["calibration"]["000000"]["kernels"][()]
rows = {(r["name"].decode(), int(r["bytes"])): float(r["ns"]) for r in k if r["name"].decode() in ("copy_out", "copy_in")}
ops = []  # the schedule's copies: kind, bytes
for line in open(sys.argv[2]):
    f = line.split()
    if len(f) > 5 and f[0].isdigit() and f[1] in ("COPYOUT", "COPYIN"):  # op, label (3 words), stream, bytes
        ops.append(("copy_out" if f[1] == "COPYOUT" else "copy_in", int(f[5])))
assert ops and set(ops) == set(rows), (sorted(set(ops)), sorted(rows))
with_rows = json.load(open(sys.argv[3]))["runs"][0]["by_kind"]
without = json.load(open(sys.argv[4]))["runs"][0]["by_kind"]
for kind in ("copy_out", "copy_in"):
    floor = sum(rows[o] for o in ops if o[0] == kind) * 1e-9  # each op at least its row (beside others: more)
    assert with_rows[kind]["predicted_s"] >= floor * 0.999, (kind, with_rows[kind], floor)
    assert abs(with_rows[kind]["predicted_s"] - without[kind]["predicted_s"]) > 1e-9, (kind, with_rows[kind], without[kind])
print("%d copies of %d kinds and sizes timed; priced at them, not as passes" % (len(ops), len(rows)))
EOF
	); then
	ok "the schedule's copies: $out"
else
	bad "the schedule's copies" "${out:-} $(tail -3 "$tmp/pycal.log" "$tmp/pyrun.log" "$tmp/pycopy.log" 2>/dev/null)"
fi

# 4b. a configuration measured again, twice (make validate's rounds): compared at the median of its three
# runs (not their mean)
cp "$runs" "$tmp/rep.h5"
again() {
	mpirun --allow-run-as-root --oversubscribe -np 2 "$GPU_RUN" experiments/tiny.ini --set cluster.nodes=1 \
		--set cluster.gpus_per_node=2 --set model.name=tiny --set run.warmup=1 --set run.steps=3 \
		--set run.out="$tmp/rep.h5" >"$tmp/rep.log" 2>&1
}
if again && again &&
	"$SIM" --compare "$tmp/rep.h5" --calibration "$cal" --json >"$tmp/rep.json" 2>"$tmp/rep.err" &&
	"$SIM" --compare "$tmp/rep.h5" --calibration "$cal" >"$tmp/rep.txt" 2>&1 &&
	out=$(/usr/bin/python3 - "$tmp/rep.json" "$tmp/rep.h5" <<'EOF'
import json, sys, statistics, h5py
d = json.load(open(sys.argv[1]))
f = h5py.File(sys.argv[2], "r")["runs"]
key = lambda r: tuple(sorted((k, str(v)) for k, v in f[r["run"]].attrs.items() if k.startswith("policy.")))
runs = d["runs"]
assert len(runs) == 6, "%d runs" % len(runs)
by = {}
for r in runs:
    by.setdefault(key(r), []).append(r)
thrice = [v for v in by.values() if len(v) == 3]
assert len(by) == 4 and len(thrice) == 1, "%d configurations, %d measured three times" % (len(by), len(thrice))
assert d["configurations"] == 4 and d["repeated_configs"] == 1
rep = [r["measured_step_s"] for r in thrice[0]]
assert len(set(r["predicted_step_s"] for r in thrice[0])) == 1, "one configuration, several predictions"
errs = []
for v in by.values():
    m = statistics.median(r["measured_step_s"] for r in v)
    errs.append(abs((v[0]["predicted_step_s"] - m) / m))
errs.sort()
med = statistics.median(errs)
assert abs(med - d["config_median_abs_step_err"]) < 1e-7 * max(1, med), (med, d["config_median_abs_step_err"])
assert abs(errs[-1] - d["config_worst_abs_step_err"]) < 1e-7 * max(1, errs[-1])
spread = (max(rep) - min(rep)) / min(rep)
assert abs(spread - d["repeat_spread_median"]) < 1e-7 * max(1, spread)
# 6 runs: 15 pairs less the 3 of the configuration against itself; 4 configurations: 6
assert d["ranked_pairs"] == 12 and d["config_ranked_pairs"] == 6, (d["ranked_pairs"], d["config_ranked_pairs"])
print("fsdp measured three times: %.1f%% apart; configuration errors median %.1f%%" % (100 * spread, 100 * med))
EOF
); then
	if grep -q "^per configuration, at the median of its runs (4 configurations, 1 measured more than once)" "$tmp/rep.txt" &&
		grep -q "^policy ranking where the machine's noise separates the configurations: no such pair" "$tmp/rep.txt"; then
		ok "a configuration measured three times: $out"
	else
		bad "configuration measured three times, text" "$(tail -4 "$tmp/rep.txt")"
	fi
else
	bad "configuration measured three times" "$(tail -3 "$tmp/rep.log") $(cat "$tmp/rep.err" 2>/dev/null) ${out:-}"
fi

# 4d. one configuration on a real fabric and as rank 0 of an emulated one: two machines, two configurations
# (each priced for its own fabric), not one measured twice whose runs' spread would be called the noise
cp "$runs" "$tmp/fab.h5"
if "$GPU_RUN" experiments/tiny.ini --set cluster.nodes=1 --set cluster.gpus_per_node=2 --set model.name=tiny \
	--set run.warmup=1 --set run.steps=3 --emulate-world 2 --set run.out="$tmp/fab.h5" >"$tmp/fab.log" 2>&1 &&
	"$SIM" --compare "$tmp/fab.h5" --calibration none --json >"$tmp/fab.json" 2>"$tmp/fab.err" &&
	out=$(/usr/bin/python3 - "$tmp/fab.json" 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["runs"]) == 5, "%d runs" % len(d["runs"])
assert d["configurations"] == 5 and d["repeated_configs"] == 0, \
    "%d configurations, %d measured more than once" % (d["configurations"], d["repeated_configs"])
print("5 runs, 5 configurations, none repeated")
EOF
); then
	ok "a configuration on a real and on an emulated fabric: $out"
else
	bad "real and emulated fabrics" "$(tail -2 "$tmp/fab.err" "$tmp/fab.log")${out:+: $out}"
fi

# 4c. the ranking where the noise separates two configurations: a second configuration measured twice (a copy
# of its run), the measured steps set so that every run of one is faster than every run of the other (one
# pair, whose sign is the predictions'), then so that they overlap (no pair)
separated() { # FILE FSDP_STEPS OTHER_STEPS: prints the predicted sign, then separated_pairs and _kendall_tau
	/usr/bin/python3 - "$tmp/rep.h5" "$1" "$2" "$3" "$tmp/rep.json" <<'EOF' || return 1
import json, shutil, sys, h5py
src, dst, a, b = sys.argv[1], sys.argv[2], [float(x) for x in sys.argv[3].split()], [float(x) for x in sys.argv[4].split()]
pred = {r["run"]: r["predicted_step_s"] for r in json.load(open(sys.argv[5]))["runs"]}
shutil.copy(src, dst)
f = h5py.File(dst, "r+")
g = f["runs"]
measured = [n for n in sorted(g) if g[n].attrs["source"] != "sim"]
pol = lambda n: tuple(sorted((k, str(v)) for k, v in g[n].attrs.items() if k.startswith("policy.")))
fsdp = [n for n in measured if sum(pol(n) == pol(m) for m in measured) == 3]
other = [n for n in measured if n not in fsdp][0]
copy = "%06d" % (max(int(n) for n in g) + 1)
g.copy(g[other], copy)
for n, t in list(zip(fsdp, a)) + list(zip([other, copy], b)):
    s = g[n]["summary"].attrs
    s["step_time_s"], s["step_time_p10_s"], s["step_time_p90_s"] = t, t, t
d = pred[other] - pred[fsdp[0]]
print(1 if d > 0 else -1 if d < 0 else 0)
EOF
	"$SIM" --compare "$1" --calibration "$cal" --json 2>/dev/null |
		/usr/bin/python3 -c 'import json, sys; d = json.load(sys.stdin); t = d["separated_kendall_tau"]; print(d["separated_pairs"], t if t is None else "%.1f" % t)'
}
sep=$(separated "$tmp/sep.h5" "0.100 0.101 0.102" "0.200 0.201" | tr '\n' ' ')
mix=$(separated "$tmp/mix.h5" "0.100 0.101 0.102" "0.1015 0.300" | tr '\n' ' ')
sign=${sep%% *}
"$SIM" --compare "$tmp/sep.h5" --calibration "$cal" >"$tmp/sep.txt" 2>&1
if [ "$sep" = "$sign 1 $sign.0 " ] && [ "${mix#* }" = "0 None " ] && [ "$sign" != 0 ] &&
	grep -q "^policy ranking where the machine's noise separates the configurations (every run of one faster than every run of the other): Kendall's tau $sign.000 over 1 pairs" "$tmp/sep.txt"; then
	ok "ranking where the noise separates configurations: 1 pair (tau $sign), none when their runs overlap"
else
	bad "separated ranking" "separated: '$sep', overlapping: '$mix'; $(grep -i "separates" "$tmp/sep.txt")"
fi

# A copy of FILE's newest calibration session appended to it, every time doubled, its own prices (no
# series), with the attributes NAME=VALUE given; prints the new session's name.
append_doubled() { # FILE [NAME=VALUE]...
	/usr/bin/python3 - "$@" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    g = f["calibration"]
    old = max(g)
    new = "%06d" % (int(old) + 1)
    g.copy(g[old], new)
    for t in g[new].values():
        rows = t[()]
        for k in ("ns", "ns_comm", "ns_comm2", "ns_ar", "ns_busy"):
            if k in rows.dtype.names:
                rows[k] *= 2
        t[...] = rows
    for a in ("dispatch_ns", "issue_ns", "wake_ns", "adamw_ns_per_elem", "host_adamw_ns_per_elem"):
        g[new].attrs[a] = 2 * g[new].attrs[a]
    if "series" in g[new].attrs:  # its own prices, not a series' medians
        del g[new].attrs["series"]
    for kv in sys.argv[2:]:
        k, v = kv.split("=", 1)
        g[new].attrs[k] = v
print(new)
EOF
}

# 4d. a session appended to the calibration later (a copy of its newest, every time doubled) changes the
# file's prices, not how the runs' predictions read it: FILE@NNNNNN, the file as it stood, predicts them
# again as they were (nothing appended), the file itself as it is now, twice as slow
old_sess=$(/usr/bin/python3 -c 'import sys, h5py; print(max(h5py.File(sys.argv[1], "r")["calibration"]))' "$cal")
before=$("$SIM" --compare "$runs" --calibration "$cal" --json 2>/dev/null)
if new_sess=$(append_doubled "$cal") && sum2=$(md5sum <"$runs") &&
	"$SIM" --compare "$runs" --calibration "$cal@$old_sess" --json >"$tmp/pin_old.json" 2>"$tmp/pin.err" &&
	[ "$(md5sum <"$runs")" = "$sum2" ] &&
	"$SIM" --compare "$runs" --calibration "$cal" --json >"$tmp/pin_new.json" 2>>"$tmp/pin.err" &&
	out=$(/usr/bin/python3 - "$tmp/pin_old.json" "$tmp/pin_new.json" "$cal" "$old_sess" "$new_sess" "$runs" "$before" <<'EOF'
import json, sys, h5py
old, new, before = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), json.loads(sys.argv[7])
cal, o, n = sys.argv[3], sys.argv[4], sys.argv[5]
p = lambda d: [r["predicted_step_s"] for r in d["runs"]]
assert p(old) == p(before), "the file as it stood priced the runs otherwise: %s, %s" % (p(old), p(before))
assert all(r["calibration"] == cal + "@" + o for r in old["runs"]), [r["calibration"] for r in old["runs"]]
assert all(r["calibration"] == cal + "@" + n for r in new["runs"]), [r["calibration"] for r in new["runs"]]
ratios = [b / a for a, b in zip(p(old), p(new))]
assert all(abs(x - 2) < 1e-3 for x in ratios), ratios  # every time the runs are priced by, doubled
r = h5py.File(sys.argv[6], "r")["runs"]
cals = sorted(str(r[k].attrs["cluster.calibration"]) for k in r if r[k].attrs["source"] == "sim")
assert cals == [cal + "@" + o] * 4 + [cal + "@" + n] * 4, cals
print("the newest session's prices %.2f to %.2f times the step" % (min(ratios), max(ratios)))
EOF
	); then
	ok "the calibration as it stood (FILE@NNNNNN): $out"
else
	bad "the calibration as it stood" "$(cat "$tmp/pin.err" 2>/dev/null) ${out:-}"
fi

# Files BASE-NAME.h5, each a copy of SRC's first gpu_run run whose attributes are set as
# 'NAME: KEY=VALUE ...' says (one argument per file).
variants() { # SRC BASE 'NAME: KEY=VALUE ...'...
	/usr/bin/python3 - "$@" <<'EOF'
import sys, h5py
src, base = sys.argv[1], sys.argv[2]
with h5py.File(src, "r") as f:
    first = min(k for k in f["runs"] if f["runs"][k].attrs["source"] == "gpu_run")
    for spec in sys.argv[3:]:
        name, _, attrs = spec.partition(":")
        with h5py.File("%s-%s.h5" % (base, name), "w") as g:
            f.copy(f["runs"][first], g.require_group("runs"), name=first)
            for kv in attrs.split():
                k, v = kv.split("=", 1)
                g["runs"][first].attrs[k] = v
EOF
}

# 4e. the attention kernel a gpu_run run launched prices it: a run that says its attention was
#     cuDNN's (kernels.attention_used, as the CUDA backend records it) is priced at the cuDNN
#     figures, the same as a run of this project's kernel whose attn_eff and attn_bwd_eff are
#     those figures; without the attribute, at this project's kernel's (attention is priced
#     forward and backward apart: swapping the two figures moves the prediction)
if variants "$runs" "$tmp/attn" \
	'cudnn: kernels.attention_used=cudnn cluster.cudnn_fwd_eff=0.05 cluster.cudnn_bwd_eff=0.09 cluster.attn_half_seq=0' \
	'same: cluster.attn_eff=0.05 cluster.attn_bwd_eff=0.09 cluster.attn_half_seq=0' \
	'mma: kernels.attention_used=mma cluster.cudnn_fwd_eff=0.05 cluster.cudnn_bwd_eff=0.09 cluster.attn_half_seq=0' \
	'swapped: cluster.attn_eff=0.09 cluster.attn_bwd_eff=0.05 cluster.attn_half_seq=0' \
	&& for v in cudnn same mma swapped; do
	"$SIM" --compare "$tmp/attn-$v.h5" --calibration none --json >"$tmp/attn-$v.json" 2>>"$tmp/attn.err" || break
done && out=$(/usr/bin/python3 - "$tmp"/attn-{cudnn,same,mma,swapped}.json <<'EOF'
import json, sys
cudnn, same, mma, swapped = (json.load(open(p))["runs"][0]["predicted_step_s"] for p in sys.argv[1:5])
assert cudnn == same, "cuDNN's figures %r, this project's kernel at them %r" % (cudnn, same)
assert mma != cudnn, "a run of this project's kernel priced at cuDNN's figures: %r" % mma
assert swapped != same, "forward and backward priced alike: %r" % swapped
print("cuDNN's attention %.3f ms, this project's at the same figures %.3f, at its own %.3f, swapped %.3f"
      % (1e3 * cudnn, 1e3 * same, 1e3 * mma, 1e3 * swapped))
EOF
); then
	ok "the attention kernel a run launched: $out"
else
	bad "the attention kernel a run launched" "${out:-} $(cat "$tmp/attn.err" 2>/dev/null)"
fi

# 4f. --catalog-now: the GPU's model constants (efficiencies, tiles) from today's catalog, not the
#     run's record; the machine's figures (here its memory bandwidth) as recorded. A run recording
#     other efficiencies than today's is priced by them, and with --catalog-now as one recording
#     today's; one recording another bandwidth stays apart either way
if variants "$runs" "$tmp/cat" 'today:' \
	'old: cluster.gemm_eff=0.5 cluster.attn_eff=0.5 cluster.hbm_eff=0.5' 'machine: cluster.hbm_gbps=1' \
	&& for v in today old machine; do
	"$SIM" --compare "$tmp/cat-$v.h5" --calibration none --json >"$tmp/cat-$v.json" 2>>"$tmp/cat.err" &&
		"$SIM" --compare "$tmp/cat-$v.h5" --calibration none --catalog-now --json >"$tmp/cat-$v-now.json" 2>>"$tmp/cat.err" ||
		break
done && out=$(/usr/bin/python3 - "$tmp"/cat-{today,old,machine}{,-now}.json <<'EOF'
import json, sys
p = [json.load(open(f))["runs"][0]["predicted_step_s"] for f in sys.argv[1:7]]
today, today_now, old, old_now, machine, machine_now = p
assert today == today_now, "today's record priced otherwise by today's catalog: %r %r" % (today, today_now)
assert old != today, "the record's efficiencies were not read: %r" % old
assert old_now == today, "--catalog-now kept the record's efficiencies: %r, today %r" % (old_now, today)
assert machine_now == machine != today, "the machine's figure: %r %r %r" % (machine, machine_now, today)
print("as recorded %.3f ms, by today's catalog %.3f (today's record %.3f); the machine's bandwidth kept (%.3f)"
      % (1e3 * old, 1e3 * old_now, 1e3 * today, 1e3 * machine_now))
EOF
); then
	ok "--catalog-now: $out"
else
	bad "--catalog-now" "${out:-} $(cat "$tmp/cat.err" 2>/dev/null)"
fi
"$SIM" --catalog-now >/dev/null 2>"$tmp/cn.err"
rc=$?
if [ $rc = 2 ] && grep -q "^--catalog-now goes with --compare" "$tmp/cn.err"; then
	ok "--catalog-now without --compare: exit 2, saying so"
else
	bad "--catalog-now without --compare" "rc $rc: $(head -2 "$tmp/cn.err")"
fi

# 5. bad input
"$SIM" --compare "$tmp/none.h5" >/dev/null 2>"$tmp/e1"
rc1=$?
"$SIM" --compare "$runs" --layers 3 >/dev/null 2>"$tmp/e2"
rc2=$?
if [ $rc1 = 2 ] && grep -q "none.h5" "$tmp/e1" && [ $rc2 = 2 ] && grep -q "not allowed" "$tmp/e2"; then
	ok "bad input exits 2 with a message"
else
	bad "bad input" "rc $rc1 $(cat "$tmp/e1"); rc $rc2 $(cat "$tmp/e2")"
fi
# --calibration with no value, an empty one, or twice: each said as what it is (it read as a flag not
# allowed with --compare, the empty one as no flag, the second silently won)
calbad=""
for c in "--calibration|--calibration: missing value" "--calibration=|--calibration: an empty value" \
	"--calibration none --calibration $cal|--calibration is given twice ('none', then '$cal')"; do
	# shellcheck disable=SC2086
	"$SIM" --compare "$runs" ${c%%|*} >"$tmp/cb.out" 2>"$tmp/cb.err"
	rc=$?
	{ [ $rc = 2 ] && grep -qF -- "${c#*|}" "$tmp/cb.err" && [ ! -s "$tmp/cb.out" ]; } ||
		calbad="$calbad [${c%%|*}] rc $rc: $(head -1 "$tmp/cb.err");"
done
if [ -z "$calbad" ]; then
	ok "--calibration missing, empty or given twice: exit 2, each said"
else
	bad "--calibration flags" "$calbad"
fi
# what is no results file (text, empty, a device, a directory) is said so, not HDF5's error; a results file
# that cannot be appended to (its directory read-only) is refused before any prediction, not after them all
echo "measured 1.2 ms" >"$tmp/notes.txt"
: >"$tmp/empty.h5"
mkdir "$tmp/ro"
if [ "$(id -u)" != 0 ]; then
	cp "$runs" "$tmp/ro/r.h5" && chmod a-w "$tmp/ro"
elif mount -t tmpfs -o size=64m tmpfs "$tmp/ro" 2>/dev/null; then # root writes anywhere: a read-only file system
	cp "$runs" "$tmp/ro/r.h5" && mount -o remount,ro "$tmp/ro"
fi
notfile=""
for f in notes.txt:"notes.txt: is not an HDF5 results file (data/README.md)" empty.h5:"is not an HDF5 results file" \
	/dev/null:"/dev/null: is a character device, not a results file" .:"is a directory, not a results file" \
	ro/r.h5:"r.h5 cannot be appended to (the predictions are appended to it)"; do
	arg=${f%%:*}
	[ "${arg#/}" = "$arg" ] && arg=$tmp/$arg
	if [ "$arg" = "$tmp/ro/r.h5" ] && [ ! -e "$arg" ]; then
		echo "skip validate --compare on a read-only file system: cannot mount a tmpfs here"
		continue
	fi
	"$SIM" --compare "$arg" >"$tmp/e8.out" 2>"$tmp/e8"
	rc8=$?
	{ [ $rc8 = 2 ] && grep -qF -- "${f#*:}" "$tmp/e8" && ! grep -q "H5Fopen\|cannot create" "$tmp/e8" &&
		[ ! -s "$tmp/e8.out" ]; } || notfile="$notfile ${f%%:*}: rc $rc8 $(head -2 "$tmp/e8");"
done
[ ! -e "$tmp/ro/r.h5" ] || cmp -s "$runs" "$tmp/ro/r.h5" || notfile="$notfile the read-only copy changed;"
[ "$(id -u)" = 0 ] && umount "$tmp/ro" 2>/dev/null
chmod u+w "$tmp/ro"
if [ -z "$notfile" ]; then
	ok "no results file (text, empty, /dev/null, a directory), a read-only one: exit 2 before any prediction"
else
	bad "unusable files" "$notfile"
fi
# files that hold nothing to compare, and a run outside the schema: each said so, and left as it was
"$SIM" --model tiny --out "$tmp/simonly.h5" >/dev/null
/usr/bin/python3 - "$tmp/other.h5" "$tmp/nosource.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("x", data=[1.0, 2.0])
with h5py.File(sys.argv[2], "w") as f:
    f.create_group("runs/000000").attrs["policy.sharding"] = "fsdp"
EOF
sums=$(md5sum "$tmp/simonly.h5" "$tmp/other.h5" "$tmp/nosource.h5")
"$SIM" --compare "$tmp/other.h5" >/dev/null 2>"$tmp/e3"
rc3=$?
"$SIM" --compare "$tmp/simonly.h5" >/dev/null 2>"$tmp/e4"
rc4=$?
"$SIM" --compare "$tmp/nosource.h5" >/dev/null 2>"$tmp/e5"
rc5=$?
if [ $rc3 = 2 ] && grep -q "not a results file" "$tmp/e3" && [ $rc4 = 2 ] && grep -q "holds no measured run" "$tmp/e4" &&
	[ $rc5 = 1 ] && grep -q "run 000000: no 'source' attribute" "$tmp/e5" && [ "$(wc -l <"$tmp/e5")" = 1 ] &&
	[ "$sums" = "$(md5sum "$tmp/simonly.h5" "$tmp/other.h5" "$tmp/nosource.h5")" ]; then
	ok "no results file, no measured run, a run without its source: each said, nothing written"
else
	bad "nothing to compare" "rc $rc3 $(cat "$tmp/e3"); rc $rc4 $(cat "$tmp/e4"); rc $rc5 $(cat "$tmp/e5")"
fi
# attributes of many values where one is expected, a step time that is no time: the runs refused, the others compared
cp "$runs" "$tmp/damaged.h5"
/usr/bin/python3 - "$tmp/damaged.h5" <<'EOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    names = sorted(n for n in f["runs"] if f["runs"][n].attrs["source"] != "sim")
    f["runs"][names[0]].attrs["source"] = np.array(["gpu_run"] * 40, dtype=h5py.string_dtype())
    f["runs"][names[1]]["summary"].attrs["step_time_s"] = np.full(64, 1.0)
    f["runs"][names[2]]["summary"].attrs["step_time_s"] = np.nan
EOF
"$SIM" --compare "$tmp/damaged.h5" --calibration "$cal" --json >"$tmp/dmg.json" 2>"$tmp/e6"
rc6=$?
if [ $rc6 = 1 ] && grep -q "attribute source holds 40 values where one is expected" "$tmp/e6" &&
	grep -q "attribute step_time_s holds 64 values" "$tmp/e6" && grep -q "step_time_s = nan) is not a time" "$tmp/e6" &&
	/usr/bin/python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
assert j['failed'] == 3 and j['compared'] >= 1, (j['failed'], j['compared'])
" "$tmp/dmg.json"; then
	ok "runs with array attributes or a NaN step: refused with the reason, the rest compared"
else
	bad "damaged runs" "rc $rc6 $(head -5 "$tmp/e6")"
fi
# a summary that is no measurement besides its step (no step measured, a NaN compute time, percentiles out of
# order): each run refused naming the attribute and what is allowed, the others compared
cp "$runs" "$tmp/damaged2.h5"
/usr/bin/python3 - "$tmp/damaged2.h5" <<'EOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    names = sorted(n for n in f["runs"] if f["runs"][n].attrs["source"] != "sim")
    f["runs"][names[0]]["summary"].attrs["steps"] = np.int32(-5)
    f["runs"][names[1]]["summary"].attrs["compute_s"] = np.nan
    m = f["runs"][names[2]]["summary"].attrs
    m["step_time_p10_s"], m["step_time_p90_s"] = m["step_time_p90_s"] * 2, m["step_time_p10_s"]
EOF
"$SIM" --compare "$tmp/damaged2.h5" --calibration "$cal" --json >"$tmp/dmg2.json" 2>"$tmp/e7"
rc7=$?
if [ $rc7 = 1 ] && grep -q "summary steps = -5 (allowed: 1 or more measured steps)" "$tmp/e7" &&
	grep -q "summary compute_s = nan (allowed: a finite number, 0 or more)" "$tmp/e7" &&
	grep -q "above step_time_p90_s = .* (allowed: p10 <= p90)" "$tmp/e7" &&
	/usr/bin/python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
assert j['failed'] == 3 and j['compared'] == 1, (j['failed'], j['compared'])
" "$tmp/dmg2.json"; then
	ok "runs with no step measured, a NaN compute time, percentiles out of order: refused with the reason"
else
	bad "damaged summaries" "rc $rc7 $(head -5 "$tmp/e7")"
fi
# a run of a newer schema or an unknown source (both were compared as measured runs): the whole file
# refused with exit 2 before any prediction, nothing appended; a run without schema_version is refused alone
/usr/bin/python3 - "$runs" "$tmp" <<'EOF'
import shutil, sys, h5py, numpy as np
src, tmp = sys.argv[1], sys.argv[2]
for name, key, value in (("newer", "schema_version", np.int32(999)), ("unknown_source", "source", "gpu_rnu"),
                         ("escaped_source", "source", "x\x1b[2J"), ("no_version", "schema_version", None)):
    shutil.copy(src, "%s/%s.h5" % (tmp, name))
    with h5py.File("%s/%s.h5" % (tmp, name), "r+") as f:
        g = f["runs"][sorted(n for n in f["runs"] if f["runs"][n].attrs["source"] != "sim")[1]]
        if value is None:
            del g.attrs[key]
        else:
            g.attrs[key] = value
EOF
foreign=""
for f in "newer|run 000001: schema_version = 999 (allowed: 1; a newer version of the testbed wrote it" \
	"unknown_source|run 000001: source = 'gpu_rnu' (allowed: sim|gpu_run|pytorch|published; did you mean 'gpu_run'?)" \
	"escaped_source|run 000001: source = 'x\x1b[2J' (allowed: sim|gpu_run|pytorch|published)"; do
	name=${f%%|*}
	sum=$(md5sum <"$tmp/$name.h5")
	"$SIM" --compare "$tmp/$name.h5" --calibration "$cal" >"$tmp/e9.out" 2>"$tmp/e9"
	rc9=$?
	{ [ $rc9 = 2 ] && grep -qF -- "$tmp/$name.h5: ${f#*|}" "$tmp/e9" && [ "$(wc -l <"$tmp/e9")" = 1 ] &&
		[ ! -s "$tmp/e9.out" ] && [ "$sum" = "$(md5sum <"$tmp/$name.h5")" ]; } ||
		foreign="$foreign $name: rc $rc9 $(head -2 "$tmp/e9") $(head -1 "$tmp/e9.out");"
done
"$SIM" --compare "$tmp/no_version.h5" --calibration "$cal" >/dev/null 2>"$tmp/e9"
rc9=$?
[ $rc9 = 1 ] && grep -q "run 000001: no 'schema_version' attribute: not a run of this project's results schema" "$tmp/e9" ||
	foreign="$foreign no_version: rc $rc9 $(head -2 "$tmp/e9");"
if [ -z "$foreign" ]; then
	ok "a run of a newer schema_version or an unknown source: the file refused (exit 2), untouched; no schema_version: the run refused"
else
	bad "foreign runs" "$foreign"
fi
cp "$runs" "$tmp/optimes.h5"
/usr/bin/python3 - "$tmp/optimes.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    names = sorted(n for n in f["runs"] if f["runs"][n].attrs["source"] != "sim")
    for n, (field, value) in zip(names, [("start_ns", 2**62), ("end_ns", 2**64 - 1)]):
        ops = f["runs"][n]["ops"][()]
        ops[3][field] = value
        f["runs"][n]["ops"][...] = ops
EOF
"$SIM" --compare "$tmp/optimes.h5" --calibration "$cal" >/dev/null 2>"$tmp/e7"
rc7=$?
if [ $rc7 = 1 ] && grep -q "op 3 of its ops table ends (.*) before it starts" "$tmp/e7" &&
	grep -q "op 3 of its ops table ends .* s after the first op starts, over 100 times the measured step" "$tmp/e7"; then
	ok "op times that end before they start, or ages after the step: the run refused, saying which op"
else
	bad "op times" "rc $rc7 $(head -3 "$tmp/e7")"
fi

# 6. the loop on an emulated fabric
if ! bash gpu/run/validate.sh --quick --emulate --out "$tmp/emu" >"$tmp/emulog" 2>&1; then
	bad "emulated pipeline" "validate.sh --quick --emulate failed: $(tail -5 "$tmp/emulog")"
else
	ok "emulated pipeline: calibrate and 5 runs as rank 0 of 8, compare"
	eruns=$(ls "$tmp"/emu/runs/*.h5)
	ecal=$(ls "$tmp"/emu/calibration/*.h5)
	if out=$(/usr/bin/python3 - "$ecal" <<'EOF'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
s = f["calibration"]
assert len(s) == 1, "%d sessions" % len(s)
g = s[list(s)[0]]
assert g.attrs["ranks"] == 8 and g.attrs["fabric"] == "emulated", (g.attrs["ranks"], g.attrs["fabric"])
sizes = set((int(k), int(r)) for k, r in zip(g["collectives"]["kind"], g["collectives"]["ranks"]))
need = {(0, 8), (8, 8), (9, 8), (0, 4), (8, 4), (9, 2)}  # fsdp's and ddp's 8, hsdp's shard 4 and replica 2
assert need <= sizes, "collectives measured: %s, missing %s" % (sorted(sizes), sorted(need - sizes))
assert all(v > 0 for v in g["collectives"]["ns"])
print("ranks 8, emulated, %d collective points over groups of %s" % (len(g["collectives"]),
      sorted(set(r for _, r in sizes))))
EOF
	); then ok "emulated calibration: $out"; else bad "emulated calibration" "$out"; fi
	"$SIM" --compare "$eruns" --calibration "$ecal" --json >"$tmp/ecmp.json" 2>"$tmp/ecmp.err"
	rc=$?
	if [ $rc = 0 ] && out=$(/usr/bin/python3 - "$tmp/ecmp.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["compared"] == 5 and d["failed"] == 0, (d["compared"], d["failed"])
for r in d["runs"]:
    assert r["predicted_peak_alloc_bytes"] == r["measured_peak_alloc_bytes"], r["run"]
    assert r["predicted_peak_reserved_bytes"] == r["measured_peak_reserved_bytes"], r["run"]
    assert r["measured_steps"] == 3 and r["predicted_step_s"] > 0
print("5 runs, memory equal, median |err| %.1f%%" % (100 * d["median_abs_step_err"]))
EOF
	); then ok "emulated --compare: $out"; else bad "emulated --compare" "rc $rc: $out $(head -3 "$tmp/ecmp.err")"; fi
	# how long before each run its calibration was measured: the session's date, the run's created
	if out=$(/usr/bin/python3 - "$tmp/ecmp.json" "$ecal" "$eruns" <<'EOF'
import json, sys, h5py
from datetime import datetime
d = json.load(open(sys.argv[1]))
with h5py.File(sys.argv[2], "r") as f:
    date = f["calibration"]["000000"].attrs["date"]
    date = date.decode() if isinstance(date, bytes) else str(date)
secs = lambda t: datetime.strptime(t, "%Y-%m-%dT%H:%M:%SZ").timestamp()
with h5py.File(sys.argv[3], "r") as f:
    for r in d["runs"]:
        created = f["runs"][r["run"]].attrs["created"]
        created = created.decode() if isinstance(created, bytes) else str(created)
        assert r["calibration_date"] == date, (r["calibration_date"], date)
        assert r["calibration_before_run_s"] == secs(created) - secs(date), (r["calibration_before_run_s"], created, date)
        assert 0 <= r["calibration_before_run_s"] < 3600, r["calibration_before_run_s"]
print("measured %s, %.0f to %.0f s before the runs" % (date, min(r["calibration_before_run_s"] for r in d["runs"]),
                                                       max(r["calibration_before_run_s"] for r in d["runs"])))
EOF
	) && grep -q "^  calibration .*@000000 (measured $(/usr/bin/python3 -c 'import sys, h5py; v = h5py.File(sys.argv[1], "r")["calibration"]["000000"].attrs["date"]; print(v.decode() if isinstance(v, bytes) else v)' "$ecal"), [0-9]* min before the run)$" \
		<("$SIM" --compare "$eruns" --calibration "$ecal@000000" 2>/dev/null); then
		ok "the calibration's age: $out"
	else
		bad "the calibration's age" "${out:-}"
	fi
	# the build that measured the calibration and the one that ran each run: the same here; a
	# session said to be another build's is named in the report, one that says nothing is null
	cp "$eruns" "$tmp/build-runs.h5"
	if out=$(/usr/bin/python3 - "$ecal" "$tmp" <<'EOF'
import shutil, sys, h5py
cal, tmp = sys.argv[1], sys.argv[2]
with h5py.File(cal, "r") as f:
    b = f["calibration"]["000000"].attrs["binary"]
    b = b.decode() if isinstance(b, bytes) else str(b)
with h5py.File(tmp + "/build-runs.h5", "r") as f:
    runs = [r for r in f["runs"].values() if r.attrs["source"] in ("gpu_run", b"gpu_run")]
    got = set(r.attrs["binary"].decode() if isinstance(r.attrs["binary"], bytes) else str(r.attrs["binary"]) for r in runs)
assert len(b) == 16 and int(b, 16) >= 0 and got == {b}, (b, got)
for name, value in (("other", "0123456789abcdef"), ("unsaid", None)):
    shutil.copy(cal, "%s/build-%s.h5" % (tmp, name))
    with h5py.File("%s/build-%s.h5" % (tmp, name), "a") as f:
        if value:
            f["calibration"]["000000"].attrs["binary"] = value
        else:
            del f["calibration"]["000000"].attrs["binary"]
print(b)
EOF
	); then
		bin=$out
		"$SIM" --compare "$tmp/build-runs.h5" --calibration "$ecal" --json >"$tmp/build-same.json" 2>/dev/null
		cp "$eruns" "$tmp/build-runs2.h5"
		"$SIM" --compare "$tmp/build-runs2.h5" --calibration "$tmp/build-other.h5" --json >"$tmp/build-other.json" 2>/dev/null
		cp "$eruns" "$tmp/build-runs3.h5"
		"$SIM" --compare "$tmp/build-runs3.h5" --calibration "$tmp/build-other.h5" >"$tmp/build-other.txt" 2>/dev/null
		cp "$eruns" "$tmp/build-runs4.h5"
		"$SIM" --compare "$tmp/build-runs4.h5" --calibration "$tmp/build-unsaid.h5" --json >"$tmp/build-unsaid.json" 2>/dev/null
		if out=$(/usr/bin/python3 - "$tmp" <<'EOF'
import json, sys
t = sys.argv[1]
for name, want in (("same", True), ("other", False), ("unsaid", None)):
    d = json.load(open("%s/build-%s.json" % (t, name)))
    got = set(r["calibration_same_binary"] for r in d["runs"])
    assert got == {want}, (name, got)
print("same true, another false, none said null")
EOF
		) && [ "$(grep -c "^  calibration measured by another build of gpu_run than the run's (binary 0123456789abcdef; the run's $bin): its kernels may run at another speed$" "$tmp/build-other.txt")" = 5 ] &&
			! grep -q "another build" <("$SIM" --compare "$tmp/build-runs.h5" --calibration "$ecal" 2>/dev/null); then
			ok "the build that measured the calibration: $out ($bin, named in the report)"
		else
			bad "the build that measured the calibration" "${out:-} $(grep -m1 'another build' "$tmp/build-other.txt")"
		fi
	else
		bad "the build that measured the calibration" "$out"
	fi
	if out=$(/usr/bin/python3 - "$eruns" <<'EOF'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
ddp = [r for r in f["runs"].values() if r.attrs["source"] == "gpu_run" and r.attrs["policy.sharding"] == "ddp"]
assert len(ddp) == 1
a = ddp[0].attrs
n, gbps = int(a["fabric.world.ranks"]), float(a["fabric.world.link_gbps"])
step = float(a["fabric.world.step_latency_us"]) * 1e3
tree, ring = 2 * 3 * step, 2 * (n - 1) * step  # 8 ranks across 2 nodes: a tree of depth 3
assert n == 8 and a["fabric.world.allreduce_latency_us"].endswith("tree's)"), dict(a)
over = sorted(int(o["end_ns"] - o["start_ns"]) - (o["bytes"] // n) * (n - 1) * 2 / gbps
              for o in ddp[0]["ops"][:] if o["kind"] == 9)
assert len(over) > 0 and over[0] >= tree - 1, "an all-reduce beat its latency: %s" % over
med = over[len(over) // 2]
assert med < (tree + ring) / 2, "all-reduces take %.0f us over their bytes: the ring's %.0f, not the tree's %.0f" % (
    med / 1e3, ring / 1e3, tree / 1e3)
print("%d all-reduces across nodes: %.0f us over their bytes (tree %.0f, ring %.0f)" % (
    len(over), med / 1e3, tree / 1e3, ring / 1e3))
EOF
	); then ok "emulated latency = ./sim's: $out"; else bad "emulated latency" "$out"; fi
	# 6b. a real 8-rank session appended after the emulated one (a copy, every time doubled): the
	#     emulated runs are still priced by the emulated session, as before; a file whose 8-rank
	#     sessions are all real refuses them, naming the fabric; --calibration none: the catalog
	if append_doubled "$ecal" fabric=real >/dev/null && /usr/bin/python3 - "$ecal" "$tmp/real_only.h5" <<'EOF'
import shutil, sys, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    del f["calibration"][min(f["calibration"])]
EOF
	then
		"$SIM" --compare "$eruns" --calibration "$ecal" --json >"$tmp/ecmp2.json" 2>"$tmp/ecmp2.err"
		rc2=$?
		"$SIM" --compare "$eruns" --calibration "$tmp/real_only.h5" --json >"$tmp/ecmp3.json" 2>"$tmp/ecmp3.err"
		rc3=$?
		"$SIM" --compare "$eruns" --calibration none --json >"$tmp/ecmp4.json" 2>"$tmp/ecmp4.err"
		rc4=$?
		if [ $rc2 = 0 ] && [ $rc3 = 1 ] && [ $rc4 = 0 ] &&
			grep -q "no calibration measured with 8 ranks on an emulated fabric (1 session of 8 ranks on a real one" \
				"$tmp/ecmp3.err" &&
			out=$(/usr/bin/python3 - "$tmp/ecmp.json" "$tmp/ecmp2.json" "$tmp/ecmp3.json" "$tmp/ecmp4.json" <<'EOF'
import json, sys
before, after, real, cat = (json.load(open(p)) for p in sys.argv[1:5])
p = lambda d: [r["predicted_step_s"] for r in d["runs"]]
assert p(after) == p(before), "a newer real session moved the emulated runs: %s, %s" % (p(before), p(after))
assert real["compared"] == 0 and real["failed"] == 5, (real["compared"], real["failed"])
assert cat["compared"] == 5 and all(r["calibration"] == "" for r in cat["runs"]), [r["calibration"] for r in cat["runs"]]
assert p(cat) != p(before), "the catalog priced the runs as the calibration did"
print("the emulated session prices them beside a newer real one; a real one alone refuses them")
EOF
			); then
			ok "a run's own fabric's sessions: $out"
		else
			bad "a run's own fabric's sessions" "rc $rc2 $rc3 $rc4: ${out:-} $(head -c 600 "$tmp/ecmp3.err")"
		fi
	else
		bad "a run's own fabric's sessions" "could not append a real session"
	fi
fi

# 7. a PyTorch run (experiments/pytorch/fsdp_bench.py's schema, written here without PyTorch):
#    attach_schedule.py gives it its ops and sets the collectives it recorded against the
#    schedule's (the same in one run, one short in the other); --compare sums its device kernels by kind of work
#    (NCCL's by collective, the rest as compute) against the predicted ops of each, says what
#    it did not measure (op times; kernel times all 0 and memory on a CPU) as null, and
#    compares the memory it did
pt="$tmp/pytorch.h5"
if out=$(/usr/bin/python3 - "$pt" <<'EOF'
import sys, h5py, numpy as np
attrs = {"model.name": "custom", "model.layers": 2, "model.hidden": 64, "model.ffn": 192, "model.heads": 4,
         "model.kv_heads": 2, "model.vocab": 256, "model.seq": 32, "cluster.gpu": "h100-sxm", "cluster.nodes": 1,
         "cluster.gpus_per_node": 2, "policy.sharding": "fsdp", "policy.accum": "sync-each",
         "policy.microbatches": 1, "policy.wrap": "block", "policy.reshard": "yes", "policy.optim": "foreach",
         "policy.optim_in_backward": "false", "policy.precision": "mixed", "policy.ac": "none",
         "policy.runtime": "pytorch", "run.batch": 1, "run.steps": 3, "run.warmup": 1}
kt = np.dtype([("name", "S64"), ("calls", "<i4"), ("device_us", "<f8")])
kernels = [(b"sm90_xmma_gemm_bf16bf16_bf16f32", 40, 300.0), (b"ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgs", 5, 20.0),
           (b"ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDe", 3, 12.0), (b"multi_tensor_apply_kernel<Tens", 9, 8.0)]
with h5py.File(sys.argv[1], "w") as f:
    for name, peaks, ks in (("000000", (3 << 20, 8 << 20), kernels), ("000001", (0, 0), [(b"untimed", 3, 0.0)])):
        g = f.require_group("runs").create_group(name)
        g.attrs["source"], g.attrs["hardware"], g.attrs["schema_version"] = "pytorch", "test-gpu", np.int32(1)
        for k, v in attrs.items():
            g.attrs[k] = str(v)
        s = g.create_group("summary")
        for k, v in (("step_time_s", 0.002), ("step_time_p10_s", 0.0019), ("step_time_p90_s", 0.0021),
                     ("tokens_per_s_per_gpu", 16000.0)):
            s.attrs[k] = v
        s.attrs["steps"], s.attrs["fits"] = np.int32(3), np.int32(1)
        s.attrs["peak_alloc_bytes"], s.attrs["peak_reserved_bytes"] = np.uint64(peaks[0]), np.uint64(peaks[1])
        s.attrs["gpu_bytes"] = np.uint64(80 << 30)
        if name == "000000":  # the allocator's events (fsdp_bench.py --alloc-trace): 20 MiB and 2 MiB segments; A
            M = 1 << 20       # freed, then a 3 MiB request fits where A was; a free of a block from before the trace
            ev = [(2, 0, 20 * M, 0x10000000), (0, 0, 3 * M, 0x10000000), (0, 0, M, 0x10300000),
                  (1, 0, 3 * M, 0x10000000), (2, 0, 2 * M, 0x20000000), (0, 0, M // 2, 0x20000000),
                  (0, 0, 14 * M, 0x10400000), (0, 0, 3 * M, 0x10000000), (1, 0, M, 0x90000000)]
            g.create_dataset("alloc_trace", data=np.array(ev, dtype=[("action", "u1"), ("stream", "u1"),
                                                                      ("bytes", "<u8"), ("addr", "<u8")]))
        if name == "000000":  # memory after the build and the warm-up step (fsdp_bench.py on a GPU), built there
            g.create_dataset("memory_by_step", data=np.array([(1 << 20, 2 << 20), (1 << 20, 8 << 20)], dtype=[
                ("allocated_bytes", "<u8"), ("reserved_bytes", "<u8")]))
            g.attrs["build"] = "device"
        if name == "000000":  # the device memory outside the caching allocator (fsdp_bench.py on a GPU)
            s.attrs["outside_bytes"] = np.uint64(600 << 20)
            # and its profiled step's kernels: 1.9 ms from the first's start to the last's end, 1.6 ms of it busy
            s.attrs["profile_span_s"], s.attrs["profile_busy_s"] = 0.0019, 0.0016
            # and the cache's flushes over the run (memory_stats' num_alloc_retries), in its last step, its OOMs
            s.attrs["alloc_retries"], s.attrs["alloc_retries_step"] = np.int32(3), np.int32(1)
            s.attrs["alloc_ooms"] = np.int32(0)
            # and its segments at the end by stream and pool (a stream FSDP2 does not name: other)
            s.attrs["reserved_by_pool"] = "compute/large=6291456 allgather/large=20971520 compute/small=2097152 " \
                "other/large=2097152 compute/large=2097152"
        if ks:
            g.create_dataset("kernels", data=np.array(ks, dtype=kt))
        # the collectives FSDP2 issued in a step (PyTorch 2.11, 2 ranks, this shape): the schedule's in
        # the first run; one reduce-scatter short in the second
        ag, rs = [(b"allgather", 65664)] + [(b"allgather", 98560)] * 4, [(b"reduce_scatter", 197120)] * 2
        coll = ag + rs + ([(b"reduce_scatter", 131328)] if name == "000000" else [])
        g.create_dataset("collectives", data=np.array(coll, dtype=[("kind", "S16"), ("bytes", "<u8")]))
EOF
) && /usr/bin/python3 experiments/pytorch/attach_schedule.py "$pt" --sim "$SIM" >"$tmp/attach.log" &&
	grep -q "run 000000: collectives: the schedule's 8 collectives, in its order" "$tmp/attach.log" &&
	grep -q "run 000001: collectives: differs from the schedule (7 collectives against 8): PyTorch's alone: none; the schedule's alone: reduce_scatter 131328" "$tmp/attach.log" &&
	persist=$("$SIM" --model custom --layers 2 --hidden 64 --ffn 192 --heads 4 --kv-heads 2 --vocab 256 --seq 32 \
		--nodes 1 --gpus-per-node 2 --runtime pytorch --steps 3 --warmup 1 --json | /usr/bin/python3 -c \
		'import json, sys; c = json.load(sys.stdin)["peak_by_category"]; print(c["sharded_params"], c["optim_state"])') &&
	"$SIM" --compare "$pt" --json >"$tmp/pt.json" 2>"$tmp/pt.err" && out=$(/usr/bin/python3 - "$tmp/pt.json" "$tmp/pt.err" $persist <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert open(sys.argv[2]).read() == "", open(sys.argv[2]).read()  # no message for what a PyTorch run lacks
a, b = d["runs"]
for r in (a, b):
    assert r["op_times_measured"] is False and r["measured_compute_s"] is None and r["by_stream"] == {}, r
    assert set(r["by_kind"]) == {"compute", "allgather", "reduce_scatter"}, r["by_kind"]
    assert all(k["predicted_s"] > 0 and k["ops"] > 0 for k in r["by_kind"].values()), r["by_kind"]
k = a["by_kind"]
assert (k["compute"]["kernels"], k["allgather"]["kernels"], k["reduce_scatter"]["kernels"]) == (49, 5, 3), k
assert abs(k["compute"]["measured_s"] - 308e-6) < 1e-12 and abs(k["allgather"]["measured_s"] - 20e-6) < 1e-12, k
assert abs(k["reduce_scatter"]["err"] - (k["reduce_scatter"]["predicted_s"] / 12e-6 - 1)) < 1e-6, k
cl = a["compute_by_class"]  # compute by class of kernel: by name measured, the schedule's kernels priced alone
assert (cl["gemm"]["kernels"], cl["optimizer"]["kernels"], cl["attention"]["kernels"]) == (40, 9, 0), cl
assert abs(cl["gemm"]["measured_s"] - 300e-6) < 1e-12 and abs(cl["optimizer"]["measured_s"] - 8e-6) < 1e-12, cl
assert all(cl[c]["predicted_s"] > 0 for c in ("gemm", "attention", "optimizer")) and cl["attention"]["measured_s"] == 0, cl
assert cl["attention"]["err"] is None, cl  # nothing of the class ran: no error against zero
assert abs(cl["gemm"]["err"] - (cl["gemm"]["predicted_s"] / 300e-6 - 1)) < 1e-6, cl
assert b["compute_by_class"] == {}, b["compute_by_class"]  # no kernel times
# each kernel priced alone, on every SM: together no more than the compute the timeline predicts, where
# collectives hold SMs and bandwidth, nor much less
alone = sum(cl[c]["predicted_s"] for c in cl)
assert 0.8 * k["compute"]["predicted_s"] <= alone <= k["compute"]["predicted_s"] * (1 + 1e-9), (alone, k["compute"])
assert a["memory_measured"] is True and a["measured_peak_reserved_bytes"] == 8 << 20
assert a["measured_outside_bytes"] == 600 << 20 and b["measured_outside_bytes"] is None, (a, b)
# the GPU idle in the profiled step (null where the run has none) against the predicted timeline's time with no
# device op running: these ops of a tiny model wait for the host that launches them
assert abs(a["measured_gpu_idle_s"] - 0.0003) < 1e-12 and a["measured_gpu_span_s"] == 0.0019, a
assert b["measured_gpu_idle_s"] is None and b["measured_gpu_span_s"] is None, b
assert 0 < a["predicted_gpu_idle_s"] < a["predicted_gpu_span_s"] <= a["predicted_step_s"], a
# the flushes as measured where the run has them (null where not), beside the prediction's (none: it fits)
assert (a["measured_alloc_retries"], a["measured_alloc_retries_step"], a["measured_alloc_ooms"]) == (3, 1, 0), a
assert b["measured_alloc_retries"] is None and b["measured_alloc_ooms"] is None, b
assert (a["predicted_alloc_retries"], a["predicted_alloc_ooms"]) == (0, 0), a
# PyTorch's own requests served by the runtime's allocator: the 3 MiB request takes the block A left (with
# the free ignored it would take a segment of 20 MiB more); the 512 KiB one a small pool's 2 MiB segment
rp, M = a["alloc_replay"], 1 << 20
assert (rp["requests"], rp["unmatched_frees"], rp["replayed_flushes"]) == (5, 1, 0), rp
assert rp["traced_peak_reserved_bytes"] == rp["replayed_peak_reserved_bytes"] == 22 * M and rp["reserved_err"] == 0, rp
assert rp["requested_peak_bytes"] == rp["replayed_peak_alloc_bytes"] == 37 * M // 2 and "alloc_replay" not in b, rp
pools = a["reserved_by_pool"]  # measured as written (a pool named twice: summed), predicted from ./sim's segments
assert pools["compute/large"]["measured_bytes"] == 8 << 20 and pools["compute/small"]["measured_bytes"] == 2 << 20, pools
assert pools["allgather/large"]["measured_bytes"] == 20 << 20 and a["measured_reserved_other_bytes"] == 2 << 20, a
assert sum(p["predicted_bytes"] for p in pools.values()) == a["predicted_peak_reserved_bytes"], (pools, a)
assert pools["compute/small"]["predicted_bytes"] > 0 and "reserved_by_pool" not in b, (pools, b)
assert abs(a["peak_reserved_err"] - (a["predicted_peak_reserved_bytes"] / (8 << 20) - 1)) < 1e-9, a
assert b["memory_measured"] is False and b["measured_peak_alloc_bytes"] is None and b["peak_alloc_err"] is None
assert b["by_kind"]["compute"]["measured_s"] is None and b["by_kind"]["compute"]["err"] is None
# memory after the build and after the warm-up step: measured as written; predicted, the parameters' shards
# after the build, and the optimizer's state with them after the step (PyTorch's AdamW makes it at its first
# step), reserved growing in the step up to its peak
mb, params, state = a["memory_by_step"], int(sys.argv[3]), int(sys.argv[4])
assert [(r["after_step"], r["measured_alloc_bytes"], r["measured_reserved_bytes"]) for r in mb] == \
    [(0, 1 << 20, 2 << 20), (1, 1 << 20, 8 << 20)], mb
assert mb[0]["predicted_alloc_bytes"] == params and mb[1]["predicted_alloc_bytes"] == params + state, (mb, params, state)
assert params <= mb[0]["predicted_reserved_bytes"] < mb[1]["predicted_reserved_bytes"] <= \
    a["predicted_peak_reserved_bytes"], (mb, a["predicted_peak_reserved_bytes"])
assert a["build"] == "device" and "memory_by_step" not in b and "build" not in b, (a["build"], b)
assert a["collectives_check"] == "the schedule's 8 collectives, in its order", a["collectives_check"]
assert b["collectives_check"].startswith("differs from the schedule"), b["collectives_check"]
print("kernels by kind of work: compute %.0f us measured / %.0f predicted; memory not measured: null" % (
    1e6 * k["compute"]["measured_s"], 1e6 * k["compute"]["predicted_s"]))
EOF
); then ok "pytorch run: $out"; else bad "pytorch run" "${out:-} $(head -3 "$tmp/pt.err" 2>/dev/null)"; fi
if "$SIM" --compare "$pt" >"$tmp/pt.txt" 2>&1 && grep -q "work (summed kernels)" "$tmp/pt.txt" &&
	grep -q "peak alloc  not measured" "$tmp/pt.txt" && grep -q "^  collectives the schedule's 8 collectives, in its order" "$tmp/pt.txt" &&
	grep -q "per op kind: not measured (no op times, no kernel times)" "$tmp/pt.txt" && ! grep -q "inf%" "$tmp/pt.txt" &&
	[ "$(grep -c "^  outside the allocator measured 0.59 GiB (the CUDA context, NCCL.s buffers), which the predicted capacity, the GPU.s 79.60 GiB" "$tmp/pt.txt")" = 1 ] &&
	[ "$(grep -c "^    reserved at the end, by pool  *measured  *predicted" "$tmp/pt.txt")" = 1 ] &&
	grep -q "^    allgather/large  *20.0 MiB  *0$" "$tmp/pt.txt" && grep -q "^    streams of no op  *2.0 MiB  *-$" "$tmp/pt.txt" &&
	[ "$(grep -c "^    compute by class (alone)  *kernels  *measured ms  *predicted ms  *error" "$tmp/pt.txt")" = 1 ] &&
	grep -q "^    gemm  *40  *0.300 " "$tmp/pt.txt" &&
	grep -q "^  GPU idle    measured 0.300 ms of the profiled step's 1.900 ms (no kernel running)  predicted [0-9.]* ms of [0-9.]* ms (no op running)$" "$tmp/pt.txt" &&
	[ "$(grep -c "GPU idle" "$tmp/pt.txt")" = 1 ] &&
	[ "$(grep -c "^    memory after  *alloc meas.  *predicted  *reserv. meas.  *predicted  *error$" "$tmp/pt.txt")" = 1 ] &&
	grep -q "^    the build  *1.0 MiB  *[0-9.]* [KM]iB  *2.0 MiB  *[0-9.]* [KM]iB  *[-+][0-9.]*%$" "$tmp/pt.txt" &&
	grep -q "^    step 1 (warm-up)  *1.0 MiB .* 8.0 MiB " "$tmp/pt.txt" && grep -q "^    built on the device: " "$tmp/pt.txt" &&
	grep -q "^  allocator   PyTorch's 5 requests (alloc_trace) replayed: peak allocated 18.5 MiB (requested 18.5 MiB), reserved 22.0 MiB (traced 22.0 MiB, error +0.00%)$" "$tmp/pt.txt"; then
	ok "pytorch run, text: kernels by kind of work, 'not measured' where nothing was, the GPU idle, memory outside the allocator, reserved by pool, memory after the build and each warm-up step, its allocator's requests replayed"
else
	bad "pytorch run, text" "$(head -20 "$tmp/pt.txt")"
fi
# A copy of the PyTorch run's file with one thing broken (PYTHON, given f, the copy open for writing): that
# run is not compared (the others are; --compare's status says one was not), and the message names what is wrong
nbroken=0
broken_run() { # WHAT EXPECT PYTHON
	local out="$tmp/ptbad$((++nbroken))"
	if /usr/bin/python3 -c "import shutil, sys, h5py, numpy as np
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], 'r+') as f:
$3" "$pt" "$out.h5" && { "$SIM" --compare "$out.h5" >"$out.txt" 2>&1; grep -qF -- "$2" "$out.txt"; }; then
		ok "pytorch run: $1 is the run's error, named"
	else
		bad "pytorch run: $1" "$(head -5 "$out.txt")"
	fi
}
# a reserved_by_pool word of another shape
broken_run "a malformed reserved_by_pool" \
	"run 000000: summary reserved_by_pool: 'compute/medium=4096' (allowed: STREAM/large or STREAM/small = a number of bytes)" \
	'    f["runs/000000/summary"].attrs["reserved_by_pool"] = "compute/large=6291456 compute/medium=4096"'
# an allocator event on a stream ./sim has no pool for
broken_run "an alloc_trace event of no stream ./sim knows" \
	"run 000000: its alloc_trace: event 0: stream 7 (allowed: a stream below 6)" '    del f["runs/000000/alloc_trace"]
    f["runs/000000"].create_dataset("alloc_trace", data=np.array([(0, 7, 1024, 4096)], dtype=[
        ("action", "u1"), ("stream", "u1"), ("bytes", "<u8"), ("addr", "<u8")]))'
# a memory_by_step row reserving less than it allocates, and a build of no known kind
broken_run "a memory_by_step row reserving less than it allocates" \
	"run 000000: memory_by_step row 1: reserved_bytes 4096 below allocated_bytes 1048576" '    del f["runs/000000/memory_by_step"]
    f["runs/000000"].create_dataset("memory_by_step", data=np.array([(1 << 20, 2 << 20), (1 << 20, 4096)], dtype=[
        ("allocated_bytes", "<u8"), ("reserved_bytes", "<u8")]))'
broken_run "a build of no known kind" "run 000000: attribute build = 'cpu' (allowed: device, meta)" \
	'    f["runs/000000"].attrs["build"] = "cpu"'
# a profiled step busier than it is long
broken_run "a profile busier than its span" \
	"run 000000: summary profile_busy_s = 0.002 and profile_span_s = 0.0019 (allowed: 0 <= busy <= span seconds)" \
	'    f["runs/000000/summary"].attrs["profile_busy_s"] = 0.002'
# timeline.py (fsdp_bench.py --profile's gaps), without PyTorch: kernels of two streams, one inside another,
# two that touch, two gaps; the longest first, named by the kernels on either side
if out=$(cd experiments/pytorch && /usr/bin/python3 -c '
from timeline import gpu_gaps
ks = [("b", 12.0, 20.0), ("a", 10.0, 15.0), ("c", 14.0, 16.0), ("d", 25.0, 30.0), ("e", 30.0, 31.0), ("f", 40.0, 42.0)]
span, busy, gaps = gpu_gaps(ks)
assert (span, busy) == (32.0, 10.0 + 6.0 + 2.0), (span, busy)
assert gaps == [("e", "f", 21.0, 9.0), ("b", "d", 10.0, 5.0)], gaps
assert gpu_gaps(ks, top=1)[2] == gaps[:1] and gpu_gaps([]) == (0.0, 0.0, [])
print("span %g us, busy %g, gaps %s" % (span, busy, gaps))' 2>&1); then
	ok "timeline.py: a profiled step's span, busy time and gaps ($out)"
else
	bad "timeline.py" "$out"
fi
# its figures: predicted against measured, no timeline or memory (it has neither); with its comparison
# beside it, its compute by class of kernel
if cp "$tmp/pt.json" "$pt.compare.json" && MPLBACKEND=Agg /usr/bin/python3 paper/plots.py "$pt" "$tmp/ptfig" >"$tmp/ptfig.log" 2>&1 &&
	[ -s "$tmp/ptfig/pytorch_predicted_vs_measured.png" ] && ! ls "$tmp/ptfig" | grep -q "memory\|timeline" &&
	[ -s "$tmp/ptfig/pytorch_by_class.png" ]; then
	ok "pytorch run, plots: predicted against measured, compute by class of kernel"
else
	bad "pytorch run, plots" "$(tail -3 "$tmp/ptfig.log"; ls "$tmp/ptfig" 2>&1 | head -5)"
fi

# 8. published figures as measured runs
pub=$tmp/pub.h5
if /usr/bin/python3 experiments/published/torchtitan.py "$pub" >"$tmp/pub.log" 2>&1 &&
	/usr/bin/python3 experiments/pytorch/attach_schedule.py "$pub" --sim "$SIM" >>"$tmp/pub.log" 2>&1 &&
	"$SIM" --compare "$pub" --json >"$tmp/pub.json" 2>>"$tmp/pub.log" && out=$(/usr/bin/python3 - "$tmp/pub.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["compared"] == 12 and d["failed"] == 0 and d["within_noise"] == 0, d
runs = d["runs"]
assert all(r["source"] == "published" and r["measured_steps"] == 1 and not r["within_noise"] for r in runs)
a = runs[0]  # Llama 3.1 8B on 8 H100 (Grand Teton), FSDP: 5,762 tokens/s per GPU, 82.4 GiB reserved
close = lambda x, y: abs(x - y) <= 1e-8 * abs(y)  # the JSON's numbers have 9 significant digits
assert close(a["measured_step_s"], 2 * 8192 / 5762), a["measured_step_s"]
assert close(a["measured_peak_reserved_bytes"], 82.4 * (1 << 30)), a["measured_peak_reserved_bytes"]
assert a["measured_peak_alloc_bytes"] is None and a["peak_alloc_err"] is None and a["memory_measured"] is True
assert abs(a["peak_reserved_err"] - (a["predicted_peak_reserved_bytes"] / (82.4 * (1 << 30)) - 1)) < 1e-7
assert abs(a["step_err"] - (a["predicted_step_s"] / a["measured_step_s"] - 1)) < 1e-7
for r in runs[4:]:  # the A100 rows publish no memory
    assert r["memory_measured"] is False and r["peak_reserved_err"] is None, r
# ranked: pairs of one model, cluster and batch that differ in policy (runtime included): 8B on 8 and on
# 128 H100 (eager, compiled), 8B on the A100s (2 policies), Llama 2 13B (3); not Llama 2 70B's runs of
# batch 1 and 2 (a group key cut short before the batch once paired them)
assert -1 <= d["kendall_tau"] <= 1 and d["ranked_pairs"] == 6, d
print("12 published runs; the first %+.1f%% on its step, %+.1f%% on its reserved peak" % (
    100 * a["step_err"], 100 * a["peak_reserved_err"]))
EOF
); then ok "published runs: $out"; else bad "published runs" "${out:-} $(tail -3 "$tmp/pub.log" 2>/dev/null)"; fi
if "$SIM" --compare "$pub" >"$tmp/pub.txt" 2>&1 && grep -q "(one figure, no spread)" "$tmp/pub.txt" &&
	grep -q "peak alloc  not measured" "$tmp/pub.txt" && grep -q "peak reserved measured 82.40 GiB" "$tmp/pub.txt" &&
	grep -q "ac per-layer:2," "$tmp/pub.txt" &&
	grep -q "(published, runtime pytorch-compile, h100-96g-grand-teton)" "$tmp/pub.txt" &&
	! grep -q "inf%\|inside the run's noise" "$tmp/pub.txt"; then
	ok "published runs, text: one figure, the reserved peak alone, per-layer:2, the runtime"
else
	bad "published runs, text" "$(head -12 "$tmp/pub.txt")"
fi

echo "$passed passed, $failed failed"
[ $failed = 0 ]
