# shellcheck shell=bash
# tests/mpi_local.sh - sourced by the tests that start ./gpu_run or mpirun:
# Open MPI as every test runs it, on this one machine, started faster.
#
# pml ob1: the PML these processes end up with anyway (Debian's
# openmpi-mca-params.conf, and gpu/bundle's copy of it, exclude ucx; cm's
# MTLs, psm and psm2, find no hardware), named so that cm and its MTLs are
# neither opened nor probed: a refusal of ./gpu_run started alone took 0.50 s
# and takes 0.29 s (medians of 9, farm-bench, 2026-12-02). Left as the environment
# sets it. (A singleton without its orted daemon, ess_singleton_isolated,
# would save 0.1 s more; a clean-clone CI run on 2026-12-02 had a refusal
# of gpu_run time out with it, not reproduced, so it is not set.)
export OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}"
