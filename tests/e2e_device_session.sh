#!/usr/bin/env bash
# e2e_device_session.sh - gpu/device_session.sh, the one call a lent GPU's
# time goes to, rehearsed on the CPU backend (DEVICE=cpu: the tiny model on
# the same emulated 2 x 8 job), so that its flags, files, parsing and
# summary are known to work before a GPU session spends minutes on them:
#
#   0. the carried archive (gpu/pack.sh's) is unpacked into the tree first;
#   1. calibrate, runs, compare (DATA relative, as on the device): each step OK; every policy family ran
#      (the CPU backend skips pure-bf16, which it cannot compute) and its
#      summary row holds a step time, MFU, peak memory and exposed
#      communication; $OUT holds the calibration, the runs, the two
#      reports, the summary and the logs, under the names gpu/README.md
#      commits them with; the runs file's comparison names every compared
#      run with a finite prediction, priced by the session's calibration
#      (its newest session: the job's full one, after quick ones of the
#      full-size run's shapes and of the job under the pytorch runtime,
#      whose copies it times);
#      the one-rank run is kept out of the compared file; DATA is where the
#      files went (nothing under data/ was written);
#   2. a step that needs the GPU (test) fails saying so, and the session
#      goes on; a step of no such name is listed as such;
#   3. DEVICE of another value exits 2.
# Where nvidia-smi is (here a fake one), the GPU's clocks are sampled for the
# whole call and gpu/clocks.py's table per phase ends the summary (1b);
# clocks.py is checked on the first H200 session's samples too. The staged
# step (several real ranks, each policy's numbers fsdp's) is rehearsed on the
# CPU backend, and shown to fail when a policy's numbers differ (1c).
# One line per check, then `N passed, N failed`; non-zero exit on failure.
set -u
cd "$(dirname "$0")/.."
. tests/mpi_local.sh
passed=0
failed=0
ok() { echo "ok   device_session $1"; passed=$((passed + 1)); }
bad() { echo "FAIL device_session $1: $2"; failed=$((failed + 1)); }

# The script runs ./gpu_run and ./sim, which make asan does not build.
if [ "${GPU_RUN:-./gpu_run}" != ./gpu_run ] || [ ! -x ./gpu_run ] || [ ! -x ./sim ]; then
	echo "ok   device_session skipped: the script runs ./gpu_run and ./sim (not $GPU_RUN)"
	echo "0 passed, 0 failed"
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stamp() { find data -type f -printf '%p %s %T@\n' | sort; }
before=$(stamp)

# DATA relative, as a GPU session's (data): under build/, which git ignores
data=build/e2e-device-session-$$
trap 'rm -rf "$tmp" "$data"' EXIT
# the carried archive (gpu/pack.sh's, here a marker file) is unpacked into the tree first
mkdir -p "$tmp/pack/$data" && echo carried >"$tmp/pack/$data/marker"
tar -czf "$tmp/carry.tar.gz" -C "$tmp/pack" "$data/marker"
# an nvidia-smi that samples a GPU at 1980 MHz and 250 W, 60% busy (and lists no GPU): the session's
# clock sampler and its table per phase
mkdir -p "$tmp/bin"
cat >"$tmp/bin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
*--query-gpu=timestamp*)
	echo "timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], temperature.gpu, utilization.gpu [%]"
	while :; do
		echo "$(date '+%Y/%m/%d %H:%M:%S.%3N'), 1980 MHz, 3201 MHz, 250.00 W, 40, 60 %"
		sleep 0.25
	done
	;;
esac
exit 0
EOF
chmod +x "$tmp/bin/nvidia-smi"
PATH=$tmp/bin:$PATH CARRY=$tmp/carry.tar.gz OUT=$tmp/out DATA=$data DEVICE=cpu BUDGET_S=400 \
	bash gpu/device_session.sh calibrate runs compare test nosuch >"$tmp/log" 2>&1
rc=$?
sum=$tmp/out/summary.txt
if [ $rc -ne 0 ] || [ ! -f "$sum" ]; then
	bad "rehearsal" "exit $rc, $(tail -5 "$tmp/log")"
	echo "$passed passed, $failed failed"
	exit 1
fi

