/*
 * attention.cu - fused causal grouped-query attention, forward and
 * backward, flash-attention-2 style on bf16 tensor cores (mma.sync
 * m16n8k16, fp32 accumulation), for head dims 16, 32, 64 and 128.
 *
 * Nothing of size T x T exists: the forward streams key/value tiles past a
 * tile of queries held in registers, keeping a running row max and row sum
 * (online softmax), and stores the output and the log-sum-exp of each row
 * (lse, fp32). The backward recomputes the probabilities of each
 * (key tile, query tile) pair from lse and never stores them either.
 *
 * Forward: a CTA of 8 warps owns BR = 128 query rows of one (batch, head);
 *   each warp owns 16 rows. Key/value tiles of BC = 64 rows are double
 *   buffered in shared memory by cp.async, so the next tile loads while
 *   this one is multiplied. Per tile and warp: S = Q K^T (16 x 64), mask
 *   on the diagonal tile, online softmax in registers, O += P V with P
 *   converted register-to-register from the S accumulators into the A
 *   operand layout. The grid runs the longest query tiles (the bottom of
 *   the causal triangle) first so the last wave is short.
 *
 * Backward: a CTA of 8 warps owns BC = 128 key/value rows of one (batch,
 *   kv head) and walks every query tile (BR = 64 rows) of every query head
 *   of the group that can see them, so dK and dV of the tile sum over the
 *   group in registers and are written once, without atomics. Per query
 *   tile each warp computes for its 16 key rows S^T = K Q^T, P^T, dP^T =
 *   V dO^T, dS^T = P^T (dP^T - delta), dV += P^T dO, dK += dS^T Q; dS goes
 *   through shared memory so that dQ = dS K can be formed per query row
 *   and added to an fp32 accumulator with atomics (FA2's scheme). A
 *   pre-pass computes delta = rowsum(dO * O); a post-pass scales dQ and
 *   converts it to bf16 into dqkv.
 *
 * Shared-memory rows are padded by 16 bytes so that the eight 16-byte rows
 * one ldmatrix reads fall in distinct banks.
 */
#include <math.h>
#include <stdio.h>

#include "internal.h"

#define LOG2E 1.4426950408889634f

/* ---- PTX wrappers ----------------------------------------------------------------- */

static __device__ __forceinline__ uint32_t smem_addr(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, zero-filled when !pred (src must still be a valid address). */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, bool pred)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
		     "l"(src), "r"(pred ? 16 : 0));
}

static __device__ __forceinline__ void cp_async4(void *dst, const void *src, bool pred)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)),
		     "l"(src), "r"(pred ? 4 : 0));
}

static __device__ __forceinline__ void cp_async_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::);
}

static __device__ __forceinline__ void cp_async_wait_all(void)
{
	asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* Four 8x8 b16 matrices; lane l gives the row address of matrix l / 8. */
static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], const bf16 *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(smem_addr(p)));
}

static __device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const bf16 *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(smem_addr(p)));
}

/* c (16x8 fp32) += a (16x16 bf16, row) b (16x8 bf16, col). */
static __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0,
						uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* p[0] += a, p[1] += b; one 8-byte vector atomic on Hopper (p 8-byte aligned). */
static __device__ __forceinline__ void atomic_add2(float *p, float a, float b)
{
#if __CUDA_ARCH__ >= 900
	atomicAdd((float2 *)p, make_float2(a, b));
#else
	atomicAdd(p, a);
	atomicAdd(p + 1, b);
#endif
}

/* Two floats as a bf16 pair, the lower column in the low half. */
static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	return *(uint32_t *)&v;
}

