/*
 * memory.c - a step's device memory in issue order (see memory.h).
 */
#include "memory.h"

#include <assert.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "xalloc.h"

/*
 * A buffer freed within this many ops (issue order) of its allocation is
 * brief (alloc.h): op scratch, recomputed activations, a gathered unit.
 * Chosen among 1..24 for the least fragmentation over a set of llama3
 * policies (reserved within 0-20% of allocated, 5% typical).
 */
#define BRIEF_OPS 6

/*
 * A block freed by an op the schedule does not order before the requester
 * is reused (with a wait) only when freed this many ops earlier: a block
 * freed by the reduce-scatter of the last microbatch serves this one; the
 * reduce-scatter of the unit just before is never waited for.
 */
#define WAIT_AGE_OPS 8

/* PyTorch's caching allocator with expandable segments (core/alloc.h) */
static int expandable_in(const struct experiment *e)
{
	return e->runtime.caching_allocator && e->policy.expandable_segments;
}

static int expandable(const struct schedule *s)
{
	return expandable_in(s->exp);
}

const char *memory_unbacked(const struct schedule *s)
{
	return expandable(s) ? "policy.expandable_segments = true: a runtime's allocator reserves whole segments "
			       "(cudaMalloc), it maps no pages; ./sim predicts the memory PyTorch's allocator reserves "
			       "with it"
			     : NULL;
}

void memory_alloc_cfg(const struct experiment *e, struct alloc_cfg *cfg)
{
	const struct runtime_spec *rt = &e->runtime;

	*cfg = (struct alloc_cfg){
		.caching = rt->caching_allocator,
		.round = rt->alloc_round_bytes > 0 ? (uint64_t)rt->alloc_round_bytes : 512,
		.segment = rt->segment_bytes > 0 ? (uint64_t)rt->segment_bytes : 2ull << 20,
		.wait_age = WAIT_AGE_OPS,
		.capacity = rt->caching_allocator ? gpu_spec_bytes(&e->cluster.gpu) : 0,
		.expandable = expandable_in(e),
	};
}

/* A buffer the allocator handles: device memory of its own. */
static int on_device(const struct buffer *b)
{
	return !b->host && b->alias_of < 0;
}

/*
 * Op i is op i - len (the window before) again, one microbatch later: the
 * same kind and stream, its position moved by a window's ops, each entry
 * of its clock too or not at all (follows[its stream][t] says which, 1 or
 * 2, the same for every op of its stream, whose clocks only grow: a
 * stream whose entries moved for some ops and not for others could see a
 * block ready in one window and not in the next), and the same requests,
 * of buffers *dbuf numbers later (the first pair sets it) allocated and
 * freed a window later, alike in all the allocator and memory_grant read.
 */
static int op_repeats(const struct schedule *s, int i, int len, const uint32_t *dpos, int *dbuf,
		      uint8_t (*follows)[ST_COUNT])
{
	const struct op *o = &s->ops[i], *p = &s->ops[i - len];

	if (o->kind != p->kind || o->stream != p->stream || o->micro != p->micro + 1 || o->nalloc != p->nalloc ||
	    o->nfree != p->nfree || s->stream_pos[i] != s->stream_pos[i - len] + dpos[o->stream])
		return 0;
	for (int t = 0; t < ST_COUNT; t++) {
		uint32_t now = s->clock[(size_t)i * ST_COUNT + t], was = s->clock[(size_t)(i - len) * ST_COUNT + t];
		uint8_t *f = &follows[o->stream][t];
		if (!dpos[t] && now == was)
			continue;
		if (now != was + dpos[t] && now != was)
			return 0;
		if (*f && *f != 1 + (now == was)) /* a stream's ops all follow t's positions, or none does */
			return 0;
		*f = (uint8_t)(1 + (now == was));
	}
	for (int j = 0; j < o->nalloc + o->nfree; j++) {
		int b = (int)s->bufrefs[o->buf_first + j], c = (int)s->bufrefs[p->buf_first + j];
		const struct buffer *x = &s->bufs[b], *y = &s->bufs[c];
		if (*dbuf == INT_MIN)
			*dbuf = b - c;
		if (b - c != *dbuf || x->bytes != y->bytes || x->cat != y->cat || x->host != y->host ||
		    x->once != y->once || x->stream != y->stream || (x->alias_of < 0) != (y->alias_of < 0) ||
		    x->alloc_op != y->alloc_op + len || (x->free_op < 0) != (y->free_op < 0) ||
		    (x->free_op >= 0 && x->free_op != y->free_op + len))
			return 0;
	}
	return 1;
}

