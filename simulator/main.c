/*
 * main.c - ./sim: predict what one optimizer step of a policy costs.
 *
 *   ./sim [EXPERIMENT.ini] [experiment flags] [--schedule] [--json]
 *         [--out FILE.h5] [--trace FILE.json] [--policy all [--top N]]
 *
 * Exit status: 0 on success, 2 on bad input (nothing is written then),
 * 1 when a result could not be written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "config.h"
#include "engine.h"
#include "report.h"
#include "results.h"
#include "schedule.h"
#include "trace.h"

struct opts {
	int schedule, json, all, top, help, bench;
	const char *trace;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: ./sim [EXPERIMENT.ini] [flags]\n"
		   "  --schedule          print the op graph of the step, in issue order\n"
		   "  --json              print one JSON object instead of the summary\n"
		   "  --out FILE.h5       append the run to an HDF5 results file\n"
		   "  --trace FILE.json   write a Chrome trace (open it in Perfetto)\n"
		   "  --policy all        simulate every valid policy, ranked by step time\n"
		   "  --top N             with --policy all: print the N fastest only\n"
		   "  --bench N           build and simulate the step N times; print the speed\n");
	config_usage(f);
}

/* Take the simulator's own flags out of argv (they become NULL). -1 on a bad one. */
static int take_own_flags(int argc, char **argv, struct opts *o)
{
	for (int i = 1; i < argc; i++) {
		char *a = argv[i];
		if (!a)
			continue;
		if (!strcmp(a, "--schedule")) {
			o->schedule = 1;
		} else if (!strcmp(a, "--json")) {
			o->json = 1;
		} else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			o->help = 1;
		} else if (!strcmp(a, "--policy=all") || !strcmp(a, "--set=policy.sharding=all") ||
			   (!strcmp(a, "--policy") && i + 1 < argc && argv[i + 1] && !strcmp(argv[i + 1], "all"))) {
			o->all = 1;
			if (!strcmp(a, "--policy"))
				argv[i++] = NULL;
		} else if (!strcmp(a, "--trace") || !strcmp(a, "--top") || !strcmp(a, "--bench")) {
			if (i + 1 >= argc || !argv[i + 1]) {
				fprintf(stderr, "%s: needs a value\n", a);
				return -1;
			}
			if (!strcmp(a, "--trace")) {
				o->trace = argv[i + 1];
			} else {
				char *end;
				long v = strtol(argv[i + 1], &end, 10);
				if (*end || v < 1 || v > 1000000) {
					fprintf(stderr, "%s: '%s' is not an integer from 1 to 1000000\n", a, argv[i + 1]);
					return -1;
				}
				*(!strcmp(a, "--top") ? &o->top : &o->bench) = (int)v;
			}
			argv[i++] = NULL;
		} else {
			continue;
		}
		argv[i] = NULL;
	}
	return 0;
}

/* Simulate one resolved experiment; prints and writes what the options ask for. */
static int run_one(const struct experiment *e, const struct opts *o)
{
	char err[256];
	struct schedule *s = schedule_new(e, err, sizeof(err));
	struct sim_result r;
	struct run_result rr;
	int rc = 0;

	if (!s) {
		fprintf(stderr, "%s: %s\n", e->path[0] ? e->path : "sim", err);
		return 2;
	}
	engine_run(s, e->run.out[0] || o->trace, &r);
	memset(&rr, 0, sizeof(rr));
	rr.source = "sim";
	rr.exp = e;
	rr.sched = s;
	rr.ops = r.ops;
	rr.nmem = r.nmem;
	rr.mem = r.mem;
	report_summarize(s, &r, &rr.sum);
	if (o->schedule)
		schedule_print(s, stdout);
	if (o->json)
		report_json(stdout, e, &rr.sum);
	else
		report_print(stdout, s, &rr.sum);
	if (e->run.out[0] && results_append(e->run.out, &rr) != 0)
		rc = 1;
	if (o->trace && trace_write(o->trace, &rr) != 0)
		rc = 1;
	sim_result_release(&r);
	schedule_free(s);
	return rc;
}

