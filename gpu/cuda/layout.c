/*
 * layout.c - the host-side layout of the CUDA model's buffers (see
 * cuda_layout.h): core/model.c's store tables at bf16, the parameter
 * pointers at model_module_offset. Plain C, no CUDA: the same object goes
 * into the CUDA model and into the CPU tests.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_layout.h"

#define ACT_BYTES ((int)sizeof(bf16))

/* ---- one transformer block ------------------------------------------------- */

static struct store_layout block_layout(const struct model_shape *m, int B, enum ac_mode mode)
{
	struct store_layout l;
	model_block_store_layout(&l, m, B, mode, ACT_BYTES);
	return l;
}

size_t cuda_block_saved_bytes(const struct model_shape *m, int B, enum ac_mode mode)
{
	return (size_t)block_layout(m, B, mode).saved_bytes;
}

size_t cuda_block_transient_bytes(const struct model_shape *m, int B, enum ac_mode mode)
{
	return (size_t)block_layout(m, B, mode).transient_bytes;
}

void cuda_block_store_init(struct cuda_block_store *s, void *saved, void *transient,
			   const struct model_shape *m, int B, enum ac_mode mode)
{
	struct store_layout l = block_layout(m, B, mode);
	void *at[BF_COUNT];

	for (int f = 0; f < BF_COUNT; f++)
		at[f] = model_store_field_at(&l, f, saved, transient);
	memset(s, 0, sizeof(*s));
	s->mode = mode;
	s->x = at[BF_X];
	s->xn1 = at[BF_XN1];
	s->rstd1 = at[BF_RSTD1];
	s->qkv = at[BF_QKV];
	s->att = at[BF_ATT];
	s->lse = at[BF_LSE];
	s->x1 = at[BF_X1];
	s->xn2 = at[BF_XN2];
	s->rstd2 = at[BF_RSTD2];
	s->gateup = at[BF_GATEUP];
	s->h = at[BF_H];
}

size_t cuda_block_scratch_bytes(const struct model_shape *m, int B)
{
	struct store_layout l;
	model_block_grads_layout(&l, m, B, ACT_BYTES);
	return (size_t)l.transient_bytes;
}

void cuda_block_grads_init(struct cuda_block_grads *g, void *scratch,
			   const struct model_shape *m, int B)
{
	struct store_layout l;
	model_block_grads_layout(&l, m, B, ACT_BYTES);
	g->dxn = model_store_field_at(&l, GF_DXN, NULL, scratch);
	g->dh = model_store_field_at(&l, GF_DH, NULL, scratch);
	g->dgu = model_store_field_at(&l, GF_DGATEUP, NULL, scratch);
	g->datt = model_store_field_at(&l, GF_DATT, NULL, scratch);
	g->dqkv = model_store_field_at(&l, GF_DQKV, NULL, scratch);
}

/* ---- head ------------------------------------------------------------------ */

static struct store_layout head_layout(const struct model_shape *m, int B, enum loss_mode loss,
				       int chunk)
{
	struct store_layout l;
	model_head_store_layout(&l, m, B, loss, loss == LOSS_FULL ? 1 : chunk, ACT_BYTES);
	return l;
}

size_t cuda_head_saved_bytes(const struct model_shape *m, int B, enum loss_mode loss)
{
	return (size_t)head_layout(m, B, loss, 1).saved_bytes;
}

size_t cuda_head_transient_bytes(const struct model_shape *m, int B, enum loss_mode loss,
				 int chunk)
{
	return (size_t)head_layout(m, B, loss, chunk).transient_bytes;
}

size_t cuda_head_store_bytes(const struct model_shape *m, int B, enum loss_mode loss, int chunk)
{
	struct store_layout l = head_layout(m, B, loss, chunk);
	return (size_t)(l.saved_bytes + l.transient_bytes);
}

void cuda_head_store_init_split(struct cuda_head_store *s, void *saved, void *transient,
				const struct model_shape *m, int B, enum loss_mode loss, int chunk)
{
	struct store_layout l = head_layout(m, B, loss, chunk);
	s->loss = loss;
	s->chunk = loss == LOSS_FULL ? B * m->seq : chunk;
	s->x = model_store_field_at(&l, HF_X, saved, transient);
	s->xn = model_store_field_at(&l, HF_XN, saved, transient);
	s->rstd = model_store_field_at(&l, HF_RSTD, saved, transient);
	s->lse = model_store_field_at(&l, HF_LSE, saved, transient);
	s->logits = model_store_field_at(&l, HF_LOGITS, saved, transient);
}

