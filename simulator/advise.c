/*
 * advise.c - the advisor (see advise.h).
 *
 * A difference between two configurations is told in three parts: what to
 * change ("hsdp instead of fsdp"), what it does to the step (the two
 * components of the step whose time moves most in the direction of the
 * step's own change: exposed time of a collective kind, busy time of a
 * compute op kind), and what it does to memory (peak reserved, and the
 * category that moves most at the allocation peak).
 */
#include "advise.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "engine.h"
#include "json.h"
#include "report.h"
#include "schedule.h"
#include "summary.h"
#include "xalloc.h"

#define GIB 1073741824.0
#define RUNNERS_UP 5
#define PARETO_SHOWN 12

/* ---- one configuration in detail --------------------------------------------------- */

/* The components a step's time is told in: exposed communication by kind, compute by op kind. */
enum part { P_AG, P_RS, P_AR, P_COPY, P_FWD, P_REC, P_BWD, P_OPTIM, P_OTHER, P_COUNT };
static const char *const part_names[P_COUNT] = {
	"exposed all-gather", "exposed reduce-scatter", "exposed all-reduce", "exposed host copies",
	"forward", "recompute", "backward", "optimizer", "other compute",
};

struct detail {
	int ok;
	struct experiment e;
	struct summary sum;
	double part_s[P_COUNT];
};

/* Simulate row's configuration alone, with its critical path and the parts of its step. */
static void detail_of(const struct sweep *sw, const struct sweep_row *row, struct detail *d)
{
	struct schedule *s;
	struct sim_result r;
	double compute, exposed, by_kind[OP_KIND_COUNT];
	char err[256];

	memset(d, 0, sizeof(*d));
	if (sweep_experiment_of(sw, row, &d->e) != 0)
		return;
	s = schedule_new(&d->e, err, sizeof err);
	if (!s)
		return;
	if (engine_run(s, 0, &r, err, sizeof err) != 0) {
		schedule_free(s);
		return;
	}
	report_summarize(s, &r, &d->sum);
	summary_overlap_by_kind(s, r.ops, &compute, &exposed, by_kind);
	d->part_s[P_AG] = by_kind[OP_ALLGATHER];
	d->part_s[P_RS] = by_kind[OP_REDUCE_SCATTER];
	d->part_s[P_AR] = by_kind[OP_ALLREDUCE];
	d->part_s[P_COPY] = by_kind[OP_D2H] + by_kind[OP_H2D];
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		double t = (double)(r.ops[i].end_ns - r.ops[i].start_ns) * 1e-9;
		if (o->stream != ST_COMPUTE || o->kind == OP_FREE)
			continue;
		switch (o->kind) {
		case OP_FORWARD: d->part_s[P_FWD] += t; break;
		case OP_RECOMPUTE: d->part_s[P_REC] += t; break;
		case OP_BACKWARD: case OP_LOSS_BACKWARD: d->part_s[P_BWD] += t; break;
		case OP_OPTIM: d->part_s[P_OPTIM] += t; break;
		default: d->part_s[P_OTHER] += t; break;
		}
	}
	d->ok = 1;
	sim_result_release(&r);
	schedule_free(s);
}

static void detail_release(struct detail *d)
{
	if (d->ok || d->e.origins)
		config_release(&d->e);
	memset(d, 0, sizeof(*d));
}

/* ---- words ----------------------------------------------------------------------------- */

static const char *gib(uint64_t b, char *buf, size_t n)
{
	snprintf(buf, n, "%.1f GiB", (double)b / GIB);
	return buf;
}

/* The links a configuration's collectives cross, in words. */
static const char *fabric(const struct experiment *e, char *buf, size_t n)
{
	if (e->cluster.nodes > 1)
		snprintf(buf, n, "%g GB/s per GPU across nodes, %g GB/s inside a node", e->cluster.inter_gbps,
			 e->cluster.intra_gbps);
	else
		snprintf(buf, n, "%g GB/s per GPU inside the node", e->cluster.intra_gbps);
	return buf;
}

/* The link that bounds a configuration's collectives: "48 GB/s fabric", "360 GB/s NVLink". */
static const char *link_of(const struct experiment *e, char *buf, size_t n)
{
	if (e->cluster.nodes > 1)
		snprintf(buf, n, "%g GB/s fabric", e->cluster.inter_gbps);
	else
		snprintf(buf, n, "%g GB/s NVLink", e->cluster.intra_gbps);
	return buf;
}

