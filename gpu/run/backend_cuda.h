/*
 * backend_cuda.h - the kernels of the CUDA backend (backend_cuda_kernels.cu)
 * that are not the model's: conversions, accumulation, per-tensor
 * pack/unpack, AdamW over mixed element types, and the emulated fabric's
 * traffic. C-callable; only backend_cuda.c includes it.
 *
 * Every launcher enqueues on the stream it is given and returns; pointers
 * may be device memory or pinned host memory (unified addressing), so a
 * conversion can read or write the host directly. Element types are
 * enum elem's ELEM_FP32 and ELEM_BF16 (bf16 rounded to nearest even).
 */
#ifndef GPU_RUN_BACKEND_CUDA_H
#define GPU_RUN_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "schedule.h" /* enum elem */

/* dst (n, de) = src (n, se), converted. */
void bcu_convert(void *dst, enum elem de, const void *src, enum elem se, size_t n, cudaStream_t st);
/* dst (type de) += src (type se), n elements, added in fp32 and rounded once to de. */
void bcu_accumulate(void *dst, enum elem de, const void *src, enum elem se, size_t n, cudaStream_t st);
/* p *= f, n elements of type e. */
void bcu_scale(void *p, size_t n, enum elem e, float f, cudaStream_t st);

/* One tensor of a unit for the pack kernels (gpu/run/layout.h's fields, elements). */
struct bcu_tensor {
	int64_t flat_off, shard_off, rows, cols, rows_per_rank;
};

/*
 * Per-tensor shards (FSDP2's layout), tensors t (device memory, count of
 * them) of one unit, shards of shard_elems elements, n ranks; most: the
 * largest rows_per_rank * cols. unpack: flat (type e) from the n shards
 * one after the other; pack: the n shards (type pe, pads zeroed) from flat
 * (type fe), converted.
 */
void bcu_unpack(void *flat, const void *gathered, enum elem e, const struct bcu_tensor *t, int count,
		size_t shard_elems, int n, int64_t most, cudaStream_t st);
void bcu_pack(void *packed, enum elem pe, const void *flat, enum elem fe, const struct bcu_tensor *t, int count,
	      size_t shard_elems, int n, int64_t most, cudaStream_t st);

/*
 * AdamW over one flat range whose parameters, gradient and moments may be
 * fp32 or bf16 (pure-bf16 training, a bf16 reduce dtype): ref_adamw's
 * arithmetic in fp32, one IEEE rounding at a time, the gradient first
 * scaled by gscale (the mean over microbatches); results rounded to their
 * buffers' types. c1, c2 = 1 - beta^t.
 */
struct bcu_adam {
	float lr, b1, b2, eps, wd, c1, c2, gscale;
};
void bcu_adamw(void *p, enum elem pe, const void *g, enum elem ge, void *m, void *v, enum elem se, size_t n,
	       const struct bcu_adam *k, cudaStream_t st);

/*
 * The emulated fabric (gpu/run/comm.h): one collective's ring, step i
 * moving q + (i < r) bytes, each step ending no earlier than its bytes
 * over bytes_per_ns plus lat_ns after the previous (a CTA's own clock:
 * each of the ctas CTAs moves its slice of every step at bytes_per_ns /
 * ctas, as NCCL's channels share a link).
 */
struct bcu_emu {
	int steps, reduce_steps;
	uint64_t q, r;
	double bytes_per_ns, lat_ns;
};
/* out holds n slots of slot_bytes, slot `rank` filled: step i copies it to slot (rank + i + 1) % n. */
void bcu_emu_all_gather(void *out, size_t slot_bytes, int rank, int n, const struct bcu_emu *e, int ctas,
			cudaStream_t st);
/*
 * out (count, type e) holds this rank's chunk of in already: each step
 * adds another chunk of in (fp32 arithmetic, one rounding per step), the
 * last one then divides by n: out = the mean of in's n chunks.
 */
void bcu_emu_reduce_scatter(void *out, const void *in, size_t count, enum elem e, int rank, int n,
			    const struct bcu_emu *p, int ctas, cudaStream_t st);
/* buf (count, type e), in place: each step reads two chunks and writes one, unchanged. */
void bcu_emu_all_reduce(void *buf, size_t count, enum elem e, int n, const struct bcu_emu *p, int ctas,
			cudaStream_t st);
/* The copy engine's pacing: t0 (device word) = the GPU's clock; then wait (one warp) until t0 + ns. */
void bcu_emu_stamp(uint64_t *t0, cudaStream_t st);
void bcu_emu_wait(const uint64_t *t0, double ns, cudaStream_t st);
/*
 * The calibration's gate (gpu/run/calibrate.c): one thread waits until the
 * word *flag (mapped host memory, set by the host) is not 0, or until
 * timeout_ns have passed; then it adds 1 to *timeouts (mapped host memory,
 * NULL: none). A gate that cannot open turns into a late measurement, not
 * a hang.
 */
void bcu_gate(const uint32_t *flag, uint64_t timeout_ns, uint32_t *timeouts, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
