/*
 * schedule.c - build the op graph of one optimizer step (see schedule.h).
 *
 * The builder walks the step as the framework issues it: for each
 * microbatch, forward over the segments with all-gathers issued `prefetch`
 * units ahead, then backward in reverse with gathers for resharded units,
 * recompute, gradient reduction per unit as soon as its backward is done,
 * and the optimizer either inside backward (per unit, on the reduction
 * stream) or after the last microbatch. Ops are appended in issue order,
 * so dependencies always point backwards.
 *
 * Sizes: llama3-70b with 8 microbatches is about 6,000 ops; arrays grow
 * by doubling.
 */
#include "schedule.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe.h"
#include "xalloc.h"

/* Bytes of the (N, D) residual stream, or its gradient, of one microbatch. */
static uint64_t residual_bytes(const struct model_shape *m, int batch, int act_bytes)
{
	return (uint64_t)batch * (uint64_t)m->seq * (uint64_t)m->hidden * (uint64_t)act_bytes;
}


struct builder {
	struct schedule *s;
	const struct experiment *e;
	const struct policy *p;
	int M;                /* microbatches */
	int pbytes;           /* full (compute) param element */
	int act_bytes;        /* activation element */
	enum elem master_elem, param_elem, grad_elem, accum_elem, state_elem;
	/*
	 * the gradient the optimizer reads: ddp's full gradient, in the reduce
	 * dtype (its all-reduce's buffer); the others' sharded gradient, in the
	 * accumulation dtype, which policy.accum_dtype names and which by
	 * default is the master parameters' (FSDP2's foreach_reduce casts each
	 * reduced shard to the sharded parameter's dtype and adds it there)
	 */
	enum elem sgrad_elem;
	/* per unit state */
	int *shard_param;     /* device shard (persistent), -1 when it lives on the host */
	int *optim_state;     /* device Adam moments (persistent), -1 under offload or made at the first step */
	/*
	 * lazy_state: the optimizer makes its state at its first step
	 * (runtime.lazy_optim_state): state[u] holds unit u's nstate[u]
	 * buffers, each moment of each of its tensors (of the unit, when its
	 * shard is one flat buffer), m then v, made by its optimizer's op
	 */
	int lazy_state;
	int **state, *nstate;
	int *host_master;     /* offload: host master shard, host gradient, host moments; -1 */
	int *host_grad;
	int *host_state;
	int *full_buf;        /* gathered params alive now (ddp: the alias of the shard), or -1 */
	int *ready_op;        /* op after which the gathered params are usable */
	int *full_grad;       /* unsharded gradient buffer, or -1 */
	int *shard_grad;      /* accumulated sharded gradient, or -1 */
	int *last_reduce;     /* last op that reduced the unit's gradient this step */
	int *last_use;        /* last compute op that used the unit's params */
	int *d2h_op;          /* offload: last device-to-host copy of the unit's gradient */
	int *copy_out_pending;/* gathered into the flat buffer, not yet copied out */
	/*
	 * per segment: saved activations of this microbatch and the ones its
	 * recomputation makes, the first of nacts (nrecomputed) buffers in a
	 * row, a tensor each where the runtime allocates them apart
	 */
	int *acts, *nacts;
	int *recomputed, *nrecomputed;
	int resid, dresid;    /* this microbatch's residual stream and its gradient, -1 */
	int rs_held, rs_held_op; /* FSDP2: the last reduce-scatter input, kept until the next reduce, and its reduce-scatter; -1 */
	int held_logits;      /* policy.hold_logits: the last microbatch's logits, which the training loop holds; -1 */
	uint64_t logits_bytes;/* policy.hold_logits: their size; 0 otherwise */
	enum kernel_recipe recipe[SEG_KIND_COUNT]; /* the runtime's kernels (core/recipe.h), by segment kind */
	enum kernel_recipe launched[SEG_KIND_COUNT]; /* the kernels launched, priced: recipe's, or e->launch_kernels */
	/* by segment kind and the segment's own checkpointing mode (seg_ac) */
	int ktab[SEG_KIND_COUNT][PH_COUNT][AC_MODES];
	uint64_t saved[SEG_KIND_COUNT][AC_MODES];               /* activation bytes a segment keeps */
	struct transient {       /* scratch of a segment's phase: its tensors (recipe_transient_tensors) and their sum */
		int n;
		uint64_t bytes[RECIPE_TRANSIENT_MAX], sum;
	} transient[SEG_KIND_COUNT][PH_COUNT][AC_MODES];
	/*
	 * The loss's own backward, an op before the head's (recipe_loss_backward):
	 * how many of the head's backward kernels are its (0: none, the head's
	 * backward is one op), its transient tensors, and the head's backward
	 * kernels in two tables, the loss's and the rest (-2 until made)
	 */
	int loss_kernels;
	struct transient loss_tr;
	/* the tensors a block keeps from forward to backward (recipe_saved_tensors), per checkpointing mode */
	struct transient saved_t[AC_MODES];
	int loss_ktab[2];
	/*
	 * One op under construction, built in place at the end of
	 * schedule.ops: its dependencies and operands go straight to the end
	 * of schedule.deps, schedule.opds and schedule.bufrefs (its
	 * allocations), its frees are staged here.
	 */
	struct op *cur;
	uint32_t *frees;
	int *opd_at;          /* per buffer: its last index in schedule.opds, -1 */
	int nd, na, nf, no, cap;
	int room;             /* ops that fit in the schedule's arrays before reserve() */
};

static void *grow(void *p, int *cap, int need, size_t elem)
{
	if (need <= *cap)
		return p;
	int c = *cap ? *cap : 64;
	while (c < need)
		c *= 2;
	p = xrealloc(p, (size_t)c * elem);
	*cap = c;
	return p;
}

static enum elem elem_of(int bytes)
{
	return bytes == 4 ? ELEM_FP32 : ELEM_BF16;
}

static inline __attribute__((always_inline)) int buf_new(struct builder *b, uint64_t bytes, enum mem_cat cat,
							 enum buf_kind kind, enum stream_id stream, int unit,
							 int seg, int micro, enum elem el)
{
	struct schedule *s = b->s;

	if (s->nbufs >= s->cap_bufs) {
		s->bufs = grow(s->bufs, &s->cap_bufs, s->nbufs + 1, sizeof(*s->bufs));
		b->opd_at = xrealloc(b->opd_at, sizeof(int) * (size_t)s->cap_bufs);
	}
	s->bufs[s->nbufs] = (struct buffer){
		.bytes = bytes, .cat = cat, .kind = kind, .stream = stream, .elem = el, .alias_of = -1,
		.unit = unit, .seg = seg, .micro = micro, .alloc_op = -1, .free_op = -1,
	};
	b->opd_at[s->nbufs] = -1;
	return s->nbufs++;
}

/* A persistent buffer in host memory (offload). */
static int host_buf_new(struct builder *b, uint64_t bytes, enum mem_cat cat, enum buf_kind kind, int unit,
			enum elem el)
{
	int id = buf_new(b, bytes, cat, kind, ST_HOST, unit, -1, -1, el);
	b->s->bufs[id].host = 1;
	return id;
}

/*
 * Grow the schedule's arrays to hold at least one more op with the most
 * dependencies, operands and buffer references an op can have, and count
 * how many such ops they hold.
 */
static void reserve(struct builder *b)
{
	struct schedule *s = b->s;
	int r;

	s->ops = grow(s->ops, &s->cap_ops, s->nops + 1, sizeof(*s->ops));
	s->deps = grow(s->deps, &s->cap_deps, s->ndeps + b->cap, sizeof(*s->deps));
	s->opds = grow(s->opds, &s->cap_opds, s->nopds + b->cap, sizeof(*s->opds));
	s->bufrefs = grow(s->bufrefs, &s->cap_bufrefs, s->nbufrefs + 2 * b->cap, sizeof(*s->bufrefs));
	b->room = s->cap_ops - s->nops;
	r = (s->cap_deps - s->ndeps) / b->cap;
	b->room = r < b->room ? r : b->room;
	r = (s->cap_opds - s->nopds) / b->cap;
	b->room = r < b->room ? r : b->room;
	r = (s->cap_bufrefs - s->nbufrefs) / (2 * b->cap);
	b->room = r < b->room ? r : b->room;
}

static inline __attribute__((always_inline)) void begin(struct builder *b, enum op_kind kind, enum stream_id st,
							int unit, int seg, int micro)
{
	struct schedule *s = b->s;

	if (b->room <= 0)
		reserve(b);
	b->room--;
	b->cur = &s->ops[s->nops];
	memset(b->cur, 0, sizeof(*b->cur));
	b->cur->dep_first = s->ndeps;
	b->cur->buf_first = s->nbufrefs;
	b->cur->opd_first = s->nopds;
	b->cur->kind = kind;
	b->cur->stream = st;
	b->cur->unit = unit;
	b->cur->seg = seg;
	b->cur->micro = micro;
	b->cur->ktab = -1;
	b->cur->launches = 1;
	b->nd = b->na = b->nf = b->no = 0;
}

static inline __attribute__((always_inline)) void dep(struct builder *b, int op)
{
	uint32_t *d = &b->s->deps[b->cur->dep_first];

	if (op < 0)
		return;
	for (int i = 0; i < b->nd; i++)
		if (d[i] == (uint32_t)op)
			return;
	assert(b->nd < b->cap && op < b->s->nops);
	d[b->nd++] = op;
}

/* The op under construction reads (OPD_IN), writes (OPD_OUT) or updates buffer buf. */
static inline __attribute__((always_inline)) void opd(struct builder *b, int buf, enum opd_role role)
{
	struct operand *x = b->s->opds;
	int at;

	if (buf < 0)
		return;
	at = b->opd_at[buf];
	if (at >= (int)b->cur->opd_first) { /* named already by this op */
		x[at].role |= role;
		return;
	}
	assert(b->no < b->cap);
	at = (int)b->cur->opd_first + b->no++;
	b->opd_at[buf] = at;
	x[at] = (struct operand){ (uint32_t)buf, (uint8_t)role };
}

static inline __attribute__((always_inline)) void alloc_buf(struct builder *b, int buf)
{
	struct schedule *s = b->s;

	assert(b->na < b->cap && s->bufs[buf].alloc_op < 0);
	s->bufs[buf].alloc_op = s->nops;
	s->bufs[buf].stream = b->cur->stream;
	s->bufrefs[b->cur->buf_first + b->na++] = buf;
}

static inline __attribute__((always_inline)) void free_buf(struct builder *b, int buf)
{
	if (buf < 0)
		return;
	assert(b->nf < b->cap && b->s->bufs[buf].free_op < 0);
	b->s->bufs[buf].free_op = b->s->nops;
	b->frees[b->nf++] = buf;
}

/* Append the op under construction; returns its index. */
static inline __attribute__((always_inline)) int commit(struct builder *b)
{
	struct schedule *s = b->s;
	int id = s->nops;
	struct op *o = b->cur;

	o->ndeps = b->nd;
	s->ndeps += b->nd;
	o->nalloc = b->na;
	o->nfree = b->nf;
	s->nbufrefs += b->na;
	for (int i = 0; i < b->nf; i++)
		s->bufrefs[s->nbufrefs++] = b->frees[i];
	o->nopd = b->no;
	s->nopds += b->no;
	s->nops++;
	return id;
}

/* ---- units and segments -------------------------------------------------- */

static void unit_add_module(struct schedule *s, struct unit *u, enum module_kind k, int shard_n)
{
	const struct model_shape *m = &s->exp->model;
	struct tensor_desc td[BT_COUNT];
	int n = model_module_tensor_list(m, k, td, BT_COUNT);

	for (int i = 0; i < n; i++) {
		/* dim-0 sharding, padded to a multiple of the ranks; a norm weight is 1-D
		 * (plan_units replaces the count for flat shards) */
		int64_t rows = td[i].rows == 1 ? td[i].cols : td[i].rows;
		int64_t cols = td[i].rows == 1 ? 1 : td[i].cols;
		int64_t elems = td[i].rows * td[i].cols, shard = (rows + shard_n - 1) / shard_n * cols;
		u->params += elems;
		u->shard_elems += (uint64_t)shard;
		u->tensor_elems = xrealloc(u->tensor_elems, sizeof(*u->tensor_elems) * (size_t)(u->ntensors + i + 1));
		u->tensor_shard = xrealloc(u->tensor_shard, sizeof(*u->tensor_shard) * (size_t)(u->ntensors + i + 1));
		u->tensor_elems[u->ntensors + i] = elems;
		u->tensor_shard[u->ntensors + i] = shard;
		if (u->last_tensor + elems > u->pair_elems)
			u->pair_elems = u->last_tensor + elems;
		u->last_tensor = elems;
	}
	u->ntensors += n;
}

