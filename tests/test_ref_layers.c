/*
 * test_ref_layers.c - the layers of the fp32 reference (gpu/ref):
 * analytic gradients against central finite differences, plus the
 * properties a gradient check cannot see (rope's convention, attention's
 * forward values and causality, chunked loss equal to full loss).
 *
 * Gradient checks use a scalar objective sum(out * r), r fixed random
 * weights, evaluated in double from the float forward. Inputs are O(1) and
 * the step is eps = 1e-2, so the truncation error eps^2/6 f''' is about
 * 2e-5 relative; fp32 rounding of the forward (about 1e-7 relative per
 * output, summed over at most a few hundred outputs) divided by 2 eps
 * gives about 1e-4 of the largest gradient. An entry passes when
 *   |analytic - fd| <= 1e-2 |analytic| + 1e-3 max|analytic|,
 * an order of magnitude above both (the worst entries measured sit at
 * 1e-4 or less of max|analytic|) and far below what a wrong term in a
 * backward would produce.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>
#include <gsl/gsl_rng.h>

#include "ref.h"
#include "ref_check.h"
#include "ref_init.h"
#include "testutil.h"

/* Test sizes: N = 10 tokens, GQA with two query heads per kv head. */
enum { B = 2, T = 5, N = B * T, H = 4, KV = 2, Q = 4, D = H * Q, F = 12, V = 11 };
enum { QKV = (H + 2 * KV) * Q };

static const struct ref_check check_tol = { .eps = 1e-2f, .rtol = 1e-2, .atol = 1e-3 };

static float *normal_new(size_t n, float mean, float std, gsl_rng *r)
{
	float *p = malloc(n * sizeof(float));
	ref_fill_normal(p, n, mean, std, r);
	return p;
}

static double weighted_sum(const float *out, const float *w, size_t n)
{
	double s = 0.0;
	for (size_t i = 0; i < n; i++)
		s += (double)out[i] * w[i];
	return s;
}

/* ---- embedding ----------------------------------------------------------- */

struct embed_ctx {
	int tokens[N];
	float *wte, *out, *r;
};

static double embed_obj(void *p)
{
	struct embed_ctx *c = p;
	ref_embedding_forward(c->out, c->tokens, c->wte, N, D);
	return weighted_sum(c->out, c->r, (size_t)N * D);
}

static void test_embedding(void)
{
	gsl_rng *r = test_rng(1);
	struct embed_ctx c;
	ref_fill_tokens(c.tokens, N, V, r);
	c.tokens[7] = c.tokens[2]; /* a repeated token: backward must add, not store */
	c.wte = normal_new((size_t)V * D, 0, 1, r);
	c.out = malloc((size_t)N * D * sizeof(float));
	c.r = normal_new((size_t)N * D, 0, 1, r);
	float *dwte = calloc((size_t)V * D, sizeof(float));

	embed_obj(&c);
	CU_ASSERT_EQUAL(memcmp(c.out + 7 * D, c.wte + (size_t)c.tokens[7] * D, D * sizeof(float)), 0);
	ref_embedding_backward(dwte, c.r, c.tokens, N, D);
	CU_ASSERT_EQUAL(ref_check_grad("embedding dwte", c.wte, dwte, (size_t)V * D, embed_obj, &c,
				       &check_tol), 0);
	CU_ASSERT_DOUBLE_EQUAL(dwte[(size_t)c.tokens[2] * D], c.r[2 * D] + c.r[7 * D], 1e-6);

	free(dwte);
	free(c.r);
	free(c.out);
	free(c.wte);
	gsl_rng_free(r);
}

/* ---- RMSNorm ------------------------------------------------------------- */

struct norm_ctx {
	float *x, *w, *out, *rstd, *r;
};

static double norm_obj(void *p)
{
	struct norm_ctx *c = p;
	ref_rmsnorm_forward(c->out, c->rstd, c->x, c->w, N, D);
	return weighted_sum(c->out, c->r, (size_t)N * D);
}

