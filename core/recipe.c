/*
 * recipe.c - the PyTorch recipes of a block and the head (see recipe.h).
 *
 * A block is a table of forward ops in execution order. Each op names the
 * tensors it reads and writes and the tensors its backward reads (what
 * autograd saves for it, or what the compiled backward graph keeps), the
 * kernels its backward launches, and whether torchtitan's checkpointing
 * policies count it as a matmul or an attention. Everything else follows
 * from the table:
 *   forward kernels     the ops in order; an element-wise op moves the
 *                       bytes of what it reads and writes;
 *   backward kernels    the ops in reverse: a matmul's dgrad and wgrad, an
 *                       attention's backward, an element-wise op's kernels,
 *                       each reading the incoming gradient and the saved
 *                       tensors, the input gradients written once; where a
 *                       tensor feeds several ops, autograd adds their
 *                       gradients (one add per extra consumer, eager only:
 *                       Inductor fuses them);
 *   saved bytes         the tensors the mode keeps, each rounded to 512 bytes;
 *   recompute kernels   the forward ops whose outputs the mode does not keep,
 *                       up to the last op that saves a tensor.
 *
 * Sources (torchtitan torchtitan/models/llama3/model/model.py, PyTorch
 * 2.11): Attention.forward: wq, wk, wv; apply_rotary_emb: xq.float(),
 * view_as_complex, * freqs_cis (complex64: the table read once besides
 * the operand), view_as_real, type_as(xq),
 * whose product's backward (MulBackward0: grad * freqs_cis.conj()) clones
 * the table's lazy conjugate first (PyTorch 2.11 on a CPU: _conj, clone,
 * mul; the H100 profile: four kernels each for q and k);
 * repeat_kv: unsqueeze, expand, reshape (a copy of the non-contiguous
 * expansion; without GQA it returns its input: no_repeat); transpose(1, 2) views into F.scaled_dot_product_attention,
 * whose flash backend (aten::_scaled_dot_product_flash_attention) saves
 * query, key, value, output and logsumexp and whose output is already
 * laid out (B, T, H, Q), so .transpose(1, 2).contiguous() copies nothing;
 * its backward launches flash_bwd_dot_do_o (dO . O per row), the dq/dk/dv
 * kernel and flash_bwd_convert_dq (the fp32 dq accumulator to bf16)
 * (flash-attention csrc/flash_attn/src/flash_bwd_launch_template.h).
 * nn.RMSNorm -> aten::rms_norm -> aten::_fused_rms_norm, one CUDA kernel
 * forward writing the output and the fp32 rstd, saving input and rstd;
 * _fused_rms_norm_backward, a dx kernel and a dgamma kernel (the registered
 * CUDA kernels of PyTorch >= 2.8). FeedForward: w2(F.silu(w1(x)) * w3(x)):
 * silu saves its input, mul both operands. Every matmul saves its input.
 * Cross-entropy (torchtitan components/loss.py): logits.float(),
 * log_softmax (saves its output), nll_loss (saves the int64 targets).
 */
#include "recipe.h"
#include "klist.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

const char *const kernel_recipe_names[] = { "testbed", "eager", "compile", NULL };
const char *const attention_kernel_names[] = { "testbed", "flash", "cudnn", NULL };

/* ---- kernels ------------------------------------------------------------ */

static void ew(struct klist *l, const char *name, uint64_t bytes, uint64_t flops)
{
	klist_put(l, name, K_ELEMENTWISE, 0, 0, 0, flops, bytes);
}

/* An element-wise kernel that moves its bytes by pattern `access` (model.h). */
static void ew_as(struct klist *l, const char *name, uint64_t bytes, uint64_t flops, enum mem_access access)
{
	ew(l, name, bytes, flops);
	l->k[l->n - 1].access = access;
}

/* ---- the block's tensors ------------------------------------------------- */

enum tensor {
	T_X,     /* (N, D) block input */
	T_RSTD1, /* (N) fp32 */
	T_XN1,   /* (N, D) attention_norm(x) */
	T_Q,     /* (N, H Q) wq out */
	T_K,     /* (N, KV Q) wk out */
	T_V,     /* (N, KV Q) wv out */
	T_QF,    /* (N, H Q) fp32: q.float() */
	T_KF,    /* (N, KV Q) fp32 */
	T_QC,    /* (N, H Q) fp32: q * freqs_cis, complex64 pairs */
	T_KC,    /* (N, KV Q) fp32 */
	T_QR,    /* (N, H Q) roped q, type_as back */
	T_KR,    /* (N, KV Q) roped k */
	T_KE,    /* (N, H Q) repeat_kv(k) */
	T_VE,    /* (N, H Q) repeat_kv(v) */
	T_ATT,   /* (N, H Q) attention output */
	T_LSE,   /* (B, H, T) fp32 logsumexp */
	T_WO,    /* (N, D) wo out */
	T_H,     /* (N, D) x + wo out */
	T_RSTD2, /* (N) fp32 */
	T_XN2,   /* (N, D) ffn_norm(h) */
	T_G,     /* (N, F) w1 out */
	T_U,     /* (N, F) w3 out */
	T_S,     /* (N, F) silu(g) */
	T_P,     /* (N, F) silu(g) * u */
	T_DN,    /* (N, D) w2 out */
	T_OUT,   /* (N, D) h + w2 out: the next block's input */
	T_COUNT,
	T_NONE = T_COUNT
};

