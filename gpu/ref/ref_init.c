/*
 * ref_init.c - seeded random fills from GSL (see ref_init.h). The only file
 * of gpu/ref that depends on anything beyond libc, libm and core/model.h.
 */
#include <math.h>

#include <gsl/gsl_randist.h>

#include "ref_init.h"

void ref_fill_normal(float *p, size_t n, float mean, float std, gsl_rng *r)
{
	for (size_t i = 0; i < n; i++)
		p[i] = mean + (float)gsl_ran_gaussian(r, std);
}

void ref_fill_uniform(float *p, size_t n, float lo, float hi, gsl_rng *r)
{
	for (size_t i = 0; i < n; i++)
		p[i] = lo + (hi - lo) * (float)gsl_rng_uniform(r);
}

void ref_fill_tokens(int *tokens, size_t n, int V, gsl_rng *r)
{
	for (size_t i = 0; i < n; i++)
		tokens[i] = (int)gsl_rng_uniform_int(r, (unsigned long)V);
}

static void fill_ones(float *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = 1.0f;
}

/* A (rows, cols) weight with fan_in = cols. */
static void fill_weight(float *w, size_t rows, size_t cols, float gain, gsl_rng *r)
{
	ref_fill_normal(w, rows * cols, 0.0f, gain / sqrtf((float)cols), r);
}

void ref_init_params(const struct ref_model *model, float gain, gsl_rng *r)
{
	const struct model_shape *m = &model->shape;
	size_t D = (size_t)m->hidden, F = (size_t)m->ffn, V = (size_t)m->vocab;
	size_t Q = (size_t)model_head_dim(m);
	size_t qkv_rows = (size_t)(m->heads + 2 * m->kv_heads) * Q;
	size_t hq = (size_t)m->heads * Q;

	ref_fill_normal(model->embed, V * D, 0.0f, 1.0f, r);
	for (int l = 0; l < m->layers; l++) {
		float *b = model->blocks[l];
		fill_ones(b + ref_block_offset(m, BT_ATTN_NORM), D);
		fill_weight(b + ref_block_offset(m, BT_WQ), qkv_rows, D, gain, r);
		fill_weight(b + ref_block_offset(m, BT_WO), D, hq, gain, r);
		fill_ones(b + ref_block_offset(m, BT_MLP_NORM), D);
		fill_weight(b + ref_block_offset(m, BT_W_GATE), 2 * F, D, gain, r);
		fill_weight(b + ref_block_offset(m, BT_W_DOWN), D, F, gain, r);
	}
	fill_ones(model->final_norm, D);
	fill_weight(model->w_out, V, D, gain, r);
}
