/*
 * exec.c - the CPU backend's executor of the step schedule (see exec.h).
 *
 * Where things live:
 *   - a unit's parameter shard: its BUF_SHARD_PARAM buffer (persistent);
 *     with offload the fp32 master, the Adam moments and the gradient
 *     shard the host optimizer reads sit in "host" arrays of our own,
 *     outside the device memory the timeline tracks (on the CPU backend
 *     host and device are the same memory; the copies are still made);
 *   - full parameters: the unit's BUF_FULL_PARAM (flat layout, layout.h);
 *     ddp computes from its replicated shard, which is the full flat
 *     buffer since a ddp shard group is one rank;
 *   - gradients: BUF_FULL_GRAD (flat), BUF_RS_IN (packed), BUF_RS_OUT and
 *     BUF_SHARD_GRAD (shards);
 *   - activations: BUF_ACTS per segment (the embedding keeps its token
 *     ids; a block its ref_block_store's saved fields; the head its store),
 *     BUF_RECOMPUTED the transient fields refilled before a block's
 *     backward, BUF_TRANSIENT an op's scratch.
 * The runtime's own workspace, allocated once: the residual stream and
 * its gradient between segments (N, D) each, a staging buffer for the
 * pack/unpack around collectives (the reference kernels want each tensor
 * contiguous, the collectives the rank-major shards), and, when the
 * schedule prices no forward scratch for a checkpointed block, that
 * scratch.
 *
 * A buffer is backed by max(the schedule's bytes, what the fp32 kernels
 * need): the same for precision = fp32, more for bf16 policies, whose
 * tensors the CPU backend still holds in fp32. The timeline records the
 * bytes actually held.
 */
#include "exec.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_rng.h>

#include "data.h"
#include "layout.h"
#include "ref.h"
#include "ref_init.h"

#define ADAM_BETA1 0.9f
#define ADAM_BETA2 0.95f
#define ADAM_EPS 1e-8f
#define INIT_GAIN 1.0f

struct exec {
	const struct schedule *s;
	const struct experiment *e;
	const struct comm *c;
	struct layout *lay;
	int M, B, T, N, D, V;
	int ddp;
	int offload;              /* enum offload */
	int chunk;                /* rows per logits chunk under LOSS_CHUNKED */
	/* the schedule's buffers */
	float **mem;              /* nbufs: memory of a live buffer, NULL otherwise */
	uint64_t *held;           /* nbufs: bytes behind it */
	int *live_unit[BUF_KIND_COUNT]; /* live buffer of a kind per unit, -1 */
	int *live_seg[BUF_KIND_COUNT];  /* live buffer of a kind per segment, -1 */
	/* persistent per unit */
	float **shard;            /* device shard (BUF_SHARD_PARAM), NULL under offload = params */
	float **adam_m, **adam_v; /* moments: in BUF_OPTIM_STATE, or host arrays under offload */
	float **host_master;      /* offload: the fp32 master shard on the host */
	float **host_grad;        /* offload: the gradient shard copied to the host */
	/* workspace */
	float *carry;             /* (N, D) residual stream between segments */
	float *dres;              /* (N, D) its gradient */
	float *stage;             /* the largest packed unit: pack/unpack staging */
	size_t stage_floats;
	float *fwd_scratch;       /* checkpointed block forward without a priced scratch, or NULL */
	uint64_t ws_bytes;
	/* data and activations of the step */
	int *tokens, *targets;    /* (M, N) each */
	struct ref_block_store *stores; /* per segment */
	struct ref_head_store head;
	double loss_sum;
	int step;
	struct memtrack mt;
};

/* ---- memory ----------------------------------------------------------------- */

