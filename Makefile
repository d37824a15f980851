# Build for the FSDP testbed: ./sim (simulator), ./gpu_run (runtime), tests.
#
#   make run     install missing packages, build, simulate experiments/llama3.ini
#   make test    install missing packages, build, run every test
#   make bench   simulator speed benchmark
#   make asan    sanitizer build of everything in build-asan/, then the tests against it
#   make fuzz    libFuzzer on the experiment parser and --set (FUZZ_SECONDS=60)
#   make plots   figures from data/*.h5 into paper/figures
#   make cases   the report's case studies into data/cases (only those missing)
#   make paper   the report, paper/main.pdf, from data/ (installs TeX Live if missing)
#   make gpu-test / gpu-bench   CUDA model checks and benchmark (need a GPU)
#   make pytorch-check   experiments/pytorch/ against real PyTorch on this CPU (installs it in venv-torch/)
#
# Plain GNU make; objects under build/, one .d file per object (-MMD -MP).

SHELL := /bin/bash
BUILD ?= build
CC ?= gcc
ifeq ($(origin CC),default)
CC := gcc
endif
OPT ?= -O2
WERROR := $(if $(CI),-Werror,)
SAN ?=
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -g $(OPT) -Wall -Wextra -Wshadow $(WERROR) -MMD -MP $(SAN) -Icore -Isimulator -Igpu -Igpu/ref -I$(BUILD)
DEPS_PKGS := libopenmpi-dev openmpi-bin libhdf5-dev hdf5-tools libgsl-dev libcunit1-dev libinih-dev python3-matplotlib python3-h5py python3-numpy pkg-config patchelf

FUZZ_PKGS := clang
# The report (make paper): pdfLaTeX; booktabs is in latex-recommended, the Latin Modern fonts in lmodern.
TEX_PKGS := texlive-latex-base texlive-latex-recommended lmodern

# Libraries: found through pkg-config once the packages are installed; a
# missing one stops the build before the compiler does, with the hint.
PKG_CONFIG := pkg-config
PKG_CFLAGS := $(shell $(PKG_CONFIG) --cflags hdf5 inih gsl 2>/dev/null)
PKG_LIBS := $(shell $(PKG_CONFIG) --libs hdf5 inih gsl 2>/dev/null)
MPI_CFLAGS := $(shell $(PKG_CONFIG) --cflags ompi 2>/dev/null)
MPI_LIBS := $(shell $(PKG_CONFIG) --libs ompi 2>/dev/null)
CUNIT_LIBS := $(shell $(PKG_CONFIG) --libs cunit 2>/dev/null || echo -lcunit)
pkg_missing = $(shell for p in $(1); do $(PKG_CONFIG) --exists $$p 2>/dev/null || echo $$p; done)
PKG_MISSING := $(call pkg_missing,hdf5 inih gsl ompi)
PKG_MISSING_TESTS := $(call pkg_missing,cunit)

# The binaries' names: make asan builds its own under build-asan/.
SIM := sim
GPU_RUN := gpu_run
RUN_TESTS := tests/run_tests
CFLAGS = $(CFLAGS_BASE) $(PKG_CFLAGS) $(MPI_CFLAGS)
LDLIBS = $(PKG_LIBS) -lm $(SAN)

