/*
 * test_sweep.c - sweep files and their configurations (core/sweep.c),
 * the rows a sweep makes (simulator/explore.c, one rank) and the Pareto
 * front of the advisor: values and ranges read through the key table,
 * the enumeration order, the reasons a candidate is skipped, the global
 * batch, the policy walk, seeking, and rows equal to the same
 * configurations simulated on their own, bit for bit.
 */
#include <CUnit/CUnit.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "advise.h"
#include "config.h"
#include "engine.h"
#include "explore.h"
#include "schedule.h"
#include "summary.h"
#include "sweep.h"
#include "testutil.h"

/* A sweep file with body, whose [sweep] experiment is experiments/llama3.ini; loaded and planned. */
static int sweep_from(struct sweep *sw, const char *body)
{
	char path[64] = "/tmp/test_sweep_XXXXXX", exp[PATH_MAX];
	int fd = mkstemp(path), rc;
	FILE *f;

	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_FATAL(realpath("experiments/llama3.ini", exp) != NULL);
	f = fdopen(fd, "w");
	fprintf(f, "[sweep]\nexperiment = %s\n%s", exp, body);
	fclose(f);
	rc = sweep_load(sw, path);
	unlink(path);
	if (rc == 0)
		rc = sweep_plan(sw, NULL, NULL);
	return rc;
}

static int axis_of(const struct sweep *sw, const char *name)
{
	for (int i = 0; i < sw->naxes; i++)
		if (!strcmp(sw->axes[i].name, name))
			return i;
	return -1;
}

/*
 * A row's policy (sweep_policy_pack) is the policy, every field of it: a
 * field left out of the packing comes back as its default. Each field
 * here holds a value of its own (struct policy is ints and enums alone),
 * so a field added to struct policy and not packed fails this.
 */
static void test_policy_pack_roundtrip(void)
{
	struct policy p, q;
	struct sweep_policy o;
	int *field = (int *)&p;
	const size_t nfields = sizeof p / sizeof(int);

	_Static_assert(sizeof(struct policy) % sizeof(int) == 0, "struct policy: ints and enums");
	for (size_t i = 0; i < nfields; i++)
		field[i] = 1 + (int)(i % 3);
	p.ac = AC_PER_LAYER;
	p.ac_k = 7;
	p.partial_k = 5;
	p.wrap_k = 6;
	p.microbatches = 9;
	p.shard_group = 12;
	sweep_policy_pack(&p, &o);
	sweep_policy_unpack(&o, &q);
	for (size_t i = 0; i < nfields; i++)
		CU_ASSERT_EQUAL(((const int *)&q)[i], field[i]);
}

static void test_values_and_order(void)
{
	struct sweep sw;
	int a;

	CU_ASSERT_FATAL(sweep_from(&sw, "[cluster]\nnodes = 1, 2,\n  4\ninter_gbps = 6.25..50 times 2\n"
					 "intra_gbps = 100..300 step 100\n[policy]\nsharding = fsdp, hsdp\n") == 0);
	CU_ASSERT_EQUAL(sw.naxes, 4);
	a = axis_of(&sw, "nodes");
	CU_ASSERT_EQUAL_FATAL(sw.axes[a].nvalues, 3);
	CU_ASSERT_STRING_EQUAL(sw.axes[a].values[2], "4");
	a = axis_of(&sw, "inter_gbps");
	CU_ASSERT_EQUAL_FATAL(sw.axes[a].nvalues, 4);
	CU_ASSERT_STRING_EQUAL(sw.axes[a].values[0], "6.25");
	CU_ASSERT_STRING_EQUAL(sw.axes[a].values[3], "50");
	CU_ASSERT(sw.axes[a].price_only);
	a = axis_of(&sw, "intra_gbps");
	CU_ASSERT_EQUAL_FATAL(sw.axes[a].nvalues, 3);
	CU_ASSERT_STRING_EQUAL(sw.axes[a].values[1], "200");
	CU_ASSERT(!sw.axes[axis_of(&sw, "nodes")].price_only);
	/* schedule axes outermost, the pricing ones inside */
	CU_ASSERT_EQUAL(sw.nouter, 2);
	CU_ASSERT_STRING_EQUAL(sw.axes[sw.order[0]].name, "nodes");
	CU_ASSERT_STRING_EQUAL(sw.axes[sw.order[1]].name, "sharding");
	CU_ASSERT_STRING_EQUAL(sw.axes[sw.order[2]].name, "inter_gbps");
	CU_ASSERT_EQUAL(sw.ninner, 12);
	CU_ASSERT_EQUAL(sw.ncandidates, 72);
	sweep_release(&sw);
	/*
	 * an integer range by a factor rounds each step and keeps each integer
	 * once (1, 1.2, 1.44 are 1; 1.728 to 2.49 are 2; 2.99 is 3; 3.58 is 4);
	 * the smallest global batch, 1
	 */
	CU_ASSERT_FATAL(sweep_from(&sw, "[sweep]\nglobal_batch = 1\n[cluster]\nnodes = 1..4 times 1.2\n") == 0);
	a = axis_of(&sw, "nodes");
	CU_ASSERT_EQUAL_FATAL(sw.axes[a].nvalues, 4);
	for (int v = 0; v < 4; v++)
		CU_ASSERT_EQUAL(atoi(sw.axes[a].values[v]), v + 1);
	CU_ASSERT_EQUAL(sw.global_batch, 1);
	sweep_release(&sw);
}

