/*
 * attention_cudnn.cu - causal GQA attention forward and backward through
 * cuDNN 9's graph API (the C backend API of cudnn_graph.h: there is no
 * cudnn_frontend here), the path a context takes with
 * cuda_ctx_attention(ctx, CUDA_ATTN_CUDNN). The mma.sync kernels of
 * attention.cu stay the default, the fallback and the oracle: whenever
 * cuDNN is not loadable or builds no plan for a shape, these functions
 * launch nothing and say why, and the caller runs the mma kernels.
 *
 * cuDNN is loaded with dlopen("libcudnn.so.9") on first use, so no binary
 * needs it to start, and it may come from the Python environment's
 * nvidia/cudnn/lib on the lent machines.
 *
 * The graphs are the operation graphs cuDNN's fused flash-attention
 * engines recognise (the ones cudnn_frontend's SDPA node emits, as in
 * TransformerEngine's backend-level builder for cuDNN 8.9):
 *   forward:  S = Q K^T; S *= scale; causal mask (GEN_INDEX row, col,
 *             INT32 as cudnn-frontend makes them, FLOAT where cuDNN builds
 *             no plan so; row >= col; BINARY_SELECT against -1e10); M = max_row S;
 *             E = exp(S - M); Z = sum_row E; stats = M + log Z (written:
 *             our lse, (B, H, T) fp32, the same layout); P = E / Z as bf16
 *             (F16x16 reordered); O = P V.
 *   backward: sum = rowsum(dO * O) (written to scratch); S as forward,
 *             P = exp(S - stats); dV = P^T dO; dP = dO V^T; dS = P (dP -
 *             sum) scale; dQ = dS K (through an fp32 accumulator in
 *             scratch, zeroed first, then an identity to bf16); dK = dS^T Q.
 * Q, K, V and their gradients are strided views of the QKV row (N, (H +
 * 2 KV) Q), O and dO of (N, H Q): no copies. K and V have KV heads (GQA).
 * The forward graph takes them as they are (its matmuls broadcast K and V
 * over each group of H / KV query heads). In the backward a matmul cannot
 * write dK and dV of KV heads itself (cuDNN 9.19 on an H100:
 * CUDNN_STATUS_BAD_PARAM, the first GPU session); under GQA the graph
 * writes them as cudnn-frontend's SDPA backward node does
 * (CompositeSDPABackwardNode: dK_fullhead, dV_fullhead): each matmul into
 * a virtual tensor of H heads (B, H, T, Q), reduced (ADD) into the KV
 * heads' (B, KV, T, Q), the pattern its fused engines take as GQA. Where
 * cuDNN builds no plan for that graph (or cuda_ctx_attention_gqa_repeat
 * asks for it), the backward runs the graph of H key and value heads on a
 * copy of the QKV row with K and V repeated per query head (expand_kv),
 * then sums each group's dK and dV into the KV heads' (reduce_kv, fp32),
 * in two buffers of its own (struct cudnn_sdpa's rep, allocated once, at
 * the largest shape: a synchronization the first time, as a plan's
 * workspace): the form the first GPU sessions ran.
 *
 * Plans are built once per (shape, direction) and cached in the context's
 * struct cudnn_sdpa with the descriptors they were built from; the
 * plan's own workspace is allocated then (cudaMalloc: the first call of a
 * shape synchronizes). gpu_test's cudnn group compares it with the
 * reference where cuDNN builds a plan: the FLOAT-index graphs passed on an
 * H100 and an H200 (cuDNN 9.19, 2026-11-27 and -28), GQA's backward on
 * the repeated copy; the INT32 form and the backward graph of KV heads
 * have not run on a GPU yet (gpu_test runs GQA's cases both ways, and
 * checks the FLOAT form too, asked for by cuda_ctx_attention_mask_float).
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define HAVE_CUDNN_GRAPH 1
#endif

#ifdef HAVE_CUDNN_GRAPH

/* ---- the library, loaded on first use ----------------------------------------------------- */