static int unit_new(struct schedule *s, const char *name, int is_root)
{
	struct unit *u = &s->units[s->nunits];

	memset(u, 0, sizeof(*u));
	memcpy(u->name, name, strnlen(name, sizeof(u->name) - 1)); /* truncated, NUL-terminated */
	u->first_seg = -1;
	u->last_seg = -1;
	u->is_root = is_root;
	return s->nunits++;
}

static void unit_use_seg(struct schedule *s, int unit, int seg)
{
	struct unit *u = &s->units[unit];

	s->segs[seg].unit = unit;
	if (u->first_seg < 0 || seg < u->first_seg)
		u->first_seg = seg;
	if (seg > u->last_seg)
		u->last_seg = seg;
}

/* Write v >= 0 in decimal at p, unterminated; returns the digits written. */
static int put_uint(char *p, int v)
{
	char d[12];
	int n = 0;

	do
		d[n++] = (char)('0' + v % 10);
	while (v /= 10);
	for (int i = 0; i < n; i++)
		p[i] = d[n - 1 - i];
	return n;
}

/* Cut the model into units by the wrapping policy; units are in forward gather order. */
static void build_units(struct schedule *s)
{
	const struct policy *p = &s->exp->policy;
	const struct model_shape *m = &s->exp->model;
	int L = m->layers, head = L + 1, root = -1, k = 1;
	char name[40];

	s->nsegs = L + 2;
	s->segs = xcalloc(s->nsegs, sizeof(*s->segs));
	s->units = xcalloc(L + 3, sizeof(*s->units));
	s->segs[0] = (struct segment){ SEG_EMBED, -1, -1 };
	for (int i = 0; i < L; i++)
		s->segs[1 + i] = (struct segment){ SEG_BLOCK, i, -1 };
	s->segs[head] = (struct segment){ SEG_HEAD, -1, -1 };

	switch (p->wrap) {
	case WRAP_WHOLE:
		root = unit_new(s, "model", 1);
		for (int i = 0; i < s->nsegs; i++)
			unit_use_seg(s, root, i);
		unit_add_module(s, &s->units[root], MOD_EMBED, s->shard_n);
		for (int i = 0; i < L; i++)
			unit_add_module(s, &s->units[root], MOD_BLOCK, s->shard_n);
		unit_add_module(s, &s->units[root], MOD_FINAL_NORM, s->shard_n);
		unit_add_module(s, &s->units[root], MOD_OUTPUT, s->shard_n);
		return;
	case WRAP_BLOCK_IO: {
		int u = unit_new(s, "embed", 0);
		unit_use_seg(s, u, 0);
		unit_add_module(s, &s->units[u], MOD_EMBED, s->shard_n);
		break;
	}
	case WRAP_EVERY:
		k = p->wrap_k;
		/* fall through */
	case WRAP_BLOCK:
		root = unit_new(s, "root", 1);
		unit_use_seg(s, root, 0);
		unit_add_module(s, &s->units[root], MOD_EMBED, s->shard_n);
		break;
	default:
		assert(!"bad wrap");
	}
	for (int i = 0; i < L; i += k) {
		int last = i + k < L ? i + k : L, u, n;
		/* "block<i>", or "blocks<i>-<last - 1>" (at most 28 characters) */
		if (k == 1) {
			memcpy(name, "block", 5);
			n = 5 + put_uint(name + 5, i);
		} else {
			memcpy(name, "blocks", 6);
			n = 6 + put_uint(name + 6, i);
			name[n++] = '-';
			n += put_uint(name + n, last - 1);
		}
		name[n] = 0;
		u = unit_new(s, name, 0);
		for (int j = i; j < last; j++) {
			unit_use_seg(s, u, 1 + j);
			unit_add_module(s, &s->units[u], MOD_BLOCK, s->shard_n);
		}
	}
	if (root < 0) {
		int u = unit_new(s, "output", 0);
		unit_use_seg(s, u, head);
		unit_add_module(s, &s->units[u], MOD_FINAL_NORM, s->shard_n);
		unit_add_module(s, &s->units[u], MOD_OUTPUT, s->shard_n);
	} else {
		unit_use_seg(s, root, head);
		unit_add_module(s, &s->units[root], MOD_FINAL_NORM, s->shard_n);
		unit_add_module(s, &s->units[root], MOD_OUTPUT, s->shard_n);
	}
}

static int *ints(int n, int v)
{
	int *a = xmalloc(sizeof(int) * (n > 0 ? n : 1));
	for (int i = 0; i < n; i++)
		a[i] = v;
	return a;
}

/* Per-unit policy facts: sizes, resharding, deferral. */
static void plan_units(struct builder *b)
{
	struct schedule *s = b->s;
	const struct policy *p = b->p;
	int last_nonroot = -1;

	for (int u = 0; u < s->nunits; u++)
		if (!s->units[u].is_root)
			last_nonroot = u;
	for (int u = 0; u < s->nunits; u++) {
		struct unit *x = &s->units[u];

		if (!s->per_tensor_shards) /* one flat buffer cut in shard_n pieces, padded at its end */
			x->shard_elems = ((uint64_t)x->params + s->shard_n - 1) / s->shard_n;
		x->full_bytes = x->shard_elems * (uint64_t)s->shard_n * b->pbytes;
		if (p->sharding == SHARD_DDP)
			x->full_bytes = (uint64_t)x->params * b->pbytes;
		x->reshard_after_fwd = p->sharding != SHARD_DDP && p->reshard != RESHARD_NO && !x->is_root &&
				       !(p->reshard == RESHARD_ALL_BUT_LAST && u == last_nonroot);
		x->defer_sync = 0;
		if (p->accum == ACC_PARTIAL && !x->is_root && s->segs[x->last_seg].kind == SEG_BLOCK) {
			/* every k-th block defers: a unit defers when it holds such a block */
			for (int g = x->first_seg; g <= x->last_seg; g++) {
				int blk = s->segs[g].block;
				if (blk >= 0 && blk % p->partial_k == p->partial_k - 1)
					x->defer_sync = 1;
			}
		}
		x->accumulates_full = b->M > 1 &&
				      (p->accum == ACC_NO_SYNC || x->defer_sync || p->sharding == SHARD_DDP);
		x->full_grad_elem = x->accumulates_full ? b->accum_elem : b->param_elem;
		if (p->sharding == SHARD_DDP) {
			/* ddp keeps gradients beside its replicated params, in the reduce dtype */
			x->full_grad_elem = b->grad_elem;
			x->full_grad_bytes = (uint64_t)x->params * policy_grad_bytes(p);
			x->reduce_bytes = x->full_grad_bytes;
		} else {
			/* flat shards reduce the gradient buffer itself: it spans the padding too */
			uint64_t elems = s->per_tensor_shards ? (uint64_t)x->params : x->shard_elems * s->shard_n;
			x->full_grad_bytes = elems * (uint64_t)elem_bytes(x->full_grad_elem);
			x->reduce_bytes = x->shard_elems * (uint64_t)s->shard_n * policy_grad_bytes(p);
		}
	}
	/*
	 * Backward order: by last segment, descending. A segment belongs to one
	 * unit, so units' last segments differ: list them by segment.
	 */
	{
		int *by_seg = ints(s->nsegs, -1), n = 0;
		for (int u = 0; u < s->nunits; u++)
			by_seg[s->units[u].last_seg] = u;
		s->bwd_order = xmalloc(sizeof(int) * s->nunits);
		for (int g = s->nsegs - 1; g >= 0; g--)
			if (by_seg[g] >= 0)
				s->bwd_order[n++] = by_seg[g];
		assert(n == s->nunits);
		free(by_seg);
	}
}

/* ---- kernels ---------------------------------------------------------------- */

/*
 * The checkpointing mode of segment g: the policy's, except that per-layer
 * checkpoints every K-th block fully and leaves the others alone
 * (torchtitan _apply_layer_sac: its count of blocks, from 1, a multiple
 * of K); the embedding and head keep their activations.
 */
static enum ac_mode seg_ac(const struct schedule *s, int g)
{
	const struct policy *p = &s->exp->policy;

	if (s->segs[g].kind != SEG_BLOCK)
		return AC_NONE;
	if (p->ac == AC_PER_LAYER)
		return (s->segs[g].block + 1) % p->ac_k == 0 ? AC_FULL : AC_NONE;
	return p->ac;
}

static int ktab_get(struct builder *b, enum segment_kind sk, enum phase ph, enum ac_mode ac)
{
	struct schedule *s = b->s;
	const struct policy *p = b->p;
	struct kernel k[MODEL_MAX_KERNELS];
	struct ktab *t;
	int n;

	if (b->ktab[sk][ph][ac] != -2)
		return b->ktab[sk][ph][ac];
	n = recipe_kernels(b->launched[sk], &s->exp->model, s->exp->run.batch, sk, ph, ac, p->loss, b->act_bytes, k,
			   MODEL_MAX_KERNELS);
	if (n == 0)
		return b->ktab[sk][ph][ac] = -1;
	s->ktabs = grow(s->ktabs, &s->cap_ktabs, s->nktabs + 1, sizeof(*s->ktabs));
	s->kernels = grow(s->kernels, &s->cap_kernels, s->nkernels + n, sizeof(*s->kernels));
	t = &s->ktabs[s->nktabs];
	t->first = s->nkernels;
	t->count = n;
	t->flops = t->bytes = 0;
	for (int i = 0; i < n; i++) {
		s->kernels[s->nkernels++] = k[i];
		t->flops += k[i].flops;
		t->bytes += k[i].bytes;
	}
	return b->ktab[sk][ph][ac] = s->nktabs++;
}

/* Make the current op a compute op running the kernels of (segment, phase). */
static void set_kernels(struct builder *b, int seg, enum phase ph)
{
	enum segment_kind sk = b->s->segs[seg].kind;
	enum ac_mode ac = seg_ac(b->s, seg);
	int t = b->ktab[sk][ph][ac];

	if (t == -2) /* the first op of this shape lists its kernels */
		t = ktab_get(b, sk, ph, ac);

	b->cur->seg_kind = sk;
	b->cur->ktab = t;
	if (t >= 0) {
		b->cur->flops = b->s->ktabs[t].flops;
		b->cur->bytes = b->s->ktabs[t].bytes;
		b->cur->launches = b->s->ktabs[t].count;
	}
}

/*
 * The head's backward kernels apart (b->loss_kernels of them the loss's):
 * the loss's (part 0) or the rest (part 1) as a kernel table of their
 * own, over the same kernels.
 */
static int head_bwd_part(struct builder *b, int whole, int part)
{
	struct schedule *s = b->s;
	struct ktab *t;
	int first, count;

	if (b->loss_ktab[part] != -2)
		return b->loss_ktab[part];
	assert(whole >= 0 && s->ktabs[whole].count > (uint32_t)b->loss_kernels);
	first = (int)s->ktabs[whole].first + (part ? b->loss_kernels : 0);
	count = part ? (int)s->ktabs[whole].count - b->loss_kernels : b->loss_kernels;
	s->ktabs = grow(s->ktabs, &s->cap_ktabs, s->nktabs + 1, sizeof(*s->ktabs));
	t = &s->ktabs[s->nktabs];
	t->first = (uint32_t)first;
	t->count = (uint32_t)count;
	t->flops = t->bytes = 0;
	for (int i = first; i < first + count; i++) {
		t->flops += s->kernels[i].flops;
		t->bytes += s->kernels[i].bytes;
	}
	return b->loss_ktab[part] = s->nktabs++;
}

/* Make the current op run the kernels of table t (set_kernels' fields). */
static void use_ktab(struct builder *b, int t)
{
	b->cur->ktab = t;
	b->cur->flops = b->s->ktabs[t].flops;
	b->cur->bytes = b->s->ktabs[t].bytes;
	b->cur->launches = b->s->ktabs[t].count;
}

/* ---- the step ------------------------------------------------------------- */