/* Time building and simulating the step, the whole of what ./sim does per policy. */
static int run_bench(const struct experiment *e, int n)
{
	struct timespec t0, t1;
	struct rusage ru;
	uint64_t events = 0;
	int nops = 0;
	double s;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < n; i++) {
		char err[256];
		struct schedule *sc = schedule_new(e, err, sizeof(err));
		struct sim_result r;
		if (!sc) {
			fprintf(stderr, "%s\n", err);
			return 2;
		}
		engine_run(sc, 0, &r);
		events += r.events;
		nops = sc->nops;
		sim_result_release(&r);
		schedule_free(sc);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	getrusage(RUSAGE_SELF, &ru);
	s = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
	printf("%d steps of %d ops: %.1f us per simulated step, %.2f M events/s, peak RSS %.1f MB\n", n, nops,
	       1e6 * s / n, events / s / 1e6, ru.ru_maxrss / 1024.0);
	return 0;
}

/* ---- --policy all ------------------------------------------------------------ */

struct ranked {
	char line[200];
	struct summary sum;
};

static int cmp_ranked(const void *a, const void *b)
{
	const struct ranked *x = a, *y = b;
	if (x->sum.step_time_s != y->sum.step_time_s)
		return x->sum.step_time_s < y->sum.step_time_s ? -1 : 1;
	return strcmp(x->line, y->line);
}

/*
 * Every combination of the policy axes, each resolved through the same
 * rules as a user's experiment: combinations the rules reject are skipped.
 */
