/*
 * gpu_test.c - every CUDA layer, the block under each checkpointing mode,
 * the head under both loss modes and the whole model, checked against the
 * fp32 reference of gpu/ref on fresh random inputs (GSL mt19937, seeded);
 * and every kernel of the lists run alone as gpu_run's calibration runs
 * it (cuda_kernel.h), its GEMMs against a host product.
 *
 * Both sides start from identical numbers: inputs are drawn in fp32 and
 * rounded to bf16 before the reference sees them. Device outputs are
 * poisoned (all bits set: NaN in bf16 and fp32) before each run, so an
 * element a kernel forgets to write fails the check. Outputs that
 * accumulate (+=) start from random values instead, and the check compares
 * the increment, so a kernel that overwrites fails too.
 *
 * An error is normwise: |got - want|_2 / |want|_2. Tolerances: 1e-5 where
 * the GPU computes in fp32 from the same inputs (AdamW, which should match
 * bit for bit, cross-entropy, wgrad accumulation, norm statistics); 1e-2 for one bf16 rounding of an
 * output (bf16 keeps 8 bits, 2^-9 = 2e-3 relative per rounding); 2e-2 to
 * 3e-2 where bf16 intermediates compound (attention backward, block and
 * model gradients). A wrong index or a missing term shows up as errors of
 * order 1.
 *
 * Output: one line per check, then "N passed, N failed"; exit 1 on any
 * failure. Without a GPU: one line, exit 0. An argument runs only the
 * checks whose group name contains it.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_rng.h>

#include "check.h"
#include "cuda_model.h"
#include "ref.h"
#include "ref_init.h"

static int passed, failed;
static gsl_rng *rng;
static cudaStream_t stream;
static struct cuda_ctx *ctx;

/* ---- host bf16 ------------------------------------------------------------------ */

static uint16_t f2bf(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return 0x7fc0; /* NaN */
	u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
	return (uint16_t)(u >> 16);
}

static float bf2f(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static void round_bf16(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = bf2f(f2bf(x[i]));
}

/* ---- buffers: everything a check allocates is freed by release_all() ---------------- */

#define MAX_BUFS 512
static void *dev_bufs[MAX_BUFS], *host_bufs[MAX_BUFS];
static int ndev, nhost;

/*
 * Every device operation of the harness goes to `stream` (non-blocking, so
 * the legacy default stream would not be ordered with it): allocations are
 * poisoned there, uploads are copied there and waited for.
 */
static void *dalloc(size_t bytes)
{
	void *p;
	cuda_assert(ndev < MAX_BUFS);
	cudaCheck(cudaMalloc(&p, bytes ? bytes : 1));
	cudaCheck(cudaMemsetAsync(p, 0xFF, bytes, stream));
	dev_bufs[ndev++] = p;
	return p;
}

/* Host to device on the harness stream; returns once the copy is done. */
static void upload(void *d, const void *h, size_t bytes)
{
	cudaCheck(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream));
	cudaCheck(cudaStreamSynchronize(stream));
}

static float *hnew(size_t n)
{
	cuda_assert(nhost < MAX_BUFS);
	float *p = calloc(n ? n : 1, sizeof(float));
	cuda_assert(p != NULL);
	host_bufs[nhost++] = p;
	return p;
}

static void release_all(void)
{
	cudaCheck(cudaStreamSynchronize(stream));
	for (int i = 0; i < ndev; i++)
		cudaCheck(cudaFree(dev_bufs[i]));
	for (int i = 0; i < nhost; i++)
		free(host_bufs[i]);
	ndev = nhost = 0;
}

static void poison(void *d, size_t bytes)
{
	cudaCheck(cudaMemsetAsync(d, 0xFF, bytes, stream));
}

/* n values ~ N(0, std^2), rounded to bf16 (what the GPU will hold). */
static float *randn(size_t n, float std)
{
	float *p = hnew(n);
	ref_fill_normal(p, n, 0.0f, std, rng);
	round_bf16(p, n);
	return p;
}

static float *copy_of(const float *x, size_t n)
{
	float *p = hnew(n);
	memcpy(p, x, n * sizeof(float));
	return p;
}

static void up_bf16(bf16 *d, const float *h, size_t n)
{
	uint16_t *t = malloc(n * sizeof(uint16_t) + 1);
	cuda_assert(t != NULL);
	for (size_t i = 0; i < n; i++)
		t[i] = f2bf(h[i]);
	upload(d, t, n * sizeof(uint16_t));
	free(t);
}

static bf16 *dev_bf16(const float *h, size_t n)
{
	bf16 *d = dalloc(n * sizeof(bf16));
	up_bf16(d, h, n);
	return d;
}

static float *dev_f32(const float *h, size_t n)
{
	float *d = dalloc(n * sizeof(float));
	upload(d, h, n * sizeof(float));
	return d;
}

static int *dev_int(const int *h, size_t n)
{
	int *d = dalloc(n * sizeof(int));
	upload(d, h, n * sizeof(int));
	return d;
}

