/*
 * eq.h - the simulator's event queue: a binary heap keyed by
 * (time, sequence number), so events at equal times pop in the order they
 * were pushed and every run is reproducible bit for bit. A step has about
 * 10^4 events; a heap is enough.
 */
#ifndef SIM_EQ_H
#define SIM_EQ_H

#include <stdint.h>

struct event {
	uint64_t t_ns;
	uint64_t seq;
	int32_t op;       /* schedule op the event concerns */
	uint32_t version; /* an activity's version when pushed; stale events are skipped */
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
void eq_push(struct eq *q, uint64_t t_ns, int op, uint32_t version);
/* Pops the earliest event into *e; returns 0 when the queue is empty. */
int eq_pop(struct eq *q, struct event *e);
static inline int eq_empty(const struct eq *q) { return q->n == 0; }

#endif
