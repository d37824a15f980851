/*
 * ctx.cu - the CUDA context (cuBLASLt handle, GEMM workspace, plan cache,
 * scratch), the kernel timing hooks, the failure path of the check macros
 * and the shape checks.
 *
 * Invariants: a context's workspace and scratch are used by one stream at a
 * time; profiling entries come in begin/end pairs on the stream of the
 * kernel they time. The timing entries grow on demand (doubling), so any
 * number of kernels may be timed between two reads: 32 blocks with full
 * recomputation time about 700 kernels in one backward.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- failures ------------------------------------------------------------------ */

static void abort_default(int code)
{
	(void)code;
	abort();
}

static cuda_abort_fn abort_hook = abort_default;

void cuda_set_abort(cuda_abort_fn fn)
{
	abort_hook = fn ? fn : abort_default;
}

void cuda_fail(const char *lib, const char *call, const char *what, const char *file, int line)
{
	fprintf(stderr, "%s:%d: %s error in `%s`: %s\n", file, line, lib, call, what);
	fflush(stderr);
	abort_hook(1);
	abort(); /* a hook that returns is a bug too */
}

/* ---- context ------------------------------------------------------------------- */

/* At least cap timing entries, each with its two events (made here, no synchronization). */
static void prof_grow(struct cuda_ctx *ctx, int cap)
{
	if (cap <= ctx->prof_cap)
		return;
	struct prof_entry *p = (struct prof_entry *)realloc(ctx->prof, sizeof(*p) * (size_t)cap);
	cuda_assert(p != NULL);
	for (int i = ctx->prof_cap; i < cap; i++) {
		cudaCheck(cudaEventCreate(&p[i].start));
		cudaCheck(cudaEventCreate(&p[i].stop));
	}
	ctx->prof = p;
	ctx->prof_cap = cap;
}

struct cuda_ctx *cuda_ctx_new(size_t scratch_bytes)
{
	struct cuda_ctx *ctx = (struct cuda_ctx *)calloc(1, sizeof(*ctx));
	cuda_assert(ctx != NULL);
	cublasCheck(cublasLtCreate(&ctx->lt));
	cudaCheck(cudaMalloc(&ctx->workspace, GEMM_WORKSPACE_BYTES));
	cuda_ctx_reserve(ctx, scratch_bytes);
	prof_grow(ctx, PROF_FIRST);
	return ctx;
}

void cuda_driver_version(char *out, size_t len)
{
	FILE *f = fopen("/proc/driver/nvidia/version", "r");
	char line[512];

	snprintf(out, len, "unknown");
	if (!f)
		return;
	if (fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "Kernel Module");
		while (p && *p) {
			size_t n;
			p += strcspn(p, "0123456789");
			n = strspn(p, "0123456789.");
			if (n > 0 && memchr(p, '.', n) && (p[n] == ' ' || p[n] == '\t' || p[n] == '\n' || !p[n])) {
				snprintf(out, len, "%.*s", (int)n, p);
				break;
			}
			p += n ? n : strlen(p);
		}
	}
	fclose(f);
}

void cuda_ctx_free(struct cuda_ctx *ctx)
{
	if (!ctx)
		return;
	cudaCheck(cudaDeviceSynchronize());
	cudnn_sdpa_free(ctx->sdpa);
	for (int i = 0; i < ctx->nplans; i++)
		gemm_plan_destroy(&ctx->plans[i]);
	for (int i = 0; i < ctx->prof_cap; i++) {
		cudaCheck(cudaEventDestroy(ctx->prof[i].stop));
		cudaCheck(cudaEventDestroy(ctx->prof[i].start));
	}
	free(ctx->prof);
	cudaCheck(cudaFree(ctx->scratch));
	cudaCheck(cudaFree(ctx->workspace));
	cublasCheck(cublasLtDestroy(ctx->lt));
	free(ctx);
}

void cuda_ctx_reserve(struct cuda_ctx *ctx, size_t bytes)
{
	if (bytes <= ctx->scratch_bytes)
		return;
	cudaCheck(cudaDeviceSynchronize());
	cudaCheck(cudaFree(ctx->scratch));
	ctx->scratch = NULL;
	cudaCheck(cudaMalloc(&ctx->scratch, bytes));
	ctx->scratch_bytes = bytes;
}

void cuda_ctx_grad_bf16(struct cuda_ctx *ctx, int on)
{
	ctx->grad_bf16 = on != 0;
}

void cuda_ctx_attention(struct cuda_ctx *ctx, enum cuda_attention a)
{
	ctx->attention = a;
}

