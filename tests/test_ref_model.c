/*
 * test_ref_model.c - one block, the whole model and AdamW of the fp32
 * reference (gpu/ref): gradients against central finite differences,
 * checkpointing modes that must agree bit for bit, chunked loss equal to
 * full loss, gradient accumulation, AdamW against hand-computed values, and
 * a tiny model that learns a fixed batch.
 *
 * Tolerances of the gradient checks are those of test_ref_layers.c: eps
 * 1e-2 on O(1) inputs, an entry passes when
 *   |analytic - fd| <= 1e-2 |analytic| + 1e-3 max|analytic|.
 * The model's objective is its float loss (about 2.4, rounding 1.5e-7),
 * so the difference quotient carries about 1e-5 of noise against
 * gradients whose largest entries are about 0.1 to 1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>
#include <gsl/gsl_rng.h>

#include "ref.h"
#include "ref_check.h"
#include "ref_init.h"
#include "testutil.h"

enum { B = 2, T = 5, N = B * T, CHUNK = 4 };

/* Two blocks, GQA with two query heads per kv head, Q = 4. */
static const struct model_shape tiny = {
	.name = "tiny", .layers = 2, .hidden = 16, .ffn = 24, .heads = 4, .kv_heads = 2,
	.vocab = 11, .seq = T, .rope_theta = 500000.0,
};

static const struct ref_check check_tol = { .eps = 1e-2f, .rtol = 1e-2, .atol = 1e-3 };

static const char *const tensor_name[BT_COUNT] = {
	"attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down",
};

/* Elements of block tensor t. */
static size_t tensor_floats(const struct model_shape *m, enum block_tensor t)
{
	return ref_block_offset(m, (enum block_tensor)(t + 1)) - ref_block_offset(m, t);
}

/*
 * A model with its parameter and gradient buffers, initialised at unit
 * scale; norm weights get noise so their gradients are not symmetric.
 */
struct fixture {
	struct ref_model model;
	float *params, *grads;
	size_t n;
	int tokens[N], targets[N];
};

static void fixture_init(struct fixture *f, const struct model_shape *m, unsigned long seed)
{
	gsl_rng *r = test_rng(seed);
	f->n = ref_model_floats(m);
	f->params = malloc(f->n * sizeof(float));
	f->grads = calloc(f->n, sizeof(float));
	ref_model_init(&f->model, m, f->params, f->grads);
	ref_init_params(&f->model, 1.0f, r);
	for (int l = 0; l < m->layers; l++) {
		ref_fill_normal(f->model.blocks[l] + ref_block_offset(m, BT_ATTN_NORM), m->hidden, 1,
				0.2f, r);
		ref_fill_normal(f->model.blocks[l] + ref_block_offset(m, BT_MLP_NORM), m->hidden, 1,
				0.2f, r);
	}
	ref_fill_normal(f->model.final_norm, m->hidden, 1, 0.2f, r);
	ref_fill_tokens(f->tokens, N, m->vocab, r);
	ref_fill_tokens(f->targets, N, m->vocab, r);
	gsl_rng_free(r);
}

static void fixture_release(struct fixture *f)
{
	ref_model_release(&f->model);
	free(f->grads);
	free(f->params);
}

/* ---- one block ----------------------------------------------------------- */

struct block_ctx {
	const struct model_shape *m;
	struct ref_block_store s;
	float *x, *params, *out, *r;
};

static double block_obj(void *p)
{
	struct block_ctx *c = p;
	size_t nd = (size_t)N * c->m->hidden;
	memcpy(c->s.x, c->x, nd * sizeof(float));
	ref_block_forward(c->out, &c->s, c->params, c->m, B);
	double sum = 0.0;
	for (size_t i = 0; i < nd; i++)
		sum += (double)c->out[i] * c->r[i];
	return sum;
}

