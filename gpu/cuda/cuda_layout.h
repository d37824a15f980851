/*
 * cuda_layout.h - the host-side layout of the CUDA model's buffers: a
 * block's activation store, its backward's gradient scratch, the head's
 * store, the whole model's parameter pointers and the one allocation
 * behind a model's activations. Plain arithmetic on device addresses,
 * compiled from C (layout.c) with no CUDA header, so that the CPU tests
 * check it against core/model.c and gpu/ref without a GPU.
 *
 * Every store is core/model.c's table laid out at 2 bytes an activation
 * element (bf16; rstd, lse and logits fp32), each field 256-byte aligned
 * (MODEL_FIELD_ALIGN): the byte counts here are model_segment_saved_bytes
 * and model_segment_transient_bytes at act_bytes = 2, and the fields are
 * the reference's (gpu/ref/ref.h), one for one. Parameters follow
 * model_module_offset and model_block_tensor_offset.
 *
 * Included by cuda_model.h; C and CUDA C++ alike (bf16 is __nv_bfloat16
 * in C++, its bit pattern in C).
 */
#ifndef GPU_CUDA_LAYOUT_H
#define GPU_CUDA_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
extern "C" {
#else
typedef uint16_t bf16; /* the bit pattern of a bfloat16; host code converts */
#endif

#include "model.h" /* C declarations: inside extern "C" for the .cu files */

/* ---- one transformer block ------------------------------------------------- */

/*
 * What a block's backward reads; the ac_mode decides which fields are
 * saved and which transient, by core/model.c's table (as struct
 * ref_block_store). bf16 fields, fp32 statistics.
 */
struct cuda_block_store {
	enum ac_mode mode;
	int complete;    /* 1 when every field holds this block's values */
	bf16 *x;         /* (N, D) block input; the caller writes it here */
	bf16 *xn1;       /* (N, D) attn_norm(x) */
	float *rstd1;    /* (N) */
	bf16 *qkv;       /* (N, (H+2KV) Q) QKV GEMM output, q and k roped in place */
	bf16 *att;       /* (N, H Q) attention output */
	float *lse;      /* (B, H, T) attention log-sum-exp */
	bf16 *x1;        /* (N, D) x + Wo att */
	bf16 *xn2;       /* (N, D) mlp_norm(x1) */
	float *rstd2;    /* (N) */
	bf16 *gateup;    /* (N, 2F) [gate | up] */
	bf16 *h;         /* (N, F) silu(gate) * up */
};

/* Bytes of saved memory a block keeps under the mode. */
size_t cuda_block_saved_bytes(const struct model_shape *m, int B, enum ac_mode mode);
/* Bytes of transient memory (0 for AC_NONE). */
size_t cuda_block_transient_bytes(const struct model_shape *m, int B, enum ac_mode mode);
/* Point the fields into saved and transient (NULL for AC_NONE); owns nothing. */
void cuda_block_store_init(struct cuda_block_store *s, void *saved, void *transient,
			   const struct model_shape *m, int B, enum ac_mode mode);

/* The activation gradients of a block's backward, in its scratch. */
struct cuda_block_grads {
	bf16 *dxn;     /* (N, D) */
	bf16 *dh;      /* (N, F) */
	bf16 *dgu;     /* (N, 2F) */
	bf16 *datt;    /* (N, H Q) */
	bf16 *dqkv;    /* (N, (H + 2 KV) Q) */
};

/* Scratch for the activation gradients of cuda_block_backward. */
size_t cuda_block_scratch_bytes(const struct model_shape *m, int B);
/* Point g into scratch (cuda_block_scratch_bytes). */
void cuda_block_grads_init(struct cuda_block_grads *g, void *scratch,
			   const struct model_shape *m, int B);

/* ---- head: final norm, output projection, loss ------------------------------ */

/*
 * x, xn (bf16), rstd, lse (fp32) are saved; the fp32 logits are saved
 * (N, V) under LOSS_FULL and a transient (chunk, V) under LOSS_CHUNKED.
 * Backward overwrites each logits row with its bf16 gradient in place.
 */
struct cuda_head_store {
	enum loss_mode loss;
	int chunk;       /* rows per logits chunk under LOSS_CHUNKED */
	bf16 *x;         /* (N, D) head input; caller writes it */
	bf16 *xn;        /* (N, D) final_norm(x) */
	float *rstd;     /* (N) */
	float *lse;      /* (N) */
	float *logits;   /* LOSS_FULL (N, V); LOSS_CHUNKED (chunk, V) */
};

/* Bytes of the head's saved fields. */
size_t cuda_head_saved_bytes(const struct model_shape *m, int B, enum loss_mode loss);
/* Bytes of its transient fields: the logits chunk under LOSS_CHUNKED, 0 under LOSS_FULL. */
size_t cuda_head_transient_bytes(const struct model_shape *m, int B, enum loss_mode loss,
				 int chunk);
/* Point the saved fields into saved, the transient ones into transient (NULL for LOSS_FULL). */
void cuda_head_store_init_split(struct cuda_head_store *s, void *saved, void *transient,
				const struct model_shape *m, int B, enum loss_mode loss, int chunk);
/* Bytes behind a head store in one buffer: saved then transient. */
size_t cuda_head_store_bytes(const struct model_shape *m, int B, enum loss_mode loss, int chunk);
/* Point the store into buf (cuda_head_store_bytes); chunk is ignored for LOSS_FULL. */
void cuda_head_store_init(struct cuda_head_store *s, void *buf, const struct model_shape *m,
			  int B, enum loss_mode loss, int chunk);

/* ---- whole model ------------------------------------------------------------ */

/* Parameters (bf16) and fp32 gradients of a model, pointers into runtime buffers. */
struct cuda_model {
	struct model_shape shape;
	bf16 *embed;         /* (V, D) */
	bf16 **blocks;       /* L host-side pointers, block flat layout */
	bf16 *final_norm;    /* (D) */
	bf16 *w_out;         /* (V, D) */
	float *d_embed;      /* gradients, same shapes, fp32 */
	float **d_blocks;
	float *d_final_norm;
	float *d_w_out;
};

/* Elements of one block's flat buffer, and a tensor's offset in it (core/model.c). */
size_t cuda_block_elems(const struct model_shape *m);
size_t cuda_block_offset(const struct model_shape *m, enum block_tensor t);
/* Elements of all parameters: embed | L blocks | final norm | output. */
size_t cuda_model_elems(const struct model_shape *m);
/*
 * Point *model at params (bf16) and grads (fp32, may be NULL) at the
 * offsets of model_module_offset; 0, or -1 out of host memory.
 */
int cuda_model_init(struct cuda_model *model, const struct model_shape *m, bf16 *params,
		    float *grads);
void cuda_model_release(struct cuda_model *model);

/* Activations for B sequences, in one device allocation. */
struct cuda_acts {
	int B;
	enum ac_mode ac;
	struct cuda_block_store *blocks; /* L stores (host array) */
	struct cuda_head_store head;
	bf16 *dres;                      /* (N, D) residual-stream gradient */
	void *scratch;                   /* cuda_block_scratch_bytes */
	void *buf;                       /* the device allocation behind all of it */
	size_t bytes;                    /* its size */
};

/*
 * Bytes behind struct cuda_acts: L blocks' saved memory, one transient
 * area the blocks share, the head store, dres, the backward's scratch.
 */
size_t cuda_acts_bytes(const struct model_shape *m, int B, enum ac_mode ac, enum loss_mode loss,
		       int chunk);
/*
 * Set a's B, ac, buf, bytes and point its stores, dres and scratch into buf
 * (cuda_acts_bytes); a->blocks must hold L stores.
 */
void cuda_acts_point(struct cuda_acts *a, void *buf, const struct model_shape *m, int B,
		     enum ac_mode ac, enum loss_mode loss, int chunk);

#ifdef __cplusplus
}
#endif

#endif
