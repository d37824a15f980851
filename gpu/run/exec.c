/*
 * exec.c - the walker over the step schedule (see exec.h).
 *
 * Every op finds its memory through its operands: the schedule names the
 * buffers it reads and writes, with their kinds (the gathered parameters,
 * the saved activations, the gradient being reduced, ...), and the walker
 * maps buffer ids to memory: a device buffer's place in the allocator's
 * segments, a host buffer's host memory, an alias's target. A segment's
 * parameters and gradients sit at its offset in its unit's flat buffer
 * (layout.h).
 */
#include "exec.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "layout.h"
#include "parts.h"
#include "xalloc.h"

#define ADAM_BETA1 0.9f
#define ADAM_BETA2 0.95f

struct exec {
	int oom;                    /* a step ran out of device memory */
	const struct schedule *s;
	const struct experiment *e;
	struct comm *c;
	struct backend *be;
	struct layout *lay;
	struct memory *mem;
	void **host;                /* per buffer: the memory of a host buffer, NULL otherwise */
	int *master;                /* per unit: the buffer holding its master shard */
	int *tokens, *targets;      /* (N) each: one microbatch's data, staged for set_batch */
	struct optim_tensor *ot;    /* one per unit: an optimizer op's tensors */
	/* device memory behind the allocator's segments, sized by a dry run of the allocator */
	int nplanned;
	int planned_fits;           /* the dry run's peaks fit cluster.gpu (as ./sim says "fits") */
	uint64_t planned_reserved;  /* its peak reserved */
	uint64_t *planned;          /* per segment: the bytes the dry run reached */
	void **seg_base;
	uint64_t *seg_bytes;        /* what is behind each segment */
	int nsegs;
	int N;
	int serialize;              /* one op at a time */
	/*
	 * The kernels' scratch for an op whose transient memory is several
	 * tensors (a PyTorch recipe's, recipe_transient_tensors): the kernels
	 * are the testbed's and want one region; the tensors are allocated
	 * and held as the model says, this region is outside the allocator.
	 */
	void *workspace;
	/*
	 * side[b]: where the kernels keep the activations whose first tensor
	 * is buffer b, when the schedule has them as several tensors (PyTorch's
	 * runtimes): the reference kernels keep their own layout in one region,
	 * which the allocator's tensors cannot be (they are not contiguous);
	 * NULL elsewhere
	 */
	void **side;
	int *state_ids;       /* optim_tensors: one unit's moment buffers */
};

static const struct backend_ops *ops_of(const struct exec *x)
{
	return x->be->ops;
}

/* ---- memory ----------------------------------------------------------------- */

/*
 * Memory for the allocator: an arena region grows at its end, so each
 * segment is allocated once, at the size the dry run reached (exec_new),
 * and growth is a view further into it.
 */
static void *reserve(void *ctx, int seg, uint64_t offset, uint64_t bytes)
{
	struct exec *x = ctx;

	if (seg >= x->nsegs) {
		uint64_t want = seg < x->nplanned && x->planned[seg] > offset + bytes ? x->planned[seg] : offset + bytes;
		assert(seg == x->nsegs && offset == 0);
		x->seg_base = xrealloc(x->seg_base, sizeof(void *) * (size_t)(seg + 1));
		x->seg_bytes = xrealloc(x->seg_bytes, sizeof(uint64_t) * (size_t)(seg + 1));
		x->seg_base[seg] = ops_of(x)->dev_alloc(x->be, want);
		x->seg_bytes[seg] = x->seg_base[seg] ? want : 0;
		x->nsegs++;
	}
	return offset + bytes <= x->seg_bytes[seg] ? x->seg_base[seg] : NULL;
}

/*
 * A flush of the caching allocator gives segment seg back to the device
 * (PyTorch: release_cached_blocks, which synchronizes, then cudaFree):
 * once every stream has run everything, its memory is freed.
 */
