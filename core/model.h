/*
 * model.h - the Llama-architecture decoder both halves agree on.
 *
 * A model is a shape (layers, hidden, ffn, heads, kv heads, vocab, seq)
 * and its rotary embedding's base (rope_theta).
 * From the shape this module derives, exactly and in one place:
 *   - the parameter tensors of every module, in their storage order
 *     (the GPU runtime lays a unit's flat buffer out in this order);
 *   - parameter counts per module;
 *   - the kernels one segment runs in forward, backward and recompute,
 *     each with its GEMM shape, FLOPs and HBM bytes (the simulator prices
 *     these, the GPU model launches the same list);
 *   - the activation stores: which tensors a block and the head keep from
 *     forward to backward under each checkpointing and loss mode, and
 *     where each lies in memory (one table that the simulator's byte
 *     counts, the fp32 reference and the CUDA model all read).
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

/*
 * RoPE's base: any value a published model uses (10000 for Llama 2,
 * 500000 for Llama 3, 1e6 and more for long-context models) lies well
 * inside; below 1 the frequencies would grow with the pair index.
 */
#define MODEL_ROPE_THETA_MIN 1.0
#define MODEL_ROPE_THETA_MAX 1e9
/* a custom model's unless the experiment sets one: Llama 3's, the architecture this project builds */
#define MODEL_ROPE_THETA_DEFAULT 500000.0