static void test_rmsnorm(void)
{
	gsl_rng *r = test_rng(2);
	size_t nd = (size_t)N * D;
	struct norm_ctx c = {
		.x = normal_new(nd, 0, 1, r), .w = normal_new(D, 1, 0.2f, r),
		.out = malloc(nd * sizeof(float)), .rstd = malloc(N * sizeof(float)),
		.r = normal_new(nd, 0, 1, r),
	};
	float *dx = malloc(nd * sizeof(float)), *dw = calloc(D, sizeof(float));
	float *dx2 = malloc(nd * sizeof(float)), *dw2 = calloc(D, sizeof(float));

	norm_obj(&c);
	double ms = 0.0;
	for (int i = 0; i < D; i++)
		ms += (double)c.x[i] * c.x[i];
	CU_ASSERT_DOUBLE_EQUAL(c.rstd[0], 1.0 / sqrt(ms / D + 1e-5), 1e-6);
	ref_rmsnorm_backward(dx, dw, c.r, c.x, c.w, c.rstd, N, D);
	CU_ASSERT_EQUAL(ref_check_grad("rmsnorm dx", c.x, dx, nd, norm_obj, &c, &check_tol), 0);
	CU_ASSERT_EQUAL(ref_check_grad("rmsnorm dw", c.w, dw, D, norm_obj, &c, &check_tol), 0);

	/* in place: dx aliasing dout gives the same numbers */
	memcpy(dx2, c.r, nd * sizeof(float));
	ref_rmsnorm_backward(dx2, dw2, dx2, c.x, c.w, c.rstd, N, D);
	CU_ASSERT_EQUAL(memcmp(dx, dx2, nd * sizeof(float)), 0);

	free(dw2);
	free(dx2);
	free(dw);
	free(dx);
	free(c.r);
	free(c.rstd);
	free(c.out);
	free(c.w);
	free(c.x);
	gsl_rng_free(r);
}

/* ---- linear -------------------------------------------------------------- */

struct linear_ctx {
	float *x, *w, *out, *r;
};

enum { OC = 12 };

static double linear_obj(void *p)
{
	struct linear_ctx *c = p;
	ref_linear_forward(c->out, c->x, c->w, N, D, OC);
	return weighted_sum(c->out, c->r, (size_t)N * OC);
}

static void test_linear(void)
{
	gsl_rng *r = test_rng(3);
	struct linear_ctx c = {
		.x = normal_new((size_t)N * D, 0, 1, r), .w = normal_new((size_t)OC * D, 0, 0.25f, r),
		.out = malloc((size_t)N * OC * sizeof(float)), .r = normal_new((size_t)N * OC, 0, 1, r),
	};
	float *dx = malloc((size_t)N * D * sizeof(float));
	float *dw = calloc((size_t)OC * D, sizeof(float));
	float *dw1 = malloc((size_t)OC * D * sizeof(float));

	linear_obj(&c);
	double y = 0.0;
	for (int i = 0; i < D; i++)
		y += (double)c.x[D + i] * c.w[2 * D + i];
	CU_ASSERT_DOUBLE_EQUAL(c.out[OC + 2], y, 1e-5);
	ref_linear_backward(dx, dw, c.r, c.x, c.w, N, D, OC);
	CU_ASSERT_EQUAL(ref_check_grad("linear dx", c.x, dx, (size_t)N * D, linear_obj, &c,
				       &check_tol), 0);
	CU_ASSERT_EQUAL(ref_check_grad("linear dw", c.w, dw, (size_t)OC * D, linear_obj, &c,
				       &check_tol), 0);

	/* dw accumulates; dx NULL skips the input gradient */
	for (int i = 0; i < OC * D; i++)
		dw1[i] = 1.0f;
	ref_linear_backward(NULL, dw1, c.r, c.x, c.w, N, D, OC);
	for (int i = 0; i < OC * D; i++)
		dw1[i] -= 1.0f;
	CU_ASSERT(test_max_abs_diff(dw1, dw, (size_t)OC * D) < 1e-5);

	free(dw1);
	free(dw);
	free(dx);
	free(c.r);
	free(c.out);
	free(c.w);
	free(c.x);
	gsl_rng_free(r);
}