static void test_block_grad(void)
{
	const struct model_shape *m = &tiny;
	struct fixture f;
	fixture_init(&f, m, 11);
	gsl_rng *r = test_rng(12);
	size_t nd = (size_t)N * m->hidden;
	struct block_ctx c = { .m = m, .params = f.model.blocks[0] };
	float *saved = malloc(ref_block_saved_floats(m, B, AC_NONE) * sizeof(float));
	float *scratch = malloc(ref_block_scratch_floats(m, B) * sizeof(float));
	float *dx = malloc(nd * sizeof(float));
	float *dparams = f.model.d_blocks[0];
	c.x = malloc(nd * sizeof(float));
	c.out = malloc(nd * sizeof(float));
	c.r = malloc(nd * sizeof(float));
	ref_fill_normal(c.x, nd, 0, 1, r);
	ref_fill_normal(c.r, nd, 0, 1, r);
	ref_block_store_init(&c.s, saved, NULL, m, B, AC_NONE);

	block_obj(&c);
	ref_block_backward(dx, dparams, c.r, &c.s, c.params, scratch, m, B);
	CU_ASSERT_EQUAL(ref_check_grad("block dx", c.x, dx, nd, block_obj, &c, &check_tol), 0);
	for (int t = 0; t < BT_COUNT; t++) {
		size_t off = ref_block_offset(m, (enum block_tensor)t);
		char name[64];
		snprintf(name, sizeof(name), "block d%s", tensor_name[t]);
		CU_ASSERT_EQUAL(ref_check_grad(name, c.params + off, dparams + off,
					       tensor_floats(m, (enum block_tensor)t), block_obj, &c,
					       &check_tol), 0);
	}

	free(c.r);
	free(c.out);
	free(c.x);
	free(dx);
	free(scratch);
	free(saved);
	gsl_rng_free(r);
	fixture_release(&f);
}

/*
 * The three checkpointing modes give bit-identical outputs and gradients;
 * backward must not read a transient field it did not rebuild (the
 * transient memory is poisoned with NaN between forward and backward),
 * and an explicit ref_block_recompute before backward changes nothing.
 */
static void test_block_modes(void)
{
	const struct model_shape *m = &tiny;
	struct fixture f;
	fixture_init(&f, m, 13);
	gsl_rng *r = test_rng(14);
	size_t nd = (size_t)N * m->hidden, np = ref_block_floats(m);
	float *x = malloc(nd * sizeof(float)), *dout = malloc(nd * sizeof(float));
	float *scratch = malloc(ref_block_scratch_floats(m, B) * sizeof(float));
	float *out[AC_COUNT][2], *dx[AC_COUNT][2], *dp[AC_COUNT][2];
	ref_fill_normal(x, nd, 0, 1, r);
	ref_fill_normal(dout, nd, 0, 1, r);

	CU_ASSERT_EQUAL(ref_block_saved_floats(m, B, AC_FULL), model_field_align(nd * sizeof(float)) / sizeof(float));
	CU_ASSERT(ref_block_saved_floats(m, B, AC_SELECTIVE) < ref_block_saved_floats(m, B, AC_NONE));
	CU_ASSERT(ref_block_saved_floats(m, B, AC_FULL) < ref_block_saved_floats(m, B, AC_SELECTIVE));
	CU_ASSERT_EQUAL(ref_block_transient_floats(m, B, AC_NONE), 0);

	for (int mode = 0; mode < AC_COUNT; mode++) {
		size_t ns = ref_block_saved_floats(m, B, mode);
		size_t nt = ref_block_transient_floats(m, B, mode);
		float *saved = malloc(ns * sizeof(float));
		float *transient = nt ? malloc(nt * sizeof(float)) : NULL;
		for (int explicit_recompute = 0; explicit_recompute < 2; explicit_recompute++) {
			struct ref_block_store s;
			float **o = &out[mode][explicit_recompute];
			float **d = &dx[mode][explicit_recompute];
			float **g = &dp[mode][explicit_recompute];
			*o = malloc(nd * sizeof(float));
			*d = malloc(nd * sizeof(float));
			*g = calloc(np, sizeof(float));
			ref_block_store_init(&s, saved, transient, m, B, mode);
			memcpy(s.x, x, nd * sizeof(float));
			ref_block_forward(*o, &s, f.model.blocks[0], m, B);
			for (size_t i = 0; i < nt; i++)
				transient[i] = NAN;
			if (explicit_recompute)
				ref_block_recompute(&s, f.model.blocks[0], m, B);
			ref_block_backward(*d, *g, dout, &s, f.model.blocks[0], scratch, m, B);
		}
		free(transient);
		free(saved);
	}
	for (int mode = 0; mode < AC_COUNT; mode++)
		for (int e = 0; e < 2; e++) {
			CU_ASSERT_EQUAL(memcmp(out[mode][e], out[AC_NONE][0], nd * sizeof(float)), 0);
			CU_ASSERT_EQUAL(memcmp(dx[mode][e], dx[AC_NONE][0], nd * sizeof(float)), 0);
			CU_ASSERT_EQUAL(memcmp(dp[mode][e], dp[AC_NONE][0], np * sizeof(float)), 0);
		}
	for (int mode = 0; mode < AC_COUNT; mode++)
		for (int e = 0; e < 2; e++) {
			free(out[mode][e]);
			free(dx[mode][e]);
			free(dp[mode][e]);
		}

	free(scratch);
	free(dout);
	free(x);
	gsl_rng_free(r);
	fixture_release(&f);
}

