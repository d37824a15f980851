/*
 * summary.c - step figures from a timeline (see summary.h).
 */
#include "summary.h"

#include <stdlib.h>
#include <string.h>

#include "xalloc.h"

struct edge {
	uint64_t t;
	int8_t comm, compute; /* +1 at a start, -1 at an end */
};

static int edge_cmp(const void *a, const void *b)
{
	const struct edge *x = a, *y = b;
	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return 0;
}

void summary_overlap(const struct schedule *s, const struct op_timing *ops, double *compute_s,
		     double *exposed_comm_s)
{
	struct edge *e = xmalloc(sizeof(*e) * 2 * (size_t)(s->nops + 1));
	int n = 0, comm = 0, comp = 0;
	uint64_t exposed = 0, busy = 0, prev = 0;

	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		int c = op_is_comm(s, o), k = o->stream == ST_COMPUTE && o->kind != OP_FREE;
		if ((!c && !k) || ops[i].end_ns <= ops[i].start_ns)
			continue;
		e[n++] = (struct edge){ ops[i].start_ns, (int8_t)c, (int8_t)k };
		e[n++] = (struct edge){ ops[i].end_ns, (int8_t)-c, (int8_t)-k };
	}
	qsort(e, n, sizeof(*e), edge_cmp);
	for (int i = 0; i < n; i++) {
		uint64_t dt = e[i].t - prev;
		if (comm > 0 && comp == 0)
			exposed += dt;
		if (comp > 0)
			busy += dt;
		comm += e[i].comm;
		comp += e[i].compute;
		prev = e[i].t;
	}
	free(e);
	*compute_s = busy * 1e-9;
	*exposed_comm_s = exposed * 1e-9;
}

void summary_of_step(const struct schedule *s, const struct op_timing *ops, uint64_t step_ns,
		     const struct mem_peaks *peaks, struct summary *out)
{
	const struct experiment *e = s->exp;

	memset(out, 0, sizeof(*out));
	out->step_time_s = step_ns * 1e-9;
	if (out->step_time_s > 0) {
		out->tokens_per_s_per_gpu = s->tokens_per_step / out->step_time_s;
		out->mfu = s->model_flops / out->step_time_s / s->peak_flops;
	}
	summary_overlap(s, ops, &out->compute_s, &out->exposed_comm_s);
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		if (op_is_collective(o->kind))
			out->comm_bytes_per_gpu +=
				collective_wire_bytes(o->kind, o->bytes, schedule_group_size(s, o->group));
	}
	out->peak_alloc_bytes = peaks->alloc;
	out->peak_reserved_bytes = peaks->reserved;
	memcpy(out->peak_by_cat, peaks->by_cat, sizeof(out->peak_by_cat));
	out->gpu_bytes = (uint64_t)(e->cluster.gpu.hbm_gib * 1073741824.0);
	out->fits = out->peak_reserved_bytes <= out->gpu_bytes;
}
