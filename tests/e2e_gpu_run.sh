#!/usr/bin/env bash
# e2e_gpu_run.sh - ./gpu_run's CPU backend, end to end, over MPI.
#
#   1. the tiny model learns: the loss of its last step is below 0.9 x the first;
#      its time by phase sums to the whole, the ops its file records are
#      those of its median step, and its summary's median and 10th and 90th
#      percentiles are its steps', its exposed communication not its compute;
#      the facts it prints (backend, binary, fabric) are its attributes;
#   2. data-parallel equivalence: the same global batch (world x M fixed)
#      gives the same per-step losses and final parameters (their sum and
#      sum of squares) whatever the policy, to 1e-5 relative (fp32
#      summation order differs between reduce-scatter and all-reduce, so
#      not bit for bit): ddp, zero2 vs fsdp; hsdp 2x2 vs fsdp on 4 ranks;
#      no-sync vs sync-each; full checkpointing vs none; the optimizer in
#      backward vs after it; block+io and whole wrapping vs block; and the
#      pytorch runtime (copy-in/out; at one rank and over shard groups of
#      one, copies instead of collectives), offload and the chunked loss; 4 ranks
#      with one microbatch vs 2 ranks with two (the accumulation's scaling,
#      also with an AdamW eps large enough that the 1/M scale shows);
#      and, so the comparison can fail, another seed must differ; and the
#      fsdp run's numbers are those experiments/pytorch/oracle.py computes
#      (a Llama in plain PyTorch: tests/e2e_pytorch.sh);
#   3. the streams: every policy's run gives bit-identical losses and
#      parameters to its --serialize run (one op at a time, no overlap),
#      and its peak allocated and reserved memory equal ./sim's prediction
#      for the same configuration, byte for byte (one allocator, core/alloc.c);
#      and at a capacity small enough that the caching allocator flushes its
#      cache (releasing segments) and overruns it: the numbers of a run
#      without a capacity, ./sim's memory and ./sim's allocator line, also
#      with eight microbatches (./sim skips those that repeat, the run
#      allocates for every op);
#   4. run.out appends one run per invocation (/runs/000000, /runs/000001)
#      with its ops and memory datasets, and the ops show a collective
#      overlapping compute;
#   5. a world size that is not nodes x gpus_per_node exits 2 with a message;
#   6. the emulated fabric (--emulate-world N: one process as rank 0 of an
#      N-rank job): its peak memory is ./sim's for the N-rank job, it puts
#      exactly the schedule's wire bytes on the emulated wire, every
#      collective lasts at least its ring time on the emulated link, HSDP's
#      replica ring gets a link of its own, the facts land in the results
#      file, the emulated model's loss falls; wrong uses of the gpu_run
#      flags exit 2 with a message (--out beside --calibrate or --hardware too),
#      their bounds run (a link without latency), --hardware names this
#      machine's processors;
#   7. --calibrate's file is checked before the first measurement: a file
#      that is no calibration file (a results file, another HDF5 file, a
#      text file, a link to one or to the experiment, the default file),
#      or one in no directory, exits 2 at once, the file as it was; an
#      empty HDF5 file gets a session.
# One line per check, then `N passed, N failed`; non-zero exit on failure.
set -u
cd "$(dirname "$0")/.."
. tests/mpi_local.sh
SIM=${SIM:-./sim}             # the binaries under test (make asan: build-asan/)
GPU_RUN=${GPU_RUN:-./gpu_run}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
# a rank that exits non-zero: mpirun ends the others at once, without its 2 s of grace (gpu_run
# handles no signal, so the grace changes nothing but the wait; most checks here exit 2)
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca odls_base_sigkill_timeout 0)
EXP=experiments/tiny.ini
TOL=1e-5
# under `make asan`: Open MPI's own allocations alive at exit are not our leaks
printf 'leak:%s\n' libmpi.so libopen-pal.so libopen-rte.so libpmix.so libhwloc.so libevent mca_ >"$tmp/lsan.supp"
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$tmp/lsan.supp"

ok() { echo "ok   gpu_run $1"; passed=$((passed + 1)); }
bad() { echo "FAIL gpu_run $1: $2"; failed=$((failed + 1)); }

if [ ! -x "$GPU_RUN" ] || ! command -v mpirun >/dev/null; then
	bad "setup" "needs ./gpu_run (make gpu_run) and mpirun"
	echo "$passed passed, $failed failed"
	exit 1
fi

# run NAME NP ARGS...: run the tiny experiment; its numbers (per-step losses,
# then the parameter sum and sum of squares) go to $tmp/NAME, one a line,
# its arguments to $tmp/NAME.args.
run() {
	local name=$1 np=$2
	shift 2
	printf '%s\n' "$@" >"$tmp/$name.args"
	"${MPIRUN[@]}" -np "$np" "$GPU_RUN" "$EXP" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null
	local rc=$?
	awk '/^step [0-9]+ loss /{ print $4 } /^params sum /{ print $3; print $5 }' \
		"$tmp/$name.out" >"$tmp/$name"
	return $rc
}