static void release(void *ctx, int seg)
{
	struct exec *x = ctx;

	assert(seg < x->nsegs);
	ops_of(x)->sync(x->be);
	if (x->seg_base[seg])
		ops_of(x)->dev_free(x->be, x->seg_base[seg]);
	x->seg_base[seg] = NULL;
	x->seg_bytes[seg] = 0;
}

/* The segments the allocator will reserve over the run: a dry run of the same allocator. */
static void plan_memory(struct exec *x)
{
	struct memory *dry = memory_new(x->s, 0, NULL, NULL);
	uint64_t *issue = xcalloc((size_t)x->s->nops + 1, sizeof(uint64_t));

	memory_predict(dry, issue);
	x->planned_fits = mem_peaks_fit(&dry->peaks, gpu_spec_bytes(&x->e->cluster.gpu));
	x->planned_reserved = dry->peaks.reserved;
	x->nplanned = alloc_segments(dry->a);
	x->planned = xmalloc(sizeof(uint64_t) * (size_t)(x->nplanned + 1));
	for (int i = 0; i < x->nplanned; i++)
		x->planned[i] = alloc_segment_bytes(dry->a, i);
	memory_free(dry);
	free(issue);
}

/* The memory of buffer id: host memory, or its place in the device segments. */
static void *ptr_of(const struct exec *x, int id)
{
	const struct schedule *s = x->s;
	void *p;

	while (s->bufs[id].alias_of >= 0)
		id = s->bufs[id].alias_of;
	p = s->bufs[id].host ? x->host[id] : memory_ptr(x->mem, id);
	assert(p && "an operand with no memory: the buffer is not live");
	return p;
}

/* The memory of op i's operand of kind k with a role in `role`, or NULL when it has none. */
static void *opd_ptr(const struct exec *x, int i, enum buf_kind k, int role)
{
	int b = op_operand(x->s, i, k, role);
	return b >= 0 ? ptr_of(x, b) : NULL;
}

/* The first of two kinds op i has as an operand, as a buffer id; -1 when neither. */
static int opd_either(const struct exec *x, int i, enum buf_kind k1, enum buf_kind k2, int role)
{
	int b = op_operand(x->s, i, k1, role);
	return b >= 0 ? b : op_operand(x->s, i, k2, role);
}

static size_t elems_of(const struct buffer *b)
{
	return (size_t)(b->bytes / (uint64_t)elem_bytes(b->elem));
}

static void *at(void *base, size_t elems, enum elem e)
{
	return base ? (char *)base + elems * (size_t)elem_bytes(e) : NULL;
}

/* ---- setup -------------------------------------------------------------------- */

/* bf16 bits of f, rounded to nearest even (NaN kept a NaN) */
static uint16_t bf16_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)(u >> 16 | 0x40);
	return (uint16_t)((u + 0x7fffu + (u >> 16 & 1)) >> 16);
}

static float float_of_bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/*
 * Initial contents of the persistent buffers: this rank's shards of the
 * parameters, made from run.seed shard by shard (layout_shard_init: the
 * rest of the model never exists here), in the buffer's element type;
 * zero optimizer state and host gradients.
 */