/* A transient buffer the op under construction allocates and frees (none when bytes is 0). */
static void scratch(struct builder *b, uint64_t bytes, int unit, int seg, int micro)
{
	int t;

	if (!bytes)
		return;
	t = buf_new(b, bytes, MEM_TRANSIENT, BUF_TRANSIENT, b->cur->stream, unit, seg, micro, b->s->act_elem);
	alloc_buf(b, t);
	opd(b, t, OPD_OUT);
	free_buf(b, t);
}

/* The transient tensors of a segment's phase, for the op under construction: a buffer each. */
static void scratch_tensors(struct builder *b, const struct transient *tr, int unit, int seg, int micro)
{
	for (int i = 0; i < tr->n; i++)
		scratch(b, tr->bytes[i], unit, seg, micro);
}

/*
 * Activations kept past the op under construction, a buffer per tensor of
 * tr (kind BUF_ACTS or BUF_RECOMPUTED), allocated by it in a row; returns
 * the first (-1 when none) and their count in *n. A runtime that allocates
 * each tensor apart (PyTorch) has a tensor each; the testbed's one region
 * is one.
 */
static int acts_tensors(struct builder *b, const struct transient *tr, enum buf_kind kind, int unit, int seg,
			int micro, int *n)
{
	int first = -1;

	*n = 0;
	for (int i = 0; i < tr->n; i++) {
		int a;
		if (!tr->bytes[i])
			continue;
		a = buf_new(b, tr->bytes[i], MEM_ACTIVATIONS, kind, ST_COMPUTE, unit, seg, micro, b->s->act_elem);
		assert(first < 0 || a == first + *n);
		if (first < 0)
			first = a;
		alloc_buf(b, a);
		opd(b, a, OPD_OUT);
		(*n)++;
	}
	return first;
}

/* Operands of the op under construction: n buffers in a row from first (none when first < 0). */
static void opd_run(struct builder *b, int first, int n, enum opd_role role)
{
	for (int k = 0; first >= 0 && k < n; k++)
		opd(b, first + k, role);
}

/* Operands of the op under construction: the n buffers of list. */
static void opd_list(struct builder *b, const int *list, int n, enum opd_role role)
{
	for (int k = 0; k < n; k++)
		opd(b, list[k], role);
}

static int offload_params(const struct builder *b)
{
	return b->p->offload == OFF_PARAMS;
}

/* Gather unit u's params; `after` is the op the prefetch window waits for. */
static void emit_gather(struct builder *b, int u, int micro, int after)
{
	struct schedule *s = b->s;
	struct unit *x = &s->units[u];
	int copy_out = s->per_tensor_shards, h2d = -1, ag, out, src = b->shard_param[u], stage = -1;

	if (offload_params(b)) {
		/* the master shard comes from the host first */
		stage = buf_new(b, x->shard_elems * (uint64_t)precision_master_bytes(b->p->precision), MEM_COMM,
				BUF_HOST_STAGE, ST_COPY, u, -1, micro, b->master_elem);
		begin(b, OP_H2D, ST_COPY, u, -1, micro);
		b->cur->bytes = s->bufs[stage].bytes;
		dep(b, after);
		opd(b, b->host_master[u], OPD_IN);
		opd(b, stage, OPD_OUT);
		alloc_buf(b, stage);
		h2d = commit(b);
		src = stage;
	}
	if (s->local_shards) {
		/* nothing to gather: the unit's first use copies its shard in (params_ready) */
		b->ready_op[u] = h2d;
		b->full_buf[u] = src;
		b->copy_out_pending[u] = 1;
		return;
	}
	out = buf_new(b, x->full_bytes, copy_out ? MEM_COMM : MEM_FULL_PARAMS,
		      copy_out ? BUF_GATHER_OUT : BUF_FULL_PARAM, ST_ALLGATHER, u, -1, micro, b->param_elem);
	begin(b, OP_ALLGATHER, ST_ALLGATHER, u, -1, micro);
	b->cur->group = GRP_SHARD;
	b->cur->bytes = x->full_bytes;
	dep(b, after);
	dep(b, h2d);
	opd(b, src, OPD_IN);
	opd(b, out, OPD_OUT);
	alloc_buf(b, out);
	free_buf(b, stage);
	ag = commit(b);
	b->ready_op[u] = ag;
	b->full_buf[u] = out;
	b->copy_out_pending[u] = copy_out;
}

/*
 * Make unit u's gathered params usable by the compute stream. With a flat
 * gather buffer (pytorch) this is the copy-out, issued when the unit is
 * first used, not when its gather was issued: a prefetched unit's copy-out
 * must not queue ahead of the compute that runs before it. Over a shard
 * group of one (local_shards) it is the unshard itself: the shard copied in.
 */
static int params_ready(struct builder *b, int u, int micro)
{
	struct schedule *s = b->s;
	struct unit *x = &s->units[u];
	int full, in = b->full_buf[u];

	if (!b->copy_out_pending[u])
		return b->ready_op[u];
	full = buf_new(b, x->full_bytes, MEM_FULL_PARAMS, BUF_FULL_PARAM, ST_COMPUTE, u, -1, micro, b->param_elem);
	begin(b, OP_COPY_OUT, ST_COMPUTE, u, -1, micro);
	if (!s->local_shards) {
		b->cur->bytes = 2 * x->full_bytes;
	} else {
		/*
		 * FSDP2 at a group of one (wait_for_unshard): tensor by tensor, the
		 * shard cast to the compute dtype (all_gather_inputs: a new tensor,
		 * the one before it still referenced), then copied into the
		 * unsharded storage. Without a cast, the shard itself is copied.
		 */
		int cast = s->bufs[in].elem != b->param_elem;
		uint64_t n = (uint64_t)x->params, ib = (uint64_t)elem_bytes((enum elem)s->bufs[in].elem);

		b->cur->bytes = cast ? n * (ib + 3 * (uint64_t)b->pbytes) : 2 * n * ib;
		b->cur->launches = (uint32_t)(x->ntensors * (cast ? 2 : 1));
		if (cast)
			scratch(b, (uint64_t)x->pair_elems * (uint64_t)b->pbytes, u, -1, micro);
	}
	dep(b, b->ready_op[u]);
	opd(b, in, OPD_IN);
	opd(b, full, OPD_OUT);
	alloc_buf(b, full);
	if (s->bufs[in].kind != BUF_SHARD_PARAM) /* the gathered buffer, or an offloaded shard's copy */
		free_buf(b, in);
	b->ready_op[u] = commit(b);
	b->full_buf[u] = full;
	b->copy_out_pending[u] = 0;
	return b->ready_op[u];
}

static void emit_free_params(struct builder *b, int u, int micro)
{
	begin(b, OP_FREE, ST_COMPUTE, u, -1, micro);
	b->cur->launches = 0;
	free_buf(b, b->full_buf[u]);
	commit(b);
	b->full_buf[u] = -1;
	b->ready_op[u] = -1;
}

static void forward(struct builder *b, int micro)
{
	struct schedule *s = b->s;
	const struct model_shape *m = &s->exp->model;
	int next = 0; /* next unit (forward gather order = unit order) to gather */
	int needs_gather = b->p->sharding != SHARD_DDP;

	for (int g = 0; g < s->nsegs; g++) {
		int u = s->segs[g].unit, op, a;
		struct unit *x = &s->units[u];
		enum segment_kind sk = s->segs[g].kind;
		uint64_t saved = b->saved[sk][seg_ac(s, g)];

		/* issue gathers up to `prefetch` units ahead of the one computing */
		while (needs_gather && next < s->nunits && next <= u + b->p->prefetch) {
			int behind = next - 1 - b->p->prefetch;
			if (b->full_buf[next] < 0)
				emit_gather(b, next, micro, behind >= 0 ? b->last_use[behind] : -1);
			next++;
		}
		params_ready(b, u, micro);
		if (sk == SEG_HEAD && b->held_logits >= 0) {
			/*
			 * the loop's variable takes this microbatch's logits: the
			 * last ones go once the model returns, before the loss
			 * makes its fp32 copies (drop them here, before the op
			 * that makes both, as what is alive at once says)
			 */
			begin(b, OP_FREE, ST_COMPUTE, u, -1, micro);
			b->cur->launches = 0;
			free_buf(b, b->held_logits);
			commit(b);
			b->held_logits = -1;
		}
		begin(b, OP_FORWARD, ST_COMPUTE, u, g, micro);
		set_kernels(b, g, PH_FWD);
		dep(b, b->ready_op[u]);
		opd(b, b->full_buf[u], OPD_IN);
		if (sk == SEG_EMBED) {
			/* the residual stream starts here; the embedding keeps its token ids */
			b->resid = buf_new(b, residual_bytes(m, s->batch, b->act_bytes), MEM_ACTIVATIONS,
					   BUF_RESIDUAL, ST_COMPUTE, -1, -1, micro, s->act_elem);
			alloc_buf(b, b->resid);
			opd(b, b->resid, OPD_OUT);
			a = buf_new(b, saved, MEM_ACTIVATIONS, BUF_TOKENS, ST_COMPUTE, u, g, micro, ELEM_I32);
		} else {
			opd(b, b->resid, sk == SEG_HEAD ? OPD_IN : OPD_INOUT);
			if (sk == SEG_BLOCK) /* a tensor each, in the order forward makes them */
				a = acts_tensors(b, &b->saved_t[seg_ac(s, g)], BUF_ACTS, u, g, micro, &b->nacts[g]);
			else
				a = buf_new(b, saved, sk == SEG_HEAD ? MEM_LOGITS : MEM_ACTIVATIONS, BUF_ACTS,
					    ST_COMPUTE, u, g, micro, s->act_elem);
		}
		if (sk != SEG_BLOCK) {
			alloc_buf(b, a);
			opd(b, a, OPD_OUT);
			b->nacts[g] = 1;
		}
		b->acts[g] = a;
		if (sk == SEG_HEAD && b->logits_bytes) {
			/* the logits the training loop holds: past the step's end for the last microbatch */
			b->held_logits = buf_new(b, b->logits_bytes, MEM_LOGITS, BUF_TRANSIENT, ST_COMPUTE, u, g, micro,
						 s->act_elem);
			alloc_buf(b, b->held_logits);
			opd(b, b->held_logits, OPD_OUT);
		}
		scratch_tensors(b, &b->transient[sk][PH_FWD][seg_ac(s, g)], u, g, micro);
		if (sk == SEG_HEAD) {
			free_buf(b, b->resid);
			b->resid = -1;
		}
		op = commit(b);
		b->last_use[u] = op;
		if (g == x->last_seg && x->reshard_after_fwd)
			emit_free_params(b, u, micro);
	}
}

static int unit_syncs(const struct builder *b, const struct unit *x, int micro)
{
	if (micro == b->M - 1)
		return 1;
	switch (b->p->accum) {
	case ACC_SYNC_EACH:
	case ACC_DEFER_REPLICA:
		return 1;
	case ACC_NO_SYNC:
		return 0;
	case ACC_PARTIAL:
		return !x->defer_sync;
	default:
		assert(!"bad accum");
		return 1;
	}
}

/*
 * Whether unit x keeps its gathered parameters after its backward of this
 * microbatch, for the next microbatch's forward, which then gathers
 * nothing: under a policy that never reshards after forward (reshard no:
 * zero2, FSDP1's SHARD_GRAD_OP, and fsdp or hsdp with reshard no, its
 * _HYBRID_SHARD_ZERO2) while the unit's gradient is not reduced (no-sync,
 * a deferred block of partial:K), as FSDP1's _should_free_in_backward
 * keeps them, trading memory for traffic. FSDP2 (per-tensor shards)
 * reshards after backward whatever the sync (reshard_after_backward).
 */
static int keeps_unsharded(const struct builder *b, const struct unit *x, int micro)
{
	return b->p->reshard == RESHARD_NO && !b->s->per_tensor_shards && !unit_syncs(b, x, micro);
}

/* The optimizer step of one unit inside backward, or of one unit after it (per-param). */
static int emit_unit_optim(struct builder *b, int u, enum stream_id st, int after, int micro);

/* hsdp: all-reduce unit u's gradient shard `g` across the replicas. */
static int emit_replica_allreduce(struct builder *b, int u, int g, int micro, int after)
{
	begin(b, OP_ALLREDUCE, ST_ALLREDUCE, u, -1, micro);
	b->cur->group = GRP_REPLICA;
	b->cur->bytes = b->s->units[u].shard_elems * (uint64_t)policy_grad_bytes(b->p);
	dep(b, after);
	opd(b, g, OPD_INOUT);
	return commit(b);
}