struct cudnn_api {
	size_t (*GetVersion)(void);
	const char *(*GetErrorString)(cudnnStatus_t);
	cudnnStatus_t (*Create)(cudnnHandle_t *);
	cudnnStatus_t (*Destroy)(cudnnHandle_t);
	cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
	cudnnStatus_t (*BackendCreateDescriptor)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
	cudnnStatus_t (*BackendDestroyDescriptor)(cudnnBackendDescriptor_t);
	cudnnStatus_t (*BackendFinalize)(cudnnBackendDescriptor_t);
	cudnnStatus_t (*BackendSetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
					     cudnnBackendAttributeType_t, int64_t, const void *);
	cudnnStatus_t (*BackendGetAttribute)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
					     cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
	cudnnStatus_t (*BackendExecute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
};

static struct cudnn_api api;
static int api_state; /* 0: not tried, 1: loaded, -1: not there */
static char api_why[160];

static int api_load(const char **why)
{
	static const char *const names[] = { "libcudnn.so.9", "libcudnn.so" };
	void *lib = NULL;

	if (api_state) {
		*why = api_why;
		return api_state > 0 ? 0 : -1;
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !lib; i++)
		lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(api_why, sizeof(api_why), "cuDNN 9 not loadable (libcudnn.so.9: %s)", dlerror());
		api_state = -1;
		*why = api_why;
		return -1;
	}
#define LOAD(f)                                                                              \
	do {                                                                                 \
		*(void **)&api.f = dlsym(lib, "cudnn" #f);                                   \
		if (!api.f) {                                                                \
			snprintf(api_why, sizeof(api_why), "cuDNN lacks cudnn%s", #f);        \
			api_state = -1;                                                      \
			*why = api_why;                                                      \
			return -1;                                                           \
		}                                                                            \
	} while (0)
	LOAD(GetVersion);
	LOAD(GetErrorString);
	LOAD(Create);
	LOAD(Destroy);
	LOAD(SetStream);
	LOAD(BackendCreateDescriptor);
	LOAD(BackendDestroyDescriptor);
	LOAD(BackendFinalize);
	LOAD(BackendSetAttribute);
	LOAD(BackendGetAttribute);
	LOAD(BackendExecute);
#undef LOAD
	if (api.GetVersion() < 90000) {
		snprintf(api_why, sizeof(api_why), "cuDNN %zu is older than 9", api.GetVersion());
		api_state = -1;
		*why = api_why;
		return -1;
	}
	api_state = 1;
	*why = NULL;
	return 0;
}

/* ---- building a graph: every descriptor is kept until the plan is freed --------------------- */

#define GB_MAX 128

struct gb {
	cudnnBackendDescriptor_t d[GB_MAX];
	int n;
	int64_t next_uid;        /* virtual tensors */
	int failed;
	char why[160];
};

static void gb_fail(struct gb *g, const char *what, cudnnStatus_t s)
{
	if (g->failed)
		return;
	g->failed = 1;
	snprintf(g->why, sizeof(g->why), "cuDNN: %s: %s", what, api.GetErrorString(s));
}

static cudnnBackendDescriptor_t gb_new(struct gb *g, cudnnBackendDescriptorType_t t)
{
	cudnnBackendDescriptor_t d = NULL;
	cudnnStatus_t s;

	if (g->failed)
		return NULL;
	if (g->n == GB_MAX) {
		g->failed = 1;
		snprintf(g->why, sizeof(g->why), "cuDNN graph: more than %d descriptors", GB_MAX);
		return NULL;
	}
	s = api.BackendCreateDescriptor(t, &d);
	if (s != CUDNN_STATUS_SUCCESS) {
		gb_fail(g, "cudnnBackendCreateDescriptor", s);
		return NULL;
	}
	g->d[g->n++] = d;
	return d;
}

static void gb_set(struct gb *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
		   cudnnBackendAttributeType_t type, int64_t count, const void *v)
{
	cudnnStatus_t s;
	char what[64];

	if (g->failed)
		return;
	s = api.BackendSetAttribute(d, name, type, count, v);
	if (s != CUDNN_STATUS_SUCCESS) {
		snprintf(what, sizeof(what), "set attribute %d", (int)name);
		gb_fail(g, what, s);
	}
}

static void gb_finalize(struct gb *g, cudnnBackendDescriptor_t d, const char *what)
{
	cudnnStatus_t s;

	if (g->failed)
		return;
	s = api.BackendFinalize(d);
	if (s != CUDNN_STATUS_SUCCESS)
		gb_fail(g, what, s);
}

static void gb_free(struct gb *g)
{
	for (int i = g->n - 1; i >= 0; i--)
		api.BackendDestroyDescriptor(g->d[i]);
	g->n = 0;
}

enum { T_REAL = 0, T_VIRTUAL = 1, T_BY_VALUE = 2, T_F16x16 = 4 };

/* A 4-d tensor: uid 0 takes the next virtual id. */
static cudnnBackendDescriptor_t gb_tensor(struct gb *g, int64_t uid, cudnnDataType_t type, const int64_t dims[4],
					  const int64_t strides[4], int flags)
{
	cudnnBackendDescriptor_t t = gb_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
	int64_t align = 16, id = uid ? uid : g->next_uid++;
	bool virt = (flags & T_VIRTUAL) != 0, byval = (flags & T_BY_VALUE) != 0;

	gb_set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
	gb_set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
	gb_set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
	gb_set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id);
	gb_set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
	gb_set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
	gb_set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval);
	if (flags & T_F16x16) {
		cudnnBackendTensorReordering_t r = CUDNN_TENSOR_REORDERING_F16x16;
		gb_set(g, t, CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &r);
	}
	gb_finalize(g, t, "tensor");
	return t;
}

/* A pointwise op y = mode(x[, b][, t]) computed in fp32; axis for GEN_INDEX (else -1). */
static cudnnBackendDescriptor_t gb_pw(struct gb *g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
				      cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
				      cudnnBackendDescriptor_t y, int64_t axis, cudnnDataType_t prec)
{
	cudnnBackendDescriptor_t pw = gb_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR), op;

	gb_set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
	gb_set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
	if (axis >= 0)
		gb_set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
	gb_finalize(g, pw, "pointwise descriptor");
	op = gb_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
	gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
	gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
	if (b)
		gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
	if (t)
		gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
	gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
	gb_finalize(g, op, "pointwise operation");
	return op;
}

static cudnnBackendDescriptor_t gb_reduce(struct gb *g, cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x,
					  cudnnBackendDescriptor_t y)
{
	cudnnBackendDescriptor_t r = gb_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR), op;
	cudnnDataType_t f = CUDNN_DATA_FLOAT;

	gb_set(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how);
	gb_set(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
	gb_finalize(g, r, "reduction descriptor");
	op = gb_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
	gb_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
	gb_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
	gb_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r);
	gb_finalize(g, op, "reduction operation");
	return op;
}

/* c = a b (batched over the first two dims), fp32 accumulation */
static cudnnBackendDescriptor_t gb_matmul(struct gb *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
					  cudnnBackendDescriptor_t c)
{
	cudnnBackendDescriptor_t mm = gb_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR), op;
	cudnnDataType_t f = CUDNN_DATA_FLOAT;

	gb_set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
	gb_finalize(g, mm, "matmul descriptor");
	op = gb_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
	gb_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
	gb_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
	gb_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
	gb_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
	gb_finalize(g, op, "matmul operation");
	return op;
}

/* y = x seen with other strides (a transpose of a virtual tensor) */
static cudnnBackendDescriptor_t gb_reshape(struct gb *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
	cudnnBackendDescriptor_t op = gb_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);

	gb_set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
	gb_set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
	gb_finalize(g, op, "reshape operation");
	return op;
}

/* ---- plans ------------------------------------------------------------------------------------ */

/* Tensor uids of the variant packs. */
enum {
	U_Q = 1, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEG, U_DO, U_DQ, U_DK, U_DV, U_SUM, U_DQACC, U_ONE,
	U_VIRTUAL = 100
};

struct plan {
	int B, T, H, KV, Q, backward;
	int mask_float;          /* asked for the FLOAT-index mask alone (CUDNN_SDPA_MASK_FLOAT); part of the key */
	cudnnBackendDescriptor_t exec;
	int64_t workspace;
	struct gb g;             /* what the plan was built from, kept alive with it */
	int failed;
	char why[160];
	cudnnDataType_t index;   /* the causal mask's indices the plan was built with (make_plan) */
};

#define PLANS_MAX 32 /* gpu_test's cudnn group builds up to 15, failed ones included */