static void fill_persistent(struct exec *x)
{
	const struct schedule *s = x->s;
	float *shard = NULL;
	size_t most = 0;

	for (int i = 0; i < s->nbufs; i++)
		if (s->bufs[i].alloc_op < 0 && s->bufs[i].alias_of < 0 && s->bufs[i].bytes > most)
			most = s->bufs[i].bytes;
	shard = xcalloc(most / sizeof(uint16_t) + 1, sizeof(float)); /* room for bf16 buffers' elements as floats */
	for (int i = 0; i < s->nbufs; i++) {
		const struct buffer *b = &s->bufs[i];
		if (b->alloc_op >= 0 || b->alias_of >= 0)
			continue;
		if (b->kind == BUF_SHARD_PARAM || b->kind == BUF_HOST_MASTER) {
			const struct unit_layout *u = &x->lay->units[b->unit];
			assert(elems_of(b) == u->shard_floats);
			/* on the node's CPUs this rank may take, a thread for each 2^20 elements at most */
			int threads = parts_count(parts_threads(x->c->local_ranks), u->shard_floats, (size_t)1 << 20);
			layout_shard_init(u, shard, x->c->shard_rank, x->e->run.seed, threads);
			if (b->elem == ELEM_BF16) {
				uint16_t *h = (uint16_t *)shard; /* in place, front to back */
				for (size_t k = 0; k < u->shard_floats; k++)
					h[k] = bf16_of(shard[k]);
			} else {
				assert(b->elem == ELEM_FP32);
			}
		} else {
			memset(shard, 0, b->bytes); /* optimizer state, host gradients */
		}
		if (b->host)
			memcpy(x->host[i], shard, b->bytes);
		else
			ops_of(x)->upload(x->be, ptr_of(x, i), shard, b->bytes);
	}
	free(shard);
}

/* The kernels' scratch the workspace must hold: the most of any op whose transient memory is several tensors. */
static uint64_t workspace_bytes(const struct schedule *s)
{
	uint64_t ws = 0;
	int n;

	for (int i = 0; i < s->nops; i++) {
		uint64_t t = op_transient_bytes(s, i, &n);
		if (n > 1 && t > ws)
			ws = t;
	}
	return ws;
}

struct exec *exec_new(const struct schedule *s, struct comm *c, struct backend *b, int serialize, char *err,
		      int errlen)
{
	struct exec *x = xcalloc(1, sizeof(*x));
	uint64_t ws;

	x->serialize = serialize;
	x->s = s;
	x->e = s->exp;
	x->c = c;
	x->be = b;
	if (memory_unbacked(s)) {
		/* before anything is allocated: reserve() backs whole segments, not pages mapped into a range */
		snprintf(err, errlen, "%s", memory_unbacked(s));
		free(x);
		return NULL;
	}
	if (schedule_priced_only(s)) {
		snprintf(err, errlen, "%s", schedule_priced_only(s));
		free(x);
		return NULL;
	}
	x->N = s->batch * x->e->model.seq;
	x->lay = layout_new(s);
	plan_memory(x);
	if (!x->e->runtime.caching_allocator && !x->planned_fits) {
		/*
		 * as ./sim says "does not fit": refused before anything is
		 * allocated (a caching allocator flushes at the capacity and
		 * counts what it reserves past it, as ./sim does: that run goes on)
		 */
		snprintf(err, errlen, "the step needs %.2f GiB of device memory (its allocator's plan: ./sim's peak reserved), "
			 "more than the %.2f GiB of cluster.gpu = %s; lower the batch, sequence or microbatches, or shard "
			 "further", (double)x->planned_reserved / (double)(1ull << 30),
			 (double)gpu_spec_bytes(&x->e->cluster.gpu) / (double)(1ull << 30), x->e->cluster.gpu.name);
		exec_free(x);
		return NULL;
	}
	x->mem = memory_new(s, 1, reserve, x);
	alloc_set_release(x->mem->a, release);
	x->host = xcalloc((size_t)s->nbufs, sizeof(void *));
	x->master = xmalloc(sizeof(int) * (size_t)s->nunits);
	x->tokens = xcalloc((size_t)x->N, sizeof(int));
	x->targets = xcalloc((size_t)x->N, sizeof(int));
	{ /* an optimizer entry per unit, or per tensor (state made at the first step), and their moments' ids */
		int most = 0, all = 0;
		for (int u = 0; u < s->nunits; u++) {
			all += s->units[u].ntensors > 1 ? s->units[u].ntensors : 1;
			most = s->units[u].ntensors > most ? s->units[u].ntensors : most;
		}
		x->ot = xcalloc((size_t)all, sizeof(*x->ot));
		x->state_ids = xcalloc((size_t)(2 * most + 2), sizeof(int));
	}
	if (memory_persistent(x->mem) != 0) {
		snprintf(err, errlen, "the device has too little memory for the parameter shards and optimizer state");
		exec_free(x);
		return NULL;
	}
	for (int u = 0; u < s->nunits; u++)
		x->master[u] = -1;
	for (int i = 0; i < s->nbufs; i++) {
		const struct buffer *bf = &s->bufs[i];
		if (bf->host) {
			x->host[i] = ops_of(x)->host_alloc(b, bf->bytes);
			if (!x->host[i]) {
				snprintf(err, errlen, "out of host memory for a %s buffer", buf_kind_name(bf->kind));
				exec_free(x);
				return NULL;
			}
		}
		/* the master copy: on the host under offload, else the device shard */
		if (bf->kind == BUF_HOST_MASTER || (bf->kind == BUF_SHARD_PARAM && x->master[bf->unit] < 0))
			x->master[bf->unit] = i;
	}
	fill_persistent(x);
	x->side = xcalloc((size_t)s->nbufs, sizeof(void *));
	for (int i = 0; i < s->nops; i++)
		for (int j = 0; j < 2; j++) {
			enum buf_kind k = j ? BUF_RECOMPUTED : BUF_ACTS;
			int n, first = op_operand(s, i, k, OPD_OUT);
			uint64_t bytes = op_made_bytes(s, i, k, &n);
			if (n < 2 || first < 0)
				continue;
			if (!(x->side[first] = ops_of(x)->dev_alloc(b, bytes))) {
				snprintf(err, errlen, "out of device memory for the kernels' activations (%.2f GiB)",
					 (double)bytes / (double)(1ull << 30));
				exec_free(x);
				return NULL;
			}
		}
	ws = workspace_bytes(s);
	if (ws && !(x->workspace = ops_of(x)->dev_alloc(b, ws))) {
		snprintf(err, errlen, "out of device memory for the kernels' scratch (%.2f GiB)",
			 (double)ws / (double)(1ull << 30));
		exec_free(x);
		return NULL;
	}
	return x;
}