enum extent { E_ND, E_N, E_NHQ, E_NKVQ, E_BHT, E_NF };

static const struct { enum extent e; int fp32; } tensor_of[T_COUNT] = {
	[T_X] = { E_ND, 0 },     [T_RSTD1] = { E_N, 1 },   [T_XN1] = { E_ND, 0 },
	[T_Q] = { E_NHQ, 0 },    [T_K] = { E_NKVQ, 0 },    [T_V] = { E_NKVQ, 0 },
	[T_QF] = { E_NHQ, 1 },   [T_KF] = { E_NKVQ, 1 },   [T_QC] = { E_NHQ, 1 },
	[T_KC] = { E_NKVQ, 1 },  [T_QR] = { E_NHQ, 0 },    [T_KR] = { E_NKVQ, 0 },
	[T_KE] = { E_NHQ, 0 },   [T_VE] = { E_NHQ, 0 },    [T_ATT] = { E_NHQ, 0 },
	[T_LSE] = { E_BHT, 1 },  [T_WO] = { E_ND, 0 },     [T_H] = { E_ND, 0 },
	[T_RSTD2] = { E_N, 1 },  [T_XN2] = { E_ND, 0 },    [T_G] = { E_NF, 0 },
	[T_U] = { E_NF, 0 },     [T_S] = { E_NF, 0 },      [T_P] = { E_NF, 0 },
	[T_DN] = { E_ND, 0 },    [T_OUT] = { E_ND, 0 },
};

static uint64_t tensor_bytes(int t, const struct model_dims *d, int a)
{
	uint64_t N = (uint64_t)d->N, e = 0;

	assert(t >= 0 && t < T_COUNT);
	switch (tensor_of[t].e) {
	case E_ND: e = N * d->D; break;
	case E_N: e = N; break;
	case E_NHQ: e = N * d->hq; break;
	case E_NKVQ: e = N * d->KV * d->Q; break;
	case E_BHT: e = (uint64_t)d->B * d->H * d->T; break;
	case E_NF: e = N * d->F; break;
	}
	return e * (uint64_t)(tensor_of[t].fp32 ? 4 : a);
}

static uint64_t aligned(uint64_t bytes)
{
	return (bytes + RECIPE_TENSOR_ALIGN - 1) / RECIPE_TENSOR_ALIGN * RECIPE_TENSOR_ALIGN;
}

/* ---- the block's ops ------------------------------------------------------ */

enum sac { SAC_OTHER, SAC_MM, SAC_ATTN };

#define MAXT 6

struct op {
	const char *name;
	enum kernel_kind kind;    /* K_GEMM: in[0] (N, k) by the weight into out[0] (N, n) */
	enum sac sac;
	int in[MAXT], out[MAXT];  /* tensors, T_NONE-terminated (T_NONE is 0-initialised away below) */
	int saves[MAXT];          /* what its backward reads */
	int bwd_kernels;          /* element-wise: kernels its backward launches (0: a view, none) */
	const char *bwd_name;
	enum mem_access fwd_access, bwd_access; /* element-wise: how its forward and backward kernels move bytes */
};

#define L(...) { __VA_ARGS__, T_NONE }

/*
 * The block's first ops, eager and compiled alike: the norm, the three
 * projections, and RoPE's casts and complex product (which Inductor leaves
 * to eager kernels: compile_block), up to k's cast back. NORM and UP are
 * how the norm's kernels and the casts to fp32 move their bytes: eager
 * PyTorch's templates (MA_NORM, MA_CAST_UP), or Inductor's generated
 * kernels (MA_STREAM). The complex product is eager in both, a broadcast
 * of the rotation table over the heads (Loops.cuh's elementwise_kernel
 * with offsets, the H200 profile's elementwise_kernel<128, 2>).
 */
#define QKV_ROPE_OPS(NORM, UP) \
	{ "attn_norm", K_ELEMENTWISE, SAC_OTHER, L(T_X), L(T_XN1, T_RSTD1), L(T_X, T_RSTD1), 2, "attn_norm_bwd", NORM, NORM }, \
	{ "wq", K_GEMM, SAC_MM, L(T_XN1), L(T_Q), L(T_XN1), 0, NULL, MA_STREAM, MA_STREAM }, \
	{ "wk", K_GEMM, SAC_MM, L(T_XN1), L(T_K), L(T_XN1), 0, NULL, MA_STREAM, MA_STREAM }, \
	{ "wv", K_GEMM, SAC_MM, L(T_XN1), L(T_V), L(T_XN1), 0, NULL, MA_STREAM, MA_STREAM }, \
	{ "q_float", K_ELEMENTWISE, SAC_OTHER, L(T_Q), L(T_QF), L(T_NONE), 1, "q_float_bwd", UP, MA_STREAM }, \
	{ "k_float", K_ELEMENTWISE, SAC_OTHER, L(T_K), L(T_KF), L(T_NONE), 1, "k_float_bwd", UP, MA_STREAM }, \
	{ "q_rope", K_ELEMENTWISE, SAC_OTHER, L(T_QF), L(T_QC), L(T_NONE), 1, "q_rope_bwd", MA_BROADCAST, MA_BROADCAST }, \
	{ "q_type_as", K_ELEMENTWISE, SAC_OTHER, L(T_QC), L(T_QR), L(T_NONE), 1, "q_type_as_bwd", MA_STREAM, UP }, \
	{ "k_rope", K_ELEMENTWISE, SAC_OTHER, L(T_KF), L(T_KC), L(T_NONE), 1, "k_rope_bwd", MA_BROADCAST, MA_BROADCAST }