/* The longest run of microbatches, each a stretch of ops in issue order, whose ops repeat the one before's. */
static void find_series(const struct schedule *s, struct mem_series *out)
{
	int first = -1, len = 0, n = 0, dbuf = INT_MIN; /* the run being followed */
	uint32_t dpos[ST_COUNT];
	uint8_t follows[ST_COUNT][ST_COUNT];

	memset(out, 0, sizeof(*out));
	for (int i = 0, end; i < s->nops; i = end) {
		int micro = s->ops[i].micro, w = 1;
		for (end = i + 1; end < s->nops && s->ops[end].micro == micro; end++)
			;
		if (micro < 0) {
			n = 0;
			continue;
		}
		if (n && end - i == len && i == first + n * len) {
			for (int j = i; j < end && w; j++)
				w = op_repeats(s, j, len, dpos, &dbuf, follows);
		} else {
			w = 0;
		}
		if (!w) { /* a run of one window, this one */
			first = i, len = end - i, n = 1, dbuf = INT_MIN;
			memset(dpos, 0, sizeof(dpos));
			memset(follows, 0, sizeof(follows));
			for (int j = i; j < end; j++)
				dpos[s->ops[j].stream]++;
			continue;
		}
		if (++n > out->n) {
			*out = (struct mem_series){ first, len, n, dbuf == INT_MIN ? 0 : dbuf, { 0 }, { 0 }, NULL };
			memcpy(out->dpos, dpos, sizeof(dpos));
		}
	}
	if (out->n && !out->first) {
		/*
		 * from the second window: a pool whose last request is at or
		 * after a repeated window's start moves with the windows
		 * (alloc_move.since), and one not asked yet this step is at 0
		 */
		out->first = out->len;
		out->n--;
	}
	if (out->n)
		for (int j = 0; j < out->first; j++)
			out->pos[s->ops[j].stream]++;
}

/* The series' next[]: the ops walked backwards once, each pool's request the latest seen. */
static void next_requests(struct memory *m)
{
	const struct schedule *s = m->s;
	struct mem_series *x = &m->series;
	uint32_t next[2 * ST_COUNT][ST_COUNT];

	x->next = xmalloc(sizeof(*x->next) * (size_t)x->n);
	memset(next, 0xff, sizeof(next));
	for (int i = s->nops - 1, j = x->n - 1; i >= x->first; i--) {
		const struct op *o = &s->ops[i];
		for (int k = 0; k < o->nalloc; k++) {
			const struct buffer *b = &s->bufs[s->bufrefs[o->buf_first + k]];
			if (on_device(b))
				memcpy(next[alloc_pool(m->a, o->stream, b->bytes)], &s->clock[(size_t)i * ST_COUNT],
				       sizeof(next[0]));
		}
		if (j >= 0 && i == x->first + j * x->len)
			memcpy(x->next[j--], next, sizeof(next));
	}
}

struct memory *memory_new(const struct schedule *s, int record, alloc_reserve_fn reserve, void *ctx)
{
	struct alloc_cfg cfg;
	struct memory *m = xcalloc(1, sizeof(*m));

	memory_alloc_cfg(s->exp, &cfg);
	m->s = s;
	m->record = record;
	m->a = alloc_new(&cfg, s->nbufs, reserve, ctx);
	m->counts = alloc_counts(m->a);
	/* an op's entries are written when it is granted (memory_grant), before anyone reads them */
	m->wait = xmalloc(sizeof(int32_t) * (size_t)(s->nops > 0 ? s->nops : 1) * ST_COUNT);
	m->sync = xmalloc((size_t)(s->nops > 0 ? s->nops : 1));
	if (!record && alloc_movable(m->a)) {
		find_series(s, &m->series);
		m->skip = m->series.n > 1;
	}
	if (m->skip)
		next_requests(m);
	return m;
}

void memory_free(struct memory *m)
{
	if (!m)
		return;
	alloc_free(m->a);
	free(m->series.next);
	free(m->samples);
	free(m->wait);
	free(m->sync);
	free(m);
}


