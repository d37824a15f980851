/*
 * eq.h - the simulator's event queue: a binary heap keyed by
 * (time, sequence number), so events at equal times pop in the order they
 * were pushed and every run is reproducible bit for bit. The engine keeps
 * the running activities' finish events beside the heap, numbered from the
 * same sequence (eq_take_seq), and takes whichever is earliest.
 */
#ifndef SIM_EQ_H
#define SIM_EQ_H

#include <stdint.h>

struct event {
	uint64_t t_ns;
	uint64_t seq;
	int32_t op;       /* schedule op the event concerns */
};

struct eq {
	struct event *h;
	int n, cap;
	uint64_t next_seq;
};

void eq_init(struct eq *q);
void eq_release(struct eq *q);
/* Empty the queue and restart its sequence numbers, keeping its storage for the next run. */
void eq_reset(struct eq *q);
void eq_push(struct eq *q, uint64_t t_ns, int op);
/* Pops the earliest event into *e; returns 0 when the queue is empty. */
int eq_pop(struct eq *q, struct event *e);
static inline int eq_empty(const struct eq *q) { return q->n == 0; }
/* The earliest event, left in the queue; the queue must not be empty. */
static inline const struct event *eq_top(const struct eq *q) { return &q->h[0]; }
/* The sequence number the next event would get, for an event kept outside the queue. */
static inline uint64_t eq_take_seq(struct eq *q) { return q->next_seq++; }
/* Whether an event at (t_ns, seq) comes before event e. */
static inline int eq_before(uint64_t t_ns, uint64_t seq, const struct event *e)
{
	return t_ns < e->t_ns || (t_ns == e->t_ns && seq < e->seq);
}

#endif
