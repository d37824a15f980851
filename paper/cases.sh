#!/usr/bin/env bash
# paper/cases.sh: the four case studies of the report (DOMAIN.md section 2),
# simulated at the scale where each was observed and measured with gpu_run
# on the CPU backend at the scale this testbed runs. Every run is appended
# to DIR (default data/cases), never truncating a file:
#
#   DIR/accum.h5        ./sim, experiments/cases/accum.ini: each accumulation
#                       policy across the inter-node bandwidth (nic_gbps)
#   DIR/accum-cpu.h5    gpu_run, accum-cpu.ini: each policy on 4 MPI ranks,
#                       and as rank 0 of 4 on the emulated fabric across
#                       the inter-node bandwidth
#   DIR/wrap.h5         ./sim, wrap.ini: block, block+io, whole across seq
#   DIR/wrap-cpu.h5     gpu_run, wrap-cpu.ini: each wrapping at two seqs
#   DIR/optim.h5        ./sim, optim.ini: foreach, fused, per-param, after
#                       backward and in it
#   DIR/optim-cpu.h5    gpu_run, optim-cpu.ini: the same six
#   DIR/concat.h5       ./sim, concat.ini: concat on every microbatch or the
#                       last only, 1 to 8 microbatches
#   DIR/concat-cpu.h5   gpu_run, concat-cpu.ini: the same at 2, 4, 8
#   DIR/bandwidth.h5    ./sim, experiments/llama3.ini: fsdp, hsdp, zero2
#                       across the inter-node bandwidth (where hsdp overtakes)
#   DIR/policy_all_llama3.json.gz  ./sim experiments/llama3.ini --policy all
#                       --json (every valid policy: the time-memory front),
#                       with the experiment's configuration
#
# Usage: paper/cases.sh [--sim-only | --measured-only] [--missing] [--case NAME]... [--out DIR]
#   --case NAME   accum, wrap, optim, concat or bandwidth (default: all)
#   --missing     only what has no file in DIR yet (make cases, make paper)
# Takes about three minutes on 2 cores, nearly all of it the measured runs.
# Run it again to add runs: the figures and the report use the newest run
# of each configuration.
set -euo pipefail
cd "$(dirname "$0")/.."

SIM=${SIM:-./sim}
GPU_RUN=${GPU_RUN:-./gpu_run}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
dir=data/cases
do_sim=1
do_meas=1
only_missing=0
cases=()
while [ $# -gt 0 ]; do
	case "$1" in
	--sim-only) do_meas=0 ;;
	--measured-only) do_sim=0 ;;
	--missing) only_missing=1 ;;
	--case)
		[ $# -ge 2 ] || { echo "cases.sh: --case needs a name (accum, wrap, optim, concat, bandwidth)" >&2; exit 2; }
		case "$2" in
		accum | wrap | optim | concat | bandwidth) cases+=("$2") ;;
		*) echo "cases.sh: unknown case '$2' (allowed: accum, wrap, optim, concat, bandwidth)" >&2; exit 2 ;;
		esac
		shift ;;
	--out)
		[ $# -ge 2 ] || { echo "cases.sh: --out needs a directory" >&2; exit 2; }
		dir=$2; shift ;;
	*) echo "cases.sh: unknown argument '$1' (allowed: --sim-only, --measured-only, --missing, --case NAME, --out DIR)" >&2; exit 2 ;;
	esac
	shift
