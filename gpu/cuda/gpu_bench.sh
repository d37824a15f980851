#!/usr/bin/env bash
# gpu/cuda/gpu_bench.sh - the block benchmark (./gpu_bench): Llama 3 8B
# blocks at T = 8192, per-kernel times, block fwd+bwd time and MFU,
# appended to data/gpu_bench.h5. Arguments go to gpu_bench (--help).
# Without CUDA (no binary) or without a GPU: one line, exit 0.
set -u
cd "$(dirname "$0")/../.." || exit 1

if [ ! -x ./gpu_bench ]; then
	echo "gpu_bench: not built (no CUDA toolkit here): nothing to measure; the CPU backend runs without one (./gpu_run with backend = cpu)"
	exit 0
fi
if ldd ./gpu_bench | grep -v -E 'lib(cuda|cudart|cublas|cublasLt|nccl)\.so' | grep -q "not found" \
	&& [ -f gpu/bundle/env.sh ]; then
	source gpu/bundle/env.sh
fi
mkdir -p data
exec ./gpu_bench "$@"