/* Walk every candidate; counts by status. */
static void tally(const struct sweep *sw, uint64_t count[SWEEP_END + 1], char why[SWEEP_END][256])
{
	struct sweep_iter it;
	struct sweep_row row;
	const struct experiment *e;
	char w[256];

	memset(count, 0, sizeof(uint64_t) * (SWEEP_END + 1));
	sweep_iter_init(&it, sw);
	for (uint64_t i = 0;; i++) {
		enum sweep_status st = sweep_iter_at(&it, i, &e, &row, w, sizeof w);
		count[st]++;
		if (st == SWEEP_END)
			break;
		if (why && st != SWEEP_OK && !why[st][0])
			snprintf(why[st], 256, "%s", w);
	}
	sweep_iter_release(&it);
}

static void test_skips(void)
{
	struct sweep sw;
	uint64_t n[SWEEP_END + 1];
	char why[SWEEP_END][256] = { "" };

	/* 12 combinations: defer-replica needs hsdp (4 break a rule); zero2 with reshard yes is zero2 with no */
	CU_ASSERT_FATAL(sweep_from(&sw, "[policy]\nsharding = fsdp, zero2, hsdp\nreshard = yes, no\n"
					 "accum = sync-each, defer-replica\nmicrobatches = 2\n") == 0);
	CU_ASSERT_EQUAL(sw.ncandidates, 12);
	tally(&sw, n, why);
	CU_ASSERT_EQUAL(n[SWEEP_OK], 7);
	CU_ASSERT_EQUAL(n[SWEEP_INVALID], 4);
	CU_ASSERT_EQUAL(n[SWEEP_DUPLICATE], 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(why[SWEEP_INVALID], "needs policy.sharding = hsdp"));
	CU_ASSERT_PTR_NOT_NULL(strstr(why[SWEEP_DUPLICATE], "policy.reshard = yes resolves to no"));
	sweep_release(&sw);
}