/*
 * Fragment addressing (PTX ISA, mma.m16n8k16 and ldmatrix), lane = 4 g + t:
 *   A 16x16 row-major at (r0, c0):  ldsm_x4 at row r0 + (lane & 15), col c0 + (lane >> 4) 8.
 *   B 16x8 pairs from a matrix stored (n, k), two n tiles n0, n0+8, k0..k0+15:
 *       ldsm_x4 at row n0 + (lane & 7) + (lane >> 4) 8, col k0 + ((lane >> 3) & 1) 8
 *       -> r0, r1 = b0, b1 of n tile 0; r2, r3 of n tile 1.
 *   B from a matrix stored (k, n) (k0..k0+15, n tiles n0, n0+8):
 *       ldsm_x4_t at row k0 + (lane & 15), col n0 + (lane >> 4) 8, same outputs.
 *   C 16x8: c0, c1 at (g, 2t + 0/1); c2, c3 at (g + 8, 2t + 0/1).
 * Two C tiles side by side (columns 0-7 and 8-15) are, packed to bf16, the
 * A fragment of a 16x16 tile: {pack(c0,c1) tile0, pack(c2,c3) tile0,
 * pack(c0,c1) tile1, pack(c2,c3) tile1}.
 */
static __device__ __forceinline__ int a_row(int lane) { return lane & 15; }
static __device__ __forceinline__ int a_col(int lane) { return (lane >> 4) * 8; }
static __device__ __forceinline__ int bn_row(int lane) { return (lane & 7) + (lane >> 4) * 8; }
static __device__ __forceinline__ int bn_col(int lane) { return ((lane >> 3) & 1) * 8; }

/* ---- forward ------------------------------------------------------------------------- */

template <int HD> struct fwd_cfg {
	static constexpr int WARPS = 8;
	static constexpr int THREADS = WARPS * 32;
	static constexpr int BR = 16 * WARPS; /* query rows per CTA */
	static constexpr int BC = 64;         /* key rows per tile */
	static constexpr int P = HD + 8;      /* padded smem row, elements */
	static constexpr size_t SMEM = (size_t)(BR + 4 * BC) * P * sizeof(bf16);
};