/* ---- rope ---------------------------------------------------------------- */

/* Llama 2's base, not the 500000 of Llama 3 that every catalog model but llama2-7b uses */
#define ROPE_THETA 10000.0f

struct rope_ctx {
	float *qkv, *out, *r;
};

static double rope_obj(void *p)
{
	struct rope_ctx *c = p;
	memcpy(c->out, c->qkv, (size_t)N * QKV * sizeof(float));
	ref_rope_forward(c->out, B, T, H, KV, Q, ROPE_THETA);
	return weighted_sum(c->out, c->r, (size_t)N * QKV);
}

static void test_rope(void)
{
	gsl_rng *r = test_rng(4);
	size_t n = (size_t)N * QKV;
	struct rope_ctx c = {
		.qkv = normal_new(n, 0, 1, r), .out = malloc(n * sizeof(float)),
		.r = normal_new(n, 0, 1, r),
	};
	float *d = malloc(n * sizeof(float));

	/* rotate-half convention: e_0 at position t goes to cos t e_0 + sin t e_{Q/2}
	 * (frequency theta^0 = 1); dims (1, 1 + Q/2) turn at theta^(-2/Q). */
	float *one = calloc((size_t)T * QKV, sizeof(float));
	for (int t = 0; t < T; t++) {
		one[t * QKV + 0] = 1.0f;         /* head 0 (query), dim 0 */
		one[t * QKV + H * Q + 1] = 1.0f; /* head H (first key), dim 1 */
		one[t * QKV + (H + KV) * Q] = 1.0f; /* first value head: untouched */
	}
	ref_rope_forward(one, 1, T, H, KV, Q, ROPE_THETA);
	double f1 = pow(ROPE_THETA, -2.0 / Q);
	for (int t = 0; t < T; t++) {
		CU_ASSERT_DOUBLE_EQUAL(one[t * QKV + 0], cos(t), 1e-6);
		CU_ASSERT_DOUBLE_EQUAL(one[t * QKV + Q / 2], sin(t), 1e-6);
		CU_ASSERT_DOUBLE_EQUAL(one[t * QKV + H * Q + 1], cos(t * f1), 1e-6);
		CU_ASSERT_DOUBLE_EQUAL(one[t * QKV + H * Q + 1 + Q / 2], sin(t * f1), 1e-6);
		CU_ASSERT_EQUAL(one[t * QKV + (H + KV) * Q], 1.0f);
	}
	/* the base given is the one used: at 500000 dim 1 turns slower */
	for (int t = 0; t < T; t++)
		one[t * QKV + H * Q + 1] = 1.0f, one[t * QKV + H * Q + 1 + Q / 2] = 0.0f;
	ref_rope_forward(one, 1, T, H, KV, Q, 500000.0f);
	f1 = pow(500000.0, -2.0 / Q);
	for (int t = 0; t < T; t++)
		CU_ASSERT_DOUBLE_EQUAL(one[t * QKV + H * Q + 1 + Q / 2], sin(t * f1), 1e-6);

	/* position 0 and the value heads are left exactly as they were */
	rope_obj(&c);
	CU_ASSERT_EQUAL(memcmp(c.out, c.qkv, QKV * sizeof(float)), 0);
	for (int k = 0; k < N; k++)
		CU_ASSERT_EQUAL(memcmp(c.out + k * QKV + (H + KV) * Q, c.qkv + k * QKV + (H + KV) * Q,
				       KV * Q * sizeof(float)), 0);

	memcpy(d, c.r, n * sizeof(float));
	ref_rope_backward(d, B, T, H, KV, Q, ROPE_THETA);
	CU_ASSERT_EQUAL(ref_check_grad("rope dqkv", c.qkv, d, n, rope_obj, &c, &check_tol), 0);

	free(one);
	free(d);
	free(c.r);
	free(c.out);
	free(c.qkv);
	gsl_rng_free(r);
}