# memory NAME: the run's peak allocated and reserved bytes, and ./sim's for the same arguments (but
# run.out: the run's file is the run's)
memory() {
	local run sim args
	run=$(awk '/^summary: peak memory/{ print $4, $9 }' "$tmp/$1.out")
	mapfile -t args < <(awk '/^--set$/ { held = $0; next }
		held != "" { if ($0 !~ /^run\.out=/) { print held; print } held = ""; next } { print }' "$tmp/$1.args")
	sim=$("$SIM" "$EXP" "${args[@]}" --json | /usr/bin/python3 -c \
		'import json, sys; j = json.load(sys.stdin); print(j["peak_alloc_bytes"], j["peak_reserved_bytes"])')
	[ -n "$run" ] && [ "$run" = "$sim" ] && echo "$run" && return 0
	echo "run $run, sim $sim"
	return 1
}

# streams NAME NP ARGS...: the run NAME agrees bit for bit with its serialized twin, and its memory with ./sim
streams() {
	local name=$1 np=$2 diff got
	shift 2
	if ! run "$name.serial" "$np" "$@" --serialize; then
		bad "$name streams" "the --serialize run failed: $(tail -3 "$tmp/$name.serial.err")"
	elif ! cmp -s "$tmp/$name" "$tmp/$name.serial"; then
		diff=$(same "$name" "$name.serial")
		bad "$name streams" "streams and --serialize differ ($diff)"
	else
		ok "$name: streams = --serialize, bit for bit"
	fi
	if got=$(memory "$name"); then
		ok "$name: peak memory = ./sim's ($got bytes allocated, reserved)"
	else
		bad "$name memory" "$got"
	fi
}

# same A B: the two runs' numbers agree to TOL relative; prints the largest difference
same() {
	paste "$tmp/$1" "$tmp/$2" | awk -v tol="$TOL" '
		{ a = $1 + 0; b = $2 + 0; d = a - b; if (d < 0) d = -d
		  m = a < 0 ? -a : a; if ((b < 0 ? -b : b) > m) m = (b < 0 ? -b : b)
		  r = m > 0 ? d / m : d; if (r > worst) worst = r; n++ }
		END { printf "%.2e", worst; exit !(n >= 3 && worst <= tol) }'
}

# 1. learning
if run learn 2 --set run.steps=7 --set "run.out=$tmp/learn.h5"; then
	first=$(head -1 "$tmp/learn")
	last=$(awk '/^step [0-9]+ loss /{ l = $4 } END { print l }' "$tmp/learn.out")
	if awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < 0.9 * f) }'; then
		ok "tiny learns: loss $first -> $last"
	else
		bad "tiny learns" "loss $first -> $last, not below 0.9 x the first"
	fi
else
	bad "tiny learns" "exit status $?: $(tail -3 "$tmp/learn.err")"