/*
 * PyTorch eager, torchtitan's TransformerBlock (see the top of this file).
 * How each kernel moves its bytes, by the template the H200 session's
 * profile names (data/pytorch/nvidia-h200-fsdp2-w1.h5, each run's
 * `kernels`): the norms vectorized_layer_norm_kernel,
 * layer_norm_grad_input_kernel and GammaBetaBackward (MA_NORM); the casts
 * to fp32 unrolled_elementwise_kernel with direct_copy (MA_CAST_UP; the
 * casts back are vectorised streams); repeat_kv's copy
 * elementwise_kernel<128, 4> (MA_GATHER) and its backward's sum
 * reduce_kernel (MA_REDUCE); the rest vectorized_elementwise_kernel.
 */
static const struct op eager_block[] = {
	QKV_ROPE_OPS(MA_NORM, MA_CAST_UP),
	{ "k_type_as", K_ELEMENTWISE, SAC_OTHER, L(T_KC), L(T_KR), L(T_NONE), 1, "k_type_as_bwd", MA_STREAM, MA_CAST_UP },
	{ "k_repeat", K_ELEMENTWISE, SAC_OTHER, L(T_KR), L(T_KE), L(T_NONE), 1, "k_repeat_bwd", MA_GATHER, MA_REDUCE },
	{ "v_repeat", K_ELEMENTWISE, SAC_OTHER, L(T_V), L(T_VE), L(T_NONE), 1, "v_repeat_bwd", MA_GATHER, MA_REDUCE },
	{ "attention", K_ATTN, SAC_ATTN, L(T_QR, T_KE, T_VE), L(T_ATT, T_LSE), L(T_QR, T_KE, T_VE, T_ATT, T_LSE), 0, NULL, MA_STREAM, MA_STREAM },
	{ "wo", K_GEMM, SAC_MM, L(T_ATT), L(T_WO), L(T_ATT), 0, NULL, MA_STREAM, MA_STREAM },
	{ "residual1", K_ELEMENTWISE, SAC_OTHER, L(T_X, T_WO), L(T_H), L(T_NONE), 0, NULL, MA_STREAM, MA_STREAM },
	{ "mlp_norm", K_ELEMENTWISE, SAC_OTHER, L(T_H), L(T_XN2, T_RSTD2), L(T_H, T_RSTD2), 2, "mlp_norm_bwd", MA_NORM, MA_NORM },
	{ "w1", K_GEMM, SAC_MM, L(T_XN2), L(T_G), L(T_XN2), 0, NULL, MA_STREAM, MA_STREAM },
	{ "w3", K_GEMM, SAC_MM, L(T_XN2), L(T_U), L(T_XN2), 0, NULL, MA_STREAM, MA_STREAM },
	{ "silu", K_ELEMENTWISE, SAC_OTHER, L(T_G), L(T_S), L(T_G), 1, "silu_bwd", MA_STREAM, MA_STREAM },
	{ "mul", K_ELEMENTWISE, SAC_OTHER, L(T_S, T_U), L(T_P), L(T_S, T_U), 2, "mul_bwd", MA_STREAM, MA_STREAM },
	{ "w2", K_GEMM, SAC_MM, L(T_P), L(T_DN), L(T_P), 0, NULL, MA_STREAM, MA_STREAM },
	{ "residual2", K_ELEMENTWISE, SAC_OTHER, L(T_H, T_DN), L(T_OUT), L(T_NONE), 0, NULL, MA_STREAM, MA_STREAM },
};

/*
 * torch.compile (Inductor) of the same block: each chain of element-wise
 * ops between two library calls is one generated kernel (the residual add
 * with the next norm, silu with mul, k's cast back with the KV
 * expansion); matmuls and SDPA stay cuBLAS and flash calls, and so does
 * RoPE's complex product, which Inductor leaves to the eager kernel
 * ("Torchinductor does not support code generation for complex
 * operators", torch/_inductor/lowering.py, PyTorch 2.11), backward too:
 * the casts around it are generated kernels of their own (the first H100
 * session's profile: 4 kernels more forward and 6 more backward than one
 * fused kernel for each of q and k). Without
 * checkpointing the partitioner keeps what eager autograd does less silu's
 * output (the fused backward recomputes it from g), with the first residual
 * sum h as wo's output, as many bytes (torch/_inductor/scheduler.py fusion,
 * torch/_functorch/partitioners.py min_cut_rematerialization_partition;
 * experiments/pytorch/saved.py lists PyTorch 2.11's choice, and kept()
 * says what checkpointing changes). Generated kernels are streams.
 */