/* How policy field f of b differs from a's, as a change to make ("hsdp instead of fsdp"). */
static size_t field_change(const struct policy *a, const struct policy *b, enum policy_field f, char *buf,
			   size_t n)
{
	char x[64], y[64];

	policy_field_str(a, f, x, sizeof x);
	policy_field_str(b, f, y, sizeof y);
	if (!strcmp(x, y))
		return 0;
	switch (f) {
	case PF_SHARDING:
	case PF_ACCUM:
		return (size_t)snprintf(buf, n, "%s instead of %s", y, x);
	case PF_OPTIM_IN_BACKWARD:
		return (size_t)snprintf(buf, n, "%s", b->optim_in_backward ? "the optimizer in backward"
									   : "the optimizer after backward");
	case PF_OPTIM:
		return (size_t)snprintf(buf, n, "a %s optimizer instead of %s", y, x);
	case PF_AC:
		return (size_t)snprintf(buf, n, "checkpointing %s instead of %s", y, x);
	case PF_MICROBATCHES:
		return (size_t)snprintf(buf, n, "%s microbatches instead of %s", y, x);
	case PF_SHARD_GROUP:
		return (size_t)snprintf(buf, n, "shard groups of %s instead of %s", y, x);
	default:
		return (size_t)snprintf(buf, n, "%s %s instead of %s", policy_field_names[f], y, x);
	}
}

/* What to change to go from configuration a to b: the policy fields and the other axes that differ. */
static const char *changes(const struct sweep *sw, const struct sweep_row *ra, const struct detail *a,
			   const struct sweep_row *rb, const struct detail *b, char *buf, size_t n)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int f = 0; f < PF_COUNT && used < n; f++) {
		char c[160];
		/* the shard group follows the sharding unless hsdp chose its own */
		if (f == PF_SHARD_GROUP && (a->e.policy.sharding != SHARD_HSDP || b->e.policy.sharding != SHARD_HSDP))
			continue;
		/* the dtypes follow the precision */
		if ((f == PF_REDUCE_DTYPE || f == PF_ACCUM_DTYPE) && a->e.policy.precision != b->e.policy.precision)
			continue;
		if (field_change(&a->e.policy, &b->e.policy, (enum policy_field)f, c, sizeof c))
			used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? ", " : "", c);
	}
	for (int i = 0; i < sw->naxes && used < n; i++)
		if (!sw->axes[i].policy && ra->value[i] != rb->value[i])
			used += (size_t)snprintf(buf + used, n - used, "%s%s %s instead of %s", used ? ", " : "",
						 sw->axes[i].name, sw->axes[i].values[rb->value[i]],
						 sw->axes[i].values[ra->value[i]]);
	if (!used)
		snprintf(buf, n, "the same policy");
	return buf;
}

/*
 * Which policy fields and axes of b differ from a's, as a mask (the kind
 * of change): the runners-up show one configuration of each kind.
 */
static uint64_t change_mask(const struct sweep *sw, const struct sweep_row *ra, const struct sweep_row *rb)
{
	struct policy a, b;
	uint64_t m = 0;

	sweep_policy_unpack(&ra->policy, &a);
	sweep_policy_unpack(&rb->policy, &b);
	for (int f = 0; f < PF_COUNT; f++) {
		char x[64], y[64];
		policy_field_str(&a, (enum policy_field)f, x, sizeof x);
		policy_field_str(&b, (enum policy_field)f, y, sizeof y);
		if (strcmp(x, y))
			m |= 1ull << f;
	}
	for (int i = 0; i < sw->naxes; i++)
		if (!sw->axes[i].policy && ra->value[i] != rb->value[i])
			m |= 1ull << (PF_COUNT + i);
	return m;
}

/*
 * Why b's step differs from a's: the (at most two) parts that move most
 * in the direction of the whole step's change; when none moves that way
 * by half a millisecond (the step the same, or nearly), the two that move
 * most either way, said to offset each other when their sum is a tenth of
 * the larger or less.
 */