void exec_free(struct exec *x)
{
	if (!x)
		return;
	for (int i = 0; x->host && i < x->s->nbufs; i++)
		if (x->host[i])
			ops_of(x)->host_free(x->be, x->host[i]);
	for (int i = 0; i < x->nsegs; i++)
		if (x->seg_base[i])
			ops_of(x)->dev_free(x->be, x->seg_base[i]);
	if (x->workspace)
		ops_of(x)->dev_free(x->be, x->workspace);
	for (int i = 0; x->side && i < x->s->nbufs; i++)
		if (x->side[i])
			ops_of(x)->dev_free(x->be, x->side[i]);
	free(x->side);
	memory_free(x->mem);
	free(x->planned);
	free(x->seg_base);
	free(x->seg_bytes);
	layout_free(x->lay);
	free(x->host);
	free(x->master);
	free(x->tokens);
	free(x->targets);
	free(x->ot);
	free(x->state_ids);
	free(x);
}

int exec_out_of_memory(const struct exec *x)
{
	return x->oom;
}

const struct memory *exec_memory(const struct exec *x)
{
	return x->mem;
}

/* ---- ops ------------------------------------------------------------------------- */

/* Op i's activations of kind k (BUF_ACTS, BUF_RECOMPUTED): their region (a side one for several tensors), or NULL. */
static void *acts_ptr(const struct exec *x, int i, enum buf_kind k)
{
	int b = op_operand(x->s, i, k, OPD_INOUT);

	if (b < 0)
		return NULL;
	return x->side[b] ? x->side[b] : ptr_of(x, b);
}

