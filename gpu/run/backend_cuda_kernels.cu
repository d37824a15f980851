/*
 * backend_cuda_kernels.cu - the CUDA backend's own kernels (see
 * backend_cuda.h): conversions, accumulation, per-tensor pack/unpack,
 * AdamW over mixed element types, the emulated fabric's paced traffic.
 *
 * All are memory-bound and simple: grid-stride loops over elements, fp32
 * arithmetic, bf16 rounded to nearest even on store. The emulated
 * collectives are the one exception to "as fast as possible": each CTA
 * paces itself on the GPU's global timer (%globaltimer, ns) so that a
 * step ends no earlier than the emulated link allows, holding its SM the
 * while, as an NCCL channel does.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <climits>

#include "backend_cuda.h"
#include "check.h"

#define THREADS 256
#define MAX_BLOCKS 4096 /* grid-stride loops: enough CTAs to fill any GPU several times */

static unsigned blocks_for(size_t n)
{
	size_t b = (n + THREADS - 1) / THREADS;
	return (unsigned)(b < 1 ? 1 : b > MAX_BLOCKS ? MAX_BLOCKS : b);
}

/* ---- element access ------------------------------------------------------------------ */

static __device__ __forceinline__ float ld(const void *p, size_t i, int bf)
{
	return bf ? __bfloat162float(((const __nv_bfloat16 *)p)[i]) : ((const float *)p)[i];
}

static __device__ __forceinline__ void st_(void *p, size_t i, int bf, float v)
{
	if (bf)
		((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
	else
		((float *)p)[i] = v;
}

static int is_bf16(enum elem e)
{
	cuda_assert(e == ELEM_FP32 || e == ELEM_BF16);
	return e == ELEM_BF16;
}

/* ---- conversions, accumulation, scaling ---------------------------------------------- */

static __global__ void convert_kernel(void *dst, int dbf, const void *src, int sbf, size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		st_(dst, i, dbf, ld(src, i, sbf));
}

void bcu_convert(void *dst, enum elem de, const void *src, enum elem se, size_t n, cudaStream_t st)
{
	if (n == 0)
		return;
	convert_kernel<<<blocks_for(n), THREADS, 0, st>>>(dst, is_bf16(de), src, is_bf16(se), n);
	cudaCheck(cudaGetLastError());
}

static __global__ void accumulate_kernel(void *dst, int dbf, const void *src, int sbf, size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		st_(dst, i, dbf, __fadd_rn(ld(dst, i, dbf), ld(src, i, sbf)));
}

void bcu_accumulate(void *dst, enum elem de, const void *src, enum elem se, size_t n, cudaStream_t st)
{
	if (n == 0)
		return;
	accumulate_kernel<<<blocks_for(n), THREADS, 0, st>>>(dst, is_bf16(de), src, is_bf16(se), n);
	cudaCheck(cudaGetLastError());
}

static __global__ void scale_kernel(void *p, int bf, size_t n, float f)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		st_(p, i, bf, __fmul_rn(ld(p, i, bf), f));
}

void bcu_scale(void *p, size_t n, enum elem e, float f, cudaStream_t st)
{
	if (n == 0)
		return;
	scale_kernel<<<blocks_for(n), THREADS, 0, st>>>(p, is_bf16(e), n, f);
	cudaCheck(cudaGetLastError());
}

/* ---- per-tensor pack and unpack -------------------------------------------------------- */

/*
 * Piece y = rank * count + tensor: that rank's rows of that tensor,
 * contiguous in both layouts. The y dimension strides over the pieces,
 * the x dimension over a piece's elements.
 */
static __global__ void shard_copy_kernel(void *dst, int dbf, const void *src, int sbf, const bcu_tensor *t,
					 int count, int n, size_t shard_elems, int to_flat)
{
	for (int y = blockIdx.y; y < count * n; y += gridDim.y) {
		int r = y / count, k = y % count;
		bcu_tensor x = t[k];
		int64_t first = (int64_t)r * x.rows_per_rank, last = first + x.rows_per_rank;
		if (last > x.rows)
			last = x.rows;
		if (last <= first)
			continue;
		size_t m = (size_t)((last - first) * x.cols);
		size_t flat = (size_t)(x.flat_off + first * x.cols);
		size_t shard = (size_t)r * shard_elems + (size_t)x.shard_off;
		size_t d0 = to_flat ? flat : shard, s0 = to_flat ? shard : flat;
		for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
		     i += (size_t)gridDim.x * blockDim.x)
			st_(dst, d0 + i, dbf, ld(src, s0 + i, sbf));
	}
}

