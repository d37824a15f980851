#!/usr/bin/env bash
# Device step: PyTorch FSDP2 measured on the GPU machine (experiments/pytorch/README.md).
# Contract: run from the repository root with $OUT set; writes $OUT/pytorch/*.h5 and logs;
# exits 0 when PyTorch or a GPU is missing (it says so), non-zero when a measurement fails.
set -uo pipefail
: "${OUT:?OUT must name the folder results go to}"
PY=${PYTHON:-${PY:-python3}} # device_session.sh exports PY: the Python that has torch
mkdir -p "$OUT/pytorch"
# one import of torch (a few seconds each) for whether it has a GPU, how many, and the first one's name
read -r n hw < <($PY -c 'import torch, h5py; assert torch.cuda.is_available()
print(torch.cuda.device_count(), torch.cuda.get_device_name().lower().replace(" ", "-"))' 2>/dev/null)
if [ -z "${hw:-}" ]; then
	echo "40-pytorch: no PyTorch with CUDA here; skipped"
	exit 0
fi
gpu=${CATALOG_GPU:-h100-sxm} # the catalog GPU ./sim prices the runs on (device_session.sh's)
# each command capped (device_session.sh's tmo: never past the step's end either), so that one slow
# command leaves the later ones their time; run alone, without tmo, nothing is capped
type tmo >/dev/null 2>&1 || tmo() { shift; "$@"; }
# torchrun's workers meet at 127.0.0.1: the machine's own name may not resolve offline
RUN=(-m torch.distributed.run --standalone --local-addr 127.0.0.1)
rc=0
# the GPU's clocks, power and temperature through the hook (clocks.csv, every 250 ms), and when each command
# began and ended (phases.txt): whether a step ran at the clocks its kernels' microbenchmarks ran at.
# Under gpu/device_session.sh, which samples the whole call (CLOCKS_CSV), the commands go to its
# phases too (PHASES) and the hook samples nothing of its own
if [ -z "${CLOCKS_CSV:-}" ] && command -v nvidia-smi >/dev/null; then
	# (a sampler that ends by itself, should the hook be killed before its trap runs)
	timeout 900 nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
		--format=csv -lms 250 >"$OUT/pytorch/clocks.csv" 2>/dev/null &
	smi=$!
fi
# The device tool brings back eight files: the logs, phases and clocks go back as one archive,
# $OUT/pytorch/logs.tar.gz, beside the .h5 files (also when the hook is ended early)
pack_logs() {
	[ -n "${smi:-}" ] && kill "$smi" 2>/dev/null
	(
		cd "$OUT/pytorch" || exit
		shopt -s nullglob
		f=(*.log *.txt *.csv)
		[ ${#f[@]} -eq 0 ] || { tar -czf logs.tar.gz -- "${f[@]}" && rm -f -- "${f[@]}"; }
	)
}
trap pack_logs EXIT
# a command cut by its cap may leave torchrun's workers (each in a session of its own, which the cap's
# signal does not reach) tearing down a context: the next measurement waits, at most 30 s, until no
# process holds the GPU, so that none of its memory or time is another's
settle() {
	local left
	command -v nvidia-smi >/dev/null || return 0
	for _ in $(seq 60); do
		left=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null)
		[ -z "$left" ] && return 0
		sleep 0.5
	done
	echo "40-pytorch: after 30 s a process still holds the GPU: $left"
}
phase() {
	[ "$1" = end ] || settle
	local t
	t=$(date '+%Y/%m/%d %H:%M:%S.%3N') # nvidia-smi's clock: the machine's local time
	echo "$t $*" >>"$OUT/pytorch/phases.txt"
	[ -z "${PHASES:-}" ] || echo "$t hooks: 40-pytorch: $*" >>"$PHASES"
}
# microbench: 20 s on the H200; since, a profile of each FSDP2 copy and 3 s of GEMMs for the SM clock (30 to
# 40 s by estimate; its file is written at its end, so a cap that cuts it loses it all: 90 s)
phase microbench
tmo 90 $PY experiments/pytorch/microbench.py --out "$OUT/pytorch/$hw-pytorch-cal.h5" 2>&1 | tee "$OUT/pytorch/microbench.log" || rc=1
# the rates by template this GPU gives, beside the committed GPUs' and the catalog's (a table to read: a GPU
# the script does not know the HBM of is named in its message)
if [ -x ./sim ] && [ -f "$OUT/pytorch/$hw-pytorch-cal.h5" ]; then
	tmo 20 $PY experiments/pytorch/rates.py --sim ./sim "$OUT/pytorch/$hw-pytorch-cal.h5" data/pytorch/*-pytorch-cal.h5 \
		2>&1 | tee -a "$OUT/pytorch/microbench.log"
fi
for w in 1 "$n"; do
	phase "fsdp_bench grid, $w rank(s)"
	tmo 145 $PY "${RUN[@]}" --nproc-per-node "$w" experiments/pytorch/fsdp_bench.py --grid full --profile --alloc-trace \
		--gpu "$gpu" --steps 8 --warmup 2 \
		--out "$OUT/pytorch/$hw-fsdp2-w$w.h5" 2>&1 | tee "$OUT/pytorch/fsdp_bench-w$w.log" || rc=1
	[ "$n" = 1 ] && break
done
# a model small enough that the host bounds its step (./sim: 9.9 ms on an H200, 9.1 ms of it the CPU
# launching): the host model (eager dispatch per kernel, FSDP2's hooks per op, the launch queue) against
# real PyTorch, the full grid in seconds; into a file of its own, apart from llama3-8b's shapes
phase "fsdp_bench host-bound model"
tmo 60 $PY "${RUN[@]}" --nproc-per-node 1 experiments/pytorch/fsdp_bench.py --grid full --profile \
	--layers 8 --hidden 512 --ffn 1536 --heads 8 --kv-heads 4 --vocab 8192 --seq 512 --batch 1 \
	--gpu "$gpu" --steps 20 --warmup 3 \
	--out "$OUT/pytorch/$hw-fsdp2-small-w1.h5" 2>&1 | tee "$OUT/pytorch/fsdp_bench-small.log" || rc=1
# FSDP2's copies at world size 1 (no collective) against ./sim's schedule, on the GPU with NCCL: seconds;
# its table opens saved.log (the files that come back are few)
phase "unshard.py, saved.py"
if [ -x ./sim ]; then
	tmo 30 $PY experiments/pytorch/unshard.py --device cuda --sim ./sim 2>&1 | tee "$OUT/pytorch/saved.log" || rc=1
fi
# what a block and the loss keep for their backward against ./sim's recipes (eager without
# checkpointing too: a CPU lacks its fused RMSNorm), and the kernels a block launches (about 40 s)
if [ -x ./sim ]; then
	tmo 90 $PY experiments/pytorch/saved.py --device cuda --sim ./sim 2>&1 | tee -a "$OUT/pytorch/saved.log" || rc=1
else
	echo "40-pytorch: ./sim not carried; saved.py skipped" | tee "$OUT/pytorch/saved.log"
fi
# last, what both GPUs have measured already (data/pytorch: the H100's and the H200's), so that a short
# step cuts these first: the base policy with expandable segments, built on the meta device, compiled
# the base policy again with expandable segments (PYTORCH_CUDA_ALLOC_CONF is read once per process):
# reserved against the run above without them, which ./sim models (policy.expandable_segments)
phase "fsdp_bench expandable segments"
tmo 40 $PY "${RUN[@]}" --nproc-per-node 1 experiments/pytorch/fsdp_bench.py --grid one \
	--expandable-segments --alloc-trace --gpu "$gpu" --steps 8 --warmup 2 \
	--out "$OUT/pytorch/$hw-fsdp2-w1.h5" 2>&1 | tee -a "$OUT/pytorch/fsdp_bench-w1.log" || rc=1
# the base policy built as torchtitan builds (on the meta device, then each shard allocated alone): its
# memory_by_step against the device build's above says what the build leaves in the cache
phase "fsdp_bench meta build"
tmo 40 $PY "${RUN[@]}" --nproc-per-node 1 experiments/pytorch/fsdp_bench.py --grid one --build meta \
	--alloc-trace --gpu "$gpu" --steps 8 --warmup 2 \
	--out "$OUT/pytorch/$hw-fsdp2-w1.h5" 2>&1 | tee -a "$OUT/pytorch/fsdp_bench-w1.log" || rc=1
# the base policy compiled (torchtitan's compile of each block and the loss; pytorch-compile):
# compiling takes a minute of the hook's time
phase "fsdp_bench compiled"
tmo 100 $PY "${RUN[@]}" --nproc-per-node 1 experiments/pytorch/fsdp_bench.py --grid one \
	--compile model+loss --alloc-trace --gpu "$gpu" --steps 5 --warmup 2 \
	--out "$OUT/pytorch/$hw-fsdp2-w1.h5" 2>&1 | tee -a "$OUT/pytorch/fsdp_bench-w1.log" || rc=1
phase end
exit $rc