static void *xcalloc(size_t n, size_t size, const char *what)
{
	void *p = calloc(n ? n : 1, size);

	if (!p) {
		fprintf(stderr, "gpu_run: out of memory allocating %zu bytes for %s\n", n * size, what);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	return p;
}

static int transient_phase(const struct exec *x, const struct buffer *b)
{
	assert(b->alloc_op >= 0);
	return x->s->ops[b->alloc_op].kind;
}

/* Floats the fp32 kernels need in buffer b. */
static size_t need_floats(const struct exec *x, const struct buffer *b)
{
	const struct model_shape *m = &x->e->model;
	const struct unit_layout *ul = b->unit >= 0 ? &x->lay->units[b->unit] : NULL;
	const struct policy *p = &x->e->policy;
	enum segment_kind sk = b->seg >= 0 ? x->s->segs[b->seg].kind : SEG_KIND_COUNT;
	size_t N = (size_t)x->N, packed = ul ? ul->shard_floats * (size_t)x->s->shard_n : 0;

	switch (b->kind) {
	case BUF_SHARD_PARAM:
	case BUF_RS_OUT:
	case BUF_SHARD_GRAD:
	case BUF_HOST_STAGE:
		return ul->shard_floats;
	case BUF_OPTIM_STATE:
		return 2 * ul->shard_floats;
	case BUF_FULL_PARAM:
	case BUF_FULL_GRAD:
		return ul->full_floats;
	case BUF_GATHER_OUT:
	case BUF_RS_IN:
		return packed;
	case BUF_ACTS:
		if (sk == SEG_EMBED)
			return N; /* token ids, int32 */
		if (sk == SEG_BLOCK)
			return ref_block_saved_floats(m, x->B, p->ac);
		return p->loss == LOSS_FULL ? ref_head_store_floats(m, x->B, LOSS_FULL, 0)
					    : 2 * N * (size_t)x->D + 2 * N; /* the store without its logits chunk */
	case BUF_RECOMPUTED:
		return ref_block_transient_floats(m, x->B, p->ac);
	case BUF_TRANSIENT:
		if (sk == SEG_BLOCK)
			return transient_phase(x, b) == OP_FORWARD
				       ? (p->ac == AC_NONE ? 0 : ref_block_transient_floats(m, x->B, p->ac))
				       : ref_block_scratch_floats(m, x->B);
		if (sk == SEG_HEAD && p->loss == LOSS_CHUNKED)
			return (size_t)x->chunk * (size_t)x->V; /* the logits chunk */
		return 0;
	default:
		assert(!"bad buffer kind");
		return 0;
	}
}

static void buf_alloc(struct exec *x, int id)
{
	const struct buffer *b = &x->s->bufs[id];
	uint64_t need = (uint64_t)need_floats(x, b) * sizeof(float);
	uint64_t bytes = b->bytes > need ? b->bytes : need;
	char what[64];

	assert(!x->mem[id]);
	snprintf(what, sizeof(what), "a %s buffer", buf_kind_name(b->kind));
	x->mem[id] = xcalloc((size_t)(bytes + sizeof(float) - 1) / sizeof(float), sizeof(float), what);
	x->held[id] = bytes;
	memtrack_alloc(&x->mt, b->cat, bytes);
	if (b->unit >= 0) {
		assert(x->live_unit[b->kind][b->unit] < 0); /* one live buffer of a kind per unit */
		if (b->seg < 0)
			x->live_unit[b->kind][b->unit] = id;
	}
	if (b->seg >= 0) {
		assert(x->live_seg[b->kind][b->seg] < 0);
		x->live_seg[b->kind][b->seg] = id;
	}
}

static void buf_release(struct exec *x, int id)
{
	const struct buffer *b = &x->s->bufs[id];

	assert(x->mem[id]);
	free(x->mem[id]);
	x->mem[id] = NULL;
	memtrack_free(&x->mt, b->cat, x->held[id]);
	x->held[id] = 0;
	if (b->seg >= 0)
		x->live_seg[b->kind][b->seg] = -1;
	else if (b->unit >= 0)
		x->live_unit[b->kind][b->unit] = -1;
}

/* The live buffer of a kind for a unit (seg < 0) or a segment; NULL when none. */
static float *live(const struct exec *x, enum buf_kind k, int unit, int seg)
{
	int id = seg >= 0 ? x->live_seg[k][seg] : x->live_unit[k][unit];
	return id >= 0 ? x->mem[id] : NULL;
}

static float *must_live(const struct exec *x, enum buf_kind k, int unit, int seg, int op)
{
	float *p = live(x, k, unit, seg);
	if (!p) {
		char lab[64];
		fprintf(stderr, "gpu_run: op %d (%s) needs a live %s buffer and has none\n", op,
			op_label(x->s, op, lab, sizeof(lab)), buf_kind_name(k));
		abort(); /* a schedule bug */
	}
	return p;
}

/* ---- setup ------------------------------------------------------------------- */

/* The full model from run.seed, identically on every rank; returns ref_model_floats floats. */
static float *model_init(const struct experiment *e)
{
	const struct model_shape *m = &e->model;
	float *params = xcalloc(ref_model_floats(m), sizeof(float), "the initial model");
	struct ref_model model;
	gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);

	assert(r);
	gsl_rng_set(r, e->run.seed);
	if (ref_model_init(&model, m, params, NULL) != 0) {
		fprintf(stderr, "gpu_run: out of memory for the model's pointers\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	ref_init_params(&model, INIT_GAIN, r);
	ref_model_release(&model);
	gsl_rng_free(r);
	return params;
}

/* Workspace: residual stream, its gradient, staging, checkpointed forward scratch. */
static void workspace_init(struct exec *x)
{
	const struct model_shape *m = &x->e->model;
	const struct policy *p = &x->e->policy;
	size_t nd = (size_t)x->N * x->D;
	size_t scratch = p->ac == AC_NONE ? 0 : ref_block_transient_floats(m, x->B, p->ac);

	x->stage_floats = 0;
	for (int u = 0; u < x->lay->nunits; u++) {
		size_t packed = x->lay->units[u].shard_floats * (size_t)x->s->shard_n;
		if (packed > x->stage_floats)
			x->stage_floats = packed;
	}
	/* a block whose forward the schedule gives no scratch of that size uses ours */
	if (scratch && model_segment_transient_bytes(m, x->B, SEG_BLOCK, PH_FWD, p->ac, p->loss,
						     precision_param_bytes(p->precision)) >=
			       scratch * sizeof(float))
		scratch = 0;
	x->carry = xcalloc(nd, sizeof(float), "the residual stream");
	x->dres = xcalloc(nd, sizeof(float), "the residual gradient");
	x->stage = xcalloc(x->stage_floats, sizeof(float), "the staging buffer");
	x->fwd_scratch = scratch ? xcalloc(scratch, sizeof(float), "the forward scratch") : NULL;
	x->ws_bytes = (2 * nd + x->stage_floats + scratch) * sizeof(float);
	memtrack_alloc(&x->mt, MEM_TRANSIENT, x->ws_bytes);
}

struct exec *exec_new(const struct schedule *s, const struct comm *c)
{
	const struct experiment *e = s->exp;
	const struct model_shape *m = &e->model;
	struct exec *x = xcalloc(1, sizeof(*x), "the executor");
	float *model;

	x->s = s;
	x->e = e;
	x->c = c;
	x->lay = layout_new(s);
	x->M = e->policy.microbatches;
	x->B = e->run.batch;
	x->T = m->seq;
	x->N = x->B * x->T;
	x->D = m->hidden;
	x->V = m->vocab;
	x->ddp = e->policy.sharding == SHARD_DDP;
	x->offload = e->policy.offload;
	/* the chunk the schedule prices: its forward scratch is one chunk of fp32 logits */
	x->chunk = (int)(model_segment_transient_bytes(m, x->B, SEG_HEAD, PH_FWD, AC_NONE, LOSS_CHUNKED, 4) /
			 (4 * (uint64_t)x->V));
	if (x->chunk > x->N || x->chunk < 1)
		x->chunk = x->N;
	memtrack_init(&x->mt);
	x->mem = xcalloc((size_t)s->nbufs, sizeof(*x->mem), "the buffer map");
	x->held = xcalloc((size_t)s->nbufs, sizeof(*x->held), "the buffer map");
	for (int k = 0; k < BUF_KIND_COUNT; k++) {
		x->live_unit[k] = xcalloc((size_t)s->nunits, sizeof(int), "the buffer map");
		x->live_seg[k] = xcalloc((size_t)s->nsegs, sizeof(int), "the buffer map");
		for (int u = 0; u < s->nunits; u++)
			x->live_unit[k][u] = -1;
		for (int g = 0; g < s->nsegs; g++)
			x->live_seg[k][g] = -1;
	}
	x->shard = xcalloc((size_t)s->nunits, sizeof(float *), "the shard table");
	x->adam_m = xcalloc((size_t)s->nunits, sizeof(float *), "the shard table");
	x->adam_v = xcalloc((size_t)s->nunits, sizeof(float *), "the shard table");
	x->host_master = xcalloc((size_t)s->nunits, sizeof(float *), "the shard table");
	x->host_grad = xcalloc((size_t)s->nunits, sizeof(float *), "the shard table");
	x->tokens = xcalloc((size_t)x->M * x->N, sizeof(int), "the tokens");
	x->targets = xcalloc((size_t)x->M * x->N, sizeof(int), "the targets");
	x->stores = xcalloc((size_t)s->nsegs, sizeof(*x->stores), "the block stores");
	workspace_init(x);

	/* the persistent buffers: parameter shards and Adam moments */
	for (int i = 0; i < s->nbufs; i++) {
		const struct buffer *b = &s->bufs[i];
		if (b->alloc_op >= 0)
			continue;
		assert(b->kind == BUF_SHARD_PARAM || b->kind == BUF_OPTIM_STATE);
		buf_alloc(x, i);
		if (b->kind == BUF_SHARD_PARAM) {
			x->shard[b->unit] = x->mem[i];
		} else {
			x->adam_m[b->unit] = x->mem[i];
			x->adam_v[b->unit] = x->mem[i] + x->lay->units[b->unit].shard_floats;
		}
	}
	model = model_init(e);
	for (int u = 0; u < s->nunits; u++) {
		const struct unit_layout *ul = &x->lay->units[u];
		if (x->offload != OFF_NONE) {
			x->host_master[u] = xcalloc(ul->shard_floats, sizeof(float), "a host master shard");
			x->host_grad[u] = xcalloc(ul->shard_floats, sizeof(float), "a host gradient shard");
			x->adam_m[u] = xcalloc(ul->shard_floats, sizeof(float), "host Adam moments");
			x->adam_v[u] = xcalloc(ul->shard_floats, sizeof(float), "host Adam moments");
			layout_shard_from_model(ul, x->host_master[u], model, c->shard_rank);
		}
		if (x->shard[u])
			layout_shard_from_model(ul, x->shard[u], model, c->shard_rank);
		assert(x->shard[u] || x->offload == OFF_PARAMS);
		assert(x->adam_m[u]);
	}
	free(model);
	return x;
}

void exec_free(struct exec *x)
{
	if (!x)
		return;
	for (int i = 0; i < x->s->nbufs; i++)
		free(x->mem[i]);
	for (int u = 0; u < x->s->nunits; u++) {
		free(x->host_master[u]);
		free(x->host_grad[u]);
		if (x->offload != OFF_NONE) {
			free(x->adam_m[u]);
			free(x->adam_v[u]);
		}
	}
	for (int k = 0; k < BUF_KIND_COUNT; k++) {
		free(x->live_unit[k]);
		free(x->live_seg[k]);
	}
	free(x->mem);
	free(x->held);
	free(x->shard);
	free(x->adam_m);
	free(x->adam_v);
	free(x->host_master);
	free(x->host_grad);
	free(x->tokens);
	free(x->targets);
	free(x->stores);
	free(x->carry);
	free(x->dres);
	free(x->stage);
	free(x->fwd_scratch);
	memtrack_release(&x->mt);
	layout_free(x->lay);
	free(x);
}

const struct memtrack *exec_memtrack(const struct exec *x)
{
	return &x->mt;
}

uint64_t exec_workspace_bytes(const struct exec *x)
{
	return x->ws_bytes;
}

/* ---- ops ------------------------------------------------------------------------ */

/* The full parameters unit u computes with (flat layout). */
static const float *unit_params(const struct exec *x, int u, int op)
{
	if (x->ddp)
		return x->shard[u]; /* replicated: a ddp "shard" is the whole flat unit */
	return must_live(x, BUF_FULL_PARAM, u, -1, op);
}

static void scale(float *p, size_t n, float f)
{
	for (size_t i = 0; i < n; i++)
		p[i] *= f;
}

static void add(float *dst, const float *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] += src[i];
}

static void op_forward(struct exec *x, const struct op *o, int op)
{
	const struct model_shape *m = &x->e->model;
	const struct policy *p = &x->e->policy;
	const struct seg_params *sp = &x->lay->segs[o->seg];
	const float *params = unit_params(x, o->unit, op);
	float *acts = must_live(x, BUF_ACTS, -1, o->seg, op);
	float *scratch = live(x, BUF_TRANSIENT, -1, o->seg);
	const int *tokens = x->tokens + (size_t)o->micro * x->N;
	const int *targets = x->targets + (size_t)o->micro * x->N;
	size_t nd = (size_t)x->N * x->D;

	switch (o->seg_kind) {
	case SEG_EMBED:
		memcpy(acts, tokens, sizeof(int) * (size_t)x->N); /* backward reads its ids from here */
		ref_embedding_forward(x->carry, tokens, params + sp->off, x->N, x->D);
		break;
	case SEG_BLOCK: {
		struct ref_block_store *st = &x->stores[o->seg];
		float *tr = p->ac == AC_NONE ? NULL : scratch ? scratch : x->fwd_scratch;
		ref_block_store_init(st, acts, tr, m, x->B, p->ac);
		memcpy(st->x, x->carry, sizeof(float) * nd);
		ref_block_forward(x->carry, st, params + sp->off, m, x->B);
		break;
	}
	case SEG_HEAD:
		ref_head_store_init(&x->head, acts, m, x->B, p->loss, x->chunk);
		if (p->loss == LOSS_CHUNKED)
			x->head.logits = must_live(x, BUF_TRANSIENT, -1, o->seg, op);
		memcpy(x->head.x, x->carry, sizeof(float) * nd);
		x->loss_sum += ref_head_forward(&x->head, params + sp->off, params + sp->out_off, targets,
						m, x->B);
		break;
	default:
		assert(!"bad segment kind");
	}
}

static void op_recompute(struct exec *x, const struct op *o, int op)
{
	const struct model_shape *m = &x->e->model;
	struct ref_block_store *st = &x->stores[o->seg];

	assert(o->seg_kind == SEG_BLOCK);
	/* the same saved memory, so the same field layout; transient now in the recomputed buffer */
	ref_block_store_init(st, must_live(x, BUF_ACTS, -1, o->seg, op),
			     must_live(x, BUF_RECOMPUTED, -1, o->seg, op), m, x->B, x->e->policy.ac);
	ref_block_recompute(st, unit_params(x, o->unit, op) + x->lay->segs[o->seg].off, m, x->B);
}

static void op_backward(struct exec *x, const struct op *o, int op)
{
	const struct model_shape *m = &x->e->model;
	const struct seg_params *sp = &x->lay->segs[o->seg];
	const float *params = unit_params(x, o->unit, op);
	float *grad = must_live(x, BUF_FULL_GRAD, o->unit, -1, op);
	const int *targets = x->targets + (size_t)o->micro * x->N;

	switch (o->seg_kind) {
	case SEG_EMBED:
		ref_embedding_backward(grad + sp->off, x->dres, (const int *)must_live(x, BUF_ACTS, -1, o->seg, op),
				       x->N, x->D);
		break;
	case SEG_BLOCK:
		ref_block_backward(x->dres, grad + sp->off, x->dres, &x->stores[o->seg], params + sp->off,
				   must_live(x, BUF_TRANSIENT, -1, o->seg, op), m, x->B);
		break;
	case SEG_HEAD:
		if (x->e->policy.loss == LOSS_CHUNKED)
			x->head.logits = must_live(x, BUF_TRANSIENT, -1, o->seg, op);
		ref_head_backward(x->dres, grad + sp->off, grad + sp->out_off, &x->head, params + sp->off,
				  params + sp->out_off, targets, m, x->B);
		break;
	default:
		assert(!"bad segment kind");
	}
}

static void op_allgather(struct exec *x, const struct op *o, int op)
{
	const struct unit_layout *ul = &x->lay->units[o->unit];
	const float *src = live(x, BUF_HOST_STAGE, o->unit, -1);
	float *packed = live(x, BUF_GATHER_OUT, o->unit, -1);
	int n = comm_size_of(x->c, o->group);

	if (!src)
		src = x->shard[o->unit];
	assert(src && n == x->s->shard_n);
	if (packed) { /* copy-out runtime: the flat comm buffer stays packed until COPY_OUT */
		mpi_check(MPI_Allgather(src, (int)ul->shard_floats, MPI_FLOAT, packed, (int)ul->shard_floats,
					MPI_FLOAT, comm_of(x->c, o->group)));
		return;
	}
	mpi_check(MPI_Allgather(src, (int)ul->shard_floats, MPI_FLOAT, x->stage, (int)ul->shard_floats,
				MPI_FLOAT, comm_of(x->c, o->group)));
	layout_unpack(ul, must_live(x, BUF_FULL_PARAM, o->unit, -1, op), x->stage, n);
}

static void op_reduce_scatter(struct exec *x, const struct op *o, int op)
{
	const struct unit_layout *ul = &x->lay->units[o->unit];
	const float *in = live(x, BUF_RS_IN, o->unit, -1);
	float *out = NULL;
	int n = comm_size_of(x->c, o->group);

	/* the buffer this op allocates: the accumulated shard, or this microbatch's */
	for (int a = 0; a < o->nalloc; a++) {
		int id = x->s->bufrefs[o->buf_first + a];
		if (x->s->bufs[id].kind == BUF_SHARD_GRAD || x->s->bufs[id].kind == BUF_RS_OUT)
			out = x->mem[id];
	}
	assert(out);
	if (!in) {
		layout_pack(ul, x->stage, must_live(x, BUF_FULL_GRAD, o->unit, -1, op), n);
		in = x->stage;
	}
	mpi_check(MPI_Reduce_scatter_block(in, out, (int)ul->shard_floats, MPI_FLOAT, MPI_SUM,
					   comm_of(x->c, o->group)));
	scale(out, ul->shard_floats, 1.0f / (float)n);
}

static void op_allreduce(struct exec *x, const struct op *o, int op)
{
	const struct unit_layout *ul = &x->lay->units[o->unit];
	int n = comm_size_of(x->c, o->group);
	float *g;

	if (o->group == GRP_WORLD) /* ddp: the full gradient, in place */
		g = must_live(x, BUF_FULL_GRAD, o->unit, -1, op);
	else /* hsdp: this microbatch's reduced shard, or the accumulated one (deferred) */
		g = live(x, BUF_RS_OUT, o->unit, -1) ? live(x, BUF_RS_OUT, o->unit, -1)
						     : must_live(x, BUF_SHARD_GRAD, o->unit, -1, op);
	mpi_check(MPI_Allreduce(MPI_IN_PLACE, g, (int)ul->shard_floats, MPI_FLOAT, MPI_SUM,
				comm_of(x->c, o->group)));
	scale(g, ul->shard_floats, 1.0f / (float)n);
}

/* The gradient the optimizer of unit u reads on the device: ddp's full one, else the shard. */
static float *unit_grad(const struct exec *x, int u, int op)
{
	return must_live(x, x->ddp ? BUF_FULL_GRAD : BUF_SHARD_GRAD, u, -1, op);
}

static void adamw_unit(struct exec *x, float *p, float *g, int u)
{
	const struct ref_adamw_hparams hp = {
		.lr = (float)x->e->run.lr,
		.beta1 = ADAM_BETA1,
		.beta2 = ADAM_BETA2,
		.eps = ADAM_EPS,
		.weight_decay = (float)x->e->run.weight_decay,
	};
	size_t n = x->lay->units[u].shard_floats;

	scale(g, n, 1.0f / (float)x->M); /* the sum over microbatches becomes their mean */
	ref_adamw(p, g, x->adam_m[u], x->adam_v[u], n, &hp, x->step);
}

static void op_optim(struct exec *x, const struct op *o, int op)
{
	for (int u = 0; u < x->s->nunits; u++)
		if (o->unit < 0 || o->unit == u)
			adamw_unit(x, x->shard[u], unit_grad(x, u, op), u);
}

static void op_cpu_optim(struct exec *x, const struct op *o)
{
	for (int u = 0; u < x->s->nunits; u++)
		if (o->unit < 0 || o->unit == u)
			adamw_unit(x, x->host_master[u], x->host_grad[u], u);
}

static void op_h2d(struct exec *x, const struct op *o)
{
	float *stage = live(x, BUF_HOST_STAGE, o->unit, -1);

	if (o->unit >= 0 && stage) { /* offload = params: stage the shard for its all-gather */
		memcpy(stage, x->host_master[o->unit], sizeof(float) * x->lay->units[o->unit].shard_floats);
		return;
	}
	/* offload = optim: the updated master back to the device shard */
	for (int u = 0; u < x->s->nunits; u++)
		if (o->unit < 0 || o->unit == u)
			memcpy(x->shard[u], x->host_master[u], sizeof(float) * x->lay->units[u].shard_floats);
}

static void op_accum(struct exec *x, const struct op *o, int op)
{
	/* the reduced shard of this microbatch (which the op frees) into the accumulated one */
	for (int f = 0; f < o->nfree; f++) {
		int id = x->s->bufrefs[o->buf_first + o->nalloc + f];
		if (x->s->bufs[id].kind == BUF_RS_OUT) {
			add(must_live(x, BUF_SHARD_GRAD, o->unit, -1, op), x->mem[id],
			    x->lay->units[o->unit].shard_floats);
			return;
		}
	}
	/*
	 * An accumulation into an unsharded gradient kept from an earlier
	 * microbatch: the reference backward already added into it (+=), as
	 * autograd does; nothing is left to do.
	 */
	assert(o->nalloc == 0 && o->nfree == 0);
}

static void exec_op(struct exec *x, int i)
{
	const struct schedule *s = x->s;
	const struct op *o = &s->ops[i];

	switch (o->kind) {
	case OP_ALLGATHER:
		op_allgather(x, o, i);
		break;
	case OP_COPY_OUT:
		layout_unpack(&x->lay->units[o->unit], must_live(x, BUF_FULL_PARAM, o->unit, -1, i),
			      must_live(x, BUF_GATHER_OUT, o->unit, -1, i), s->shard_n);
		break;
	case OP_FORWARD:
		op_forward(x, o, i);
		break;
	case OP_RECOMPUTE:
		op_recompute(x, o, i);
		break;
	case OP_BACKWARD:
		op_backward(x, o, i);
		break;
	case OP_ACCUM:
		op_accum(x, o, i);
		break;
	case OP_CONCAT:
		/*
		 * FSDP1 copies per-parameter gradients into the flat gradient.
		 * The reference already writes one flat gradient per unit, so the
		 * copy goes to the staging buffer: the work is done, nothing changes.
		 */
		memcpy(x->stage, must_live(x, BUF_FULL_GRAD, o->unit, -1, i),
		       sizeof(float) * x->lay->units[o->unit].full_floats);
		break;
	case OP_COPY_IN: /* fp32 on the CPU: the cast is a copy */
		layout_pack(&x->lay->units[o->unit], must_live(x, BUF_RS_IN, o->unit, -1, i),
			    must_live(x, BUF_FULL_GRAD, o->unit, -1, i), s->shard_n);
		break;
	case OP_REDUCE_SCATTER:
		op_reduce_scatter(x, o, i);
		break;
	case OP_ALLREDUCE:
		op_allreduce(x, o, i);
		break;
	case OP_OPTIM:
		op_optim(x, o, i);
		break;
	case OP_D2H:
		memcpy(x->host_grad[o->unit], unit_grad(x, o->unit, i),
		       sizeof(float) * x->lay->units[o->unit].shard_floats);
		break;
	case OP_H2D:
		op_h2d(x, o);
		break;
	case OP_CPU_OPTIM:
		op_cpu_optim(x, o);
		break;
	case OP_FREE:
		break; /* the buffers it frees are freed below */
	default:
		assert(!"bad op kind");
	}
}

static uint64_t ns_since(double t0)
{
	double d = MPI_Wtime() - t0;
	return d > 0 ? (uint64_t)(d * 1e9 + 0.5) : 0;
}

double exec_step(struct exec *x, int step, struct op_timing *timings)
{
	const struct schedule *s = x->s;
	const struct experiment *e = x->e;
	double t0;

	for (int m = 0; m < x->M; m++)
		data_batch(x->tokens + (size_t)m * x->N, x->targets + (size_t)m * x->N, e->run.seed, step,
			   x->c->rank * x->M + m, x->B, x->T, x->V);
	x->step = step;
	x->loss_sum = 0;
	memtrack_clear_samples(&x->mt);
	t0 = MPI_Wtime();
	memtrack_sample(&x->mt, 0);
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		timings[i].start_ns = ns_since(t0);
		for (int a = 0; a < o->nalloc; a++)
			buf_alloc(x, s->bufrefs[o->buf_first + a]);
		if (o->nalloc)
			memtrack_sample(&x->mt, timings[i].start_ns);
		exec_op(x, i);
		for (int f = 0; f < o->nfree; f++)
			buf_release(x, s->bufrefs[o->buf_first + o->nalloc + f]);
		timings[i].end_ns = ns_since(t0);
		if (timings[i].end_ns < timings[i].start_ns)
			timings[i].end_ns = timings[i].start_ns;
		if (o->nfree)
			memtrack_sample(&x->mt, timings[i].end_ns);
	}
	/* buffers the schedule leaves alive at the end of the step die with it */
	for (int i = 0; i < s->nbufs; i++)
		if (s->bufs[i].alloc_op >= 0 && x->mem[i])
			buf_release(x, i);
	return x->loss_sum;
}

void exec_param_sums(const struct exec *x, double *sum, double *sumsq)
{
	double v[2] = { 0, 0 };

	for (int u = 0; u < x->s->nunits; u++) {
		const float *p = x->offload != OFF_NONE ? x->host_master[u] : x->shard[u];
		for (size_t i = 0; i < x->lay->units[u].shard_floats; i++) {
			v[0] += p[i];
			v[1] += (double)p[i] * p[i];
		}
	}
	mpi_check(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_SUM, x->c->shard));
	*sum = v[0];
	*sumsq = v[1];
}