static const struct op compile_block[] = {
	QKV_ROPE_OPS(MA_STREAM, MA_STREAM),
	{ "k_type_as_repeat", K_ELEMENTWISE, SAC_OTHER, L(T_KC), L(T_KE), L(T_NONE), 1, "k_type_as_repeat_bwd", MA_STREAM, MA_STREAM },
	{ "v_repeat", K_ELEMENTWISE, SAC_OTHER, L(T_V), L(T_VE), L(T_NONE), 1, "v_repeat_bwd", MA_STREAM, MA_STREAM },
	{ "attention", K_ATTN, SAC_ATTN, L(T_QR, T_KE, T_VE), L(T_ATT, T_LSE), L(T_QR, T_KE, T_VE, T_ATT, T_LSE), 0, NULL, MA_STREAM, MA_STREAM },
	{ "wo", K_GEMM, SAC_MM, L(T_ATT), L(T_WO), L(T_ATT), 0, NULL, MA_STREAM, MA_STREAM },
	{ "residual1_mlp_norm", K_ELEMENTWISE, SAC_OTHER, L(T_X, T_WO), L(T_H, T_XN2, T_RSTD2), L(T_H, T_RSTD2), 2,
	  "mlp_norm_bwd", MA_STREAM, MA_STREAM },
	{ "w1", K_GEMM, SAC_MM, L(T_XN2), L(T_G), L(T_XN2), 0, NULL, MA_STREAM, MA_STREAM },
	{ "w3", K_GEMM, SAC_MM, L(T_XN2), L(T_U), L(T_XN2), 0, NULL, MA_STREAM, MA_STREAM },
	{ "silu_mul", K_ELEMENTWISE, SAC_OTHER, L(T_G, T_U), L(T_P), L(T_G, T_U), 1, "silu_mul_bwd", MA_STREAM, MA_STREAM },
	{ "w2", K_GEMM, SAC_MM, L(T_P), L(T_DN), L(T_P), 0, NULL, MA_STREAM, MA_STREAM },
	{ "residual2", K_ELEMENTWISE, SAC_OTHER, L(T_H, T_DN), L(T_OUT), L(T_NONE), 0, NULL, MA_STREAM, MA_STREAM },
};

#undef L

struct table {
	const struct op *ops;
	int n;
	int add_grads;   /* autograd adds the gradients of a tensor read by several ops (eager) */
	int partitioned; /* a compiled graph: a policy's saved output is kept only where the backward needs it */
};

static struct table table_of(enum kernel_recipe r)
{
	if (r == KR_EAGER)
		return (struct table){ eager_block, (int)(sizeof eager_block / sizeof eager_block[0]), 1, 0 };
	assert(r == KR_COMPILE);
	return (struct table){ compile_block, (int)(sizeof compile_block / sizeof compile_block[0]), 0, 1 };
}

/* Lists end at T_NONE; a list left short by its initialiser is padded with 0 = T_X, so stop at T_NONE only. */
#define EACH(t, list) for (const int *t = (list); *t != T_NONE; t++)

typedef uint32_t tset; /* a set of tensors, one bit each */
_Static_assert(T_COUNT <= 32, "a tset is 32 bits");
_Static_assert(T_COUNT <= RECIPE_TRANSIENT_MAX, "a phase's transient tensors fit the list");

static tset saved_by(const struct op *o)
{
	tset s = 0;
	EACH(t, o->saves)
		s |= 1u << *t;
	return s;
}

static tset outputs_of(const struct op *o)
{
	tset s = 0;
	EACH(t, o->out)
		s |= 1u << *t;
	return s;
}

static tset inputs_of(const struct op *o)
{
	tset s = 0;
	EACH(t, o->in)
		s |= 1u << *t;
	return s;
}

/*
 * What the backward needs when the block keeps `keep`: the tensors some
 * op's backward reads, and the inputs of every op that must run again to
 * make one it needs and the block does not keep (ops in reverse, so that
 * an op's inputs are added before the ops that made them are looked at).
 */
static tset needed(const struct table *t, tset keep)
{
	tset need = 0;

	for (int i = 0; i < t->n; i++)
		need |= saved_by(&t->ops[i]);
	for (int i = t->n - 1; i >= 0; i--)
		if (outputs_of(&t->ops[i]) & need & ~keep)
			need |= inputs_of(&t->ops[i]);
	return need;
}

/*
 * What the block keeps under mode ac (AC_PER_LAYER is not a block's mode).
 * Eager checkpointing caches every output its policy saves
 * (torch/utils/checkpoint.py, _CachingTorchDispatchMode: MUST_SAVE and
 * PREFER_SAVE outputs go to its storage), the last matmul's too, which
 * only the residual add reads. A compiled block's partitioner saves a
 * MUST_SAVE output only where the backward reads it or recomputes from it
 * (torch/_functorch/partitioners.py); experiments/pytorch/saved.py lists
 * what PyTorch 2.11's compiled forward returns for its backward, and it is
 * this set under every mode.
 */
static tset kept(const struct table *t, enum ac_mode ac)
{
	tset all = 0, keep = 1u << T_X;
	int mm = 0;

	for (int i = 0; i < t->n; i++)
		all |= saved_by(&t->ops[i]);
	switch (ac) {
	case AC_NONE:
		return all;
	case AC_FULL:
		return keep;
	case AC_SELECTIVE:
	case AC_PER_OP:
		for (int i = 0; i < t->n; i++) {
			const struct op *o = &t->ops[i];
			/* torchtitan _apply_op_sac: a matmul's output is saved unless it is the block's 2nd, 4th, ... */
			if (o->sac == SAC_MM)
				mm++;
			if (o->sac == SAC_ATTN || (o->sac == SAC_MM && (ac == AC_SELECTIVE || mm % 2 == 1)))
				keep |= outputs_of(o);
		}
		return t->partitioned ? keep & needed(t, keep) : keep;
	default:
		assert(!"not a block's checkpointing mode");
		return all;
	}
}