/* A compute op's arguments: its segment's slice of the unit's parameters and gradient, its activations. */
static void seg_args_of(const struct exec *x, int i, struct seg_args *a)
{
	const struct schedule *s = x->s;
	const struct op *o = &s->ops[i];
	const struct seg_params *sp = &x->lay->segs[o->seg];
	int pb = op_operand(s, i, BUF_FULL_PARAM, OPD_IN), gb = op_operand(s, i, BUF_FULL_GRAD, OPD_OUT);
	void *params = ptr_of(x, pb), *grads = gb >= 0 ? ptr_of(x, gb) : NULL;
	enum elem pe = s->bufs[pb].elem, ge = gb >= 0 ? s->bufs[gb].elem : pe;
	int n;

	memset(a, 0, sizeof(*a));
	a->param_elem = pe;
	a->grad_elem = ge;
	a->seg = o->seg;
	a->micro = o->micro;
	a->params = at(params, sp->off, pe);
	a->out_params = at(params, sp->out_off, pe);
	a->grads = at(grads, sp->off, ge);
	a->out_grads = at(grads, sp->out_off, ge);
	a->saved = acts_ptr(x, i, BUF_ACTS);
	if (!a->saved)
		a->saved = opd_ptr(x, i, BUF_TOKENS, OPD_INOUT);
	a->recomputed = acts_ptr(x, i, BUF_RECOMPUTED);
	op_transient_bytes(s, i, &n);
	a->scratch = n > 1 ? x->workspace : opd_ptr(x, i, BUF_TRANSIENT, OPD_INOUT);
	a->resid = opd_ptr(x, i, o->kind == OP_FORWARD ? BUF_RESIDUAL : BUF_RESIDUAL_GRAD, OPD_INOUT);
}

/*
 * The tensors of an optimizer op: per unit, its parameters, gradient and
 * moments. The moments are one buffer, m then v, or, where the optimizer
 * makes its state at its first step (buffer.once), a buffer per moment: of
 * the unit, or of each of its tensors, whose ranges of the shard the
 * layout gives (an entry per tensor).
 */
static int optim_tensors(struct exec *x, int i)
{
	const struct schedule *s = x->s;
	const struct op *o = &s->ops[i];
	int n = 0;

	for (int k = 0; k < o->nopd; k++) {
		int p = (int)s->opds[o->opd_first + k].buf, u = s->bufs[p].unit, g = -1, ns = 0;
		int *st = x->state_ids;
		const struct buffer *pb = &s->bufs[p];
		if (pb->kind != BUF_SHARD_PARAM && pb->kind != BUF_HOST_MASTER)
			continue;
		for (int j = 0; j < o->nopd; j++) {
			int b = (int)s->opds[o->opd_first + j].buf;
			enum buf_kind bk = s->bufs[b].kind;
			if (s->bufs[b].unit != u)
				continue;
			if (bk == BUF_SHARD_GRAD || bk == BUF_FULL_GRAD || bk == BUF_HOST_GRAD)
				g = b;
			else if (bk == BUF_OPTIM_STATE || bk == BUF_HOST_OPTIM_STATE)
				st[ns++] = b;
		}
		assert(g >= 0 && ns >= 1);
		if (ns <= 2) { /* the unit's moments: one buffer, m then v, or one each */
			size_t e = elems_of(pb);
			x->ot[n++] = (struct optim_tensor){
				.p = ptr_of(x, p), .g = ptr_of(x, g), .m = ptr_of(x, st[0]),
				.v = ns == 2 ? ptr_of(x, st[1]) : at(ptr_of(x, st[0]), e, s->bufs[st[0]].elem), .n = e,
				.p_elem = pb->elem, .g_elem = s->bufs[g].elem, .state_elem = s->bufs[st[0]].elem, .unit = u,
			};
			continue;
		}
		{ /* each tensor's moments: its range of the shard and of the gradient */
			const struct unit_layout *l = &x->lay->units[u];
			assert(ns == 2 * l->ntensors && l->per_tensor);
			for (int t = 0; t < l->ntensors; t++) {
				size_t off = l->t[t].shard_off, len = (size_t)(l->t[t].rows_per_rank * l->t[t].cols);
				assert((int64_t)len == s->units[u].tensor_shard[t]);
				x->ot[n++] = (struct optim_tensor){
					.p = at(ptr_of(x, p), off, pb->elem), .g = at(ptr_of(x, g), off, s->bufs[g].elem),
					.m = ptr_of(x, st[2 * t]), .v = ptr_of(x, st[2 * t + 1]), .n = len,
					.p_elem = pb->elem, .g_elem = s->bufs[g].elem, .state_elem = s->bufs[st[2 * t]].elem,
					.unit = -1,
				};
			}
		}
	}
	return n;
}