template <int HD>
static __global__ void __launch_bounds__(fwd_cfg<HD>::THREADS, 1)
attn_fwd_kernel(bf16 *out, float *lse, const bf16 *qkv, int T, int H, int KV, float scale)
{
	using C = fwd_cfg<HD>;
	constexpr int BR = C::BR, BC = C::BC, P = C::P, CH = HD / 8;
	extern __shared__ __align__(16) unsigned char smem_raw[];
	bf16 *sQ = (bf16 *)smem_raw;   /* [BR][P] */
	bf16 *sK = sQ + BR * P;        /* [2][BC][P] */
	bf16 *sV = sK + 2 * BC * P;    /* [2][BC][P] */

	const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
	const int gq = lane >> 2, tq = lane & 3;
	const int b = blockIdx.x / H, h = blockIdx.x % H, g = h / (H / KV);
	const int q0 = (gridDim.y - 1 - blockIdx.y) * BR; /* longest tiles first */
	const int64_t ld = (int64_t)(H + 2 * KV) * HD;
	const bf16 *base = qkv + (int64_t)b * T * ld;
	const bf16 *qg = base + h * HD, *kg = base + (H + g) * HD, *vg = base + (H + KV + g) * HD;

	for (int i = tid; i < BR * CH; i += C::THREADS) {
		int r = i / CH, c = (i % CH) * 8, t = q0 + r;
		cp_async16(sQ + r * P + c, qg + (int64_t)min(t, T - 1) * ld + c, t < T);
	}
	auto load_kv = [&](int stage, int tile) {
		for (int i = tid; i < BC * CH; i += C::THREADS) {
			int r = i / CH, c = (i % CH) * 8, t = tile * BC + r;
			int64_t off = (int64_t)min(t, T - 1) * ld + c;
			cp_async16(sK + (stage * BC + r) * P + c, kg + off, t < T);
			cp_async16(sV + (stage * BC + r) * P + c, vg + off, t < T);
		}
	};
	load_kv(0, 0);
	cp_async_commit();

	const int ntiles = (min(q0 + BR, T) - 1) / BC + 1;
	const int wrow = q0 + warp * 16;           /* the warp's first query row */
	const int row0 = wrow + gq, row1 = row0 + 8; /* this thread's two rows */
	const float sl2 = scale * LOG2E;
	uint32_t qf[HD / 16][4];
	float o[HD / 8][4];
#pragma unroll
	for (int i = 0; i < HD / 8; i++)
		o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

	for (int j = 0; j < ntiles; j++) {
		cp_async_wait_all();
		__syncthreads(); /* tile j landed; everyone is done with tile j - 1's stage */
		if (j == 0) {
#pragma unroll
			for (int kk = 0; kk < HD / 16; kk++)
				ldsm_x4(qf[kk], sQ + (warp * 16 + a_row(lane)) * P + kk * 16 + a_col(lane));
		}
		if (j + 1 < ntiles)
			load_kv((j + 1) & 1, j + 1);
		cp_async_commit();

		const int k0 = j * BC;
		if (k0 > wrow + 15)
			continue; /* the whole tile is above this warp's diagonal */
		const bf16 *ks = sK + (j & 1) * BC * P, *vs = sV + (j & 1) * BC * P;

		float s[BC / 8][4];
#pragma unroll
		for (int i = 0; i < BC / 8; i++)
			s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < HD / 16; kk++) {
#pragma unroll
			for (int np = 0; np < BC / 16; np++) {
				uint32_t bfr[4];
				ldsm_x4(bfr, ks + (np * 16 + bn_row(lane)) * P + kk * 16 + bn_col(lane));
				mma16816(s[2 * np], qf[kk], bfr[0], bfr[1]);
				mma16816(s[2 * np + 1], qf[kk], bfr[2], bfr[3]);
			}
		}
		if (k0 + BC - 1 > wrow || k0 + BC > T) {
#pragma unroll
			for (int nt = 0; nt < BC / 8; nt++) {
#pragma unroll
				for (int e = 0; e < 4; e++) {
					int col = k0 + nt * 8 + tq * 2 + (e & 1);
					int row = e < 2 ? row0 : row1;
					if (col > row || col >= T)
						s[nt][e] = -INFINITY;
				}
			}
		}

		/* online softmax; the 4 lanes of a quad share a row */
		float mx0 = m0, mx1 = m1;
#pragma unroll
		for (int nt = 0; nt < BC / 8; nt++) {
			mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
			mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
		}
#pragma unroll
		for (int off = 1; off <= 2; off *= 2) {
			mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
			mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
		}
		const float ms0 = mx0 == -INFINITY ? 0.0f : mx0 * sl2;
		const float ms1 = mx1 == -INFINITY ? 0.0f : mx1 * sl2;
		const float c0 = exp2f(m0 * sl2 - ms0), c1 = exp2f(m1 * sl2 - ms1);
		m0 = mx0;
		m1 = mx1;
		float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
		for (int nt = 0; nt < BC / 8; nt++) {
			s[nt][0] = exp2f(fmaf(s[nt][0], sl2, -ms0));
			s[nt][1] = exp2f(fmaf(s[nt][1], sl2, -ms0));
			s[nt][2] = exp2f(fmaf(s[nt][2], sl2, -ms1));
			s[nt][3] = exp2f(fmaf(s[nt][3], sl2, -ms1));
			rs0 += s[nt][0] + s[nt][1];
			rs1 += s[nt][2] + s[nt][3];
		}
		l0 = l0 * c0 + rs0;
		l1 = l1 * c1 + rs1;
#pragma unroll
		for (int dt = 0; dt < HD / 8; dt++) {
			o[dt][0] *= c0;
			o[dt][1] *= c0;
			o[dt][2] *= c1;
			o[dt][3] *= c1;
		}

		/* O += P V */
#pragma unroll
		for (int kc = 0; kc < BC / 16; kc++) {
			uint32_t a[4] = {
				pack_bf16(s[2 * kc][0], s[2 * kc][1]),
				pack_bf16(s[2 * kc][2], s[2 * kc][3]),
				pack_bf16(s[2 * kc + 1][0], s[2 * kc + 1][1]),
				pack_bf16(s[2 * kc + 1][2], s[2 * kc + 1][3]),
			};
#pragma unroll
			for (int dp = 0; dp < HD / 16; dp++) {
				uint32_t bfr[4];
				ldsm_x4_t(bfr, vs + (kc * 16 + a_row(lane)) * P + dp * 16 + a_col(lane));
				mma16816(o[2 * dp], a, bfr[0], bfr[1]);
				mma16816(o[2 * dp + 1], a, bfr[2], bfr[3]);
			}
		}
	}