void cuda_head_store_init(struct cuda_head_store *s, void *buf, const struct model_shape *m,
			  int B, enum loss_mode loss, int chunk)
{
	cuda_head_store_init_split(s, buf, (char *)buf + cuda_head_saved_bytes(m, B, loss), m, B,
				   loss, chunk);
}

/* ---- whole model ------------------------------------------------------------ */

size_t cuda_block_offset(const struct model_shape *m, enum block_tensor t)
{
	return (size_t)model_block_tensor_offset(m, t);
}

size_t cuda_block_elems(const struct model_shape *m)
{
	return (size_t)model_block_params(m);
}

size_t cuda_model_elems(const struct model_shape *m)
{
	return (size_t)model_total_params(m);
}

int cuda_model_init(struct cuda_model *model, const struct model_shape *m, bf16 *params,
		    float *grads)
{
	size_t L = m->layers > 0 ? (size_t)m->layers : 1;

	memset(model, 0, sizeof(*model));
	model->shape = *m;
	model->blocks = calloc(L, sizeof(bf16 *));
	model->d_blocks = calloc(L, sizeof(float *));
	if (!model->blocks || !model->d_blocks) {
		cuda_model_release(model);
		return -1;
	}
	model->embed = params + model_module_offset(m, MOD_EMBED, 0);
	for (int l = 0; l < m->layers; l++)
		model->blocks[l] = params + model_module_offset(m, MOD_BLOCK, l);
	model->final_norm = params + model_module_offset(m, MOD_FINAL_NORM, 0);
	model->w_out = params + model_module_offset(m, MOD_OUTPUT, 0);
	if (grads) {
		model->d_embed = grads + model_module_offset(m, MOD_EMBED, 0);
		for (int l = 0; l < m->layers; l++)
			model->d_blocks[l] = grads + model_module_offset(m, MOD_BLOCK, l);
		model->d_final_norm = grads + model_module_offset(m, MOD_FINAL_NORM, 0);
		model->d_w_out = grads + model_module_offset(m, MOD_OUTPUT, 0);
	}
	return 0;
}

void cuda_model_release(struct cuda_model *model)
{
	free(model->blocks);
	free(model->d_blocks);
	model->blocks = NULL;
	model->d_blocks = NULL;
}

/* ---- activations ------------------------------------------------------------ */

/* The parts of struct cuda_acts's allocation, in order: bytes of each. */
struct acts_parts {
	size_t saved;     /* one block's */
	size_t transient; /* shared by the blocks */
	size_t head;
	size_t dres;
	size_t scratch;
};

static struct acts_parts acts_parts(const struct model_shape *m, int B, enum ac_mode ac,
				    enum loss_mode loss, int chunk)
{
	struct acts_parts p;
	p.saved = cuda_block_saved_bytes(m, B, ac);
	p.transient = cuda_block_transient_bytes(m, B, ac);
	p.head = cuda_head_store_bytes(m, B, loss, chunk);
	p.dres = (size_t)model_field_align((uint64_t)B * m->seq * m->hidden * sizeof(bf16));
	p.scratch = cuda_block_scratch_bytes(m, B);
	return p;
}

size_t cuda_acts_bytes(const struct model_shape *m, int B, enum ac_mode ac, enum loss_mode loss,
		       int chunk)
{
	struct acts_parts p = acts_parts(m, B, ac, loss, chunk);
	return (size_t)m->layers * p.saved + p.transient + p.head + p.dres + p.scratch;
}

void cuda_acts_point(struct cuda_acts *a, void *buf, const struct model_shape *m, int B,
		     enum ac_mode ac, enum loss_mode loss, int chunk)
{
	struct acts_parts p = acts_parts(m, B, ac, loss, chunk);
	char *at = buf;
	char *shared = at + (size_t)m->layers * p.saved;

	a->B = B;
	a->ac = ac;
	a->buf = buf;
	a->bytes = cuda_acts_bytes(m, B, ac, loss, chunk);
	for (int l = 0; l < m->layers; l++)
		cuda_block_store_init(&a->blocks[l], at + (size_t)l * p.saved,
				      p.transient ? shared : NULL, m, B, ac);
	at = shared + p.transient;
	cuda_head_store_init(&a->head, at, m, B, loss, chunk);
	at += p.head;
	a->dres = (bf16 *)at;
	a->scratch = at + p.dres;
}
