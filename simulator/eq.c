/*
 * eq.c - binary min-heap of events ordered by (time, sequence).
 */
#include "eq.h"

#include <assert.h>
#include <stdlib.h>

#include "xalloc.h"

static int before(const struct event *a, const struct event *b)
{
	return a->t_ns < b->t_ns || (a->t_ns == b->t_ns && a->seq < b->seq);
}

void eq_init(struct eq *q)
{
	q->h = NULL;
	q->n = q->cap = 0;
	q->next_seq = 0;
}

void eq_release(struct eq *q)
{
	free(q->h);
	eq_init(q);
}

void eq_reset(struct eq *q)
{
	q->n = 0;
	q->next_seq = 0;
}

void eq_push(struct eq *q, uint64_t t_ns, int op)
{
	int i;

	if (q->n == q->cap) {
		q->cap = q->cap ? 2 * q->cap : 256;
		q->h = xrealloc(q->h, sizeof(*q->h) * q->cap);
	}
	i = q->n++;
	struct event e = { t_ns, q->next_seq++, op };
	while (i > 0) {
		int parent = (i - 1) / 2;
		if (!before(&e, &q->h[parent]))
			break;
		q->h[i] = q->h[parent];
		i = parent;
	}
	q->h[i] = e;
}

int eq_pop(struct eq *q, struct event *out)
{
	struct event last;
	int i = 0;

	if (q->n == 0)
		return 0;
	*out = q->h[0];
	last = q->h[--q->n];
	for (;;) {
		int c = 2 * i + 1;
		if (c >= q->n)
			break;
		if (c + 1 < q->n && before(&q->h[c + 1], &q->h[c]))
			c++;
		if (!before(&q->h[c], &last))
			break;
		q->h[i] = q->h[c];
		i = c;
	}
	q->h[i] = last;
	return 1;
}
