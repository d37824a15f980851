/*
 * ref.h - the plain C fp32 reference of the Llama decoder, forward and
 * backward. Every CUDA kernel in gpu/cuda/ is checked against it; the CUDA
 * side mirrors this function list with a cuda_ prefix and the same argument
 * order.
 *
 * Conventions (shared with gpu/cuda/ and core/model.h):
 *   - N = B * T tokens, B sequences of T = shape->seq tokens; D hidden,
 *     F ffn, H query heads, KV key/value heads, Q = D / H head dim, V vocab.
 *   - Weights are (out, in) row-major, y = x W^T. Activations are (N, C)
 *     row-major.
 *   - A block's parameters are one flat buffer in enum block_tensor order;
 *     wq wk wv are one ((H + 2 KV) Q, D) weight and w_gate w_up one (2F, D)
 *     weight. A QKV row is H query heads, then KV key heads, then KV value
 *     heads, Q wide each; a gate/up row is [gate (F) | up (F)].
 *   - Parameter gradients accumulate (+=), so microbatches add up;
 *     activation gradients are written (=).
 *   - Everything is fp32 and single-threaded; readable before fast.
 *
 * Output arguments come first, then the saved state, then the inputs, then
 * the sizes. Unless a comment says otherwise, outputs must not alias inputs.
 */
#ifndef GPU_REF_H
#define GPU_REF_H

#include <stddef.h>

#include "model.h"

#define REF_RMS_EPS 1e-5f

/* ---- layers ------------------------------------------------------------ */

/* out (N, D) = wte[tokens[n]], wte (V, D). */
void ref_embedding_forward(float *out, const int *tokens, const float *wte, int N, int D);
/* dwte (V, D) += dout scattered by token. */
void ref_embedding_backward(float *dwte, const float *dout, const int *tokens, int N, int D);

/* out (N, C) = x * rstd * w, rstd (N) = 1 / sqrt(mean(x^2) + REF_RMS_EPS). */
void ref_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C);
/* dx (N, C) = (written), dw (C) +=. dx may alias dout. */
void ref_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
			  const float *w, const float *rstd, int N, int C);

/* out (N, OC) = x (N, C) w^T, w (OC, C). */
void ref_linear_forward(float *out, const float *x, const float *w, int N, int C, int OC);
/* dx (N, C) = dout w (skipped when dx is NULL); dw (OC, C) += dout^T x. */
void ref_linear_backward(float *dx, float *dw, const float *dout, const float *x,
			 const float *w, int N, int C, int OC);
/* Its two GEMMs on their own: dx = dout w (the dgrad), dw += dout^T x (the wgrad). */
void ref_linear_backward_dx(float *dx, const float *dout, const float *w, int N, int C, int OC);
void ref_linear_backward_dw(float *dw, const float *dout, const float *x, int N, int C, int OC);

/*
 * Rotary embedding, in place on the query and key heads of qkv
 * (N, (H + 2 KV) Q); value heads are untouched. Rotate-half convention:
 * pairs (i, i + Q/2), angle = t * theta^(-2i/Q), t the position in the
 * sequence. Angles are computed in double, then rounded to float.
 */
void ref_rope_forward(float *qkv, int B, int T, int H, int KV, int Q, float theta);
/* The transpose (rotation by -angle), in place on dqkv's query and key heads. */
void ref_rope_backward(float *dqkv, int B, int T, int H, int KV, int Q, float theta);

/*
 * Causal grouped-query attention over roped qkv (N, (H + 2 KV) Q): query
 * head h reads kv head h / (H / KV); scale 1 / sqrt(Q). out is (N, H Q);
 * lse (B, H, T) is the log-sum-exp of each scaled score row, kept for
 * backward so no T x T matrix is ever stored.
 */
void ref_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int H,
			   int KV, int Q);
/* dqkv (N, (H + 2 KV) Q) = (written) from dout (N, H Q) and the forward's out, lse. */
void ref_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
			    const float *lse, int B, int T, int H, int KV, int Q);

