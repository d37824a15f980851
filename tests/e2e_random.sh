#!/usr/bin/env bash
# e2e_random.sh - configurations drawn at random with fixed seeds
# (tests/random_configs.py says what each check asserts):
#   1. ./sim on 150 configurations of every policy key, model, GPU and
#      runtime, and those that once broke it: exit 0 or 2 with a message
#      naming the key, within a minute, and a summary that holds together
#      (step, exposed communication, compute, MFU, the peak's categories,
#      reserved, fits), and for every fifth a --trace that does too (events
#      within the step and in turn on each stream, memory within the peaks);
#   2. 20 rows of tiny's --policy all under each runtime against ./sim
#      run on that policy alone; 12 rows of each of two sweeps of four drawn
#      axes (one alone, one on 2 MPI ranks) likewise, and --advise on each
#      answering with its fastest that fits (under a --memory-budget too);
#   3. ./gpu_run's CPU backend on 12 drawn policies and those that once
#      broke it: fsdp's losses and parameters, ./sim's peak memory;
#   4. ./gpu_run as rank 0 of a world of 4, 8 or 16 (--emulate-world) on 6
#      drawn policies: finite losses, ./sim's peak memory for that world;
#   3 and 4 also: ./sim --compare of the runs they wrote predicts each
#      run's measured peaks (its configuration rebuilt from the run's file).
# A seed other than the default (RANDOM_SEED=N) draws other configurations;
# a failure prints the command that reruns it.
# One line per check, then `N passed, N failed`; non-zero exit on failure.
set -u
cd "$(dirname "$0")/.."
. tests/mpi_local.sh
SEED=${RANDOM_SEED:-1}
passed=0
failed=0
# under `make asan`: leaks checked for ./sim; ./gpu_run's runs leave them unchecked (random_configs.py)

check() { # NAME WHAT COUNT
	local out
	if out=$(/usr/bin/python3 tests/random_configs.py "$2" "$3" "$SEED" 2>&1); then
		echo "ok   random $1: $(tail -1 <<<"$out")"
		passed=$((passed + 1))
	else
		echo "FAIL random $1:"
		sed 's/^/    /' <<<"$out"
		failed=$((failed + 1))
	fi
}

check "./sim" sim 150
check "--policy all rows" policy-all 20
check "--sweep rows" sweep 12
if command -v mpirun >/dev/null && [ -x "${GPU_RUN:-./gpu_run}" ]; then
	check "./gpu_run" gpu-run 12
	check "./gpu_run --emulate-world" emulated 6
else
	echo "FAIL random ./gpu_run: needs ./gpu_run (make gpu_run) and mpirun"
	failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