static void test_global_batch(void)
{
	struct sweep sw;
	struct sweep_iter it;
	struct sweep_row row;
	const struct experiment *e;
	uint64_t n[SWEEP_END + 1];

	/* microbatches follow: 48 sequences on 8, 16, 24 ranks of batch 1 */
	CU_ASSERT_FATAL(sweep_from(&sw, "global_batch = 48\n[cluster]\nnodes = 1, 2, 3\n") == 0);
	sweep_iter_init(&it, &sw);
	for (int i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL_FATAL(sweep_iter_at(&it, (uint64_t)i, &e, &row, NULL, 0), SWEEP_OK);
		CU_ASSERT_EQUAL(e->policy.microbatches, 6 / (i + 1));
		CU_ASSERT_EQUAL(row.policy.microbatches, 6 / (i + 1));
	}
	sweep_iter_release(&it);
	sweep_release(&sw);
	/* 32 does not split over 24 ranks */
	CU_ASSERT_FATAL(sweep_from(&sw, "global_batch = 32\n[cluster]\nnodes = 1, 2, 3\n") == 0);
	tally(&sw, n, NULL);
	CU_ASSERT_EQUAL(n[SWEEP_OK], 2);
	CU_ASSERT_EQUAL(n[SWEEP_OFF_BATCH], 1);
	sweep_release(&sw);
	/* with microbatches swept, only the combinations that make the global batch */
	CU_ASSERT_FATAL(sweep_from(&sw, "global_batch = 32\n[cluster]\nnodes = 1, 2, 3\n"
					 "[policy]\nmicrobatches = 1, 2, 4\n") == 0);
	tally(&sw, n, NULL);
	CU_ASSERT_EQUAL(n[SWEEP_OK], 2);
	CU_ASSERT_EQUAL(n[SWEEP_OFF_BATCH], 7);
	sweep_release(&sw);
}

/* sweep_plan's progress: once per combination the walk counts, in order, the last with every candidate. */
struct counted {
	uint64_t calls, last_done, total, candidates;
	int in_order;
};

static void count_progress(void *ctx, uint64_t done, uint64_t total, uint64_t candidates)
{
	struct counted *c = ctx;

	c->in_order &= done == c->last_done + 1 && candidates >= c->candidates;
	c->calls++;
	c->last_done = done;
	c->total = total;
	c->candidates = candidates;
}

static void test_plan_progress(void)
{
	struct experiment base;
	struct sweep sw;
	struct counted c = { .in_order = 1 };

	test_experiment(&base, "model.name=tiny", "cluster.gpu=cpu", NULL);
	CU_ASSERT_FATAL(sweep_of_experiment(&sw, &base, 1) == 0);
	CU_ASSERT_FATAL(sweep_add_axis(&sw, "cluster.nodes=1, 2, 4", "--what-if cluster.nodes") == 0);
	CU_ASSERT_FATAL(sweep_add_axis(&sw, "cluster.inter_gbps=10, 20", "--what-if cluster.inter_gbps") == 0);
	CU_ASSERT_FATAL(sweep_plan(&sw, count_progress, &c) == 0);
	CU_ASSERT_EQUAL(c.calls, 3); /* the outer combinations: nodes; inter_gbps only prices */
	CU_ASSERT(c.in_order);
	CU_ASSERT_EQUAL(c.total, 3);
	CU_ASSERT_EQUAL(c.candidates, sw.ncandidates);
	sweep_release(&sw);
	config_release(&base);
}