struct model_shape {
	char name[MODEL_NAME_MAX];
	int layers;   /* transformer blocks */
	int hidden;   /* D */
	int ffn;      /* F, SwiGLU inner size */
	int heads;    /* H query heads */
	int kv_heads; /* KV heads (grouped-query attention), divides H */
	int vocab;    /* V */
	int seq;      /* T, tokens per sequence */
	double rope_theta; /* RoPE's base: position t turns pair i by t theta^(-2i/Q) */
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
	double rope_theta; /* the model's */
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

/*
 * Activation checkpointing. The first AC_COUNT modes are the columns of the
 * activation store table below: the testbed's runtime, the reference and
 * the CUDA model run them. AC_PER_OP and AC_PER_LAYER are PyTorch's
 * (torchtitan's per-op selective policy; every K-th block checkpointed),
 * laid out and priced from the PyTorch recipes (core/recipe.h) only.
 */
enum ac_mode { AC_NONE, AC_FULL, AC_SELECTIVE, AC_COUNT, AC_PER_OP = AC_COUNT, AC_PER_LAYER, AC_MODES };

enum loss_mode { LOSS_FULL, LOSS_CHUNKED, LOSS_COUNT };

enum kernel_kind {
	K_GEMM,        /* (m x k) by (k x n), tiled over the SMs */
	K_ATTN,        /* fused causal attention, tiled over (batch*heads, seq) */
	K_ELEMENTWISE, /* memory-bound: time = bytes / HBM bandwidth */
	K_KIND_COUNT
};

/*
 * How a memory-bound kernel moves its bytes, which sets the bandwidth it
 * reaches (the runtime's catalog entry gives each pattern's rate; a
 * pattern it gives no rate runs as a stream). The patterns are the
 * templates PyTorch's eager element-wise kernels are instances of
 * (aten/src/ATen/native/cuda/Loops.cuh, Reduce.cuh, layer_norm_kernel.cu);
 * this project's kernels and Inductor's generated ones are streams.
 */
enum mem_access {
	MA_STREAM,    /* contiguous operands of one dtype, vectorised loads: the GPU's streaming rate (hbm_eff) */
	MA_NORM,      /* a reduction over each row, then a pass over it (RMSNorm forward and backward) */
	MA_CAST_UP,   /* a copy into a wider dtype (bf16 to fp32): unrolled, element-wide loads */
	MA_GATHER,    /* a copy of an expanded tensor: an offset computed per element (repeat_kv) */
	MA_BROADCAST, /* an element-wise op with a broadcast operand, strided offsets (RoPE's complex product) */
	MA_REDUCE,    /* a sum over a middle dimension (repeat_kv's backward) */
	MA_COUNT
};

#define KERNEL_NAME_MAX 24

struct kernel {
	char name[KERNEL_NAME_MAX];
	enum kernel_kind kind;
	int64_t m, n, k;   /* K_GEMM: output (m x n), reduction k; K_ATTN: m = batch*heads, n = seq, k = head dim */
	uint64_t flops;    /* floating-point operations the kernel executes */
	uint64_t bytes;    /* HBM bytes read plus written */
	int backward;      /* K_ATTN: 1 for the backward kernel (priced apart from the forward) */
	enum mem_access access; /* K_ELEMENTWISE: how it moves its bytes */
};

#define MODEL_MAX_KERNELS 64

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
 * Offset (elements) of a module in the flat whole-model layout
 * embed | L blocks | final norm | output; block is the block index
 * (0 .. layers-1) for MOD_BLOCK and ignored for the others.
 */
int64_t model_module_offset(const struct model_shape *m, enum module_kind k, int block);

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

/* ---- activation stores ---------------------------------------------------- */

/*
 * The activations a segment keeps are the fields of a store, listed once
 * in model.c (block_fields, grad_fields, head_fields): a name, an element
 * count from the model dims, an element type (the activation dtype, or
 * fp32 for statistics and logits) and, per mode, a region:
 *   saved      kept from the segment's forward to its backward;
 *   transient  needed only while a phase runs: what recompute rebuilds
 *              (forward writes it too, as scratch), or scratch alone.
 * A block's fields follow enum ac_mode (AC_NONE saves all; AC_FULL only x;
 * AC_SELECTIVE the GEMM outputs qkv, x1, gateup and attention's att and
 * lse, recomputing the norms and SwiGLU; qkv is roped in place, so the
 * saved qkv is already roped). The head's follow enum loss_mode: x, xn,
 * rstd, lse saved; the fp32 logits saved (N, V) under LOSS_FULL, a
 * transient (chunk, V) under LOSS_CHUNKED; backward turns them into
 * dlogits in place. A block's backward has its own all-transient store of
 * activation gradients.
 *
 * Layout: fields lie in table order inside their region, each at a byte
 * offset that is a multiple of MODEL_FIELD_ALIGN (what the CUDA model's
 * vector accesses and cuBLASLt want); a region's size is the sum of its
 * fields' sizes, each rounded up to MODEL_FIELD_ALIGN. The fp32 reference
 * (act_bytes 4) and the bf16 CUDA model (act_bytes 2) point their store
 * structs with these layouts, so model_segment_saved_bytes and
 * model_segment_transient_bytes are exactly the memory they use.
 */
#define MODEL_FIELD_ALIGN 256
#define MODEL_STORE_FIELDS_MAX 11

enum store_kind {
	STORE_BLOCK,       /* a block's activations, by enum ac_mode */
	STORE_BLOCK_GRADS, /* the activation gradients of a block's backward, all transient */
	STORE_HEAD,        /* final norm and loss, by enum loss_mode */
	STORE_KIND_COUNT
};

/* STORE_BLOCK fields, in layout order (struct ref_block_store) */
enum block_field {
	BF_X,      /* (N, D) block input */
	BF_XN1,    /* (N, D) attn_norm(x) */
	BF_RSTD1,  /* (N) fp32 */
	BF_QKV,    /* (N, (H + 2 KV) Q), q and k roped in place */
	BF_ATT,    /* (N, H Q) attention output */
	BF_LSE,    /* (B, H, T) fp32 attention log-sum-exp */
	BF_X1,     /* (N, D) x + Wo att */
	BF_XN2,    /* (N, D) mlp_norm(x1) */
	BF_RSTD2,  /* (N) fp32 */
	BF_GATEUP, /* (N, 2F) [gate | up] */
	BF_H,      /* (N, F) silu(gate) * up */
	BF_COUNT
};

/* STORE_BLOCK_GRADS fields, in layout order */
enum grad_field {
	GF_DXN,     /* (N, D) */
	GF_DH,      /* (N, F) */
	GF_DGATEUP, /* (N, 2F) */
	GF_DATT,    /* (N, H Q) */
	GF_DQKV,    /* (N, (H + 2 KV) Q) */
	GF_COUNT
};

/* STORE_HEAD fields, in layout order (struct ref_head_store) */
enum head_field {
	HF_X,      /* (N, D) head input */
	HF_XN,     /* (N, D) final_norm(x) */
	HF_RSTD,   /* (N) fp32 */
	HF_LSE,    /* (N) fp32 log-sum-exp of each logits row */
	HF_LOGITS, /* fp32 (N, V) under LOSS_FULL, (chunk, V) under LOSS_CHUNKED */
	HF_COUNT
};

enum field_region { FIELD_SAVED, FIELD_TRANSIENT };
enum field_dtype { FIELD_ACT, FIELD_FP32 };

struct store_field {
	const char *name;
	enum field_region region;
	enum field_dtype dtype;
	int elem_bytes;  /* act_bytes for FIELD_ACT, 4 for FIELD_FP32 */
	uint64_t elems;
	uint64_t offset; /* bytes from the start of its region, a multiple of MODEL_FIELD_ALIGN */
};

struct store_layout {
	enum store_kind kind;
	int nfields;     /* BF_COUNT, GF_COUNT or HF_COUNT; f[] is indexed by that enum */
	struct store_field f[MODEL_STORE_FIELDS_MAX];
	uint64_t saved_bytes;     /* the saved region */
	uint64_t transient_bytes; /* the transient region */
};

/* bytes rounded up to MODEL_FIELD_ALIGN */
uint64_t model_field_align(uint64_t bytes);
/* Rows of fp32 logits the chunked loss holds at once: 1024, at most batch * seq. */
int model_loss_chunk_rows(const struct model_shape *m, int batch);

/* The layout of a block's store for `batch` sequences; act_bytes as below. */
void model_block_store_layout(struct store_layout *l, const struct model_shape *m, int batch,
			      enum ac_mode ac, int act_bytes);
/* The layout of a block backward's activation-gradient scratch (transient_bytes). */
void model_block_grads_layout(struct store_layout *l, const struct model_shape *m, int batch,
			      int act_bytes);
/* The layout of the head's store; chunk (rows, > 0) matters for LOSS_CHUNKED only. */
void model_head_store_layout(struct store_layout *l, const struct model_shape *m, int batch,
			     enum loss_mode loss, int chunk, int act_bytes);
/*
 * Where field f of a laid-out store lies: saved or transient, by the
 * field's region, plus its offset. The base it needs must not be NULL.
 */
void *model_store_field_at(const struct store_layout *l, int f, void *saved, void *transient);

/*
 * Bytes a segment keeps alive from its forward to its backward, for
 * `batch` sequences: the saved region of its store (SEG_EMBED: the int32
 * token ids). act_bytes is the size of an activation element.
 */
uint64_t model_segment_saved_bytes(const struct model_shape *m, int batch, enum segment_kind s,
				   enum ac_mode ac, enum loss_mode loss, int act_bytes);

/*
 * Transient bytes a segment needs while it runs one phase. A block:
 * PH_FWD and PH_RECOMPUTE the transient region of its store (forward
 * writes every field; 0 under AC_NONE), PH_BWD the activation-gradient
 * scratch. The head: the logits chunk under LOSS_CHUNKED in forward and
 * backward (which recomputes it), else 0.
 */
uint64_t model_segment_transient_bytes(const struct model_shape *m, int batch, enum segment_kind s,
				       enum phase ph, enum ac_mode ac, enum loss_mode loss,
				       int act_bytes);

const char *segment_name(enum segment_kind s);
const char *module_name(enum module_kind k);
const char *ac_name(enum ac_mode a);
const char *kernel_kind_name(enum kernel_kind k);
const char *mem_access_name(enum mem_access a);

#endif
