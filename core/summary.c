/*
 * summary.c - step figures from a timeline (see summary.h).
 */
#include "summary.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>

#include "fabric.h"
#include "xalloc.h"

struct edge {
	uint64_t t;
	int8_t comm, compute; /* +1 at a start, -1 at an end */
	uint8_t kind;         /* the op's enum op_kind */
};

static int edge_cmp(const void *a, const void *b)
{
	const struct edge *x = a, *y = b;
	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return 0;
}

/* How op o counts, as bits: 1 communication (op_is_comm), 2 compute (an op of the compute stream other than a free). */
static int op_class(const struct schedule *s, const struct op *o)
{
	return op_is_comm(s, o) | (o->stream == ST_COMPUTE && o->kind != OP_FREE) << 1;
}

/*
 * What one rank sends for collective o: the ring's bytes, or an
 * all-reduce's across nodes as the algorithm the fabric picks for it (a
 * double binary tree sends 2 S: core/fabric.h), links[] the groups' links,
 * found at a group's first all-reduce (spans < 0 before).
 */
static uint64_t wire_of(const struct schedule *s, const struct op *o, struct fabric_link links[GRP_COUNT])
{
	int n = schedule_group_size(s, o->group);
	struct fabric_coll fc;

	if (o->kind != OP_ALLREDUCE || n <= 1)
		return collective_wire_bytes(o->kind, o->bytes, n);
	if (links[o->group].spans < 0)
		fabric_link_of(s, o->group, &links[o->group]);
	fabric_collective(&links[o->group], o->kind, n, o->bytes, &fc);
	return fc.wire;
}

void summary_plan_init(struct summary_plan *p, const struct schedule *s)
{
	struct fabric_link links[GRP_COUNT];

	for (int g = 0; g < GRP_COUNT; g++)
		links[g].spans = -1;
	p->s = s;
	p->cls = xmalloc((size_t)s->nops + 1);
	p->wire_bytes = 0;
	for (uint32_t k = 0; k < (uint32_t)s->nops; k++) {
		const struct op *o = &s->ops[s->stream_ops[k]];
		p->cls[k] = (uint8_t)op_class(s, o);
		if (op_is_collective(o->kind))
			p->wire_bytes += wire_of(s, o, links);
	}
}

void summary_plan_release(struct summary_plan *p)
{
	free(p->cls);
	p->cls = NULL;
}

/* The sums over the edges, taken in time order (edges at equal times in any order). */
struct sweep {
	int comm, comp, running[OP_KIND_COUNT];
	uint64_t prev, exposed, busy, by_kind[OP_KIND_COUNT];
	int want_kinds;
};

static void sweep_edge(struct sweep *w, uint64_t t, int comm, int comp, int kind)
{
	uint64_t dt = t - w->prev;

	if (w->comm > 0 && w->comp == 0) {
		w->exposed += dt;
		if (w->want_kinds)
			for (int k = 0; k < OP_KIND_COUNT; k++)
				w->by_kind[k] += w->running[k] > 0 ? dt : 0;
	}
	if (w->comp > 0)
		w->busy += dt;
	w->comm += comm;
	w->comp += comp;
	w->running[kind] += comm;
	w->prev = t;
}

/* Every edge sorted: for timelines whose streams overlap themselves (a measured run's jitter). */
static void sweep_sorted(const struct summary_plan *p, const struct op_timing *ops, struct sweep *w)
{
	const struct schedule *s = p->s;
	struct edge *e = xmalloc(sizeof(*e) * 2 * (size_t)(s->nops + 1));
	int n = 0;

	for (uint32_t k = 0; k < (uint32_t)s->nops; k++) {
		int i = s->stream_ops[k], c = p->cls[k];
		if (!c || ops[i].end_ns <= ops[i].start_ns)
			continue;
		e[n++] = (struct edge){ ops[i].start_ns, (int8_t)(c & 1), (int8_t)(c >> 1), s->ops[i].kind };
		e[n++] = (struct edge){ ops[i].end_ns, (int8_t)-(c & 1), (int8_t)-(c >> 1), s->ops[i].kind };
	}
	qsort(e, n, sizeof(*e), edge_cmp);
	for (int i = 0; i < n; i++)
		sweep_edge(w, e[i].t, e[i].comm, e[i].compute, e[i].kind);
	free(e);
}

/* Whether the op at stream position k counts in this timeline: its class, and it takes time. */
static int counted(const struct summary_plan *p, const struct op_timing *ops, uint32_t k)
{
	int i = p->s->stream_ops[k];
	return p->cls[k] && ops[i].end_ns > ops[i].start_ns;
}

/*
 * Ops of one stream run one after the other, so each stream's edges come
 * in time order already: merge the streams, with a cursor on each (the
 * stream's next counted op, and whether its start or its end is next).
 * 0, or -1 when a stream's ops overlap (nothing summed then).
 */