struct cudnn_sdpa {
	cudnnHandle_t handle;
	struct plan plans[PLANS_MAX];
	int nplans;
	void *workspace;
	size_t workspace_bytes;
	bf16 *rep;           /* GQA backward: the QKV row with K and V per query head, then its gradient */
	size_t rep_bytes;
	int gqa_last;        /* the last GQA backward: 1 by the graph of KV heads, 2 on the repeated copy, 0 none */
	char gqa_why[160];   /* why the graph of KV heads did not run, when it did not */
};

/* The strided views: Q, K, V of the QKV row; O, dO of the attention output row. */
struct views {
	int64_t q_dim[4], q_str[4];     /* (B, H, T, Q) */
	int64_t kt_dim[4], kt_str[4];   /* K^T (B, KV, Q, T) */
	int64_t k_dim[4], k_str[4];     /* K (B, KV, T, Q) */
	int64_t vt_dim[4], vt_str[4];   /* V^T (B, KV, Q, T) */
	int64_t v_dim[4], v_str[4];     /* V (B, KV, T, Q) */
	int64_t o_dim[4], o_str[4];     /* (B, H, T, Q) */
	int64_t s_dim[4], s_str[4];     /* scores (B, H, T, T) */
	int64_t st_dim[4], st_str[4];   /* scores transposed (B, H, T, T) */
	int64_t r_dim[4], r_str[4];     /* row statistics (B, H, T, 1) */
	int64_t one_dim[4], one_str[4]; /* a scalar */
	int64_t g_dim[4], g_str[4];     /* GQA: dK or dV of every query head (B, H, T, Q), before the group sums */
	cudnnDataType_t index;          /* the causal mask's row and column indices: INT32, or FLOAT */
};

static void set4(int64_t d[4], int64_t a, int64_t b, int64_t c, int64_t e)
{
	d[0] = a;
	d[1] = b;
	d[2] = c;
	d[3] = e;
}

static void views_of(struct views *v, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t Q)
{
	int64_t row = (H + 2 * KV) * Q, orow = H * Q;

	set4(v->q_dim, B, H, T, Q);
	set4(v->q_str, T * row, Q, row, 1);
	set4(v->kt_dim, B, KV, Q, T);
	set4(v->kt_str, T * row, Q, 1, row);
	set4(v->k_dim, B, KV, T, Q);
	set4(v->k_str, T * row, Q, row, 1);
	set4(v->vt_dim, B, KV, Q, T);
	set4(v->vt_str, T * row, Q, 1, row);
	set4(v->v_dim, B, KV, T, Q);
	set4(v->v_str, T * row, Q, row, 1);
	set4(v->o_dim, B, H, T, Q);
	set4(v->o_str, T * orow, Q, orow, 1);
	set4(v->s_dim, B, H, T, T);
	set4(v->s_str, H * T * T, T * T, T, 1);
	set4(v->st_dim, B, H, T, T);
	set4(v->st_str, H * T * T, T * T, 1, T);
	set4(v->r_dim, B, H, T, 1);
	set4(v->r_str, H * T, T, 1, 1);
	set4(v->one_dim, 1, 1, 1, 1);
	set4(v->one_str, 1, 1, 1, 1);
	set4(v->g_dim, B, H, T, Q);
	set4(v->g_str, H * T * Q, T * Q, Q, 1);
}

/*
 * The masked, scaled scores of Q K^T: the first ops of both graphs. `scale`
 * is the graph's one U_SCALE tensor (the backward uses it again for dS: one
 * descriptor per uid in a graph).
 */
static cudnnBackendDescriptor_t scores(struct gb *g, const struct views *v, cudnnBackendDescriptor_t q,
				       cudnnBackendDescriptor_t kt, cudnnBackendDescriptor_t scale,
				       cudnnBackendDescriptor_t *ops, int *n)
{
	const cudnnDataType_t F = CUDNN_DATA_FLOAT;
	cudnnBackendDescriptor_t s = gb_tensor(g, 0, F, v->s_dim, v->s_str, T_VIRTUAL);
	cudnnBackendDescriptor_t s1 = gb_tensor(g, 0, F, v->s_dim, v->s_str, T_VIRTUAL);
	cudnnBackendDescriptor_t row = gb_tensor(g, 0, v->index, v->s_dim, v->s_str, T_VIRTUAL);
	cudnnBackendDescriptor_t col = gb_tensor(g, 0, v->index, v->s_dim, v->s_str, T_VIRTUAL);
	cudnnBackendDescriptor_t keep = gb_tensor(g, 0, CUDNN_DATA_BOOLEAN, v->s_dim, v->s_str, T_VIRTUAL);
	cudnnBackendDescriptor_t neg = gb_tensor(g, U_NEG, F, v->one_dim, v->one_str, T_BY_VALUE);
	cudnnBackendDescriptor_t s2 = gb_tensor(g, 0, F, v->s_dim, v->s_str, T_VIRTUAL);

	ops[(*n)++] = gb_matmul(g, q, kt, s);
	ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_MUL, s, scale, NULL, s1, -1, F);
	ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_GEN_INDEX, s1, NULL, NULL, row, 2, v->index);
	ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_GEN_INDEX, s1, NULL, NULL, col, 3, v->index);
	ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_CMP_GE, row, col, NULL, keep, -1, CUDNN_DATA_BOOLEAN);
	ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_BINARY_SELECT, s1, neg, keep, s2, -1, F);
	return s2;
}

