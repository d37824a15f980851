# Build for the FSDP testbed: ./sim (simulator), ./gpu_run (runtime), tests.
#
#   make run     install missing packages, build, simulate experiments/llama3.ini
#   make test    install missing packages, build, run every test
#   make bench   simulator speed benchmark
#   make asan    sanitizer build of everything, then the tests
#   make plots   figures from data/*.h5 into paper/figures
#   make gpu-test / gpu-bench   CUDA model checks and benchmark (need a GPU)
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
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -g $(OPT) -Wall -Wextra $(WERROR) -MMD -MP $(SAN) -Icore -Isimulator -Igpu -Igpu/ref -I$(BUILD)
DEPS_PKGS := libopenmpi-dev openmpi-bin libhdf5-dev hdf5-tools libgsl-dev libcunit1-dev libinih-dev python3-matplotlib python3-h5py python3-numpy pkg-config

# Libraries: found through pkg-config once the packages are installed.
PKG_CFLAGS := $(shell pkg-config --cflags hdf5 inih gsl 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs hdf5 inih gsl 2>/dev/null)
MPI_CFLAGS := $(shell pkg-config --cflags ompi 2>/dev/null)
MPI_LIBS := $(shell pkg-config --libs ompi 2>/dev/null)
CUNIT_LIBS := $(shell pkg-config --libs cunit 2>/dev/null || echo -lcunit)
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

.PHONY: all run test check bench asan validate plots deps gpu-test gpu-bench clean features
all: features sim gpu_run

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

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

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

sim: $(BUILD)/simulator/main.o $(SIMLIB_OBJ) $(BUILD)/libcore.a
	$(CC) -o $@ $^ $(LDLIBS)

# gpu_run: the CPU backend everywhere; with CUDA also the CUDA backend
# (gpu/run/backend_cuda*, the CUDA model of gpu/cuda, NCCL): cuda.mk sets
# GPU_RUN_CUDA_OBJ and GPU_RUN_CUDA_LIBS.
gpu_run: $(RUN_OBJ) $(REF_OBJ) $(GPU_RUN_CUDA_OBJ) $(BUILD)/libcore.a
	$(CC) -pthread -o $@ $^ $(LDLIBS) $(MPI_LIBS) $(GPU_RUN_CUDA_LIBS) $(BUNDLE_RPATH)

# One CUnit runner holds every suite; suites register themselves through
# suite_<name>() functions listed from tests/test_<name>.c.
$(BUILD)/tests/suites.h: $(TEST_SRC) Makefile
	@mkdir -p $(dir $@)
	{ for f in $(TEST_SRC); do n=$$(basename $$f .c); n=$${n#test_}; echo "X($$n)"; done; } > $@

$(BUILD)/tests/main.o: $(BUILD)/tests/suites.h

tests/run_tests: $(TEST_OBJ) $(SIMLIB_OBJ) $(REF_OBJ) $(CUDA_HOST_OBJ) $(BUILD)/libcore.a
	$(CC) -o $@ $^ $(LDLIBS) $(CUNIT_LIBS)

# ---- user targets --------------------------------------------------------
deps:
	@missing=""; for p in $(DEPS_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null || exit 1; \
	fi

run: deps
	@$(MAKE) --no-print-directory all
	./sim experiments/llama3.ini

test: deps
	@$(MAKE) --no-print-directory all tests/run_tests
	bash tests/run.sh

check: test

bench: deps
	@$(MAKE) --no-print-directory sim
	bash simulator/bench.sh

# The sanitizer build writes the same binaries; they are removed afterwards
# so that the next plain `make` rebuilds them without sanitizers.
asan: deps
	rm -f sim gpu_run tests/run_tests
	@$(MAKE) --no-print-directory BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" all tests/run_tests
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 bash tests/run.sh; rc=$$?; rm -f sim gpu_run tests/run_tests; exit $$rc

# Calibrate the CPU backend, run every policy family on it, compare (minutes).
validate: deps
	@$(MAKE) --no-print-directory all
	bash gpu/run/validate.sh

plots: deps
	/usr/bin/python3 paper/plots.py data $(wildcard data/runs) paper/figures

gpu-test: deps
	@$(MAKE) --no-print-directory gpu_test_bin
	bash gpu/cuda/gpu_test.sh

gpu-bench: deps
	@$(MAKE) --no-print-directory gpu_bench_bin
	bash gpu/cuda/gpu_bench.sh

clean:
	rm -rf build build-asan sim gpu_run tests/run_tests gpu_test gpu_bench

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