#pragma unroll
	for (int off = 1; off <= 2; off *= 2) {
		l0 += __shfl_xor_sync(0xffffffffu, l0, off);
		l1 += __shfl_xor_sync(0xffffffffu, l1, off);
	}
	const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
	const int64_t orow = (int64_t)H * HD;
	bf16 *ob = out + (int64_t)b * T * orow + h * HD + tq * 2;
#pragma unroll
	for (int dt = 0; dt < HD / 8; dt++) {
		if (row0 < T)
			*(uint32_t *)(ob + row0 * orow + dt * 8) = pack_bf16(o[dt][0] * inv0, o[dt][1] * inv0);
		if (row1 < T)
			*(uint32_t *)(ob + row1 * orow + dt * 8) = pack_bf16(o[dt][2] * inv1, o[dt][3] * inv1);
	}
	if (tq == 0) {
		float *lr = lse + ((int64_t)b * H + h) * T;
		if (row0 < T)
			lr[row0] = m0 * scale + logf(l0);
		if (row1 < T)
			lr[row1] = m1 * scale + logf(l1);
	}
}

/* ---- backward ------------------------------------------------------------------------- */

template <int HD> struct bwd_cfg {
	static constexpr int WARPS = 8;
	static constexpr int THREADS = WARPS * 32;
	static constexpr int BC = 16 * WARPS;  /* key rows per CTA */
	static constexpr int BR = 64;          /* query rows per step */
	static constexpr int P = HD + 8;       /* padded row of K, V, Q, dO tiles */
	static constexpr int PS = BR + 8;      /* padded row of dS^T */
	static constexpr int DQ_SPLIT = HD >= 32 ? 2 : 1; /* warps sharing a dQ row block */
	static constexpr size_t SMEM = (size_t)(2 * BC + 4 * BR) * P * sizeof(bf16)
				       + (size_t)BC * PS * sizeof(bf16) + 4 * BR * sizeof(float);
};

/* delta (B, H, T) = rowsum(dO * O) per head, fp32. */
static __global__ void attn_delta_kernel(float *delta, const bf16 *dout, const bf16 *out, int N,
					 int T, int H, int HD)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; /* (n, h) */
	if (i >= (int64_t)N * H)
		return;
	int n = (int)(i / H), h = (int)(i % H);
	const bf16 *d = dout + i * HD, *o = out + i * HD;
	float s = 0.0f;
	for (int c = 0; c < HD; c += 8) {
		uint4 dr = *(const uint4 *)(d + c), orw = *(const uint4 *)(o + c);
		const __nv_bfloat162 *dv = (const __nv_bfloat162 *)&dr;
		const __nv_bfloat162 *ov = (const __nv_bfloat162 *)&orw;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			float2 a = __bfloat1622float2(dv[j]), bb = __bfloat1622float2(ov[j]);
			s += a.x * bb.x + a.y * bb.y;
		}
	}
	int b = n / T, t = n % T;
	delta[((int64_t)b * H + h) * T + t] = s;
}

