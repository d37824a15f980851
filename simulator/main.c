/*
 * main.c - ./sim: predict what one optimizer step of a policy costs.
 *
 *   ./sim [EXPERIMENT.ini] [experiment flags] [--schedule] [--json]
 *         [--out FILE.h5] [--trace FILE.json] [--policy all [--top N]]
 *   ./sim --compare RUN.h5 [--calibration FILE] [--json]
 *
 * Exit status: 0 on success, 2 on bad input (nothing is written then):
 * contradictory flags, or an output path that breaks a rule of
 * core/outfile.h (checked before anything runs); 1 when a result could
 * not be written.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "compare.h"
#include "config.h"
#include "engine.h"
#include "outfile.h"
#include "report.h"
#include "results.h"
#include "schedule.h"
#include "trace.h"
#include "xalloc.h"

struct opts {
	int schedule, json, all, top, help, bench;
	const char *trace, *compare;
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
		   "  --bench N           build and simulate the step N times; print the speed\n"
		   "  --compare RUN.h5 [--calibration FILE] [--json]\n"
		   "                      predict every measured run of RUN.h5 and say how far each\n"
		   "                      prediction is; the predictions are appended to RUN.h5\n");
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
		} else if (!strcmp(a, "--trace") || !strcmp(a, "--top") || !strcmp(a, "--bench") ||
			   !strcmp(a, "--compare")) {
			if (i + 1 >= argc || !argv[i + 1] || !argv[i + 1][0]) {
				fprintf(stderr, "%s: needs a value\n", a);
				return -1;
			}
			if ((!strcmp(a, "--trace") && o->trace) || (!strcmp(a, "--top") && o->top) ||
			    (!strcmp(a, "--bench") && o->bench) || (!strcmp(a, "--compare") && o->compare)) {
				fprintf(stderr, "%s: given twice\n", a);
				return -1;
			}
			if (!strcmp(a, "--trace")) {
				o->trace = argv[i + 1];
			} else if (!strcmp(a, "--compare")) {
				o->compare = argv[i + 1];
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

/*
 * --compare RUN.h5: every measured run rebuilds its own configuration, so
 * the only other flags are --json and the calibration to price with.
 */
static int run_compare(int argc, char **argv, const struct opts *o)
{
	const char *cal = "";
	const char *other = o->schedule ? "--schedule" : o->trace ? "--trace" : o->all ? "--policy all" :
			    o->top ? "--top" : o->bench ? "--bench" : NULL;

	if (other) {
		fprintf(stderr, "--compare and %s cannot be used together: --compare predicts the runs of a file "
				"(allowed with it: --calibration FILE, --json)\n", other);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		if (!argv[i])
			continue;
		if (!strcmp(argv[i], "--calibration") && i + 1 < argc && argv[i + 1]) {
			cal = argv[++i];
		} else if (!strncmp(argv[i], "--calibration=", 14)) {
			cal = argv[i] + 14;
		} else {
			fprintf(stderr, "--compare: '%s' is not allowed here: a measured run brings its own configuration "
					"(allowed: --calibration FILE, --json)\n", argv[i]);
			return 2;
		}
	}
	if (cal[0] && access(cal, R_OK) != 0) {
		fprintf(stderr, "--calibration: %s cannot be read: %s (make one with gpu_run --calibrate)\n", cal,
			strerror(errno));
		return 2;
	}
	if (access(o->compare, R_OK) != 0) {
		fprintf(stderr, "--compare: %s cannot be read: %s\n", o->compare, strerror(errno));
		return 2;
	}
	return compare_file(o->compare, cal, o->json, stdout);
}

/*
 * Flags that contradict each other, named both: 0, or -1 after a message.
 * run.out counts as --out wherever it was set.
 */