/* h (N, F) = silu(gate) * up, gateup (N, 2F) = [gate | up] per row. */
void ref_swiglu_forward(float *h, const float *gateup, int N, int F);
/* dgateup (N, 2F) = (written). */
void ref_swiglu_backward(float *dgateup, const float *dh, const float *gateup, int N, int F);

/*
 * Mean cross-entropy of logits (N, V) against targets (N); returns the loss
 * and keeps lse (N), the log-sum-exp of each row.
 */
float ref_cross_entropy_forward(float *lse, const float *logits, const int *targets, int N,
				int V);
/* dlogits (N, V) = dloss / N * (softmax - onehot). dlogits may alias logits. */
void ref_cross_entropy_backward(float *dlogits, const float *logits, const float *lse,
				const int *targets, int N, int V, float dloss);

/*
 * The output projection and the loss together: logits = xn w_out^T,
 * w_out (V, D), mean cross-entropy over N targets.
 *   LOSS_FULL:    logits is (N, V); forward leaves the logits there and
 *                 backward turns them into dlogits in place (once).
 *   LOSS_CHUNKED: logits is (chunk, V) scratch; forward computes `chunk`
 *                 rows at a time keeping only lse (N); backward recomputes
 *                 each chunk's logits. The full (N, V) is never held.
 * Forward returns the loss; backward writes dxn (N, D) and accumulates
 * dw_out (V, D), for d(loss) = 1. chunk is ignored for LOSS_FULL.
 */
float ref_lm_loss_forward(float *lse, float *logits, const float *xn, const float *w_out,
			  const int *targets, int N, int D, int V, enum loss_mode mode, int chunk);
void ref_lm_loss_backward(float *dxn, float *dw_out, float *logits, const float *xn,
			  const float *w_out, const float *lse, const int *targets, int N, int D,
			  int V, enum loss_mode mode, int chunk);

/* ---- one transformer block --------------------------------------------- */

/*
 * Everything a block's backward reads. Every field points somewhere; the
 * ac_mode decides which fields are saved (persist from forward to
 * backward, in `saved` memory) and which are transient (rebuilt by
 * ref_block_recompute, in `transient` memory that blocks may share). Which
 * is which, and where each field lies, is core/model.c's store table
 * (model_block_store_layout, at 4 bytes an element): AC_NONE saves every
 * field, AC_FULL only x, AC_SELECTIVE x, qkv, att, lse, x1 and gateup
 * (the GEMM outputs, x1 = x + Wo att standing for the Wo output, and
 * attention's out and lse) and recomputes the norms and SwiGLU. Rope runs
 * in place on the QKV GEMM output, so the saved qkv is already roped and
 * is never rotated again. So the saved size is exactly
 * model_segment_saved_bytes(SEG_BLOCK, act_bytes 4) and the transient size
 * model_segment_transient_bytes(SEG_BLOCK, PH_RECOMPUTE, act_bytes 4).
 */
struct ref_block_store {
	enum ac_mode mode;
	int complete;     /* 1 when every field holds this block's values */
	float *x;         /* (N, D) block input; the caller writes it here */
	float *xn1;       /* (N, D) attn_norm(x) */
	float *rstd1;     /* (N) */
	float *qkv;       /* (N, (H+2KV) Q) QKV GEMM output, q and k roped in place */
	float *att;       /* (N, H Q) attention output */
	float *lse;       /* (B, H, T) attention log-sum-exp */
	float *x1;        /* (N, D) x + Wo att */
	float *xn2;       /* (N, D) mlp_norm(x1) */
	float *rstd2;     /* (N) */
	float *gateup;    /* (N, 2F) [gate | up] GEMM output */
	float *h;         /* (N, F) silu(gate) * up */
};

