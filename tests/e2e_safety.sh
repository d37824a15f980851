#!/usr/bin/env bash
# e2e_safety.sh - bad input and data safety, end to end: the rows of issue
# 12, each a check of what the binaries guarantee (README, "Bad input and
# data safety"):
#
#   1  an output never overwrites an input, a results file, or a file that
#      is not what it writes (--trace, --out, of both binaries); a trace
#      replaced and a results file appended to keep their permissions;
#   2  a FIFO, /dev/zero, /dev/urandom as the experiment: exit 2 at once
#      (tests/e2e_bad_input.sh, both binaries);
#   3  a full disk while appending: one line, exit 1, no crash, the report
#      printed, the file as it was (a 256 KiB tmpfs; skipped unless root);
#   4  a writer killed mid-append leaves the file readable, and its
#      temporary is removed by the next append;
#   5  --out and --trace through a symbolic link: the target gets the run;
#   6  a results file's configuration reads back through the parser (the
#      largest cluster; random configurations: tests/test_config.c);
#   7  gpu_run whose training diverges: a message, exit 3, nothing appended;
#   8  contradictory flags: exit 2 naming both;
#   9  a bad --out is found before the first step (both binaries), a
#      malformed results file included (/runs or /sweeps no group, /runs
#      full);
#  10  a stopped rank: the watchdog (run.timeout_s = 2) ends the job within
#      3.5 s, saying 2 s without progress, naming the rank and the op (in a
#      step, a collective running on the stream of its kind), and no
#      process is left; stopped while the job calibrates, the calibration
#      is named, no op of the step's schedule;
#  11  an empty experiment file is an error (here and tests/e2e_bad_input.sh);
#  12  MPI failing (tests/mpi_fault.c, preloaded on one rank): a failed
#      call is named with file:line and MPI's message, the job ends with
#      exit 1 and the results file is as it was; a rank whose MPI_Finalize
#      hangs is ended by the watchdog (exit 4, without the MPI_Abort MPI
#      forbids after finalize), the run it wrote kept; one rank out of
#      device memory mid-step (its host allocations failing) ends the job
#      at once, exit 1, said, nothing appended (the others waited in its
#      collectives until the watchdog's limit);
#  13  missing libraries stop the build with a hint to run `make deps`, and
#      `make asan` builds beside the normal binaries.
#
# One line per check, then `N passed, N failed`; non-zero exit on failure.
set -u
cd "$(dirname "$0")/.."
. tests/mpi_local.sh
SIM=$(realpath "${SIM:-./sim}")
GPU_RUN=$(realpath "${GPU_RUN:-./gpu_run}")
EXP=$(realpath experiments/tiny.ini)
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
tmp=$(mktemp -d)
mnt=""
cleanup() {
	[ -n "$mnt" ] && umount "$mnt" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
passed=0
failed=0
ok() { echo "ok   safety $1"; passed=$((passed + 1)); }
bad() { echo "FAIL safety $1: $2"; failed=$((failed + 1)); }

# runs FILE: the number of runs in a results file (-1 when it cannot be read)
runs() { h5ls "$1/runs" 2>/dev/null | wc -l || echo -1; }
sum() { md5sum <"$1" 2>/dev/null | cut -d' ' -f1; }
# left PID...: those of the processes still running after up to 5 s (a zombie has ended)
left() {
	local p l
	for _ in $(seq 50); do
		l=""
		for p in "$@"; do kill -0 "$p" 2>/dev/null && [ "$(ps -o stat= -p "$p")" != Z ] && l="$l $p"; done
		[ -z "$l" ] && break
		sleep 0.1
	done
	echo "$l"
}

# expect2 NAME EXPECTED CMD...: CMD exits 2 with EXPECTED on stderr
expect2() {
	local name=$1 expect=$2 rc
	shift 2
	timeout 60 "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
	rc=$?
	if [ $rc -eq 2 ] && grep -qF -- "$expect" "$tmp/err"; then
		ok "$name"
	else
		bad "$name" "exit $rc, stderr: $(head -3 "$tmp/err")"
	fi
}

cd "$tmp"
cp "$EXP" v.ini

# ---- 1. outputs never clobber -------------------------------------------
"$SIM" v.ini --out S.h5 >/dev/null
before=$(sum S.h5)
expect2 "1 --trace onto a results file" "--trace S.h5: exists and is not a Chrome trace this testbed wrote" \
	"$SIM" v.ini --trace S.h5
expect2 "1 --out and --trace the same file" "run.out = N.h5 and --trace N.h5 are the same file" \
	"$SIM" v.ini --out N.h5 --trace N.h5
[ -e N.h5 ] && bad "1 same file" "N.h5 was created"
[ "$(sum S.h5)" = "$before" ] && [ "$(runs S.h5)" = 1 ] && ok "1 the results file is untouched (1 run)" \
	|| bad "1 results file" "changed"
before=$(sum v.ini)
expect2 "1 --trace onto the experiment file" "--trace v.ini: is the input v.ini: not overwriting it" \
	"$SIM" v.ini --trace v.ini
expect2 "1 --out onto the experiment file" "run.out = v.ini: is the input v.ini: not overwriting it" \
	"$SIM" v.ini --out v.ini
ln -s v.ini v-link.json
expect2 "1 --trace onto a link to the experiment file" "is the input v.ini" "$SIM" v.ini --trace v-link.json
[ "$(sum v.ini)" = "$before" ] && ok "1 the experiment file is untouched" || bad "1 experiment file" "changed"
echo '{"notes": 1}' >notes.json
expect2 "1 --trace onto a JSON file it did not write" "not a Chrome trace this testbed wrote" \
	"$SIM" v.ini --trace notes.json
expect2 "1 --out onto a file that is not HDF5" "exists and is not an HDF5 file" "$SIM" v.ini --out notes.json
[ "$(cat notes.json)" = '{"notes": 1}' ] && ok "1 a foreign file is untouched" || bad "1 foreign file" "changed"
# a trace it wrote is replaced, and a results file appended to, each keeping the permissions its owner gave it
if "$SIM" v.ini --trace t.json >/dev/null && chmod 600 t.json && "$SIM" v.ini --trace t.json >/dev/null &&
	[ "$(stat -c %a t.json)" = 600 ]; then
	ok "1 a trace it wrote is replaced, its mode kept (600)"
else
	bad "1 trace replaced" "mode $(stat -c %a t.json 2>&1)"
fi
cp S.h5 P.h5 && chmod 640 P.h5
if "$SIM" v.ini --out P.h5 >/dev/null && [ "$(runs P.h5)" = 2 ] && [ "$(stat -c %a P.h5)" = 640 ]; then
	ok "1 a results file appended to keeps its mode (640)"
else
	bad "1 results file's mode" "$(runs P.h5) runs, mode $(stat -c %a P.h5 2>&1)"
fi
expect2 "1 gpu_run --out onto the experiment file" "run.out = v.ini: is the input v.ini" \
	"${MPIRUN[@]}" -np 2 "$GPU_RUN" v.ini --out v.ini

# ---- 3. disk full ---------------------------------------------------------
if [ "$(id -u)" != 0 ]; then
	echo "skip safety 3 disk full: needs root to mount a small tmpfs"
elif ! mkdir -p "$tmp/full" || ! mount -t tmpfs -o size=256k tmpfs "$tmp/full" 2>/dev/null; then
	echo "skip safety 3 disk full: cannot mount a tmpfs here"
else
	mnt=$tmp/full
	n=0 rc=0
	while [ $n -lt 60 ]; do
		"$SIM" "$OLDPWD/experiments/llama3.ini" --out "$mnt/r.h5" >"$tmp/full.out" 2>"$tmp/full.err"
		rc=$?
		[ $rc -ne 0 ] && break
		n=$((n + 1))
	done
	lines=$(wc -l <"$tmp/full.err")
	if [ $rc -eq 1 ] && [ "$lines" = 1 ] && grep -q "No space left on device" "$tmp/full.err" &&
		grep -q "^step time" "$tmp/full.out" && [ "$(runs "$mnt/r.h5")" = $n ] &&
		[ -z "$(ls "$mnt" | grep tmp)" ]; then
		ok "3 disk full after $n runs: exit 1, one line, report printed, $n runs intact, no temporary"
	else
		bad "3 disk full" "exit $rc after $n runs, $lines lines: $(head -2 "$tmp/full.err"); runs $(runs "$mnt/r.h5")"
	fi
	umount "$mnt" && mnt=""
fi

# ---- 4. a writer killed mid-append ----------------------------------------
sh -c 'exit 0' &
dead=$!
wait $dead
"$SIM" v.ini --out K.h5 >/dev/null
cp K.h5 "K.h5.tmp.$dead" # what a killed writer leaves: a full copy
"$SIM" v.ini --out K.h5 >/dev/null 2>"$tmp/err"
if [ ! -e "K.h5.tmp.$dead" ] && grep -q "removed .*K.h5.tmp.$dead, left by a writer (pid $dead) that died" "$tmp/err" &&
	[ "$(runs K.h5)" = 2 ]; then
	ok "4 a dead writer's temporary is removed by the next append"
else
	bad "4 stale temporary" "$(ls K.h5*; cat "$tmp/err")"
fi
intact=1
for i in 1 2 3 4 5 6; do
	n=$(runs K.h5)
	"$SIM" "$OLDPWD/experiments/llama3.ini" --out K.h5 >/dev/null 2>&1 &
	pid=$!
	sleep "0.0$((RANDOM % 10))"
	kill -9 $pid 2>/dev/null
	wait $pid 2>/dev/null
	m=$(runs K.h5)
	{ [ "$m" = "$n" ] || [ "$m" = $((n + 1)) ]; } || intact=0
	"$SIM" v.ini --out K.h5 >/dev/null 2>&1 || intact=0
	[ "$(runs K.h5)" = $((m + 1)) ] || intact=0
done
[ $intact = 1 ] && [ -z "$(ls | grep 'K.h5.tmp')" ] && ok "4 six kill -9 mid-append: the file stays readable, no temporary stays" \
	|| bad "4 kill -9" "$(ls K.h5*) runs $(runs K.h5)"

# ---- 5. symbolic links ------------------------------------------------------
mkdir sub
ln -s sub/real.h5 link.h5
ln -s sub/real.json link.json
if "$SIM" v.ini --out link.h5 --trace link.json >/dev/null && "$SIM" v.ini --out link.h5 >/dev/null &&
	[ -L link.h5 ] && [ -L link.json ] && [ "$(runs sub/real.h5)" = 2 ] && [ -s sub/real.json ]; then
	ok "5 --out and --trace through a link: the target gets the runs, the link stays"
else
	bad "5 links" "$(ls -l link.h5 link.json sub)"
fi

# ---- 6. what a results file holds reads back --------------------------------
"$SIM" --nodes 65536 --gpus-per-node 64 --out big.h5 >/dev/null
if sets=$(/usr/bin/python3 - big.h5 <<'PY'
import h5py, sys
attrs = h5py.File(sys.argv[1], "r")["runs/000000"].attrs
print("\n".join(f"--set\n{k}={v}" for k, v in attrs.items() if "." in k))
assert attrs["policy.shard_group"] == "4194304"
PY
); then
	mapfile -t args <<<"$sets"
	if "$SIM" "${args[@]}" --json >/dev/null 2>"$tmp/err"; then
		ok "6 the largest cluster's recorded configuration reads back (shard_group 4194304)"
	else
		bad "6 read back" "$(head -3 "$tmp/err")"
	fi
else
	bad "6 read back" "no configuration attributes"
fi

# ---- 7. divergence ----------------------------------------------------------
"${MPIRUN[@]}" -np 2 "$GPU_RUN" v.ini --lr 10 --weight-decay 10 --steps 30 --out n.h5 >"$tmp/out" 2>"$tmp/err" </dev/null
rc=$?
if [ $rc = 3 ] && grep -q "gpu_run: step [0-9]*: the loss is NaN: training diverged .*nothing appended to n.h5" "$tmp/err" &&
	[ ! -e n.h5 ]; then
	ok "7 diverging training: exit 3, a message, nothing appended"
else
	bad "7 divergence" "exit $rc, $(grep -m1 gpu_run "$tmp/err"), $(ls n.h5 2>&1)"
fi

# ---- 8. contradictory flags --------------------------------------------------
expect2 "8 --json --schedule" "--json and --schedule cannot be used together" "$SIM" v.ini --json --schedule
expect2 "8 --top without --policy all" "--top needs --policy all" "$SIM" v.ini --top 3
expect2 "8 --policy all --trace" "--policy all and --trace cannot be used together" "$SIM" v.ini --policy all --trace x.json
expect2 "8 --bench --json" "--bench and --json cannot be used together" "$SIM" v.ini --bench 2 --json
expect2 "8 --trace twice" "--trace: given twice" "$SIM" v.ini --trace a.json --trace b.json
expect2 "8 --trace ''" "--trace: needs a value" "$SIM" v.ini --trace ""

# ---- 9. output paths checked before the first step ----------------------------
expect2 "9 ./sim --out in a missing directory" "run.out = /nonexistent/x.h5: directory /nonexistent does not exist" \
	"$SIM" v.ini --out /nonexistent/x.h5
start=$(date +%s)
expect2 "9 gpu_run --out in a missing directory" "run.out = /nonexistent/x.h5: directory /nonexistent does not exist" \
	"${MPIRUN[@]}" -np 2 "$GPU_RUN" v.ini --steps 1000 --out /nonexistent/x.h5
grep -q "^step " "$tmp/out" && bad "9 before the first step" "gpu_run ran steps first" \
	|| ok "9 gpu_run refuses it before the first step ($(($(date +%s) - start)) s)"
# an HDF5 file whose /runs or /sweeps is no group, or whose /runs holds its last index: no append could land
/usr/bin/python3 - <<'PY'
import h5py
h5py.File("dsruns.h5", "w")["runs"] = [1]
h5py.File("dssweeps.h5", "w")["sweeps"] = [1]
with h5py.File("full.h5", "w") as f:
    f.create_group("runs/999999")
PY
sums=$(md5sum dsruns.h5 dssweeps.h5 full.h5)
expect2 "9 ./sim --out onto a file whose /runs is a dataset" \
	"run.out = dsruns.h5: is an HDF5 file whose /runs is a dataset, not a group" "$SIM" v.ini --out dsruns.h5
expect2 "9 gpu_run --out onto a file whose /runs is a dataset" \
	"run.out = dsruns.h5: is an HDF5 file whose /runs is a dataset, not a group" \
	"${MPIRUN[@]}" -np 2 "$GPU_RUN" v.ini --out dsruns.h5
grep -q "^step " "$tmp/out" && bad "9 /runs a dataset, before the first step" "gpu_run ran steps first"
expect2 "9 ./sim --sweep --out onto a file whose /sweeps is a dataset" \
	"--out dssweeps.h5: is an HDF5 file whose /sweeps is a dataset, not a group" \
	"$SIM" --sweep "$OLDPWD/experiments/sweeps/small.ini" --out dssweeps.h5
expect2 "9 ./sim --out onto a file whose /runs is full" \
	"run.out = full.h5: is an HDF5 file whose /runs is full (it holds /runs/999999, the last index)" \
	"$SIM" v.ini --out full.h5
[ "$sums" = "$(md5sum dsruns.h5 dssweeps.h5 full.h5)" ] || bad "9 malformed results files" "changed"

# ---- 10. a stopped rank ---------------------------------------------------------
"${MPIRUN[@]}" -np 2 "$GPU_RUN" v.ini --steps 1000000 --timeout-s 2 >"$tmp/wd.out" 2>"$tmp/wd.err" </dev/null &
job=$!
for _ in $(seq 100); do grep -q "^step 3 " "$tmp/wd.out" && break; sleep 0.1; done
ranks=$(pgrep -P $job -x gpu_run | tr '\n' ' ')
victim=${ranks%% *} # stop the first; another rank must notice
if [ -z "$victim" ]; then
	bad "10 watchdog" "no rank of the job found: $(cat "$tmp/wd.err")"
	kill $job 2>/dev/null
else
	kill -STOP "$victim"
	t0=$(date +%s%N)
	for _ in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
	wait $job 2>/dev/null
	rc=$?
	secs=$(( ($(date +%s%N) - t0) / 1000000 ))
	# shellcheck disable=SC2086 # the ranks' PIDs, a word each
	left=$(left $ranks)
	if [ -n "$left" ]; then
		bad "10 watchdog" "processes left:$left"
		for p in $left; do kill -CONT "$p"; kill -9 "$p"; done
	elif [ $rc = 4 ] && [ $secs -lt 3500 ] && why=$(/usr/bin/python3 - "$tmp/wd.err" <<'PY'
import re, sys
# the live rank's message: what its host waits on and, inside a step, each stream's op. It can only be stuck
# in a collective (no compute waits on a peer): a stream is running one, on the stream of its kind (fsdp)
# (a step's own streams are said only when the host waits inside a step)
m = [l for l in open(sys.argv[1]) if "no progress" in l]
assert len(m) >= 1, "no watchdog message"
l = m[0].rstrip("\n")
h = re.match(r"gpu_run: rank [01]: no progress for 2 s \(run\.timeout_s = 2\): waiting on (.*); a peer rank is "
             r"stopped, dead or stuck: aborting the job$", l)
assert h, "not the watchdog's message: " + l
what = h.group(1)
if re.match(r"the barrier before step \d+$|the all-reduce of the loss of step \d+$", what):
    print("between steps: " + what)
    sys.exit(0)
s = re.match(r"step (\d+): (.*)$", what)
assert s and int(s.group(1)) >= 3, "waiting on: " + what
running, waited = {}, []
for part in s.group(2).split("; "):
    r = re.match(r"(.+) \((\w+)\) running on stream (\w+)$", part)
    w = re.match(r"stream (\w+) waiting for the end of (.+)$", part)
    assert r or w, "a stream said as neither running nor waiting: " + part
    if r:
        running[r.group(1)] = (r.group(2), r.group(3))
    else:
        waited.append(w.group(2))
# compute waits for each all-gather before the block it gathers, in the order the all-gather stream runs
# them: an all-gather waited for is the one that stream runs, not the one that last ended there
ag = [op for op, (kind, stream) in running.items() if stream == "allgather"]
for op in waited:
    assert not op.startswith("AG ") or ag in ([], [op]), "waiting for %s, the all-gather stream runs %s" % (op, ag)
kinds = {"AG": "allgather", "RS": "reduce_scatter", "AR": "allreduce"}
for op, (kind, stream) in running.items():
    assert kinds.get(op.split()[0], kind) == kind, "%s said to be a %s" % (op, kind)
coll = {k: v for k, v in running.items() if v[0] in kinds.values()}
assert coll, "no collective running: " + what
for op, (kind, stream) in coll.items():
    assert kind == stream, "%s (%s) on stream %s" % (op, kind, stream)
print("in step %s: %s" % (s.group(1), ", ".join(sorted(coll))))
PY
2>&1); then
		ok "10 a stopped rank: the job ends after $secs ms, exit 4, naming the rank and the op ($why); no process left"
	else
		bad "10 watchdog" "exit $rc after $secs ms: ${why:-} $(grep -m1 "gpu_run" "$tmp/wd.err")"
	fi
fi

# a rank stopped while the job calibrates: the message names the calibration's phase, no op of the step's
# schedule (the microbenchmarks' events are not the schedule's ops, and were named as if they were whenever a
# stream of the live rank was mid-command: this catches that only when the stop finds one so)
"${MPIRUN[@]}" -np 2 "$GPU_RUN" v.ini --calibrate "$tmp/wdcal.h5" --timeout-s 2 >"$tmp/wdc.out" 2>"$tmp/wdc.err" </dev/null &
job=$!
for _ in $(seq 100); do grep -q "calibrat" "$tmp/wdc.out" "$tmp/wdc.err" 2>/dev/null && break; sleep 0.1; done
sleep 0.5
ranks=$(pgrep -P $job -x gpu_run | tr '\n' ' ')
victim=${ranks%% *}
if [ -n "$victim" ] && kill -STOP "$victim" 2>/dev/null; then
	for _ in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
	wait $job 2>/dev/null
	rc=$?
	# shellcheck disable=SC2086 # the ranks' PIDs, a word each
	left=$(left $ranks)
	for p in $left; do kill -CONT "$p"; kill -9 "$p"; done
	m=$(grep -m1 "no progress" "$tmp/wdc.err")
	if [ $rc = 4 ] && [ -z "$left" ] && echo "$m" | grep -q "waiting on the calibration's microbenchmarks" &&
		! echo "$m" | grep -q "running on stream\|waiting for the end of"; then
		ok "10 a rank stopped in the calibration: exit 4, the phase named, no op of the schedule"
	else
		bad "10 watchdog in the calibration" "exit $rc, left '$left': $m"
	fi
else
	wait $job 2>/dev/null
	bad "10 watchdog in the calibration" "no rank of the job found, or it ended first: $(tail -2 "$tmp/wdc.err")"
fi

# ---- 11. empty experiment files ------------------------------------------------
: >empty.ini
expect2 "11 an empty experiment file" "empty.ini: has no 'key = value' line" "$SIM" empty.ini
expect2 "11 /dev/null as the experiment" "/dev/null: is a character device" "$SIM" /dev/null

# ---- 12. MPI itself fails -------------------------------------------------------
# tests/mpi_fault.c, preloaded on rank 1: its third MPI_Barrier fails; then its MPI_Finalize never returns
no_proc() { # no rank of this section's jobs left; those left are killed
	local rest
	# shellcheck disable=SC2046 # the PIDs, a word each
	rest=$(left $(pgrep -f -- "--out mpi.h5"))
	[ -z "$rest" ] && return 0
	# shellcheck disable=SC2086
	kill -9 $rest
	return 1
}
if ! mpicc -shared -fPIC -o "$tmp/mpi_fault.so" "$OLDPWD/tests/mpi_fault.c" 2>"$tmp/err"; then
	bad "12 the MPI fault shim" "does not build: $(head -3 "$tmp/err")"
else
	fault=(-x LD_PRELOAD="$tmp/mpi_fault.so" -x FAULT_RANK=1 -x ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0")
	"${MPIRUN[@]}" -np 2 "$GPU_RUN" v.ini --steps 2 --out mpi.h5 >/dev/null 2>&1 </dev/null
	before=$(sum mpi.h5)
	timeout 60 "${MPIRUN[@]}" -np 2 "${fault[@]}" -x FAULT_BARRIER=3 "$GPU_RUN" v.ini --steps 5 --out mpi.h5 \
		>"$tmp/out" 2>"$tmp/err" </dev/null
	rc=$?
	if [ $rc = 1 ] && no_proc && [ "$(sum mpi.h5)" = "$before" ] && [ "$(runs mpi.h5)" = 1 ] &&
		grep -q "^gpu_run: MPI_Barrier(MPI_COMM_WORLD) failed at gpu/run/main.c:[0-9]*: MPI_ERR_COMM: invalid communicator$" \
			"$tmp/err"; then
		ok "12 a failed MPI call: the call, file:line and MPI's message, exit 1, the results file as it was"
	else
		bad "12 a failed MPI call" "exit $rc, runs $(runs mpi.h5): $(grep -m2 "gpu_run\|MPI" "$tmp/err")"
	fi
	# the run's results are written before MPI_Finalize; a finalize that hangs is the watchdog's, which
	# must not call MPI_Abort then (MPI forbids it after MPI_Finalize): it exits the process, status 4
	t0=$(date +%s%N)
	timeout 60 "${MPIRUN[@]}" -np 2 "${fault[@]}" -x FAULT_FINALIZE=1 "$GPU_RUN" v.ini --steps 2 --timeout-s 2 \
		--out mpi.h5 >"$tmp/out" 2>"$tmp/err" </dev/null
	rc=$?
	secs=$(( ($(date +%s%N) - t0) / 1000000 ))
	if [ $rc = 4 ] && no_proc && [ "$(runs mpi.h5)" = 2 ] && ! grep -q "after MPI_FINALIZE" "$tmp/err" &&
		grep -q "^gpu_run: rank 1: no progress for 2 s (run.timeout_s = 2): waiting on MPI_Finalize;" "$tmp/err"; then
		ok "12 MPI_Finalize stuck on a rank: the watchdog ends it (exit 4, no MPI_Abort after finalize) in $secs ms; the run kept"
	else
		bad "12 MPI_Finalize stuck" "exit $rc after $secs ms, runs $(runs mpi.h5): $(grep -m3 "gpu_run\|MPI" "$tmp/err")"
	fi
	# rank 1's device segments of more than 3 MB fail (a host out of memory on one node): rank 0 would wait in
	# the collectives rank 1 never posts; the job ends at once, not at run.timeout_s (30 s here), nothing appended
	before=$(sum mpi.h5)
	t0=$(date +%s%N)
	timeout 60 "${MPIRUN[@]}" -np 2 "${fault[@]}" -x FAULT_ALLOC_ABOVE=3000000 "$GPU_RUN" v.ini --batch 4 --seq 128 \
		--steps 1 --warmup 0 --timeout-s 30 --out mpi.h5 >"$tmp/out" 2>"$tmp/err" </dev/null
	rc=$?
	secs=$(( ($(date +%s%N) - t0) / 1000000 ))
	if [ $rc = 1 ] && [ $secs -lt 20000 ] && no_proc && [ "$(sum mpi.h5)" = "$before" ] &&
		grep -q "^gpu_run: step 1: rank 1 is out of device memory: the step does not fit this device .*stopping every rank, nothing appended to mpi.h5$" \
			"$tmp/err" "$tmp/out"; then
		ok "12 one rank out of device memory mid-step: the job ends in $secs ms, exit 1, said, nothing appended"
	else
		bad "12 one rank out of device memory" "exit $rc after $secs ms: $(grep -h -m3 "gpu_run" "$tmp/err" "$tmp/out")"
	fi
fi

# ---- 13. the build -------------------------------------------------------------
cd "$OLDPWD"
if PKG_CONFIG_LIBDIR=/nonexistent make -s --no-print-directory BUILD="$tmp/nolibs" "$tmp/nolibs/core/xalloc.o" \
	>"$tmp/out" 2>"$tmp/err"; then
	bad "13 missing libraries" "the build went on"
elif grep -q "run 'make deps'" "$tmp/err" && ! grep -q "hdf5.h" "$tmp/err" && [ ! -e "$tmp/nolibs/core/xalloc.o" ]; then
	ok "13 missing libraries stop the build with a hint to run make deps"
else
	bad "13 missing libraries" "$(head -3 "$tmp/err")"
fi
dry=$(make -n asan 2>&1)
if ! grep -Eq '(^|[ ;])rm [^|;]*(sim|gpu_run|run_tests)( |$)' <<<"$dry" && grep -q "build-asan/sim" <<<"$dry"; then
	ok "13 make asan builds build-asan/sim and build-asan/gpu_run and removes nothing"
else
	bad "13 make asan" "$(grep -E 'rm |build-asan' <<<"$dry" | head -3)"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