static const char *reasons(const struct detail *a, const struct detail *b, char *buf, size_t n)
{
	double dstep = b->sum.step_time_s - a->sum.step_time_s, d[P_COUNT];
	int used = 0, pick[2] = { -1, -1 };
	char link[160];

	buf[0] = '\0';
	for (int p = 0; p < P_COUNT; p++)
		d[p] = b->part_s[p] - a->part_s[p];
	for (int either = 0; either < 2 && pick[0] < 0; either++)
		for (int k = 0; k < 2; k++)
			for (int p = 0; p < P_COUNT; p++) {
				if (p == pick[0] || (!either && d[p] * dstep <= 0) || fabs(d[p]) < 5e-4)
					continue;
				if (pick[k] < 0 || fabs(d[p]) > fabs(d[pick[k]]))
					pick[k] = p;
			}
	for (int k = 0; k < 2 && pick[k] >= 0; k++) {
		int p = pick[k];
		used += snprintf(buf + used, n - (size_t)used, "%s%.3f s %s %s", used ? ", " : "", fabs(d[p]),
				 d[p] > 0 ? "more" : "less", part_names[p]);
		if (p <= P_AR)
			used += snprintf(buf + used, n - (size_t)used, " on this %s", link_of(&b->e, link, sizeof link));
	}
	if (pick[1] >= 0 && d[pick[0]] * d[pick[1]] < 0 && fabs(d[pick[0]] + d[pick[1]]) < 0.1 * fabs(d[pick[0]]))
		snprintf(buf + used, n - (size_t)used, ", which offset each other");
	if (!used)
		snprintf(buf, n, "the parts of the step move by less than a millisecond each");
	return buf;
}

/* b's memory against a's: "6.1 GiB more memory (full_grads +4.0 GiB)". */
static const char *memory_change(const struct detail *a, const struct detail *b, char *buf, size_t n)
{
	double d = ((double)b->sum.peak_reserved_bytes - (double)a->sum.peak_reserved_bytes) / GIB;
	int big = -1;
	double bd = 0;

	for (int c = 0; c < MEM_CAT_COUNT; c++) {
		double x = ((double)b->sum.peak_by_cat[c] - (double)a->sum.peak_by_cat[c]) / GIB;
		if (fabs(x) > fabs(bd) && x * d > 0) {
			bd = x;
			big = c;
		}
	}
	if (fabs(d) < 0.05) {
		snprintf(buf, n, "the same memory");
		return buf;
	}
	if (big >= 0 && fabs(bd) >= 0.05)
		snprintf(buf, n, "%.1f GiB %s memory (%s %+.1f GiB)", fabs(d), d > 0 ? "more" : "less",
			 mem_cat_name((enum mem_cat)big), bd);
	else
		snprintf(buf, n, "%.1f GiB %s memory", fabs(d), d > 0 ? "more" : "less");
	return buf;
}

/* The configuration of a row in words: its policy line, and its other axes' values. */
static const char *row_text(const struct sweep *sw, const struct sweep_row *r, const struct experiment *e, char *buf,
			    size_t n)
{
	char line[256], label[256], *p = label;
	size_t used = 0;

	label[0] = '\0';
	for (int i = 0; i < sw->naxes; i++)
		if (!sw->axes[i].policy && sw->axes[i].nvalues > 1 && i != sw->what_if)
			used += (size_t)snprintf(label + used, sizeof label - used, "%s%s=%s", used ? " " : "",
						 sw->axes[i].name, sw->axes[i].values[r->value[i]]);
	snprintf(buf, n, "%s%s%s", report_policy_line(e, line, sizeof line), *p ? "; " : "", label);
	return buf;
}

/* ---- the front and the ranking ------------------------------------------------------- */

static const struct sweep_row *sort_rows; /* qsort's context */

static int by_memory(const void *x, const void *y)
{
	const struct sweep_row *a = &sort_rows[*(const size_t *)x], *b = &sort_rows[*(const size_t *)y];
	if (a->fig.peak_reserved_bytes != b->fig.peak_reserved_bytes)
		return a->fig.peak_reserved_bytes < b->fig.peak_reserved_bytes ? -1 : 1;
	if (a->fig.step_time_s != b->fig.step_time_s)
		return a->fig.step_time_s < b->fig.step_time_s ? -1 : 1;
	return a->index < b->index ? -1 : a->index > b->index;
}