/*
 * The store's sizes are the ones core/model.c prices for the simulator:
 * saved bytes per mode, and the recompute phase's transient bytes.
 */
static void test_block_sizes(void)
{
	static const struct model_shape llama8b = {
		.name = "llama3-8b", .layers = 32, .hidden = 4096, .ffn = 14336, .heads = 32,
		.kv_heads = 8, .vocab = 128256, .seq = 8192, .rope_theta = 500000.0,
	};
	const struct model_shape *shapes[2] = { &tiny, &llama8b };
	for (int k = 0; k < 2; k++)
		for (int ac = 0; ac < AC_COUNT; ac++) {
			const struct model_shape *m = shapes[k];
			CU_ASSERT_EQUAL(4 * ref_block_saved_floats(m, B, ac),
					model_segment_saved_bytes(m, B, SEG_BLOCK, ac, LOSS_FULL, 4));
			CU_ASSERT_EQUAL(4 * ref_block_transient_floats(m, B, ac),
					model_segment_transient_bytes(m, B, SEG_BLOCK, PH_RECOMPUTE, ac,
								      LOSS_FULL, 4));
		}
}

/* ---- whole model --------------------------------------------------------- */

struct model_ctx {
	struct fixture *f;
	struct ref_acts *a;
};

static double model_obj(void *p)
{
	struct model_ctx *c = p;
	return ref_model_forward(&c->f->model, c->a, c->f->tokens, c->f->targets);
}

/* Every parameter of a two-block model, under selective checkpointing and chunked loss. */
static void test_model_grad(void)
{
	const struct model_shape *m = &tiny;
	struct fixture f;
	fixture_init(&f, m, 15);
	struct model_ctx c = { .f = &f, .a = ref_acts_new(m, B, AC_SELECTIVE, LOSS_CHUNKED, CHUNK) };
	struct ref_model *md = &f.model;
	size_t vd = (size_t)m->vocab * m->hidden;

	double loss = model_obj(&c);
	CU_ASSERT(fabs(loss - log(m->vocab)) < 1.0); /* near chance at init */
	ref_model_backward(md, c.a, f.tokens, f.targets);

	CU_ASSERT_EQUAL(ref_check_grad("model d_embed", md->embed, md->d_embed, vd, model_obj, &c,
				       &check_tol), 0);
	for (int l = 0; l < m->layers; l++)
		for (int t = 0; t < BT_COUNT; t++) {
			size_t off = ref_block_offset(m, (enum block_tensor)t);
			char name[64];
			snprintf(name, sizeof(name), "model block %d d%s", l, tensor_name[t]);
			CU_ASSERT_EQUAL(ref_check_grad(name, md->blocks[l] + off, md->d_blocks[l] + off,
						       tensor_floats(m, (enum block_tensor)t), model_obj,
						       &c, &check_tol), 0);
		}
	CU_ASSERT_EQUAL(ref_check_grad("model d_final_norm", md->final_norm, md->d_final_norm,
				       m->hidden, model_obj, &c, &check_tol), 0);
	CU_ASSERT_EQUAL(ref_check_grad("model d_w_out", md->w_out, md->d_w_out, vd, model_obj, &c,
				       &check_tol), 0);
	/* embedding rows of tokens absent from the batch get no gradient */
	for (int v = 0; v < m->vocab; v++) {
		int used = 0;
		for (int k = 0; k < N; k++)
			used |= f.tokens[k] == v;
		if (!used)
			CU_ASSERT_EQUAL(test_max_abs(md->d_embed + (size_t)v * m->hidden, m->hidden), 0.0);
	}

	ref_acts_free(c.a);
	fixture_release(&f);
}