static int check_flags(const struct opts *o, const struct experiment *e)
{
	const char *single[] = { e->run.out[0] ? "--out" : NULL, o->trace ? "--trace" : NULL,
				 o->schedule ? "--schedule" : NULL };
	const char *bench_not[] = { o->all ? "--policy all" : NULL, o->json ? "--json" : NULL,
				    o->schedule ? "--schedule" : NULL, e->run.out[0] ? "--out" : NULL,
				    o->trace ? "--trace" : NULL };

	if (o->bench) {
		for (size_t i = 0; i < sizeof bench_not / sizeof bench_not[0]; i++)
			if (bench_not[i]) {
				fprintf(stderr, "--bench and %s cannot be used together: --bench only times the "
						"simulation\n", bench_not[i]);
				return -1;
			}
	}
	if (o->json && o->schedule) {
		fprintf(stderr, "--json and --schedule cannot be used together: --json prints one JSON "
				"object and nothing else\n");
		return -1;
	}
	if (o->top && !o->all) {
		fprintf(stderr, "--top needs --policy all: it keeps the N fastest of the ranking\n");
		return -1;
	}
	if (o->all) {
		for (size_t i = 0; i < sizeof single / sizeof single[0]; i++)
			if (single[i]) {
				fprintf(stderr, "--policy all and %s cannot be used together: %s needs a single "
						"policy\n", single[i], single[i]);
				return -1;
			}
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
	if (engine_run(s, e->run.out[0] || o->trace, &r, err, sizeof(err)) != 0) {
		fprintf(stderr, "%s: %s\n", e->path[0] ? e->path : "sim", err);
		schedule_free(s);
		return 2;
	}
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
	fflush(stdout); /* the report is out before the files are written */
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
		if (engine_run(sc, 0, &r, err, sizeof(err)) != 0) {
			fprintf(stderr, "%s\n", err);
			schedule_free(sc);
			return 2;
		}
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

/* One simulated policy of the walk: what the ranking prints. */
struct ranked {
	struct policy policy;
	int order;               /* in the walk: ties keep it */
	int fits;
	double step_time_s, mfu, tokens_per_s_per_gpu;
	uint64_t peak_reserved_bytes;
};

static int cmp_ranked(const void *a, const void *b)
{
	const struct ranked *x = a, *y = b;
	if (x->step_time_s != y->step_time_s)
		return x->step_time_s < y->step_time_s ? -1 : 1;
	return x->order - y->order;
}

/*
 * Every distinct valid policy (policy_next, core/policy.h) on base's model,
 * cluster and run, ranked by step time. Only the policy of a copy of base
 * changes: policy_next emits resolved, checked policies, so each is built
 * and simulated as it comes. The policy lines are written for the ranks
 * printed only.
 */
static int run_all(const struct experiment *base, const struct opts *o)
{
	struct experiment e = *base; /* shares base's origins: not released */
	struct policy_walk w;
	struct ranked *rk = NULL;
	int n = 0, cap = 0, shown, best_fit = -1;
	uint64_t gpu_bytes = 0;
	char line[256], b[32];

	policy_walk_init(&w, &base->policy, &base->cluster, &base->model);
	while (policy_next(&w, &e.policy)) {
		char err[256];
		struct schedule *s = schedule_new(&e, err, sizeof(err));
		struct sim_result r;
		struct summary sum;

		if (!s) {
			/* policy_check passed it: a rule is missing from policy.c */
			fprintf(stderr, "sim: --policy all: %s: %s\n",
				report_policy_line(&e, line, sizeof(line)), err);
			free(rk);
			return 1;
		}
		if (engine_run(s, 0, &r, err, sizeof(err)) != 0) {
			fprintf(stderr, "sim: %s\n", err);
			schedule_free(s);
			free(rk);
			return 2;
		}
		report_summarize(s, &r, &sum);
		sim_result_release(&r);
		schedule_free(s);
		if (n == cap) {
			rk = xrealloc(rk, sizeof(*rk) * (cap = cap ? 2 * cap : 4096));
		}
		rk[n] = (struct ranked){ e.policy, n, sum.fits, sum.step_time_s, sum.mfu,
					 sum.tokens_per_s_per_gpu, sum.peak_reserved_bytes };
		gpu_bytes = sum.gpu_bytes;
		n++;
	}
	qsort(rk, n, sizeof(*rk), cmp_ranked);
	for (int i = 0; i < n && best_fit < 0; i++)
		if (rk[i].fits)
			best_fit = i;
	shown = o->top && o->top < n ? o->top : n;
	if (o->json) {
		printf("[");
		for (int i = 0; i < shown; i++) {
			e.policy = rk[i].policy;
			printf("%s{\"rank\": %d, \"policy\": \"%s\", \"step_time_s\": %.9g, \"mfu\": %.6g, "
			       "\"tokens_per_s_per_gpu\": %.9g, \"peak_reserved_bytes\": %llu, \"fits\": %s}",
			       i ? ",\n " : "", i + 1, report_policy_line(&e, line, sizeof(line)),
			       rk[i].step_time_s, rk[i].mfu, rk[i].tokens_per_s_per_gpu,
			       (unsigned long long)rk[i].peak_reserved_bytes, rk[i].fits ? "true" : "false");
		}
		printf("]\n");
	} else {
		printf("%s on %d x %d %s, seq %d, batch %d, %d microbatches: %d policies\n", base->model.name,
		       base->cluster.nodes, base->cluster.gpus_per_node, base->cluster.gpu.name, base->model.seq,
		       base->run.batch, base->policy.microbatches, n);
		printf("%4s %10s %6s %12s %5s  %s\n", "rank", "step_s", "MFU%", "peak", "fits", "policy");
		for (int i = 0; i < shown; i++) {
			e.policy = rk[i].policy;
			printf("%4d %10.4f %6.1f %12s %5s  %s\n", i + 1, rk[i].step_time_s, 100 * rk[i].mfu,
			       report_bytes(rk[i].peak_reserved_bytes, b, sizeof(b)), rk[i].fits ? "yes" : "NO",
			       report_policy_line(&e, line, sizeof(line)));
		}
		if (best_fit >= 0) {
			e.policy = rk[best_fit].policy;
			printf("fastest that fits: rank %d, %.4f s, %s\n", best_fit + 1, rk[best_fit].step_time_s,
			       report_policy_line(&e, line, sizeof(line)));
		} else {
			printf("no policy fits in %s\n", report_bytes(gpu_bytes, b, sizeof(b)));
		}
	}
	free(rk);
	return 0;
}

int main(int argc, char **argv)
{
	struct experiment e;
	struct opts o = { 0 };
	int rc;

	rc = take_own_flags(argc, argv, &o) != 0 ? 2 : 0;
	if (rc || o.help) {
		if (!rc)
			usage(stdout);
		return rc;
	}
	if (o.compare)
		return run_compare(argc, argv, &o);
	config_init(&e);
	if (config_parse_args(&e, argc, argv) != 0 || config_check_leftovers(argc, argv, "./sim") != 0 ||
	    config_resolve(&e) != 0) {
		config_release(&e);
		return 2;
	}
	const struct outfile outs[] = { { "run.out =", e.run.out, results_refusal },
					{ "--trace", o.trace, trace_refusal } };
	if (check_flags(&o, &e) != 0 || outfile_check(outs, 2, (const char *const[]){ e.path, NULL }) != 0) {
		config_release(&e);
		return 2;
	}
	if (o.bench) {
		rc = run_bench(&e, o.bench);
	} else if (o.all) {
		rc = run_all(&e, &o);
	} else {
		rc = run_one(&e, &o);
	}
	config_release(&e);
	return rc;
}