/*
 * repeat_kv of a model without GQA (as many KV heads as heads: Llama 2 7B
 * and 13B) returns its input (torchtitan's repeat_kv: n_rep == 1): the
 * expanded k and v are k and v themselves, no kernel makes them and they
 * take no memory of their own (experiments/pytorch/recipe.py and saved.py
 * at such a shape).
 */
static int no_repeat(const struct model_dims *d)
{
	return d->H == d->KV;
}

static int repeat_op(const struct op *o)
{
	return !strcmp(o->name, "k_repeat") || !strcmp(o->name, "v_repeat");
}

/* s with the expanded k and v as the tensors they are (no_repeat) */
static tset alias(tset s, const struct model_dims *d)
{
	if (!no_repeat(d))
		return s;
	if (s >> T_KE & 1)
		s = (s & ~((tset)1 << T_KE)) | (tset)1 << T_KR;
	if (s >> T_VE & 1)
		s = (s & ~((tset)1 << T_VE)) | (tset)1 << T_V;
	return s;
}

static uint64_t set_bytes(tset s, const struct model_dims *d, int a)
{
	uint64_t b = 0;

	s = alias(s, d);
	for (int t = 0; t < T_COUNT; t++)
		if (s >> t & 1)
			b += aligned(tensor_bytes(t, d, a));
	return b;
}

static uint64_t list_bytes(const int *list, const struct model_dims *d, int a)
{
	uint64_t b = 0;
	EACH(t, list)
		b += tensor_bytes(*t, d, a);
	return b;
}

/* Causal attention forward: 2 T^2 Q per (sequence, head), half of QK^T and PV. */
static uint64_t attn_flops(const struct model_dims *d)
{
	return 2ull * d->B * d->H * d->T * d->T * d->Q;
}

static int64_t cols(int t, const struct model_dims *d)
{
	return (int64_t)(tensor_bytes(t, d, 1) / (uint64_t)d->N);
}

/*
 * RoPE's complex product (q_rope, k_rope, eager and compiled alike): its
 * backward (MulBackward0, grad * other.conj()) first clones the lazy
 * conjugate of the rotation table (aten::_conj, then clone), a kernel of
 * its own over T x Q/2 complex64.
 */
static int conj_table(const struct op *o)
{
	return !strcmp(o->name, "q_rope") || !strcmp(o->name, "k_rope");
}

/*
 * What RoPE's product reads of the rotation table besides its operand: the
 * table, T x Q/2 complex64, broadcast over the batch and heads and read
 * once (forward: the table; backward: its conjugate). PyTorch's dispatcher
 * gives the product these bytes (experiments/pytorch/recipe.py).
 */
static uint64_t table_bytes(const struct op *o, const struct model_dims *d)
{
	return conj_table(o) ? (uint64_t)d->T * (uint64_t)d->Q * 4 : 0;
}

static void op_forward(struct klist *l, const struct op *o, const struct model_dims *d, int a)
{
	if (no_repeat(d) && repeat_op(o))
		return;
	switch (o->kind) {
	case K_GEMM:
		klist_gemm(l, o->name, d->N, cols(o->out[0], d), cols(o->in[0], d), a);
		break;
	case K_ATTN:
		klist_put(l, o->name, K_ATTN, d->B * d->H, d->T, d->Q, attn_flops(d),
		    list_bytes(o->in, d, a) + list_bytes(o->out, d, a));
		break;
	default:
		ew_as(l, o->name, list_bytes(o->in, d, a) + list_bytes(o->out, d, a) + table_bytes(o, d),
		      list_bytes(o->out, d, 1), o->fwd_access);
	}
}

/*
 * z = x * y: PyTorch's mul_tensor_backward for each factor
 * (tools/autograd/derivatives.yaml), dx = dz * y and dy = dz * x, a kernel
 * each that reads dz and the other factor and writes its factor's gradient.
 */
static int product_rule(const struct op *o)
{
	return !strcmp(o->name, "mul");
}

static void op_backward(struct klist *l, const struct op *o, const struct model_dims *d, int a)
{
	char name[KERNEL_NAME_MAX];
	uint64_t dout = list_bytes(o->out, d, a), saves = list_bytes(o->saves, d, a), din = list_bytes(o->in, d, a);

	if (no_repeat(d) && repeat_op(o))
		return;
	switch (o->kind) {
	case K_GEMM: {
		int64_t in = cols(o->in[0], d), out = cols(o->out[0], d);
		snprintf(name, sizeof name, "%s_dgrad", o->name);
		klist_gemm(l, name, d->N, in, out, a);
		snprintf(name, sizeof name, "%s_wgrad", o->name);
		klist_gemm(l, name, out, in, d->N, a);
		break;
	}
	case K_ATTN: {
		uint64_t lse = tensor_bytes(T_LSE, d, a), dq = tensor_bytes(T_QR, d, a);
		/* flash backward: dO . O per row, the dq/dk/dv kernel (QK^T again, dV, dP, dQ, dK: 5/2 of forward), dq back to bf16 */
		ew(l, "attention_bwd_dot", 2 * tensor_bytes(T_ATT, d, a) + lse, 2 * (uint64_t)d->N * d->hq);
		klist_put(l, "attention_bwd", K_ATTN, d->B * d->H, d->T, d->Q, 5 * attn_flops(d) / 2, saves + dout + din + lse);
		l->k[l->n - 1].backward = 1;
		ew(l, "attention_bwd_dq", dq / (uint64_t)a * 4 + dq, 0);
		break;
	}
	default:
		if (conj_table(o)) {
			/* the table's conjugate cloned: T x Q/2 complex64 read and written */
			snprintf(name, sizeof name, "%s_conj", o->name);
			ew(l, name, 2 * (uint64_t)d->T * (uint64_t)d->Q * 4, 0);
		}
		for (int k = 0; k < o->bwd_kernels; k++) {
			snprintf(name, sizeof name, o->bwd_kernels > 1 ? "%s%d" : "%s", o->bwd_name, k);
			if (product_rule(o)) { /* kernel k: dz and the other factor read, factor k's gradient written */
				uint64_t dk = tensor_bytes(o->in[k], d, a);
				ew_as(l, name, dout + (saves - dk) + dk, dk / (uint64_t)a, o->bwd_access);
				continue;
			}
			/* each kernel reads the incoming gradient and the saved tensors (RoPE's: the table's conjugate); the
			 * input gradients are written once */
			ew_as(l, name, dout + saves + table_bytes(o, d) + (k == 0 ? din : 0), din / (uint64_t)a, o->bwd_access);
		}
	}
}