static void build_forward(struct gb *g, const struct views *v, cudnnBackendDescriptor_t *ops, int *n)
{
	const cudnnDataType_t F = CUDNN_DATA_FLOAT, H = CUDNN_DATA_BFLOAT16;
	cudnnBackendDescriptor_t q = gb_tensor(g, U_Q, H, v->q_dim, v->q_str, T_REAL);
	cudnnBackendDescriptor_t kt = gb_tensor(g, U_K, H, v->kt_dim, v->kt_str, T_REAL);
	cudnnBackendDescriptor_t val = gb_tensor(g, U_V, H, v->v_dim, v->v_str, T_REAL);
	cudnnBackendDescriptor_t o = gb_tensor(g, U_O, H, v->o_dim, v->o_str, T_REAL);
	cudnnBackendDescriptor_t scale = gb_tensor(g, U_SCALE, F, v->one_dim, v->one_str, T_BY_VALUE);
	cudnnBackendDescriptor_t s = scores(g, v, q, kt, scale, ops, n);
	cudnnBackendDescriptor_t m = gb_tensor(g, 0, F, v->r_dim, v->r_str, T_VIRTUAL);
	cudnnBackendDescriptor_t d = gb_tensor(g, 0, F, v->s_dim, v->s_str, T_VIRTUAL);
	cudnnBackendDescriptor_t e = gb_tensor(g, 0, F, v->s_dim, v->s_str, T_VIRTUAL);
	cudnnBackendDescriptor_t z = gb_tensor(g, 0, F, v->r_dim, v->r_str, T_VIRTUAL);
	cudnnBackendDescriptor_t lz = gb_tensor(g, 0, F, v->r_dim, v->r_str, T_VIRTUAL);
	cudnnBackendDescriptor_t stats = gb_tensor(g, U_STATS, F, v->r_dim, v->r_str, T_REAL);
	cudnnBackendDescriptor_t p = gb_tensor(g, 0, H, v->s_dim, v->s_str, T_VIRTUAL | T_F16x16);

	ops[(*n)++] = gb_reduce(g, CUDNN_REDUCE_TENSOR_MAX, s, m);
	ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_SUB, s, m, NULL, d, -1, F);
	ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_EXP, d, NULL, NULL, e, -1, F);
	ops[(*n)++] = gb_reduce(g, CUDNN_REDUCE_TENSOR_ADD, e, z);
	ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_LOG, z, NULL, NULL, lz, -1, F);
	ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_ADD, m, lz, NULL, stats, -1, F);
	ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_DIV, e, z, NULL, p, -1, F);
	ops[(*n)++] = gb_matmul(g, p, val, o);
}

static void build_backward(struct gb *g, const struct views *v, cudnnBackendDescriptor_t *ops, int *n)
{
	const cudnnDataType_t F = CUDNN_DATA_FLOAT, H = CUDNN_DATA_BFLOAT16;
	cudnnBackendDescriptor_t q = gb_tensor(g, U_Q, H, v->q_dim, v->q_str, T_REAL);
	cudnnBackendDescriptor_t kt = gb_tensor(g, U_K, H, v->kt_dim, v->kt_str, T_REAL);
	cudnnBackendDescriptor_t vt = gb_tensor(g, U_V, H, v->vt_dim, v->vt_str, T_REAL);
	cudnnBackendDescriptor_t o = gb_tensor(g, U_O, H, v->o_dim, v->o_str, T_REAL);
	cudnnBackendDescriptor_t dout = gb_tensor(g, U_DO, H, v->o_dim, v->o_str, T_REAL);
	cudnnBackendDescriptor_t stats = gb_tensor(g, U_STATS, F, v->r_dim, v->r_str, T_REAL);
	cudnnBackendDescriptor_t dq = gb_tensor(g, U_DQ, H, v->q_dim, v->q_str, T_REAL);
	cudnnBackendDescriptor_t dk = gb_tensor(g, U_DK, H, v->k_dim, v->k_str, T_REAL);
	cudnnBackendDescriptor_t dv = gb_tensor(g, U_DV, H, v->v_dim, v->v_str, T_REAL);
	int64_t acc_str[4] = { v->q_dim[2] * v->q_dim[1] * v->q_dim[3], v->q_dim[3], v->q_dim[1] * v->q_dim[3], 1 };
	cudnnBackendDescriptor_t dqacc = gb_tensor(g, U_DQACC, F, v->q_dim, acc_str, T_REAL | T_F16x16);
	cudnnBackendDescriptor_t one = gb_tensor(g, U_ONE, F, v->one_dim, v->one_str, T_BY_VALUE);
	cudnnBackendDescriptor_t scale = gb_tensor(g, U_SCALE, F, v->one_dim, v->one_str, T_BY_VALUE);
	/* sum = rowsum(dO * O) */
	cudnnBackendDescriptor_t dodo = gb_tensor(g, 0, F, v->o_dim, v->o_str, T_VIRTUAL);
	cudnnBackendDescriptor_t rs = gb_tensor(g, 0, F, v->r_dim, v->r_str, T_VIRTUAL);
	cudnnBackendDescriptor_t sum = gb_tensor(g, U_SUM, F, v->r_dim, v->r_str, T_REAL);

	ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_MUL, dout, o, NULL, dodo, -1, F);
	ops[(*n)++] = gb_reduce(g, CUDNN_REDUCE_TENSOR_ADD, dodo, rs);
	ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_MUL, rs, one, NULL, sum, -1, F);
	{
		/* P = exp(S - stats), the forward's probabilities again */
		cudnnBackendDescriptor_t s = scores(g, v, q, kt, scale, ops, n);
		cudnnBackendDescriptor_t d = gb_tensor(g, 0, F, v->s_dim, v->s_str, T_VIRTUAL);
		cudnnBackendDescriptor_t p = gb_tensor(g, 0, F, v->s_dim, v->s_str, T_VIRTUAL);
		cudnnBackendDescriptor_t pb = gb_tensor(g, 0, H, v->s_dim, v->s_str, T_VIRTUAL | T_F16x16);
		cudnnBackendDescriptor_t pbt = gb_tensor(g, 0, H, v->st_dim, v->st_str, T_VIRTUAL);
		cudnnBackendDescriptor_t dp = gb_tensor(g, 0, F, v->s_dim, v->s_str, T_VIRTUAL);
		cudnnBackendDescriptor_t dp1 = gb_tensor(g, 0, F, v->s_dim, v->s_str, T_VIRTUAL);
		cudnnBackendDescriptor_t ds = gb_tensor(g, 0, F, v->s_dim, v->s_str, T_VIRTUAL);
		cudnnBackendDescriptor_t ds1 = gb_tensor(g, 0, F, v->s_dim, v->s_str, T_VIRTUAL);
		cudnnBackendDescriptor_t k = gb_tensor(g, 0, H, v->k_dim, v->k_str, T_VIRTUAL);
		/* GQA: dK and dV of every query head, in the input's type as cudnn-frontend has them */
		int gqa = v->k_dim[1] < v->q_dim[1];
		/*
		 * dS^T, dK's left operand: under GQA in the input's type, as
		 * cudnn-frontend's reshape_dS makes it (its MHA graph too); fp32 in
		 * the MHA graph that ran on the H100 and the H200, kept as it ran
		 */
		cudnnBackendDescriptor_t dst = gb_tensor(g, 0, gqa ? H : F, v->st_dim, v->st_str, T_VIRTUAL);
		cudnnBackendDescriptor_t dkh = gqa ? gb_tensor(g, 0, H, v->g_dim, v->g_str, T_VIRTUAL) : NULL;
		cudnnBackendDescriptor_t dvh = gqa ? gb_tensor(g, 0, H, v->g_dim, v->g_str, T_VIRTUAL) : NULL;

		ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_SUB, s, stats, NULL, d, -1, F);
		ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_EXP, d, NULL, NULL, p, -1, F);
		/* dV = P^T dO */
		ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_IDENTITY, p, NULL, NULL, pb, -1, F);
		ops[(*n)++] = gb_reshape(g, pb, pbt);
		ops[(*n)++] = gb_matmul(g, pbt, dout, gqa ? dvh : dv);
		if (gqa) /* each KV head's dV the sum of its group's */
			ops[(*n)++] = gb_reduce(g, CUDNN_REDUCE_TENSOR_ADD, dvh, dv);
		/* dS = P (dO V^T - sum) scale */
		ops[(*n)++] = gb_matmul(g, dout, vt, dp);
		ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_SUB, dp, sum, NULL, dp1, -1, F);
		ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_MUL, dp1, p, NULL, ds, -1, F);
		ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_MUL, ds, scale, NULL, ds1, -1, F);
		/* dQ = dS K (fp32 accumulator, then bf16); dK = dS^T Q */
		ops[(*n)++] = gb_reshape(g, kt, k);
		ops[(*n)++] = gb_matmul(g, ds1, k, dqacc);
		ops[(*n)++] = gb_reshape(g, ds1, dst);
		ops[(*n)++] = gb_matmul(g, dst, q, gqa ? dkh : dk);
		if (gqa)
			ops[(*n)++] = gb_reduce(g, CUDNN_REDUCE_TENSOR_ADD, dkh, dk);
		ops[(*n)++] = gb_pw(g, CUDNN_POINTWISE_IDENTITY, dqacc, NULL, NULL, dq, -1, F);
	}
}