/* Floats of saved memory a block keeps under the mode (the store layout's saved region). */
size_t ref_block_saved_floats(const struct model_shape *m, int B, enum ac_mode mode);
/* Floats of transient memory (0 for AC_NONE). */
size_t ref_block_transient_floats(const struct model_shape *m, int B, enum ac_mode mode);
/* Floats of scratch ref_block_backward needs for activation gradients (model_block_grads_layout). */
size_t ref_block_scratch_floats(const struct model_shape *m, int B);
/*
 * Point the store's fields into saved (ref_block_saved_floats) and
 * transient (ref_block_transient_floats; may be NULL for AC_NONE). The
 * store owns nothing.
 */
void ref_block_store_init(struct ref_block_store *s, float *saved, float *transient,
			  const struct model_shape *m, int B, enum ac_mode mode);

/*
 * out (N, D) = x1 + Wdown swiglu(GateUp(mlp_norm(x1))),
 * x1 = x + Wo attn(rope(QKV(attn_norm(x)))), x read from s->x.
 * params is the block's flat buffer. Fills every field of the store
 * (transient ones too, as forward scratch). out may not alias s->x.
 */
void ref_block_forward(float *out, struct ref_block_store *s, const float *params,
		       const struct model_shape *m, int B);
/*
 * Rebuild the transient fields from the saved ones (nothing for AC_NONE).
 * Under AC_FULL this repeats the whole forward but the last GEMM. Sets
 * s->complete. The transient memory must not be touched by another block
 * between this call and this block's backward.
 */
void ref_block_recompute(struct ref_block_store *s, const float *params,
			 const struct model_shape *m, int B);
/*
 * dx (N, D) = (written), dparams (block flat layout) +=, from dout (N, D).
 * Calls ref_block_recompute first unless s->complete; clears s->complete
 * for the modes that recompute. scratch holds ref_block_scratch_floats.
 * dx may alias dout.
 */
void ref_block_backward(float *dx, float *dparams, const float *dout, struct ref_block_store *s,
			const float *params, float *scratch, const struct model_shape *m, int B);

/* ---- head: final norm, output projection, loss -------------------------- */

/*
 * The head's fields, laid out by core/model.c's table
 * (model_head_store_layout at 4 bytes an element): x, xn, rstd and lse are
 * saved; the logits are saved (N, V) under LOSS_FULL and a transient
 * (chunk, V) scratch under LOSS_CHUNKED, which forward and backward (it
 * recomputes each chunk) both use. Backward turns logits into dlogits in
 * place, so it needs nothing more.
 */
struct ref_head_store {
	enum loss_mode loss;
	int chunk;       /* rows per logits chunk under LOSS_CHUNKED */
	float *x;        /* (N, D) head input (last block's output); caller writes it */
	float *xn;       /* (N, D) final_norm(x) */
	float *rstd;     /* (N) */
	float *lse;      /* (N) log-sum-exp of each logits row */
	float *logits;   /* LOSS_FULL (N, V); LOSS_CHUNKED (chunk, V) scratch */
};

/* Floats of the head's saved fields (model_segment_saved_bytes(SEG_HEAD) / 4). */
size_t ref_head_saved_floats(const struct model_shape *m, int B, enum loss_mode loss);
/* Floats of its transient fields: the logits chunk under LOSS_CHUNKED, 0 under LOSS_FULL. */
size_t ref_head_transient_floats(const struct model_shape *m, int B, enum loss_mode loss,
				 int chunk);
/* Point the saved fields into saved and the transient ones into transient (NULL for LOSS_FULL). */
void ref_head_store_init_split(struct ref_head_store *s, float *saved, float *transient,
			       const struct model_shape *m, int B, enum loss_mode loss, int chunk);
/* Floats behind a head store in one buffer: saved then transient. */
size_t ref_head_store_floats(const struct model_shape *m, int B, enum loss_mode loss, int chunk);
/*
 * Point the store into buf (ref_head_store_floats): the saved fields, then
 * the transient ones. chunk is ignored for LOSS_FULL.
 */
