#!/usr/bin/env bash
# Device step: PyTorch FSDP2 measured on the GPU machine (experiments/pytorch/README.md).
# Contract: run from the repository root with $OUT set; writes $OUT/pytorch/*.h5 and logs;
# exits 0 when PyTorch or a GPU is missing (it says so), non-zero when a measurement fails.
set -uo pipefail
: "${OUT:?OUT must name the folder results go to}"
PY=${PYTHON:-${PY:-python3}} # device_session.sh exports PY: the Python that has torch
mkdir -p "$OUT/pytorch"
if ! $PY -c 'import torch, h5py; assert torch.cuda.is_available()' 2>/dev/null; then
	echo "40-pytorch: no PyTorch with CUDA here; skipped"
	exit 0
fi
n=$($PY -c 'import torch; print(torch.cuda.device_count())')
hw=$($PY -c 'import torch; print(torch.cuda.get_device_name().lower().replace(" ", "-"))')
gpu=${CATALOG_GPU:-h100-sxm} # the catalog GPU ./sim prices the runs on (device_session.sh's)
# each command capped (device_session.sh's tmo: never past the step's end either), so that one slow
# command leaves the later ones their time; run alone, without tmo, nothing is capped
type tmo >/dev/null 2>&1 || tmo() { shift; "$@"; }
# torchrun's workers meet at 127.0.0.1: the machine's own name may not resolve offline
RUN=(-m torch.distributed.run --standalone --local-addr 127.0.0.1)
rc=0
tmo 45 $PY experiments/pytorch/microbench.py --out "$OUT/pytorch/$hw-pytorch-cal.h5" 2>&1 | tee "$OUT/pytorch/microbench.log" || rc=1
for w in 1 "$n"; do
	tmo 145 $PY "${RUN[@]}" --nproc-per-node "$w" experiments/pytorch/fsdp_bench.py --grid full --profile --alloc-trace \
		--gpu "$gpu" --steps 8 --warmup 2 \
		--out "$OUT/pytorch/$hw-fsdp2-w$w.h5" 2>&1 | tee "$OUT/pytorch/fsdp_bench-w$w.log" || rc=1
	[ "$n" = 1 ] && break
done
# the base policy again with expandable segments (PYTORCH_CUDA_ALLOC_CONF is read once per process):
# reserved against the run above without them, which ./sim models (policy.expandable_segments)
tmo 40 $PY "${RUN[@]}" --nproc-per-node 1 experiments/pytorch/fsdp_bench.py --grid one \
	--expandable-segments --alloc-trace --gpu "$gpu" --steps 8 --warmup 2 \
	--out "$OUT/pytorch/$hw-fsdp2-w1.h5" 2>&1 | tee -a "$OUT/pytorch/fsdp_bench-w1.log" || rc=1
# the base policy built as torchtitan builds (on the meta device, then each shard allocated alone): its
# memory_by_step against the device build's above says what the build leaves in the cache
tmo 40 $PY "${RUN[@]}" --nproc-per-node 1 experiments/pytorch/fsdp_bench.py --grid one --build meta \
	--alloc-trace --gpu "$gpu" --steps 8 --warmup 2 \
	--out "$OUT/pytorch/$hw-fsdp2-w1.h5" 2>&1 | tee -a "$OUT/pytorch/fsdp_bench-w1.log" || rc=1
# the base policy compiled (torchtitan's compile of each block and the loss; pytorch-compile):
# compiling takes a minute of the hook's time
tmo 100 $PY "${RUN[@]}" --nproc-per-node 1 experiments/pytorch/fsdp_bench.py --grid one \
	--compile model+loss --alloc-trace --gpu "$gpu" --steps 5 --warmup 2 \
	--out "$OUT/pytorch/$hw-fsdp2-w1.h5" 2>&1 | tee -a "$OUT/pytorch/fsdp_bench-w1.log" || rc=1
# FSDP2's copies at world size 1 (no collective) against ./sim's schedule, on the GPU with NCCL: seconds;
# its table opens saved.log (the files that come back are few)
if [ -x ./sim ]; then
	tmo 30 $PY experiments/pytorch/unshard.py --device cuda --sim ./sim 2>&1 | tee "$OUT/pytorch/saved.log" || rc=1
fi
# what a block and the loss keep for their backward against ./sim's recipes (eager without
# checkpointing too: a CPU lacks its fused RMSNorm), and the kernels a block launches; a minute or
# two, last, so that the measurements above come first
if [ -x ./sim ]; then
	tmo 0 $PY experiments/pytorch/saved.py --device cuda --sim ./sim 2>&1 | tee -a "$OUT/pytorch/saved.log" || rc=1
else
	echo "40-pytorch: ./sim not carried; saved.py skipped" | tee "$OUT/pytorch/saved.log"
fi
exit $rc
