#!/usr/bin/env bash
# gpu/cuda/gpu_test.sh - run the CUDA checks (./gpu_test, every layer, the
# block, head and model against gpu/ref), then, where compute-sanitizer is
# installed and a GPU is present, again under its memcheck (all checks)
# and racecheck (the kernels that share memory between threads).
#
# Usage: bash gpu/cuda/gpu_test.sh [GROUP]   (GROUP filters, e.g. attention)
# Without CUDA (no binary) or without a GPU: one line, exit 0.
# On a GPU host without the Debian packages, gpu/bundle/env.sh is sourced
# when the binary would not load otherwise (gpu/cuda/bundle.sh makes it).
set -u
cd "$(dirname "$0")/../.." || exit 1

if [ ! -x ./gpu_test ]; then
	echo "gpu_test: not built (no CUDA toolkit here): nothing to check; the CPU backend runs without one (./gpu_run with backend = cpu)"
	exit 0
fi
if ldd ./gpu_test | grep -v -E 'lib(cuda|cudart|cublas|cublasLt|nccl)\.so' | grep -q "not found" \
	&& [ -f gpu/bundle/env.sh ]; then
	source gpu/bundle/env.sh
fi

./gpu_test "$@" || exit $?

# the sanitizer passes only make sense with a device
if ! ./gpu_test __none__ | grep -q "passed"; then
	exit 0 # gpu_test has already said there is no device
fi
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -z "$san" ]; then
	echo "gpu_test: compute-sanitizer not installed: sanitizer passes skipped"
	exit 0
fi
# Prints the failing checks, the sanitizer's reports and the summaries.
sanitize() { # tool, then gpu_test's arguments
	local tool=$1 log
	shift
	log=$(mktemp)
	echo "== compute-sanitizer $tool ./gpu_test $*"
	"$san" --tool "$tool" --error-exitcode 3 --print-limit 20 ./gpu_test "$@" >"$log" 2>&1
	local r=$?
	grep -E '^(FAIL|=========)|passed, ' "$log" | head -n 80
	rm -f "$log"
	return $r
}
rc=0
sanitize memcheck "$@" || rc=1
for g in attention rmsnorm cross_entropy; do
	[ $# -gt 0 ] && [[ $g != *"$1"* ]] && continue
	sanitize racecheck "$g" || rc=1
done
exit $rc