if grep -q "^carried: unpacked $tmp/carry.tar.gz$" "$sum" && [ "$(cat "$data/marker" 2>/dev/null)" = carried ]; then
	ok "the carried archive is unpacked into the tree first"
else
	bad "carried archive" "$(grep '^carried' "$sum")"
fi

# 1. the three steps of issue 9's call
for s in calibrate runs compare; do
	if grep -q "^OK $s rc=0" "$sum"; then ok "$s step OK"; else bad "$s step" "$(grep " $s " "$sum")"; fi
done
if grep -q "^OK runs rc=0 .*: 23 runs, 0 failed$" "$sum"; then
	ok "23 runs (every family but pure-bf16, the one-rank runs of the testbed and of FSDP2, the small model as rank 0 of 16, the traffic's ceiling)"
else
	bad "runs" "$(grep ' runs ' "$sum")"
fi
rows=$(grep -cE '^  [a-z0-9+-]+ +rc=0  [0-9.]+ ms  MFU [0-9.]+%  [0-9.]+ GiB peak  [0-9.]+ ms exposed$' "$sum")
if [ "$rows" = 23 ]; then ok "a summary row per run: step time, MFU, peak memory, exposed communication"; else
	bad "summary rows" "$rows well-formed of 23: $(grep -E '^  ' "$sum" | head -3)"
fi
hw=$(sed -n 's/^hardware: \([^;]*\);.*/\1/p' "$sum")
day=$(date -u +%Y%m%d)
want=$(printf '%s\n' "$hw.h5" "$hw-$day.h5" "$hw-$day.h5.compare.json" "$hw-$day.h5.compare.txt" logs.tar.gz summary.txt |
	LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//')
got=$(cd "$tmp/out" && ls | LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//')
# the day may turn between the runs file's name and this check
if [ "$got" = "$want" ] || [ "$(echo "$got" | sed 's/-[0-9]\{8\}\.h5/-D.h5/g')" = "$(echo "$want" | sed 's/-[0-9]\{8\}\.h5/-D.h5/g')" ]; then
	ok "\$OUT: calibration, runs, reports, summary, logs ($hw)"
else
	bad "\$OUT" "got '$got', want '$want'"
fi
case "$hw" in *-cpu) ok "the files are named after the CPU backend ($hw)" ;; *) bad "hardware" "'$hw'" ;; esac
runs=$(ls "$tmp"/out/"$hw"-*.h5 | head -1)
if out=$(/usr/bin/python3 - "$runs" "$data/runs/$(basename "$runs")" "$data/calibration/$hw.h5" <<'EOF' 2>&1
import sys, json, math, h5py
j = json.load(open(sys.argv[1] + ".compare.json"))
assert len(j["runs"]) == 20, "%d compared runs" % len(j["runs"])
# the calibration as it stood: the file and its newest session (FILE@NNNNNN, core/calibration.h)
pinned = sys.argv[3] + "@" + max(h5py.File(sys.argv[3], "r")["calibration"])
for r in j["runs"]:
    assert math.isfinite(r["predicted_step_s"]) and r["predicted_step_s"] > 0, r
    assert r["calibration"] == pinned, (r["calibration"], pinned)
assert math.isfinite(j["median_abs_step_err"])
f = h5py.File(sys.argv[2], "r")["runs"]
measured = [k for k in f if f[k].attrs["source"] in (b"gpu_run", "gpu_run")]
assert len(measured) == 20, "%d measured runs in the file" % len(measured)
worlds = sorted(set(int(f[k].attrs["cluster.nodes"]) * int(f[k].attrs["cluster.gpus_per_node"]) for k in measured))
assert worlds == [16], worlds
# each measured run predicted twice: priced by the calibration, then by the catalog alone
cal = sorted((f[k].attrs["compares"], f[k].attrs["cluster.calibration"]) for k in f if "compares" in f[k].attrs)
cal = [c if isinstance(c, str) else c.decode() for _, c in cal]
assert len(f) == 60 and cal == ["", pinned] * 20, "%d runs in the file; calibrations %s" % (len(f), set(cal))
# four sessions: the job's quick one, the full-size run's shapes (quick), the job under the pytorch runtime
# (quick: its copies), the job's full one, newest
c = h5py.File(sys.argv[3], "r")["calibration"]
assert sorted(c) == ["000000", "000001", "000002", "000003"], sorted(c)
shapes = [set((r["name"], r["m"], r["n"], r["k"], r["bytes"]) for r in c[s]["kernels"][()]) for s in sorted(c)]
assert shapes[0] == shapes[3] and not shapes[1] <= shapes[0], "the full-size run's kernels are the job's"
assert any(x[0] in (b"copy_out", "copy_out") for x in shapes[2] - shapes[3]), "no copies of the pytorch runtime's"
EOF
); then
	ok "the report: 20 runs compared, each priced by the session's calibration; the file holds them and their predictions; the calibration has the full-size run's kernels and the pytorch runtime's copies"