void ref_head_store_init(struct ref_head_store *s, float *buf, const struct model_shape *m,
			 int B, enum loss_mode loss, int chunk);
/* Mean cross-entropy of (final_norm(s->x) w_out^T) against targets (N). */
float ref_head_forward(struct ref_head_store *s, const float *norm_w, const float *w_out,
		       const int *targets, const struct model_shape *m, int B);
/* dx (N, D) = (written); dnorm_w (D) +=, dw_out (V, D) +=. Once per forward. */
void ref_head_backward(float *dx, float *dnorm_w, float *dw_out, struct ref_head_store *s,
		       const float *norm_w, const float *w_out, const int *targets,
		       const struct model_shape *m, int B);

/* ---- whole model --------------------------------------------------------- */

/*
 * The parameters and gradients of a model: pointers into buffers the
 * runtime owns. blocks[l] and d_blocks[l] are flat block buffers of
 * ref_block_floats(shape) each.
 */
struct ref_model {
	struct model_shape shape;
	float *embed;        /* (V, D) */
	float **blocks;      /* L pointers, block flat layout */
	float *final_norm;   /* (D) */
	float *w_out;        /* (V, D) */
	float *d_embed;      /* gradients, same shapes */
	float **d_blocks;
	float *d_final_norm;
	float *d_w_out;
};

/* Floats of one block's flat parameter buffer (model_block_params). */
size_t ref_block_floats(const struct model_shape *m);
/* Offset (floats) of a tensor in a block's flat buffer (model_block_tensor_offset). */
size_t ref_block_offset(const struct model_shape *m, enum block_tensor t);
/* Floats of all parameters: embed | L blocks | final norm | output (model_total_params). */
size_t ref_model_floats(const struct model_shape *m);
/*
 * Point *model at params and grads (ref_model_floats each; grads may be
 * NULL), laid out embed | blocks | final norm | output at the offsets of
 * model_module_offset. Allocates the two pointer arrays; ref_model_release
 * frees them.
 */
int ref_model_init(struct ref_model *model, const struct model_shape *m, float *params,
		   float *grads);
void ref_model_release(struct ref_model *model);

/* The activations of a model for B sequences: block stores, head, scratch. */
struct ref_acts {
	int B;
	enum ac_mode ac;
	struct ref_block_store *blocks; /* L stores */
	struct ref_head_store head;
	float *dres;                    /* (N, D) residual-stream gradient */
	float *scratch;                 /* ref_block_scratch_floats */
	float *buf;                     /* the one allocation behind all of it */
};

/* Allocate activations; NULL when out of memory. ref_acts_free(NULL) is a no-op. */
struct ref_acts *ref_acts_new(const struct model_shape *m, int B, enum ac_mode ac,
			      enum loss_mode loss, int chunk);
void ref_acts_free(struct ref_acts *a);

/* Mean loss of tokens (N) predicting targets (N). */
float ref_model_forward(const struct ref_model *model, struct ref_acts *a, const int *tokens,
			const int *targets);
/* Accumulate every parameter gradient (+=). Once per forward. */
void ref_model_backward(const struct ref_model *model, struct ref_acts *a, const int *tokens,
			const int *targets);

/* ---- optimizer ---------------------------------------------------------- */

struct ref_adamw_hparams {
	float lr;
	float beta1;
	float beta2;
	float eps;
	float weight_decay;
};

/*
 * One AdamW step at step t (t >= 1) on n elements, decoupled weight decay
 * and bias correction:
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   p -= lr * ((m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * p)
 */
void ref_adamw(float *p, const float *g, float *m, float *v, size_t n,
	       const struct ref_adamw_hparams *hp, int t);

struct ref_adamw_tensor {
	float *p;
	const float *g;
	float *m;
	float *v;
	size_t n;
};

/* ref_adamw on each of count tensors. */
void ref_adamw_multi(const struct ref_adamw_tensor *ts, int count,
		     const struct ref_adamw_hparams *hp, int t);

#endif
