/*
 * memtrack.c - current, peak and timeline of allocated bytes (see memtrack.h).
 */
#include "memtrack.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void memtrack_init(struct memtrack *m)
{
	memset(m, 0, sizeof(*m));
}

void memtrack_release(struct memtrack *m)
{
	free(m->samples);
	memset(m, 0, sizeof(*m));
}

void memtrack_alloc(struct memtrack *m, int cat, uint64_t bytes)
{
	assert(cat >= 0 && cat < MEM_CAT_COUNT);
	m->cur[cat] += bytes;
	m->total += bytes;
	if (m->total > m->peak) {
		m->peak = m->total;
		memcpy(m->peak_by_cat, m->cur, sizeof(m->cur));
	}
}

void memtrack_free(struct memtrack *m, int cat, uint64_t bytes)
{
	assert(cat >= 0 && cat < MEM_CAT_COUNT);
	assert(m->cur[cat] >= bytes && m->total >= bytes);
	m->cur[cat] -= bytes;
	m->total -= bytes;
}

void memtrack_sample(struct memtrack *m, uint64_t t_ns)
{
	struct mem_sample *x;

	if (m->nsamples && m->samples[m->nsamples - 1].t_ns == t_ns) {
		x = &m->samples[m->nsamples - 1];
	} else {
		if (m->nsamples == m->cap) {
			m->cap = m->cap ? 2 * m->cap : 256;
			m->samples = realloc(m->samples, sizeof(*m->samples) * (size_t)m->cap);
			assert(m->samples);
		}
		x = &m->samples[m->nsamples++];
		x->t_ns = t_ns;
	}
	memcpy(x->alloc, m->cur, sizeof(m->cur));
	x->reserved = m->total;
}

void memtrack_clear_samples(struct memtrack *m)
{
	m->nsamples = 0;
}