fi
# where the run's time went: its phases sum to the whole, and the steps' wall clock holds every step's time
if out=$(awk '/^step [0-9]+ loss /{ ms += $6; n++ }
	/^gpu_run: .* s in all: / { line = $0; k = split($0, w, " ")
		for (i = 2; i <= k; i++) { if (w[i] == "s," || w[i] == "s") part[++np] = w[i - 1]; if (w[i] == "steps") steps = w[i - 1] } }
	END { if (np != 7 || steps != n || n != 8) { print "no phases line of " n " steps: " line; exit 1 }
		for (i = 2; i <= np; i++) { if (part[i] < 0) { print "a negative phase: " line; exit 1 } sum += part[i] }
		if (sum < part[1] - 0.011 || sum > part[1] + 0.011) { print "the phases sum to " sum " s, not " part[1]; exit 1 }
		if (part[5] * 1000 < ms - 10) { print "the steps took " part[5] " s, less than their " ms " ms"; exit 1 }
		printf "%s s in all, its %d steps %s s (their own times %.3f s)", part[1], n, part[5], ms / 1000 }' \
	"$tmp/learn.out"); then
	ok "the run's time by phase: $out"
else
	bad "the run's time by phase" "$out"
fi

# the ops a run records are those of its median step (of 7, the middle one): their last end, over every rank, is
# that step's time; and the summary's median, 10th and 90th percentiles (interpolated between the steps) are the
# measured steps', on its line and in the file
if out=$(awk '/^step [0-9]+ loss .* ms$/ { print $6 }' "$tmp/learn.out" | /usr/bin/python3 -c '
import re, sys, h5py, statistics
t = [float(x) for x in sys.stdin.read().split()]
med = statistics.median(t)
want = min(abs(x - med) for x in t)
near = [x for x in t if abs(x - med) - want < 0.002]
def q(f):
    s = sorted(t); i = f * (len(s) - 1); lo = int(i)
    return s[lo] + (i - lo) * (s[min(lo + 1, len(s) - 1)] - s[lo])
said = [float(x) for x in re.search(r"^summary: step time ([0-9.]+) ms \(median of 7 steps, 10th to 90th percentile "
                                    r"([0-9.]+) to ([0-9.]+) ms\)", open(sys.argv[2]).read(), re.M).groups()]
with h5py.File(sys.argv[1], "r") as f:
    got = max(f["runs/000000/ops_by_rank"]["end_ns"]) / 1e6
    a = f["runs/000000/summary"].attrs
    kept = [1e3 * a["step_time_s"], 1e3 * a["step_time_p10_s"], 1e3 * a["step_time_p90_s"]]
    # the medians of compute and of exposed communication are each their own (on 2 ranks of a core each, the
    # exposed part a few ms of a step of tens)
    apart = a["steps"] == 7 and 0 < a["exposed_comm_s"] < 0.5 * a["compute_s"]
stats = [med, q(0.1), q(0.9)]
ok = len(t) == 7 and any(abs(got - x) < 0.0006 for x in near)
ok = ok and all(abs(x - y) < 0.002 for x, y in zip(said + kept, stats + stats)) and apart
print("the ops end at %.4f ms; the steps took %s ms: median, p10, p90 %s, said %s, kept %s" % (got,
      " ".join("%.3f" % x for x in t), *(" ".join("%.3f" % x for x in v) for v in (stats, said, kept))))
sys.exit(not ok)' "$tmp/learn.h5" "$tmp/learn.out"); then
	ok "the recorded step is the median one, the percentiles the steps': $out"
else
	bad "the recorded step is the median one, the percentiles the steps'" "$out"
fi

# every fact the run prints ("run: KEY = VALUE") is an attribute of its group in the file
if out=$(/usr/bin/python3 -c '
import sys, h5py
facts = [l[5:].rstrip("\n").split(" = ", 1) for l in open(sys.argv[2]) if l.startswith("run: ")]
with h5py.File(sys.argv[1], "r") as f:
    a = f["runs/000000"].attrs
    got = [(k, v, a[k].decode() if isinstance(a.get(k), bytes) else a.get(k)) for k, v in facts]
bad = [(k, v, g) for k, v, g in got if g != v]
print("%d facts (%s)%s" % (len(facts), ", ".join(k for k, v in facts), "; differ: %s" % bad if bad else ""))
sys.exit(len(facts) < 3 or bool(bad))' "$tmp/learn.h5" "$tmp/learn.out"); then
	ok "the run's facts are its attributes: $out"
else
	bad "the run's facts are its attributes" "$out"
fi

# 2. equivalence: run NAME and compare with REF
STEPS=(--set run.warmup=0 --set run.steps=3)
equiv() {
	local what=$1 ref=$2 name=$3 np=$4 diff
	shift 4
	if ! run "$name" "$np" "${STEPS[@]}" "$@"; then
		bad "$what" "exit status $?: $(tail -3 "$tmp/$name.err")"
		return
	fi
	if diff=$(same "$ref" "$name"); then
		ok "$what: max relative difference $diff"
	else
		bad "$what" "max relative difference $diff > $TOL ($(tr '\n' ' ' <"$tmp/$ref") vs $(tr '\n' ' ' <"$tmp/$name"))"
	fi
	streams "$name" "$np" "${STEPS[@]}" "$@"
}

if run fsdp2 2 "${STEPS[@]}" && run fsdp4 4 "${STEPS[@]}" --set cluster.gpus_per_node=4; then
	streams fsdp2 2 "${STEPS[@]}"
	streams fsdp4 4 "${STEPS[@]}" --set cluster.gpus_per_node=4
	# the numbers themselves, which every policy shares (the data, the initial weights, AdamW's betas) and so no
	# comparison between policies sees: experiments/pytorch/oracle.py, a Llama trained in plain PyTorch in float64,
	# gives these for this run within 4e-8 (tests/e2e_pytorch.sh, section 7, with PyTorch)
	printf '%s\n' 5.921811581 5.427518129 5.003893852 3.667440465e+02 1.784372432e+04 >"$tmp/oracle"
	if diff=$(same fsdp2 oracle); then
		ok "fsdp on 2 ranks: the losses and parameters oracle.py computes, max relative difference $diff"
	else
		bad "fsdp on 2 ranks against oracle.py's numbers" "max relative difference $diff > $TOL ($(tr '\n' ' ' \
			<"$tmp/fsdp2"))"
	fi
	# the model's RoPE base is the one used: Llama 2's 10000 moves the losses by 1.3e-3 (oracle.py's numbers)
	printf '%s\n' 5.929824893 5.447789899 5.026379773 3.667141422e+02 1.784370631e+04 >"$tmp/oracle_theta"
	if ! run theta 2 "${STEPS[@]}" --rope-theta 10000; then
		bad "model.rope_theta = 10000" "exit status $?: $(tail -3 "$tmp/theta.err")"
	elif diff=$(same theta oracle_theta); then
		ok "model.rope_theta = 10000: the losses and parameters oracle.py computes, max relative difference $diff"
	else
		bad "model.rope_theta = 10000 against oracle.py's numbers" "max relative difference $diff > $TOL ($(tr \
			'\n' ' ' <"$tmp/theta"))"
	fi
	equiv "ddp = fsdp (2 ranks)" fsdp2 ddp 2 --set policy.sharding=ddp
	equiv "zero2 = fsdp (2 ranks; the watchdog off, run.timeout_s = 0)" fsdp2 zero2 2 --set policy.sharding=zero2 \
		--set run.timeout_s=0
	equiv "hsdp 2x2 = fsdp (4 ranks)" fsdp4 hsdp 4 --set cluster.nodes=2 --set policy.sharding=hsdp
	equiv "4 ranks x M=1 = 2 ranks x M=2 (same global batch)" fsdp2 fsdp4m1 4 \
		--set cluster.gpus_per_node=4 --set policy.microbatches=1
	# AdamW divides the gradient's scale away; with an eps as large as the gradients, the 1/M of the
	# accumulation shows (and the run with it must differ from the one without)
	if run fsdp2eps 2 "${STEPS[@]}" --set run.eps=0.01 && ! diff=$(same fsdp2 fsdp2eps); then
		equiv "4 ranks x M=1 = 2 ranks x M=2, AdamW's eps 0.01 (the 1/M gradient scale not hidden)" fsdp2eps \
			fsdp4m1eps 4 --set cluster.gpus_per_node=4 --set policy.microbatches=1 --set run.eps=0.01
	else
		bad "run.eps moves the result" "eps 0.01 and 1e-8 agree, or the run failed: $(tail -3 "$tmp/fsdp2eps.err")"
	fi
	equiv "no-sync = sync-each (M=2)" fsdp2 nosync 2 --set policy.accum=no-sync
	equiv "ac full = none" fsdp2 acfull 2 --set policy.ac=full
	equiv "optimizer in backward = after" fsdp2 oib 2 --set policy.optim_in_backward=true
	equiv "wrap block+io = block" fsdp2 blockio 2 --set policy.wrap=block+io
	equiv "wrap whole = block" fsdp2 whole 2 --set policy.wrap=whole
	equiv "pytorch runtime (copy-in/out) = testbed" fsdp2 pytorch 2 --set policy.runtime=pytorch
	equiv "offload params = none" fsdp2 offload 2 --set policy.offload=params
	equiv "chunked loss = full" fsdp2 chunked 2 --set policy.loss=chunked
	equiv "partial:1 = sync-each (M=2)" fsdp2 partial 2 --set policy.accum=partial:1
	equiv "hsdp defer-replica 2x2 = fsdp (4 ranks)" fsdp4 defer 4 --set cluster.nodes=2 \
		--set policy.sharding=hsdp --set policy.accum=defer-replica
	equiv "reshard no = yes" fsdp2 noreshard 2 --set policy.reshard=no
	equiv "reshard all-but-last = yes" fsdp2 abl 2 --set policy.reshard=all-but-last
	equiv "wrap every:2 = block" fsdp2 every2 2 --set policy.wrap=every:2
	equiv "fused optimizer = foreach" fsdp2 fused 2 --set policy.optim=fused
	equiv "per-param optimizer = foreach" fsdp2 perparam 2 --set policy.optim=per-param
	equiv "ac selective = none" fsdp2 acsel 2 --set policy.ac=selective
	equiv "offload optim = none" fsdp2 offopt 2 --set policy.offload=optim
	equiv "flat params, concat last only = block" fsdp2 flat 2 --set policy.flat_params=true \
		--set policy.concat_last_only=true
	equiv "ddp no-sync = fsdp (M=2)" fsdp2 ddpns 2 --set policy.sharding=ddp --set policy.accum=no-sync
	# every family again on 4 ranks (one shard group of 4): the same losses as fsdp on 4, ./sim's memory
	four=(--set cluster.gpus_per_node=4)
	for fam in "ddp|--set policy.sharding=ddp" "zero2|--set policy.sharding=zero2" \
		"nosync|--set policy.accum=no-sync" "partial|--set policy.accum=partial:1" \
		"acfull|--set policy.ac=full" "acsel|--set policy.ac=selective" "oib|--set policy.optim_in_backward=true" \
		"perparam|--set policy.optim=per-param" "blockio|--set policy.wrap=block+io" "whole|--set policy.wrap=whole" \
		"abl|--set policy.reshard=all-but-last" "pytorch|--set policy.runtime=pytorch" \
		"offopt|--set policy.offload=optim" "offpar|--set policy.offload=params" \
		"flat|--set policy.flat_params=true"; do
		name=${fam%%|*}4
		read -ra extra <<<"${fam#*|}"
		if ! run "$name" 4 "${STEPS[@]}" "${four[@]}" "${extra[@]}"; then
			bad "$name" "exit status $?: $(tail -3 "$tmp/$name.err")"
		elif ! diff=$(same fsdp4 "$name"); then
			bad "$name" "losses differ from fsdp on 4 ranks: $diff"
		elif ! got=$(memory "$name"); then
			bad "$name memory" "$got"
		else
			ok "$name (4 ranks) = fsdp: $diff; peak memory = ./sim's ($got)"
		fi
	done
	# FSDP2 over shard groups of one issues no collective (copies, core/schedule.h local_shards):
	# at one rank the testbed's numbers, with offloaded params too; hsdp over two nodes of one
	# rank each (copies, then the replicas' all-reduce) fsdp's on two ranks
	one=(--set cluster.gpus_per_node=1)
	if run fsdp1 1 "${STEPS[@]}" "${one[@]}"; then
		equiv "pytorch runtime at one rank (copies, no collective) = testbed" fsdp1 pytorch1 1 "${one[@]}" \
			--set policy.runtime=pytorch
		equiv "pytorch runtime at one rank, params offloaded = testbed" fsdp1 pyoff1 1 "${one[@]}" \
			--set policy.runtime=pytorch --set policy.offload=params
	else
		bad "one rank" "the testbed's run failed: $(tail -3 "$tmp/fsdp1.err")"
	fi
	equiv "pytorch runtime, hsdp over shard groups of one = fsdp (2 ranks)" fsdp2 pyhsdp1 2 --set cluster.nodes=2 \
		"${one[@]}" --set policy.runtime=pytorch --set policy.sharding=hsdp --set policy.shard_group=1
	# the comparison must be able to fail: other data, other numbers
	if run seed 2 "${STEPS[@]}" --set run.seed=4321 && ! diff=$(same fsdp2 seed); then
		ok "another seed differs: max relative difference $diff"
	else
		bad "another seed differs" "the runs agree, or it failed: $(tail -3 "$tmp/seed.err")"
	fi
else
	bad "equivalence" "the fsdp reference runs failed: $(tail -3 "$tmp/fsdp2.err" "$tmp/fsdp4.err")"
fi

# the caching allocator at the GPU's capacity (a 7.2 MiB "GPU"; the tiny model reserves 10 MiB): flushes release cached segments,
# whose memory goes back to the backend, and the run goes on with the numbers of a run without a
# capacity, ./sim's peak memory and ./sim's counts of flushes and segments past the capacity
# as_sim NAME ARGS...: the run NAME's peak memory and allocator line (flushes, segments past the capacity) are
# ./sim's for ARGS; prints them, or what differs
as_sim() {
	local name=$1 line simline got
	shift
	line=$(sed -n 's/^summary: allocator: //p' "$tmp/$name.out")
	simline=$("$SIM" "$EXP" "$@" | sed -n 's/^  allocator: //p')
	if ! got=$(memory "$name"); then
		echo "$got"
		return 1
	elif [ -z "$line" ] || [ "$line" != "$simline" ]; then
		echo "allocator: '$line', ./sim's: '$simline'"
		return 1
	fi
	echo "peak memory = ./sim's ($got), as its ${line%% (*}"
}
cap=(--set policy.runtime=pytorch --set run.batch=8)
if run capfree 2 "${STEPS[@]}" "${cap[@]}" &&
	run capped 2 "${STEPS[@]}" "${cap[@]}" --set cluster.hbm_gib=0.007 --set run.out="$tmp/capped.h5"; then
	line=$(sed -n 's/^summary: allocator: //p' "$tmp/capped.out")
	if ! diff=$(same capfree capped); then
		bad "capacity" "losses differ from the run without one: $diff"
	elif ! got=$(as_sim capped "${STEPS[@]}" "${cap[@]}" --set cluster.hbm_gib=0.007); then
		bad "capacity" "$got"
	else
		ok "at a 7.2 MiB capacity: the numbers of a run without one ($diff), $got"
	fi
	# ./sim --compare of that run: the flushes and OOMs it measured, beside the predicted ones
	if "$SIM" --compare "$tmp/capped.h5" --json >"$tmp/capcmp.json" 2>"$tmp/capcmp.err" &&
		flushes=$(/usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
m = [r["measured_alloc_" + k] for k in ("retries", "retries_step", "ooms")]
p = [r["predicted_alloc_" + k] for k in ("retries", "retries_step", "ooms")]
# measured: as the run printed them ("S cache flushes a step, T over ...; O segments past ...")
ran = [int(x) for x in sys.argv[2:5]]
assert m == [ran[1], ran[0], ran[2]] and m == p and m[0] > 0 and m[2] > 0, (m, p, ran)
print("%d flushes, %d OOMs" % (m[0], m[2]))' "$tmp/capcmp.json" \
			$(sed -n 's/^\([0-9]*\) cache flushes a step, \([0-9]*\) over .*; \([0-9]*\) segments past.*/\1 \2 \3/p' \
				<<<"$line")); then
		ok "./sim --compare of the run at capacity: measured and predicted alike, $flushes"
	else
		bad "compare at capacity" "$(cat "$tmp/capcmp.err") $(head -c 300 "$tmp/capcmp.json")"
	fi
else
	bad "capacity" "exit status $?: $(tail -3 "$tmp/capfree.err" "$tmp/capped.err")"
fi
# eight microbatches at that capacity: ./sim skips the ones that repeat (core/memory.h, memory.skip), the runtime
# allocates for every op; the same peak memory, flushes and segments past the capacity
mb8=(--set policy.runtime=pytorch --set run.batch=8 --set policy.microbatches=8 --set cluster.hbm_gib=0.007)
if run mb8 2 "${STEPS[@]}" "${mb8[@]}"; then
	if got=$(as_sim mb8 "${STEPS[@]}" "${mb8[@]}"); then
		ok "8 microbatches at a 7.2 MiB capacity: $got"
	else
		bad "8 microbatches" "$got"
	fi
else
	bad "8 microbatches" "exit status $?: $(tail -3 "$tmp/mb8.err")"
fi

# 3. results file: one run per invocation, appended
out=$tmp/r.h5
if run res1 2 "${STEPS[@]}" --set "run.out=$out" && run res2 2 "${STEPS[@]}" --set "run.out=$out"; then
	ls=$(h5ls -r "$out" 2>&1)
	missing=""
	for p in /runs/000000/ops /runs/000000/memory /runs/000001/ops /runs/000001/memory; do
		grep -q "^$p .*Dataset" <<<"$ls" || missing="$missing $p"
	done
	if [ -z "$missing" ] && ! grep -q "^/runs/000002" <<<"$ls"; then
		ok "run.out appends /runs/000000 and /runs/000001 with ops and memory"
	else
		bad "run.out" "h5ls lacks:$missing"
	fi
	# a collective on its stream runs while the compute stream computes
	if olap=$(/usr/bin/python3 - "$out" <<'PY'
import h5py, sys
ops = h5py.File(sys.argv[1], "r")["runs/000001/ops"][:]
comm = [o for o in ops if o["kind"] in (0, 8, 9)]         # allgather, reduce_scatter, allreduce
comp = [o for o in ops if o["stream"] == 0 and o["kind"] in (2, 3, 4)]  # forward, recompute, backward
n = sum(1 for c in comm for k in comp if c["start_ns"] < k["end_ns"] and k["start_ns"] < c["end_ns"])
print(n)
sys.exit(0 if n > 0 else 1)
PY
); then
		ok "a collective overlaps compute ($olap collective-compute pairs intersect)"
	else
		bad "overlap" "no collective interval intersects a compute interval"
	fi
else
	bad "run.out" "exit status $?: $(tail -3 "$tmp/res1.err" "$tmp/res2.err")"
fi

# 4. wrong world size
run world 2 --set cluster.gpus_per_node=4
rc=$?
if [ "$rc" -eq 2 ] && grep -q "started with 2 MPI ranks.*= 4 GPUs" "$tmp/world.err"; then
	ok "world size 2 for a 4-GPU cluster exits 2 with a message"
else
	bad "world size" "exit status $rc, stderr: $(head -2 "$tmp/world.err")"
fi

# 6. the emulated fabric: one process, rank 0 of a 4-rank job
emu() { # NAME ARGS...: like run, with one process
	local name=$1
	shift
	printf '%s\n' "$@" >"$tmp/$name.args"
	"${MPIRUN[@]}" -np 1 ./gpu_run "$EXP" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null
}
EMU=(--set run.warmup=0 --set run.steps=2 --set cluster.gpus_per_node=4)
out=$tmp/emu.h5
if emu emu4 "${EMU[@]}" --emulate-world 4 --emulate-gbps 0.5 --emulate-lat-us 50 --set "run.out=$out"; then
	got=$(awk '/^summary: peak memory/{ print $4, $9 }' "$tmp/emu4.out")
	sim=$(./sim "$EXP" "${EMU[@]}" --json | /usr/bin/python3 -c \
		'import json, sys; j = json.load(sys.stdin); print(j["peak_alloc_bytes"], j["peak_reserved_bytes"])')
	if [ -n "$got" ] && [ "$got" = "$sim" ]; then
		ok "emulated 4-rank fsdp: peak memory = ./sim's for 4 ranks ($got)"
	else
		bad "emulated memory" "run $got, sim $sim"
	fi
	wire=$(awk '/wire bytes per rank/{ print $(NF - 4) }' "$tmp/emu4.out")
	total=$(awk '/^run: fabric.wire_bytes_total = /{ print $4 }' "$tmp/emu4.out")
	if [ -n "$wire" ] && [ "$total" = "$((2 * wire))" ]; then
		ok "emulated wire bytes = the schedule's, 2 steps x $wire"
	else
		bad "emulated wire bytes" "fabric.wire_bytes_total $total, summary's $wire per step"
	fi
	if msg=$(/usr/bin/python3 - "$out" <<'PY'
import h5py, sys
run = h5py.File(sys.argv[1], "r")["runs/000000"]
a = run.attrs
assert a["fabric"] == "emulated" and a["fabric.world"] == "4", dict(a)
gbps, lat = float(a["fabric.shard.link_gbps"]), float(a["fabric.shard.step_latency_us"]) * 1e3
assert gbps == 0.5 and lat == 50e3, (gbps, lat)
n, worst, count = 4, 1e9, 0
for o in run["ops"][:]:
    if o["kind"] not in (0, 8, 9):             # allgather, reduce_scatter, allreduce
        continue
    steps = 2 * (n - 1) if o["kind"] == 9 else n - 1
    wire = (o["bytes"] // n) * (n - 1) * (2 if o["kind"] == 9 else 1)
    need = wire / gbps + steps * lat
    worst = min(worst, (o["end_ns"] - o["start_ns"]) / need)
    count += 1
assert count > 0 and worst >= 1.0, (count, worst)
print(f"{count} collectives, the shortest {worst:.2f} x its ring time")
PY
); then
		ok "emulated collectives last their ring time on the link: $msg"
	else
		bad "emulated collective times" "$msg"
	fi
	# its links are not the cluster's: ./sim --compare refuses it, saying why (core/fabric.h)
	"$SIM" --compare "$out" >"$tmp/emucmp.out" 2>"$tmp/emucmp.err"
	rc=$?
	if [ $rc = 1 ] && grep -q "run 000000: measured on an emulated fabric whose shard link was 0.5 GB/s and 50 us" \
		"$tmp/emucmp.err" && grep -q -- "--emulate-gbps" "$tmp/emucmp.err"; then
		ok "an emulated run on overridden links: ./sim --compare refuses it (exit 1, the reason)"
	else
		bad "compare of an overridden emulation" "exit $rc: $(cat "$tmp/emucmp.err")"
	fi
	# the emulated model trains (comm.h: the repeated shard's gradient), on rank 0's data
	if awk '/^step [0-9]+ loss /{ if ($4 != $4 + 0 || $4 == "nan" || $4 == "inf") exit 1; l[++n] = $4 }
		END { exit !(n == 2 && l[2] < l[1]) }' "$tmp/emu4.out"; then
		ok "emulated run: finite losses, falling ($(awk '/^step/{ printf "%s ", $4 }' "$tmp/emu4.out"))"
	else
		bad "emulated losses" "$(grep '^step' "$tmp/emu4.out" | tr '\n' ' ')"
	fi
else
	bad "emulated 4-rank fsdp" "exit status $?: $(tail -3 "$tmp/emu4.err")"
fi
if emu emuhsdp --set run.warmup=0 --set run.steps=1 --set cluster.nodes=2 --set policy.sharding=hsdp \
	--emulate-world 4 && grep -q '^run: fabric.replica.ranks = 2' "$tmp/emuhsdp.out" &&
	grep -q '^run: fabric.shard.ranks = 2' "$tmp/emuhsdp.out"; then
	ok "emulated hsdp 2 x 2: shard and replica rings ($(awk '/fabric.replica.link_gbps/{ print $4 }' \
		"$tmp/emuhsdp.out") GB/s across nodes)"
else
	bad "emulated hsdp" "$(tail -3 "$tmp/emuhsdp.err") $(grep '^run: fabric' "$tmp/emuhsdp.out" | tr '\n' ' ')"
fi
# wrong uses: exit 2 with a message naming what is wrong
two() { # NP PATTERN ARGS...
	local np=$1 pat=$2 rc
	shift 2
	"${MPIRUN[@]}" -np "$np" ./gpu_run "$EXP" "$@" >"$tmp/two.out" 2>"$tmp/two.err" </dev/null
	rc=$?
	if [ "$rc" -eq 2 ] && grep -q -- "$pat" "$tmp/two.err"; then
		ok "$* (np $np): exit 2, '$pat'"
	else
		bad "$*" "exit status $rc, stderr: $(grep -v '^-\|^ \|^$\|mpirun\|Primary\|a non-zero' "$tmp/two.err" | head -2)"
	fi
}
two 1 "agree" --emulate-world 3
two 2 "mpirun -np 1" --emulate-world 2
two 1 "need --emulate-world" --emulate-gbps 3
two 1 "one of sm, ce" --emulate-world 2 --emulate-engine xx
two 1 "option of the cuda backend" --nccl-max-ctas 4
two 1 "more than --nccl-max-ctas" --device cuda --nccl-min-ctas 8 --nccl-max-ctas 4
two 1 "autotuning synchronizes the stream" --device cuda --calibrate --gemm-autotune
two 1 "the two would wait for each other" --device cuda --calibrate --attention cudnn
two 1 "option of the cuda backend" --staged-collectives
two 1 "an emulated rank has no peers" --device cuda --staged-collectives --emulate-world 2
two 1 "staged ones go through the host" --device cuda --staged-collectives --calibrate
two 1 "nothing to configure" --device cuda --staged-collectives --nccl-cta-policy zero
two 1 "it goes with --calibrate" --series s1
two 1 "a name of 1 to 23" --calibrate --series "a b"
two 1 "--series needs a name" --calibrate --series --quick
two 1 "--series needs a name" --calibrate --series -
two 1 "the experiment file goes first" --calibrate foo.ini
two 1 "the experiment file goes first" --calibrate cal.hdf5
two 1 "--calibrate: given twice" --calibrate a.h5 --calibrate b.h5
two 1 "--series: given twice" --calibrate --series a --series b
two 1 "--emulate-world: given twice" --emulate-world 2 --emulate-world 2
two 1 "an integer from 1 to 1048576, not '0'" --emulate-world 0
two 1 "--calibrate takes the calibration file" --calibrate .h5
two 1 "a name of 1 to 23" --calibrate --series "$(printf 'a%.0s' $(seq 24))"
# a name of 23 is one: refused for --out alone
two 1 "cannot be used with --calibrate" --calibrate --series "$(printf 'a%.0s' $(seq 23))" --out "$tmp/x23.h5"
# the bounds of the emulated link are allowed: a link without latency runs
if emu emulat0 --set run.warmup=0 --set run.steps=1 --set cluster.gpus_per_node=4 --emulate-world 4 \
	--emulate-lat-us 0 && grep -q "^run: fabric.shard.step_latency_us = 0$" "$tmp/emulat0.out"; then
	ok "--emulate-lat-us 0: a link without latency runs"
else
	bad "--emulate-lat-us 0" "$(tail -2 "$tmp/emulat0.err") $(grep '^run: fabric.shard' "$tmp/emulat0.out")"
fi
# --hardware names this machine: its model and the processors it lists
hw=$("${MPIRUN[@]}" -np 2 "$GPU_RUN" "$EXP" --hardware 2>/dev/null)
if [[ $hw == *-"$(grep -c '^processor' /proc/cpuinfo)"-cores-cpu ]]; then
	ok "--hardware: $hw"
else
	bad "--hardware" "'$hw', not ending in -$(grep -c '^processor' /proc/cpuinfo)-cores-cpu"
fi
# --out beside --calibrate or --hardware was ignored (exit 0, no file): refused before any work, nothing written
for mode in "--calibrate $tmp/out-cal.h5 --quick" --hardware; do
	t0=$SECONDS
	"${MPIRUN[@]}" -np 2 "$GPU_RUN" "$EXP" $mode --out "$tmp/out-x.h5" >"$tmp/two.out" 2>"$tmp/two.err" </dev/null
	rc=$?
	if [ $rc = 2 ] && grep -qF -- "--out (run.out = $tmp/out-x.h5) cannot be used with ${mode%% *}" "$tmp/two.err" &&
		[ ! -e "$tmp/out-x.h5" ] && [ ! -e "$tmp/out-cal.h5" ] && ! grep -q '^calibrate:' "$tmp/two.err" &&
		[ "$(grep -c 'cannot be used with' "$tmp/two.err")" = 1 ] && [ $((SECONDS - t0)) -le 8 ]; then
		ok "${mode%% *} --out: exit 2 before any work, said once, no file written"
	else
		bad "${mode%% *} --out" "exit status $rc, stderr: $(grep -v '^-\|^ \|^$\|mpirun\|Primary\|a non-zero' "$tmp/two.err" | head -2)"
	fi
done
# --calibrate's file is checked before the first measurement, as run.out is:
# a file that is no calibration file exits 2 at once (no progress line, in
# seconds where the calibration takes more) and stays byte for byte as it was
calq() { # NAME PATTERN FILE [DIR]: run in DIR (default: here) with --calibrate FILE ("": the default file)
	local name=$1 pat=$2 f=$3 dir=${4:-.} before after rc t0=$SECONDS gpu exp
	gpu=$(realpath "$GPU_RUN") exp=$(realpath "$EXP")
	before=$(cd "$dir" && md5sum 2>/dev/null <"${f:-$cal_default}")
	(cd "$dir" && timeout 60 "${MPIRUN[@]}" -np 2 "$gpu" "$exp" --calibrate $f) \
		>"$tmp/calq.out" 2>"$tmp/calq.err" </dev/null
	rc=$?
	after=$(cd "$dir" && md5sum 2>/dev/null <"${f:-$cal_default}")
	if [ "$rc" -eq 2 ] && grep -q -- "$pat" "$tmp/calq.err" && [ "$before" = "$after" ] &&
		! grep -q '^calibrate:' "$tmp/calq.err" && [ $((SECONDS - t0)) -le 8 ]; then
		ok "--calibrate $name: exit 2 before measuring ($((SECONDS - t0)) s), '$pat', the file unchanged"
	else
		bad "--calibrate $name" "exit status $rc after $((SECONDS - t0)) s, md5 '$before' -> '$after', stderr: $(grep -v \
			'^-\|^ \|^$\|mpirun\|Primary\|a non-zero' "$tmp/calq.err" | head -2)"
	fi
}
cal_default=data/calibration/$("${MPIRUN[@]}" -np 2 "$GPU_RUN" "$EXP" --hardware 2>/dev/null).h5
"$SIM" "$EXP" --out "$tmp/cal-results.h5" >/dev/null
/usr/bin/python3 -c 'import h5py, sys; h5py.File(sys.argv[1], "w")["x"] = [1, 2]; h5py.File(sys.argv[2], "w").close()' \
	"$tmp/cal-x.h5" "$tmp/cal-empty.h5"
echo "not a calibration" >"$tmp/cal-text.h5"
ln -s "$PWD/$EXP" "$tmp/cal-input.h5"
ln -s "$tmp/cal-text.h5" "$tmp/cal-link.h5"
mkdir -p "$tmp/caldir/data/calibration" && echo "not a calibration" >"$tmp/caldir/$cal_default"
calq "a results file" "is an HDF5 file without /calibration, not a calibration file" "$tmp/cal-results.h5"
calq "an HDF5 file of /x" "is an HDF5 file without /calibration, not a calibration file" "$tmp/cal-x.h5"
calq "a text file x.h5" "exists and is not an HDF5 file" "$tmp/cal-text.h5"
calq "a link to the experiment" "is the input" "$tmp/cal-input.h5"
calq "a link to a text file" "exists and is not an HDF5 file" "$tmp/cal-link.h5"
calq "in no directory" "directory $tmp/none does not exist" "$tmp/none/cal.h5"
calq "(the default file, a text file)" "exists and is not an HDF5 file" "" "$tmp/caldir"
if [ ! -e "$tmp/none" ] && "${MPIRUN[@]}" -np 2 "$GPU_RUN" "$EXP" --calibrate "$tmp/cal-empty.h5" --quick \
	>"$tmp/calq.out" 2>"$tmp/calq.err" </dev/null &&
	/usr/bin/python3 -c 'import h5py, sys; sys.exit(list(h5py.File(sys.argv[1], "r")) != ["calibration"])' \
		"$tmp/cal-empty.h5"; then
	ok "--calibrate an empty HDF5 file: a session appended"
else
	bad "--calibrate an empty HDF5 file" "$(tail -2 "$tmp/calq.err")"
fi

# a step whose plan the device's memory cannot hold: refused before the first step, exit 2, one line saying why
timeout 60 "${MPIRUN[@]}" -np 2 "$GPU_RUN" "$EXP" --steps 1 --warmup 0 --seq 1048576 --set "run.out=$tmp/big.h5" \
	>"$tmp/big.out" 2>&1 </dev/null
rc=$?
if [ $rc = 2 ] && [ "$(grep -c "GiB of device memory (its allocator's plan" "$tmp/big.out")" = 1 ] &&
	grep -q "more than the .* GiB of cluster.gpu = cpu" "$tmp/big.out" && ! grep -q "^step 1" "$tmp/big.out" &&
	[ ! -e "$tmp/big.h5" ]; then
	ok "a step the device cannot hold by the allocator's plan: exit 2 before the first step, said once"
else
	bad "the allocator's plan past the device" "rc $rc: $(grep gpu_run "$tmp/big.out" | tail -2)"
fi

# a step the device cannot hold (4 GB of address space, a step of about 7 GiB): every rank stops, exit 1, said
# as memory, not as a diverged loss; nothing appended. Not under make asan: the sanitizer's shadow memory
# needs the address space ulimit -v takes away
if nm "$GPU_RUN" 2>/dev/null | grep -q __asan_init; then
	echo "skip gpu_run out of device memory: an ASan build cannot start under ulimit -v"
else
	(
		ulimit -v 4000000
		timeout 60 "${MPIRUN[@]}" -np 1 "$GPU_RUN" "$EXP" --gpus-per-node 1 --steps 1 --warmup 0 --seq 262144 \
			--set "run.out=$tmp/oom.h5" >"$tmp/oom.out" 2>&1 </dev/null
	)
	rc=$?
	if [ $rc = 1 ] && grep -q "step 1: out of device memory: the step does not fit this device" "$tmp/oom.out" &&
		! grep -q "diverged" "$tmp/oom.out" && [ ! -e "$tmp/oom.h5" ]; then
		ok "a step that does not fit the device: exit 1, out of device memory, nothing written"
	else
		bad "out of device memory" "rc $rc: $(grep gpu_run "$tmp/oom.out" | tail -2)"
	fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