done
[ ${#cases[@]} -gt 0 ] || cases=(accum wrap optim concat bandwidth)
for b in "$SIM" "$GPU_RUN"; do
	[ -x "$b" ] || { echo "cases.sh: $b is missing: run make first" >&2; exit 2; }
done
mkdir -p "$dir"

# sim FILE.h5 EXPERIMENT.ini [flags...]: one simulated run appended.
sim() {
	local out=$1 exp=$2
	shift 2
	"$SIM" "$exp" "$@" --out "$out" >/dev/null
}

# measure NP FILE.h5 EXPERIMENT.ini [flags...]: one gpu_run appended; a
# failure stops the script with the run's last lines.
measure() {
	local np=$1 out=$2 exp=$3 log
	shift 3
	log=$(mktemp)
	if ! "${MPIRUN[@]}" -np "$np" "$GPU_RUN" "$exp" "$@" --out "$out" >"$log" 2>&1; then
		echo "cases.sh: gpu_run $exp $* failed:" >&2
		tail -5 "$log" >&2
		rm -f "$log"
		exit 1
	fi
	printf '  %-40s %s\n' "$*" "$(grep -o 'step time [^,]*' "$log" | head -1)"
	rm -f "$log"
}

runs() { [ -f "$1" ] && h5ls "$1/runs" 2>/dev/null | wc -l || echo 0; }

accum_policies=("--policy fsdp --accum sync-each" "--policy fsdp --accum no-sync"
	"--policy fsdp --accum partial:2" "--policy hsdp --accum sync-each"
	"--policy hsdp --accum defer-replica" "--policy hsdp --accum no-sync")

case_accum() {
	local e=experiments/cases
	if [ $do_sim = 1 ]; then
		echo "cases: accum, simulated (llama3-8b, 8 x 4 a100-80g)"
		for nic in 0.5 1 2 4 8 12.5 25 50; do
			for p in "${accum_policies[@]}"; do
				# shellcheck disable=SC2086
				sim "$dir/accum.h5" $e/accum.ini $p --nic-gbps $nic
			done
		done
	fi
	if [ $do_meas = 1 ]; then
		echo "cases: accum, measured (tiny, 4 CPU ranks as 2 x 2; emulated fabric across bandwidth)"
		for p in "${accum_policies[@]}"; do
			# shellcheck disable=SC2086
			measure 4 "$dir/accum-cpu.h5" $e/accum-cpu.ini $p
		done
		for nic in 0.01 0.03 0.1 0.3 1; do
			for p in "${accum_policies[@]}"; do
				# shellcheck disable=SC2086
				measure 1 "$dir/accum-cpu.h5" $e/accum-cpu.ini $p --nic-gbps $nic --emulate-world 4
			done
		done
	fi
}

case_wrap() {
	local e=experiments/cases
	if [ $do_sim = 1 ]; then
		echo "cases: wrap, simulated (llama3-8b, 4 x 24 GB)"
		for seq in 1024 2048 3072 4096 5120 6144 8192; do
			for w in block block+io whole; do
				sim "$dir/wrap.h5" $e/wrap.ini --wrap $w --seq $seq
			done
		done
	fi
	if [ $do_meas = 1 ]; then
		echo "cases: wrap, measured (small, 2 CPU ranks)"
		for seq in 32 128; do
			for w in block block+io whole; do
				measure 2 "$dir/wrap-cpu.h5" $e/wrap-cpu.ini --wrap $w --seq $seq
			done
		done
	fi
}

case_optim() {
	local e=experiments/cases o ib
	if [ $do_sim = 1 ]; then
		echo "cases: optim, simulated (llama3-8b, 1 x 8 h100-sxm)"
		for o in foreach fused per-param; do
			for ib in false true; do
				sim "$dir/optim.h5" $e/optim.ini --optim $o --optim-in-backward $ib
			done
		done
	fi
	if [ $do_meas = 1 ]; then
		echo "cases: optim, measured (small, 2 CPU ranks)"
		for o in foreach fused per-param; do
			for ib in false true; do
				measure 2 "$dir/optim-cpu.h5" $e/optim-cpu.ini --optim $o --optim-in-backward $ib
			done
		done
	fi
}

case_concat() {
	local e=experiments/cases m c
	if [ $do_sim = 1 ]; then
		echo "cases: concat, simulated (llama3-8b, 2 x 8 h100-sxm)"
		for m in 1 2 4 8; do
			for c in false true; do
				sim "$dir/concat.h5" $e/concat.ini --microbatches $m --concat-last-only $c
			done
		done
	fi
	if [ $do_meas = 1 ]; then
		echo "cases: concat, measured (small, 2 CPU ranks)"
		for m in 2 4 8; do
			for c in false true; do
				measure 2 "$dir/concat-cpu.h5" $e/concat-cpu.ini --microbatches $m --concat-last-only $c
			done
		done
	fi
}

# The reference experiment's shardings across the inter-node bandwidth
# (8 NICs for 8 GPUs a node: nic_gbps is the bandwidth per GPU), and every
# valid policy of it at the catalog's bandwidth.
case_bandwidth() {
	[ $do_sim = 1 ] || return 0
	echo "cases: bandwidth, simulated (llama3-8b, 2 x 8 h100-sxm)"
	for nic in 0.5 1 2 4 8 12 16 24 32 48; do
		for p in fsdp hsdp zero2; do
			sim "$dir/bandwidth.h5" experiments/llama3.ini --policy $p --nic-gbps $nic
		done
	done
	# The listing and the experiment's resolved configuration, in one
	# gzipped JSON object; a new listing replaces the old one only once it
	# is complete.
	local tmp
	tmp=$(mktemp -d)
	"$SIM" experiments/llama3.ini --json >"$tmp/config.json"
	"$SIM" experiments/llama3.ini --policy all --json >"$tmp/all.json"
	/usr/bin/python3 - "$tmp" <<'PY' | gzip -n >"$dir/policy_all_llama3.json.gz.tmp"
import json, sys
d = sys.argv[1]
print(json.dumps({"experiment": "experiments/llama3.ini", "command": "./sim experiments/llama3.ini --policy all --json",
                  "config": json.load(open(d + "/config.json"))["config"],
                  "policies": json.load(open(d + "/all.json"))}))
PY
	mv "$dir/policy_all_llama3.json.gz.tmp" "$dir/policy_all_llama3.json.gz"
	rm -rf "$tmp"
}

all_sim=$do_sim all_meas=$do_meas
for c in "${cases[@]}"; do
	do_sim=$all_sim do_meas=$all_meas
	if [ $only_missing = 1 ]; then
		if [ "$c" = bandwidth ]; then
			[ ! -f "$dir/bandwidth.h5" ] || [ ! -f "$dir/policy_all_llama3.json.gz" ] || do_sim=0
		else
			[ ! -f "$dir/$c.h5" ] || do_sim=0
			[ ! -f "$dir/$c-cpu.h5" ] || do_meas=0
		fi
		[ $do_sim = 1 ] || [ $do_meas = 1 ] || continue
	fi
	"case_$c"
done
for f in "$dir"/*.h5; do
	[ -f "$f" ] && echo "cases: $f: $(runs "$f") runs"
done