/* Every row of a walk equals the rows seen seeking with jumps. */
static void test_walk_and_seek(void)
{
	struct experiment base;
	struct sweep sw;
	struct sweep_iter it;
	struct sweep_row *rows, row;
	const struct experiment *e;
	enum sweep_status *st;

	test_experiment(&base, "model.name=tiny", "cluster.gpu=cpu", "cluster.nodes=1", "cluster.gpus_per_node=2",
			"policy.microbatches=2", "policy.precision=fp32", "run.batch=2", NULL);
	CU_ASSERT_FATAL(sweep_of_experiment(&sw, &base, 1) == 0);
	CU_ASSERT_FATAL(sweep_add_axis(&sw, "cluster.inter_gbps=10, 20", "--what-if cluster.inter_gbps") == 0);
	CU_ASSERT_FATAL(sweep_plan(&sw, NULL, NULL) == 0);
	/* the policy space of tiny (counted by hand in test_policy.c), at each of two speeds */
	CU_ASSERT_EQUAL(sw.ncandidates, 2 * 1728);
	CU_ASSERT_EQUAL(sw.what_if, 0);
	rows = calloc(sw.ncandidates, sizeof(*rows));
	st = calloc(sw.ncandidates, sizeof(*st));
	sweep_iter_init(&it, &sw);
	for (uint64_t i = 0; i < sw.ncandidates; i++)
		st[i] = sweep_iter_at(&it, i, &e, &rows[i], NULL, 0);
	CU_ASSERT_EQUAL(sweep_iter_at(&it, sw.ncandidates, &e, &row, NULL, 0), SWEEP_END);
	sweep_iter_release(&it);
	for (uint64_t i = 0; i < sw.ncandidates; i++)
		CU_ASSERT_EQUAL(st[i], SWEEP_OK);
	/* neighbours share the policy and differ in speed */
	CU_ASSERT(!memcmp(&rows[0].policy, &rows[1].policy, sizeof rows[0].policy));
	CU_ASSERT_NOT_EQUAL(rows[0].value[0], rows[1].value[0]);
	CU_ASSERT(memcmp(&rows[1].policy, &rows[2].policy, sizeof rows[0].policy) != 0);
	/* seeking forward with jumps builds the same candidates */
	sweep_iter_init(&it, &sw);
	for (uint64_t i = 3; i < sw.ncandidates; i += 1 + i % 97) {
		CU_ASSERT_EQUAL_FATAL(sweep_iter_at(&it, i, &e, &row, NULL, 0), SWEEP_OK);
		CU_ASSERT(!memcmp(&row.policy, &rows[i].policy, sizeof row.policy));
		CU_ASSERT(!memcmp(row.value, rows[i].value, sizeof row.value));
		CU_ASSERT_EQUAL(e->policy.sharding, row.policy.sharding);
	}
	sweep_iter_release(&it);
	free(rows);
	free(st);
	sweep_release(&sw);

	/*
	 * two combinations of a schedule axis, each walked: every candidate
	 * valid, in its combination's order, the second's first included (an
	 * index at a combination's first candidate is that combination's)
	 */
	CU_ASSERT_FATAL(sweep_of_experiment(&sw, &base, 1) == 0);
	CU_ASSERT_FATAL(sweep_add_axis(&sw, "cluster.gpus_per_node=2, 4", "--what-if cluster.gpus_per_node") == 0);
	CU_ASSERT_FATAL(sweep_plan(&sw, NULL, NULL) == 0);
	CU_ASSERT_EQUAL_FATAL(sw.nouter_combos, 2);
	sweep_iter_init(&it, &sw);
	for (uint64_t i = 0; i < sw.ncandidates; i++) {
		int second = i >= sw.outer_first[1];
		CU_ASSERT_EQUAL_FATAL(sweep_iter_at(&it, i, &e, &row, NULL, 0), SWEEP_OK);
		CU_ASSERT_EQUAL(row.value[0], second);
		CU_ASSERT_EQUAL(e->cluster.gpus_per_node, second ? 4 : 2);
	}
	sweep_iter_release(&it);
	sweep_release(&sw);
	config_release(&base);
}

/*
 * The rows of a sweep (schedules shared between speeds) equal each
 * configuration built from flags and simulated on its own, bit for bit.
 */