static int by_step(const void *x, const void *y)
{
	const struct sweep_row *a = &sort_rows[*(const size_t *)x], *b = &sort_rows[*(const size_t *)y];
	if (a->fig.step_time_s != b->fig.step_time_s)
		return a->fig.step_time_s < b->fig.step_time_s ? -1 : 1;
	return a->index < b->index ? -1 : a->index > b->index;
}

size_t advise_pareto(const struct sweep_row *rows, size_t n, size_t *out)
{
	size_t m = 0, k = 0;
	double best = INFINITY;

	for (size_t i = 0; i < n; i++)
		if (isfinite(rows[i].fig.step_time_s))
			out[m++] = i;
	sort_rows = rows;
	qsort(out, m, sizeof(*out), by_memory);
	for (size_t i = 0; i < m; i++)
		if (rows[out[i]].fig.step_time_s < best) {
			best = rows[out[i]].fig.step_time_s;
			out[k++] = out[i];
		}
	return k;
}

/* Indices of the timed rows that fit among sel[0..n), fastest first; how many. */
static size_t ranked_fitting(const struct sweep_row *rows, const size_t *sel, size_t n, size_t *out)
{
	size_t m = 0;

	for (size_t i = 0; i < n; i++)
		if (rows[sel[i]].fig.fits && isfinite(rows[sel[i]].fig.step_time_s))
			out[m++] = sel[i];
	sort_rows = rows;
	qsort(out, m, sizeof(*out), by_step);
	return m;
}

/* ---- text ------------------------------------------------------------------------------ */