/* dqkv's query part (bf16) = scale * dq accumulator (N, H HD). */
static __global__ void attn_dq_kernel(bf16 *dqkv, const float *dq, int N, int H, int KV, int HD,
				      float scale)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; /* 8-vector index */
	int per_row = H * HD / 8;
	if (i >= (int64_t)N * per_row)
		return;
	int64_t n = i / per_row;
	int c = (int)(i % per_row) * 8;
	const float4 *src = (const float4 *)(dq + n * H * HD + c);
	float4 a = src[0], bb = src[1];
	uint4 raw;
	raw.x = pack_bf16(a.x * scale, a.y * scale);
	raw.y = pack_bf16(a.z * scale, a.w * scale);
	raw.z = pack_bf16(bb.x * scale, bb.y * scale);
	raw.w = pack_bf16(bb.z * scale, bb.w * scale);
	*(uint4 *)(dqkv + n * (int64_t)(H + 2 * KV) * HD + c) = raw;
}

template <int HD>
static __global__ void __launch_bounds__(bwd_cfg<HD>::THREADS, 1)
attn_bwd_kernel(bf16 *dqkv, float *dq, const bf16 *dout, const bf16 *qkv, const float *lse,
		const float *delta, int T, int H, int KV, float scale)
{
	using C = bwd_cfg<HD>;
	constexpr int BR = C::BR, BC = C::BC, P = C::P, PS = C::PS, CH = HD / 8;
	extern __shared__ __align__(16) unsigned char smem_raw[];
	bf16 *sK = (bf16 *)smem_raw;     /* [BC][P] */
	bf16 *sV = sK + BC * P;          /* [BC][P] */
	bf16 *sQ = sV + BC * P;          /* [2][BR][P] */
	bf16 *sdO = sQ + 2 * BR * P;     /* [2][BR][P] */
	bf16 *sdS = sdO + 2 * BR * P;    /* [BC][PS], dS^T */
	float *sL = (float *)(sdS + BC * PS); /* [2][BR] lse */
	float *sD = sL + 2 * BR;              /* [2][BR] delta */

	const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
	const int gq = lane >> 2, tq = lane & 3;
	const int b = blockIdx.x / KV, g = blockIdx.x % KV, group = H / KV;
	const int k0 = blockIdx.y * BC; /* key tile 0, the longest, first */
	const int64_t ld = (int64_t)(H + 2 * KV) * HD, dld = (int64_t)H * HD;
	const bf16 *base = qkv + (int64_t)b * T * ld;
	const bf16 *kg = base + (H + g) * HD, *vg = base + (H + KV + g) * HD;

	for (int i = tid; i < BC * CH; i += C::THREADS) {
		int r = i / CH, c = (i % CH) * 8, t = k0 + r;
		int64_t off = (int64_t)min(t, T - 1) * ld + c;
		cp_async16(sK + r * P + c, kg + off, t < T);
		cp_async16(sV + r * P + c, vg + off, t < T);
	}

	const int nq = (T + BR - 1) / BR, i0 = k0 / BR, per_head = nq - i0;
	const int niter = group * per_head;
	auto load_q = [&](int stage, int it) {
		int h = g * group + it / per_head, qs = (i0 + it % per_head) * BR;
		const bf16 *qg = base + h * HD;
		const bf16 *dg = dout + (int64_t)b * T * dld + h * HD;
		for (int i = tid; i < BR * CH; i += C::THREADS) {
			int r = i / CH, c = (i % CH) * 8, t = qs + r, tt = min(t, T - 1);
			cp_async16(sQ + (stage * BR + r) * P + c, qg + (int64_t)tt * ld + c, t < T);
			cp_async16(sdO + (stage * BR + r) * P + c, dg + (int64_t)tt * dld + c, t < T);
		}
		if (tid < 2 * BR) {
			int r = tid % BR, t = qs + r;
			const float *src = (tid < BR ? lse : delta) + ((int64_t)b * H + h) * T + min(t, T - 1);
			float *dst = (tid < BR ? sL : sD) + stage * BR + r;
			cp_async4(dst, src, t < T);
		}
	};
	load_q(0, 0);
	cp_async_commit();

	const float sl2 = scale * LOG2E;
	const int krow0 = k0 + warp * 16 + gq, krow1 = krow0 + 8; /* this thread's key rows */
	float dk[HD / 8][4], dv[HD / 8][4];
#pragma unroll
	for (int i = 0; i < HD / 8; i++) {
		dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = 0.0f;
		dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.0f;
	}

	for (int it = 0; it < niter; it++) {
		cp_async_wait_all();
		__syncthreads(); /* step it landed; step it - 1 is finished, dS^T included */
		if (it + 1 < niter)
			load_q((it + 1) & 1, it + 1);
		cp_async_commit();

		const int st = it & 1;
		const int h = g * group + it / per_head, qs = (i0 + it % per_head) * BR;
		const bf16 *qs_s = sQ + st * BR * P, *dos = sdO + st * BR * P;
		const float *ls = sL + st * BR, *ds = sD + st * BR;

		/* S^T = K Q^T and dP^T = V dO^T for this warp's 16 key rows */
		float s[BR / 8][4], dp[BR / 8][4];
#pragma unroll
		for (int i = 0; i < BR / 8; i++) {
			s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
			dp[i][0] = dp[i][1] = dp[i][2] = dp[i][3] = 0.0f;
		}
#pragma unroll
		for (int kk = 0; kk < HD / 16; kk++) {
			uint32_t ka[4], va[4];
			ldsm_x4(ka, sK + (warp * 16 + a_row(lane)) * P + kk * 16 + a_col(lane));
			ldsm_x4(va, sV + (warp * 16 + a_row(lane)) * P + kk * 16 + a_col(lane));
#pragma unroll
			for (int np = 0; np < BR / 16; np++) {
				uint32_t bq[4], bo[4];
				ldsm_x4(bq, qs_s + (np * 16 + bn_row(lane)) * P + kk * 16 + bn_col(lane));
				ldsm_x4(bo, dos + (np * 16 + bn_row(lane)) * P + kk * 16 + bn_col(lane));
				mma16816(s[2 * np], ka, bq[0], bq[1]);
				mma16816(s[2 * np + 1], ka, bq[2], bq[3]);
				mma16816(dp[2 * np], va, bo[0], bo[1]);
				mma16816(dp[2 * np + 1], va, bo[2], bo[3]);
			}
		}

		/* P^T (masked: query before key, or past T), dS^T = P^T (dP^T - delta) */
		const bool edge = qs < k0 + BC || qs + BR > T;
#pragma unroll
		for (int nt = 0; nt < BR / 8; nt++) {
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int qc = nt * 8 + tq * 2 + (e & 1), q = qs + qc;
				int krow = e < 2 ? krow0 : krow1;
				float p = exp2f(fmaf(s[nt][e], sl2, -ls[qc] * LOG2E));
				if (edge && (q < krow || q >= T))
					p = 0.0f;
				s[nt][e] = p;
				dp[nt][e] = p * (dp[nt][e] - ds[qc]);
			}
		}

		/* dV += P^T dO, dK += dS^T Q (k = the query dim) */
#pragma unroll
		for (int kc = 0; kc < BR / 16; kc++) {
			uint32_t pa[4] = {
				pack_bf16(s[2 * kc][0], s[2 * kc][1]),
				pack_bf16(s[2 * kc][2], s[2 * kc][3]),
				pack_bf16(s[2 * kc + 1][0], s[2 * kc + 1][1]),
				pack_bf16(s[2 * kc + 1][2], s[2 * kc + 1][3]),
			};
			uint32_t sa[4] = {
				pack_bf16(dp[2 * kc][0], dp[2 * kc][1]),
				pack_bf16(dp[2 * kc][2], dp[2 * kc][3]),
				pack_bf16(dp[2 * kc + 1][0], dp[2 * kc + 1][1]),
				pack_bf16(dp[2 * kc + 1][2], dp[2 * kc + 1][3]),
			};
#pragma unroll
			for (int dq2 = 0; dq2 < HD / 16; dq2++) {
				uint32_t bo[4], bq[4];
				ldsm_x4_t(bo, dos + (kc * 16 + a_row(lane)) * P + dq2 * 16 + a_col(lane));
				ldsm_x4_t(bq, qs_s + (kc * 16 + a_row(lane)) * P + dq2 * 16 + a_col(lane));
				mma16816(dv[2 * dq2], pa, bo[0], bo[1]);
				mma16816(dv[2 * dq2 + 1], pa, bo[2], bo[3]);
				mma16816(dk[2 * dq2], sa, bq[0], bq[1]);
				mma16816(dk[2 * dq2 + 1], sa, bq[2], bq[3]);
			}
			/* dS^T rows of this warp, for dQ */
			bf16 *row0p = sdS + (warp * 16 + gq) * PS + kc * 16 + tq * 2;
			bf16 *row1p = row0p + 8 * PS;
			*(uint32_t *)row0p = sa[0];
			*(uint32_t *)row1p = sa[1];
			*(uint32_t *)(row0p + 8) = sa[2];
			*(uint32_t *)(row1p + 8) = sa[3];
		}
		__syncthreads(); /* dS^T complete */

		/* dQ (BR x HD) += dS (BR x BC) K (BC x HD): warp -> 16 query rows x HD/DQ_SPLIT cols */
		constexpr int DW = HD / C::DQ_SPLIT;
		const int qr = (warp % 4) * 16, dc0 = (warp / 4) * DW;
		if (warp / 4 < C::DQ_SPLIT) {
			float acc[DW / 8][4];
#pragma unroll
			for (int i = 0; i < DW / 8; i++)
				acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
#pragma unroll
			for (int kc = 0; kc < BC / 16; kc++) {
				uint32_t a[4], bk[4];
				ldsm_x4_t(a, sdS + (kc * 16 + bn_row(lane)) * PS + qr + bn_col(lane));
#pragma unroll
				for (int dp2 = 0; dp2 < DW / 16; dp2++) {
					ldsm_x4_t(bk, sK + (kc * 16 + a_row(lane)) * P + dc0 + dp2 * 16 + a_col(lane));
					mma16816(acc[2 * dp2], a, bk[0], bk[1]);
					mma16816(acc[2 * dp2 + 1], a, bk[2], bk[3]);
				}
			}
			const int q0r = qs + qr + gq, q1r = q0r + 8;
			float *dqb = dq + (int64_t)b * T * dld + h * HD + dc0 + tq * 2;
#pragma unroll
			for (int dt = 0; dt < DW / 8; dt++) {
				if (q0r < T)
					atomic_add2(dqb + q0r * dld + dt * 8, acc[dt][0], acc[dt][1]);
				if (q1r < T)
					atomic_add2(dqb + q1r * dld + dt * 8, acc[dt][2], acc[dt][3]);
			}
		}
	}

	/* dK (scaled) and dV of this warp's key rows, summed over the group */
	bf16 *dkb = dqkv + (int64_t)b * T * ld + (H + g) * HD + tq * 2;
	bf16 *dvb = dqkv + (int64_t)b * T * ld + (H + KV + g) * HD + tq * 2;