/* Rows of `cols` bf16 at a row stride of ld elements, into a dense fp32 array. */
static float *down_bf16_strided(const bf16 *d, size_t rows, size_t cols, size_t ld)
{
	cudaCheck(cudaStreamSynchronize(stream));
	size_t n = rows * ld;
	uint16_t *t = malloc(n * sizeof(uint16_t) + 1);
	cuda_assert(t != NULL);
	cudaCheck(cudaMemcpy(t, d, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
	float *h = hnew(rows * cols);
	for (size_t r = 0; r < rows; r++)
		for (size_t c = 0; c < cols; c++)
			h[r * cols + c] = bf2f(t[r * ld + c]);
	free(t);
	return h;
}

static float *down_bf16(const bf16 *d, size_t n)
{
	return down_bf16_strided(d, 1, n, n);
}

static float *down_f32(const float *d, size_t n)
{
	cudaCheck(cudaStreamSynchronize(stream));
	float *h = hnew(n);
	cudaCheck(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
	return h;
}

/* a - b elementwise, a new array. */
static float *minus(const float *a, const float *b, size_t n)
{
	float *p = hnew(n);
	for (size_t i = 0; i < n; i++)
		p[i] = a[i] - b[i];
	return p;
}

/* ---- comparisons ----------------------------------------------------------------------- */

struct err {
	double rel;     /* |got - want| / |want| */
	double maxdiff; /* max |got - want| */
	size_t nonfinite;
};

static struct err compare(const float *got, const float *want, size_t n)
{
	struct err e = { 0.0, 0.0, 0 };
	double num = 0.0, den = 0.0;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(got[i])) {
			e.nonfinite++;
			continue;
		}
		double d = (double)got[i] - want[i];
		num += d * d;
		den += (double)want[i] * want[i];
		if (fabs(d) > e.maxdiff)
			e.maxdiff = fabs(d);
	}
	e.rel = sqrt(num) / (den > 0.0 ? sqrt(den) : 1.0);
	return e;
}

static int err_ok(struct err e, double tol)
{
	return e.nonfinite == 0 && e.rel <= tol;
}

static void report(int ok, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void report(int ok, const char *name, const char *fmt, ...)
{
	char detail[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	printf("%s %-44s %s\n", ok ? "ok  " : "FAIL", name, detail);
	fflush(stdout);
	if (ok)
		passed++;
	else
		failed++;
}

static void check(const char *name, const float *got, const float *want, size_t n, double tol)
{
	struct err e = compare(got, want, n);
	report(err_ok(e, tol), name, "rel %.2e (tol %.0e), max |diff| %.2e%s", e.rel, tol,
	       e.maxdiff, e.nonfinite ? ", NON-FINITE (unwritten?)" : "");
}

static void checkf(const char *fmt_name, const char *arg, const float *got, const float *want,
		   size_t n, double tol)
{
	char name[96];
	snprintf(name, sizeof(name), fmt_name, arg);
	check(name, got, want, n, tol);
}

/* ---- layers ------------------------------------------------------------------------------ */

static void test_embedding(void)
{
	enum { N = 96, D = 64, V = 40 };
	int tokens[N];
	ref_fill_tokens(tokens, N, V, rng);
	float *wte = randn((size_t)V * D, 1.0f);
	float *dout = randn((size_t)N * D, 1.0f);
	float *dw0 = randn((size_t)V * D, 1.0f);
	float *out_ref = hnew((size_t)N * D), *dw_ref = copy_of(dw0, (size_t)V * D);
	ref_embedding_forward(out_ref, tokens, wte, N, D);
	ref_embedding_backward(dw_ref, dout, tokens, N, D);

	int *d_tok = dev_int(tokens, N);
	bf16 *d_wte = dev_bf16(wte, (size_t)V * D), *d_dout = dev_bf16(dout, (size_t)N * D);
	bf16 *d_out = dalloc((size_t)N * D * sizeof(bf16));
	float *d_dw = dev_f32(dw0, (size_t)V * D);
	cuda_embedding_forward(d_out, d_tok, d_wte, N, D, stream);
	cuda_embedding_backward(d_dw, d_dout, d_tok, N, D, stream);
	check("embedding forward", down_bf16(d_out, (size_t)N * D), out_ref, (size_t)N * D, 1e-6);
	check("embedding backward (dwte +=)", minus(down_f32(d_dw, (size_t)V * D), dw0, (size_t)V * D),
	      minus(dw_ref, dw0, (size_t)V * D), (size_t)V * D, 1e-5);

	/* bf16 gradient (tokens repeat: V < N): from zero, so the result is the increment, one rounding */
	float *zero = hnew((size_t)V * D), *dw16_ref = hnew((size_t)V * D);
	ref_embedding_backward(dw16_ref, dout, tokens, N, D);
	bf16 *d_dw16 = dev_bf16(zero, (size_t)V * D);
	cuda_embedding_backward_bf16(d_dw16, d_dout, d_tok, N, D, stream);
	check("embedding backward, bf16 dwte", down_bf16(d_dw16, (size_t)V * D), dw16_ref, (size_t)V * D, 1e-2);
}

static void test_rmsnorm(void)
{
	enum { N = 100, C = 256 };
	float *x = randn((size_t)N * C, 1.0f), *w = randn(C, 1.0f);
	for (int i = 0; i < C; i++)
		w[i] = bf2f(f2bf(1.0f + 0.2f * w[i]));
	float *dout = randn((size_t)N * C, 1.0f), *dw0 = randn(C, 1.0f);
	float *out_ref = hnew((size_t)N * C), *rstd_ref = hnew(N), *dx_ref = hnew((size_t)N * C);
	float *dw_ref = copy_of(dw0, C);
	ref_rmsnorm_forward(out_ref, rstd_ref, x, w, N, C);
	ref_rmsnorm_backward(dx_ref, dw_ref, dout, x, w, rstd_ref, N, C);

	bf16 *d_x = dev_bf16(x, (size_t)N * C), *d_w = dev_bf16(w, C);
	bf16 *d_dout = dev_bf16(dout, (size_t)N * C);
	bf16 *d_out = dalloc((size_t)N * C * sizeof(bf16)), *d_dx = dalloc((size_t)N * C * sizeof(bf16));
	float *d_rstd = dalloc(N * sizeof(float)), *d_dw = dev_f32(dw0, C);
	cuda_rmsnorm_forward(d_out, d_rstd, d_x, d_w, N, C, stream);
	cuda_rmsnorm_backward(d_dx, d_dw, d_dout, d_x, d_w, d_rstd, N, C, stream);
	check("rmsnorm forward out", down_bf16(d_out, (size_t)N * C), out_ref, (size_t)N * C, 1e-2);
	check("rmsnorm forward rstd", down_f32(d_rstd, N), rstd_ref, N, 1e-5);
	check("rmsnorm backward dx", down_bf16(d_dx, (size_t)N * C), dx_ref, (size_t)N * C, 1e-2);
	check("rmsnorm backward dw (+=)", minus(down_f32(d_dw, C), dw0, C), minus(dw_ref, dw0, C), C,
	      1e-5);
}

static void linear_case(int N, int C, int OC)
{
	char tag[64];
	snprintf(tag, sizeof(tag), "%dx%d->%d", N, C, OC);
	float *x = randn((size_t)N * C, 1.0f), *w = randn((size_t)OC * C, 0.1f);
	float *dout = randn((size_t)N * OC, 1.0f), *dw0 = randn((size_t)OC * C, 1.0f);
	float *out_ref = hnew((size_t)N * OC), *dx_ref = hnew((size_t)N * C);
	float *dw_ref = copy_of(dw0, (size_t)OC * C);
	ref_linear_forward(out_ref, x, w, N, C, OC);
	ref_linear_backward(dx_ref, dw_ref, dout, x, w, N, C, OC);

	bf16 *d_x = dev_bf16(x, (size_t)N * C), *d_w = dev_bf16(w, (size_t)OC * C);
	bf16 *d_dout = dev_bf16(dout, (size_t)N * OC);
	bf16 *d_out = dalloc((size_t)N * OC * sizeof(bf16)), *d_dx = dalloc((size_t)N * C * sizeof(bf16));
	float *d_dw = dev_f32(dw0, (size_t)OC * C);
	cuda_linear_forward(ctx, d_out, d_x, d_w, N, C, OC, stream);
	cuda_linear_backward(ctx, d_dx, d_dw, d_dout, d_x, d_w, N, C, OC, stream);
	checkf("linear %s forward", tag, down_bf16(d_out, (size_t)N * OC), out_ref, (size_t)N * OC,
	       1e-2);
	checkf("linear %s dx", tag, down_bf16(d_dx, (size_t)N * C), dx_ref, (size_t)N * C, 1e-2);
	checkf("linear %s dw (+=)", tag, minus(down_f32(d_dw, (size_t)OC * C), dw0, (size_t)OC * C),
	       minus(dw_ref, dw0, (size_t)OC * C), (size_t)OC * C, 1e-5);
}

static void test_linear(void)
{
	linear_case(100, 72, 40);
	linear_case(256, 512, 1536);
}

static void test_rope(void)
{
	enum { B = 2, T = 40, H = 4, KV = 2, Q = 32, N = B * T, W = (H + 2 * KV) * Q };
	const float theta = 10000.0f; /* Llama 2's base; the blocks' checks run Llama 3's */
	float *qkv = randn((size_t)N * W, 1.0f);
	float *fwd_ref = copy_of(qkv, (size_t)N * W), *bwd_ref = copy_of(qkv, (size_t)N * W);
	ref_rope_forward(fwd_ref, B, T, H, KV, Q, theta);
	ref_rope_backward(bwd_ref, B, T, H, KV, Q, theta);
	bf16 *d = dev_bf16(qkv, (size_t)N * W), *d2 = dev_bf16(qkv, (size_t)N * W);
	cuda_rope_forward(d, B, T, H, KV, Q, theta, stream);
	cuda_rope_backward(d2, B, T, H, KV, Q, theta, stream);
	check("rope forward (in place)", down_bf16(d, (size_t)N * W), fwd_ref, (size_t)N * W, 1e-2);
	check("rope backward (in place)", down_bf16(d2, (size_t)N * W), bwd_ref, (size_t)N * W, 1e-2);
}

/*
 * cudnn: through the context with cuDNN asked for (2: GQA's backward on
 * the repeated copy; 3: the causal mask by FLOAT indices alone); returns
 * without checks when it fell back.
 */
static void attention_case_with(int B, int T, int H, int KV, int Q, int cudnn)
{
	char tag[80];
	snprintf(tag, sizeof(tag), "%sB%d T%d H%d KV%d Q%d",
		 cudnn == 3 ? "cuDNN (FLOAT mask) " : cudnn == 2 ? "cuDNN (repeated K, V) " : cudnn ? "cuDNN " : "", B, T,
		 H, KV, Q);
	size_t N = (size_t)B * T, W = (size_t)(H + 2 * KV) * Q, HQ = (size_t)H * Q;
	size_t nl = (size_t)B * H * T;
	float *qkv = randn(N * W, 1.0f), *dout = randn(N * HQ, 1.0f);
	float *out_ref = hnew(N * HQ), *lse_ref = hnew(nl), *dqkv_ref = hnew(N * W);
	ref_attention_forward(out_ref, lse_ref, qkv, B, T, H, KV, Q);
	ref_attention_backward(dqkv_ref, dout, qkv, out_ref, lse_ref, B, T, H, KV, Q);

	cuda_ctx_reserve(ctx, cuda_attention_scratch_bytes(B, T, H, Q));
	bf16 *d_qkv = dev_bf16(qkv, N * W), *d_dout = dev_bf16(dout, N * HQ);
	bf16 *d_out = dalloc(N * HQ * sizeof(bf16)), *d_dqkv = dalloc(N * W * sizeof(bf16));
	float *d_lse = dalloc(nl * sizeof(float));
	if (cudnn) {
		const char *why = NULL;
		cuda_ctx_attention(ctx, CUDA_ATTN_CUDNN);
		cuda_ctx_attention_gqa_repeat(ctx, cudnn == 2);
		cuda_ctx_attention_mask_float(ctx, cudnn == 3);
		cuda_attention_forward_ctx(ctx, d_out, d_lse, d_qkv, B, T, H, KV, Q, stream);
		int fwd = cuda_ctx_attention_used(ctx, &why) == CUDA_ATTN_CUDNN;
		cuda_attention_backward_ctx(ctx, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, H, KV, Q, stream);
		int bwd = cuda_ctx_attention_used(ctx, why ? NULL : &why) == CUDA_ATTN_CUDNN;
		cuda_ctx_attention(ctx, CUDA_ATTN_MMA);
		cuda_ctx_attention_gqa_repeat(ctx, 0);
		cuda_ctx_attention_mask_float(ctx, 0);
		if (bwd && KV < H) {
			/* which graph the checks below check: a note, as a fallback is; the repeated copy when asked for */
			const char *not_kv = NULL, *how = cuda_ctx_attention_gqa(ctx, &not_kv);
			printf("note attention %s: the backward by %s%s%s\n", tag, how ? how : "?",
			       not_kv ? ": " : "", not_kv ? not_kv : "");
			if (cudnn == 2)
				report(how && !strcmp(how, "the repeated copy"), tag, "the backward by %s, asked for the repeated copy",
				       how ? how : "?");
		}
		if (!fwd || !bwd) {
			/* not a failure: the mma kernels ran, and they are checked by the attention group */
			printf("note attention %s: cuDNN %s%s%s: the mma kernels ran instead\n", tag,
			       fwd ? "backward" : bwd ? "forward" : "forward and backward",
			       why ? " fell back: " : "", why ? why : "");
			if (!fwd && !bwd)
				return;
		}
	} else {
		cuda_attention_forward(d_out, d_lse, d_qkv, B, T, H, KV, Q, stream);
		cuda_attention_backward(ctx, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, H, KV, Q, stream);
	}
	checkf("attention %s out", tag, down_bf16(d_out, N * HQ), out_ref, N * HQ, 1e-2);
	checkf("attention %s lse", tag, down_f32(d_lse, nl), lse_ref, nl, 1e-4);
	float *got = down_bf16(d_dqkv, N * W);
	/* the three parts separately: a bug in one must not hide behind the others */
	float *parts[2][3];
	size_t widths[3] = { HQ, (size_t)KV * Q, (size_t)KV * Q }, offs[3] = { 0, HQ, HQ + (size_t)KV * Q };
	for (int s = 0; s < 3; s++) {
		parts[0][s] = hnew(N * widths[s]);
		parts[1][s] = hnew(N * widths[s]);
		for (size_t n = 0; n < N; n++) {
			memcpy(parts[0][s] + n * widths[s], got + n * W + offs[s], widths[s] * sizeof(float));
			memcpy(parts[1][s] + n * widths[s], dqkv_ref + n * W + offs[s],
			       widths[s] * sizeof(float));
		}
	}
	checkf("attention %s dq", tag, parts[0][0], parts[1][0], N * widths[0], 2e-2);
	checkf("attention %s dk", tag, parts[0][1], parts[1][1], N * widths[1], 2e-2);
	checkf("attention %s dv", tag, parts[0][2], parts[1][2], N * widths[2], 2e-2);
}

static void attention_case(int B, int T, int H, int KV, int Q)
{
	attention_case_with(B, T, H, KV, Q, 0);
}

static void test_attention(void)
{
	attention_case(2, 100, 4, 2, 16);
	attention_case(1, 256, 4, 1, 32);
	attention_case(2, 200, 4, 4, 64);
	attention_case(1, 300, 2, 1, 128);
	attention_case(1, 64, 8, 2, 128);
	attention_case(1, 9, 2, 2, 64); /* a short sequence: one tile, mostly padding */
}

/* cuDNN's fused attention against the same reference, where cuDNN builds plans (else notes) */
static void test_cudnn(void)
{
	attention_case_with(2, 128, 4, 4, 64, 1);
	attention_case_with(1, 256, 8, 2, 128, 1); /* GQA: the graph of KV heads (the repeated copy without a plan) */
	attention_case_with(1, 300, 4, 1, 64, 1);  /* T not a multiple of a tile */
	attention_case_with(1, 256, 8, 2, 128, 2); /* GQA on the repeated copy, the fallback */
	attention_case_with(1, 300, 4, 1, 64, 2);
	attention_case_with(2, 128, 4, 4, 64, 3);  /* the FLOAT-index mask, should INT32 be the one built above */
	attention_case_with(1, 300, 4, 1, 64, 3);
	/* which forms the cases above ran: the INT32 mask falls back to FLOAT without a failure */
	const char *mask = cuda_ctx_attention_mask(ctx);
	printf("note cuDNN's plans: causal mask indices %s\n", mask ? mask : "none (no plan built)");
}

/*
 * The cuDNN graphs' operations, finalized one by one in cuDNN without a
 * device (cuda_cudnn_check_ops): llama3-8b's shape and small ones, both
 * directions, both mask index types; under GQA the graph of the KV heads
 * and the repeated copy's, and the 70b's and 405b's groups of 8 and 16
 * query heads. cuDNN refuses a graph whose heads do not group
 * (8 query heads summed into 3), which the check must see.
 */
static void test_cudnn_ops(void)
{
	static const struct {
		int B, T, H, KV, Q, backward, int32;
		const char *what;
	} cases[] = {
		{ 1, 8192, 32, 8, 128, 0, 1, "llama3-8b forward" },
		{ 1, 8192, 32, 8, 128, 0, 0, "llama3-8b forward (float indices)" },
		{ 1, 8192, 32, 8, 128, 1, 1, "llama3-8b backward, KV heads" },
		{ 1, 8192, 32, 8, 128, 1, 0, "llama3-8b backward, KV heads (float)" },
		{ 1, 8192, 32, 32, 128, 1, 1, "llama3-8b backward, repeated" },
		{ 1, 8192, 32, 32, 128, 1, 0, "llama3-8b backward, repeated (float)" },
		{ 2, 128, 4, 4, 64, 0, 1, "B2 T128 H4 forward" },
		{ 2, 128, 4, 4, 64, 1, 1, "B2 T128 H4 backward" },
		{ 1, 256, 8, 1, 64, 1, 1, "T256 H8 KV1 backward" },
		{ 1, 8192, 64, 8, 128, 1, 1, "llama3-70b backward, KV heads" },
		{ 1, 8192, 128, 8, 128, 1, 1, "llama3-405b backward, KV heads" },
	};
	char why[200];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char name[96];
		int rc = cuda_cudnn_check_ops(cases[i].B, cases[i].T, cases[i].H, cases[i].KV, cases[i].Q, cases[i].backward,
					      cases[i].int32, why, sizeof why);
		if (rc == 1) {
			printf("note cuDNN's operations: not checked: %s\n", why);
			return;
		}
		snprintf(name, sizeof name, "cuDNN ops: %s", cases[i].what);
		report(rc == 0, name, "%s", why);
	}
	/* a graph cuDNN must refuse, so that the check can fail: 8 query heads do not group over 3 KV heads
	 * (cuDNN 9.19 refuses the scores' broadcast matmul, before any reduction) */
	report(cuda_cudnn_check_ops(1, 256, 8, 3, 128, 1, 1, why, sizeof why) == -1,
	       "cuDNN ops: 8 query heads on 3 KV heads refused", "%s", why);
}

static void test_swiglu(void)
{
	enum { N = 64, F = 256 };
	float *gu = randn((size_t)N * 2 * F, 1.5f), *dh = randn((size_t)N * F, 1.0f);
	float *h_ref = hnew((size_t)N * F), *dgu_ref = hnew((size_t)N * 2 * F);
	ref_swiglu_forward(h_ref, gu, N, F);
	ref_swiglu_backward(dgu_ref, dh, gu, N, F);
	bf16 *d_gu = dev_bf16(gu, (size_t)N * 2 * F), *d_dh = dev_bf16(dh, (size_t)N * F);
	bf16 *d_h = dalloc((size_t)N * F * sizeof(bf16)), *d_dgu = dalloc((size_t)N * 2 * F * sizeof(bf16));
	cuda_swiglu_forward(d_h, d_gu, N, F, stream);
	cuda_swiglu_backward(d_dgu, d_dh, d_gu, N, F, stream);
	check("swiglu forward", down_bf16(d_h, (size_t)N * F), h_ref, (size_t)N * F, 1e-2);
	check("swiglu backward", down_bf16(d_dgu, (size_t)N * 2 * F), dgu_ref, (size_t)N * 2 * F, 1e-2);
}

static void test_cross_entropy(void)
{
	enum { N = 64, V = 1000 };
	float *logits = hnew((size_t)N * V);
	ref_fill_normal(logits, (size_t)N * V, 0.0f, 2.0f, rng);
	int targets[N];
	ref_fill_tokens(targets, N, V, rng);
	float *lse_ref = hnew(N), *dl_ref = hnew((size_t)N * V);
	float loss_ref = ref_cross_entropy_forward(lse_ref, logits, targets, N, V);
	ref_cross_entropy_backward(dl_ref, logits, lse_ref, targets, N, V, 1.0f);

	cuda_ctx_reserve(ctx, N * sizeof(float));
	float *d_logits = dev_f32(logits, (size_t)N * V), *d_lse = dalloc(N * sizeof(float));
	float *d_loss = dalloc(sizeof(float));
	int *d_t = dev_int(targets, N);
	bf16 *d_dl = dalloc((size_t)N * V * sizeof(bf16));
	cuda_cross_entropy_forward(ctx, d_loss, d_lse, d_logits, d_t, N, V, stream);
	cuda_cross_entropy_backward(d_dl, V, d_logits, d_lse, d_t, N, V, 1.0f, stream);
	check("cross-entropy loss", down_f32(d_loss, 1), &loss_ref, 1, 1e-5);
	check("cross-entropy lse", down_f32(d_lse, N), lse_ref, N, 1e-5);
	check("cross-entropy dlogits", down_bf16(d_dl, (size_t)N * V), dl_ref, (size_t)N * V, 1e-2);
	/* in place: each bf16 row over the start of its own fp32 row */
	cuda_cross_entropy_backward((bf16 *)d_logits, 2 * V, d_logits, d_lse, d_t, N, V, 1.0f, stream);
	check("cross-entropy dlogits in place",
	      down_bf16_strided((bf16 *)d_logits, N, V, 2 * (size_t)V), dl_ref, (size_t)N * V, 1e-2);
}

static void lm_loss_case(enum loss_mode mode, int chunk)
{
	enum { N = 96, D = 64, V = 256 };
	const char *tag = mode == LOSS_FULL ? "full" : "chunked";
	float *xn = randn((size_t)N * D, 1.0f), *w = randn((size_t)V * D, 0.2f);
	float *dw0 = randn((size_t)V * D, 1.0f);
	int targets[N];
	ref_fill_tokens(targets, N, V, rng);
	int rows = mode == LOSS_FULL ? N : chunk;
	float *lse_ref = hnew(N), *logits_ref = hnew((size_t)rows * V), *dxn_ref = hnew((size_t)N * D);
	float *dw_ref = copy_of(dw0, (size_t)V * D);
	float loss_ref = ref_lm_loss_forward(lse_ref, logits_ref, xn, w, targets, N, D, V, mode, chunk);
	ref_lm_loss_backward(dxn_ref, dw_ref, logits_ref, xn, w, lse_ref, targets, N, D, V, mode,
			     chunk);

	cuda_ctx_reserve(ctx, N * sizeof(float));
	bf16 *d_xn = dev_bf16(xn, (size_t)N * D), *d_w = dev_bf16(w, (size_t)V * D);
	bf16 *d_dxn = dalloc((size_t)N * D * sizeof(bf16));
	float *d_lse = dalloc(N * sizeof(float)), *d_logits = dalloc((size_t)rows * V * sizeof(float));
	float *d_loss = dalloc(sizeof(float)), *d_dw = dev_f32(dw0, (size_t)V * D);
	int *d_t = dev_int(targets, N);
	cuda_lm_loss_forward(ctx, d_loss, d_lse, d_logits, d_xn, d_w, d_t, N, D, V, mode, chunk,
			     stream);
	checkf("lm loss %s: loss", tag, down_f32(d_loss, 1), &loss_ref, 1, 1e-5);
	checkf("lm loss %s: lse", tag, down_f32(d_lse, N), lse_ref, N, 1e-5);
	cuda_lm_loss_backward(ctx, d_dxn, d_dw, d_logits, d_xn, d_w, d_lse, d_t, N, D, V, mode, chunk,
			      stream);
	checkf("lm loss %s: dxn", tag, down_bf16(d_dxn, (size_t)N * D), dxn_ref, (size_t)N * D, 1e-2);
	checkf("lm loss %s: dw_out (+=)", tag, minus(down_f32(d_dw, (size_t)V * D), dw0, (size_t)V * D),
	       minus(dw_ref, dw0, (size_t)V * D), (size_t)V * D, 1e-2);
}

static void test_lm_loss(void)
{
	lm_loss_case(LOSS_FULL, 0);
	lm_loss_case(LOSS_CHUNKED, 40);
}

/* ---- optimizer ------------------------------------------------------------------------------ */

struct adam_case {
	float *p, *g, *m, *v; /* host, initial */
	size_t n;
};

static void adam_case_init(struct adam_case *c, size_t n)
{
	c->n = n;
	c->p = hnew(n);
	c->g = hnew(n);
	c->m = hnew(n);
	c->v = hnew(n);
	ref_fill_normal(c->p, n, 0.0f, 1.0f, rng);
	ref_fill_normal(c->g, n, 0.0f, 1.0f, rng);
	ref_fill_normal(c->m, n, 0.0f, 0.1f, rng);
	ref_fill_uniform(c->v, n, 0.0f, 0.01f, rng);
}

static void test_adamw(void)
{
	const struct ref_adamw_hparams rh = { 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f };
	const struct cuda_adamw_hparams ch = { 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f };
	enum { COUNT = 5 };
	/* odd sizes and an odd offset exercise the scalar tails and unaligned bases */
	const size_t sizes[COUNT] = { 10000, 1001, 7, 65536 + 3, 4096 };
	const int steps[3] = { 1, 5, 1000 };
	for (int form = 0; form < 3; form++) {
		static const char *forms[3] = { "per-parameter", "multi-tensor", "fused" };
		struct adam_case cs[COUNT];
		struct cuda_adamw_tensor dts[COUNT];
		struct ref_adamw_tensor rts[COUNT];
		float *dp[COUNT], *dg[COUNT], *dm[COUNT], *dv[COUNT];
		bf16 *d16[COUNT];
		int t = steps[form];
		for (int i = 0; i < COUNT; i++) {
			size_t n = sizes[i], off = i == 1 ? 1 : 0; /* tensor 1 starts 4 bytes in */
			adam_case_init(&cs[i], n);
			dp[i] = (float *)dalloc((n + 1) * sizeof(float)) + off;
			dg[i] = (float *)dalloc((n + 1) * sizeof(float)) + off;
			dm[i] = (float *)dalloc((n + 1) * sizeof(float)) + off;
			dv[i] = (float *)dalloc((n + 1) * sizeof(float)) + off;
			d16[i] = dalloc(n * sizeof(bf16));
			upload(dp[i], cs[i].p, n * 4);
			upload(dg[i], cs[i].g, n * 4);
			upload(dm[i], cs[i].m, n * 4);
			upload(dv[i], cs[i].v, n * 4);
			dts[i] = (struct cuda_adamw_tensor){ dp[i], dg[i], dm[i], dv[i], n };
			rts[i] = (struct ref_adamw_tensor){ copy_of(cs[i].p, n), cs[i].g,
							    copy_of(cs[i].m, n), copy_of(cs[i].v, n), n };
		}
		ref_adamw_multi(rts, COUNT, &rh, t);
		if (form == 0)
			for (int i = 0; i < COUNT; i++)
				cuda_adamw(dp[i], dg[i], dm[i], dv[i], sizes[i], &ch, t, stream);
		else if (form == 1)
			cuda_adamw_multi(dts, COUNT, &ch, t, stream);
		else
			for (int i = 0; i < COUNT; i++)
				cuda_adamw_fused(dp[i], d16[i], dg[i], dm[i], dv[i], sizes[i], &ch, t, 1,
						 stream);
		double worst = 0.0;
		int ok = 1;
		for (int i = 0; i < COUNT; i++) {
			size_t n = sizes[i];
			struct err e[3] = {
				compare(minus(down_f32(dp[i], n), cs[i].p, n), minus(rts[i].p, cs[i].p, n), n),
				compare(down_f32(dm[i], n), rts[i].m, n),
				compare(down_f32(dv[i], n), rts[i].v, n),
			};
			for (int k = 0; k < 3; k++) {
				ok &= err_ok(e[k], 1e-5);
				if (e[k].rel > worst)
					worst = e[k].rel;
			}
			if (form == 2) {
				float *g = down_f32(dg[i], n), *p16 = down_bf16(d16[i], n);
				float *pr = hnew(n);
				for (size_t j = 0; j < n; j++) {
					ok &= g[j] == 0.0f;
					pr[j] = bf2f(f2bf(rts[i].p[j]));
				}
				struct err e16 = compare(p16, pr, n);
				ok &= err_ok(e16, 1e-2);
			}
		}
		char name[64];
		snprintf(name, sizeof(name), "adamw %s (t=%d, %d tensors)", forms[form], t, COUNT);
		report(ok, name, "worst rel %.2e (tol 1e-05) on the update, m, v%s", worst,
		       form == 2 ? "; bf16 copy and zeroed grads checked" : "");
	}
}

/* ---- block, head, model ----------------------------------------------------------------------- */

/* The tiny Llama the model-level checks run: head dim 32, GQA 2:1, T not a tile multiple. */
static struct model_shape tiny_shape(void)
{
	struct model_shape m = { "tiny", 2, 128, 256, 4, 2, 256, 72, 500000.0 };
	return m;
}

static const char *ac_str(enum ac_mode a)
{
	return a == AC_NONE ? "none" : a == AC_FULL ? "full" : "selective";
}

/* Compare a block's flat gradient tensor by tensor; report the worst. */
static void check_block_grads(const char *name, const struct model_shape *m, const float *got,
			      const float *want, double tol)
{
	static const char *tn[BT_COUNT] = { "attn_norm", "wq/wk/wv", "", "", "wo", "mlp_norm",
					    "w_gate/w_up", "", "w_down" };
	static const enum block_tensor groups[6] = { BT_ATTN_NORM, BT_WQ, BT_WO, BT_MLP_NORM,
						     BT_W_GATE, BT_W_DOWN };
	static const enum block_tensor ends[6] = { BT_WQ, BT_WO, BT_MLP_NORM, BT_W_GATE, BT_W_DOWN,
						   BT_COUNT };
	double worst = -1.0;
	const char *worst_name = "";
	int ok = 1;
	for (int i = 0; i < 6; i++) {
		size_t a = ref_block_offset(m, groups[i]), b = ref_block_offset(m, ends[i]);
		struct err e = compare(got + a, want + a, b - a);
		ok &= err_ok(e, tol);
		if (e.rel > worst || e.nonfinite) {
			worst = e.nonfinite ? INFINITY : e.rel;
			worst_name = tn[groups[i]];
		}
	}
	report(ok, name, "worst tensor %s rel %.2e (tol %.0e)", worst_name, worst, tol);
}

static void block_case(enum ac_mode ac)
{
	struct model_shape m = tiny_shape();
	const int B = 2, N = B * m.seq, D = m.hidden;
	size_t P = ref_block_floats(&m), nd = (size_t)N * D;
	char name[96];

	float *params = hnew(P);
	ref_fill_normal(params, P, 0.0f, 1.0f / sqrtf((float)D), rng);
	for (int t = 0; t < 2; t++) {
		float *w = params + ref_block_offset(&m, t == 0 ? BT_ATTN_NORM : BT_MLP_NORM);
		for (int i = 0; i < D; i++)
			w[i] = 1.0f + 0.2f * w[i] * sqrtf((float)D);
	}
	round_bf16(params, P);
	float *x = randn(nd, 1.0f), *dout = randn(nd, 1.0f), *dp0 = randn(P, 0.1f);

	/* reference */
	struct ref_block_store rs;
	float *saved = hnew(ref_block_saved_floats(&m, B, ac));
	float *trans = hnew(ref_block_transient_floats(&m, B, ac));
	ref_block_store_init(&rs, saved, trans, &m, B, ac);
	memcpy(rs.x, x, nd * sizeof(float));
	float *out_ref = hnew(nd), *dx_ref = hnew(nd), *dp_ref = copy_of(dp0, P);
	ref_block_forward(out_ref, &rs, params, &m, B);
	ref_block_backward(dx_ref, dp_ref, dout, &rs, params, hnew(ref_block_scratch_floats(&m, B)),
			   &m, B);

	/* CUDA */
	struct cuda_block_store cs;
	cuda_ctx_reserve(ctx, cuda_scratch_bytes(&m, B));
	void *d_saved = dalloc(cuda_block_saved_bytes(&m, B, ac));
	void *d_trans = dalloc(cuda_block_transient_bytes(&m, B, ac));
	void *d_scratch = dalloc(cuda_block_scratch_bytes(&m, B));
	cuda_block_store_init(&cs, d_saved, d_trans, &m, B, ac);
	up_bf16(cs.x, x, nd);
	bf16 *d_params = dev_bf16(params, P), *d_out = dalloc(nd * sizeof(bf16));
	bf16 *d_dout = dev_bf16(dout, nd), *d_dx = dalloc(nd * sizeof(bf16));
	float *d_dp = dev_f32(dp0, P);
	cuda_block_forward(ctx, d_out, &cs, d_params, &m, B, stream);
	snprintf(name, sizeof(name), "block ac=%s forward", ac_str(ac));
	check(name, down_bf16(d_out, nd), out_ref, nd, 1e-2);
	if (ac != AC_NONE)
		poison(d_trans, cuda_block_transient_bytes(&m, B, ac)); /* recompute must rebuild it */
	cuda_block_backward(ctx, d_dx, d_dp, d_dout, &cs, d_params, d_scratch, &m, B, stream);
	snprintf(name, sizeof(name), "block ac=%s backward dx", ac_str(ac));
	check(name, down_bf16(d_dx, nd), dx_ref, nd, 2e-2);
	snprintf(name, sizeof(name), "block ac=%s backward dparams (+=)", ac_str(ac));
	check_block_grads(name, &m, minus(down_f32(d_dp, P), dp0, P), minus(dp_ref, dp0, P), 2e-2);

	/* again with bf16 gradients (from zero): forward anew, the same backward into a bf16 buffer */
	if (ac != AC_NONE)
		poison(d_trans, cuda_block_transient_bytes(&m, B, ac));
	up_bf16(cs.x, x, nd);
	cuda_block_forward(ctx, d_out, &cs, d_params, &m, B, stream);
	float *zero = hnew(P), *dp16_ref = minus(dp_ref, dp0, P);
	bf16 *d_dp16 = dev_bf16(zero, P);
	cuda_ctx_grad_bf16(ctx, 1);
	cuda_block_backward(ctx, d_dx, d_dp16, d_dout, &cs, d_params, d_scratch, &m, B, stream);
	cuda_ctx_grad_bf16(ctx, 0);
	snprintf(name, sizeof(name), "block ac=%s backward, bf16 dparams", ac_str(ac));
	check_block_grads(name, &m, down_bf16(d_dp16, P), dp16_ref, 3e-2);
}

static void test_block(void)
{
	struct model_shape m = tiny_shape();
	report(ref_block_floats(&m) == cuda_block_elems(&m)
		       && ref_block_offset(&m, BT_W_DOWN) == cuda_block_offset(&m, BT_W_DOWN),
	       "block layout: ref == core/model.c", "%zu elements", cuda_block_elems(&m));
	block_case(AC_NONE);
	block_case(AC_FULL);
	block_case(AC_SELECTIVE);
}

static void model_case(enum ac_mode ac, enum loss_mode loss)
{
	struct model_shape m = tiny_shape();
	const int B = 2, N = B * m.seq, chunk = 40;
	size_t P = ref_model_floats(&m);
	char name[96];
	snprintf(name, sizeof(name), "model ac=%s loss=%s", ac_str(ac),
		 loss == LOSS_FULL ? "full" : "chunked");

	float *params = hnew(P), *grads = hnew(P);
	struct ref_model rm;
	cuda_assert(ref_model_init(&rm, &m, params, grads) == 0);
	ref_init_params(&rm, 1.0f, rng);
	round_bf16(params, P);
	int *tokens = malloc(N * sizeof(int)), *targets = malloc(N * sizeof(int));
	cuda_assert(tokens && targets);
	ref_fill_tokens(tokens, N, m.vocab, rng);
	ref_fill_tokens(targets, N, m.vocab, rng);
	struct ref_acts *ra = ref_acts_new(&m, B, ac, loss, chunk);
	cuda_assert(ra != NULL);
	float loss_ref = ref_model_forward(&rm, ra, tokens, targets);
	size_t nlog = (size_t)N * m.vocab;
	float *logits_ref = loss == LOSS_FULL ? copy_of(ra->head.logits, nlog) : NULL;
	ref_model_backward(&rm, ra, tokens, targets);

	cuda_assert(cuda_model_elems(&m) == P);
	cuda_ctx_reserve(ctx, cuda_scratch_bytes(&m, B));
	bf16 *d_params = dev_bf16(params, P);
	float *d_grads = dalloc(P * sizeof(float)), *d_loss = dalloc(sizeof(float));
	cudaCheck(cudaMemsetAsync(d_grads, 0, P * sizeof(float), stream));
	int *d_tok = dev_int(tokens, N), *d_tgt = dev_int(targets, N);
	struct cuda_model cm;
	cuda_assert(cuda_model_init(&cm, &m, d_params, d_grads) == 0);
	struct cuda_acts *ca = cuda_acts_new(&m, B, ac, loss, chunk);
	cuda_assert(ca != NULL);
	poison(ca->buf, ca->bytes);
	cuda_model_forward(ctx, d_loss, &cm, ca, d_tok, d_tgt, stream);
	if (loss == LOSS_FULL) { /* backward turns them into dlogits */
		char ln[128];
		snprintf(ln, sizeof(ln), "%s logits", name);
		check(ln, down_f32(ca->head.logits, nlog), logits_ref, nlog, 1e-2);
	}
	cuda_model_backward(ctx, &cm, ca, d_tok, d_tgt, stream);
	float *loss_got = down_f32(d_loss, 1), *g = down_f32(d_grads, P);

	struct err el = compare(loss_got, &loss_ref, 1);
	size_t vd = (size_t)m.vocab * m.hidden;
	struct err ee = compare(g, rm.d_embed, vd);
	struct err eo = compare(g + (rm.d_w_out - grads), rm.d_w_out, vd);
	struct err en = compare(g + (rm.d_final_norm - grads), rm.d_final_norm, (size_t)m.hidden);
	int ok = err_ok(el, 1e-2) && err_ok(ee, 3e-2) && err_ok(eo, 3e-2) && err_ok(en, 3e-2);
	report(ok, name, "loss %.4f vs %.4f; grad rel: embed %.1e, out %.1e, final norm %.1e (tol 3e-2)",
	       loss_got[0], loss_ref, ee.rel, eo.rel, en.rel);
	for (int l = 0; l < m.layers; l++) {
		char bn[160];
		snprintf(bn, sizeof(bn), "%s block %d grads", name, l);
		check_block_grads(bn, &m, g + (rm.d_blocks[l] - grads), rm.d_blocks[l], 3e-2);
	}
	cuda_acts_free(ca);
	cuda_model_release(&cm);
	ref_acts_free(ra);
	ref_model_release(&rm);
	free(tokens);
	free(targets);
}

static void test_model(void)
{
	model_case(AC_NONE, LOSS_FULL);
	model_case(AC_FULL, LOSS_CHUNKED);
	model_case(AC_SELECTIVE, LOSS_FULL);
	model_case(AC_SELECTIVE, LOSS_CHUNKED);
}

static void test_shapes(void)
{
	char err[256];
	struct model_shape ok = { "ok", 2, 512, 1024, 8, 2, 1024, 128, 500000.0 };   /* Q 64 */
	struct model_shape q24 = { "q24", 2, 96, 256, 4, 2, 256, 64, 500000.0 };     /* Q 24 */
	struct model_shape q256 = { "q256", 2, 1024, 256, 4, 2, 256, 64, 500000.0 }; /* Q 256 */
	struct model_shape f12 = { "f12", 2, 128, 252, 4, 2, 256, 64, 500000.0 };    /* F % 8 */
	int r = cuda_shape_check(&ok, err, sizeof(err));
	report(r == 0, "shape check accepts head dim 64", "%s", r ? err : "");
	r = cuda_shape_check(&q24, err, sizeof(err));
	report(r != 0, "shape check refuses head dim 24", "%s", err);
	r = cuda_shape_check(&q256, err, sizeof(err));
	report(r != 0, "shape check refuses head dim 256", "%s", err);
	r = cuda_shape_check(&f12, err, sizeof(err));
	report(r != 0, "shape check refuses ffn 252", "%s", err);
}

/* ---- one kernel of the lists alone (gpu_run --calibrate) ------------------------------------- */

/* Row-major D (M, N) = op(A) op(B) (+ C) on the host, in double, from the plan's operands. */
static float *host_gemm(const struct cuda_kernel_plan *p, const float *A, const float *B, const float *C)
{
	float *D = hnew((size_t)p->M * (size_t)p->ldd);
	for (int i = 0; i < p->M; i++)
		for (int j = 0; j < p->N; j++) {
			double acc = C ? C[(size_t)i * p->ldd + j] : 0.0;
			for (int k = 0; k < p->K; k++) {
				float a = p->ta ? A[(size_t)k * p->lda + i] : A[(size_t)i * p->lda + k];
				float b = p->tb ? B[(size_t)j * p->ldb + k] : B[(size_t)k * p->ldb + j];
				acc += (double)a * b;
			}
			D[(size_t)i * p->ldd + j] = (float)acc;
		}
	return D;
}

/* Download n elements of a bf16 or fp32 operand. */
static float *down_elems(const void *d, size_t n, int fp32)
{
	return fp32 ? down_f32((const float *)d, n) : down_bf16((const bf16 *)d, n);
}

/*
 * Every kernel of the tiny model's lists, as gpu_run's calibration runs it
 * (cuda_kernel.h), with fp32 and bf16 parameter gradients: each runs on
 * finite random operands and leaves its output finite; a GEMM's output is
 * the product its plan describes (layouts, transposes, the residual and
 * the accumulation), computed here from the same operands.
 */
static void test_kernels(void)
{
	struct model_shape m = tiny_shape();
	struct kernel ks[MODEL_MAX_KERNELS];
	int n_ok = 0, n_bad = 0, n_gemm = 0, *ids = dalloc(sizeof(int) * (size_t)m.seq);
	double worst = 0;
	char err[256], first_bad[128] = "";

	cuda_kernel_fill(NULL, 0, ids, m.seq, m.vocab, 0, stream);
	for (int sk = 0; sk < SEG_KIND_COUNT; sk++)
		for (int ph = 0; ph < PH_COUNT; ph++)
			for (int loss = 0; loss < LOSS_COUNT; loss++) {
				int nk = model_segment_kernels(&m, 1, sk, ph, AC_FULL, loss, 2, ks, MODEL_MAX_KERNELS);
				for (int i = 0; i < nk; i++)
					for (int gb = 0; gb < 2; gb++) {
						struct cuda_kernel_plan p;
						void *w;
						float *A = NULL, *B = NULL, *C = NULL, *D, *want = NULL;
						int ok = 1;
						if (cuda_kernel_plan(&ks[i], &m, 1, gb, &p, err, sizeof err) != 0) {
							report(0, "kernel plan", "%s", err);
							continue;
						}
						w = dalloc(cuda_kernel_bytes(&p) + 256);
						cuda_kernel_fill(w, cuda_kernel_bytes(&p), NULL, 0, 0, (uint64_t)i, stream);
						if (p.form == CUDA_KF_GEMM) {
							size_t na = (size_t)(p.ta ? p.K : p.M) * p.lda, nb = (size_t)(p.tb ? p.N : p.K) * p.ldb;
							int dfp32 = p.d_fp32 || (p.d_grad && !gb);
							A = down_bf16((const bf16 *)w, na);
							B = down_bf16((const bf16 *)((char *)w + cuda_kernel_offset(&p, 1)), nb);
							if (p.d_grad)
								C = down_elems((char *)w + cuda_kernel_offset(&p, 2),
									       (size_t)p.M * p.ldd, dfp32);
							else if (p.residual)
								C = down_bf16((const bf16 *)((char *)w + cuda_kernel_offset(&p, 3)),
									      (size_t)p.M * p.ldd);
							want = host_gemm(&p, A, B, C);
							cuda_kernel_run(ctx, &p, w, ids, stream);
							D = down_elems((char *)w + cuda_kernel_offset(&p, 2), (size_t)p.M * p.ldd, dfp32);
							struct err e = compare(D, want, (size_t)p.M * p.ldd);
							ok = err_ok(e, 1e-2);
							if (e.rel > worst)
								worst = e.rel;
							n_gemm++;
						} else {
							cuda_kernel_run(ctx, &p, w, ids, stream);
							/* the first operand is each form's output; the loss backward's is its bf16 rows over the logits */
							if (p.form == CUDA_KF_LOSS_BWD) {
								D = down_bf16_strided((const bf16 *)((char *)w + cuda_kernel_offset(&p, 2)),
										      (size_t)p.chunk, (size_t)m.vocab, 2 * (size_t)m.vocab);
								for (size_t j = 0; j < (size_t)p.chunk * m.vocab && ok; j++)
									ok = isfinite(D[j]);
							} else if (p.noperands > 0) {
								int fp32 = p.form == CUDA_KF_LOSS || p.form == CUDA_KF_LOSS_BWD ||
									   (p.form == CUDA_KF_EMBED_BWD && !gb);
								size_t n = p.bytes[0] / (fp32 ? 4 : 2);
								D = down_elems(w, n, fp32);
								for (size_t j = 0; j < n && ok; j++)
									ok = isfinite(D[j]);
							}
						}
						cudaCheck(cudaStreamSynchronize(stream));
						if (ok) {
							n_ok++;
						} else {
							n_bad++;
							if (!first_bad[0])
								snprintf(first_bad, sizeof first_bad, "%s (grads %s)", ks[i].name,
									 gb ? "bf16" : "fp32");
						}
					}
			}
	report(n_bad == 0 && n_ok > 0, "every kernel of the lists alone",
	       "%d ran, %d GEMMs against the host (worst rel %.2e, tol 1e-02)%s%s", n_ok + n_bad, n_gemm, worst,
	       n_bad ? "; first wrong: " : "", first_bad);
}

/* ---- driver ------------------------------------------------------------------------------- */

struct group {
	const char *name;
	void (*run)(void);
	int host;  /* needs no device */
};

int main(int argc, char **argv)
{
	static const struct group groups[] = {
		{ "shapes", test_shapes, 0 },     { "embedding", test_embedding, 0 },
		{ "rmsnorm", test_rmsnorm, 0 },   { "linear", test_linear, 0 },
		{ "rope", test_rope, 0 },         { "attention", test_attention, 0 },
		{ "swiglu", test_swiglu, 0 },     { "cross_entropy", test_cross_entropy, 0 },
		{ "lm_loss", test_lm_loss, 0 },   { "adamw", test_adamw, 0 },
		{ "block", test_block, 0 },       { "model", test_model, 0 },
		{ "kernels", test_kernels, 0 },
		/* last: a fault inside cuDNN's graphs (never run on a GPU in some forms) loses no other group */
		{ "cudnn", test_cudnn, 0 },       { "cudnn_ops", test_cudnn_ops, 1 },
	};
	const char *filter = argc > 1 ? argv[1] : NULL;
	int ndevices = 0;
	cudaError_t e = cudaGetDeviceCount(&ndevices);
	if (e != cudaSuccess || ndevices == 0) {
		int ran = 0;
		printf("gpu_test: no CUDA device (%s): only the checks that need none; the CPU backend "
		       "runs without one (./gpu_run --device cpu)\n",
		       e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++)
			if (groups[i].host && (!filter || strstr(groups[i].name, filter))) {
				groups[i].run();
				ran = 1;
			}
		/* not the device run's summary line, which says the model was checked */
		if (ran)
			printf("without a device: %d passed, %d failed\n", passed, failed);
		return failed ? 1 : 0;
	}
	struct cudaDeviceProp prop;
	cudaCheck(cudaGetDeviceProperties(&prop, 0));
	printf("gpu_test on %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
	       prop.multiProcessorCount);

	rng = gsl_rng_alloc(gsl_rng_mt19937);
	gsl_rng_set(rng, 20240601);
	cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
	ctx = cuda_ctx_new(1 << 20);
	for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++) {
		if (filter && !strstr(groups[i].name, filter))
			continue;
		groups[i].run();
		cudaCheck(cudaStreamSynchronize(stream));
		release_all();
	}
	cuda_ctx_free(ctx);
	cudaCheck(cudaStreamDestroy(stream));
	gsl_rng_free(rng);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
