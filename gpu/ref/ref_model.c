/*
 * ref_model.c - the whole decoder of the fp32 reference: embedding, L
 * blocks, head; forward returns the loss, backward accumulates every
 * parameter gradient.
 *
 * The residual stream needs no buffers of its own: the embedding writes
 * block 0's saved input, block l writes block l+1's, the last block writes
 * the head's. Backward runs one residual gradient (N, D) in place through
 * the blocks. All blocks share one transient buffer, since recompute
 * refills it right before each block's backward.
 */
#include <assert.h>
#include <stdlib.h>

#include "ref.h"

size_t ref_model_floats(const struct model_shape *m)
{
	return (size_t)model_total_params(m);
}

/* Point the four parts of a flat model buffer (model_module_offset); blocks[] gets L pointers. */
static void model_point(const struct model_shape *m, float *buf, float **embed, float **blocks,
			float **final_norm, float **w_out)
{
	*embed = buf + model_module_offset(m, MOD_EMBED, 0);
	for (int l = 0; l < m->layers; l++)
		blocks[l] = buf + model_module_offset(m, MOD_BLOCK, l);
	*final_norm = buf + model_module_offset(m, MOD_FINAL_NORM, 0);
	*w_out = buf + model_module_offset(m, MOD_OUTPUT, 0);
}

int ref_model_init(struct ref_model *model, const struct model_shape *m, float *params,
		   float *grads)
{
	size_t L = m->layers > 0 ? (size_t)m->layers : 1;
	model->shape = *m;
	model->blocks = calloc(L, sizeof(float *));
	model->d_blocks = calloc(L, sizeof(float *));
	if (!model->blocks || !model->d_blocks) {
		ref_model_release(model);
		return -1;
	}
	model_point(m, params, &model->embed, model->blocks, &model->final_norm, &model->w_out);
	model->d_embed = model->d_final_norm = model->d_w_out = NULL;
	if (grads)
		model_point(m, grads, &model->d_embed, model->d_blocks, &model->d_final_norm,
			    &model->d_w_out);
	return 0;
}

void ref_model_release(struct ref_model *model)
{
	free(model->blocks);
	free(model->d_blocks);
	model->blocks = model->d_blocks = NULL;
}

struct ref_acts *ref_acts_new(const struct model_shape *m, int B, enum ac_mode ac,
			      enum loss_mode loss, int chunk)
{
	size_t nd = (size_t)B * m->seq * m->hidden;
	size_t saved = ref_block_saved_floats(m, B, ac);
	size_t transient = ref_block_transient_floats(m, B, ac);
	size_t total = (size_t)m->layers * saved + transient + ref_head_store_floats(m, B, loss, chunk)
		       + nd + ref_block_scratch_floats(m, B);
	struct ref_acts *a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->B = B;
	a->ac = ac;
	a->blocks = calloc(m->layers > 0 ? (size_t)m->layers : 1, sizeof(*a->blocks));
	a->buf = calloc(total, sizeof(float));
	if (!a->blocks || !a->buf) {
		ref_acts_free(a);
		return NULL;
	}
	float *p = a->buf;
	float *shared = p + (size_t)m->layers * saved;
	for (int l = 0; l < m->layers; l++)
		ref_block_store_init(&a->blocks[l], p + (size_t)l * saved, transient ? shared : NULL,
				     m, B, ac);
	p = shared + transient;
	ref_head_store_init(&a->head, p, m, B, loss, chunk);
	p += ref_head_store_floats(m, B, loss, chunk);
	a->dres = p;
	a->scratch = p + nd;
	return a;
}

void ref_acts_free(struct ref_acts *a)
{
	if (!a)
		return;
	free(a->blocks);
	free(a->buf);
	free(a);
}

float ref_model_forward(const struct ref_model *model, struct ref_acts *a, const int *tokens,
			const int *targets)
{
	const struct model_shape *m = &model->shape;
	int L = m->layers, N = a->B * m->seq;
	ref_embedding_forward(L > 0 ? a->blocks[0].x : a->head.x, tokens, model->embed, N,
			      m->hidden);
	for (int l = 0; l < L; l++) {
		float *out = l + 1 < L ? a->blocks[l + 1].x : a->head.x;
		ref_block_forward(out, &a->blocks[l], model->blocks[l], m, a->B);
	}
	return ref_head_forward(&a->head, model->final_norm, model->w_out, targets, m, a->B);
}

void ref_model_backward(const struct ref_model *model, struct ref_acts *a, const int *tokens,
			const int *targets)
{
	const struct model_shape *m = &model->shape;
	int N = a->B * m->seq;
	assert(model->d_embed);
	ref_head_backward(a->dres, model->d_final_norm, model->d_w_out, &a->head,
			  model->final_norm, model->w_out, targets, m, a->B);
	for (int l = m->layers - 1; l >= 0; l--)
		ref_block_backward(a->dres, model->d_blocks[l], a->dres, &a->blocks[l],
				   model->blocks[l], a->scratch, m, a->B);
	ref_embedding_backward(model->d_embed, a->dres, tokens, N, m->hidden);
}