static void test_rows_equal_single_runs(void)
{
	struct sweep sw;
	struct explore_opts o = { NULL, 0, 1, 0 };
	struct explore_result res;

	CU_ASSERT_FATAL(sweep_from(&sw, "[cluster]\nnodes = 1, 2\ninter_gbps = 12.5, 50\n"
					 "[policy]\nsharding = fsdp, hsdp\nmicrobatches = 1, 2\n") == 0);
	CU_ASSERT_EQUAL_FATAL(explore_run(&sw, &o, &res), 0);
	CU_ASSERT_EQUAL(res.nrows, 16);
	for (uint64_t i = 0; i < res.nrows; i++) {
		const struct sweep_row *r = &res.rows[i];
		struct experiment e;
		struct schedule *s;
		struct sim_result sim;
		struct summary sum;
		char kv[128], err[256];
		config_init_job(&e);
		CU_ASSERT_FATAL(config_load(&e, "experiments/llama3.ini") == 0);
		for (int a = 0; a < sw.naxes; a++) {
			snprintf(kv, sizeof kv, "%s.%s=%s", sw.axes[a].section, sw.axes[a].name,
				 sw.axes[a].values[r->value[a]]);
			CU_ASSERT_FATAL(config_set(&e, kv, "--set") == 0);
		}
		CU_ASSERT_FATAL(config_resolve(&e) == 0);
		s = schedule_new(&e, err, sizeof err);
		CU_ASSERT_FATAL(s != NULL);
		CU_ASSERT_FATAL(engine_run(s, 0, &sim, err, sizeof err) == 0);
		summary_of_step(s, sim.ops, sim.step_ns, &sim.peaks, &sum);
		CU_ASSERT(r->fig.step_time_s == sum.step_time_s);
		CU_ASSERT(r->fig.compute_s == sum.compute_s);
		CU_ASSERT(r->fig.exposed_comm_s == sum.exposed_comm_s);
		CU_ASSERT(r->fig.mfu == sum.mfu);
		CU_ASSERT_EQUAL(r->fig.comm_bytes_per_gpu, sum.comm_bytes_per_gpu);
		CU_ASSERT_EQUAL(r->fig.peak_reserved_bytes, sum.peak_reserved_bytes);
		CU_ASSERT_EQUAL(r->fig.fits, sum.fits);
		sim_result_release(&sim);
		schedule_free(s);
		config_release(&e);
	}
	explore_result_release(&res);
	sweep_release(&sw);
}

static void test_must_fit(void)
{
	struct sweep sw;
	struct explore_opts o = { NULL, 0, 1, 0 };
	struct explore_result res;
	int timed = 0, untimed = 0;

	CU_ASSERT_FATAL(sweep_from(&sw, "memory_budget_gib = 40\nmust_fit = true\n[policy]\nac = none, full\n"
					 "sharding = fsdp, ddp\n") == 0);
	CU_ASSERT_EQUAL_FATAL(explore_run(&sw, &o, &res), 0);
	CU_ASSERT_EQUAL(res.nrows, 4);
	for (uint64_t i = 0; i < res.nrows; i++) {
		const struct sweep_figures *f = &res.rows[i].fig;
		CU_ASSERT_EQUAL(f->budget_bytes, 40ull << 30);
		CU_ASSERT_EQUAL(f->fits, f->peak_reserved_bytes <= f->budget_bytes);
		if (f->fits) {
			CU_ASSERT(isfinite(f->step_time_s) && f->step_time_s > 0);
			timed++;
		} else {
			CU_ASSERT(isnan(f->step_time_s));
			CU_ASSERT(f->peak_reserved_bytes > 0 && f->comm_bytes_per_gpu > 0);
			untimed++;
		}
	}
	/* ddp keeps the whole model state (16 bytes a parameter of 8 B): it never fits in 40 GiB */
	CU_ASSERT(timed >= 1 && untimed >= 2);
	explore_result_release(&res);
	sweep_release(&sw);
}

static void test_pareto(void)
{
	/* (step, peak): a (3, 10), b (2, 20), c (2.5, 30) dominated by b, d (1, 40), e (4, 5), f untimed */
	static const double step[] = { 3, 2, 2.5, 1, 4, NAN };
	static const uint64_t peak[] = { 10, 20, 30, 40, 5, 1 };
	struct sweep_row rows[6];
	size_t front[6], n;

	memset(rows, 0, sizeof rows);
	for (int i = 0; i < 6; i++) {
		rows[i].index = (uint64_t)i;
		rows[i].fig.step_time_s = step[i];
		rows[i].fig.peak_reserved_bytes = peak[i];
	}
	n = advise_pareto(rows, 6, front);
	CU_ASSERT_EQUAL_FATAL(n, 4);
	CU_ASSERT_EQUAL(front[0], 4);
	CU_ASSERT_EQUAL(front[1], 0);
	CU_ASSERT_EQUAL(front[2], 1);
	CU_ASSERT_EQUAL(front[3], 3);
}

