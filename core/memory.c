/*
 * memory.c - a step's device memory in issue order (see memory.h).
 */
#include "memory.h"

#include <assert.h>
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

struct memory *memory_new(const struct schedule *s, int record, alloc_reserve_fn reserve, void *ctx)
{
	const struct runtime_spec *rt = &s->exp->runtime;
	struct alloc_cfg cfg = {
		.caching = rt->caching_allocator,
		.round = rt->alloc_round_bytes > 0 ? (uint64_t)rt->alloc_round_bytes : 512,
		.segment = rt->segment_bytes > 0 ? (uint64_t)rt->segment_bytes : 2ull << 20,
		.wait_age = WAIT_AGE_OPS,
		.capacity = rt->caching_allocator ? gpu_spec_bytes(&s->exp->cluster.gpu) : 0,
	};
	struct memory *m = xcalloc(1, sizeof(*m));

	m->s = s;
	m->record = record;
	m->a = alloc_new(&cfg, s->nbufs, reserve, ctx);
	m->counts = alloc_counts(m->a);
	/* an op's entries are written when it is granted (memory_grant), before anyone reads them */
	m->wait = xmalloc(sizeof(int32_t) * (size_t)(s->nops > 0 ? s->nops : 1) * ST_COUNT);
	m->sync = xmalloc((size_t)(s->nops > 0 ? s->nops : 1));
	return m;
}

void memory_free(struct memory *m)
{
	if (!m)
		return;
	alloc_free(m->a);
	free(m->samples);
	free(m->wait);
	free(m->sync);
	free(m);
}

/* A buffer the allocator handles: device memory of its own. */
static int on_device(const struct buffer *b)
{
	return !b->host && b->alias_of < 0;
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
	alloc_settle(m->a);
	m->peaks.step_retries = m->step_ooms = 0;
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
		if (on_device(&s->bufs[b]) && grant(m, b, o->stream, clock, wait) != 0)
			return -1;
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

	for (int i = 0; i < s->nbufs; i++) {
		const struct buffer *b = &s->bufs[i];
		if (b->alloc_op >= 0 && b->free_op < 0 && on_device(b)) {
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
 * The allocator's state between steps: its capacity, and the segments
 * reserved, in order, pool and size of each (released ones left out).
 * Once a step has ended and the allocator settled, the blocks are the
 * persistent buffers, where they always are (in the first segments, never
 * released), and free ones between them: two steps that begin with the
 * same state make the same decisions.
 */
struct layout {
	uint64_t *v;
	int n;
};

static void layout_of(const struct memory *m, struct layout *l)
{
	int nsegs = alloc_segments(m->a);

	l->v = xmalloc(sizeof(*l->v) * (size_t)(2 * nsegs + 1));
	l->n = 0;
	l->v[l->n++] = alloc_capacity(m->a);
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

void memory_predict(struct memory *m, const uint64_t *issue_ns)
{
	const struct run_settings *run = &m->s->exp->run;
	int steps = run->warmup + run->steps, stop, k;
	struct layout *h;     /* h[k + 1]: the state after step k; h[0], before the first */
	uint32_t *retries;    /* per step simulated: its flushes */
	uint64_t more = 0;    /* flushes of the steps not simulated */

	memory_persistent(m);
	if (alloc_steps_repeat(m->a) || steps < 1)
		steps = 1;
	h = xcalloc((size_t)steps + 1, sizeof(*h));
	retries = xcalloc((size_t)steps, sizeof(*retries));
	layout_of(m, &h[0]);
	for (k = 0, stop = steps; k < stop; k++) {
		if (k)
			memory_step_end(m, 0);
		memory_step_begin(m);
		for (int i = 0; i < m->s->nops; i++)
			issue_op(m, i, issue_ns[i]);
		retries[k] = m->peaks.step_retries;
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
				int period = k + 1 - j, left = steps - 1 - k, phase = left % period;
				uint64_t cycle = 0;
				for (int i = j; i <= k; i++)
					cycle += retries[i];
				more = (uint64_t)((left - phase) / period) * cycle;
				stop = k + 1 + phase;
				break;
			}
	}
	m->peaks.retries += (uint32_t)more;
	for (k = 0; k <= steps; k++)
		free(h[k].v);
	free(h);
	free(retries);
}