/*
 * FSDP2 keeps a unit's reduce-scatter input (allocated on the compute
 * stream) until the next unit's reduce or the end of backward
 * (ReduceScatterState in _fsdp_param_group.py): the compute stream waits
 * for that reduce-scatter, then drops the buffer.
 */
static void release_rs_input(struct builder *b, int micro)
{
	if (b->rs_held < 0)
		return;
	begin(b, OP_FREE, ST_COMPUTE, b->s->bufs[b->rs_held].unit, -1, micro);
	b->cur->launches = 0;
	dep(b, b->rs_held_op);
	free_buf(b, b->rs_held);
	commit(b);
	b->rs_held = b->rs_held_op = -1;
}

/* Bytes of an element of the gradient the optimizer reads (builder.sgrad_elem). */
static int sgrad_bytes(const struct policy *p)
{
	return p->sharding == SHARD_DDP ? policy_grad_bytes(p) : policy_accum_bytes(p);
}

/*
 * Unit u's reduced gradient shard `in` (the reduce dtype), cast into a new
 * sharded gradient of the accumulation dtype on stream st after op *after,
 * which becomes the cast; `in` is freed. Returns the new buffer.
 */
static int cast_shard_grad(struct builder *b, int u, int in, int micro, enum stream_id st, int *after)
{
	const struct unit *x = &b->s->units[u];
	int g = buf_new(b, x->shard_elems * (uint64_t)elem_bytes(b->sgrad_elem), MEM_SHARDED_GRADS, BUF_SHARD_GRAD,
			st, u, -1, micro, b->sgrad_elem);

	begin(b, OP_COPY, st, u, -1, micro);
	b->cur->bytes = b->s->bufs[in].bytes + b->s->bufs[g].bytes;
	dep(b, *after);
	opd(b, in, OPD_IN);
	opd(b, g, OPD_OUT);
	alloc_buf(b, g);
	free_buf(b, in);
	*after = commit(b);
	return g;
}

/* Reduce unit u's gradient after its backward of this microbatch. */
static void reduce_unit(struct builder *b, int u, int micro, int after)
{
	struct schedule *s = b->s;
	const struct policy *p = b->p;
	struct unit *x = &s->units[u];
	int last = micro == b->M - 1, gb = policy_grad_bytes(p);
	int op = after, stream_of_last = ST_COMPUTE;

	if (p->sharding == SHARD_DDP) {
		begin(b, OP_ALLREDUCE, ST_ALLREDUCE, u, -1, micro);
		b->cur->group = GRP_WORLD;
		b->cur->bytes = x->reduce_bytes;
		dep(b, after);
		opd(b, b->full_grad[u], OPD_INOUT);
		op = commit(b);
		stream_of_last = ST_ALLREDUCE;
	} else {
		int rs_in = -1, out, in = b->full_grad[u];
		int cast = x->full_grad_elem != b->grad_elem;
		/*
		 * The sharded gradient is kept in the accumulation dtype: where the
		 * reduce dtype differs, each microbatch's reduced shard is cast into
		 * it (the first) or added to it, after its reduction (FSDP2's
		 * foreach_reduce, on the stream that reduced it). HSDP's deferred
		 * replica reduction adds the shards in the reduce dtype until its
		 * all-reduce (FSDP2's partial_reduce_output), then casts once.
		 */
		int defer = p->accum == ACC_DEFER_REPLICA;
		int keep_cast = b->sgrad_elem != b->grad_elem, cast_each = keep_cast && !defer;

		if (s->per_tensor_shards || cast) {
			/*
			 * Copy (and cast) the gradient into the flat reduce-scatter
			 * input. FSDP2 (foreach_reduce) allocates and fills it on the
			 * compute stream, after dropping the previous one.
			 */
			enum stream_id st = s->per_tensor_shards ? ST_COMPUTE : ST_REDUCE_SCATTER;

			if (s->per_tensor_shards)
				release_rs_input(b, micro);
			rs_in = buf_new(b, x->reduce_bytes, MEM_COMM, BUF_RS_IN, st, u, -1, micro, b->grad_elem);
			begin(b, OP_COPY_IN, st, u, -1, micro);
			b->cur->bytes = x->full_grad_bytes + x->reduce_bytes;
			dep(b, after);
			opd(b, b->full_grad[u], OPD_IN);
			opd(b, rs_in, OPD_OUT);
			alloc_buf(b, rs_in);
			free_buf(b, b->full_grad[u]);
			op = commit(b);
			in = rs_in;
		}
		out = buf_new(b, x->shard_elems * (uint64_t)gb, MEM_SHARDED_GRADS,
			      b->shard_grad[u] < 0 && !cast_each ? BUF_SHARD_GRAD : BUF_RS_OUT, ST_REDUCE_SCATTER, u, -1,
			      micro, b->grad_elem);
		if (s->local_shards) {
			/* FSDP2 at a group of one: reduce_output.copy_(reduce_scatter_input) (foreach_reduce) */
			begin(b, OP_COPY, ST_REDUCE_SCATTER, u, -1, micro);
			b->cur->bytes = 2 * x->reduce_bytes;
		} else {
			begin(b, OP_REDUCE_SCATTER, ST_REDUCE_SCATTER, u, -1, micro);
			b->cur->group = GRP_SHARD;
			b->cur->bytes = x->reduce_bytes;
		}
		dep(b, op);
		opd(b, in, OPD_IN);
		opd(b, out, OPD_OUT);
		alloc_buf(b, out);
		if (!s->per_tensor_shards || rs_in < 0)
			free_buf(b, in);
		b->full_grad[u] = -1;
		op = commit(b);
		if (s->per_tensor_shards && rs_in >= 0) {
			b->rs_held = rs_in;
			b->rs_held_op = op;
		}
		stream_of_last = ST_REDUCE_SCATTER;

		/* hsdp: all-reduce this microbatch's shard across replicas, unless deferred */
		if (p->sharding == SHARD_HSDP && p->accum != ACC_DEFER_REPLICA && s->replica_n > 1) {
			op = emit_replica_allreduce(b, u, out, micro, op);
			stream_of_last = ST_ALLREDUCE;
		}
		if (b->shard_grad[u] < 0 && !cast_each) {
			b->shard_grad[u] = out;
		} else if (b->shard_grad[u] < 0) {
			b->shard_grad[u] = cast_shard_grad(b, u, out, micro, stream_of_last, &op);
		} else {
			/* read this microbatch's shard and the sum, write the sum */
			int db = elem_bytes(s->bufs[b->shard_grad[u]].elem);
			begin(b, OP_ACCUM, stream_of_last, u, -1, micro);
			b->cur->bytes = x->shard_elems * (uint64_t)(gb + 2 * db);
			dep(b, op);
			opd(b, out, OPD_IN);
			opd(b, b->shard_grad[u], OPD_INOUT);
			free_buf(b, out);
			op = commit(b);
		}
		if (p->sharding == SHARD_HSDP && defer && last && s->replica_n > 1) {
			op = emit_replica_allreduce(b, u, b->shard_grad[u], micro, op);
			stream_of_last = ST_ALLREDUCE;
		}
		if (keep_cast && defer && last)
			b->shard_grad[u] = cast_shard_grad(b, u, b->shard_grad[u], micro, stream_of_last, &op);
	}
	b->last_reduce[u] = op;
	if (!last)
		return;
	if (p->offload != OFF_NONE) {
		/* gradients go to the host as soon as they are reduced */
		int g = p->sharding == SHARD_DDP ? b->full_grad[u] : b->shard_grad[u];
		begin(b, OP_D2H, ST_COPY, u, -1, micro);
		b->cur->bytes = s->bufs[g].bytes;
		dep(b, op);
		opd(b, g, OPD_IN);
		opd(b, b->host_grad[u], OPD_OUT);
		free_buf(b, g);
		if (p->sharding == SHARD_DDP)
			b->full_grad[u] = -1;
		else
			b->shard_grad[u] = -1;
		b->d2h_op[u] = commit(b);
		if (p->optim_in_backward)
			emit_unit_optim(b, u, ST_HOST, b->d2h_op[u], micro);
		return;
	}
	if (p->optim_in_backward)
		emit_unit_optim(b, u, stream_of_last, op, micro);
}

/*
 * The temporaries of a foreach step over unit u's parameters (-1: every
 * unit's), per_elem bytes an element: a tensor for each tensor the
 * optimizer steps, all alive at once, freed at the op's end
 * (_multi_tensor_adam: torch._foreach_sqrt of the second moments makes a
 * new list), so that the allocator sees PyTorch's requests, each its own
 * block, not one buffer of their sum. The optimizer steps the model's
 * tensors (ddp: whole; per-tensor shards: each tensor's shard) or a
 * unit's flat shard.
 */
static void optim_temporaries(struct builder *b, int unit, double per_elem)
{
	const struct schedule *s = b->s;
	int first = unit < 0 ? 0 : unit, last = unit < 0 ? s->nunits - 1 : unit, n = 0, *t;

	for (int u = first; u <= last; u++)
		n += s->units[u].ntensors;
	t = xmalloc(sizeof(*t) * (size_t)(n + 1));
	n = 0;
	for (int u = first; u <= last; u++) {
		const struct unit *x = &s->units[u];
		int whole = b->p->sharding == SHARD_DDP, flat = !whole && !s->per_tensor_shards;
		for (int i = 0; i < (flat ? 1 : x->ntensors); i++) {
			double elems = flat ? (double)x->shard_elems : whole ? (double)x->tensor_elems[i] : (double)x->tensor_shard[i];
			uint64_t bytes = (uint64_t)(elems * per_elem + 0.5);
			if (!bytes)
				continue;
			t[n] = buf_new(b, bytes, MEM_TRANSIENT, BUF_TRANSIENT, b->cur->stream, u, -1, b->cur->micro,
				       b->s->act_elem);
			alloc_buf(b, t[n]);
			opd(b, t[n++], OPD_OUT);
		}
	}
	for (int i = 0; i < n; i++)
		free_buf(b, t[i]);
	free(t);
}

/* The traffic of clipping the gradient norm over `elems` parameter elements: a read for the norm, a read and write to scale */
static uint64_t clip_bytes(const struct policy *p, uint64_t elems)
{
	return 3 * elems * (uint64_t)sgrad_bytes(p);
}

/*
 * What the runtime adds to an optimizer step over `elems` parameters in
 * `tensors` tensors: the DTensor dispatch of each multi-tensor op on the
 * host, the temporaries of a foreach step (allocated by the op, freed at
 * its end), and, when it clips the gradient norm before a step over every
 * parameter (after backward), a read of every gradient for the norm and a
 * read and write to scale it, in two more multi-tensor kernels per chunk.
 */
static void optim_extras(struct builder *b, uint64_t elems, int tensors, int clips)
{
	const struct runtime_spec *r = &b->e->runtime;
	int chunks = (tensors + r->foreach_chunk - 1) / r->foreach_chunk;
	int ops = b->p->optim == OPT_FOREACH ? r->foreach_kernels : b->p->optim == OPT_FUSED ? r->fused_kernels
											: r->per_param_kernels;

	b->cur->host_ns = (uint32_t)(1e3 * r->dtensor_us * tensors * ops + 0.5);
	if (b->p->optim == OPT_FOREACH && r->optim_temp_bytes > 0)
		optim_temporaries(b, b->cur->unit, r->optim_temp_bytes);
	if (clips && r->clip_grad_norm) {
		b->cur->bytes += clip_bytes(b->p, elems);
		b->cur->launches += (uint32_t)(2 * chunks);
		b->cur->host_ns += (uint32_t)(1e3 * r->dtensor_us * tensors * 2 + 0.5);
	}
}

static uint64_t optim_bytes_per_elem(const struct builder *b)
{
	const struct policy *p = b->p;
	double f = p->optim == OPT_FUSED ? 1.0 : b->e->runtime.unfused_traffic;
	/* read master, grad, moments; write master and moments */
	int base = 2 * precision_master_bytes(p->precision) + elem_bytes(b->sgrad_elem) +
		   2 * precision_optstate_bytes(p->precision);
	return (uint64_t)(base * f + 0.5);
}

static uint32_t optim_launches(const struct builder *b, int ntensors)
{
	const struct runtime_spec *r = &b->e->runtime;
	int chunks = (ntensors + r->foreach_chunk - 1) / r->foreach_chunk;

	switch (b->p->optim) {
	case OPT_FOREACH: return (uint32_t)(chunks * r->foreach_kernels);
	case OPT_FUSED: return (uint32_t)(chunks * r->fused_kernels);
	case OPT_PER_PARAM: return (uint32_t)(ntensors * r->per_param_kernels);
	default: assert(!"bad optim"); return 1;
	}
}