static void launch_optimizer(struct exec *x, int i, int step)
{
	struct optim_args a = {
		.t = x->ot,
		.count = optim_tensors(x, i),
		.lr = (float)x->e->run.lr,
		.beta1 = ADAM_BETA1,
		.beta2 = ADAM_BETA2,
		.eps = (float)x->e->run.eps,
		.weight_decay = (float)x->e->run.weight_decay,
		.step = step,
		.grad_scale = 1.0f / (float)x->s->microbatches,
		.form = x->s->optim,
	};
	ops_of(x)->optimizer(x->be, x->s->ops[i].stream, &a);
}

/* Host-device copies: every output operand from the input operand of the same unit. */
static void launch_copies(struct exec *x, int i)
{
	const struct schedule *s = x->s;
	const struct op *o = &s->ops[i];

	for (int k = 0; k < o->nopd; k++) {
		const struct operand *out = &s->opds[o->opd_first + k];
		const struct buffer *ob = &s->bufs[out->buf];
		if (out->role != OPD_OUT)
			continue;
		for (int j = 0; j < o->nopd; j++) {
			const struct operand *in = &s->opds[o->opd_first + j];
			const struct buffer *ib = &s->bufs[in->buf];
			if (in->role == OPD_IN && ib->unit == ob->unit) {
				ops_of(x)->copy(x->be, o->stream, ptr_of(x, (int)out->buf), ob->elem,
						ptr_of(x, (int)in->buf), ib->elem, elems_of(ob));
				break;
			}
		}
	}
}

/* ptr_of as exec_launch_copy's callback */
static void *exec_ptr(void *ctx, int buf)
{
	return ptr_of(ctx, buf);
}

void exec_launch_copy(const struct backend_ops *b, struct backend *be, const struct schedule *s,
		      const struct layout *lay, int i, void *(*ptr)(void *ctx, int buf), void *ctx)
{
	const struct op *o = &s->ops[i];
	int st = o->stream, in, out;

	switch (o->kind) {
	case OP_COPY_OUT:
		out = op_operand(s, i, BUF_FULL_PARAM, OPD_OUT);
		in = op_operand(s, i, BUF_GATHER_OUT, OPD_IN);
		if (in >= 0) {
			assert(s->bufs[out].elem == s->bufs[in].elem);
			b->unpack(be, st, &lay->units[o->unit], ptr(ctx, out), ptr(ctx, in), s->bufs[out].elem,
				  s->shard_n);
			break;
		}
		/* a group of one (local_shards): the shard is the flat buffer's layout, cast to its dtype */
		assert(s->local_shards);
		in = op_operand(s, i, BUF_SHARD_PARAM, OPD_IN);
		if (in < 0)
			in = op_operand(s, i, BUF_HOST_STAGE, OPD_IN);
		b->copy(be, st, ptr(ctx, out), s->bufs[out].elem, ptr(ctx, in), s->bufs[in].elem,
			elems_of(&s->bufs[out]));
		break;
	case OP_CONCAT:
		/* FSDP1: the per-parameter gradients into one flat gradient (the op's scratch) */
		in = op_operand(s, i, BUF_FULL_GRAD, OPD_IN);
		out = op_operand(s, i, BUF_TRANSIENT, OPD_OUT);
		b->copy(be, st, ptr(ctx, out), s->bufs[in].elem, ptr(ctx, in), s->bufs[in].elem,
			elems_of(&s->bufs[in]));
		break;
	case OP_COPY_IN:
		in = op_operand(s, i, BUF_FULL_GRAD, OPD_IN);
		out = op_operand(s, i, BUF_RS_IN, OPD_OUT);
		if (s->per_tensor_shards)
			b->pack(be, st, &lay->units[o->unit], ptr(ctx, out), s->bufs[out].elem, ptr(ctx, in),
				s->bufs[in].elem, s->shard_n);
		else /* a cast to the reduce dtype */
			b->copy(be, st, ptr(ctx, out), s->bufs[out].elem, ptr(ctx, in), s->bufs[in].elem,
				elems_of(&s->bufs[out]));
		break;
	default:
		assert(!"not a copy op");
	}
}