/* The advice over the rows sel[0..n) (one value of the what-if resource, or all). */
static int advise_rows(const struct sweep *sw, const struct sweep_row *rows, const size_t *sel, size_t n,
		       const struct advise_opts *o, FILE *f)
{
	size_t *rank = xmalloc(sizeof(size_t) * (n + 1)), *front = xmalloc(sizeof(size_t) * (n + 1));
	struct sweep_row *sub = xmalloc(sizeof(*sub) * (n + 1));
	size_t nfit = ranked_fitting(rows, sel, n, rank), nfront, top = o->top > 0 ? (size_t)o->top : RUNNERS_UP;
	struct detail best, other;
	char buf[1024], buf2[512], buf3[256], b1[32], b2[32];
	size_t up[64], nup = 0;
	uint64_t masks[64];
	int rc = 0;

	if (top > 64)
		top = 64;

	for (size_t i = 0; i < n; i++)
		sub[i] = rows[sel[i]];
	nfront = advise_pareto(sub, n, front);
	memset(&best, 0, sizeof best);
	if (nfit)
		detail_of(sw, &rows[rank[0]], &best);
	/* the runners-up: in rank order, the first of each kind of change from the fastest */
	for (size_t i = 1; i < nfit && nup < top && best.ok; i++) {
		uint64_t m = change_mask(sw, &rows[rank[0]], &rows[rank[i]]);
		int seen = 0;
		for (size_t k = 0; k < nup && !seen; k++)
			seen = masks[k] == m;
		if (!seen) {
			masks[nup] = m;
			up[nup++] = i;
		}
	}
	if (o->json) {
		fprintf(f, "{\"configurations\": %zu, \"fitting\": %zu, \"interrupted\": %s, \"best\": ", n, nfit,
			o->interrupted ? "true" : "false");
		if (best.ok) {
			fprintf(f, "{\"index\": %llu, \"configuration\": ", (unsigned long long)rows[rank[0]].index);
			json_str(f, row_text(sw, &rows[rank[0]], &best.e, buf, sizeof buf));
			fprintf(f, ", \"step_time_s\": %.17g, \"mfu\": %.6g, \"peak_reserved_bytes\": %llu, "
				   "\"alloc_retries_step\": %d, \"critical_path\": [", best.sum.step_time_s, best.sum.mfu,
				(unsigned long long)best.sum.peak_reserved_bytes, best.sum.alloc_retries_step);
			for (int i = 0; i < best.sum.ncrit; i++) {
				fprintf(f, "%s{\"ops\": ", i ? ", " : "");
				json_str(f, best.sum.crit_name[i]);
				fprintf(f, ", \"s\": %.17g}", best.sum.crit_s[i]);
			}
			fprintf(f, "]}");
		} else {
			fprintf(f, "null");
		}
		fprintf(f, ", \"runners_up\": [");
		for (size_t k = 0; k < nup; k++) {
			size_t i = up[k];
			detail_of(sw, &rows[rank[i]], &other);
			if (!other.ok)
				continue;
			fprintf(f, "%s{\"rank\": %zu, \"index\": %llu, \"configuration\": ", k ? ", " : "", i + 1,
				(unsigned long long)rows[rank[i]].index);
			json_str(f, row_text(sw, &rows[rank[i]], &other.e, buf, sizeof buf));
			fprintf(f, ", \"step_time_s\": %.17g, \"peak_reserved_bytes\": %llu, \"change\": ",
				other.sum.step_time_s, (unsigned long long)other.sum.peak_reserved_bytes);
			json_str(f, changes(sw, &rows[rank[0]], &best, &rows[rank[i]], &other, buf, sizeof buf));
			fprintf(f, ", \"why\": ");
			json_str(f, reasons(&best, &other, buf2, sizeof buf2));
			fprintf(f, ", \"memory\": ");
			json_str(f, memory_change(&best, &other, buf3, sizeof buf3));
			fprintf(f, "}");
			detail_release(&other);
		}
		fprintf(f, "], \"pareto\": [");
		for (size_t i = 0; i < nfront; i++)
			fprintf(f, "%s{\"index\": %llu, \"step_time_s\": %.17g, \"peak_reserved_bytes\": %llu, \"fits\": %s}",
				i ? ", " : "", (unsigned long long)sub[front[i]].index, sub[front[i]].fig.step_time_s,
				(unsigned long long)sub[front[i]].fig.peak_reserved_bytes,
				sub[front[i]].fig.fits ? "true" : "false");
		fprintf(f, "]}");
		goto out;
	}

	if (!best.ok) {
		uint64_t least = UINT64_MAX, budget = n ? rows[sel[0]].fig.budget_bytes : 0;
		for (size_t i = 0; i < n; i++)
			if (rows[sel[i]].fig.peak_reserved_bytes < least)
				least = rows[sel[i]].fig.peak_reserved_bytes;
		if (n)
			fprintf(f, "nothing fits in %s: the least memory any configuration needs is %s\n",
				gib(budget, b1, sizeof b1), gib(least, b2, sizeof b2));
		else
			fprintf(f, "no configuration\n");
		rc = 1;
	} else {
		const struct sweep_row *br = &rows[rank[0]];
		fprintf(f, "fastest that fits: %.4f s per step, MFU %.1f%%, %.0f tokens/s per GPU, %s of %s\n",
			best.sum.step_time_s, 100 * best.sum.mfu, best.sum.tokens_per_s_per_gpu,
			gib(best.sum.peak_reserved_bytes, b1, sizeof b1), gib(br->fig.budget_bytes, b2, sizeof b2));
		fprintf(f, "  %s\n", row_text(sw, br, &best.e, buf, sizeof buf));
		fprintf(f, "  why it is this fast: its critical path is");
		for (int i = 0; i < best.sum.ncrit; i++)
			fprintf(f, "%s %s %.3f s (%.0f%%)", i ? "," : "", best.sum.crit_name[i], best.sum.crit_s[i],
				100 * best.sum.crit_s[i] / best.sum.step_time_s);
		fprintf(f, "; compute %.3f s, exposed communication %.3f s", best.sum.compute_s, best.sum.exposed_comm_s);
		if (best.sum.exposed_comm_s >= 5e-4) {
			fprintf(f, " (");
			for (int p = P_AG, k = 0; p <= P_COPY; p++)
				if (best.part_s[p] >= 5e-4)
					fprintf(f, "%s%s %.3f s", k++ ? ", " : "", part_names[p] + 8, best.part_s[p]);
			fprintf(f, ") on %s", fabric(&best.e, buf2, sizeof buf2));
		}
		fprintf(f, "\n");
		/* it fits only by flushing the caching allocator's cache at the GPU's memory: each flush is in its step */
		if (summary_allocator_line(&best.e, &best.sum, buf2, sizeof buf2))
			fprintf(f, "  at the GPU's memory, %s\n", buf2);
		if (nup)
			fprintf(f, "runners-up, the fastest of each kind of change (what to change, what it does):\n");
		for (size_t k = 0; k < nup; k++) {
			size_t i = up[k];
			const struct sweep_row *r = &rows[rank[i]];
			detail_of(sw, r, &other);
			if (!other.ok)
				continue;
			fprintf(f, "  %zu. %.4f s (%+.4f s, %+.1f%%): %s: %s; %s\n", i + 1, other.sum.step_time_s,
				other.sum.step_time_s - best.sum.step_time_s,
				100 * (other.sum.step_time_s / best.sum.step_time_s - 1),
				changes(sw, br, &best, r, &other, buf, sizeof buf), reasons(&best, &other, buf2, sizeof buf2),
				memory_change(&best, &other, buf3, sizeof buf3));
			detail_release(&other);
		}
	}
	fprintf(f, "Pareto front, step time against peak reserved memory (%zu configurations; none is both "
		   "faster and smaller):\n", nfront);
	fprintf(f, "  %10s %12s %5s  %s\n", "step_s", "peak", "fits", "configuration");
	for (size_t j = 0; j < nfront && j < PARETO_SHOWN; j++) {
		/* at most PARETO_SHOWN points, spread evenly, both ends included */
		size_t i = nfront <= PARETO_SHOWN ? j : j * (nfront - 1) / (PARETO_SHOWN - 1);
		const struct sweep_row *r = &sub[front[i]];
		struct experiment e;
		if (sweep_experiment_of(sw, r, &e) != 0)
			continue;
		fprintf(f, "  %10.4f %12s %5s  %s\n", r->fig.step_time_s, report_bytes(r->fig.peak_reserved_bytes, b1, sizeof b1),
			r->fig.fits ? "yes" : "NO", row_text(sw, r, &e, buf, sizeof buf));
		config_release(&e);
	}
out:
	detail_release(&best);
	free(rank);
	free(front);
	free(sub);
	return rc;
}