else
	bad "report" "$out"
fi
if cmp -s "$runs" "$data/runs/$(basename "$runs")" && cmp -s "$tmp/out/$hw.h5" "$data/calibration/$hw.h5"; then
	ok "\$OUT's files are DATA's"
else
	bad "\$OUT" "differs from DATA"
fi
if [ "$(stamp)" = "$before" ]; then
	ok "nothing written under data/"
else
	bad "data/" "written: $(diff <(echo "$before") <(stamp) | head -3)"
fi

# 1b. the GPU's clocks per phase: every step, each gpu_run of calibrate and runs
# (a step's own row lasts from its start to its first command's: it may hold a sample or none)
rows=$(grep -cE '^  (calibrate: (quick|full-size shapes, quick|pytorch copies, quick|full)|runs: [a-z0-9+-]+) +[0-9.]+ +[0-9]+ +[0-9]+  1980 \(1980-1980\), 250 W$' "$sum")
listed=$(tar -tzf "$tmp/out/logs.tar.gz" | grep -cE '^logs/(clocks\.csv|phases\.txt|clocks\.table)$')
if grep -q "^the GPU's SM clock and power per phase" "$sum" && [ "$rows" = 27 ] &&
	grep -qE '^  compare +[0-9.]+ +[0-9]+ +[0-9]+  ' "$sum" && [ "$listed" = 3 ]; then
	ok "the GPU's SM clock and power per phase (a row for each of the 4 calibrations and 23 runs, and for each step), the samples in the logs"
else
	bad "clocks" "$rows rows, $listed files in the logs: $(grep -A4 "SM clock" "$sum")"
fi
# gpu/clocks.py on the first H200 session's hook (nvidia-smi's own output): the FSDP2 steps at the
# power cap, the microbenchmarks at full clock
table=$(python3 gpu/clocks.py data/device/20261128-h200/call2-clocks.csv.gz data/device/20261128-h200/call2-phases.txt)
if echo "$table" | grep -qE '^fsdp_bench grid, 1 rank\(s\) +85\.9 +343 +188  1575 \(1485-1920\), 684 W$' &&
	echo "$table" | grep -qE '^microbench +19\.8 +80 +33  1980 \(1575-1980\), 138 W$' &&
	echo "$table" | grep -qE '^unshard.py, saved.py +47\.5 +190 +0  no busy sample$'; then
	ok "clocks.py on the H200's samples: FSDP2's steps at 1575 MHz and 684 W, the microbenchmarks at 1980 MHz"
else
	bad "clocks.py" "$table"
fi
head -2 data/device/20261128-h200/call2-phases.txt | tail -1 >"$tmp/one-phase"
python3 gpu/clocks.py data/device/20261128-h200/call2-clocks.csv.gz "$tmp/one-phase" >/dev/null 2>"$tmp/err"
rc=$?
if [ $rc = 2 ] && grep -q "1 phase line(s); a phase lasts until the next line" "$tmp/err"; then
	ok "clocks.py: one phase line, exit 2"
else
	bad "clocks.py one phase" "exit $rc: $(cat "$tmp/err")"
fi

# 2. steps that cannot run
if grep -q "^FAIL test rc=1" "$sum" && tar -xzOf "$tmp/out/logs.tar.gz" logs/test.log | grep -q "needs the GPU"; then
	ok "the GPU's test step says it needs the GPU"
