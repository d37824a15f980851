#!/usr/bin/env bash
# make bench: how fast the simulator prices a large step, for each runtime
# (issue 10 targets: under 1 ms and under 50 MB on one core), and how fast it sweeps (issue
# 11 target: at least 100,000 configurations of llama3-70b on 1,024 GPUs
# with 8 microbatches per minute on 2 MPI ranks, scaling near-linearly
# from 1 to 2 ranks). Sweep figures are the median of RUNS runs.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
echo "machine: $(nproc) cores, $(sed -n 's/^model name.*: //p' /proc/cpuinfo | head -1); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "llama3-70b, 128 nodes x 8 h100-sxm, hsdp, 8 microbatches (schedule, allocator and simulation), per runtime:"
for rt in testbed pytorch pytorch-compile; do
	printf '  %-16s' "$rt:"
	taskset -c 0 ./sim --model llama3-70b --gpu h100-sxm --nodes 128 --gpus-per-node 8 --policy hsdp \
		--microbatches 8 --runtime "$rt" --bench "$([ "$rt" = testbed ] && echo 200 || echo 20)"
done
# the same steps in instructions (valgrind's callgrind, where installed): a count that the
# machine's other load does not change, for comparing builds on a shared machine
if command -v valgrind >/dev/null && [ "${BENCH_INSTR:-1}" = 1 ]; then
	echo "  instructions per simulated step (callgrind: (3 steps - 1 step) / 2):"
	for rt in testbed pytorch pytorch-compile; do
		ir=()
		for n in 1 3; do
			ir+=("$(valgrind --tool=callgrind --callgrind-out-file=/dev/null ./sim --model llama3-70b --gpu h100-sxm \
				--nodes 128 --gpus-per-node 8 --policy hsdp --microbatches 8 --runtime "$rt" --bench $n 2>&1 |
				sed -n 's/.*Collected : \([0-9]*\).*/\1/p')")
		done
		printf '  %-16s%s M\n' "$rt:" "$(awk "BEGIN { printf \"%.1f\", (${ir[1]} - ${ir[0]}) / 2e6 }")"
	done
fi
echo "llama3-70b, 128 nodes x 8 h100-sxm, fsdp, full checkpointing, pytorch: 8 and 32 microbatches (the repeated ones skipped):"
for mb in 8 32; do
	printf '  %-16s' "M=$mb:"
	taskset -c 0 ./sim --model llama3-70b --gpu h100-sxm --nodes 128 --gpus-per-node 8 --policy fsdp --ac full \
		--microbatches "$mb" --runtime pytorch --bench 20
done
echo "llama3-8b, 2 x 8 h100-sxm, fsdp:"
taskset -c 0 ./sim experiments/llama3.ini --bench 500
echo "--policy all, llama3-8b, 2 x 8 h100-sxm, 4 microbatches:"
/usr/bin/time -f "%e s, %M KB peak RSS" ./sim experiments/llama3.ini --microbatches 4 --policy all --top 1 | tail -2

# configurations per second of a sweep (wall clock, and per CPU second of all
# its ranks: what a shared machine's other load does not change), RUNS times:
# the medians
median() { sort -n | sed -n "$(( (RUNS + 1) / 2 ))p"; }
sweep_rate() { # LABEL COMMAND...
	local label=$1 lines=()
	shift
	for _ in $(seq "$RUNS"); do
		lines+=("$("$@" 2>/dev/null | sed -n 's/.*(\([0-9]*\) configurations per s, [0-9]* per s per rank, \([0-9]*\) per CPU second).*/\1 \2/p' | head -1)")
	done
	local wall cpu
	wall=$(printf '%s\n' "${lines[@]}" | cut -d' ' -f1 | median)
	cpu=$(printf '%s\n' "${lines[@]}" | cut -d' ' -f2 | median)
	echo "$label: $(printf '%s\n' "${lines[@]}" | cut -d' ' -f1 | tr '\n' ' ')configurations per s; median $wall ($((wall * 60)) per minute), $cpu per CPU second" >&2
	echo "$wall"
}
echo "sweep experiments/sweeps/bench_70b.ini (llama3-70b, 1,024 GPUs, 8 microbatches; 3,200 configurations):"
one=$(sweep_rate "  1 rank (./sim alone)" ./sim --sweep experiments/sweeps/bench_70b.ini)
if command -v mpirun >/dev/null; then
	two=$(sweep_rate "  2 ranks (mpirun -np 2)" mpirun --allow-run-as-root --oversubscribe -np 2 \
		./sim --sweep experiments/sweeps/bench_70b.ini)
	echo "  per rank: $one (1 rank), $((two / 2)) (2 ranks); 1 to 2 ranks: x$(awk "BEGIN { printf \"%.2f\", $two / $one }")"
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