#define OPS_MAX 48

/*
 * The operations of the graph of a shape and direction into ops (OPS_MAX),
 * the causal mask's indices of type `index`, in g (emptied first);
 * returns how many.
 */
static int build_ops(struct gb *g, int B, int T, int H, int KV, int Q, int backward, cudnnDataType_t index,
		     cudnnBackendDescriptor_t *ops)
{
	struct views v;
	int n = 0;

	memset(g, 0, sizeof(*g));
	g->next_uid = U_VIRTUAL;
	views_of(&v, B, T, H, KV, Q);
	v.index = index;
	if (backward)
		build_backward(g, &v, ops, &n);
	else
		build_forward(g, &v, ops, &n);
	cuda_assert(n <= OPS_MAX);
	return n;
}

/*
 * Graph, heuristics (mode A), the first engine configuration that finalizes
 * into a plan, the causal mask's indices of type `index`: 0, or -1 with
 * pl->why set and the graph freed.
 */
static int try_plan(struct cudnn_sdpa *sp, struct plan *pl, cudnnDataType_t index)
{
	struct gb *g = &pl->g;
	cudnnBackendDescriptor_t ops[OPS_MAX], graph, heur, cfgs[8];
	int n = build_ops(g, pl->B, pl->T, pl->H, pl->KV, pl->Q, pl->backward, index, ops);
	int64_t found = 0;
	cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;

	graph = gb_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
	gb_set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, ops);
	gb_set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &sp->handle);
	gb_finalize(g, graph, "operation graph");
	heur = gb_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
	gb_set(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
	gb_set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
	gb_finalize(g, heur, "engine heuristics");
	for (int i = 0; i < 8; i++)
		cfgs[i] = gb_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
	if (!g->failed) {
		cudnnStatus_t s = api.BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
							  CUDNN_TYPE_BACKEND_DESCRIPTOR, 8, &found, cfgs);
		if (s != CUDNN_STATUS_SUCCESS)
			gb_fail(g, "engine heuristics' results", s);
		if (found > 8) /* the count available, should cuDNN say it rather than the count written */
			found = 8;
	}
	for (int64_t i = 0; i < found && !g->failed && !pl->exec; i++) {
		cudnnBackendDescriptor_t plan = NULL;
		if (api.BackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS)
			continue;
		if (api.BackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
					    &sp->handle) == CUDNN_STATUS_SUCCESS &&
		    api.BackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
					    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]) == CUDNN_STATUS_SUCCESS &&
		    api.BackendFinalize(plan) == CUDNN_STATUS_SUCCESS) {
			int64_t cnt = 0;
			pl->exec = plan;
			if (api.BackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
						    &cnt, &pl->workspace) != CUDNN_STATUS_SUCCESS)
				pl->workspace = 0;
		} else {
			api.BackendDestroyDescriptor(plan);
		}
	}
	if (!pl->exec) {
		if (g->failed)
			snprintf(pl->why, sizeof(pl->why), "%s", g->why);
		else
			snprintf(pl->why, sizeof(pl->why), "cuDNN builds no plan for causal attention B %d T %d H %d "
				 "KV %d Q %d (%s; %lld engine configurations tried)", pl->B, pl->T, pl->H, pl->KV,
				 pl->Q, pl->backward ? "backward" : "forward", (long long)found);
		gb_free(g);
		return -1;
	}
	return 0;
}

/*
 * The plan, its causal mask's row and column indices INT32 first, as
 * cudnn-frontend builds them (its causal_mask and diagonal band mask, whose
 * comment warns that the way the mask is built matters to the backend's
 * performance), then FLOAT, the form the first GPU sessions ran: on the
 * H200 (cuDNN 9.19) that graph took 1.101 ms forward and 3.751 ms backward
 * at T 8192, where PyTorch's SDPA through cudnn-frontend took 0.904 and
 * 2.595 (gpu/README.md). Which one built is in pl->index (an INT32 plan
 * that cuDNN refuses when it runs is rebuilt with FLOAT: run_plan). Asked
 * for FLOAT alone (pl->mask_float), the INT32 form is not tried: the graph
 * that passed on the first GPUs, chosen without a rebuild should the INT32
 * form compute something wrong.
 */