static int sweep_merged(const struct summary_plan *p, const struct op_timing *ops, struct sweep *w)
{
	const struct schedule *s = p->s;
	uint32_t at[ST_COUNT], stop[ST_COUNT];
	int end[ST_COUNT], live = 0, streams[ST_COUNT];

	for (int st = 0; st < ST_COUNT; st++) {
		uint64_t last = 0;
		for (uint32_t k = s->stream_first[st]; k < s->stream_first[st + 1]; k++) {
			int i = s->stream_ops[k];
			if (!counted(p, ops, k))
				continue;
			if (ops[i].start_ns < last)
				return -1;
			last = ops[i].end_ns;
		}
	}
	for (int st = 0; st < ST_COUNT; st++) {
		at[st] = s->stream_first[st];
		stop[st] = s->stream_first[st + 1];
		while (at[st] < stop[st] && !counted(p, ops, at[st]))
			at[st]++;
		end[st] = 0;
		if (at[st] < stop[st])
			streams[live++] = st;
	}
	while (live) {
		int best = -1, bj = -1;
		uint64_t bt = 0;
		for (int j = 0; j < live; j++) {
			int st = streams[j];
			const struct op_timing *t = &ops[s->stream_ops[at[st]]];
			uint64_t x = end[st] ? t->end_ns : t->start_ns;
			if (best < 0 || x < bt) {
				best = st;
				bj = j;
				bt = x;
			}
		}
		int c = p->cls[at[best]], sign = end[best] ? -1 : 1;
		sweep_edge(w, bt, sign * (c & 1), sign * (c >> 1), s->ops[s->stream_ops[at[best]]].kind);
		if (!end[best]) {
			end[best] = 1;
			continue;
		}
		end[best] = 0;
		do
			at[best]++;
		while (at[best] < stop[best] && !counted(p, ops, at[best]));
		if (at[best] >= stop[best])
			streams[bj] = streams[--live];
	}
	return 0;
}

static void overlap(const struct summary_plan *p, const struct op_timing *ops, double *compute_s,
		    double *exposed_comm_s, double exposed_by_kind_s[OP_KIND_COUNT])
{
	struct sweep w;

	memset(&w, 0, sizeof(w));
	w.want_kinds = exposed_by_kind_s != NULL;
	if (sweep_merged(p, ops, &w) != 0) {
		memset(&w, 0, sizeof(w));
		w.want_kinds = exposed_by_kind_s != NULL;
		sweep_sorted(p, ops, &w);
	}
	*compute_s = w.busy * 1e-9;
	*exposed_comm_s = w.exposed * 1e-9;
	if (exposed_by_kind_s)
		for (int k = 0; k < OP_KIND_COUNT; k++)
			exposed_by_kind_s[k] = w.by_kind[k] * 1e-9;
}

void summary_overlap_by_kind(const struct schedule *s, const struct op_timing *ops, double *compute_s,
			     double *exposed_comm_s, double exposed_by_kind_s[OP_KIND_COUNT])
{
	struct summary_plan p;

	summary_plan_init(&p, s);
	overlap(&p, ops, compute_s, exposed_comm_s, exposed_by_kind_s);
	summary_plan_release(&p);
}

void summary_overlap(const struct schedule *s, const struct op_timing *ops, double *compute_s,
		     double *exposed_comm_s)
{
	summary_overlap_by_kind(s, ops, compute_s, exposed_comm_s, NULL);
}

void summary_of_step_planned(const struct summary_plan *p, const struct op_timing *ops, uint64_t step_ns,
			     const struct mem_peaks *peaks, struct summary *out)
{
	const struct schedule *s = p->s;
	const struct experiment *e = s->exp;

	memset(out, 0, sizeof(*out));
	out->step_time_s = step_ns * 1e-9;
	if (out->step_time_s > 0) {
		out->tokens_per_s_per_gpu = s->tokens_per_step / out->step_time_s;
		out->mfu = s->model_flops / out->step_time_s / s->peak_flops;
	}
	overlap(p, ops, &out->compute_s, &out->exposed_comm_s, NULL);
	out->comm_bytes_per_gpu = p->wire_bytes;
	out->peak_alloc_bytes = peaks->alloc;
	out->peak_reserved_bytes = peaks->reserved;
	memcpy(out->peak_by_cat, peaks->by_cat, sizeof(out->peak_by_cat));
	out->gpu_bytes = gpu_spec_bytes(&e->cluster.gpu);
	out->alloc_retries = (int)peaks->retries;
	out->alloc_ooms = (int)peaks->ooms;
	out->alloc_retries_step = (int)peaks->step_retries;
	out->fits = mem_peaks_fit(peaks, out->gpu_bytes);
}

const char *summary_allocator_line(const struct experiment *e, const struct summary *m, char *buf, int len)
{
	int n;

	if (!m->alloc_retries)
		return NULL;
	n = snprintf(buf, (size_t)len, "allocator: %d cache flush%s a step, %d over the run's %d steps (PyTorch's "
		     "num_alloc_retries), each a device synchronization", m->alloc_retries_step,
		     m->alloc_retries_step == 1 ? "" : "es", m->alloc_retries, e->run.warmup + e->run.steps);
	if (m->alloc_ooms && n >= 0 && n < len)
		snprintf(buf + n, (size_t)(len - n), "; %d segment%s past the GPU's memory even so (num_ooms: PyTorch "
			 "raises OutOfMemoryError at the first)", m->alloc_ooms, m->alloc_ooms == 1 ? "" : "s");
	return buf;
}

void summary_of_step(const struct schedule *s, const struct op_timing *ops, uint64_t step_ns,
		     const struct mem_peaks *peaks, struct summary *out)
{
	struct summary_plan p;

	summary_plan_init(&p, s);
	summary_of_step_planned(&p, ops, step_ns, peaks, out);
	summary_plan_release(&p);
}

int summary_median_step(const double *step_s, int n)
{
	double *v = xmalloc(sizeof(double) * (size_t)n), med;
	int best = 0;

	memcpy(v, step_s, sizeof(double) * (size_t)n);
	gsl_sort(v, 1, (size_t)n);
	med = gsl_stats_median_from_sorted_data(v, 1, (size_t)n);
	for (int i = 1; i < n; i++)
		if (fabs(step_s[i] - med) < fabs(step_s[best] - med))
			best = i;
	free(v);
	return best;
}