/* ---- what if ---------------------------------------------------------------------------- */

/* Row i in place of *best (a row index, -1 for none) when it fits and is faster (ties: the lower index). */
static void faster(const struct sweep_row *rows, uint64_t i, long *best)
{
	const struct sweep_row *r = &rows[i];

	if (!r->fig.fits || !isfinite(r->fig.step_time_s))
		return;
	if (*best < 0 || r->fig.step_time_s < rows[*best].fig.step_time_s ||
	    (r->fig.step_time_s == rows[*best].fig.step_time_s && r->index < rows[*best].index))
		*best = (long)i;
}

/*
 * The value of the what-if axis whose advice is given in full: the base
 * experiment's own, or where the list lacks it, the listed value nearest
 * it (a number; the first value otherwise). Its own value in own (n bytes),
 * "" when it is the listed one.
 */
static int what_if_base(const struct sweep *sw, char *own, size_t n)
{
	const struct sweep_axis *a = &sw->axes[sw->what_if];
	char cur[CONFIG_PATH_MAX + 8];
	int near = 0;
	double x, y, best = INFINITY;

	own[0] = '\0';
	if (config_get(&sw->base, a->section, a->name, cur, sizeof cur) != 0)
		return 0;
	for (int v = 0; v < a->nvalues; v++)
		if (!strcmp(a->values[v], cur))
			return v;
	snprintf(own, n, "%s", cur);
	if (config_parse_real(cur, &x) != CONFIG_NUMBER_OK)
		return 0;
	for (int v = 0; v < a->nvalues; v++)
		if (config_parse_real(a->values[v], &y) == CONFIG_NUMBER_OK && fabs(y - x) < best) {
			best = fabs(y - x);
			near = v;
		}
	return near;
}

/*
 * Whether two rows' policies are one: a shard group the sharding derives
 * (fsdp and zero2: the world, ddp: 1) is no choice, and follows the nodes
 * of a what-if over them; hsdp's is.
 */
static int same_policy(const struct sweep_policy *a, const struct sweep_policy *b)
{
	struct sweep_policy x = *a, y = *b;

	if (x.sharding != SHARD_HSDP)
		x.shard_group = 0;
	if (y.sharding != SHARD_HSDP)
		y.shard_group = 0;
	return !memcmp(&x, &y, sizeof x);
}

