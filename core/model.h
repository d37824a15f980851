/*
 * model.h - the Llama-architecture decoder both halves agree on.
 *
 * A model is a shape (layers, hidden, ffn, heads, kv heads, vocab, seq).
 * From the shape this module derives, exactly and in one place:
 *   - the parameter tensors of every module, in their storage order
 *     (the GPU runtime lays a unit's flat buffer out in this order);
 *   - parameter counts per module;
 *   - the kernels one segment runs in forward, backward and recompute,
 *     each with its GEMM shape, FLOPs and HBM bytes (the simulator prices
 *     these, the GPU model launches the same list);
 *   - the activation bytes a segment keeps for backward under each
 *     checkpointing mode.
 *
 * Conventions: weights are (out, in) row-major, y = x W^T. Activations are
 * (N, D) row-major with N = batch * seq tokens. The QKV projection writes
 * (N, (H + 2 KV) * Q): all query heads, then key heads, then value heads.
 * The MLP gate and up weights are stored gate then up, (2F, D) together.
 */
#ifndef CORE_MODEL_H
#define CORE_MODEL_H

#include <stdint.h>

#define MODEL_NAME_MAX 32

struct model_shape {
	char name[MODEL_NAME_MAX];
	int layers;   /* transformer blocks */
	int hidden;   /* D */
	int ffn;      /* F, SwiGLU inner size */
	int heads;    /* H query heads */
	int kv_heads; /* KV heads (grouped-query attention), divides H */
	int vocab;    /* V */
	int seq;      /* T, tokens per sequence */
};

/* head dim Q = D / H */
static inline int model_head_dim(const struct model_shape *m)
{
	return m->hidden / m->heads;
}

/* The sizes one segment works with for `batch` sequences. */
struct model_dims {
	int64_t B, T, N;  /* sequences, tokens per sequence, tokens N = B T */
	int64_t D, F, H, KV, Q, V;
	int64_t qkv;      /* (H + 2 KV) Q, a QKV row */
	int64_t hq;       /* H Q, an attention output row */
};

struct model_dims model_dims_of(const struct model_shape *m, int batch);

/* One parameter tensor: (rows, cols) row-major; a norm weight is (1, D). */
struct tensor_desc {
	const char *name;
	int64_t rows;
	int64_t cols;
};

enum block_tensor {
	BT_ATTN_NORM, /* (1, D) */
	BT_WQ,        /* (H*Q, D) */
	BT_WK,        /* (KV*Q, D) */
	BT_WV,        /* (KV*Q, D) */
	BT_WO,        /* (D, H*Q) */
	BT_MLP_NORM,  /* (1, D) */
	BT_W_GATE,    /* (F, D) */
	BT_W_UP,      /* (F, D) */
	BT_W_DOWN,    /* (D, F) */
	BT_COUNT
};

/* Segments: the pieces of the network in forward execution order. */
enum segment_kind {
	SEG_EMBED, /* token embedding lookup */
	SEG_BLOCK, /* one transformer block */
	SEG_HEAD,  /* final norm, output projection, cross-entropy loss */
	SEG_KIND_COUNT
};

/* Modules: the parameter-owning pieces the wrapping policy cuts into units. */
enum module_kind {
	MOD_EMBED,      /* (V, D) */
	MOD_BLOCK,      /* BT_COUNT tensors */
	MOD_FINAL_NORM, /* (1, D) */
	MOD_OUTPUT,     /* (V, D) */
	MOD_KIND_COUNT
};

enum phase { PH_FWD, PH_BWD, PH_RECOMPUTE, PH_COUNT };

enum ac_mode { AC_NONE, AC_FULL, AC_SELECTIVE, AC_COUNT };

enum loss_mode { LOSS_FULL, LOSS_CHUNKED, LOSS_COUNT };

enum kernel_kind {
	K_GEMM,        /* (m x k) by (k x n), tiled over the SMs */
	K_ATTN,        /* fused causal attention, tiled over (batch*heads, seq) */
	K_ELEMENTWISE, /* memory-bound: time = bytes / HBM bandwidth */
	K_KIND_COUNT
};