static uint64_t opt_elems(const struct policy *p, const struct unit *x)
{
	return p->sharding == SHARD_DDP ? (uint64_t)x->params : x->shard_elems;
}

static uint64_t unit_opt_elems(const struct builder *b, const struct unit *x)
{
	return opt_elems(b->p, x);
}

uint64_t schedule_clip_bytes(const struct schedule *s, int op)
{
	const struct op *o = &s->ops[op];
	const struct policy *p = &s->exp->policy;
	uint64_t elems = 0;

	/* the step over every parameter clips (optim_extras); a unit's own step cannot */
	if (o->kind != OP_OPTIM || o->unit >= 0 || !s->exp->runtime.clip_grad_norm)
		return 0;
	for (int u = 0; u < s->nunits; u++)
		elems += opt_elems(p, &s->units[u]);
	return clip_bytes(p, elems);
}

double schedule_optim_elems(const struct schedule *s, const struct op *o)
{
	double n = 0;

	for (int i = 0; i < o->nopd; i++) {
		const struct buffer *b = &s->bufs[s->opds[o->opd_first + i].buf];
		if (b->kind == BUF_SHARD_PARAM || b->kind == BUF_HOST_MASTER)
			n += (double)b->bytes / elem_bytes(b->elem);
	}
	return n;
}

double schedule_largest_optim_elems(const struct schedule *s)
{
	double most = 0;

	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == OP_OPTIM || s->ops[i].kind == OP_CPU_OPTIM) {
			double n = schedule_optim_elems(s, &s->ops[i]);
			if (n > most)
				most = n;
		}
	return most;
}

/* The operands of unit u's host optimizer step: its host gradient, master and moments. */
static void host_optim_operands(struct builder *b, int u)
{
	opd(b, b->host_grad[u], OPD_INOUT); /* scaled by 1/M in place, then read */
	opd(b, b->host_master[u], OPD_INOUT);
	opd(b, b->host_state[u], OPD_INOUT);
}

/* The device gradient unit u's optimizer reads: ddp's full one, else the accumulated shard. */
static int *device_grad(struct builder *b, int u)
{
	return b->p->sharding == SHARD_DDP ? &b->full_grad[u] : &b->shard_grad[u];
}

/* The operands of unit u's device optimizer step, which frees its gradient. */
static void device_optim_operands(struct builder *b, int u)
{
	int *g = device_grad(b, u);

	opd(b, *g, OPD_INOUT); /* scaled by 1/M in place, then read */
	opd(b, b->shard_param[u], OPD_INOUT);
	if (b->lazy_state)
		opd_list(b, b->state[u], b->nstate[u], OPD_INOUT);
	else
		opd(b, b->optim_state[u], OPD_INOUT);
	free_buf(b, *g);
	*g = -1;
}

/*
 * The optimizer's state of tensors [from, from + n) of unit u, made by the
 * op under construction at the run's first step (lazy_state): each
 * moment a tensor of its own, zero-filled (torch.zeros_like), exp_avg then
 * exp_avg_sq per tensor, as torch.optim's _init_group makes them; a unit
 * whose shard is one flat buffer has one of each.
 */
static void make_state(struct builder *b, int u, int from, int n)
{
	struct schedule *s = b->s;
	const struct unit *x = &s->units[u];
	int flat = !s->per_tensor_shards || b->p->sharding == SHARD_DDP;
	uint64_t half = (uint64_t)precision_optstate_bytes(b->p->precision) / 2;

	if (!b->lazy_state)
		return;
	if (!b->state[u])
		b->state[u] = xmalloc(sizeof(int) * (size_t)(2 * x->ntensors));
	for (int i = from; i < from + n && !(flat && i > 0); i++) {
		uint64_t elems = flat ? unit_opt_elems(b, x) : (uint64_t)x->tensor_shard[i];
		assert(b->nstate[u] + 2 <= 2 * x->ntensors); /* a unit's state is made once a step */
		for (int k = 0; k < 2; k++) {
			int id = buf_new(b, elems * half, MEM_OPTIM_STATE, BUF_OPTIM_STATE, b->cur->stream, u, -1, -1,
					 b->state_elem);
			s->bufs[id].zero = 1;
			s->bufs[id].once = 1;
			alloc_buf(b, id);
			b->state[u][b->nstate[u]++] = id;
		}
	}
}

/*
 * Every unit's state, made by the op under construction in the order of
 * the model's parameters (embedding, blocks, final norm, output), which an
 * optimizer over model.parameters() follows: segment by segment, each
 * segment's tensors the next ones of its unit.
 */
static void make_all_state(struct builder *b)
{
	struct schedule *s = b->s;
	int *next = ints(s->nunits, 0);

	for (int g = 0; g < s->nsegs; g++) {
		int u = s->segs[g].unit, n;
		switch (s->segs[g].kind) {
		case SEG_EMBED: n = 1; break;
		case SEG_HEAD: n = 2; break; /* the final norm, the output */
		default: n = BT_COUNT; break;
		}
		make_state(b, u, next[u], n);
		next[u] += n;
	}
	for (int u = 0; u < s->nunits; u++)
		assert(!b->lazy_state || next[u] == s->units[u].ntensors);
	free(next);
}

/* optim offload: the updated master goes back to the device shard (compute dtype). */
static void h2d_shard_operands(struct builder *b, int u)
{
	opd(b, b->host_master[u], OPD_IN);
	opd(b, b->shard_param[u], OPD_OUT);
}

static int emit_unit_optim(struct builder *b, int u, enum stream_id st, int after, int micro)
{
	struct unit *x = &b->s->units[u];
	int op;

	if (b->p->offload != OFF_NONE) {
		begin(b, OP_CPU_OPTIM, ST_HOST, u, -1, micro);
		b->cur->bytes = unit_opt_elems(b, x);  /* parameters the host updates */
		b->cur->launches = 0;
		dep(b, after);
		host_optim_operands(b, u);
		op = commit(b);
		if (b->p->offload == OFF_PARAMS)
			return op; /* the next gather stages the master from the host */
		begin(b, OP_H2D, ST_COPY, u, -1, micro);
		b->cur->bytes = unit_opt_elems(b, x) * (uint64_t)precision_param_bytes(b->p->precision);
		dep(b, op);
		h2d_shard_operands(b, u);
		return commit(b);
	}
	begin(b, OP_OPTIM, st, u, -1, micro);
	b->cur->bytes = unit_opt_elems(b, x) * optim_bytes_per_elem(b);
	b->cur->launches = optim_launches(b, x->ntensors);
	dep(b, after);
	make_state(b, u, 0, x->ntensors);
	device_optim_operands(b, u);
	/* a step per unit (in backward, or per-parameter after it) cannot clip: the norm needs every gradient */
	optim_extras(b, unit_opt_elems(b, x), x->ntensors, 0);
	return commit(b);
}

/*
 * Backward's gathers, in the order backward first needs the units: those
 * from place `next` up to place `upto`, each after the last use of the
 * unit `prefetch` places before it and after op `also` (-1: none); returns
 * the next place not gathered.
 */
static int backward_gathers(struct builder *b, int next, int upto, int also, int micro)
{
	const int *order = b->s->bwd_order;

	for (; next < b->s->nunits && next <= upto; next++) {
		int behind = next - 1 - b->p->prefetch, after = behind >= 0 ? b->last_use[order[behind]] : -1;
		if (also > after)
			after = also; /* a later op of the compute stream, where both are */
		if (b->full_buf[order[next]] < 0)
			emit_gather(b, order[next], micro, after);
	}
	return next;
}

static void backward(struct builder *b, int micro)
{
	struct schedule *s = b->s;
	const struct policy *p = b->p;
	const struct model_shape *m = &s->exp->model;
	int batch = s->batch, next = 0, *order = s->bwd_order;
	int *pos = xcalloc(s->nunits, sizeof(int));
	int needs_gather = p->sharding != SHARD_DDP;

	for (int i = 0; i < s->nunits; i++)
		pos[order[i]] = i;
	for (int g = s->nsegs - 1; g >= 0; g--) {
		int u = s->segs[g].unit, op;
		struct unit *x = &s->units[u];
		enum segment_kind sk = s->segs[g].kind;

		if (sk == SEG_HEAD && b->loss_kernels) {
			/*
			 * the loss's own backward first (recipe_loss_backward): its
			 * fp32 gradients of the logits come and go before the head
			 * module's pre-backward hook unshards its unit (FSDP2 fires
			 * it once the gradient of the module's output is ready) and
			 * before its backward makes the weights' gradients
			 */
			begin(b, OP_LOSS_BACKWARD, ST_COMPUTE, u, g, micro);
			/* launched apart where the kernels are the runtime's; other kernels' head backward has it */
			if (b->launched[sk] == b->recipe[sk]) {
				set_kernels(b, g, PH_BWD);
				use_ktab(b, head_bwd_part(b, b->cur->ktab, 0));
			} else {
				b->cur->seg_kind = sk;
			}
			opd_run(b, b->acts[g], b->nacts[g], OPD_IN);
			scratch_tensors(b, &b->loss_tr, u, g, micro);
			commit(b);
		}
		/*
		 * With copy-outs (FSDP2), a unit's own gather, its copy-out, and
		 * only then the prefetch of the next: pre_backward is unshard,
		 * wait_for_unshard, _backward_prefetch, and in backward the
		 * gathered buffer is freed at the copy-out and the all-gather
		 * stream waits for it (FSDPParamGroup.wait_for_unshard), so one
		 * gathered buffer is alive at a time. Without (the testbed), the
		 * prefetch is issued first.
		 */
		if (needs_gather && s->per_tensor_shards) {
			next = backward_gathers(b, next, pos[u], -1, micro);
			params_ready(b, u, micro);
			next = backward_gathers(b, next, pos[u] + p->prefetch, b->ready_op[u], micro);
		} else if (needs_gather) {
			next = backward_gathers(b, next, pos[u] + p->prefetch, -1, micro);
		}
		b->recomputed[g] = -1;
		params_ready(b, u, micro);
		if (seg_ac(s, g) != AC_NONE && sk == SEG_BLOCK) {
			begin(b, OP_RECOMPUTE, ST_COMPUTE, u, g, micro);
			set_kernels(b, g, PH_RECOMPUTE);
			dep(b, b->ready_op[u]);
			opd(b, b->full_buf[u], OPD_IN);
			opd_run(b, b->acts[g], b->nacts[g], OPD_IN);
			b->recomputed[g] = acts_tensors(b, &b->transient[sk][PH_RECOMPUTE][seg_ac(s, g)], BUF_RECOMPUTED,
							u, g, micro, &b->nrecomputed[g]);
			commit(b);
		}
		begin(b, OP_BACKWARD, ST_COMPUTE, u, g, micro);
		set_kernels(b, g, PH_BWD);
		if (sk == SEG_HEAD && b->loss_kernels && b->launched[sk] == b->recipe[sk])
			use_ktab(b, head_bwd_part(b, b->cur->ktab, 1)); /* the loss's own went before */
		dep(b, b->ready_op[u]);
		/* ddp all-reduces its gradient in place: the next microbatch adds into it only after */
		if (p->sharding == SHARD_DDP)
			dep(b, b->last_reduce[u]);
		opd(b, b->full_buf[u], OPD_IN);
		opd_run(b, b->acts[g], b->nacts[g], OPD_IN);
		opd_run(b, b->recomputed[g], b->nrecomputed[g], OPD_IN);
		if (b->full_grad[u] < 0) {
			b->full_grad[u] = buf_new(b, x->full_grad_bytes, MEM_FULL_GRADS, BUF_FULL_GRAD, ST_COMPUTE,
						  u, -1, micro, x->full_grad_elem);
			s->bufs[b->full_grad[u]].zero = 1; /* segments add their gradients into it */
			alloc_buf(b, b->full_grad[u]);
		}
		opd(b, b->full_grad[u], OPD_INOUT);
		if (sk == SEG_HEAD) {
			/* the residual stream's gradient starts at the loss */
			b->dresid = buf_new(b, residual_bytes(m, batch, b->act_bytes), MEM_ACTIVATIONS,
					    BUF_RESIDUAL_GRAD, ST_COMPUTE, -1, -1, micro, s->act_elem);
			alloc_buf(b, b->dresid);
			opd(b, b->dresid, OPD_OUT);
		} else {
			opd(b, b->dresid, sk == SEG_EMBED ? OPD_IN : OPD_INOUT);
		}
		scratch_tensors(b, &b->transient[sk][PH_BWD][seg_ac(s, g)], u, g, micro);
		for (int k = 0; k < b->nacts[g]; k++)
			free_buf(b, b->acts[g] + k);
		for (int k = 0; b->recomputed[g] >= 0 && k < b->nrecomputed[g]; k++)
			free_buf(b, b->recomputed[g] + k);
		if (sk == SEG_EMBED) {
			free_buf(b, b->dresid);
			b->dresid = -1;
		}
		op = commit(b);
		b->last_use[u] = op;
		/* accumulation into a gradient kept from an earlier microbatch: autograd adds it */
		if (micro > 0 && x->accumulates_full && s->per_tensor_shards && g == x->first_seg) {
			begin(b, OP_ACCUM, ST_COMPUTE, u, -1, micro);
			b->cur->bytes = 3 * x->full_grad_bytes;
			opd(b, b->full_grad[u], OPD_INOUT);
			op = commit(b);
		}
		if (g != x->first_seg)
			continue;
		/* the unit's backward is complete for this microbatch */
		if (needs_gather && !keeps_unsharded(b, x, micro))
			emit_free_params(b, u, micro);
		{
			int sync = unit_syncs(b, x, micro);
			if (p->flat_params && (sync || !p->concat_last_only)) {
				/* FSDP1: per-parameter gradients are copied into the unit's flat gradient */
				begin(b, OP_CONCAT, ST_COMPUTE, u, -1, micro);
				b->cur->bytes = (micro > 0 && x->accumulates_full && !p->concat_last_only ? 3 : 2) *
					       x->full_grad_bytes;
				opd(b, b->full_grad[u], OPD_IN);
				scratch(b, x->full_grad_bytes, u, -1, micro);
				op = commit(b);
			}
			if (sync)
				reduce_unit(b, u, micro, op);
		}
	}
	release_rs_input(b, micro);
	free(pos);
}

