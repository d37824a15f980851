/*
 * check.h - check macros for failed library calls (CUDA runtime, cuBLAS /
 * cuBLASLt, NCCL): print the call, file:line and the library's own error
 * string, then end the job through the abort hook (MPI_Abort in gpu_run,
 * abort() otherwise). Usable from C and from CUDA C++.
 *
 *   cudaCheck(cudaMalloc(&p, bytes));
 *   cublasCheck(cublasLtMatmul(...));
 *   ncclCheck(ncclAllGather(...));
 *   cudaCheck(cudaGetLastError());   after a kernel launch
 *
 * Broken invariants (bugs) are not library failures: they use
 * cuda_assert(), which is on in release builds too.
 */
#ifndef GPU_CUDA_CHECK_H
#define GPU_CUDA_CHECK_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Called after the message is printed; it must not return. The default
 * calls abort(). gpu_run installs one that calls MPI_Abort so that every
 * rank of the job ends, not just this one.
 */
typedef void (*cuda_abort_fn)(int code);
void cuda_set_abort(cuda_abort_fn fn);

/* Print "file:line: lib error in `call`: what" and call the abort hook. */
void cuda_fail(const char *lib, const char *call, const char *what, const char *file, int line);

static inline void cuda_check_rt(cudaError_t e, const char *call, const char *file, int line)
{
	if (e != cudaSuccess)
		cuda_fail("CUDA", call, cudaGetErrorString(e), file, line);
}

static inline void cuda_check_blas(cublasStatus_t s, const char *call, const char *file, int line)
{
	if (s != CUBLAS_STATUS_SUCCESS)
		cuda_fail("cuBLAS", call, cublasLtGetStatusString(s), file, line);
}

static inline void cuda_check_nccl(ncclResult_t r, const char *call, const char *file, int line)
{
	if (r != ncclSuccess && r != ncclInProgress)
		cuda_fail("NCCL", call, ncclGetErrorString(r), file, line);
}

#define cudaCheck(call) cuda_check_rt((call), #call, __FILE__, __LINE__)
#define cublasCheck(call) cuda_check_blas((call), #call, __FILE__, __LINE__)
#define ncclCheck(call) cuda_check_nccl((call), #call, __FILE__, __LINE__)

/* A broken invariant: message with file:line, then the abort hook. */
#define cuda_assert(cond)                                                                   \
	((cond) ? (void)0 : cuda_fail("invariant", #cond, "assertion failed", __FILE__, __LINE__))

#ifdef __cplusplus
}
#endif

#endif