/* The timeline's sample at t_ns (one per time: a later one at the same time replaces it). */
static __attribute__((noinline)) void sample_record(struct memory *m, uint64_t t_ns, uint64_t reserved)
{
	struct mem_sample *x;

	if (m->nsamples && m->samples[m->nsamples - 1].t_ns == t_ns) {
		x = &m->samples[m->nsamples - 1];
	} else {
		if (m->nsamples == m->cap) {
			m->cap = m->cap ? 2 * m->cap : 1024;
			m->samples = xrealloc(m->samples, sizeof(*m->samples) * (size_t)m->cap);
		}
		x = &m->samples[m->nsamples++];
		x->t_ns = t_ns;
	}
	memcpy(x->alloc, m->cur, sizeof(m->cur));
	x->reserved = reserved;
}

/* The peaks, and with `record` the timeline, after a change at t_ns. */
static inline void sample(struct memory *m, uint64_t t_ns)
{
	uint64_t reserved = m->counts->reserved;

	if (m->total > m->peaks.alloc) {
		m->peaks.alloc = m->total;
		memcpy(m->peaks.by_cat, m->cur, sizeof(m->cur));
	}
	if (reserved > m->peaks.reserved)
		m->peaks.reserved = reserved;
	if (m->record)
		sample_record(m, t_ns, reserved);
}

static int brief(const struct buffer *b)
{
	return b->alloc_op >= 0 && b->free_op >= 0 && b->free_op - b->alloc_op < BRIEF_OPS;
}

/*
 * The arena's region for a buffer (`short_lived`: brief(b)): 2 brief; 1
 * when it outlives the microbatch that allocates it (or the step); else 0.
 */
static inline int arena_region(const struct schedule *s, const struct buffer *b, int short_lived)
{
	if (short_lived)
		return 2;
	if (b->alloc_op < 0 || b->free_op < 0)
		return 1;
	return s->ops[b->alloc_op].micro != s->ops[b->free_op].micro;
}

static inline __attribute__((always_inline)) int grant(struct memory *m, int buf, int stream, const uint32_t *clock,
						       uint32_t *wait)
{
	const struct schedule *s = m->s;
	const struct buffer *b = &s->bufs[buf];
	int short_lived = brief(b);
	int pool = s->exp->runtime.caching_allocator ? stream : arena_region(s, b, short_lived);
	uint64_t got = m->counts->allocated; /* less the bytes granted before: the block's size */

	struct alloc_req rq = { pool, short_lived, b->alloc_op >= 0 ? (uint32_t)b->alloc_op : 0, clock };

	if (alloc_get(m->a, buf, b->bytes, &rq, wait) != 0)
		return -1;
	got = m->counts->allocated - got;
	m->cur[b->cat] += got;
	m->total += got;
	return 0;
}

static inline __attribute__((always_inline)) void release(struct memory *m, int buf, int stream, uint32_t pos,
							    uint32_t op)
{
	const struct buffer *b = &m->s->bufs[buf];
	uint64_t got = alloc_put(m->a, buf, stream, pos, op);

	assert(m->cur[b->cat] >= got);
	m->cur[b->cat] -= got;
	m->total -= got;
}

int memory_persistent(struct memory *m)
{
	const struct schedule *s = m->s;

	uint32_t wait[ST_COUNT] = { 0 };

	for (int i = 0; i < s->nbufs; i++)
		if (s->bufs[i].alloc_op < 0 && on_device(&s->bufs[i]) &&
		    grant(m, i, s->bufs[i].stream, NULL, wait) != 0)
			return -1;
	sample(m, 0);
	return 0;
}

void memory_step_begin(struct memory *m)
{
	assert(!m->replayed && "a step after one whose end memory_predict took from the step before");
	alloc_settle(m->a);
	m->peaks.step_retries = m->step_ooms = 0;
	m->steps++;
	m->nsamples = 0;
	sample(m, 0);
}