# CUDA: detected once; without it gpu_run has the CPU backend only.
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)),)
NCCL_H := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
NCCL_LIB := $(firstword $(wildcard $(CUDA_HOME)/lib64/libnccl.so /usr/lib/x86_64-linux-gnu/libnccl.so))
HAVE_CUDA := $(if $(and $(NVCC),$(NCCL_H),$(NCCL_LIB)),yes,no)
ifeq ($(HAVE_CUDA),yes)
NVCC_VERSION := $(shell $(NVCC) --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
NCCL_VERSION := $(shell sed -n 's/^\#define NCCL_\(MAJOR\|MINOR\) \([0-9]*\).*/\2/p' $(NCCL_H) | paste -sd.)
CUDA_STATUS := CUDA: yes (nvcc $(NVCC_VERSION), NCCL $(NCCL_VERSION)): make gpu-test and gpu-bench build the CUDA model
else
CUDA_STATUS := CUDA: no (nvcc, nccl.h or libnccl not found): the CUDA model is skipped, gpu_run has its CPU backend
endif
NVCCFLAGS ?= -O3 -std=c++17 -lineinfo -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a \
	-Xcompiler -Wall,-Wextra -Icore -Igpu -Igpu/ref -Igpu/cuda
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublasLt -lcublas -lnccl
# The binaries find gpu/bundle/lib (gpu/cuda/bundle.sh) beside them without
# LD_LIBRARY_PATH: an old-style RPATH (DT_RPATH), which the loader also
# searches for the dependencies of their libraries (libmpi's) and for what
# those dlopen (Open MPI's components).
BUNDLE_RPATH := -Wl,--disable-new-dtags,-rpath,'$$ORIGIN/gpu/bundle/lib'

.PHONY: all run test check bench asan fuzz validate plots cases paper deps gpu-test gpu-bench clean features pkg-check pkg-check-tests pytorch-check
all: features $(SIM) $(GPU_RUN)

features:
	@echo "$(CUDA_STATUS)"

# ---- sources -------------------------------------------------------------
CORE_SRC := $(wildcard core/*.c)
SIMLIB_SRC := $(filter-out simulator/main.c,$(wildcard simulator/*.c))
REF_SRC := $(wildcard gpu/ref/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
RUN_SRC := $(filter-out gpu/run/backend_cuda%.c,$(wildcard gpu/run/*.c))

obj = $(patsubst %.c,$(BUILD)/%.o,$(1))
CORE_OBJ := $(call obj,$(CORE_SRC)) $(BUILD)/catalog_data.o
SIMLIB_OBJ := $(call obj,$(SIMLIB_SRC))
REF_OBJ := $(call obj,$(REF_SRC))
TEST_OBJ := $(call obj,$(TEST_SRC) tests/main.c tests/testutil.c)
RUN_OBJ := $(call obj,$(RUN_SRC))

-include gpu/cuda/cuda.mk

# Every object needs the libraries' headers: without them, say how to get them.
pkg-check:
ifneq ($(PKG_MISSING),)
	@echo "missing build dependencies: $(PKG_CONFIG) cannot find $(PKG_MISSING)$(if $(shell command -v $(PKG_CONFIG)),, ($(PKG_CONFIG) itself is not installed))." >&2; \
	echo "run 'make deps' to install the Debian packages ($(DEPS_PKGS)), then make again." >&2; exit 1
endif

pkg-check-tests: pkg-check
ifneq ($(PKG_MISSING_TESTS),)
	@echo "missing test dependencies: $(PKG_CONFIG) cannot find $(PKG_MISSING_TESTS): run 'make deps'." >&2; exit 1
endif

$(BUILD)/%.o: %.c | pkg-check
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(TEST_OBJ): | pkg-check-tests

# The hardware and model catalog is data (core/catalog.ini); it is compiled
# into the binaries as a string so they run from any directory.
$(BUILD)/catalog_data.c: core/catalog.ini
	@mkdir -p $(dir $@)
	{ echo '/* generated from core/catalog.ini */'; echo 'const char catalog_ini[] = {'; \
	  xxd -i < $< ; echo ', 0x00 };'; } > $@

$(BUILD)/catalog_data.o: $(BUILD)/catalog_data.c
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libcore.a: $(CORE_OBJ)
	rm -f $@ && ar rcs $@ $^

# ./sim runs sweeps over MPI under mpirun (simulator/explore.c), alone without
# it; it carries the bundle's rpath, so that a GPU host runs it from the
# bundle too (gpu/device_session.sh compares there).
$(SIM): $(BUILD)/simulator/main.o $(SIMLIB_OBJ) $(BUILD)/libcore.a
	$(CC) -o $@ $^ $(LDLIBS) $(MPI_LIBS) $(BUNDLE_RPATH)

# gpu_run: the CPU backend everywhere; with CUDA also the CUDA backend
# (gpu/run/backend_cuda*, the CUDA model of gpu/cuda, NCCL): cuda.mk sets
# GPU_RUN_CUDA_OBJ and GPU_RUN_CUDA_LIBS.
$(GPU_RUN): $(RUN_OBJ) $(REF_OBJ) $(GPU_RUN_CUDA_OBJ) $(BUILD)/libcore.a
	$(CC) -pthread -o $@ $^ $(LDLIBS) $(MPI_LIBS) $(GPU_RUN_CUDA_LIBS) $(BUNDLE_RPATH)

# One CUnit runner holds every suite; suites register themselves through
# suite_<name>() functions listed from tests/test_<name>.c.
$(BUILD)/tests/suites.h: $(TEST_SRC) Makefile
	@mkdir -p $(dir $@)
	{ for f in $(TEST_SRC); do n=$$(basename $$f .c); n=$${n#test_}; echo "X($$n)"; done; } > $@

$(BUILD)/tests/main.o: $(BUILD)/tests/suites.h

# gpu_run's collectives (comm.c) for the CPU tests of the emulated fabric: compiled without the CUDA
# build's NCCL calls, so that the tests link without NCCL
$(BUILD)/tests/comm_emu.o: gpu/run/comm.c | pkg-check
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(RUN_TESTS): $(TEST_OBJ) $(SIMLIB_OBJ) $(REF_OBJ) $(BUILD)/gpu/run/host_adamw.o $(BUILD)/gpu/run/parts.o $(BUILD)/gpu/run/data.o \
		$(BUILD)/gpu/run/layout.o $(BUILD)/tests/comm_emu.o $(CUDA_HOST_OBJ) $(BUILD)/libcore.a
	$(CC) -o $@ $^ $(LDLIBS) $(MPI_LIBS) $(CUNIT_LIBS)

# The fuzz target (make fuzz builds it with clang, BUILD=build-fuzz).
$(BUILD)/fuzz_config: $(BUILD)/tests/fuzz/fuzz_config.o $(BUILD)/libcore.a
	$(CC) $(FUZZ_LINK) -o $@ $^ $(LDLIBS)

# ---- user targets --------------------------------------------------------
deps:
	@missing=""; for p in $(DEPS_PKGS) $(if $(filter fuzz,$(MAKECMDGOALS)),$(FUZZ_PKGS)) $(if $(filter paper,$(MAKECMDGOALS)),$(TEX_PKGS)); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null || exit 1; \
	fi

run: deps
	@$(MAKE) --no-print-directory all
	./sim experiments/llama3.ini

test: deps
	@$(MAKE) --no-print-directory all $(RUN_TESTS) gpu_test_bin
	bash tests/run.sh

check: test

bench: deps
	@$(MAKE) --no-print-directory sim
	bash simulator/bench.sh

# The sanitizer build and its binaries live in build-asan/; the tests run
# against them (tests/run.sh reads SIM, GPU_RUN and RUN_TESTS), and the
# normal ./sim and ./gpu_run stay as they are.
ASAN_BIN := SIM=build-asan/sim GPU_RUN=build-asan/gpu_run RUN_TESTS=build-asan/run_tests
asan: deps
	@$(MAKE) --no-print-directory BUILD=build-asan OPT=-O1 \
		SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
		$(ASAN_BIN) build-asan/sim build-asan/gpu_run build-asan/run_tests
	$(ASAN_BIN) ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 bash tests/run.sh

# libFuzzer (clang) under ASan and UBSan on the experiment parser and the
# command line, FUZZ_SECONDS long, seeded with the experiment files and
# tests/bad; what it finds accumulates in build-fuzz/corpus. A crash stops
# it with the input saved as build-fuzz/crash-*.
FUZZ_SECONDS ?= 60
FUZZ_CC := clang
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
fuzz: deps
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz needs $(FUZZ_CC) with libFuzzer: run 'make deps fuzz'" >&2; exit 1; }
	@$(MAKE) --no-print-directory CC=$(FUZZ_CC) BUILD=build-fuzz OPT=-O1 SAN="-fsanitize=fuzzer-no-link $(FUZZ_SAN)" \
		FUZZ_LINK="-fsanitize=fuzzer $(FUZZ_SAN)" build-fuzz/fuzz_config
	@mkdir -p build-fuzz/corpus build-fuzz/seeds && cp experiments/*.ini tests/bad/*.ini build-fuzz/seeds/
	cd build-fuzz && ./fuzz_config -max_total_time=$(FUZZ_SECONDS) -dict=../tests/fuzz/config.dict \
		-max_len=4096 -timeout=10 -print_final_stats=1 corpus seeds

# Calibrate the CPU backend, run every policy family on it, compare (minutes).
validate: deps
	@$(MAKE) --no-print-directory all
	bash gpu/run/validate.sh

# experiments/pytorch/ against real PyTorch on this CPU (tests/e2e_pytorch.sh), from a virtual
# environment of its own: PyTorch 2.11 as on the lent GPU machines, with h5py (PyPI's wheel brings
# the CUDA libraries too, about 5 GB, the first time). `make test` runs the same checks once it exists.
PYTORCH_ENV ?= venv-torch
pytorch-check: deps
	@$(MAKE) --no-print-directory sim
	@$(PYTORCH_ENV)/bin/python -c 'import torch, h5py' 2>/dev/null || { python3 -m venv $(PYTORCH_ENV) && \
		$(PYTORCH_ENV)/bin/pip install -q torch==2.11.0 h5py numpy; }
	PYTORCH_PYTHON=$(PYTORCH_ENV)/bin/python bash tests/e2e_pytorch.sh

plots: deps
	/usr/bin/python3 paper/plots.py data $(wildcard data/runs data/pytorch data/published) paper/figures

# The case studies of the report (paper/cases.sh): the files of data/cases
# that are missing, simulated and measured on the CPU backend (minutes).
cases: deps
	@$(MAKE) --no-print-directory all
	bash paper/cases.sh --missing

# The report: figures (paper/plots.py) and every number and table
# (paper/report.py) from data/, then pdfLaTeX; paper/main.pdf.
PDFLATEX := cd paper && pdflatex -interaction=nonstopmode -halt-on-error main.tex >/dev/null
paper: deps
	@$(MAKE) --no-print-directory cases
	/usr/bin/python3 paper/plots.py data $(wildcard data/runs data/pytorch data/published) paper/figures
	/usr/bin/python3 paper/plots.py --cases data/cases paper/figures
	/usr/bin/python3 paper/report.py data paper/figures paper/gen
	@for i in 1 2 3; do \
	  ( $(PDFLATEX) ) || { tail -30 paper/main.log >&2; echo "paper: pdflatex failed (paper/main.log)" >&2; exit 1; }; \
	  grep -q 'Rerun to get\|Table widths have changed\|Label(s) may have changed' paper/main.log || break; \
	done
	@n=$$(pdfinfo paper/main.pdf 2>/dev/null | sed -n 's/^Pages: *//p'); echo "paper: paper/main.pdf$${n:+, $$n pages}"

gpu-test: deps
	@$(MAKE) --no-print-directory gpu_test_bin
	bash gpu/cuda/gpu_test.sh

gpu-bench: deps
	@$(MAKE) --no-print-directory gpu_bench_bin
	bash gpu/cuda/gpu_bench.sh

clean:
	rm -rf build build-asan build-fuzz sim gpu_run tests/run_tests gpu_test gpu_bench

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
