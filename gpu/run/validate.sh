#!/usr/bin/env bash
# make validate: close the loop on the CPU backend, in ROUNDS rounds
# (default 3; 1 with --quick), each of them:
#
#   1. calibrate: gpu_run --calibrate measures kernels, GEMMs, memory
#      passes, every sharding's collectives, the optimizer and the per-op
#      overheads, with 2 and with 4 ranks, for each model below
#      (data/calibration/<hardware>-cpu.h5, appended), one session per
#      round of a series whose medians ./sim uses;
#   2. run every policy family with gpu_run on the CPU backend, 2 and 4
#      ranks, the tiny and the small model (data/runs/<hardware>-cpu-<date>.h5),
#      each configuration once per round (with one round, the base policy
#      three times: the machine's own run-to-run noise);
#
# then 3. ./sim --compare that file: each run predicted from its own
# configuration and the calibration, the predictions appended beside the
# measurements, the report kept as <file>.compare.txt and .json; with
# rounds, each configuration is also compared at the median of its runs.
# The rounds sample a shared machine whose speed drifts by a fifth within
# minutes: calibration and runs interleaved, so that the calibration's
# medians and the runs' are taken over the same stretch of time.
#
# The runs being predicted are never used to fit anything: the calibration
# is made of microbenchmarks only, each round's measured before its runs.
#
#   gpu/run/validate.sh [--quick] [--emulate] [--out DIR]
#     --quick   one model (tiny), 2 ranks, four policies, quick calibration,
#               one round: the pipeline works and its output is well formed (CI)
#     --emulate one process as rank 0 of an emulated job (gpu_run
#               --emulate-world N) for the calibration and every run: N = 8
#               (2 nodes of 4) and 16 (2 of 8), or 8 alone with --quick; the
#               runs go to <hardware>-cpu-emulated-<date>.h5 and are compared
#               with the emulated calibration of their N (what a GPU session
#               does with one GPU, gpu/device_session.sh)
#     --out DIR where calibration/ and runs/ go (default data)
set -euo pipefail
cd "$(dirname "$0")/../.."

quick=0
emulate=0
dir=data
while [ $# -gt 0 ]; do
	case "$1" in
	--quick) quick=1 ;;
	--emulate) emulate=1 ;;
	--out) dir=$2; shift ;;
	*) echo "validate.sh: unknown argument '$1' (allowed: --quick, --emulate, --out DIR)" >&2; exit 2 ;;
	esac
	shift
done

MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
SIM=${SIM:-./sim}
GPU_RUN=${GPU_RUN:-./gpu_run}
EXP=experiments/tiny.ini
mkdir -p "$dir/calibration" "$dir/runs"

if [ $quick = 1 ]; then
	models=(tiny)
	worlds=(2)
	steps=(--set run.warmup=1 --set run.steps=3)
	families=("fsdp|" "ddp|--set policy.sharding=ddp" "zero2|--set policy.sharding=zero2"
		"chunked|--set policy.loss=chunked") # fsdp again but for a key its policy line does not show
	calq=(--quick)
	rounds=1
else
	models=(tiny small)
	worlds=(2 4)
	steps=(--set run.warmup=2 --set run.steps=10)
	families=("fsdp|" "ddp|--set policy.sharding=ddp" "zero2|--set policy.sharding=zero2"
		"ddp-nosync|--set policy.sharding=ddp --set policy.accum=no-sync"
		"nosync|--set policy.accum=no-sync" "partial1|--set policy.accum=partial:1"
		"blockio|--set policy.wrap=block+io" "whole|--set policy.wrap=whole"
		"every2|--set policy.wrap=every:2"
		"abl|--set policy.reshard=all-but-last"
		"fused|--set policy.optim=fused" "perparam|--set policy.optim=per-param"
		"oib|--set policy.optim_in_backward=true"
		"acfull|--set policy.ac=full" "acsel|--set policy.ac=selective"
		"offopt|--set policy.offload=optim" "offpar|--set policy.offload=params"
		"flat|--set policy.flat_params=true --set policy.concat_last_only=true"
		"pytorch|--set policy.runtime=pytorch" "chunked|--set policy.loss=chunked")
	calq=()
	rounds=${ROUNDS:-3}
fi
case "$rounds" in
'' | *[!0-9]* | 0) echo "validate.sh: ROUNDS=$rounds (allowed: a whole number, at least 1)" >&2; exit 2 ;;
esac
if [ $emulate = 1 ]; then
	if [ $quick = 1 ]; then worlds=(8); else worlds=(8 16); fi
	# hsdp (a shard ring inside a node, a replica ring across) is one of the families
	families+=("hsdp|--set policy.sharding=hsdp")