/* memory_grant, memory_release and memory_issue, inlined into memory_predict's loop too */
static inline __attribute__((always_inline)) int grant_op(struct memory *m, int op, uint64_t t_ns)
{
	const struct schedule *s = m->s;
	const struct op *o = &s->ops[op];
	const uint32_t *clock = &s->clock[(size_t)op * ST_COUNT];
	int32_t *waits = &m->wait[(size_t)op * ST_COUNT];
	uint32_t wait[ST_COUNT] = { 0 }, retries, ooms, now;

	for (int t = 0; t < ST_COUNT; t++)
		waits[t] = -1;
	m->sync[op] = 0;
	if (!o->nalloc) /* nothing to grant: no flush, no wait */
		return 0;
	retries = m->counts->retries;
	ooms = m->counts->ooms;
	for (int i = 0; i < o->nalloc; i++) {
		int b = (int)s->bufrefs[o->buf_first + i];
		if (!on_device(&s->bufs[b]))
			continue;
		if (!memory_makes(m, b))
			continue;
		if (s->bufs[b].once) { /* made in the first step, kept */
			uint64_t before = m->total;
			if (grant(m, b, o->stream, clock, wait) != 0)
				return -1;
			m->once_total += m->total - before;
		} else if (grant(m, b, o->stream, clock, wait) != 0) {
			return -1;
		}
	}
	/* flushes of the cache: the device is synchronized before the op issues */
	now = m->counts->retries;
	if (now != retries) {
		m->sync[op] = 1;
		m->peaks.step_retries += now - retries;
		m->peaks.retries += now - retries;
		m->step_ooms += m->counts->ooms - ooms;
		m->peaks.ooms += m->counts->ooms - ooms;
	}
	/* blocks from ops the schedule does not order before this one: wait for the last freeing op per stream */
#pragma GCC unroll 8
	for (int t = 0; t < ST_COUNT; t++)
		if (wait[t] > clock[t])
			waits[t] = s->stream_ops[s->stream_first[t] + wait[t] - 1];
	sample(m, t_ns);
	return 0;
}

static inline __attribute__((always_inline)) void release_op(struct memory *m, int op, uint64_t t_ns)
{
	const struct schedule *s = m->s;
	const struct op *o = &s->ops[op];

	for (int i = 0; i < o->nfree; i++) {
		int b = (int)s->bufrefs[o->buf_first + o->nalloc + i];
		if (on_device(&s->bufs[b]))
			release(m, b, o->stream, s->stream_pos[op], (uint32_t)op);
	}
	if (o->nfree)
		sample(m, t_ns);
}

static inline __attribute__((always_inline)) int issue_op(struct memory *m, int op, uint64_t t_ns)
{
	if (grant_op(m, op, t_ns) != 0)
		return -1;
	release_op(m, op, t_ns);
	return 0;
}

int memory_grant(struct memory *m, int op, uint64_t t_ns)
{
	return grant_op(m, op, t_ns);
}

void memory_release(struct memory *m, int op, uint64_t t_ns)
{
	release_op(m, op, t_ns);
}

int memory_issue(struct memory *m, int op, uint64_t t_ns)
{
	return issue_op(m, op, t_ns);
}

void memory_step_end(struct memory *m, uint64_t t_ns)
{
	const struct schedule *s = m->s;
	int any = 0;

	if (m->replayed) {
		/*
		 * the allocator stopped inside the step (memory_predict): the
		 * step ends as every step does, with the persistent buffers
		 * left and nothing released, the bytes it began with
		 */
		memcpy(m->cur, m->begin_cur, sizeof(m->cur));
		m->total = m->begin_total;
		for (int i = 0; i < s->nbufs && !any; i++)
			any = s->bufs[i].alloc_op >= 0 && s->bufs[i].free_op < 0 && !s->bufs[i].once && on_device(&s->bufs[i]);
		if (any && m->record)
			sample_record(m, t_ns, m->begin_reserved);
		return;
	}
	for (int i = 0; i < s->nbufs; i++) {
		const struct buffer *b = &s->bufs[i];
		if (b->alloc_op >= 0 && b->free_op < 0 && !b->once && on_device(b)) {
			release(m, i, b->stream, 0, 0);
			any = 1;
		}
	}
	if (any)
		sample(m, t_ns);
}

void *memory_ptr(const struct memory *m, int buf)
{
	while (m->s->bufs[buf].alias_of >= 0)
		buf = m->s->bufs[buf].alias_of;
	return alloc_ptr(m->a, buf);
}

/*
 * The allocator's state between steps: its capacity, the bytes allocated,
 * and the segments reserved, in order, pool and size of each (released
 * ones left out). Once a step has ended and the allocator settled, the
 * blocks are the persistent buffers, where they always are (in the first
 * segments, never released), and free ones between them: two steps that
 * begin with the same state make the same decisions. The first step also
 * makes what every later one keeps (buffer.once: the optimizer's state),
 * in free blocks of the segments it has or in new ones: the bytes
 * allocated tell its end from its beginning when the segments do not.
 * With expandable segments, where the unmapped pages lie matters too: the
 * layout is alloc_state()'s.
 */
