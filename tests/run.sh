#!/usr/bin/env bash
# Runs every test: the end-to-end checks of ./sim and ./gpu_run (bad input,
# golden runs), then the CUnit suites, whose summary closes the output.
# Exit status is non-zero when anything failed.
set -u
cd "$(dirname "$0")/.."
fail=0

for t in tests/e2e_*.sh; do
	case "$t" in
	tests/e2e_bad_input.sh)
		bash "$t" ./sim || fail=1
		bash "$t" ./gpu_run || fail=1 ;;
	*)
		bash "$t" || fail=1 ;;
	esac
done

./tests/run_tests || fail=1
exit $fail