static void shard_copy(void *dst, enum elem de, const void *src, enum elem se, const struct bcu_tensor *t,
		       int count, size_t shard_elems, int n, int64_t most, int to_flat, cudaStream_t st)
{
	if (count == 0 || n == 0)
		return;
	int64_t pieces = (int64_t)count * n, x = (most + THREADS * 16 - 1) / (THREADS * 16);
	cuda_assert(pieces < INT32_MAX);
	dim3 grid((unsigned)(x < 1 ? 1 : x > 64 ? 64 : x), (unsigned)(pieces < 65535 ? pieces : 65535));
	shard_copy_kernel<<<grid, THREADS, 0, st>>>(dst, is_bf16(de), src, is_bf16(se), t, count, n,
						   shard_elems, to_flat);
	cudaCheck(cudaGetLastError());
}

void bcu_unpack(void *flat, const void *gathered, enum elem e, const struct bcu_tensor *t, int count,
		size_t shard_elems, int n, int64_t most, cudaStream_t st)
{
	shard_copy(flat, e, gathered, e, t, count, shard_elems, n, most, 1, st);
}

void bcu_pack(void *packed, enum elem pe, const void *flat, enum elem fe, const struct bcu_tensor *t, int count,
	      size_t shard_elems, int n, int64_t most, cudaStream_t st)
{
	cudaCheck(cudaMemsetAsync(packed, 0, shard_elems * (size_t)n * (pe == ELEM_BF16 ? 2 : 4), st));
	shard_copy(packed, pe, flat, fe, t, count, shard_elems, n, most, 0, st);
}

/* ---- AdamW over any element types ------------------------------------------------------ */

static __global__ void adamw_kernel(void *p, int pbf, const void *g, int gbf, void *m, void *v, int sbf, size_t n,
				    bcu_adam k)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		float gi = __fmul_rn(ld(g, i, gbf), k.gscale);
		float pi = ld(p, i, pbf), mi = ld(m, i, sbf), vi = ld(v, i, sbf);
		/* ref_adamw's expression, in its order */
		mi = __fadd_rn(__fmul_rn(k.b1, mi), __fmul_rn(1.0f - k.b1, gi));
		vi = __fadd_rn(__fmul_rn(k.b2, vi), __fmul_rn(__fmul_rn(1.0f - k.b2, gi), gi));
		float mhat = __fdiv_rn(mi, k.c1), vhat = __fdiv_rn(vi, k.c2);
		float step = __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), k.eps)), __fmul_rn(k.wd, pi));
		st_(p, i, pbf, __fsub_rn(pi, __fmul_rn(k.lr, step)));
		st_(m, i, sbf, mi);
		st_(v, i, sbf, vi);
	}
}

void bcu_adamw(void *p, enum elem pe, const void *g, enum elem ge, void *m, void *v, enum elem se, size_t n,
	       const struct bcu_adam *k, cudaStream_t st)
{
	if (n == 0)
		return;
	adamw_kernel<<<blocks_for(n), THREADS, 0, st>>>(p, is_bf16(pe), g, is_bf16(ge), m, v, is_bf16(se), n, *k);
	cudaCheck(cudaGetLastError());
}

/* ---- the emulated fabric ---------------------------------------------------------------- */