/* ---- attention ----------------------------------------------------------- */

struct attn_ctx {
	float *qkv, *out, *lse, *r;
};

static double attn_obj(void *p)
{
	struct attn_ctx *c = p;
	ref_attention_forward(c->out, c->lse, c->qkv, B, T, H, KV, Q);
	return weighted_sum(c->out, c->r, (size_t)N * H * Q);
}

/* Attention the textbook way, in double with an explicit score row. */
static void attention_naive(double *out, double *lse, const float *qkv)
{
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++)
			for (int t = 0; t < T; t++) {
				const float *q = qkv + (b * T + t) * QKV + h * Q;
				double s[T], mx = -INFINITY, sum = 0.0;
				for (int j = 0; j <= t; j++) {
					const float *k = qkv + (b * T + j) * QKV + (H + h / (H / KV)) * Q;
					s[j] = 0.0;
					for (int i = 0; i < Q; i++)
						s[j] += (double)q[i] * k[i];
					s[j] /= sqrt(Q);
					mx = fmax(mx, s[j]);
				}
				for (int j = 0; j <= t; j++)
					sum += exp(s[j] - mx);
				double *o = out + (b * T + t) * H * Q + h * Q;
				for (int i = 0; i < Q; i++)
					o[i] = 0.0;
				for (int j = 0; j <= t; j++) {
					const float *v = qkv + (b * T + j) * QKV + (H + KV + h / (H / KV)) * Q;
					for (int i = 0; i < Q; i++)
						o[i] += exp(s[j] - mx) / sum * v[i];
				}
				lse[(b * H + h) * T + t] = mx + log(sum);
			}
}

static void test_attention(void)
{
	gsl_rng *r = test_rng(5);
	size_t n = (size_t)N * QKV, no = (size_t)N * H * Q;
	struct attn_ctx c = {
		.qkv = normal_new(n, 0, 1, r), .out = malloc(no * sizeof(float)),
		.lse = malloc((size_t)B * H * T * sizeof(float)), .r = normal_new(no, 0, 1, r),
	};
	float *d = malloc(n * sizeof(float));
	double out[N * H * Q], lse[B * H * T];

	attn_obj(&c);
	attention_naive(out, lse, c.qkv);
	double err = 0.0;
	for (size_t i = 0; i < no; i++)
		err = fmax(err, fabs(out[i] - c.out[i]));
	for (int i = 0; i < B * H * T; i++)
		err = fmax(err, fabs(lse[i] - c.lse[i]));
	CU_ASSERT(err < 1e-5);

	ref_attention_backward(d, c.r, c.qkv, c.out, c.lse, B, T, H, KV, Q);
	CU_ASSERT_EQUAL(ref_check_grad("attention dqkv", c.qkv, d, n, attn_obj, &c, &check_tol), 0);

	free(d);
	free(c.r);
	free(c.lse);
	free(c.out);
	free(c.qkv);
	gsl_rng_free(r);
}

