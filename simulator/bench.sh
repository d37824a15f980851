#!/usr/bin/env bash
# make bench: how fast the simulator prices a large step (issue target:
# under 2 ms per step and under 50 MB on one core).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "machine: $(nproc) cores, $(sed -n 's/^model name.*: //p' /proc/cpuinfo | head -1)"
echo "llama3-70b, 128 nodes x 8 h100-sxm, hsdp, 8 microbatches:"
taskset -c 0 ./sim --model llama3-70b --gpu h100-sxm --nodes 128 --gpus-per-node 8 --policy hsdp \
	--microbatches 8 --bench 200
echo "llama3-8b, 2 x 8 h100-sxm, fsdp:"
taskset -c 0 ./sim experiments/llama3.ini --bench 500
echo "--policy all, llama3-8b, 2 x 8 h100-sxm, 4 microbatches:"
/usr/bin/time -f "%e s, %M KB peak RSS" ./sim experiments/llama3.ini --microbatches 4 --policy all --top 1 | tail -2
