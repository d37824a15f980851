#!/usr/bin/env bash
# Runs every test: the end-to-end checks of ./sim and ./gpu_run (bad input,
# golden runs, calibration files refused, sweeps and the advisor, the runtime's equivalence checks,
# data safety, the calibrate-run-compare loop, the GPU session's script rehearsed on the CPU,
# the report's generator, configurations drawn at random, experiments/pytorch/ against real PyTorch
# where a Python has it, cuDNN's attention graphs where CUDA was found), then the CUnit suites,
# whose summary closes the output. Exit status is non-zero when anything
# failed.
#
# Under `make asan`, leak checking stays on for ./sim and the unit tests but
# is off for ./gpu_run: Open MPI leaves allocations of plugins it has already
# unloaded, which LeakSanitizer cannot attribute or suppress.
#
# The binaries under test are ./sim, ./gpu_run and ./tests/run_tests, or
# those SIM, GPU_RUN and RUN_TESTS name (make asan: build-asan/).
set -u
cd "$(dirname "$0")/.."
export SIM=${SIM:-./sim} GPU_RUN=${GPU_RUN:-./gpu_run}
RUN_TESTS=${RUN_TESTS:-./tests/run_tests}
fail=0
mpi_env=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")

bash tests/e2e_bad_input.sh "$SIM" || fail=1
"${mpi_env[@]}" bash tests/e2e_bad_input.sh "$GPU_RUN" || fail=1
bash tests/e2e_sim.sh || fail=1
bash tests/e2e_calibration.sh || fail=1
"${mpi_env[@]}" bash tests/e2e_sweep.sh || fail=1
"${mpi_env[@]}" bash tests/e2e_gpu_run.sh || fail=1
"${mpi_env[@]}" bash tests/e2e_safety.sh || fail=1
"${mpi_env[@]}" bash tests/e2e_validate.sh || fail=1
"${mpi_env[@]}" bash tests/e2e_device_session.sh || fail=1
"${mpi_env[@]}" bash tests/e2e_paper.sh || fail=1
bash tests/e2e_random.sh || fail=1
bash tests/e2e_pytorch.sh || fail=1
# cuDNN's attention graphs, operation by operation, checked by cuDNN on the host (./gpu_test is built where
# CUDA is, and the check runs where libcudnn.so.9 loads; the rest of gpu_test needs a GPU: make gpu-test)
if [ -x ./gpu_test ]; then
	./gpu_test cudnn_ops || fail=1
fi

"$RUN_TESTS" || fail=1
exit $fail