static void make_plan(struct cudnn_sdpa *sp, struct plan *pl)
{
	if (!pl->mask_float) {
		pl->index = CUDNN_DATA_INT32;
		if (try_plan(sp, pl, CUDNN_DATA_INT32) == 0)
			return;
	}
	pl->index = CUDNN_DATA_FLOAT;
	if (try_plan(sp, pl, CUDNN_DATA_FLOAT) != 0)
		pl->failed = 1;
}

/*
 * The workspace holds plan pl's (grown when it does not, the device
 * synchronized: the old one may be in use): 0, or -1 with pl failed. The
 * new buffer is allocated before the old one is freed, so that the plans
 * built before keep a workspace they fit should it not be had.
 */
static int workspace_fit(struct cudnn_sdpa *sp, struct plan *pl)
{
	void *ws = NULL;

	if ((size_t)pl->workspace <= sp->workspace_bytes)
		return 0;
	cudaCheck(cudaDeviceSynchronize());
	if (cudaMalloc(&ws, (size_t)pl->workspace) != cudaSuccess) {
		/* an engine that wants more than the GPU has left: the mma kernels instead */
		(void)cudaGetLastError();
		pl->failed = 1;
		snprintf(pl->why, sizeof(pl->why), "cuDNN: the plan's workspace of %.1f MiB does not fit",
			 (double)pl->workspace / 1048576.0);
		return -1;
	}
	cudaCheck(cudaFree(sp->workspace));
	sp->workspace = ws;
	sp->workspace_bytes = (size_t)pl->workspace;
	return 0;
}

/* The plan for a shape and direction, built on first use; NULL (with *why) when there is none. */
static struct plan *plan_for(struct cudnn_sdpa **spp, int B, int T, int H, int KV, int Q, int backward,
			     unsigned flags, const char **why)
{
	struct cudnn_sdpa *sp;
	struct plan *pl;

	if (api_load(why) != 0)
		return NULL;
	if (!*spp) {
		sp = (struct cudnn_sdpa *)calloc(1, sizeof(*sp));
		cuda_assert(sp != NULL);
		cudnnStatus_t s = api.Create(&sp->handle);
		if (s != CUDNN_STATUS_SUCCESS) {
			snprintf(api_why, sizeof(api_why), "cudnnCreate: %s", api.GetErrorString(s));
			api_state = -1;
			free(sp);
			*why = api_why;
			return NULL;
		}
		*spp = sp;
	}
	sp = *spp;
	int mask_float = (flags & CUDNN_SDPA_MASK_FLOAT) != 0;
	for (int i = 0; i < sp->nplans; i++) {
		pl = &sp->plans[i];
		if (pl->B == B && pl->T == T && pl->H == H && pl->KV == KV && pl->Q == Q && pl->backward == backward
		    && pl->mask_float == mask_float) {
			*why = pl->failed ? pl->why : NULL;
			return pl->failed ? NULL : pl;
		}
	}
	if (sp->nplans == PLANS_MAX) {
		*why = "cuDNN: more attention shapes than the plan cache holds";
		return NULL;
	}
	pl = &sp->plans[sp->nplans++];
	memset(pl, 0, sizeof(*pl));
	pl->B = B;
	pl->T = T;
	pl->H = H;
	pl->KV = KV;
	pl->Q = Q;
	pl->backward = backward;
	pl->mask_float = mask_float;
	make_plan(sp, pl);
	if (pl->failed) {
		*why = pl->why;
		return NULL;
	}
	if (workspace_fit(sp, pl) != 0) {
		*why = pl->why;
		return NULL;
	}
	*why = NULL;
	return pl;
}

/* Run plan pl with n (uid, pointer) pairs. */
static int execute(struct cudnn_sdpa *sp, struct plan *pl, const int64_t *uids, void *const *ptrs, int n,
		   cudaStream_t st, const char **why)
{
	cudnnBackendDescriptor_t pack = NULL;
	cudnnStatus_t s;

	s = api.SetStream(sp->handle, st);
	if (s == CUDNN_STATUS_SUCCESS)
		s = api.BackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
	if (s == CUDNN_STATUS_SUCCESS)
		s = api.BackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
	if (s == CUDNN_STATUS_SUCCESS)
		s = api.BackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
	if (s == CUDNN_STATUS_SUCCESS)
		s = api.BackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
					    &sp->workspace);
	if (s == CUDNN_STATUS_SUCCESS)
		s = api.BackendFinalize(pack);
	if (s == CUDNN_STATUS_SUCCESS)
		s = api.BackendExecute(sp->handle, pl->exec, pack);
	if (pack)
		api.BackendDestroyDescriptor(pack);
	if (s != CUDNN_STATUS_SUCCESS) {
		/*
		 * cuDNN refuses a plan it built before it launches anything (its
		 * checks are on the host): the plan is marked failed and the mma
		 * kernels, which write every output, run instead. A launch that
		 * failed on the device shows at the stream's next checked call.
		 */
		pl->failed = 1;
		snprintf(pl->why, sizeof(pl->why), "cuDNN: executing the %s plan: %s",
			 pl->backward ? "backward" : "forward", api.GetErrorString(s));
		*why = pl->why;
		return -1;
	}
	*why = NULL;
	return 0;
}

/*
 * execute(), and should cuDNN refuse a plan with the INT32 mask when it is
 * run, the same graph with the FLOAT mask, the form the first GPUs ran,
 * built in its place and run (the plan keeps its key: later calls run the
 * FLOAT one, and cudnn_sdpa_mask says so). A refusal comes before
 * anything is launched, so the outputs are as they were.
 */
static int run_plan(struct cudnn_sdpa *sp, struct plan *pl, const int64_t *uids, void *const *ptrs, int n,
		    cudaStream_t st, const char **why)
{
	char refused[sizeof(pl->why)], again[sizeof(pl->why)];

	if (execute(sp, pl, uids, ptrs, n, st, why) == 0)
		return 0;
	if (pl->index != CUDNN_DATA_INT32)
		return -1;
	snprintf(refused, sizeof(refused), "%s", pl->why);
	api.BackendDestroyDescriptor(pl->exec);
	pl->exec = NULL;
	gb_free(&pl->g);
	pl->failed = 0;
	pl->index = CUDNN_DATA_FLOAT;
	if (try_plan(sp, pl, CUDNN_DATA_FLOAT) != 0 || workspace_fit(sp, pl) != 0) {
		pl->failed = 1;
		snprintf(again, sizeof(again), "%s", pl->why);
		snprintf(pl->why, sizeof(pl->why), "%.80s; with the FLOAT mask: %.56s", refused, again);
		*why = pl->why;
		return -1;
	}
	return execute(sp, pl, uids, ptrs, n, st, why);
}