static void optimizer_after_backward(struct builder *b)
{
	struct schedule *s = b->s;
	const struct policy *p = b->p;
	int last = b->M - 1;

	if (p->optim_in_backward)
		return;
	if (p->offload != OFF_NONE) {
		uint64_t elems = 0;
		int op;
		begin(b, OP_CPU_OPTIM, ST_HOST, -1, -1, last);
		for (int u = 0; u < s->nunits; u++) {
			elems += unit_opt_elems(b, &s->units[u]);
			dep(b, b->d2h_op[u]);
			host_optim_operands(b, u);
		}
		b->cur->bytes = elems;
		b->cur->launches = 0;
		op = commit(b);
		if (p->offload == OFF_OPTIM) {
			begin(b, OP_H2D, ST_COPY, -1, -1, last);
			b->cur->bytes = elems * (uint64_t)precision_param_bytes(p->precision);
			dep(b, op);
			for (int u = 0; u < s->nunits; u++)
				h2d_shard_operands(b, u);
			commit(b);
		}
		return;
	}
	if (p->optim == OPT_PER_PARAM) {
		for (int i = 0; i < s->nunits; i++) {
			int u = s->bwd_order[i];
			emit_unit_optim(b, u, ST_COMPUTE, b->last_reduce[u], last);
		}
		return;
	}
	{
		uint64_t elems = 0;
		int tensors = 0;
		begin(b, OP_OPTIM, ST_COMPUTE, -1, -1, last);
		make_all_state(b);
		for (int u = 0; u < s->nunits; u++) {
			elems += unit_opt_elems(b, &s->units[u]);
			tensors += s->units[u].ntensors;
			dep(b, b->last_reduce[u]);
			device_optim_operands(b, u);
		}
		b->cur->bytes = elems * optim_bytes_per_elem(b);
		b->cur->launches = optim_launches(b, tensors);
		optim_extras(b, elems, tensors, 1);
		commit(b);
	}
}

/* Buffers alive for the whole step: parameter shards, optimizer state, host copies. */
static void static_buffers(struct builder *b)
{
	struct schedule *s = b->s;
	const struct policy *p = b->p;

	for (int u = 0; u < s->nunits; u++) {
		uint64_t elems = unit_opt_elems(b, &s->units[u]);
		int pb;
		if (p->offload != OFF_NONE) {
			b->host_master[u] = host_buf_new(b, elems * (uint64_t)precision_master_bytes(p->precision),
							 MEM_SHARDED_PARAMS, BUF_HOST_MASTER, u, b->master_elem);
			b->host_grad[u] = host_buf_new(b, elems * (uint64_t)elem_bytes(b->sgrad_elem), MEM_SHARDED_GRADS,
						       BUF_HOST_GRAD, u, b->sgrad_elem);
			b->host_state[u] = host_buf_new(b, elems * (uint64_t)precision_optstate_bytes(p->precision),
							MEM_OPTIM_STATE, BUF_HOST_OPTIM_STATE, u, b->state_elem);
		}
		if (p->offload == OFF_PARAMS)
			continue; /* the GPU keeps nothing of the unit between steps */
		/* with optimizer offload the GPU keeps only the compute-dtype shard */
		pb = p->offload == OFF_OPTIM ? precision_param_bytes(p->precision)
					     : precision_master_bytes(p->precision);
		b->shard_param[u] = buf_new(b, elems * (uint64_t)pb, MEM_SHARDED_PARAMS, BUF_SHARD_PARAM, ST_COMPUTE,
					    u, -1, -1, elem_of(pb));
		if (p->offload == OFF_NONE && !b->lazy_state)
			b->optim_state[u] = buf_new(b, elems * (uint64_t)precision_optstate_bytes(p->precision),
						    MEM_OPTIM_STATE, BUF_OPTIM_STATE, ST_COMPUTE, u, -1, -1,
						    b->state_elem);
		if (p->sharding == SHARD_DDP) {
			/* ddp computes straight from its replicated params: the full params are the shard */
			int full = buf_new(b, 0, MEM_FULL_PARAMS, BUF_FULL_PARAM, ST_COMPUTE, u, -1, -1,
					   elem_of(pb));
			s->bufs[full].alias_of = b->shard_param[u];
			b->full_buf[u] = full;
		}
	}
}

static void builder_release(struct builder *b)
{
	free(b->shard_param);
	free(b->optim_state);
	for (int u = 0; b->state && u < b->s->nunits; u++)
		free(b->state[u]);
	free(b->state);
	free(b->nstate);
	free(b->host_master);
	free(b->host_grad);
	free(b->host_state);
	free(b->full_buf);
	free(b->ready_op);
	free(b->full_grad);
	free(b->shard_grad);
	free(b->last_reduce);
	free(b->last_use);
	free(b->d2h_op);
	free(b->copy_out_pending);
	free(b->acts);
	free(b->nacts);
	free(b->recomputed);
	free(b->nrecomputed);
	free(b->frees);
	free(b->opd_at);
}

void schedule_clocks(struct schedule *s)
{
	uint32_t count[ST_COUNT] = { 0 };
	int last[ST_COUNT];
	size_t n = (size_t)(s->nops > 0 ? s->nops : 1);

	for (int t = 0; t < ST_COUNT; t++)
		last[t] = -1;
	free(s->stream_pos);
	free(s->clock);
	free(s->stream_ops);
	s->stream_pos = xmalloc(sizeof(uint32_t) * n);
	s->stream_ops = xmalloc(sizeof(int32_t) * n);
	s->clock = xmalloc(sizeof(uint32_t) * ST_COUNT * n);
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		const uint32_t *deps = &s->deps[o->dep_first];
		uint32_t c[ST_COUNT];
		int st = o->stream;

		if (last[st] >= 0)
			memcpy(c, &s->clock[(size_t)last[st] * ST_COUNT], sizeof(c));
		else
			memset(c, 0, sizeof(c));
		for (uint32_t d = 0; d < o->ndeps; d++) {
			uint32_t j = deps[d];
			const uint32_t *dc = &s->clock[(size_t)j * ST_COUNT];
			/* a dependency that already happens before the clock so far adds nothing */
			if (c[s->ops[j].stream] > s->stream_pos[j])
				continue;
#pragma GCC unroll 8
			for (int t = 0; t < ST_COUNT; t++)
				c[t] = dc[t] > c[t] ? dc[t] : c[t];
		}
		s->stream_pos[i] = count[st]++;
		c[st] = s->stream_pos[i] + 1;
		memcpy(&s->clock[(size_t)i * ST_COUNT], c, sizeof(c));
		last[st] = i;
	}
	if (!s->nops)
		memset(s->clock, 0, sizeof(uint32_t) * ST_COUNT);
	s->stream_first[0] = 0;
	for (int t = 0; t < ST_COUNT; t++)
		s->stream_first[t + 1] = s->stream_first[t] + count[t];
	for (int i = 0; i < s->nops; i++)
		s->stream_ops[s->stream_first[s->ops[i].stream] + s->stream_pos[i]] = i;
}

/*
 * What one step's graph can count: its ops (about ten per layer and
 * microbatch, a kilobyte each with their operands), its FLOPs (uint64 per
 * kernel and per step) and its bytes (the allocator's offsets). Each
 * limit is far past any step run on real hardware (llama3-405b at a
 * million tokens a sequence does 2.4e18 FLOPs a step), and a configuration
 * beyond one is refused (the ops and FLOPs before anything is built, a
 * buffer once the graph is), instead of wrapping.
 */
#define LAYER_MICROBATCHES_MAX (1 << 18) /* layers x microbatches: ~2.5 million ops, ~2.5 GB */
#define STEP_FLOPS_MAX 0x1p63            /* per rank per step; with recomputation the sum of its kernels fits 2^64 */
#define BUFFER_BYTES_MAX (1ull << 40)    /* one buffer: a tebibyte */

/*
 * The message for buffer x, past BUFFER_BYTES_MAX: what makes it that
 * large, by the keys that change it. A unit's parameters, gradients or
 * optimizer state grow with the unit (policy.wrap) and shrink with the
 * ranks it is sharded over; activations grow with the batch and sequence.
 */
static void buffer_too_large(const struct schedule *s, const struct buffer *x, char *err, int errlen)
{
	const struct experiment *e = s->exp;
	double tib = (double)x->bytes / (double)(1ull << 40);
	const char *kind = buf_kind_name((enum buf_kind)x->kind);

	if (x->unit >= 0 && x->seg < 0)
		snprintf(err, errlen, "a buffer of %.4g TiB (%s of unit %s, %.4g G parameters over %d rank%s): more "
			 "than the 1 TiB a buffer may have; use smaller units (policy.wrap) or more ranks (cluster.nodes, "
			 "cluster.gpus_per_node)", tib, kind, s->units[x->unit].name,
			 (double)s->units[x->unit].params / 1e9, s->shard_n, s->shard_n == 1 ? "" : "s");
	else
		snprintf(err, errlen, "a buffer of %.4g TiB (%s, run.batch = %d x model.seq = %d): more than the 1 TiB "
			 "a buffer may have; lower run.batch or model.seq", tib, kind, e->run.batch, e->model.seq);
}

static int schedule_in_range(const struct experiment *e, char *err, int errlen)
{
	const struct model_shape *m = &e->model;
	double lm = (double)m->layers * e->policy.microbatches;
	double flops = model_mfu_flops_per_token(m) * (double)e->run.batch * m->seq * e->policy.microbatches;

	if (lm > LAYER_MICROBATCHES_MAX) {
		snprintf(err, errlen, "model.layers x policy.microbatches = %d x %d: more than the %d a step may have "
			 "(about ten ops each, a kilobyte an op); lower either", m->layers, e->policy.microbatches,
			 LAYER_MICROBATCHES_MAX);
		return 0;
	}
	if (flops > STEP_FLOPS_MAX) {
		snprintf(err, errlen, "a step of %.3g FLOPs per GPU (%s, model.seq = %d, run.batch = %d, "
			 "policy.microbatches = %d): more than the %.3g a step may count; lower model.seq, run.batch or "
			 "policy.microbatches", flops, m->name, m->seq, e->run.batch, e->policy.microbatches,
			 STEP_FLOPS_MAX);
		return 0;
	}
	return 1;
}

struct schedule *schedule_new(const struct experiment *e, char *err, int errlen)
{
	struct schedule *s = xcalloc(1, sizeof(*s));
	struct builder b;
	const struct policy *p = &e->policy;
	const struct gpu_spec *gpu = &e->cluster.gpu;