/* Changing token t's q, k and v leaves every earlier output bit for bit. */
static void test_attention_causal(void)
{
	gsl_rng *r = test_rng(6);
	size_t n = (size_t)N * QKV, no = (size_t)N * H * Q;
	float *qkv = normal_new(n, 0, 1, r);
	float *out = malloc(no * sizeof(float)), *out2 = malloc(no * sizeof(float));
	float *lse = malloc((size_t)B * H * T * sizeof(float));
	int t = 3;

	ref_attention_forward(out, lse, qkv, B, T, H, KV, Q);
	for (int b = 0; b < B; b++)
		ref_fill_normal(qkv + (b * T + t) * QKV, QKV, 0, 3, r);
	ref_attention_forward(out2, lse, qkv, B, T, H, KV, Q);
	for (int b = 0; b < B; b++) {
		size_t row0 = (size_t)b * T * H * Q;
		CU_ASSERT_EQUAL(memcmp(out + row0, out2 + row0, (size_t)t * H * Q * sizeof(float)), 0);
		/* and the changed token's own output does change */
		CU_ASSERT(test_max_abs_diff(out + row0 + t * H * Q, out2 + row0 + t * H * Q, H * Q) > 1e-3);
	}

	free(lse);
	free(out2);
	free(out);
	free(qkv);
	gsl_rng_free(r);
}

/* ---- SwiGLU -------------------------------------------------------------- */

struct swiglu_ctx {
	float *gu, *h, *r;
};

static double swiglu_obj(void *p)
{
	struct swiglu_ctx *c = p;
	ref_swiglu_forward(c->h, c->gu, N, F);
	return weighted_sum(c->h, c->r, (size_t)N * F);
}

static void test_swiglu(void)
{
	gsl_rng *r = test_rng(7);
	struct swiglu_ctx c = {
		.gu = normal_new((size_t)N * 2 * F, 0, 1.5f, r), .h = malloc((size_t)N * F * sizeof(float)),
		.r = normal_new((size_t)N * F, 0, 1, r),
	};
	float *d = malloc((size_t)N * 2 * F * sizeof(float));

	swiglu_obj(&c);
	float a = c.gu[0], u = c.gu[F];
	CU_ASSERT_DOUBLE_EQUAL(c.h[0], a / (1.0 + exp(-a)) * u, 1e-6);
	ref_swiglu_backward(d, c.r, c.gu, N, F);
	CU_ASSERT_EQUAL(ref_check_grad("swiglu dgateup", c.gu, d, (size_t)N * 2 * F, swiglu_obj, &c,
				       &check_tol), 0);

	free(d);
	free(c.r);
	free(c.h);
	free(c.gu);
	gsl_rng_free(r);
}

/* ---- cross-entropy ------------------------------------------------------- */

struct ce_ctx {
	int targets[N];
	float *logits, lse[N];
};

static double ce_obj(void *p)
{
	struct ce_ctx *c = p;
	return ref_cross_entropy_forward(c->lse, c->logits, c->targets, N, V);
}

static void test_cross_entropy(void)
{
	gsl_rng *r = test_rng(8);
	struct ce_ctx c;
	size_t n = (size_t)N * V;
	ref_fill_tokens(c.targets, N, V, r);
	c.logits = calloc(n, sizeof(float));
	float *d = malloc(n * sizeof(float));

	/* uniform logits: the loss is log V */
	CU_ASSERT_DOUBLE_EQUAL(ce_obj(&c), log(V), 1e-6);

	ref_fill_normal(c.logits, n, 0, 2, r);
	double want = 0.0;
	for (int k = 0; k < N; k++) {
		double s = 0.0;
		for (int i = 0; i < V; i++)
			s += exp(c.logits[k * V + i]);
		want += log(s) - c.logits[k * V + c.targets[k]];
	}
	CU_ASSERT_DOUBLE_EQUAL(ce_obj(&c), want / N, 1e-5);

	ref_cross_entropy_backward(d, c.logits, c.lse, c.targets, N, V, 1.0f);
	/* the loss is a mean of O(1) terms: gradients are O(1/N), check them at eps 1e-2 */
	CU_ASSERT_EQUAL(ref_check_grad("cross-entropy dlogits", c.logits, d, n, ce_obj, &c,
				       &check_tol), 0);

	/* in place, and dloss scales (the check left lse from a perturbed forward) */
	float *d2 = malloc(n * sizeof(float));
	ce_obj(&c);
	memcpy(d2, c.logits, n * sizeof(float));
	ref_cross_entropy_backward(d2, d2, c.lse, c.targets, N, V, 2.0f);
	for (size_t i = 0; i < n; i++)
		d[i] *= 2.0f;
	CU_ASSERT(test_max_abs_diff(d, d2, n) < 1e-7);

	free(d2);
	free(d);
	free(c.logits);
	gsl_rng_free(r);
}