static int run_all(int argc, char **argv, const struct experiment *base, const struct opts *o)
{
	static const char *const accums[] = { "sync-each", "no-sync", "defer-replica", "partial:2" };
	static const char *const wraps[] = { "block", "block+io", "whole" };
	int M = base->policy.microbatches, n = 0, cap = 4096, total, best_fit = -1;
	struct ranked *rk = malloc(sizeof(*rk) * cap);
	FILE *quiet = fopen("/dev/null", "w");
	char set[128], line[200];

	if (!rk || !quiet) {
		perror("sim");
		return 1;
	}
	for (int sh = 0; sh < SHARD_COUNT; sh++)
	for (int ac = 0; ac < 4; ac++)
	for (int w = 0; w < 3; w++)
	for (int rs = 0; rs < RESHARD_COUNT; rs++)
	for (int op = 0; op < OPT_COUNT; op++)
	for (int ib = 0; ib < 2; ib++)
	for (int ck = 0; ck < AC_COUNT; ck++)
	for (int of = 0; of < OFF_COUNT; of++) {
		struct experiment e;
		char **args;
		int bad = 0;

		if (M == 1 && ac > 0)
			continue; /* one microbatch: every accumulation policy is the same step */
		if ((sh == SHARD_DDP || sh == SHARD_ZERO2) && rs != RESHARD_YES)
			continue; /* they do not reshard: one entry stands for all */
		args = malloc(sizeof(char *) * (argc + 1));
		if (!args) {
			perror("sim");
			return 1;
		}
		memcpy(args, argv, sizeof(char *) * argc);
		args[argc] = NULL;
		config_init(&e);
		config_errfile = quiet;
		snprintf(set, sizeof(set), "policy.sharding=%s", sharding_names[sh]);
		bad |= config_parse_args(&e, argc, args) != 0;
		bad |= config_set(&e, set, "--policy all") != 0;
		if (sh != SHARD_HSDP)
			bad |= config_set(&e, "policy.shard_group=0", "--policy all") != 0;
		{
			char kv[8][64];
			snprintf(kv[0], 64, "policy.accum=%s", accums[ac]);
			snprintf(kv[1], 64, "policy.wrap=%s", wraps[w]);
			snprintf(kv[2], 64, "policy.reshard=%s", reshard_names[rs]);
			snprintf(kv[3], 64, "policy.optim=%s", optim_names[op]);
			snprintf(kv[4], 64, "policy.optim_in_backward=%s", ib ? "true" : "false");
			snprintf(kv[5], 64, "policy.ac=%s", ac_names[ck]);
			snprintf(kv[6], 64, "policy.offload=%s", offload_names[of]);
			for (int k = 0; k < 7 && !bad; k++)
				bad |= config_set(&e, kv[k], "--policy all") != 0;
		}
		bad |= !bad && config_resolve(&e) != 0;
		config_errfile = NULL;
		free(args);
		if (!bad) {
			char err[256];
			struct schedule *s = schedule_new(&e, err, sizeof(err));
			if (s) {
				struct sim_result r;
				engine_run(s, 0, &r);
				if (n == cap) {
					cap *= 2;
					rk = realloc(rk, sizeof(*rk) * cap);
					if (!rk) {
						perror("sim");
						return 1;
					}
				}
				report_summarize(s, &r, &rk[n].sum);
				snprintf(rk[n].line, sizeof(rk[n].line), "%s",
					 report_policy_line(&e, line, sizeof(line)));
				n++;
				sim_result_release(&r);
				schedule_free(s);
			}
		}
		config_release(&e);
	}
	fclose(quiet);
	qsort(rk, n, sizeof(*rk), cmp_ranked);
	total = n;
	for (int i = 0; i < total && best_fit < 0; i++)
		if (rk[i].sum.fits)
			best_fit = i;
	if (o->top && o->top < n)
		n = o->top;
	if (o->json) {
		printf("[");
		for (int i = 0; i < n; i++)
			printf("%s{\"rank\": %d, \"policy\": \"%s\", \"step_time_s\": %.9g, \"mfu\": %.6g, "
			       "\"tokens_per_s_per_gpu\": %.9g, \"peak_reserved_bytes\": %llu, \"fits\": %s}",
			       i ? ",\n " : "", i + 1, rk[i].line, rk[i].sum.step_time_s, rk[i].sum.mfu,
			       rk[i].sum.tokens_per_s_per_gpu, (unsigned long long)rk[i].sum.peak_reserved_bytes,
			       rk[i].sum.fits ? "true" : "false");
		printf("]\n");
	} else {
		char b[32];
		printf("%s on %d x %d %s, seq %d, batch %d, %d microbatches: %d policies\n", base->model.name,
		       base->cluster.nodes, base->cluster.gpus_per_node, base->cluster.gpu.name, base->model.seq,
		       base->run.batch, M, total);
		printf("%4s %10s %6s %12s %5s  %s\n", "rank", "step_s", "MFU%", "peak", "fits", "policy");
		for (int i = 0; i < n; i++)
			printf("%4d %10.4f %6.1f %12s %5s  %s\n", i + 1, rk[i].sum.step_time_s, 100 * rk[i].sum.mfu,
			       report_bytes(rk[i].sum.peak_reserved_bytes, b, sizeof(b)), rk[i].sum.fits ? "yes" : "NO",
			       rk[i].line);
		if (best_fit >= 0)
			printf("fastest that fits: rank %d, %.4f s, %s\n", best_fit + 1, rk[best_fit].sum.step_time_s,
			       rk[best_fit].line);
		else
			printf("no policy fits in %s\n", report_bytes(rk[0].sum.gpu_bytes, b, sizeof(b)));
	}
	free(rk);
	return 0;
}

int main(int argc, char **argv)
{
	struct experiment e;
	struct opts o = { 0 };
	char **saved = malloc(sizeof(char *) * (argc + 1));
	int rc;

	if (!saved)
		return 1;
	rc = take_own_flags(argc, argv, &o) != 0 ? 2 : 0;
	if (rc || o.help) {
		free(saved);
		if (!rc)
			usage(stdout);
		return rc;
	}
	memcpy(saved, argv, sizeof(char *) * argc);
	saved[argc] = NULL;
	config_init(&e);
	if (config_parse_args(&e, argc, argv) != 0 || config_check_leftovers(argc, argv, "./sim") != 0 ||
	    config_resolve(&e) != 0) {
		config_release(&e);
		free(saved);
		return 2;
	}
	if (o.bench) {
		rc = run_bench(&e, o.bench);
	} else if (o.all) {
		if (e.run.out[0] || o.trace || o.schedule) {
			fprintf(stderr, "--policy all: --out, --trace and --schedule need a single policy\n");
			rc = 2;
		} else {
			rc = run_all(argc, saved, &e, &o);
		}
	} else {
		rc = run_one(&e, &o);
	}
	config_release(&e);
	free(saved);
	return rc;
}
