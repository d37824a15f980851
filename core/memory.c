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
	m->wait = xmalloc(sizeof(int32_t) * (size_t)(s->nops > 0 ? s->nops : 1) * ST_COUNT);
	memset(m->wait, 0xff, sizeof(int32_t) * (size_t)s->nops * ST_COUNT); /* every entry -1 */
	m->sync = xcalloc((size_t)(s->nops > 0 ? s->nops : 1), 1);
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

static void sample(struct memory *m, uint64_t t_ns)
{
	struct mem_sample *x;
	uint64_t reserved = alloc_reserved(m->a);

	if (m->total > m->peaks.alloc) {
		m->peaks.alloc = m->total;
		memcpy(m->peaks.by_cat, m->cur, sizeof(m->cur));
	}
	if (reserved > m->peaks.reserved)
		m->peaks.reserved = reserved;
	if (!m->record)
		return;
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

static int brief(const struct buffer *b)
{
	return b->alloc_op >= 0 && b->free_op >= 0 && b->free_op - b->alloc_op < BRIEF_OPS;
}

/*
 * The arena's region for a buffer: 2 brief; 1 when it outlives the
 * microbatch that allocates it (or the step); else 0.
 */
static int arena_region(const struct schedule *s, const struct buffer *b)
{
	if (brief(b))
		return 2;
	if (b->alloc_op < 0 || b->free_op < 0)
		return 1;
	return s->ops[b->alloc_op].micro != s->ops[b->free_op].micro;
}

static int grant(struct memory *m, int buf, int stream, const uint32_t *clock, uint32_t *wait)
{
	const struct schedule *s = m->s;
	const struct buffer *b = &s->bufs[buf];
	int pool = s->exp->runtime.caching_allocator ? stream : arena_region(s, b);
	uint64_t got;

	struct alloc_req rq = { pool, brief(b), b->alloc_op >= 0 ? (uint32_t)b->alloc_op : 0, clock };

	if (alloc_get(m->a, buf, b->bytes, &rq, wait) != 0)
		return -1;
	got = alloc_granted(m->a, buf);
	m->cur[b->cat] += got;
	m->total += got;
	return 0;
}

static void release(struct memory *m, int buf, int stream, uint32_t pos, uint32_t op)
{
	const struct buffer *b = &m->s->bufs[buf];
	uint64_t got = alloc_granted(m->a, buf);

	assert(m->cur[b->cat] >= got);
	m->cur[b->cat] -= got;
	m->total -= got;
	alloc_put(m->a, buf, stream, pos, op);
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

int memory_grant(struct memory *m, int op, uint64_t t_ns)
{
	const struct schedule *s = m->s;
	const struct op *o = &s->ops[op];
	const uint32_t *clock = &s->clock[(size_t)op * ST_COUNT];
	uint32_t wait[ST_COUNT] = { 0 }, retries, ooms;

	if (!o->nalloc) /* nothing to grant: no flush, no wait (m->wait starts at -1) */
		return 0;
	retries = alloc_retries(m->a);
	ooms = alloc_ooms(m->a);
	for (int i = 0; i < o->nalloc; i++) {
		int b = (int)s->bufrefs[o->buf_first + i];
		if (on_device(&s->bufs[b]) && grant(m, b, o->stream, clock, wait) != 0)
			return -1;
	}
	/* flushes of the cache: the device is synchronized before the op issues */
	m->sync[op] = alloc_retries(m->a) != retries;
	if (m->sync[op]) {
		m->peaks.step_retries += alloc_retries(m->a) - retries;
		m->peaks.retries += alloc_retries(m->a) - retries;
		m->step_ooms += alloc_ooms(m->a) - ooms;
		m->peaks.ooms += alloc_ooms(m->a) - ooms;
	}
	/* blocks from ops the schedule does not order before this one: wait for the last freeing op per stream */
	for (int t = 0; t < ST_COUNT; t++)
		m->wait[(size_t)op * ST_COUNT + t] =
			wait[t] > clock[t] ? s->stream_ops[s->stream_first[t] + wait[t] - 1] : -1;
	sample(m, t_ns);
	return 0;
}

void memory_release(struct memory *m, int op, uint64_t t_ns)
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

int memory_issue(struct memory *m, int op, uint64_t t_ns)
{
	if (memory_grant(m, op, t_ns) != 0)
		return -1;
	memory_release(m, op, t_ns);
	return 0;
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
			memory_issue(m, i, issue_ns[i]);
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