else
	bad "test step" "$(grep ' test ' "$sum")"
fi
if grep -q "^SKIP nosuch: no such step" "$sum"; then ok "an unknown step is listed"; else bad "unknown step" "$(tail -3 "$sum")"; fi

# 1c. the staged step, rehearsed: several real ranks, every policy's numbers fsdp's; and it fails when
# they are not: another learning rate (the same first loss, later ones apart), another seed (another
# first loss)
# (CARRY: an archive that is not there; the script's default, gpu/carry.tar.gz, would put the binaries a
# session packed over this tree's: the rehearsal checks that it did not)
CARRY=$tmp/absent.tar.gz DEVICE=cpu OUT=$tmp/out3 DATA=$data BUDGET_S=200 bash gpu/device_session.sh staged \
	>"$tmp/log3" 2>&1
rc=$?
if grep -q "^carried: no $tmp/absent.tar.gz " "$tmp/out3/summary.txt"; then
	ok "a rehearsal unpacks no archive but the one CARRY names (not gpu/carry.tar.gz over the tree's binaries)"
else
	bad "carry" "$(grep '^carried:' "$tmp/out3/summary.txt" 2>/dev/null)"
fi
if [ $rc = 0 ] && grep -q "^OK staged rc=0 .*: staged: 7 runs, 0 failed or differed$" "$tmp/out3/summary.txt" &&
	[ "$(grep -c ': the same first loss, the rest within 1e-5$' "$tmp/log3")" = 5 ]; then
	ok "staged (rehearsed on the CPU backend): ddp, zero2, the optimizer offloaded and in backward on 2 ranks, and hsdp 2 x 2 give fsdp's numbers"
else
	bad "staged" "exit $rc: $(grep ' staged ' "$tmp/out3/summary.txt" 2>/dev/null) $(tail -3 "$tmp/log3")"
fi
for c in "run.lr=0.003:line 2" "run.seed=7:first loss"; do
	CARRY=$tmp/absent.tar.gz STAGED_SET="--set ${c%%:*}" DEVICE=cpu OUT=$tmp/out4 DATA=$data BUDGET_S=200 \
		bash gpu/device_session.sh staged >"$tmp/log4" 2>&1
	rc=$?
	if [ $rc = 0 ] && grep -q "^FAIL staged rc=1 .*: staged: 7 runs, 5 failed or differed$" "$tmp/out4/summary.txt" &&
		[ "$(tar -xzOf "$tmp/out4/logs.tar.gz" logs/staged.log | grep -c "^${c#*:}")" -ge 5 ]; then
		ok "staged with ${c%%:*} for the policies against fsdp: they differ (${c#*:}), the step fails (the session goes on)"
	else
		bad "staged with ${c%%:*}" "exit $rc: $(grep ' staged ' "$tmp/out4/summary.txt" 2>/dev/null)"
	fi
	rm -rf "$tmp/out4"
done
# the reference hangs (its watchdog fires at once: exit 4): the runs that share its path are not started
CARRY=$tmp/absent.tar.gz STAGED_TIMEOUT_S=0.001 DEVICE=cpu OUT=$tmp/out4 DATA=$data BUDGET_S=200 \
	bash gpu/device_session.sh staged >"$tmp/log4" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q "^FAIL staged rc=1 .*: staged: 1 runs, 1 failed or differed (fsdp2, the reference, hung: the rest not run)$" \
	"$tmp/out4/summary.txt"; then
	ok "staged: the reference's watchdog fires, the six other runs are not started (the session goes on)"
else
	bad "staged, the reference hung" "exit $rc: $(grep ' staged ' "$tmp/out4/summary.txt" 2>/dev/null)"
fi
rm -rf "$tmp/out4"

# 3. DEVICE
CARRY=$tmp/absent.tar.gz DEVICE=rocm OUT=$tmp/out2 bash gpu/device_session.sh host >"$tmp/log2" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "DEVICE=rocm (allowed: cuda, cpu)" "$tmp/log2"; then ok "DEVICE=rocm: exit 2"; else
	bad "DEVICE=rocm" "exit $rc: $(cat "$tmp/log2")"
fi

echo "$passed passed, $failed failed"
[ $failed = 0 ]