struct layout {
	uint64_t *v;
	int n;
};

static void layout_of(struct memory *m, struct layout *l)
{
	int nsegs = alloc_segments(m->a);

	if (expandable(m->s)) {
		/*
		 * expandable segments: a range's mapped bytes do not tell
		 * where its unmapped pages lie (a flush leaves holes between
		 * the persistent buffers): the whole state, blocks and all
		 */
		struct alloc_state st = { NULL, 0, 0 };
		alloc_state(m->a, &st);
		l->v = st.v;
		l->n = (int)st.len;
		return;
	}

	l->v = xmalloc(sizeof(*l->v) * (size_t)(2 * nsegs + 2));
	l->n = 0;
	l->v[l->n++] = alloc_capacity(m->a);
	l->v[l->n++] = alloc_allocated(m->a);
	for (int i = 0; i < nsegs; i++) {
		int pool = alloc_segment_pool(m->a, i);
		if (pool >= 0) {
			l->v[l->n++] = (uint64_t)pool;
			l->v[l->n++] = alloc_segment_bytes(m->a, i);
		}
	}
}

static int layout_same(const struct layout *x, const struct layout *y)
{
	return x->n == y->n && !memcmp(x->v, y->v, sizeof(*x->v) * (size_t)x->n);
}

/*
 * A step's checkpoints: before each eighth of its ops in issue order, 7 of
 * them. At each the state (the allocator's, alloc_state(), the bytes by
 * category and the time of the timeline's last sample) is kept; a step
 * whose state at a checkpoint equals the step before's there goes on as
 * that one did: the same decisions, waits, flushes and timeline. (The
 * steps of the 70b case meet at the first or second; more checkpoints
 * would cost more states than they save.)
 */
#define CHECKPOINTS 8

struct marks {
	struct alloc_state st;          /* the states, one after another */
	size_t at[CHECKPOINTS + 1];     /* checkpoint c's in st.v[at[c], at[c + 1]) */
	uint32_t retries[CHECKPOINTS];  /* the step's flushes before checkpoint c */
	uint32_t ooms[CHECKPOINTS];     /* its segments past the capacity before c */
	int nsamples[CHECKPOINTS];      /* its timeline's samples before c */
	uint8_t skipped[CHECKPOINTS];   /* checkpoint c fell among skipped windows (memory.skip): no state */
	int n;                          /* checkpoints taken */
	uint32_t end_retries, end_ooms; /* over the whole step */
};

/* Checkpoint c's state into x (the checkpoints of a step in order). */
static void mark(struct memory *m, struct marks *x, int c)
{
	uint64_t *w;

	assert(c == x->n);
	if (!c)
		x->st.len = 0;
	x->at[c] = x->st.len;
	alloc_state(m->a, &x->st);
	if (x->st.len + MEM_CAT_COUNT + 1 > x->st.cap) {
		x->st.cap = 2 * (x->st.len + MEM_CAT_COUNT + 1);
		x->st.v = xrealloc(x->st.v, sizeof(*x->st.v) * x->st.cap);
	}
	w = x->st.v + x->st.len;
	memcpy(w, m->cur, sizeof(m->cur));
	/* the timeline's last sample holds the state; its time must agree too */
	w[MEM_CAT_COUNT] = m->record ? m->samples[m->nsamples - 1].t_ns : 0;
	x->st.len += MEM_CAT_COUNT + 1;
	x->at[c + 1] = x->st.len;
	x->retries[c] = m->peaks.step_retries;
	x->ooms[c] = m->step_ooms;
	x->nsamples[c] = m->nsamples;
	x->skipped[c] = 0;
	x->n = c + 1;
}

/* Checkpoint c fell among the windows a step skipped: no state to meet there. */
static void mark_skipped(struct marks *x, int c)
{
	assert(c == x->n);
	if (!c)
		x->st.len = 0;
	x->at[c] = x->at[c + 1] = x->st.len;
	x->skipped[c] = 1;
	x->n = c + 1;
}

static int mark_same(const struct marks *x, const struct marks *y, int c)
{
	size_t n = x->at[c + 1] - x->at[c];

	return c < y->n && !x->skipped[c] && !y->skipped[c] && y->at[c + 1] - y->at[c] == n &&
	       !memcmp(x->st.v + x->at[c], y->st.v + y->at[c], sizeof(*x->st.v) * n);
}