/* ---- output projection and loss, full and chunked ------------------------ */

enum { CHUNK = 3 }; /* does not divide N: the last chunk is short */

struct lm_ctx {
	int targets[N];
	enum loss_mode mode;
	float *xn, *w, *logits, lse[N];
};

static double lm_obj(void *p)
{
	struct lm_ctx *c = p;
	return ref_lm_loss_forward(c->lse, c->logits, c->xn, c->w, c->targets, N, D, V, c->mode,
				   CHUNK);
}

static void test_lm_loss(void)
{
	gsl_rng *r = test_rng(9);
	struct lm_ctx c;
	ref_fill_tokens(c.targets, N, V, r);
	c.xn = normal_new((size_t)N * D, 0, 1, r);
	c.w = normal_new((size_t)V * D, 0, 0.5f, r);
	c.logits = malloc((size_t)N * V * sizeof(float));
	float *dx[LOSS_COUNT], *dw[LOSS_COUNT];
	double loss[LOSS_COUNT];

	for (int mode = 0; mode < LOSS_COUNT; mode++) {
		const char *name[2][LOSS_COUNT] = { { "lm loss full dxn", "lm loss chunked dxn" },
						     { "lm loss full dw", "lm loss chunked dw" } };
		c.mode = (enum loss_mode)mode;
		dx[mode] = malloc((size_t)N * D * sizeof(float));
		dw[mode] = calloc((size_t)V * D, sizeof(float));
		loss[mode] = lm_obj(&c);
		ref_lm_loss_backward(dx[mode], dw[mode], c.logits, c.xn, c.w, c.lse, c.targets, N, D, V,
				     c.mode, CHUNK);
		CU_ASSERT_EQUAL(ref_check_grad(name[0][mode], c.xn, dx[mode], (size_t)N * D, lm_obj, &c,
					       &check_tol), 0);
		CU_ASSERT_EQUAL(ref_check_grad(name[1][mode], c.w, dw[mode], (size_t)V * D, lm_obj, &c,
					       &check_tol), 0);
	}

	/* chunked equals full within 1e-5 relative */
	CU_ASSERT(fabs(loss[LOSS_CHUNKED] - loss[LOSS_FULL]) <= 1e-5 * fabs(loss[LOSS_FULL]));
	CU_ASSERT(test_max_abs_diff(dx[LOSS_CHUNKED], dx[LOSS_FULL], (size_t)N * D)
		  <= 1e-5 * test_max_abs(dx[LOSS_FULL], (size_t)N * D));
	CU_ASSERT(test_max_abs_diff(dw[LOSS_CHUNKED], dw[LOSS_FULL], (size_t)V * D)
		  <= 1e-5 * test_max_abs(dw[LOSS_FULL], (size_t)V * D));

	for (int mode = 0; mode < LOSS_COUNT; mode++) {
		free(dw[mode]);
		free(dx[mode]);
	}
	free(c.logits);
	free(c.w);
	free(c.xn);
	gsl_rng_free(r);
}

/* ---- head ---------------------------------------------------------------- */

static const struct model_shape head_shape = {
	.name = "test", .layers = 0, .hidden = D, .ffn = F, .heads = H, .kv_heads = KV,
	.vocab = V, .seq = T, .rope_theta = 500000.0,
};

struct head_ctx {
	int targets[N];
	struct ref_head_store s;
	float *x, *norm_w, *w;
};