/*
 * Loss and gradients of every (checkpointing, loss) combination against
 * (AC_NONE, LOSS_FULL): bit for bit across checkpointing modes, within
 * 1e-5 relative for the chunked loss. Backward twice accumulates twice.
 */
static void test_model_modes(void)
{
	const struct model_shape *m = &tiny;
	struct fixture f;
	fixture_init(&f, m, 16);
	float *want = malloc(f.n * sizeof(float));
	float want_loss = 0.0f;

	for (int loss_mode = 0; loss_mode < LOSS_COUNT; loss_mode++)
		for (int ac = 0; ac < AC_COUNT; ac++) {
			struct ref_acts *a = ref_acts_new(m, B, ac, loss_mode, CHUNK);
			memset(f.grads, 0, f.n * sizeof(float));
			float loss = ref_model_forward(&f.model, a, f.tokens, f.targets);
			ref_model_backward(&f.model, a, f.tokens, f.targets);
			if (loss_mode == LOSS_FULL && ac == AC_NONE) {
				want_loss = loss;
				memcpy(want, f.grads, f.n * sizeof(float));
			} else if (loss_mode == LOSS_FULL) {
				CU_ASSERT_EQUAL(loss, want_loss);
				CU_ASSERT_EQUAL(memcmp(f.grads, want, f.n * sizeof(float)), 0);
			} else {
				CU_ASSERT(fabs(loss - want_loss) <= 1e-5 * fabs(want_loss));
				CU_ASSERT(test_max_abs_diff(f.grads, want, f.n) <= 1e-5 * test_max_abs(want, f.n));
			}
			/* a second microbatch on the same data doubles the gradients */
			ref_model_forward(&f.model, a, f.tokens, f.targets);
			ref_model_backward(&f.model, a, f.tokens, f.targets);
			for (size_t i = 0; i < f.n; i++)
				want[i] *= 2.0f;
			CU_ASSERT(test_max_abs_diff(f.grads, want, f.n) <= 1e-5 * test_max_abs(want, f.n));
			for (size_t i = 0; i < f.n; i++)
				want[i] *= 0.5f;
			ref_acts_free(a);
		}

	free(want);
	fixture_release(&f);
}

/* ---- AdamW --------------------------------------------------------------- */