/*
 * This step met the step before (prev, whose timeline is prev_samples) at
 * checkpoint c: the rest of it is the rest of that one. Its flushes and
 * segments past the capacity, and its timeline from there on, are taken
 * from it; the waits and syncs of the ops after c are the ones it left.
 * The peaks cannot rise: that step reached every value this one would.
 */
static void replay_rest(struct memory *m, const struct marks *cur, const struct marks *prev, int c,
			const struct mem_sample *prev_samples, int prev_nsamples)
{
	uint32_t retries = prev->end_retries - prev->retries[c], ooms = prev->end_ooms - prev->ooms[c];

	m->peaks.step_retries += retries;
	m->peaks.retries += retries;
	m->step_ooms += ooms;
	m->peaks.ooms += ooms;
	if (m->record) {
		/* the last sample before c is the same in both: the other's from there on */
		int keep = cur->nsamples[c] - 1, from = prev->nsamples[c] - 1, n = prev_nsamples - from;
		if (keep + n > m->cap) {
			m->cap = keep + n;
			m->samples = xrealloc(m->samples, sizeof(*m->samples) * (size_t)m->cap);
		}
		memcpy(m->samples + keep, prev_samples + from, sizeof(*m->samples) * (size_t)n);
		m->nsamples = keep + n;
	}
	m->replayed = 1;
}

/*
 * Step k (from 0) has ended: after[k + 1] holds what is allocated and
 * reserved once its buffers are freed, the bytes it began with (every
 * buffer of a step is freed by its end) and what the first step made to
 * keep; a step that met the one before ends in its state.
 */
static void after_step(struct memory *m, int k, int met)
{
	struct mem_peaks *p = &m->peaks;

	if (k + 1 >= MEM_AFTER_MAX || k + 1 != p->nafter)
		return;
	/* the state the first step made stays (buffer.once) */
	p->after[k + 1] = met ? p->after[k] :
				(struct mem_after){ m->begin_total + (k ? 0 : m->once_total), m->counts->reserved };
	p->nafter = k + 2;
}

/*
 * The windows of memory.series a step has come to: the allocator seen from
 * the start of each of the last three (with the bytes by category), and
 * the step's flushes before it.
 */
struct windows {
	struct alloc_state st[3]; /* window j's in st[j % 3] */
	int at[3];                /* which window's it holds, -1 */
	uint32_t retries[3];
	int j;                    /* windows seen, the next one's index */
};

struct window_view {
	const struct memory *m;
	int j;     /* the window the state is seen from (its first op, for code) or the windows skipped (for buf) */
	int upto;  /* ops before this one moved with the windows */
};

/* A held buffer as seen from window v->j's start: one of an earlier window's, by its number in the first window. */
static uint64_t window_code(void *ctx, int buf)
{
	const struct window_view *v = ctx;
	const struct mem_series *x = &v->m->series;
	int a = v->m->s->bufs[buf].alloc_op;

	if (a < x->first || a >= v->upto)
		return (uint64_t)(uint32_t)buf;
	return 1ull << 62 | (uint64_t)(uint32_t)(buf - v->j * x->dbuf);
}

static const uint32_t *window_clock(void *ctx, uint32_t op)
{
	const struct window_view *v = ctx;

	return &v->m->s->clock[(size_t)op * ST_COUNT];
}

/* A held buffer after v->j windows are skipped: an earlier window's becomes the one of the window v->j later. */
static int window_buf(void *ctx, int buf)
{
	const struct window_view *v = ctx;
	const struct mem_series *x = &v->m->series;
	int a = v->m->s->bufs[buf].alloc_op;

	return a < x->first || a >= v->upto ? buf : buf + v->j * x->dbuf;
}

/*
 * Op i is about to issue. At the start of window j of the series, the
 * allocator as seen from there is kept; when it equals what it was at the
 * start of window j - p (p = 1 or 2), windows j - p to j - 1 repeat from
 * here to the series' end: the allocator moves past as many whole
 * repeats as fit, the skipped ops taking the waits and syncs of the ops
 * p windows before them, and the step their flushes. Returns the op to
 * issue next.
 */
