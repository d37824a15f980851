# shellcheck shell=bash
# tests/mpi_local.sh - sourced by the tests that start ./gpu_run or mpirun:
# Open MPI as every test runs it, on this one machine, started faster.
#
# - pml ob1: the PML these processes end up with anyway (Debian's
#   openmpi-mca-params.conf, and gpu/bundle's copy of it, exclude ucx; cm's
#   MTLs, psm and psm2, find no hardware), named so that cm and its MTLs
#   are neither opened nor probed: 0.2 s less a process.
# - ess_singleton_isolated: a process started without mpirun (a singleton,
#   as most of e2e_bad_input's and e2e_gpu_run's refusals are) starts no
#   orted daemon to serve a spawn it never makes: 0.1 s less.
# A singleton of ./gpu_run took 0.44 s and takes 0.15 s (medians of 9,
# farm-bench, 2026-12-02); each is left as the environment sets it.
export OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}"
export OMPI_MCA_ess_singleton_isolated="${OMPI_MCA_ess_singleton_isolated:-1}"