static __device__ __forceinline__ uint64_t gtimer(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* The CTA's slice [lo, hi) of `total` units (16-byte vectors, bytes or elements). */
static __device__ __forceinline__ void cta_slice(uint64_t total, uint64_t *lo, uint64_t *hi)
{
	uint64_t per = (total + gridDim.x - 1) / gridDim.x;
	*lo = per * blockIdx.x;
	*hi = *lo + per < total ? *lo + per : total;
	if (*lo > total)
		*lo = total;
}

/* Thread 0 waits until t0 + deadline; the CTA waits for it. */
static __device__ __forceinline__ void pace(uint64_t t0, double deadline)
{
	__syncthreads();
	if (threadIdx.x == 0)
		while ((double)(gtimer() - t0) < deadline)
			__nanosleep(500);
	__syncthreads();
}

/*
 * The CTA's share of `bytes` from src to dst (which do not overlap). To move
 * as many bytes as the link it emulates, each thread has several loads in
 * flight before it stores: the CTAs' slices are whole 16-byte vectors
 * where both addresses are 16-byte aligned (the last CTA takes the odd
 * tail bytes), and each thread loads UNROLL vectors, then stores them.
 */
#define UNROLL 4
static __device__ __forceinline__ void copy_bytes(char *dst, const char *src, uint64_t bytes)
{
	uint64_t lo, hi, i;
	if ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0) {
		const uint4 *s = (const uint4 *)src;
		uint4 *d = (uint4 *)dst, v[UNROLL];
		uint64_t nvec = bytes / 16, bd = blockDim.x;
		cta_slice(nvec, &lo, &hi);
		for (i = lo + threadIdx.x; i + (UNROLL - 1) * bd < hi; i += UNROLL * bd) {
#pragma unroll
			for (int k = 0; k < UNROLL; k++)
				v[k] = s[i + k * bd];
#pragma unroll
			for (int k = 0; k < UNROLL; k++)
				d[i + k * bd] = v[k];
		}
		for (; i < hi; i += bd)
			d[i] = s[i];
		if (blockIdx.x == gridDim.x - 1)
			for (i = nvec * 16 + threadIdx.x; i < bytes; i += bd)
				dst[i] = src[i];
	} else {
		cta_slice(bytes, &lo, &hi);
		for (i = lo + threadIdx.x; i < hi; i += blockDim.x)
			dst[i] = src[i];
	}
}

static __device__ __forceinline__ uint64_t step_bytes(const bcu_emu &e, int i)
{
	return e.q + ((uint64_t)i < e.r ? 1 : 0);
}

/* A step's time: its bytes over the link, plus the latency (each CTA moves its slice in that time). */
static __device__ __forceinline__ double step_ns(const bcu_emu &e, int i)
{
	return (double)step_bytes(e, i) / e.bytes_per_ns + e.lat_ns;
}

static __global__ void emu_all_gather_kernel(char *out, uint64_t slot, int rank, int n, bcu_emu e)
{
	__shared__ uint64_t t0;
	double deadline = 0;
	if (threadIdx.x == 0)
		t0 = gtimer();
	__syncthreads();
	for (int i = 0; i < e.steps; i++) {
		uint64_t bytes = step_bytes(e, i);
		int dst = (rank + i + 1) % n;
		copy_bytes(out + (uint64_t)dst * slot, out + (uint64_t)rank * slot, bytes < slot ? bytes : slot);
		deadline += step_ns(e, i);
		pace(t0, deadline);
	}
}

void bcu_emu_all_gather(void *out, size_t slot_bytes, int rank, int n, const struct bcu_emu *e, int ctas,
			cudaStream_t st)
{
	if (e->steps == 0)
		return;
	emu_all_gather_kernel<<<(unsigned)ctas, THREADS, 0, st>>>((char *)out, slot_bytes, rank, n, *e);
	cudaCheck(cudaGetLastError());
}