static int what_if(const struct sweep *sw, const struct explore_result *res, const struct advise_opts *o, FILE *f)
{
	const struct sweep_axis *a = &sw->axes[sw->what_if];
	size_t *sel = xmalloc(sizeof(size_t) * (res->nrows + 1)), n;
	long *best = xmalloc(sizeof(long) * (size_t)a->nvalues);
	long (*fam)[SHARD_COUNT] = xmalloc(sizeof(*fam) * (size_t)a->nvalues);
	char buf[512], own[CONFIG_PATH_MAX + 8];
	int base_value = what_if_base(sw, own, sizeof own), rc = 0, nfit = 0;
	/* the fastest fitting row at each value, and of each sharding there: one pass over the rows */
	for (int v = 0; v < a->nvalues; v++) {
		best[v] = -1;
		for (int sh = 0; sh < SHARD_COUNT; sh++)
			fam[v][sh] = -1;
	}
	for (uint64_t i = 0; i < res->nrows; i++) {
		int v = res->rows[i].value[sw->what_if];
		faster(res->rows, i, &best[v]);
		faster(res->rows, i, &fam[v][res->rows[i].policy.sharding]);
	}
	if (o->json) {
		fprintf(f, ", \"what_if\": {\"key\": \"%s.%s\", \"values\": [", a->section, a->name);
		for (int v = 0; v < a->nvalues; v++) {
			fprintf(f, "%s{\"value\": ", v ? ", " : "");
			json_str(f, a->values[v]);
			fprintf(f, ", \"best_index\": %ld, \"best_step_time_s\": %.17g, \"by_sharding\": {", best[v] < 0 ? -1L :
				(long)res->rows[best[v]].index, best[v] < 0 ? NAN : res->rows[best[v]].fig.step_time_s);
			for (int sh = 0, k = 0; sh < SHARD_COUNT; sh++)
				if (fam[v][sh] >= 0)
					fprintf(f, "%s\"%s\": %.17g", k++ ? ", " : "", sharding_names[sh],
						res->rows[fam[v][sh]].fig.step_time_s);
			fprintf(f, "}}");
		}
		fprintf(f, "], \"at\": ");
		json_str(f, a->values[base_value]);
		fprintf(f, ", \"advice\": ");
	} else {
		fprintf(f, "what if %s.%s changes: the fastest configuration that fits at each value\n", a->section, a->name);
		fprintf(f, "  %14s %10s %6s", a->name, "step_s", "MFU%");
		for (int sh = 0; sh < SHARD_COUNT; sh++)
			fprintf(f, " %8s", sharding_names[sh]);
		fprintf(f, "  fastest\n");
		for (int v = 0; v < a->nvalues; v++) {
			struct experiment e;
			fprintf(f, "  %14s", a->values[v]);
			if (best[v] < 0) {
				fprintf(f, " %10s %6s", "-", "-");
			} else {
				fprintf(f, " %10.4f %6.1f", res->rows[best[v]].fig.step_time_s, 100 * res->rows[best[v]].fig.mfu);
			}
			for (int sh = 0; sh < SHARD_COUNT; sh++)
				if (fam[v][sh] >= 0)
					fprintf(f, " %8.4f", res->rows[fam[v][sh]].fig.step_time_s);
				else
					fprintf(f, " %8s", "-");
			if (best[v] >= 0 && sweep_experiment_of(sw, &res->rows[best[v]], &e) == 0) {
				fprintf(f, "  %s\n", report_policy_line(&e, buf, sizeof buf));
				config_release(&e);
			} else {
				fprintf(f, "  nothing fits\n");
			}
		}
		/*
		 * where the fastest changes: its sharding family, then any of its
		 * policy, from each value where one fits to the next where one fits
		 */
		int changes_seen = 0;
		for (int v = 1, u = best[0] >= 0 ? 0 : -1; v < a->nvalues; v++) {
			long p = u >= 0 ? best[u] : -1, q = best[v];
			if (q < 0)
				continue;
			int from = u;
			u = v;
			if (p < 0)
				continue;
			const struct sweep_row *rp = &res->rows[p], *rq = &res->rows[q];
			if (same_policy(&rp->policy, &rq->policy))
				continue;
			if (!changes_seen++)
				fprintf(f, "  where the fastest changes:\n");
			if (rp->policy.sharding != rq->policy.sharding) {
				long qp = fam[v][rp->policy.sharding];
				fprintf(f, "    between %s and %s: %s overtakes %s (at %s: %.4f s against %s)\n",
					a->values[from], a->values[v], sharding_names[rq->policy.sharding],
					sharding_names[rp->policy.sharding], a->values[v], rq->fig.step_time_s,
					qp >= 0 ? (snprintf(buf, sizeof buf, "%.4f s", res->rows[qp].fig.step_time_s), buf)
						: "nothing that fits");
			} else {
				struct experiment ep, eq;
				if (sweep_experiment_of(sw, rp, &ep) == 0) {
					if (sweep_experiment_of(sw, rq, &eq) == 0) {
						char lp[256], lq[256];
						fprintf(f, "    between %s and %s, within %s: %s, then %s\n", a->values[from],
							a->values[v], sharding_names[rq->policy.sharding],
							report_policy_line(&ep, lp, sizeof lp), report_policy_line(&eq, lq, sizeof lq));
						config_release(&eq);
					}
					config_release(&ep);
				}
			}
		}
		for (int v = 0; v < a->nvalues; v++)
			nfit += best[v] >= 0;
		if (!changes_seen && nfit == a->nvalues)
			fprintf(f, "  the fastest is the same policy at every value\n");
		else if (!changes_seen && nfit >= 2)
			fprintf(f, "  the fastest is the same policy at every value where one fits\n");
		if (own[0])
			fprintf(f, "\nat %s = %s (of the values listed, the nearest this experiment's %s):\n", a->name,
				a->values[base_value], own);
		else
			fprintf(f, "\nat %s = %s:\n", a->name, a->values[base_value]);
	}
	n = 0;
	for (uint64_t i = 0; i < res->nrows; i++)
		if (res->rows[i].value[sw->what_if] == base_value)
			sel[n++] = i;
	rc = advise_rows(sw, res->rows, sel, n, o, f);
	if (o->json)
		fprintf(f, "}");
	free(sel);
	free(best);
	free(fam);
	return rc;
}