/* An empty value in a list is an error (strtok skipped "1,,2"); a ',' ending a line continues the list on an indented one. */
static void test_empty_values(void)
{
	static const char *const bad[] = {
		"[cluster]\nnodes = 1,,2\n", "[cluster]\nnodes = ,1\n", "[cluster]\nnodes = 1, 2,\n",
		"[cluster]\nnodes = 1, 2,\ngpus_per_node = 4\n", "[cluster]\nnodes = 1, 2,\n  ,4\n",
		"[cluster]\nnodes = 1, 2, ; more to come\n[policy]\nsharding = fsdp, hsdp\n",
	};
	struct experiment base;
	struct sweep sw;
	FILE *saved = stderr;

	stderr = fopen("/dev/null", "w");
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CU_ASSERT(sweep_from(&sw, bad[i]) != 0);
		if (sweep_from(&sw, bad[i]) == 0) {
			fprintf(saved, "\naccepted: %s\n", bad[i]);
			sweep_release(&sw);
		}
	}
	config_init_job(&base);
	CU_ASSERT_FATAL(config_resolve(&base) == 0);
	CU_ASSERT_FATAL(sweep_of_experiment(&sw, &base, 1) == 0);
	CU_ASSERT(sweep_add_axis(&sw, "cluster.inter_gbps=1, 2,", "--what-if cluster.inter_gbps") != 0);
	CU_ASSERT(sweep_add_axis(&sw, "cluster.inter_gbps=1,,2", "--what-if cluster.inter_gbps") != 0);
	sweep_release(&sw);
	config_release(&base);
	fclose(stderr);
	stderr = saved;
	/* continued past a blank line and a comment */
	CU_ASSERT_FATAL(sweep_from(&sw, "[cluster]\nnodes = 1, 2,\n\n; then\n  4,\n  8\n") == 0);
	CU_ASSERT_EQUAL(sw.axes[axis_of(&sw, "nodes")].nvalues, 4);
	sweep_release(&sw);
}

static void test_axis_flags(void)
{
	struct experiment base;
	struct sweep sw;
	FILE *saved = stderr;

	config_init_job(&base);
	CU_ASSERT_FATAL(config_resolve(&base) == 0);
	CU_ASSERT_FATAL(sweep_of_experiment(&sw, &base, 1) == 0);
	stderr = fopen("/dev/null", "w");
	/* a policy key is a choice of the walk, not a resource; bad values are the key table's errors */
	CU_ASSERT(sweep_add_axis(&sw, "policy.sharding=fsdp, hsdp", "--what-if policy.sharding") != 0);
	CU_ASSERT(sweep_add_axis(&sw, "cluster.nodes=1, two", "--what-if cluster.nodes") != 0);
	CU_ASSERT(sweep_add_axis(&sw, "cluster.nodez=1, 2", "--what-if cluster.nodez") != 0);
	fclose(stderr);
	stderr = saved;
	CU_ASSERT_EQUAL(sw.naxes, 0);
	CU_ASSERT(sweep_add_axis(&sw, "cluster.gpu=a100-80g, h100-sxm, h200", "--what-if cluster.gpu") == 0);
	CU_ASSERT_EQUAL(sw.naxes, 1);
	CU_ASSERT_EQUAL(sw.what_if, 0);
	CU_ASSERT(!sw.axes[0].price_only); /* the GPU's peak rate is the schedule's */
	sweep_release(&sw);
	config_release(&base);
}

void suite_sweep(void)
{
	CU_pSuite s = CU_add_suite("sweep", NULL, NULL);
	CU_add_test(s, "a row's policy is every field of the policy", test_policy_pack_roundtrip);
	CU_add_test(s, "values, ranges and order", test_values_and_order);
	CU_add_test(s, "skipped candidates", test_skips);
	CU_add_test(s, "global batch", test_global_batch);
	CU_add_test(s, "policy walk and seeking", test_walk_and_seek);
	CU_add_test(s, "rows equal single runs", test_rows_equal_single_runs);
	CU_add_test(s, "must fit", test_must_fit);
	CU_add_test(s, "Pareto front", test_pareto);
	CU_add_test(s, "what-if axes", test_axis_flags);
	CU_add_test(s, "an empty value in a list", test_empty_values);
	CU_add_test(s, "planning says how far it counted", test_plan_progress);
}