#pragma unroll
	for (int dt = 0; dt < HD / 8; dt++) {
		if (krow0 < T) {
			*(uint32_t *)(dkb + krow0 * ld + dt * 8) = pack_bf16(dk[dt][0] * scale, dk[dt][1] * scale);
			*(uint32_t *)(dvb + krow0 * ld + dt * 8) = pack_bf16(dv[dt][0], dv[dt][1]);
		}
		if (krow1 < T) {
			*(uint32_t *)(dkb + krow1 * ld + dt * 8) = pack_bf16(dk[dt][2] * scale, dk[dt][3] * scale);
			*(uint32_t *)(dvb + krow1 * ld + dt * 8) = pack_bf16(dv[dt][2], dv[dt][3]);
		}
	}
}

/* ---- launchers ------------------------------------------------------------------------- */

template <int HD>
static void fwd_launch(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int H, int KV,
		       cudaStream_t st)
{
	using C = fwd_cfg<HD>;
	static bool opted_in; /* per process; one device per process */
	if (!opted_in) {
		KERNEL_SMEM_OPT_IN(attn_fwd_kernel<HD>, C::SMEM);
		opted_in = true;
	}
	dim3 grid(B * H, cdiv(T, C::BR));
	attn_fwd_kernel<HD><<<grid, C::THREADS, C::SMEM, st>>>(out, lse, qkv, T, H, KV,
								1.0f / sqrtf((float)HD));
	cudaCheck(cudaGetLastError());
}