static int window_start(struct memory *m, struct windows *w, int i)
{
	const struct mem_series *x = &m->series;
	struct window_view v = { m, 0, i };
	struct alloc_frame f = { (uint32_t)i, { 0 }, window_code, &v, NULL };
	struct alloc_state *st;
	int j = w->j;

	if (i != x->first + j * x->len || j >= x->n)
		return i;
	f.next = (const uint32_t (*)[ST_COUNT])x->next[j];
	w->j++;
	st = &w->st[j % 3];
	st->len = 0;
	v.j = j;
	for (int t = 0; t < ST_COUNT; t++)
		f.pos[t] = x->pos[t] + (uint32_t)j * x->dpos[t];
	alloc_state_from(m->a, st, &f);
	if (st->len + MEM_CAT_COUNT > st->cap) {
		st->cap = 2 * (st->len + MEM_CAT_COUNT);
		st->v = xrealloc(st->v, sizeof(*st->v) * st->cap);
	}
	memcpy(st->v + st->len, m->cur, sizeof(m->cur));
	st->len += MEM_CAT_COUNT;
	w->at[j % 3] = j;
	w->retries[j % 3] = m->peaks.step_retries;
	for (int p = 1; p <= 2 && p <= j; p++) {
		const struct alloc_state *was = &w->st[(j - p) % 3];
		int skip = (x->n - j) / p * p, len = skip * x->len;
		struct alloc_move mv = { (uint32_t)len, { 0 }, (uint32_t)(i - p * x->len), window_buf, window_clock, &v,
					 f.next, 0 };
		if (w->at[(j - p) % 3] != j - p || was->len != st->len || memcmp(was->v, st->v, sizeof(*st->v) * st->len))
			continue;
		if (!skip)
			return i;
		v.j = skip;
		for (int t = 0; t < ST_COUNT; t++)
			mv.dpos[t] = (uint32_t)skip * x->dpos[t];
		mv.retries = (uint32_t)(skip / p) * (m->peaks.step_retries - w->retries[(j - p) % 3]);
		alloc_move(m->a, &mv);
		m->peaks.step_retries += mv.retries;
		m->peaks.retries += mv.retries;
		for (int o = i; o < i + len; o++) {
			/* the op waited for: the one p windows' positions on, on its stream, as the block's clock moved */
			int from = o - p * x->len;
			for (int t = 0; t < ST_COUNT; t++) {
				int32_t b = m->wait[(size_t)from * ST_COUNT + t];
				m->wait[(size_t)o * ST_COUNT + t] =
					b < 0 ? -1 :
						m->s->stream_ops[m->s->stream_first[t] + m->s->stream_pos[b] +
								 (uint32_t)p * x->dpos[t]];
			}
			m->sync[o] = m->sync[from];
		}
		m->peaks.ops_skipped += (uint64_t)len;
		w->j = x->n; /* what is left of the series is simulated */
		return i + len;
	}
	return i;
}