int cudnn_sdpa_forward(struct cudnn_sdpa **sp, bf16 *out, float *lse, const bf16 *qkv, int B, int T, int H,
		       int KV, int Q, void *workspace, size_t workspace_bytes, unsigned flags, cudaStream_t st,
		       const char **why)
{
	struct plan *pl = plan_for(sp, B, T, H, KV, Q, 0, flags, why);
	float scale = 1.0f / sqrtf((float)Q), neg = -1e10f;

	(void)workspace;
	(void)workspace_bytes;
	if (!pl)
		return -1;
	const int64_t uids[] = { U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEG };
	void *const ptrs[] = { (void *)qkv, (void *)(qkv + (size_t)H * Q), (void *)(qkv + (size_t)(H + KV) * Q), out,
			       lse, &scale, &neg };
	return run_plan(*sp, pl, uids, ptrs, 7, st, why);
}

/* The backward graph of plan pl (KV heads of K and V in the row) on the given buffers. */
static int run_backward(struct cudnn_sdpa **sp, struct plan *pl, bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
			const bf16 *out, const float *lse, int B, int T, int H, int KV, int Q, void *workspace,
			cudaStream_t st, const char **why)
{
	size_t N = (size_t)B * T, acc = align256(N * H * Q * sizeof(float));
	float scale = 1.0f / sqrtf((float)Q), neg = -1e10f, one = 1.0f;

	float *dqacc = (float *)workspace, *sum = (float *)((char *)workspace + acc);
	cudaCheck(cudaMemsetAsync(dqacc, 0, N * H * Q * sizeof(float), st));
	const int64_t uids[] = { U_Q, U_K, U_V, U_O, U_DO, U_STATS, U_DQ, U_DK, U_DV, U_SUM, U_DQACC, U_SCALE, U_NEG,
				 U_ONE };
	void *const ptrs[] = { (void *)qkv,
			       (void *)(qkv + (size_t)H * Q),
			       (void *)(qkv + (size_t)(H + KV) * Q),
			       (void *)out,
			       (void *)dout,
			       (void *)lse,
			       dqkv,
			       dqkv + (size_t)H * Q,
			       dqkv + (size_t)(H + KV) * Q,
			       sum,
			       dqacc,
			       &scale,
			       &neg,
			       &one };
	return run_plan(*sp, pl, uids, ptrs, 14, st, why);
}

/*
 * rep (N, 3 H Q) from qkv (N, (H + 2 KV) Q): Q as it is, then K and V with
 * query head h's group's (h / (H / KV), as the mma kernels and the
 * reference group them); in 16-byte vectors (Q a multiple of 8).
 */
static __global__ void expand_kv_kernel(uint4 *rep, const uint4 *qkv, size_t N, int H, int KV, int Q8)
{
	size_t row_in = (size_t)(H + 2 * KV) * Q8, row_out = (size_t)3 * H * Q8;
	int G = H / KV;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * row_out;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t n = i / row_out;
		int c = (int)(i % row_out), head = c / Q8, d = c % Q8;
		int src = head < H ? head : head < 2 * H ? H + (head - H) / G : H + KV + (head - 2 * H) / G;
		rep[i] = qkv[n * row_in + (size_t)src * Q8 + d];
	}
}

/* dqkv (N, (H + 2 KV) Q) from drep (N, 3 H Q): dQ as it is, each KV head's dK and dV the sum of its group's. */
static __global__ void reduce_kv_kernel(bf16 *dqkv, const bf16 *drep, size_t N, int H, int KV, int Q)
{
	size_t row_in = (size_t)3 * H * Q, row_out = (size_t)(H + 2 * KV) * Q;
	int G = H / KV;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * row_out;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t n = i / row_out;
		int c = (int)(i % row_out), head = c / Q, d = c % Q;
		if (head < H) {
			dqkv[i] = drep[n * row_in + (size_t)head * Q + d];
		} else {
			int part = head < H + KV ? 0 : 1, kv = head - H - part * KV;
			const bf16 *src = drep + n * row_in + (size_t)(H + part * H + kv * G) * Q + d;
			float s = 0.0f;
			for (int g = 0; g < G; g++)
				s += __bfloat162float(src[(size_t)g * Q]);
			dqkv[i] = __float2bfloat16_rn(s);
		}
	}
}

/* rep holds at least `bytes` (synchronizes the device when it grows); 0, or -1 with *why. */
static int rep_reserve(struct cudnn_sdpa *sp, size_t bytes, const char **why)
{
	if (bytes <= sp->rep_bytes)
		return 0;
	cudaCheck(cudaDeviceSynchronize()); /* the old copy may be in use */
	cudaCheck(cudaFree(sp->rep));
	sp->rep = NULL;
	sp->rep_bytes = 0;
	if (cudaMalloc((void **)&sp->rep, bytes) != cudaSuccess) {
		(void)cudaGetLastError();
		sp->rep = NULL;
		*why = "cuDNN backward under GQA: no device memory for the QKV row with a key and value per query head";
		return -1;
	}
	sp->rep_bytes = bytes;
	return 0;
}