template <int HD>
static void bwd_launch(bf16 *dqkv, float *dq, const bf16 *dout, const bf16 *qkv,
		       const float *lse, const float *delta, int B, int T, int H, int KV,
		       cudaStream_t st)
{
	using C = bwd_cfg<HD>;
	static bool opted_in;
	if (!opted_in) {
		KERNEL_SMEM_OPT_IN(attn_bwd_kernel<HD>, C::SMEM);
		opted_in = true;
	}
	dim3 grid(B * KV, cdiv(T, C::BC));
	attn_bwd_kernel<HD><<<grid, C::THREADS, C::SMEM, st>>>(dqkv, dq, dout, qkv, lse, delta, T,
								H, KV, 1.0f / sqrtf((float)HD));
	cudaCheck(cudaGetLastError());
}

static void check_args(int B, int T, int H, int KV, int Q)
{
	cuda_assert(B > 0 && T > 0 && H > 0 && KV > 0 && H % KV == 0);
	if (!cuda_attention_supported(Q)) {
		char msg[96];
		snprintf(msg, sizeof(msg), "head dim %d has no attention kernel (16, 32, 64, 128)", Q);
		cuda_fail("invariant", "attention", msg, __FILE__, __LINE__);
	}
}

void cuda_attention_forward(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int H, int KV,
			    int Q, cudaStream_t st)
{
	check_args(B, T, H, KV, Q);
	switch (Q) {
	case 16: fwd_launch<16>(out, lse, qkv, B, T, H, KV, st); break;
	case 32: fwd_launch<32>(out, lse, qkv, B, T, H, KV, st); break;
	case 64: fwd_launch<64>(out, lse, qkv, B, T, H, KV, st); break;
	case 128: fwd_launch<128>(out, lse, qkv, B, T, H, KV, st); break;
	}
}