	s->exp = e;
	s->world = cluster_world(&e->cluster);
	s->shard_n = p->sharding == SHARD_DDP ? 1 : p->shard_group;
	if (s->shard_n < 1 || s->world % s->shard_n) {
		snprintf(err, errlen, "shard group %d does not divide the world size %d", s->shard_n, s->world);
		free(s);
		return NULL;
	}
	if (!schedule_in_range(e, err, errlen)) {
		free(s);
		return NULL;
	}
	s->replica_n = s->world / s->shard_n;
	s->group_n[GRP_NONE] = 1;
	s->group_n[GRP_SHARD] = s->shard_n;
	s->group_n[GRP_REPLICA] = s->replica_n;
	s->group_n[GRP_WORLD] = s->world;
	s->shard_spans_nodes = s->shard_n > e->cluster.gpus_per_node;
	s->per_tensor_shards = e->runtime.copy_in_out;
	s->local_shards = s->per_tensor_shards && s->shard_n == 1 && p->sharding != SHARD_DDP;
	s->attention = e->launch_attention[0]  ? name_index(attention_kernel_names, e->launch_attention)
		       : p->sdpa == SDPA_FLASH ? AK_FLASH
		       : p->sdpa == SDPA_CUDNN ? AK_CUDNN
					       : name_index(attention_kernel_names, e->runtime.attention);
	assert(s->attention >= 0);
	s->microbatches = p->microbatches;
	s->optim = p->optim;
	s->batch = e->run.batch;
	s->ac = p->ac;
	s->loss = p->loss;
	s->loss_chunk_rows = model_loss_chunk_rows(&e->model, e->run.batch);
	s->act_elem = elem_of(precision_param_bytes(p->precision));
	s->peak_flops = 1e12 * (p->precision == PREC_FP32 ? gpu->fp32_tflops : gpu->bf16_tflops);
	build_units(s);

	memset(&b, 0, sizeof(b));
	b.s = s;
	b.e = e;
	b.p = p;
	b.M = p->microbatches;
	b.pbytes = precision_param_bytes(p->precision);
	b.act_bytes = b.pbytes;
	b.master_elem = elem_of(precision_master_bytes(p->precision));
	b.param_elem = elem_of(b.pbytes);
	b.grad_elem = elem_of(policy_grad_bytes(p));
	b.accum_elem = elem_of(policy_accum_bytes(p));
	b.sgrad_elem = elem_of(sgrad_bytes(p));
	b.state_elem = elem_of(precision_optstate_bytes(p->precision) / 2);
	b.resid = b.dresid = b.rs_held = b.rs_held_op = b.held_logits = -1;
	plan_units(&b);
	b.shard_param = ints(s->nunits, -1);
	b.optim_state = ints(s->nunits, -1);
	/* torch.optim's state comes at its first step; the caching allocator serves it then */
	b.lazy_state = e->runtime.lazy_optim_state && e->runtime.caching_allocator && p->offload == OFF_NONE;
	b.state = xcalloc((size_t)s->nunits, sizeof(*b.state));
	b.nstate = ints(s->nunits, 0);
	b.host_master = ints(s->nunits, -1);
	b.host_grad = ints(s->nunits, -1);
	b.host_state = ints(s->nunits, -1);
	b.full_buf = ints(s->nunits, -1);
	b.ready_op = ints(s->nunits, -1);
	b.full_grad = ints(s->nunits, -1);
	b.shard_grad = ints(s->nunits, -1);
	b.last_reduce = ints(s->nunits, -1);
	b.last_use = ints(s->nunits, -1);
	b.d2h_op = ints(s->nunits, -1);
	b.copy_out_pending = ints(s->nunits, 0);
	b.acts = ints(s->nsegs, -1);
	b.nacts = ints(s->nsegs, 0);
	b.recomputed = ints(s->nsegs, -1);
	b.nrecomputed = ints(s->nsegs, 0);
	/* about 12 ops per unit per microbatch: size the arrays once */
	{
		int ops = b.M * (3 * s->nsegs + 12 * s->nunits) + 4 * s->nunits + 64;
		s->ops = grow(s->ops, &s->cap_ops, ops, sizeof(*s->ops));
		s->deps = grow(s->deps, &s->cap_deps, 2 * ops, sizeof(*s->deps));
		s->bufrefs = grow(s->bufrefs, &s->cap_bufrefs, 2 * ops, sizeof(*s->bufrefs));
		s->opds = grow(s->opds, &s->cap_opds, 3 * ops, sizeof(*s->opds));
		s->bufs = grow(s->bufs, &s->cap_bufs, ops, sizeof(*s->bufs));
	}
	/*
	 * one op names at most three buffers of every unit and a temporary of
	 * every tensor (the optimizer after backward, foreach: optim_temporaries)
	 */
	{
		/*
		 * the most operands an op has: a block's backward, its saved,
		 * recomputed and scratch tensors; the optimizer's step over every
		 * unit, per tensor its moments (made at the first step) and a
		 * temporary, per unit its gradient and shard
		 */
		int tensors = 0;
		for (int u = 0; u < s->nunits; u++)
			tensors += s->units[u].ntensors;
		b.cap = 4 * s->nunits + 3 * tensors + 64 + 3 * RECIPE_TRANSIENT_MAX;
	}
	for (int u = 0; u < s->nunits; u++)
		b.cap += s->units[u].ntensors;
	b.frees = xmalloc(sizeof(uint32_t) * b.cap);
	b.opd_at = xmalloc(sizeof(int) * s->cap_bufs);
	for (int i = 0; i < SEG_KIND_COUNT; i++)
		b.recipe[i] = (enum kernel_recipe)name_index(kernel_recipe_names, e->runtime.kernels);
	assert(b.recipe[SEG_BLOCK] >= 0);
	/* torch.compile on the blocks only: the loss runs eager */
	if (b.recipe[SEG_HEAD] == KR_COMPILE && p->compile == COMPILE_MODEL)
		b.recipe[SEG_HEAD] = KR_EAGER;
	for (int i = 0; i < SEG_KIND_COUNT; i++)
		b.launched[i] = e->launch_kernels[0] ? (enum kernel_recipe)name_index(kernel_recipe_names, e->launch_kernels)
						     : b.recipe[i];
	assert(b.launched[SEG_BLOCK] >= 0);
	/* the modes segments have: the policy's, and for per-layer a block's none or full */
	for (int i = 0; i < SEG_KIND_COUNT; i++)
		for (int ac = 0; ac < AC_MODES; ac++) {
			int used = ac == AC_NONE || (i == SEG_BLOCK && (p->ac == AC_PER_LAYER ? ac == AC_FULL : ac == (int)p->ac));
			for (int j = 0; j < PH_COUNT; j++)
				b.ktab[i][j][ac] = -2;
			if (!used)
				continue;
			b.saved[i][ac] = recipe_saved_bytes(b.recipe[i], &e->model, s->batch, i, ac, s->loss, b.act_bytes);
			if (i == SEG_BLOCK) {
				struct transient *st = &b.saved_t[ac];
				st->n = recipe_saved_tensors(b.recipe[i], &e->model, s->batch, i, ac, s->loss,
							     b.act_bytes, st->bytes);
			}
			for (int j = 0; j < PH_COUNT; j++) {
				struct transient *tr = &b.transient[i][j][ac];

				tr->n = recipe_transient_tensors(b.recipe[i], &e->model, s->batch, i, j, ac, s->loss,
								 b.act_bytes, tr->bytes);
				tr->sum = 0;
				for (int k = 0; k < tr->n; k++)
					tr->sum += tr->bytes[k];
			}
		}
	b.loss_kernels = recipe_loss_backward(b.recipe[SEG_HEAD], &e->model, s->batch, s->loss, b.act_bytes,
					      b.loss_tr.bytes, &b.loss_tr.n);
	b.loss_tr.sum = 0;
	for (int k = 0; k < b.loss_tr.n; k++)
		b.loss_tr.sum += b.loss_tr.bytes[k];
	b.loss_ktab[0] = b.loss_ktab[1] = -2;
	/*
	 * A training loop that holds the logits (policy.hold_logits): the
	 * head's forward allocates them apart from its transient tensors
	 * (eager) or its saved ones (compiled), and they stay until the next
	 * microbatch's head or the step's end (forward()).
	 */
	if (p->hold_logits) {
		uint64_t *saved = &b.saved[SEG_HEAD][AC_NONE];
		struct transient *tr = &b.transient[SEG_HEAD][PH_FWD][AC_NONE];
		int where = recipe_head_logits(b.recipe[SEG_HEAD], &e->model, s->batch, s->loss, b.act_bytes,
					       &b.logits_bytes);

		assert(where >= 0); /* policy_check: a PyTorch runtime and the full loss */
		if (where) {
			assert(*saved >= b.logits_bytes);
			*saved -= b.logits_bytes;
		} else {
			assert(tr->n > 0 && tr->bytes[0] == b.logits_bytes);
			memmove(tr->bytes, tr->bytes + 1, sizeof(tr->bytes[0]) * (size_t)--tr->n);
			tr->sum -= b.logits_bytes;
		}
	}

	static_buffers(&b);
	for (int m = 0; m < b.M; m++) {
		forward(&b, m);
		backward(&b, m);
	}
	optimizer_after_backward(&b);
	builder_release(&b);
	schedule_clocks(s);

	for (int i = 0; i < s->nbufs; i++)
		if (s->bufs[i].bytes > BUFFER_BYTES_MAX) {
			buffer_too_large(s, &s->bufs[i], err, errlen);
			schedule_free(s);
			return NULL;
		}
	s->tokens_per_step = (uint64_t)e->run.batch * e->model.seq * p->microbatches;
	s->model_flops = (uint64_t)(model_mfu_flops_per_token(&e->model) * (double)s->tokens_per_step);
	return s;
}

/* struct policy is ints and int-sized enums only: compared as bytes */
_Static_assert(sizeof(struct policy) == 25 * sizeof(int), "struct policy has no padding");

int schedule_same_inputs(const struct experiment *a, const struct experiment *b)
{
	const struct model_shape *x = &a->model, *y = &b->model;
	const struct gpu_spec *g = &a->cluster.gpu, *h = &b->cluster.gpu;

	return x->layers == y->layers && x->hidden == y->hidden && x->ffn == y->ffn && x->heads == y->heads &&
	       x->kv_heads == y->kv_heads && x->vocab == y->vocab && x->seq == y->seq &&
	       !memcmp(&a->policy, &b->policy, sizeof a->policy) && !strcmp(a->runtime.name, b->runtime.name) &&
	       a->cluster.nodes == b->cluster.nodes && a->cluster.gpus_per_node == b->cluster.gpus_per_node &&
	       a->run.batch == b->run.batch && g->bf16_tflops == h->bf16_tflops && g->fp32_tflops == h->fp32_tflops;
}

int schedule_calibration_variants(const struct schedule *s, struct experiment *out)
{
	struct policy v[POLICY_SHARDING_VARIANTS];
	const struct experiment *e = s->exp;
	int n = policy_sharding_variants(&e->policy, &e->cluster, &e->model, v);

	for (int i = 0; i < n; i++) {
		out[i] = *e;
		out[i].policy = v[i];
	}
	return n;
}

const char *schedule_priced_only(const struct schedule *s)
{
	static char why[160];

	if (s->exp->policy.hold_logits)
		return "policy.hold_logits = true names a PyTorch training loop's reference to the logits, which ./sim "
		       "prices; gpu_run's loss keeps no logits past its op";
	if (s->exp->policy.sdpa == SDPA_RUNTIME)
		return NULL;
	snprintf(why, sizeof why, "policy.sdpa = %s names PyTorch's attention backend, which ./sim prices; gpu_run "
		 "runs its model's own attention kernels (the cuda backend's --attention)", sdpa_names[s->exp->policy.sdpa]);
	return why;
}

void schedule_free(struct schedule *s)
{
	if (!s)
		return;
	for (int u = 0; u < s->nunits; u++) {
		free(s->units[u].tensor_elems);
		free(s->units[u].tensor_shard);
	}
	free(s->units);
	free(s->segs);
	free(s->ops);
	free(s->deps);
	free(s->bufrefs);
	free(s->opds);
	free(s->bufs);
	free(s->kernels);
	free(s->ktabs);
	free(s->bwd_order);
	free(s->stream_pos);
	free(s->clock);
	free(s->stream_ops);
	free(s);
}