static __device__ __forceinline__ float fold1(float x, float acc, float w, float after)
{
	if (w == 0.0f) {
		/*
		 * acc keeps its value whatever x is (fma(x, 0, acc) would make a
		 * NaN of an infinite x and +0 of -0); the empty asm reads x and
		 * hides acc, so that neither the load of x nor the store of acc
		 * is dropped: the bytes are what the emulation moves
		 */
		asm volatile("" : "+f"(acc) : "f"(x));
		return __fmul_rn(acc, after);
	}
	return __fmul_rn(__fmaf_rn(x, w, acc), after);
}

/* fold1 on each element of a 16-byte vector: 8 bf16 or 4 fp32. */
static __device__ __forceinline__ uint4 fold_vec(uint4 a, uint4 x, int bf, float w, float after)
{
	if (bf) {
		__nv_bfloat16 *pa = (__nv_bfloat16 *)&a;
		const __nv_bfloat16 *px = (const __nv_bfloat16 *)&x;
#pragma unroll
		for (int k = 0; k < 8; k++)
			pa[k] = __float2bfloat16_rn(fold1(__bfloat162float(px[k]), __bfloat162float(pa[k]), w, after));
	} else {
		float *pa = (float *)&a;
		const float *px = (const float *)&x;
#pragma unroll
		for (int k = 0; k < 4; k++)
			pa[k] = fold1(px[k], pa[k], w, after);
	}
	return a;
}

/*
 * acc[j] = fma(x[j], w, acc[j]) over the CTA's share of `elems`, then
 * times `after`: reads both, writes acc. With w = 0 and after = 1 acc
 * keeps its value, bit for bit (fold1), and is read and written all the
 * same. acc's and x's ranges do not overlap. As copy_bytes: whole
 * 16-byte vectors per CTA where both are aligned, UNROLL of them loaded
 * before any is stored; element by element otherwise.
 */
static __device__ __forceinline__ void fold(void *acc, size_t acc0, const void *x, size_t x0, uint64_t elems,
					    int bf, float w, float after)
{
	uint64_t lo, hi, j, bd = blockDim.x;
	int eb = bf ? 2 : 4, per = 16 / eb;
	char *a = (char *)acc + acc0 * eb;
	const char *b = (const char *)x + x0 * eb;
	if ((((uintptr_t)a | (uintptr_t)b) & 15) == 0) {
		uint4 *va = (uint4 *)a, ra[UNROLL], rx[UNROLL];
		const uint4 *vx = (const uint4 *)b;
		uint64_t nvec = elems / per;
		cta_slice(nvec, &lo, &hi);
		for (j = lo + threadIdx.x; j + (UNROLL - 1) * bd < hi; j += UNROLL * bd) {
#pragma unroll
			for (int k = 0; k < UNROLL; k++) {
				ra[k] = va[j + k * bd];
				rx[k] = vx[j + k * bd];
			}
#pragma unroll
			for (int k = 0; k < UNROLL; k++)
				va[j + k * bd] = fold_vec(ra[k], rx[k], bf, w, after);
		}
		for (; j < hi; j += bd)
			va[j] = fold_vec(va[j], vx[j], bf, w, after);
		if (blockIdx.x == gridDim.x - 1)
			for (j = nvec * per + threadIdx.x; j < elems; j += bd)
				st_(a, j, bf, fold1(ld(b, j, bf), ld(a, j, bf), w, after));
	} else {
		cta_slice(elems, &lo, &hi);
		for (j = lo + threadIdx.x; j < hi; j += bd)
			st_(a, j, bf, fold1(ld(b, j, bf), ld(a, j, bf), w, after));
	}
}