void memory_predict(struct memory *m, const uint64_t *issue_ns)
{
	const struct run_settings *run = &m->s->exp->run;
	int steps = run->warmup + run->steps, stop, k, nops = m->s->nops;
	struct layout *h;     /* h[k + 1]: the state after step k; h[0], before the first */
	uint32_t *retries;    /* per step simulated: its flushes */
	uint64_t more = 0;    /* flushes of the steps not simulated */
	struct marks x[2];    /* the checkpoints of this step and of the one before */
	struct mem_sample *kept = NULL; /* the timeline of the step before */
	struct windows win;             /* memory.skip: the windows of this step */
	int nkept = 0, capkept = 0;

	int runs = steps < 1 ? 1 : steps, period = 0; /* the run's steps; steps: those to simulate */

	memory_persistent(m);
	m->peaks.after[0] = (struct mem_after){ m->total, m->counts->reserved };
	m->peaks.nafter = 1;
	if (alloc_steps_repeat(m->a) || steps < 1)
		steps = 1;
	h = xcalloc((size_t)steps + 1, sizeof(*h));
	retries = xcalloc((size_t)steps, sizeof(*retries));
	memset(x, 0, sizeof(x));
	memset(&win, 0, sizeof(win));
	layout_of(m, &h[0]);
	for (k = 0, stop = steps; k < stop; k++) {
		struct marks *cur = &x[k & 1], *prev = &x[!(k & 1)];
		/* checkpoints while no cycle is known, in a run of more than one step */
		int check = stop == steps && steps > 1, c = 0, met = -1;

		if (check && m->record) { /* keep the step before's timeline, as it was at its last op */
			struct mem_sample *t = kept;
			int ct = capkept;
			kept = m->samples, nkept = m->nsamples, capkept = m->cap;
			m->samples = t, m->cap = ct, m->nsamples = 0;
		}
		if (k)
			memory_step_end(m, 0);
		memory_step_begin(m);
		memcpy(m->begin_cur, m->cur, sizeof(m->cur));
		m->begin_total = m->total;
		m->begin_reserved = m->counts->reserved;
		cur->n = 0;
		win.j = 0;
		win.at[0] = win.at[1] = win.at[2] = -1;
		for (int i = 0; i < nops && met < 0; i++) {
			if (m->skip && (i = window_start(m, &win, i)) >= nops)
				break;
			/* the checkpoints up to op i: those the windows skipped have no state */
			for (int at; check && c < CHECKPOINTS - 1 && i >= (at = (int)((int64_t)(c + 1) * nops / CHECKPOINTS));
			     c++) {
				if (i > at) {
					mark_skipped(cur, c);
					continue;
				}
				mark(m, cur, c);
				if (k && mark_same(cur, prev, c)) {
					met = c;
					break;
				}
			}
			if (met >= 0)
				break;
			issue_op(m, i, issue_ns[i]);
			m->peaks.ops_issued++;
		}
		if (met >= 0) {
			/*
			 * The rest of this step is the rest of the step before:
			 * it ends in the state that one ended in, the state this
			 * one began in, and every later step is this one.
			 */
			replay_rest(m, cur, prev, met, kept, nkept);
			after_step(m, k, 1);
			retries[k] = m->peaks.step_retries;
			more = (uint64_t)(steps - 1 - k) * retries[k];
			k++;
			break;
		}
		cur->end_retries = m->peaks.step_retries;
		cur->end_ooms = m->step_ooms;
		retries[k] = m->peaks.step_retries;
		after_step(m, k, 0);
		if (stop < steps)
			continue; /* in a cycle: the steps up to the phase of the run's last */
		layout_of(m, &h[k + 1]);
		/*
		 * The state after this step is the state after step j - 1:
		 * steps j to k repeat from now on (one step, j = k, when this
		 * one reserved nothing new; several when flushes release and
		 * reserve segments again and again). Simulate the steps up to
		 * the one in the phase of the run's last, whose timeline and
		 * waits the caller wants; the rest are whole cycles, each with
		 * the flushes of steps j to k (and no segment past the
		 * capacity: it would have raised it, and changed the state).
		 */
		for (int j = k; j >= 0; j--)
			if (layout_same(&h[k + 1], &h[j])) {
				int left = steps - 1 - k, phase;
				uint64_t cycle = 0;
				period = k + 1 - j;
				phase = left % period;
				for (int i = j; i <= k; i++)
					cycle += retries[i];
				more = (uint64_t)((left - phase) / period) * cycle;
				stop = k + 1 + phase;
				break;
			}
	}
	/*
	 * the steps not simulated end as one simulated did: one step for
	 * all when each repeats the first, the step before when this one
	 * met it, the step a period before in a cycle
	 */
	for (int i = m->peaks.nafter; i < MEM_AFTER_MAX && i <= runs; i++)
		m->peaks.after[i] = m->peaks.after[i - (period ? period : 1)];
	if (m->peaks.nafter < MEM_AFTER_MAX)
		m->peaks.nafter = runs + 1 < MEM_AFTER_MAX ? runs + 1 : MEM_AFTER_MAX;
	m->peaks.retries += (uint32_t)more;
	memset(m->peaks.end_by_pool, 0, sizeof(m->peaks.end_by_pool));
	if (m->s->exp->runtime.caching_allocator) /* an arena's pools are lifetime classes, not streams */
		for (int i = 0; i < alloc_segments(m->a); i++) {
			int pool = alloc_segment_pool(m->a, i);
			if (pool >= 0 && pool < 2 * ST_COUNT)
				m->peaks.end_by_pool[pool] += alloc_segment_bytes(m->a, i);
		}
	for (k = 0; k <= steps; k++)
		free(h[k].v);
	free(h);
	free(retries);
	free(kept);
	free(x[0].st.v);
	free(x[1].st.v);
	for (int j = 0; j < 3; j++)
		free(win.st[j].v);
}
