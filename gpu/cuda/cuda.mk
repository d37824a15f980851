# gpu/cuda/cuda.mk - make fragment for the CUDA model, -included by the
# top-level Makefile after its variables (HAVE_CUDA, NVCC, NVCCFLAGS,
# CUDA_HOME, CUDA_LIBS, BUILD, CFLAGS, LDLIBS, REF_OBJ) are set.
#
# Defines, always:
#   CUDA_HOST_OBJ          the model's host-side layout and kernel plans
#                          (layout.c, kernel_plan.c: plain C, no CUDA): the
#                          CPU tests link them to check them
# and, with CUDA:
#   $(BUILD)/%.o: %.cu     nvcc, with -MMD -MP dependency files
#   CUDA_RUN_OBJ           the model objects gpu_run links (CUDA_HOST_OBJ included)
#   CUDA_RUN_LIBS          the libraries they need
#   CUDA_CFLAGS            what a C file including cuda_model.h needs
#   GPU_RUN_CUDA_OBJ       what gpu_run adds for its CUDA backend (the
#                          backend, its kernels, the model); gpu/run's C
#                          files are compiled with -DGPU_RUN_CUDA
#   GPU_RUN_CUDA_LIBS      the libraries those need
#   gpu_test_bin           builds ./gpu_test (checks against gpu/ref)
#   gpu_bench_bin          builds ./gpu_bench
# Without CUDA the two targets only say so, and the CUDA variables are empty.

.PHONY: gpu_test_bin gpu_bench_bin

CUDA_HOST_OBJ := $(BUILD)/gpu/cuda/layout.o $(BUILD)/gpu/cuda/kernel_plan.o

ifeq ($(HAVE_CUDA),yes)

CUDA_MODEL_SRC := $(addprefix gpu/cuda/,ctx.cu gemm.cu layers.cu attention.cu attention_cudnn.cu adamw.cu block.cu \
	kernel_run.cu)
CUDA_RUN_OBJ := $(patsubst %.cu,$(BUILD)/%.o,$(CUDA_MODEL_SRC)) $(CUDA_HOST_OBJ)
CUDA_RUN_LIBS := $(CUDA_LIBS) -lstdc++ -lm
CUDA_CFLAGS := -I$(CUDA_HOME)/include -Igpu/cuda

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/gpu/cuda/gpu_test.o: CFLAGS += $(CUDA_CFLAGS)
$(BUILD)/gpu/cuda/gpu_bench.o: NVCCFLAGS += $(PKG_CFLAGS)

GPU_RUN_CUDA_OBJ := $(BUILD)/gpu/run/backend_cuda.o $(BUILD)/gpu/run/backend_cuda_kernels.o $(CUDA_RUN_OBJ)
GPU_RUN_CUDA_LIBS := $(CUDA_RUN_LIBS) -ldl
$(RUN_OBJ) $(BUILD)/gpu/run/backend_cuda.o: CFLAGS += -DGPU_RUN_CUDA $(CUDA_CFLAGS)
$(BUILD)/gpu/run/backend_cuda_kernels.o: NVCCFLAGS += -Igpu/run

gpu_test: $(BUILD)/gpu/cuda/gpu_test.o $(CUDA_RUN_OBJ) $(REF_OBJ) $(BUILD)/libcore.a
	$(CC) -o $@ $^ $(LDLIBS) $(CUDA_RUN_LIBS) $(BUNDLE_RPATH)

gpu_bench: $(BUILD)/gpu/cuda/gpu_bench.o $(CUDA_RUN_OBJ) $(BUILD)/libcore.a
	$(CC) -o $@ $^ $(LDLIBS) $(CUDA_RUN_LIBS) $(BUNDLE_RPATH)

gpu_test_bin: gpu_test
gpu_bench_bin: gpu_bench

else

CUDA_RUN_OBJ :=
CUDA_RUN_LIBS :=
CUDA_CFLAGS :=
GPU_RUN_CUDA_OBJ :=
GPU_RUN_CUDA_LIBS :=

gpu_test_bin gpu_bench_bin:
	@echo "$@: CUDA not found (nvcc, nccl.h or libnccl): nothing to build"

endif