static void launch_op(struct exec *x, int i, int step)
{
	const struct schedule *s = x->s;
	const struct op *o = &s->ops[i];
	const struct backend_ops *b = ops_of(x);
	int st = o->stream, in, out;
	struct seg_args a;

	switch (o->kind) {
	case OP_ALLGATHER:
		in = opd_either(x, i, BUF_SHARD_PARAM, BUF_HOST_STAGE, OPD_IN);
		out = opd_either(x, i, BUF_FULL_PARAM, BUF_GATHER_OUT, OPD_OUT);
		b->all_gather(x->be, st, comm_handle_of(x->c, o->group, st), ptr_of(x, out), s->bufs[out].elem,
			      ptr_of(x, in), s->bufs[in].elem, s->units[o->unit].shard_elems);
		break;
	case OP_COPY_OUT:
	case OP_CONCAT:
	case OP_COPY_IN:
		exec_launch_copy(b, x->be, s, x->lay, i, exec_ptr, x);
		break;
	case OP_FORWARD:
		seg_args_of(x, i, &a);
		b->forward(x->be, st, &a);
		break;
	case OP_RECOMPUTE:
		seg_args_of(x, i, &a);
		b->recompute(x->be, st, &a);
		break;
	case OP_BACKWARD:
		seg_args_of(x, i, &a);
		b->backward(x->be, st, &a);
		break;
	case OP_LOSS_BACKWARD:
		/*
		 * Nothing to launch: the model's head backward (the next op)
		 * differentiates its own loss; this op is the memory PyTorch's
		 * loss backward holds before it (core/recipe.h)
		 */
		break;
	case OP_ACCUM:
		/*
		 * This microbatch's reduced shard into the accumulated one. An
		 * accumulation into an unsharded gradient (no input operand) has
		 * nothing left to do: the backward kernels add into the gradient.
		 */
		in = op_operand(s, i, BUF_RS_OUT, OPD_IN);
		if (in >= 0) {
			int acc = op_operand(s, i, BUF_SHARD_GRAD, OPD_OUT);
			b->accumulate(x->be, st, ptr_of(x, acc), s->bufs[acc].elem, ptr_of(x, in), s->bufs[in].elem,
				      elems_of(&s->bufs[in]));
		}
		break;
	case OP_REDUCE_SCATTER:
		in = opd_either(x, i, BUF_FULL_GRAD, BUF_RS_IN, OPD_IN);
		out = opd_either(x, i, BUF_RS_OUT, BUF_SHARD_GRAD, OPD_OUT);
		b->reduce_scatter(x->be, st, comm_handle_of(x->c, o->group, st), ptr_of(x, out), ptr_of(x, in),
				  s->units[o->unit].shard_elems, s->bufs[out].elem);
		break;
	case OP_ALLREDUCE:
		in = (int)s->opds[o->opd_first].buf; /* its one operand, reduced in place */
		b->all_reduce(x->be, st, comm_handle_of(x->c, o->group, st), ptr_of(x, in), elems_of(&s->bufs[in]),
			      s->bufs[in].elem);
		break;
	case OP_OPTIM:
	case OP_CPU_OPTIM:
		launch_optimizer(x, i, step);
		break;
	case OP_D2H:
	case OP_H2D:
	case OP_COPY:
		launch_copies(x, i);
		break;
	case OP_FREE:
		break;
	default:
		assert(!"bad op kind");
	}
}

