/*
 * report.c - summary, critical path and output of a simulated step.
 */
#include "report.h"

#include "json.h"
#include "summary.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* ---- summary -------------------------------------------------------------- */

/*
 * The op groups of the critical path: an op kind, with the kind of its
 * segment when it has one ("backward block"), and the CPU launch thread.
 */
#define GROUP_LAUNCH (OP_KIND_COUNT * (SEG_KIND_COUNT + 1))
#define GROUP_COUNT (GROUP_LAUNCH + 1)

static int group_of(const struct schedule *s, int op)
{
	const struct op *o = &s->ops[op];
	return o->kind * (SEG_KIND_COUNT + 1) + (o->seg >= 0 ? 1 + (int)s->segs[o->seg].kind : 0);
}

static void group_name(int g, char *buf, int len)
{
	if (g == GROUP_LAUNCH)
		snprintf(buf, len, "cpu launch");
	else if (g % (SEG_KIND_COUNT + 1))
		snprintf(buf, len, "%s %s", op_kind_name(g / (SEG_KIND_COUNT + 1)),
			 segment_name(g % (SEG_KIND_COUNT + 1) - 1));
	else
		snprintf(buf, len, "%s", op_kind_name(g / (SEG_KIND_COUNT + 1)));
}

struct crit { char name[48]; uint64_t ns; };