int cudnn_sdpa_backward(struct cudnn_sdpa **sp, bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const bf16 *out,
			const float *lse, int B, int T, int H, int KV, int Q, void *workspace, size_t workspace_bytes,
			unsigned flags, cudaStream_t st, const char **why)
{
	int gqa_repeat = (flags & CUDNN_SDPA_GQA_REPEAT) != 0;
	size_t N = (size_t)B * T, acc = align256(N * H * Q * sizeof(float)), row = (size_t)3 * H * Q;
	struct plan *pl;

	if (workspace_bytes < acc + (size_t)B * H * T * sizeof(float)) {
		*why = "cuDNN backward: the context scratch is smaller than the dQ accumulator and row sums";
		return -1;
	}
	if (KV == H || !gqa_repeat) {
		/* the graph of the KV heads there are (under GQA, with the group sums in it) */
		pl = plan_for(sp, B, T, H, KV, Q, 1, flags, why);
		if (pl && run_backward(sp, pl, dqkv, dout, qkv, out, lse, B, T, H, KV, Q, workspace, st, why) == 0) {
			if (KV < H) {
				(*sp)->gqa_last = 1;
				(*sp)->gqa_why[0] = '\0';
			}
			return 0;
		}
		if (KV == H || !*sp)
			return -1;
		snprintf((*sp)->gqa_why, sizeof((*sp)->gqa_why), "%s", *why);
	}
	/* GQA: the graph of H key and value heads on a copy with K and V repeated, then each group's sums */
	pl = plan_for(sp, B, T, H, H, Q, 1, flags, why);
	if (!pl || rep_reserve(*sp, 2 * N * row * sizeof(bf16), why) != 0)
		return -1;
	{
		bf16 *rep = (*sp)->rep, *drep = rep + N * row;
		size_t vecs = N * row / 8;
		unsigned grid = (unsigned)(vecs / 256 + 1 < 65536 ? vecs / 256 + 1 : 65536);
		cuda_assert(Q % 8 == 0 && H % KV == 0);
		expand_kv_kernel<<<grid, 256, 0, st>>>((uint4 *)rep, (const uint4 *)qkv, N, H, KV, Q / 8);
		cudaCheck(cudaGetLastError());
		if (run_backward(sp, pl, drep, dout, rep, out, lse, B, T, H, H, Q, workspace, st, why) != 0)
			return -1;
		grid = (unsigned)(N * (size_t)(H + 2 * KV) * Q / 256 + 1 < 65536 ? N * (size_t)(H + 2 * KV) * Q / 256 + 1
										 : 65536);
		reduce_kv_kernel<<<grid, 256, 0, st>>>(dqkv, drep, N, H, KV, Q);
		cudaCheck(cudaGetLastError());
	}
	(*sp)->gqa_last = 2;
	if (gqa_repeat)
		snprintf((*sp)->gqa_why, sizeof((*sp)->gqa_why), "the repeated copy was asked for");
	return 0;
}

const char *cudnn_sdpa_gqa(const struct cudnn_sdpa *sp, const char **why)
{
	*why = sp && sp->gqa_last == 2 && sp->gqa_why[0] ? sp->gqa_why : NULL;
	return !sp || !sp->gqa_last ? NULL : sp->gqa_last == 1 ? "the graph of KV heads" : "the repeated copy";
}

const char *cudnn_sdpa_mask(const struct cudnn_sdpa *sp)
{
	int i32 = 0, f32 = 0;

	for (int i = 0; sp && i < sp->nplans; i++)
		if (sp->plans[i].exec && !sp->plans[i].failed) { /* built, and not refused when executed */
			i32 |= sp->plans[i].index == CUDNN_DATA_INT32;
			f32 |= sp->plans[i].index == CUDNN_DATA_FLOAT;
		}
	return i32 && f32 ? "int32 and float" : i32 ? "int32" : f32 ? "float" : NULL;
}

void cudnn_sdpa_free(struct cudnn_sdpa *sp)
{
	if (!sp)
		return;
	for (int i = 0; i < sp->nplans; i++) {
		if (sp->plans[i].exec)
			api.BackendDestroyDescriptor(sp->plans[i].exec);
		gb_free(&sp->plans[i].g);
	}
	cudaCheck(cudaFree(sp->workspace));
	cudaCheck(cudaFree(sp->rep));
	api.Destroy(sp->handle);
	free(sp);
}

size_t cuda_cudnn_version(const char **why)
{
	return api_load(why) == 0 ? api.GetVersion() : 0;
}

int cuda_cudnn_check_ops(int B, int T, int H, int KV, int Q, int backward, int int32_index, char *why, size_t n)
{
	struct gb g;
	cudnnBackendDescriptor_t ops[OPS_MAX];
	const char *no;
	int nops;

	if (api_load(&no) != 0) {
		snprintf(why, n, "%s", no);
		return 1;
	}
	nops = build_ops(&g, B, T, H, KV, Q, backward, int32_index ? CUDNN_DATA_INT32 : CUDNN_DATA_FLOAT, ops);
	if (g.failed)
		snprintf(why, n, "%s", g.why);
	else
		snprintf(why, n, "%d operations", nops);
	gb_free(&g);
	return g.failed ? -1 : 0;
}

#else /* no cudnn_graph.h at build time */

size_t cuda_cudnn_version(const char **why)
{
	*why = "built without cuDNN's headers (cudnn_graph.h)";
	return 0;
}

int cuda_cudnn_check_ops(int B, int T, int H, int KV, int Q, int backward, int int32_index, char *why, size_t n)
{
	(void)B, (void)T, (void)H, (void)KV, (void)Q, (void)backward, (void)int32_index;
	snprintf(why, n, "built without cuDNN's headers (cudnn_graph.h)");
	return 1;
}

int cudnn_sdpa_forward(struct cudnn_sdpa **sp, bf16 *out, float *lse, const bf16 *qkv, int B, int T, int H, int KV,
		       int Q, void *workspace, size_t workspace_bytes, unsigned flags, cudaStream_t st, const char **why)
{
	(void)sp, (void)out, (void)lse, (void)qkv, (void)B, (void)T, (void)H, (void)KV, (void)Q;
	(void)workspace, (void)workspace_bytes, (void)flags, (void)st;
	*why = "built without cuDNN's headers (cudnn_graph.h)";
	return -1;
}

int cudnn_sdpa_backward(struct cudnn_sdpa **sp, bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const bf16 *out,
			const float *lse, int B, int T, int H, int KV, int Q, void *workspace, size_t workspace_bytes,
			unsigned flags, cudaStream_t st, const char **why)
{
	(void)sp, (void)dqkv, (void)dout, (void)qkv, (void)out, (void)lse, (void)B, (void)T, (void)H, (void)KV;
	(void)Q, (void)workspace, (void)workspace_bytes, (void)flags, (void)st;
	*why = "built without cuDNN's headers (cudnn_graph.h)";
	return -1;
}

const char *cudnn_sdpa_mask(const struct cudnn_sdpa *sp)
{
	(void)sp;
	return NULL;
}

const char *cudnn_sdpa_gqa(const struct cudnn_sdpa *sp, const char **why)
{
	(void)sp;
	*why = NULL;
	return NULL;
}

void cudnn_sdpa_free(struct cudnn_sdpa *sp)
{
	(void)sp;
}

#endif