/* Autograd adds the gradients a tensor gets from each op reading it: one add per consumer past the first. */
static void grad_adds(struct klist *l, const struct table *t, const int *tensors, const struct model_dims *d, int a)
{
	EACH(x, tensors) {
		int readers = 0;
		char name[KERNEL_NAME_MAX];
		for (int i = 0; i < t->n; i++)
			EACH(y, t->ops[i].in)
				readers += *y == *x;
		for (int k = 1; k < readers; k++) {
			snprintf(name, sizeof name, "grad_add%d", *x);
			ew(l, name, 3 * tensor_bytes(*x, d, a), tensor_bytes(*x, d, 1));
		}
	}
}

/* The last op whose backward reads a tensor: recompute stops there (its inputs saved, it need not run). */
static int last_saving(const struct table *t)
{
	int last = -1;

	for (int i = 0; i < t->n; i++)
		if (saved_by(&t->ops[i]))
			last = i;
	return last;
}

static void block_kernels(struct klist *l, const struct table *t, const struct model_dims *d, enum phase ph,
			  enum ac_mode ac, int a)
{
	switch (ph) {
	case PH_FWD:
		for (int i = 0; i < t->n; i++)
			op_forward(l, &t->ops[i], d, a);
		break;
	case PH_BWD:
		for (int i = t->n - 1; i >= 0; i--) {
			if (t->add_grads)
				grad_adds(l, t, t->ops[i].out, d, a);
			op_backward(l, &t->ops[i], d, a);
		}
		if (t->add_grads)
			grad_adds(l, t, (const int[]){ T_X, T_NONE }, d, a);
		break;
	case PH_RECOMPUTE: {
		tset keep = kept(t, ac);
		int stop = last_saving(t);
		if (ac == AC_NONE)
			break;
		for (int i = 0; i < stop; i++) {
			tset out = outputs_of(&t->ops[i]);
			/* an op whose outputs the mode keeps returns them from the cache */
			if ((out & keep) != out)
				op_forward(l, &t->ops[i], d, a);
		}
		/* the last saving op runs only if it saves what it computes */
		if (stop >= 0 && (saved_by(&t->ops[stop]) & outputs_of(&t->ops[stop]) & ~keep))
			op_forward(l, &t->ops[stop], d, a);
		break;
	}
	default:
		assert(!"bad phase");
	}
}

/* ---- the head -------------------------------------------------------------- */

/*
 * Eager: final norm, output GEMM, logits.float(), log_softmax, nll_loss
 * (a gather of N targets); backward: nll_loss_backward (a zero-filled fp32
 * gradient, then a scatter), log_softmax_backward, the cast back, dgrad,
 * wgrad, the norm's two kernels. Compiled: one reduction reading the bf16
 * logits for each row's maximum and the log of its sum of exponentials
 * (Inductor's decomposition of log_softmax: amax, then log(sum(exp(x -
 * amax)))), and one backward kernel writing the bf16 gradient of the
 * logits from logits, those two and targets. The final norm is eager
 * PyTorch's under both: torchtitan compiles each block and the loss
 * (apply_compile), not the model around them.
 */
/*
 * Passes over the N x V fp32 logits ATen's (log_)softmax kernels make, a
 * read or a write of the whole each (aten/src/ATen/native/cuda/SoftMax.cu,
 * host_softmax and host_softmax_backward over the last dimension): a row
 * of at most 1024 values and 4 KiB is a warp's, read once (forward: read,
 * write; backward: the gradient and the output read, the gradient written).
 * A longer row takes a block: cunn_SoftMaxForward reads it three times
 * (its maximum, the sum of exponentials, then the output pass) and writes
 * once, unless it fits the block's default shared memory (sharedMemPerBlock,
 * 48 KiB, less a float per warp, with V a multiple of the 4-wide vectors),
 * where cunn_SoftMaxForwardSmem keeps it after the first read;
 * cunn_SoftMaxBackward reads the gradient twice (its sum, then the
 * output pass) and the output once, and writes once. For llama3's
 * vocabulary (128,256: 501 KiB a row) that is four passes each way, as
 * the first H100 session's profile shows (5.56 and 5.71 ms for 4.2 GB of
 * logits at 3 TB/s).
 */