#define KERNEL_NAME_MAX 24

struct kernel {
	char name[KERNEL_NAME_MAX];
	enum kernel_kind kind;
	int64_t m, n, k;   /* K_GEMM: output (m x n), reduction k; K_ATTN: m = batch*heads, n = seq, k = head dim */
	uint64_t flops;    /* floating-point operations the kernel executes */
	uint64_t bytes;    /* HBM bytes read plus written */
};

#define MODEL_MAX_KERNELS 32

/* Look a catalog model up by name; returns 0 and fills *m, or -1. */
int model_lookup(const char *name, struct model_shape *m);
/* Names of the catalog models, NULL-terminated. */
const char *const *model_names(void);

/* 0 when the shape is usable; otherwise -1 and a message in err. */
int model_check(const struct model_shape *m, char *err, int errlen);

/* Parameter tensors. */
void model_block_tensors(const struct model_shape *m, struct tensor_desc out[BT_COUNT]);
int64_t model_block_tensor_offset(const struct model_shape *m, enum block_tensor t); /* elements */

/* Parameter counts (elements). */
int64_t model_embed_params(const struct model_shape *m);
int64_t model_attn_params(const struct model_shape *m);  /* wq wk wv wo of one block */
int64_t model_mlp_params(const struct model_shape *m);   /* gate up down of one block */
int64_t model_block_norm_params(const struct model_shape *m); /* two norms of one block */
int64_t model_block_params(const struct model_shape *m);
int64_t model_final_norm_params(const struct model_shape *m);
int64_t model_output_params(const struct model_shape *m);
int64_t model_module_params(const struct model_shape *m, enum module_kind k);
int64_t model_module_tensors(const struct model_shape *m, enum module_kind k);
int64_t model_total_params(const struct model_shape *m);
/* dim-0 rows of each tensor of a module, for per-tensor shard padding */
int model_module_tensor_list(const struct model_shape *m, enum module_kind k,
			     struct tensor_desc *out, int max);

/*
 * FLOPs per token of one segment in one phase, as the kernels execute them
 * (causal attention counts the half it computes; backward of a GEMM is two
 * GEMMs; recompute repeats forward work). Sums of the segment's kernels.
 */
uint64_t model_segment_flops_per_token(const struct model_shape *m, enum segment_kind s,
				       enum phase ph, enum ac_mode ac);

/*
 * Model FLOPs per token for MFU, the conventional count:
 * 6 N + 12 L H Q T, N the parameters excluding the embedding.
 */
double model_mfu_flops_per_token(const struct model_shape *m);

/*
 * The kernels of one segment, in launch order, for `batch` sequences.
 * act_bytes is the size of an activation element (2 for bf16, 4 for fp32).
 * Returns the count written to out (at most max).
 */
int model_segment_kernels(const struct model_shape *m, int batch, enum segment_kind s,
			  enum phase ph, enum ac_mode ac, enum loss_mode loss, int act_bytes,
			  struct kernel *out, int max);

/*
 * Bytes a segment keeps alive from its forward to its backward, for
 * `batch` sequences, under the checkpointing mode. For SEG_HEAD this
 * includes the logits the loss keeps (fp32, unless chunked).
 */
uint64_t model_segment_saved_bytes(const struct model_shape *m, int batch, enum segment_kind s,
				   enum ac_mode ac, enum loss_mode loss, int act_bytes);

/*
 * Peak transient bytes while a segment runs one phase (intermediates that
 * are freed before the phase ends, and for recompute the activations the
 * segment rebuilds for its backward).
 */
uint64_t model_segment_transient_bytes(const struct model_shape *m, int batch, enum segment_kind s,
				       enum phase ph, enum ac_mode ac, enum loss_mode loss,
				       int act_bytes);

const char *segment_name(enum segment_kind s);
const char *module_name(enum module_kind k);
const char *ac_name(enum ac_mode a);
const char *kernel_kind_name(enum kernel_kind k);

#endif