static double head_obj(void *p)
{
	struct head_ctx *c = p;
	memcpy(c->s.x, c->x, (size_t)N * D * sizeof(float));
	return ref_head_forward(&c->s, c->norm_w, c->w, c->targets, &head_shape, B);
}

static void test_head(void)
{
	gsl_rng *r = test_rng(10);
	struct head_ctx c;
	ref_fill_tokens(c.targets, N, V, r);
	c.x = normal_new((size_t)N * D, 0, 1, r);
	c.norm_w = normal_new(D, 1, 0.2f, r);
	c.w = normal_new((size_t)V * D, 0, 0.5f, r);
	float *dx[LOSS_COUNT], *dn[LOSS_COUNT], *dw[LOSS_COUNT];
	double loss[LOSS_COUNT];

	for (int mode = 0; mode < LOSS_COUNT; mode++) {
		float *buf = malloc(ref_head_store_floats(&head_shape, B, mode, CHUNK) * sizeof(float));
		ref_head_store_init(&c.s, buf, &head_shape, B, mode, CHUNK);
		dx[mode] = malloc((size_t)N * D * sizeof(float));
		dn[mode] = calloc(D, sizeof(float));
		dw[mode] = calloc((size_t)V * D, sizeof(float));
		loss[mode] = head_obj(&c);
		ref_head_backward(dx[mode], dn[mode], dw[mode], &c.s, c.norm_w, c.w, c.targets,
				  &head_shape, B);
		CU_ASSERT_EQUAL(ref_check_grad("head dx", c.x, dx[mode], (size_t)N * D, head_obj, &c,
					       &check_tol), 0);
		CU_ASSERT_EQUAL(ref_check_grad("head dnorm", c.norm_w, dn[mode], D, head_obj, &c,
					       &check_tol), 0);
		CU_ASSERT_EQUAL(ref_check_grad("head dw_out", c.w, dw[mode], (size_t)V * D, head_obj,
					       &c, &check_tol), 0);
		free(buf);
	}
	CU_ASSERT(ref_head_store_floats(&head_shape, B, LOSS_CHUNKED, CHUNK)
		  < ref_head_store_floats(&head_shape, B, LOSS_FULL, 0));
	CU_ASSERT(fabs(loss[LOSS_CHUNKED] - loss[LOSS_FULL]) <= 1e-5 * fabs(loss[LOSS_FULL]));
	CU_ASSERT(test_max_abs_diff(dx[1], dx[0], (size_t)N * D) <= 1e-5 * test_max_abs(dx[0], (size_t)N * D));
	CU_ASSERT(test_max_abs_diff(dn[1], dn[0], D) <= 1e-5 * test_max_abs(dn[0], D));
	CU_ASSERT(test_max_abs_diff(dw[1], dw[0], (size_t)V * D) <= 1e-5 * test_max_abs(dw[0], (size_t)V * D));

	for (int mode = 0; mode < LOSS_COUNT; mode++) {
		free(dw[mode]);
		free(dn[mode]);
		free(dx[mode]);
	}
	free(c.w);
	free(c.norm_w);
	free(c.x);
	gsl_rng_free(r);
}

void suite_ref_layers(void)
{
	CU_pSuite s = CU_add_suite("ref_layers", NULL, NULL);
	CU_add_test(s, "embedding gradient, repeated tokens", test_embedding);
	CU_add_test(s, "rmsnorm gradients, in place", test_rmsnorm);
	CU_add_test(s, "linear gradients, accumulation", test_linear);
	CU_add_test(s, "rope convention and gradient", test_rope);
	CU_add_test(s, "attention (GQA) values and gradient", test_attention);
	CU_add_test(s, "attention is causal", test_attention_causal);
	CU_add_test(s, "swiglu gradient", test_swiglu);
	CU_add_test(s, "cross-entropy value and gradient", test_cross_entropy);
	CU_add_test(s, "lm loss full and chunked", test_lm_loss);
	CU_add_test(s, "head full and chunked", test_head);
}