/* Two steps on three elements; expected values computed by hand (in double). */
static void test_adamw_hand(void)
{
	struct ref_adamw_hparams hp = { .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
					.weight_decay = 0.01f };
	float p[3] = { 1.0f, -2.0f, 0.5f }, m[3] = { 0 }, v[3] = { 0 };
	float g1[3] = { 0.1f, -0.2f, 0.0f }, g2[3] = { 0.3f, 0.1f, -0.4f };

	/* t = 1: m-hat = g, v-hat = g^2, the step is lr (sign(g) + wd p) */
	ref_adamw(p, g1, m, v, 3, &hp, 1);
	CU_ASSERT_DOUBLE_EQUAL(p[0], 0.899000010, 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(p[1], -1.898000005, 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(p[2], 0.499500000, 1e-6); /* g = 0: weight decay only */
	/* moments carry the rounding of 1 - beta in float (5e-5 relative for beta2) */
	CU_ASSERT_DOUBLE_EQUAL(m[1], -0.02, 0.02 * 1e-4);
	CU_ASSERT_DOUBLE_EQUAL(v[1], 4e-5, 4e-5 * 1e-4);

	ref_adamw(p, g2, m, v, 3, &hp, 2);
	CU_ASSERT_DOUBLE_EQUAL(m[0], 0.039, 0.039 * 1e-4);
	CU_ASSERT_DOUBLE_EQUAL(v[0], 9.999e-5, 9.999e-5 * 1e-4);
	CU_ASSERT_DOUBLE_EQUAL(p[0], 0.806322902, 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(p[1], -1.869468303, 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(p[2], 0.573414180, 1e-6);
}

/* The multi-tensor form is the single form on each tensor, bit for bit. */
static void test_adamw_multi(void)
{
	enum { n = 40 };
	gsl_rng *r = test_rng(17);
	struct ref_adamw_hparams hp = { .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
					.weight_decay = 0.1f };
	float p[2][n], g[n], m[2][n], v[2][n];
	ref_fill_normal(p[0], n, 0, 1, r);
	ref_fill_normal(g, n, 0, 1, r);
	memcpy(p[1], p[0], sizeof(p[0]));
	memset(m, 0, sizeof(m));
	memset(v, 0, sizeof(v));
	struct ref_adamw_tensor ts[3] = {
		{ p[1], g, m[1], v[1], 7 },
		{ p[1] + 7, g + 7, m[1] + 7, v[1] + 7, 30 },
		{ p[1] + 37, g + 37, m[1] + 37, v[1] + 37, 3 },
	};
	for (int t = 1; t <= 3; t++) {
		ref_adamw(p[0], g, m[0], v[0], n, &hp, t);
		ref_adamw_multi(ts, 3, &hp, t);
	}
	CU_ASSERT_EQUAL(memcmp(p[0], p[1], sizeof(p[0])), 0);
	CU_ASSERT_EQUAL(memcmp(m[0], m[1], sizeof(m[0])), 0);
	CU_ASSERT_EQUAL(memcmp(v[0], v[1], sizeof(v[0])), 0);
	gsl_rng_free(r);
}

/* Five AdamW steps on one fixed batch cut the loss of a two-block model. */
static void test_model_learns(void)
{
	const struct model_shape *m = &tiny;
	struct fixture f;
	fixture_init(&f, m, 18);
	struct ref_acts *a = ref_acts_new(m, B, AC_FULL, LOSS_CHUNKED, CHUNK);
	struct ref_adamw_hparams hp = { .lr = 3e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
					.weight_decay = 0.1f };
	float *mom = calloc(f.n, sizeof(float)), *var = calloc(f.n, sizeof(float));
	float loss[6];

	for (int t = 1; t <= 5; t++) {
		memset(f.grads, 0, f.n * sizeof(float));
		loss[t - 1] = ref_model_forward(&f.model, a, f.tokens, f.targets);
		ref_model_backward(&f.model, a, f.tokens, f.targets);
		ref_adamw(f.params, f.grads, mom, var, f.n, &hp, t);
	}
	loss[5] = ref_model_forward(&f.model, a, f.tokens, f.targets);
	if (getenv("REF_CHECK_VERBOSE"))
		printf("\n  losses %.4f %.4f %.4f %.4f %.4f %.4f\n", loss[0], loss[1], loss[2],
		       loss[3], loss[4], loss[5]);
	CU_ASSERT(loss[5] < 0.9f * loss[0]);
	for (int t = 1; t <= 5; t++)
		CU_ASSERT(loss[t] < loss[t - 1]);

	free(var);
	free(mom);
	ref_acts_free(a);
	fixture_release(&f);
}

void suite_ref_model(void)
{
	CU_pSuite s = CU_add_suite("ref_model", NULL, NULL);
	CU_add_test(s, "block gradients", test_block_grad);
	CU_add_test(s, "block checkpointing modes agree", test_block_modes);
	CU_add_test(s, "block store sizes match core/model.c", test_block_sizes);
	CU_add_test(s, "two-block model gradients", test_model_grad);
	CU_add_test(s, "model checkpointing and loss modes agree", test_model_modes);
	CU_add_test(s, "adamw against hand-computed steps", test_adamw_hand);
	CU_add_test(s, "adamw multi-tensor equals single", test_adamw_multi);
	CU_add_test(s, "two-block model learns a fixed batch", test_model_learns);
}