static int crit_cmp(const void *a, const void *b)
{
	const struct crit *x = a, *y = b;
	if (x->ns != y->ns)
		return x->ns > y->ns ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Walk back from the op that ends last along the constraints that bound each start. */
static void critical_path(const struct schedule *s, const struct sim_result *r, struct summary *out)
{
	uint64_t ns[GROUP_COUNT] = { 0 };
	uint8_t on[GROUP_COUNT] = { 0 };
	struct crit c[GROUP_COUNT];
	int n = 0, op = -1;

	for (int i = 0; i < s->nops; i++)
		if (op < 0 || r->ops[i].end_ns > r->ops[op].end_ns)
			op = i;
	while (op >= 0) {
		uint64_t d = r->ops[op].end_ns - r->ops[op].start_ns;
		int p = r->pred[op], g = group_of(s, op);
		if (d) {
			ns[g] += d;
			on[g] = 1;
		}
		if (p == -2) { /* its launch: back along the launch thread to the start, or to an op it waited for */
			int k = op;
			while (k > 0 && r->launch_by[k] < 0)
				k--;
			on[GROUP_LAUNCH] = 1;
			if (r->launch_by[k] < 0) {
				ns[GROUP_LAUNCH] += r->ops[op].start_ns;
				break;
			}
			ns[GROUP_LAUNCH] += r->ops[op].start_ns - r->ops[r->launch_by[k]].end_ns;
			op = r->launch_by[k];
			continue;
		}
		op = p;
	}
	for (int g = 0; g < GROUP_COUNT; g++)
		if (on[g]) {
			group_name(g, c[n].name, sizeof(c[n].name));
			c[n++].ns = ns[g];
		}
	qsort(c, n, sizeof(c[0]), crit_cmp);
	out->ncrit = n < RESULTS_CRIT_MAX ? n : RESULTS_CRIT_MAX;
	for (int i = 0; i < out->ncrit; i++) {
		memcpy(out->crit_name[i], c[i].name, sizeof(out->crit_name[i]));
		out->crit_s[i] = c[i].ns * 1e-9;
	}
}

void report_summarize(const struct schedule *s, const struct sim_result *r, struct summary *out)
{
	summary_of_step(s, r->ops, r->step_ns, &r->peaks, out);
	critical_path(s, r, out);
}

/* ---- text ------------------------------------------------------------------ */

const char *report_bytes(uint64_t b, char *buf, int len)
{
	double g = b / 1073741824.0;
	if (g >= 0.1 || b == 0)
		snprintf(buf, len, "%.2f GiB", g);
	else
		snprintf(buf, len, "%.1f MiB", b / 1048576.0);
	return buf;
}

const char *report_policy_line(const struct experiment *e, char *buf, int len)
{
	const struct policy *p = &e->policy;
	char acc[32], wr[32], ac[32];

	snprintf(buf, len, "%s %s x%d, wrap %s, reshard %s, %s%s, %s, ac %s, offload %s%s%s%s%s%s%s",
		 sharding_names[p->sharding], policy_accum_str(p, acc, sizeof(acc)), p->microbatches,
		 policy_wrap_str(p, wr, sizeof(wr)), reshard_names[p->reshard], optim_names[p->optim],
		 p->optim_in_backward ? " in backward" : "", precision_names[p->precision], policy_ac_str(p, ac, sizeof(ac)),
		 offload_names[p->offload], p->flat_params ? ", flat params" : "",
		 p->concat_last_only ? " (concat last only)" : "",
		 p->compile == COMPILE_MODEL ? ", loss eager (compile model)" : "",
		 p->sdpa != SDPA_RUNTIME ? ", sdpa " : "", p->sdpa != SDPA_RUNTIME ? sdpa_names[p->sdpa] : "",
		 p->hold_logits ? ", logits held" : "");
	return buf;
}

void report_print(FILE *f, const struct schedule *s, const struct summary *sum)
{
	const struct experiment *e = s->exp;
	char b1[32], b2[32], b3[32], line[256];
	const char *al;

	fprintf(f, "%s on %d x %d %s (%d GPUs), seq %d, batch %d, runtime %s\n", e->model.name,
		e->cluster.nodes, e->cluster.gpus_per_node, e->cluster.gpu.name, s->world, e->model.seq,
		e->run.batch, runtime_names[e->policy.runtime]);
	fprintf(f, "policy: %s\n", report_policy_line(e, line, sizeof(line)));
	if (e->policy.sharding == SHARD_HSDP)
		fprintf(f, "groups: shard %d x replicate %d\n", s->shard_n, s->replica_n);
	fprintf(f, "\n");
	fprintf(f, "step time            %10.4f s\n", sum->step_time_s);
	fprintf(f, "tokens/s per GPU     %10.0f\n", sum->tokens_per_s_per_gpu);
	fprintf(f, "MFU                  %10.1f %%\n", 100 * sum->mfu);
	fprintf(f, "compute              %10.4f s  (%.0f%% of the step)\n", sum->compute_s,
		sum->step_time_s > 0 ? 100 * sum->compute_s / sum->step_time_s : 0);
	fprintf(f, "exposed comm         %10.4f s\n", sum->exposed_comm_s);
	fprintf(f, "comm sent per GPU    %10s\n", report_bytes(sum->comm_bytes_per_gpu, b1, sizeof(b1)));
	fprintf(f, "peak memory          %s allocated, %s reserved, GPU has %s: %s\n",
		report_bytes(sum->peak_alloc_bytes, b1, sizeof(b1)),
		report_bytes(sum->peak_reserved_bytes, b2, sizeof(b2)),
		report_bytes(sum->gpu_bytes, b3, sizeof(b3)),
		sum->fits ? "fits" : "DOES NOT FIT");
	for (int c = 0; c < MEM_CAT_COUNT; c++)
		if (sum->peak_by_cat[c])
			fprintf(f, "  %-18s %s\n", mem_cat_name(c), report_bytes(sum->peak_by_cat[c], b1, sizeof(b1)));
	if (!sum->fits)
		fprintf(f, "  needs %s more than the GPU's %s\n",
			report_bytes(sum->peak_reserved_bytes - sum->gpu_bytes, b1, sizeof(b1)),
			report_bytes(sum->gpu_bytes, b2, sizeof(b2)));
	if ((al = summary_allocator_line(e, sum, line, sizeof(line))))
		fprintf(f, "  %s\n", al);
	fprintf(f, "critical path:");
	for (int i = 0; i < sum->ncrit; i++)
		fprintf(f, "%s %s %.4f s", i ? "," : "", sum->crit_name[i], sum->crit_s[i]);
	fprintf(f, "\n");
}

/* ---- JSON ------------------------------------------------------------------ */

static int is_number(const char *v)
{
	char *end;
	if (!*v)
		return 0;
	strtod(v, &end);
	return *end == 0 && strcmp(v, "inf") && strcmp(v, "nan");
}

struct json_cfg {
	FILE *f;
	char section[32];
	int first;
};

static void json_key(void *ctx, const char *section, const char *key, const char *value)
{
	struct json_cfg *j = ctx;

	if (strcmp(section, j->section)) {
		fprintf(j->f, "%s", j->section[0] ? "}, " : "");
		json_str(j->f, section);
		fprintf(j->f, ": {");
		snprintf(j->section, sizeof(j->section), "%s", section);
		j->first = 1;
	}
	fprintf(j->f, "%s", j->first ? "" : ", ");
	json_str(j->f, key);
	fprintf(j->f, ": ");
	if (is_number(value))
		fprintf(j->f, "%s", value);
	else
		json_str(j->f, value);
	j->first = 0;
}

void report_json(FILE *f, const struct experiment *e, const struct summary *sum)
{
	struct json_cfg j = { f, "", 1 };

	fprintf(f, "{\"step_time_s\": %.9g, \"tokens_per_s_per_gpu\": %.9g, \"mfu\": %.6g, "
		   "\"compute_s\": %.9g, \"exposed_comm_s\": %.9g, \"comm_bytes_per_gpu\": %llu, "
		   "\"peak_alloc_bytes\": %llu, \"peak_reserved_bytes\": %llu, \"gpu_bytes\": %llu, "
		   "\"fits\": %s, \"peak_by_category\": {",
		sum->step_time_s, sum->tokens_per_s_per_gpu, sum->mfu, sum->compute_s, sum->exposed_comm_s,
		(unsigned long long)sum->comm_bytes_per_gpu, (unsigned long long)sum->peak_alloc_bytes,
		(unsigned long long)sum->peak_reserved_bytes, (unsigned long long)sum->gpu_bytes,
		sum->fits ? "true" : "false");
	for (int c = 0; c < MEM_CAT_COUNT; c++)
		fprintf(f, "%s\"%s\": %llu", c ? ", " : "", mem_cat_name(c), (unsigned long long)sum->peak_by_cat[c]);
	fprintf(f, "}, \"critical_path\": [");
	for (int i = 0; i < sum->ncrit; i++) {
		fprintf(f, "%s{\"ops\": ", i ? ", " : "");
		json_str(f, sum->crit_name[i]);
		fprintf(f, ", \"s\": %.9g}", sum->crit_s[i]);
	}
	fprintf(f, "], \"config\": {");
	config_each(e, json_key, &j);
	fprintf(f, "%s}}\n", j.section[0] ? "}" : "");
}