void cuda_attention_backward(struct cuda_ctx *ctx, bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
			     const bf16 *out, const float *lse, int B, int T, int H, int KV, int Q,
			     cudaStream_t st)
{
	check_args(B, T, H, KV, Q);
	int N = B * T;
	size_t dq_bytes = align256((size_t)N * H * Q * sizeof(float));
	char *scratch = (char *)ctx_scratch(ctx, cuda_attention_scratch_bytes(B, T, H, Q));
	float *dq = (float *)scratch, *delta = (float *)(scratch + dq_bytes);

	cudaCheck(cudaMemsetAsync(dq, 0, (size_t)N * H * Q * sizeof(float), st));
	attn_delta_kernel<<<cdiv((int64_t)N * H, 256), 256, 0, st>>>(delta, dout, out, N, T, H, Q);
	cudaCheck(cudaGetLastError());
	switch (Q) {
	case 16: bwd_launch<16>(dqkv, dq, dout, qkv, lse, delta, B, T, H, KV, st); break;
	case 32: bwd_launch<32>(dqkv, dq, dout, qkv, lse, delta, B, T, H, KV, st); break;
	case 64: bwd_launch<64>(dqkv, dq, dout, qkv, lse, delta, B, T, H, KV, st); break;
	case 128: bwd_launch<128>(dqkv, dq, dout, qkv, lse, delta, B, T, H, KV, st); break;
	}
	int64_t vecs = (int64_t)N * H * Q / 8;
	attn_dq_kernel<<<cdiv(vecs, 256), 256, 0, st>>>(dqkv, dq, N, H, KV, Q,
							 1.0f / sqrtf((float)Q));
	cudaCheck(cudaGetLastError());
}