fi

# The cluster of a world: 2 ranks are one node of two; 4 are two nodes of
# two, so that hsdp has both a shard group and a replica group; emulated,
# 8 and 16 ranks are two nodes of 4 and of 8.
cluster() {
	case $1 in
	4) echo "--set cluster.nodes=2 --set cluster.gpus_per_node=2" ;;
	8 | 16) echo "--set cluster.nodes=2 --set cluster.gpus_per_node=$(($1 / 2))" ;;
	*) echo "--set cluster.nodes=1 --set cluster.gpus_per_node=2" ;;
	esac
}
# The processes a world is run with, and the flag that emulates it.
procs() { if [ $emulate = 1 ]; then echo 1; else echo "$1"; fi; }
emu() { if [ $emulate = 1 ]; then echo "--emulate-world $1"; fi; }

hw=$("${MPIRUN[@]}" -np 2 "$GPU_RUN" "$EXP" --hardware)
cal=$dir/calibration/$hw.h5
stamp=$(date -u +%H%M%S)
runs=$dir/runs/$hw$([ $emulate = 1 ] && echo -emulated)-$(date -u +%Y%m%d-%H%M%S).h5

# 1. a calibration of each world and model, one session of its series a
# round (./sim prices each point at the median of the series, since on a
# shared machine a process keeps the speed of where it was placed)
calibrate_round() { # ROUND
	for np in "${worlds[@]}"; do
		for m in "${models[@]}"; do
			echo "validate: calibrating $m on $np ranks$([ $emulate = 1 ] && echo ", emulated") (round $1 of $rounds)"
			# shellcheck disable=SC2046
			if ! "${MPIRUN[@]}" -np "$(procs "$np")" "$GPU_RUN" "$EXP" $(cluster "$np") $(emu "$np") \
				--set model.name="$m" --calibrate "$cal" --series "v$stamp-$m-$np" "${calq[@]}" \
				2>"$cal.log.tmp" | sed 's/^/  /'; then
				tail -5 "$cal.log.tmp" >&2
				rm -f "$cal.log.tmp"
				echo "validate: gpu_run --calibrate failed ($m, $np ranks)" >&2
				exit 1
			fi
		done
	done
	rm -f "$cal.log.tmp"
}

# 2. every configuration measured once
n=0
run_round() { # ROUND
	for np in "${worlds[@]}"; do
		fams=("${families[@]}")
		if [ "$np" = 4 ]; then
			fams+=("hsdp|--set policy.sharding=hsdp" "hsdp-defer|--set policy.sharding=hsdp --set policy.accum=defer-replica")
		elif [ $emulate = 1 ] && [ $quick = 0 ]; then
			fams+=("hsdp-defer|--set policy.sharding=hsdp --set policy.accum=defer-replica")
		fi
		if [ $quick = 0 ] && [ "$rounds" = 1 ]; then
			# the base policy again, in the middle and at the end: the machine's own
			# run-to-run noise, which ./sim --compare reports beside the errors
			half=$((${#fams[@]} / 2))
			fams=("${fams[@]:0:half}" "fsdp-again|" "${fams[@]:half}" "fsdp-again|")
		fi
		for m in "${models[@]}"; do
			for fam in "${fams[@]}"; do
				name=${fam%%|*}
				read -r -a args <<<"${fam#*|}"
				# shellcheck disable=SC2046
				if ! "${MPIRUN[@]}" -np "$(procs "$np")" "$GPU_RUN" "$EXP" $(cluster "$np") $(emu "$np") \
					--set model.name="$m" "${steps[@]}" "${args[@]}" --set run.out="$runs" >"$runs.log.tmp" 2>&1; then
					echo "validate: $name ($m, $np ranks) failed:" >&2
					tail -5 "$runs.log.tmp" >&2
					rm -f "$runs.log.tmp"
					exit 1
				fi
				n=$((n + 1))
				printf 'validate: %3d  %-11s %-6s %d ranks  %s\n' "$n" "$name" "$m" "$np" \
					"$(grep -o 'step time [^,]*' "$runs.log.tmp" | head -1)"
			done
		done
	done
	rm -f "$runs.log.tmp"
}

for round in $(seq "$rounds"); do
	calibrate_round "$round"
	run_round "$round"
done

# 3. the comparison
"$SIM" --compare "$runs" --calibration "$cal" >"$runs.compare.txt"
"$SIM" --compare "$runs" --calibration "$cal" --json >"$runs.compare.json"
tail -5 "$runs.compare.txt"
echo "validate: $n runs in $runs; report in $runs.compare.txt"