/* ---- the step ----------------------------------------------------------------------- */

double exec_step(struct exec *x, int step, struct op_timing *timings, uint64_t *step_ns)
{
	const struct schedule *s = x->s;
	const struct experiment *e = x->e;
	const struct backend_ops *b = ops_of(x);
	const struct model_shape *m = &e->model;
	uint64_t end = 0;

	for (int mb = 0; mb < s->microbatches; mb++) {
		data_batch(x->tokens, x->targets, e->run.seed, step, x->c->rank * s->microbatches + mb, s->batch,
			   m->seq, m->vocab);
		b->set_batch(x->be, mb, x->tokens, x->targets);
	}
	memory_step_begin(x->mem);
	b->step_begin(x->be);
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		uint64_t now = b->now_ns(x->be);
		if (memory_grant(x->mem, i, now) != 0) {
			char lab[64];
			b->sync(x->be);
			fprintf(stderr, "gpu_run: rank %d: out of device memory at op %d (%s), %llu bytes reserved\n",
				x->c->rank, i, op_label(s, i, lab, sizeof(lab)),
				(unsigned long long)alloc_reserved(x->mem->a));
			x->oom = 1;
			return NAN;
		}
		/* its memory flushed the allocator's cache: the device drained first (as ./sim has it wait) */
		if (x->mem->sync[i])
			b->sync(x->be);
		for (uint32_t d = 0; d < o->ndeps; d++) {
			int p = (int)s->deps[o->dep_first + d];
			if (s->ops[p].stream != o->stream)
				b->wait(x->be, o->stream, event_end(p));
		}
		/* memory that ops of other streams freed, which the schedule does not order before this one */
		for (int t = 0; t < ST_COUNT; t++) {
			int p = x->mem->wait[(size_t)i * ST_COUNT + t];
			if (p >= 0)
				b->wait(x->be, o->stream, event_end(p));
		}
		b->record(x->be, o->stream, event_start(i));
		for (int k = 0; k < o->nalloc; k++) {
			int id = (int)s->bufrefs[o->buf_first + k];
			/* zero-filled when made (the state made at the first step is not made again) */
			if (s->bufs[id].zero && memory_makes(x->mem, id))
				b->zero(x->be, o->stream, ptr_of(x, id), s->bufs[id].bytes);
		}
		launch_op(x, i, step);
		b->record(x->be, o->stream, event_end(i));
		memory_release(x->mem, i, now);
		if (x->serialize)
			b->sync(x->be);
	}
	b->sync(x->be);
	for (int i = 0; i < s->nops; i++) {
		timings[i].start_ns = b->event_ns(x->be, event_start(i));
		timings[i].end_ns = b->event_ns(x->be, event_end(i));
		if (timings[i].end_ns > end)
			end = timings[i].end_ns;
	}
	memory_step_end(x->mem, end);
	*step_ns = end;
	return b->loss(x->be);
}

void exec_param_sums(const struct exec *x, double *sum, double *sumsq)
{
	const struct schedule *s = x->s;
	double v[2] = { 0, 0 };

	for (int u = 0; u < s->nunits; u++) {
		int id = x->master[u];
		const struct buffer *b = &s->bufs[id];
		size_t n = elems_of(b);
		void *raw = xmalloc(b->bytes + 1);
		if (b->host)
			memcpy(raw, x->host[id], b->bytes);
		else
			ops_of(x)->download(x->be, raw, ptr_of(x, id), b->bytes);
		for (size_t i = 0; i < n; i++) {
			double p = b->elem == ELEM_BF16 ? float_of_bf16(((const uint16_t *)raw)[i])
							: ((const float *)raw)[i];
			v[0] += p;
			v[1] += p * p;
		}
		free(raw);
	}
	mpi_check(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_SUM, x->c->group[GRP_SHARD]));
	*sum = v[0];
	*sumsq = v[1];
}