/* ---- invariants ---------------------------------------------------------- */

struct access {
	int op;
	int write;
};

static int access_cmp(const void *a, const void *b)
{
	const struct access *x = a, *y = b;
	return x->op - y->op;
}

/* The buffer whose memory b is. */
static int storage_of(const struct schedule *s, int b)
{
	while (s->bufs[b].alias_of >= 0)
		b = s->bufs[b].alias_of;
	return b;
}

int schedule_check(const struct schedule *s, char *err, int errlen)
{
	int *first = xcalloc((size_t)s->nbufs + 1, sizeof(int)), *cnt = xcalloc((size_t)s->nbufs, sizeof(int));
	struct access *acc = xmalloc(sizeof(*acc) * (size_t)(s->nopds + 1));
	char la[64], lb[64];
	int rc = -1;

	/* operands of every op, bucketed by the buffer whose memory they touch */
	for (int i = 0; i < s->nopds; i++)
		first[storage_of(s, (int)s->opds[i].buf) + 1]++;
	for (int b = 0; b < s->nbufs; b++)
		first[b + 1] += first[b];
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		for (int k = 0; k < o->nopd; k++) {
			const struct operand *x = &s->opds[o->opd_first + k];
			const struct buffer *buf = &s->bufs[x->buf];
			int st = storage_of(s, (int)x->buf);
			if (buf->alloc_op >= 0 && !schedule_happens_before(s, buf->alloc_op, i)) {
				snprintf(err, errlen, "op %d (%s) uses a %s buffer before op %d allocates it", i,
					 op_label(s, i, la, sizeof(la)), buf_kind_name(buf->kind), buf->alloc_op);
				goto out;
			}
			if (buf->free_op >= 0 && !schedule_happens_before(s, i, buf->free_op)) {
				snprintf(err, errlen, "op %d (%s) may use a %s buffer after op %d (%s) frees it", i,
					 op_label(s, i, la, sizeof(la)), buf_kind_name(buf->kind), buf->free_op,
					 op_label(s, buf->free_op, lb, sizeof(lb)));
				goto out;
			}
			acc[first[st] + cnt[st]++] = (struct access){ i, (x->role & OPD_OUT) != 0 };
		}
	}
	/* two accesses of one buffer, one a write, must be ordered */
	for (int b = 0; b < s->nbufs; b++) {
		struct access *a = &acc[first[b]];
		int n = cnt[b];
		qsort(a, (size_t)n, sizeof(*a), access_cmp);
		for (int i = 0; i < n; i++)
			for (int j = i + 1; j < n; j++)
				if ((a[i].write || a[j].write) && a[i].op != a[j].op &&
				    !schedule_happens_before(s, a[i].op, a[j].op)) {
					snprintf(err, errlen, "ops %d (%s) and %d (%s) race on a %s buffer", a[i].op,
						 op_label(s, a[i].op, la, sizeof(la)), a[j].op,
						 op_label(s, a[j].op, lb, sizeof(lb)), buf_kind_name(s->bufs[b].kind));
					goto out;
				}
	}
	rc = 0;
out:
	free(first);
	free(cnt);
	free(acc);
	return rc;
}

/* ---- queries and printing ------------------------------------------------ */

uint64_t collective_wire_bytes(enum op_kind k, uint64_t S, int n)
{
	if (n <= 1)
		return 0;
	switch (k) {
	case OP_ALLGATHER:
	case OP_REDUCE_SCATTER:
		return S / n * (n - 1);
	case OP_ALLREDUCE:
		return 2 * (S / n * (n - 1));
	default:
		return 0;
	}
}

uint64_t schedule_bytes_of(const struct schedule *s, enum op_kind k)
{
	uint64_t t = 0;
	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == k)
			t += s->ops[i].bytes;
	return t;
}

int schedule_count_of(const struct schedule *s, enum op_kind k)
{
	int n = 0;
	for (int i = 0; i < s->nops; i++)
		n += s->ops[i].kind == k;
	return n;
}

void schedule_static_bytes(const struct schedule *s, uint64_t out[MEM_CAT_COUNT])
{
	memset(out, 0, sizeof(uint64_t) * MEM_CAT_COUNT);
	for (int i = 0; i < s->nbufs; i++)
		if ((s->bufs[i].alloc_op < 0 || s->bufs[i].once) && !s->bufs[i].host)
			out[s->bufs[i].cat] += s->bufs[i].bytes;
}

int op_is_comm(const struct schedule *s, const struct op *o)
{
	if (op_is_collective(o->kind))
		return collective_wire_bytes(o->kind, o->bytes, schedule_group_size(s, o->group)) > 0;
	return (o->kind == OP_H2D || o->kind == OP_D2H) && o->bytes > 0;
}

int op_operand(const struct schedule *s, int op, enum buf_kind k, int role)
{
	const struct op *o = &s->ops[op];

	for (int i = 0; i < o->nopd; i++) {
		const struct operand *x = &s->opds[o->opd_first + i];
		if (s->bufs[x->buf].kind == k && (x->role & role))
			return (int)x->buf;
	}
	return -1;
}

uint64_t op_made_bytes(const struct schedule *s, int op, enum buf_kind kind, int *n)
{
	const struct op *o = &s->ops[op];
	uint64_t bytes = 0;
	int k = 0;

	for (uint32_t i = 0; i < o->nopd; i++) {
		const struct buffer *b = &s->bufs[s->opds[o->opd_first + i].buf];
		/* activations: the op's own (backward lists the ones forward made too) */
		if (b->kind == kind && (kind == BUF_TRANSIENT || b->alloc_op == op)) {
			bytes += b->bytes;
			k++;
		}
	}
	if (n)
		*n = k;
	return bytes;
}

uint64_t op_transient_bytes(const struct schedule *s, int op, int *n)
{
	return op_made_bytes(s, op, BUF_TRANSIENT, n);
}

uint64_t buf_kernel_bytes(const struct schedule *s, int buf)
{
	const struct buffer *b = &s->bufs[buf];

	if (b->alloc_op >= 0 && (b->kind == BUF_TRANSIENT || b->kind == BUF_ACTS || b->kind == BUF_RECOMPUTED))
		return op_made_bytes(s, b->alloc_op, b->kind, NULL);
	return b->bytes;
}

int elem_bytes(enum elem e)
{
	static const int b[ELEM_COUNT] = { 4, 2, 4 };
	assert(e >= 0 && e < ELEM_COUNT);
	return b[e];
}

const char *elem_name(enum elem e)
{
	static const char *const n[ELEM_COUNT] = { "fp32", "bf16", "int32" };
	assert(e >= 0 && e < ELEM_COUNT);
	return n[e];
}

static const char *const op_kind_names[] = {
	"allgather", "copy_out", "forward", "recompute", "backward", "accum", "concat", "copy_in",
	"reduce_scatter", "allreduce", "optim", "d2h", "h2d", "cpu_optim", "free", "copy", "loss_backward",
};
static const char *const op_kind_short[] = {
	"AG", "COPYOUT", "FWD", "RECOMP", "BWD", "ACCUM", "CONCAT", "COPYIN",
	"RS", "AR", "OPTIM", "D2H", "H2D", "CPUOPT", "FREE", "COPY", "LOSSBWD",
};

_Static_assert(sizeof(op_kind_names) / sizeof(op_kind_names[0]) == OP_KIND_COUNT, "op_kind names");
_Static_assert(sizeof(op_kind_short) / sizeof(op_kind_short[0]) == OP_KIND_COUNT, "op_kind short names");

const char *op_kind_name(enum op_kind k)
{
	assert(k >= 0 && k < OP_KIND_COUNT);
	return op_kind_names[k];
}

const char *stream_name(enum stream_id s)
{
	static const char *const n[] = { "compute", "allgather", "reduce_scatter", "allreduce", "copy", "host" };
	assert(s >= 0 && s < ST_COUNT);
	return n[s];
}

const char *mem_cat_name(enum mem_cat c)
{
	static const char *const n[] = {
		"sharded_params", "full_params", "full_grads", "sharded_grads", "optim_state",
		"activations", "transient", "logits", "comm_buffers",
	};
	assert(c >= 0 && c < MEM_CAT_COUNT);
	return n[c];
}

const char *buf_kind_name(enum buf_kind k)
{
	static const char *const n[] = {
		"shard_param", "optim_state", "full_param", "gather_out", "full_grad", "rs_in",
		"rs_out", "shard_grad", "acts", "recomputed", "transient", "host_stage",
		"residual", "residual_grad", "tokens", "host_master", "host_grad", "host_optim_state",
	};
	_Static_assert(sizeof(n) / sizeof(n[0]) == BUF_KIND_COUNT, "buf_kind names");
	assert(k >= 0 && k < BUF_KIND_COUNT);
	return n[k];
}

const char *comm_group_name(enum comm_group g)
{
	static const char *const n[] = { "none", "shard", "replica", "world" };
	assert(g >= 0 && g < GRP_COUNT);
	return n[g];
}

const char *op_label(const struct schedule *s, int i, char *buf, int len)
{
	const struct op *o = &s->ops[i];
	int n;

	if (o->seg >= 0 && s->segs[o->seg].kind == SEG_BLOCK)
		n = snprintf(buf, len, "%s block%d", op_kind_short[o->kind], s->segs[o->seg].block);
	else if (o->seg >= 0)
		n = snprintf(buf, len, "%s %s", op_kind_short[o->kind], segment_name(s->segs[o->seg].kind));
	else if (o->unit >= 0)
		n = snprintf(buf, len, "%s %s", op_kind_short[o->kind], s->units[o->unit].name);
	else
		n = snprintf(buf, len, "%s all", op_kind_short[o->kind]);
	if (o->micro >= 0 && n < len)
		snprintf(buf + n, len - n, " m%d", o->micro);
	return buf;
}

/* An op's kernels, indented under it: name, kind, shape (GEMM: m x n, reduction k; attention: batch*heads x
 * seq, head dim; element-wise: how it moves its bytes where not a stream), FLOPs and HBM bytes. */
static void print_kernels(const struct schedule *s, const struct op *o, FILE *f)
{
	if (o->ktab < 0)
		return;
	for (uint32_t i = 0; i < s->ktabs[o->ktab].count; i++) {
		const struct kernel *k = &s->kernels[s->ktabs[o->ktab].first + i];
		char shape[64] = "";
		if (k->kind == K_GEMM)
			snprintf(shape, sizeof shape, "%lldx%lld k=%lld", (long long)k->m, (long long)k->n, (long long)k->k);
		else if (k->kind == K_ATTN)
			snprintf(shape, sizeof shape, "%lldx%lld d=%lld%s", (long long)k->m, (long long)k->n,
				 (long long)k->k, k->backward ? " bwd" : "");
		else if (k->access != MA_STREAM)
			snprintf(shape, sizeof shape, "%s", mem_access_name(k->access));
		fprintf(f, "%7s   %-22s %-14s %14llu %16llu  %s\n", "", k->name, kernel_kind_name(k->kind),
			(unsigned long long)k->bytes, (unsigned long long)k->flops, shape);
	}
}

void schedule_print(const struct schedule *s, FILE *f, int kernels)
{
	char lab[64];

	fprintf(f, "# %d ops, %d units, shard group %d, replicas %d\n", s->nops, s->nunits, s->shard_n,
		s->replica_n);
	fprintf(f, "# %-5s %-22s %-14s %14s %16s  deps\n", "op", "label", "stream", "bytes", "flops");
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		fprintf(f, "%7d %-22s %-14s %14llu %16llu ", i, op_label(s, i, lab, sizeof(lab)),
			stream_name(o->stream), (unsigned long long)o->bytes, (unsigned long long)o->flops);
		for (uint32_t d = 0; d < o->ndeps; d++)
			fprintf(f, "%s%u", d ? "," : " ", s->deps[o->dep_first + d]);
		for (int a = 0; a < o->nalloc; a++) {
			const struct buffer *x = &s->bufs[s->bufrefs[o->buf_first + a]];
			fprintf(f, " +%s:%llu", buf_kind_name(x->kind), (unsigned long long)x->bytes);
		}
		for (int a = 0; a < o->nfree; a++) {
			const struct buffer *x = &s->bufs[s->bufrefs[o->buf_first + o->nalloc + a]];
			fprintf(f, " -%s", buf_kind_name(x->kind));
		}
		fputc('\n', f);
		if (kernels)
			print_kernels(s, o, f);
	}
}
