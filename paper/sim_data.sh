#!/usr/bin/env bash
# Regenerates data/sim_llama3.h5: the reference experiment under the main
# sharding and wrapping policies, for the policy comparison figures.
# Appends to the file (results files are never truncated); remove it first
# to start over.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-data/sim_llama3.h5}
for args in "--policy fsdp" "--policy hsdp" "--policy zero2" "--policy ddp" \
	    "--policy fsdp --wrap block+io" "--policy fsdp --optim-in-backward --ac full" \
	    "--policy fsdp --ac full" "--policy fsdp --runtime pytorch"; do
	./sim experiments/llama3.ini $args --out "$out" > /dev/null
done
echo "$out: $(h5ls "$out/runs" | wc -l) runs"