static uint64_t softmax_passes(int64_t V, int backward)
{
	int warp_row = V <= 1024, smem_row = V * 4 + 32 * 4 < 48 * 1024 && V % 4 == 0;

	if (backward)
		return warp_row ? 3 : 4;
	return warp_row || smem_row ? 2 : 4;
}

static void head_kernels(struct klist *l, enum kernel_recipe r, const struct model_dims *d, enum phase ph, int a)
{
	uint64_t N = (uint64_t)d->N, ND = N * d->D, NV = N * d->V;

	if (ph == PH_FWD) {
		ew_as(l, "final_norm", 2 * ND * a + 4 * N, 4 * ND, MA_NORM);
		klist_gemm(l, "output", d->N, d->V, d->D, a);
		if (r == KR_EAGER) {
			ew_as(l, "loss_float", NV * (a + 4), 0, MA_CAST_UP);
			ew(l, "log_softmax", softmax_passes(d->V, 0) * NV * 4, 5 * NV);
			ew(l, "nll_loss", N * (8 + 4), N);
		} else {
			ew(l, "loss_fused", NV * a + N * (8 + 4 + 4 + 4), 5 * NV);
		}
		return;
	}
	if (ph != PH_BWD)
		return;
	if (r == KR_EAGER) {
		ew(l, "nll_loss_bwd_zero", NV * 4, 0);
		ew(l, "nll_loss_bwd", N * (8 + 4), N);
		ew(l, "log_softmax_bwd", softmax_passes(d->V, 1) * NV * 4, 3 * NV);
		ew(l, "loss_float_bwd", NV * (4 + a), 0);
	} else {
		ew(l, "loss_fused_bwd", 2 * NV * a + N * (8 + 4 + 4), 3 * NV);
	}
	klist_gemm(l, "output_dgrad", d->N, d->D, d->V, a);
	klist_gemm(l, "output_wgrad", d->V, d->D, d->N, a);
	ew_as(l, "final_norm_bwd0", 3 * ND * a + 4 * N, 8 * ND, MA_NORM);
	ew_as(l, "final_norm_bwd1", 2 * ND * a + 4 * N, 2 * ND, MA_NORM);
}

/* ---- public ---------------------------------------------------------------- */

int recipe_kernels(enum kernel_recipe r, const struct model_shape *m, int batch, enum segment_kind s,
		   enum phase ph, enum ac_mode ac, enum loss_mode loss, int act_bytes, struct kernel *out,
		   int max)
{
	struct klist l = { out, 0, max };
	struct model_dims d = model_dims_of(m, batch);
	struct table t;

	assert(r >= 0 && r < KR_COUNT && ac != AC_PER_LAYER);
	if (r == KR_TESTBED || s == SEG_EMBED || (s == SEG_HEAD && loss == LOSS_CHUNKED)) {
		assert(r != KR_TESTBED || ac < AC_COUNT);
		return model_segment_kernels(m, batch, s, ph, ac < AC_COUNT ? ac : AC_FULL, loss, act_bytes, out,
					     max);
	}
	if (s == SEG_HEAD) {
		head_kernels(&l, r, &d, ph, act_bytes);
		return l.n;
	}
	t = table_of(r);
	block_kernels(&l, &t, &d, ph, ac, act_bytes);
	return l.n;
}

uint64_t recipe_saved_bytes(enum kernel_recipe r, const struct model_shape *m, int batch, enum segment_kind s,
			    enum ac_mode ac, enum loss_mode loss, int act_bytes)
{
	struct model_dims d = model_dims_of(m, batch);
	uint64_t N = (uint64_t)d.N, a = (uint64_t)act_bytes;
	struct table t;

	assert(r >= 0 && r < KR_COUNT && ac != AC_PER_LAYER);
	if (r == KR_TESTBED || s == SEG_EMBED || (s == SEG_HEAD && loss == LOSS_CHUNKED))
		return model_segment_saved_bytes(m, batch, s, ac < AC_COUNT ? ac : AC_FULL, loss, act_bytes);
	if (s == SEG_HEAD) {
		/* x and rstd (the norm), its output (the GEMM's input), the int64 targets (nll_loss), and
		 * eager: the fp32 log-probabilities; compiled: the bf16 logits, each row's maximum and the
		 * log of its sum of exponentials (experiments/pytorch/saved.py: PyTorch 2.11's choice) */
		uint64_t b = 2 * aligned(N * d.D * a) + aligned(4 * N) + aligned(8 * N);
		if (r == KR_EAGER)
			return b + aligned(N * d.V * 4);
		return b + aligned(N * d.V * a) + 2 * aligned(4 * N);
	}
	t = table_of(r);
	return set_bytes(kept(&t, ac), &d, act_bytes);
}

int recipe_loss_backward(enum kernel_recipe r, const struct model_shape *m, int batch, enum loss_mode loss,
			 int act_bytes, uint64_t out[RECIPE_TRANSIENT_MAX], int *n)
{
	struct model_dims d = model_dims_of(m, batch);
	uint64_t NV = (uint64_t)d.N * d.V;

	(void)act_bytes;
	*n = 0;
	if (r != KR_EAGER || loss == LOSS_CHUNKED)
		return 0;
	/* nll_loss's gradient (zero-filled, then its targets' entries) and log_softmax's, both fp32 */
	out[(*n)++] = aligned(NV * 4);
	out[(*n)++] = aligned(NV * 4);
	/* head_kernels(PH_BWD): nll_loss_bwd_zero, nll_loss_bwd, log_softmax_bwd, loss_float_bwd */
	return 4;
}