static __global__ void emu_reduce_scatter_kernel(void *out, const void *in, uint64_t count, int bf, int rank,
						 int n, bcu_emu e)
{
	__shared__ uint64_t t0;
	double deadline = 0;
	int eb = bf ? 2 : 4;
	if (threadIdx.x == 0)
		t0 = gtimer();
	__syncthreads();
	for (int i = 0; i < e.steps; i++) {
		uint64_t elems = step_bytes(e, i) / (uint64_t)eb;
		int c = (rank + i + 1) % n;
		fold(out, 0, in, (size_t)c * count, elems < count ? elems : count, bf, 1.0f,
		     i + 1 == e.steps ? 1.0f / (float)n : 1.0f);
		deadline += step_ns(e, i);
		pace(t0, deadline);
	}
}

void bcu_emu_reduce_scatter(void *out, const void *in, size_t count, enum elem e, int rank, int n,
			    const struct bcu_emu *p, int ctas, cudaStream_t st)
{
	if (p->steps == 0)
		return;
	emu_reduce_scatter_kernel<<<(unsigned)ctas, THREADS, 0, st>>>(out, in, count, is_bf16(e), rank, n, *p);
	cudaCheck(cudaGetLastError());
}

static __global__ void emu_all_reduce_kernel(void *buf, uint64_t count, int bf, int n, bcu_emu e)
{
	__shared__ uint64_t t0;
	double deadline = 0;
	int eb = bf ? 2 : 4;
	uint64_t chunk = (count + n - 1) / n;
	if (threadIdx.x == 0)
		t0 = gtimer();
	__syncthreads();
	for (int i = 0; i < e.steps; i++) {
		uint64_t elems = step_bytes(e, i) / (uint64_t)eb;
		uint64_t a = (uint64_t)(i % n) * chunk, b = (uint64_t)((i + 1) % n) * chunk;
		uint64_t top = a > b ? a : b, room = top < count ? count - top : 0;
		if (elems > chunk)
			elems = chunk;
		if (elems > room)
			elems = room;
		fold(buf, (size_t)a, buf, (size_t)b, elems, bf, 0.0f, 1.0f);
		deadline += step_ns(e, i);
		pace(t0, deadline);
	}
}

void bcu_emu_all_reduce(void *buf, size_t count, enum elem e, int n, const struct bcu_emu *p, int ctas,
			cudaStream_t st)
{
	if (p->steps == 0)
		return;
	emu_all_reduce_kernel<<<(unsigned)ctas, THREADS, 0, st>>>(buf, count, is_bf16(e), n, *p);
	cudaCheck(cudaGetLastError());
}

static __global__ void stamp_kernel(uint64_t *t0)
{
	*t0 = gtimer();
}

static __global__ void wait_kernel(const uint64_t *t0, double ns)
{
	uint64_t start = *t0;
	while ((double)(gtimer() - start) < ns)
		__nanosleep(500);
}

void bcu_emu_stamp(uint64_t *t0, cudaStream_t st)
{
	stamp_kernel<<<1, 1, 0, st>>>(t0);
	cudaCheck(cudaGetLastError());
}

void bcu_emu_wait(const uint64_t *t0, double ns, cudaStream_t st)
{
	wait_kernel<<<1, 32, 0, st>>>(t0, ns);
	cudaCheck(cudaGetLastError());
}

/* ---- the calibration's gate -------------------------------------------------------------- */

static __global__ void gate_kernel(const volatile uint32_t *flag, uint64_t timeout_ns, volatile uint32_t *timeouts)
{
	uint64_t start = gtimer();
	while (*flag == 0) {
		if (gtimer() - start >= timeout_ns) {
			if (timeouts) {
				*timeouts = *timeouts + 1; /* read at the next sync, when no gate runs */
				__threadfence_system();
			}
			return;
		}
		__nanosleep(1000);
	}
}

void bcu_gate(const uint32_t *flag, uint64_t timeout_ns, uint32_t *timeouts, cudaStream_t st)
{
	gate_kernel<<<1, 1, 0, st>>>(flag, timeout_ns, timeouts);
	cudaCheck(cudaGetLastError());
}