enum cuda_attention cuda_ctx_attention_used(const struct cuda_ctx *ctx, const char **msg)
{
	if (msg)
		*msg = ctx->attention_msg;
	return (enum cuda_attention)ctx->attention_used;
}

const char *cuda_ctx_attention_mask(const struct cuda_ctx *ctx)
{
	return cudnn_sdpa_mask(ctx->sdpa);
}

void cuda_ctx_attention_gqa_repeat(struct cuda_ctx *ctx, int on)
{
	ctx->gqa_repeat = on != 0;
}

void cuda_ctx_attention_mask_float(struct cuda_ctx *ctx, int on)
{
	ctx->mask_float = on != 0;
}

const char *cuda_ctx_attention_gqa(const struct cuda_ctx *ctx, const char **why)
{
	return cudnn_sdpa_gqa(ctx->sdpa, why);
}

void cuda_ctx_gemm_autotune(struct cuda_ctx *ctx, int on)
{
	ctx->autotune = on != 0;
}

void *ctx_scratch(struct cuda_ctx *ctx, size_t bytes)
{
	if (bytes > ctx->scratch_bytes) {
		char msg[128];
		snprintf(msg, sizeof(msg), "needs %zu bytes of context scratch, has %zu "
			 "(size it with cuda_scratch_bytes)", bytes, ctx->scratch_bytes);
		cuda_fail("invariant", "ctx_scratch", msg, __FILE__, __LINE__);
	}
	return ctx->scratch;
}

size_t cuda_attention_scratch_bytes(int B, int T, int H, int Q)
{
	size_t N = (size_t)B * T;
	return align256(N * H * Q * sizeof(float)) + align256((size_t)B * H * T * sizeof(float));
}

size_t cuda_scratch_bytes(const struct model_shape *m, int B)
{
	size_t attn = cuda_attention_scratch_bytes(B, m->seq, m->heads, model_head_dim(m));
	size_t loss = align256((size_t)B * m->seq * sizeof(float)); /* per-row losses */
	size_t norm = align256((size_t)m->hidden * sizeof(float));  /* a norm weight's fp32 gradient */
	size_t most = attn > loss ? attn : loss;
	return most > norm ? most : norm;
}

/* ---- profiling ----------------------------------------------------------------- */

void cuda_ctx_profile(struct cuda_ctx *ctx, int on)
{
	ctx->prof_on = on;
}

void prof_begin(struct cuda_ctx *ctx, cudaStream_t st, const char *name)
{
	if (!ctx->prof_on)
		return;
	if (ctx->nprof == ctx->prof_cap)
		prof_grow(ctx, 2 * ctx->prof_cap);
	struct prof_entry *e = &ctx->prof[ctx->nprof];
	e->name = name;
	cudaCheck(cudaEventRecord(e->start, st));
}

void prof_end(struct cuda_ctx *ctx, cudaStream_t st)
{
	if (!ctx->prof_on)
		return;
	cudaCheck(cudaEventRecord(ctx->prof[ctx->nprof].stop, st));
	ctx->nprof++;
}

int cuda_ctx_profile_count(const struct cuda_ctx *ctx)
{
	return ctx->nprof;
}

int cuda_ctx_profile_read(struct cuda_ctx *ctx, struct cuda_kernel_time *out, int max)
{
	int n = ctx->nprof < max ? ctx->nprof : max;
	for (int i = 0; i < n; i++) {
		struct prof_entry *e = &ctx->prof[i];
		cudaCheck(cudaEventSynchronize(e->stop));
		snprintf(out[i].name, sizeof(out[i].name), "%.23s", e->name);
		cudaCheck(cudaEventElapsedTime(&out[i].ms, e->start, e->stop));
	}
	ctx->nprof = 0;
	return n;
}

/* ---- shapes --------------------------------------------------------------------- */

int cuda_attention_supported(int Q)
{
	return Q == 16 || Q == 32 || Q == 64 || Q == 128;
}

int cuda_shape_check(const struct model_shape *m, char *err, int errlen)
{
	if (model_check(m, err, errlen) != 0)
		return -1;
	int Q = model_head_dim(m);
	if (!cuda_attention_supported(Q)) {
		snprintf(err, errlen, "head dim hidden/heads = %d is not supported by the CUDA "
			 "attention kernel (allowed: 16, 32, 64, 128)", Q);
		return -1;
	}
	if (m->hidden % 8 || m->ffn % 8 || m->vocab % 8) {
		snprintf(err, errlen, "hidden (%d), ffn (%d) and vocab (%d) must be multiples of 8 "
			 "for the CUDA kernels' 16-byte accesses", m->hidden, m->ffn, m->vocab);
		return -1;
	}
	return 0;
}