int recipe_head_logits(enum kernel_recipe r, const struct model_shape *m, int batch, enum loss_mode loss,
		       int act_bytes, uint64_t *bytes)
{
	struct model_dims d = model_dims_of(m, batch);

	*bytes = 0;
	if (r == KR_TESTBED || loss == LOSS_CHUNKED)
		return -1;
	/* the first of recipe_transient_tensors(PH_FWD) for eager, among recipe_saved_bytes() compiled */
	*bytes = aligned((uint64_t)d.N * d.V * (uint64_t)act_bytes);
	return r != KR_EAGER;
}

/* The tensors of set s, one entry each, in out[] from n on; returns the new count. */
static int set_tensors(tset s, const struct model_dims *d, int a, uint64_t *out, int n)
{
	s = alias(s, d);
	for (int t = 0; t < T_COUNT; t++)
		if (s >> t & 1)
			out[n++] = aligned(tensor_bytes(t, d, a));
	return n;
}

int recipe_saved_tensors(enum kernel_recipe r, const struct model_shape *m, int batch, enum segment_kind s,
			 enum ac_mode ac, enum loss_mode loss, int act_bytes, uint64_t out[RECIPE_TRANSIENT_MAX])
{
	struct model_dims d = model_dims_of(m, batch);
	struct table t;

	if (r == KR_TESTBED || s != SEG_BLOCK) {
		out[0] = recipe_saved_bytes(r, m, batch, s, ac, loss, act_bytes);
		return out[0] > 0;
	}
	t = table_of(r);
	return set_tensors(kept(&t, ac), &d, act_bytes, out, 0);
}

int recipe_transient_tensors(enum kernel_recipe r, const struct model_shape *m, int batch, enum segment_kind s,
			     enum phase ph, enum ac_mode ac, enum loss_mode loss, int act_bytes,
			     uint64_t out[RECIPE_TRANSIENT_MAX])
{
	struct model_dims d = model_dims_of(m, batch);
	uint64_t NV = (uint64_t)d.N * d.V, a = (uint64_t)act_bytes;
	struct table t;
	tset all = 0, made = 0;
	int n = 0;

	assert(r >= 0 && r < KR_COUNT && ac != AC_PER_LAYER);
	if (r == KR_TESTBED || s == SEG_EMBED || (s == SEG_HEAD && loss == LOSS_CHUNKED)) {
		/* the testbed's one scratch region (the chunked loss's logits chunk) */
		out[0] = model_segment_transient_bytes(m, batch, s, ph, ac < AC_COUNT ? ac : AC_FULL, loss, act_bytes);
		return out[0] > 0;
	}
	if (s == SEG_HEAD) {
		if (r != KR_EAGER || ph == PH_RECOMPUTE)
			return 0;
		/* forward: the bf16 logits and their fp32 copy */
		if (ph == PH_FWD) {
			out[0] = aligned(NV * a);
			out[1] = aligned(NV * 4);
			return 2;
		}
		/*
		 * backward, after the loss's own (recipe_loss_backward): the
		 * logits' gradient cast back (the fp32 cast's backward), which
		 * the output GEMM's backward reads
		 */
		out[0] = aligned(NV * a);
		return 1;
	}
	if (ph == PH_BWD) {
		/* the testbed's activation gradients, each a tensor of autograd's */
		struct store_layout l;

		model_block_grads_layout(&l, m, batch, act_bytes);
		for (int f = 0; f < l.nfields; f++)
			if (l.f[f].region == FIELD_TRANSIENT && l.f[f].elems)
				out[n++] = aligned(l.f[f].elems * (uint64_t)l.f[f].elem_bytes);
		return n;
	}
	t = table_of(r);
	for (int i = 0; i < t.n; i++) {
		all |= saved_by(&t.ops[i]);
		made |= outputs_of(&t.ops[i]);
	}
	all = alias(all, &d);
	made = alias(made, &d);
	/*
	 * Checkpointed: what backward reads and the policy does not keep, made
	 * and freed in the forward and again in the recompute. The forward also
	 * makes what no backward reads (below), which is left out here: a
	 * phase's tensors are requested together and freed at its end, where
	 * PyTorch frees each after its last reader, so adding them overstates
	 * the forward's peak (tried 2026-12-02: torchtitan's four reserved
	 * peaks +0.6, +0.9, +1.6, +1.3% became +0.9, +2.3, +1.9, +3.0%; the
	 * H100's and H200's per-layer runs 0.01 points further off).
	 */
	if (ac != AC_NONE)
		return set_tensors(all & ~alias(kept(&t, ac), &d), &d, act_bytes, out, 0);
	if (ph == PH_RECOMPUTE)
		return 0;
	/* forward without checkpointing: what it makes and no backward reads (the output is the residual stream) */
	return set_tensors(made & ~all & ~(1u << T_OUT), &d, act_bytes, out, 0);
}

uint64_t recipe_transient_bytes(enum kernel_recipe r, const struct model_shape *m, int batch,
				enum segment_kind s, enum phase ph, enum ac_mode ac, enum loss_mode loss,
				int act_bytes)
{
	uint64_t v[RECIPE_TRANSIENT_MAX], b = 0;
	int n = recipe_transient_tensors(r, m, batch, s, ph, ac, loss, act_bytes, v);

	for (int i = 0; i < n; i++)
		b += v[i];
	return b;
}