int advise_print(const struct sweep *sw, const struct explore_result *res, const struct advise_opts *o, FILE *f)
{
	int rc;
	struct advise_opts said = *o;

	said.interrupted = res->interrupted;
	o = &said;
	if (!o->json) {
		/* the setting of the detailed advice: its fastest configuration's, else its first one's */
		const struct sweep_row *r = res->nrows ? &res->rows[0] : NULL;
		struct experiment e;
		char own[CONFIG_PATH_MAX + 8];
		int base_value = sw->what_if >= 0 ? what_if_base(sw, own, sizeof own) : -1;
		for (uint64_t i = 0; i < res->nrows; i++) {
			const struct sweep_row *x = &res->rows[i];
			if (base_value >= 0 && x->value[sw->what_if] != base_value)
				continue;
			if (!r || (base_value >= 0 && r->value[sw->what_if] != base_value) ||
			    (x->fig.fits && isfinite(x->fig.step_time_s) &&
			     (!r->fig.fits || !isfinite(r->fig.step_time_s) || x->fig.step_time_s < r->fig.step_time_s)))
				r = x;
		}
		if (r && sweep_experiment_of(sw, r, &e) == 0) {
			fprintf(f, "advice for %s on %d x %d %s, seq %d, batch %d", e.model.name, e.cluster.nodes,
				e.cluster.gpus_per_node, e.cluster.gpu.name, e.model.seq, e.run.batch);
			if (sw->global_batch)
				fprintf(f, ", global batch %ld", sw->global_batch);
			else
				fprintf(f, ", %d microbatch%s", e.policy.microbatches, e.policy.microbatches == 1 ? "" : "es");
			if (sw->memory_budget_gib > 0)
				fprintf(f, ", memory budget %g GiB", sw->memory_budget_gib);
			fprintf(f, "%s%s\n", sw->walk ? "; every valid policy" : "",
				res->interrupted ? "; interrupted: of the configurations done before it" : "");
			config_release(&e);
		}
	}
	if (sw->what_if >= 0) {
		if (o->json)
			fprintf(f, "{\"configurations\": %llu, \"interrupted\": %s", (unsigned long long)res->nrows,
				res->interrupted ? "true" : "false");
		rc = what_if(sw, res, o, f);
		if (o->json)
			fprintf(f, "}\n");
		return rc;
	}
	size_t *sel = xmalloc(sizeof(size_t) * (res->nrows + 1));
	for (uint64_t i = 0; i < res->nrows; i++)
		sel[i] = i;
	rc = advise_rows(sw, res->rows, sel, res->nrows, o, f);
	if (o->json)
		fprintf(f, "\n");
	free(sel);
	return rc;
}
