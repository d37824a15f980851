/*
 * main.c - ./sim: predict what one optimizer step of a policy costs, and
 * explore and advise over many.
 *
 *   ./sim [EXPERIMENT.ini] [experiment flags] [--schedule] [--json]
 *         [--out FILE.h5] [--trace FILE.json]
 *   ./sim [EXPERIMENT.ini] [experiment flags] --policy all [--top N] [--out FILE.h5]
 *   ./sim --sweep SWEEP.ini [--out FILE.h5] [--top N] [--json] [constraints]
 *   ./sim [EXPERIMENT.ini] [experiment flags] --advise [--what-if KEY=VALUES]
 *         [--top N] [--json] [--out FILE.h5] [constraints]
 *   ./sim --compare RUN.h5 [--calibration FILE[@NNNNNN] | none] [--catalog-now] [--json]
 *   constraints: --memory-budget GiB, --global-batch N
 *
 * The sweeps (--policy all, --sweep, --advise) run over MPI under mpirun
 * (explore.h); every rank reads the same input, rank 0 prints and writes.
 *
 * Exit status: 0 on success, 2 on bad input (nothing is written then):
 * contradictory flags, or an output path that breaks a rule of
 * core/outfile.h (checked before anything runs; --compare's file too,
 * which gets the predictions); 1 when a result could
 * not be written; 130 when a sweep was interrupted (its rows so far are
 * written).
 */
#include <errno.h>
#include <fcntl.h>
#ifdef __GLIBC__
#include <malloc.h>
#include <math.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "advise.h"
#include "calibration.h"
#include "compare.h"
#include "config.h"
#include "engine.h"
#include "explore.h"
#include "json.h"
#include "outfile.h"
#include "report.h"
#include "results.h"
#include "schedule.h"
#include "sweep.h"
#include "text.h"
#include "trace.h"
#include "xalloc.h"

#define WHAT_IF_MAX 4

struct opts {
	int schedule, kernels, json, all, top, help, bench, advise, catalog_now;
	const char *trace, *compare, *sweep, *out;
	const char *what_if[WHAT_IF_MAX];
	int nwhat_if;
	double memory_budget_gib;
	long global_batch;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: ./sim [EXPERIMENT.ini] [flags]\n"
		   "  --schedule          print the op graph of the step, in issue order\n"
		   "  --kernels           --schedule with each op's kernels: name, kind, shape or access pattern, FLOPs\n"
		   "                      and bytes (the recipe of its runtime)\n"
		   "  --json              print one JSON object instead of the summary\n"
		   "  --out FILE.h5       append the run to an HDF5 results file\n"
		   "  --trace FILE.json   write a Chrome trace (open it in Perfetto)\n"
		   "  --policy all        simulate every valid policy, ranked by step time\n"
		   "  --top N             with --policy all: print the N fastest only; with --sweep\n"
		   "                      and --advise: the N fastest (default 10) and runners-up (5)\n"
		   "  --sweep SWEEP.ini   simulate every configuration of a sweep file\n"
		   "                      (experiments/README.md); --out FILE.h5 gets one row each\n"
		   "  --advise            the fastest configuration that fits, the runners-up and why,\n"
		   "                      and the Pareto front of step time against memory\n"
		   "  --what-if KEY=VALUES  with --advise: the answer for each value of a resource\n"
		   "                      (--what-if 'cluster.inter_gbps=6.25..100 times 2')\n"
		   "  --memory-budget GiB what fits means (default: the GPU's memory)\n"
		   "  --global-batch N    sequences per optimizer step: microbatches follow\n"
		   "  under mpirun, --policy all, --sweep and --advise share the work among the ranks\n"
		   "  --bench N           build and simulate the step N times; print the speed, and the steps'\n"
		   "                      worth of ops the allocator model issued and skipped\n"
		   "  --compare RUN.h5 [--calibration FILE[@NNNNNN] | none] [--catalog-now] [--json]\n"
		   "                      predict every measured run of RUN.h5 and say how far each\n"
		   "                      prediction is; the predictions are appended to RUN.h5\n"
		   "                      (priced by FILE, by the catalog's constants with none, else\n"
		   "                      by data/calibration/<hardware>-<device>.h5 where it exists;\n"
		   "                      --catalog-now: the GPU's efficiencies and tiles as today's\n"
		   "                      catalog has them, not as each run recorded them)\n");
	config_usage(f);
}

/* The simulator's own flags (usage()), for the flag closest to an unknown one. */
static const char *const own_flags[] = { "--schedule", "--kernels", "--json", "--trace", "--top", "--sweep", "--advise",
					 "--what-if", "--memory-budget", "--global-batch", "--bench", "--compare",
					 "--catalog-now", "--help", NULL };

/* The listing flag given, for messages: --kernels is --schedule with each op's kernels. */
static const char *schedule_flag(const struct opts *o)
{
	return o->kernels ? "--kernels" : "--schedule";
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
		} else if (!strcmp(a, "--kernels")) {
			o->schedule = o->kernels = 1;
		} else if (!strcmp(a, "--json")) {
			o->json = 1;
		} else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			o->help = 1;
		} else if (!strcmp(a, "--policy=all") || !strcmp(a, "--set=policy.sharding=all") ||
			   (!strcmp(a, "--policy") && i + 1 < argc && argv[i + 1] && !strcmp(argv[i + 1], "all"))) {
			o->all = 1;
			if (!strcmp(a, "--policy"))
				argv[i++] = NULL;
		} else if (!strcmp(a, "--catalog-now")) {
			o->catalog_now = 1;
			argv[i] = NULL;
		} else if (!strcmp(a, "--advise")) {
			if (o->advise) {
				text_line(stderr, "%s: given twice", a);
				return -1;
			}
			o->advise = 1;
		} else if (!strcmp(a, "--trace") || !strcmp(a, "--top") || !strcmp(a, "--bench") ||
			   !strcmp(a, "--compare") || !strcmp(a, "--sweep") || !strcmp(a, "--what-if") ||
			   !strcmp(a, "--memory-budget") || !strcmp(a, "--global-batch")) {
			if (i + 1 >= argc || !argv[i + 1] || !argv[i + 1][0]) {
				text_line(stderr, "%s: needs a value", a);
				return -1;
			}
			if ((!strcmp(a, "--trace") && o->trace) || (!strcmp(a, "--top") && o->top) ||
			    (!strcmp(a, "--bench") && o->bench) || (!strcmp(a, "--compare") && o->compare) ||
			    (!strcmp(a, "--sweep") && o->sweep) || (!strcmp(a, "--memory-budget") && o->memory_budget_gib) ||
			    (!strcmp(a, "--global-batch") && o->global_batch)) {
				text_line(stderr, "%s: given twice", a);
				return -1;
			}
			if (!strcmp(a, "--trace")) {
				o->trace = argv[i + 1];
			} else if (!strcmp(a, "--compare")) {
				o->compare = argv[i + 1];
			} else if (!strcmp(a, "--sweep")) {
				o->sweep = argv[i + 1];
			} else if (!strcmp(a, "--what-if")) {
				if (o->nwhat_if == WHAT_IF_MAX) {
					text_line(stderr, "--what-if: at most %d resources", WHAT_IF_MAX);
					return -1;
				}
				o->what_if[o->nwhat_if++] = argv[i + 1];
			} else if (!strcmp(a, "--memory-budget")) {
				double v = 0;
				enum config_number st = config_parse_real(argv[i + 1], &v);
				if (st != CONFIG_NUMBER_OK || !(v > 0 && v <= 1e9)) {
					text_line(stderr, "--memory-budget: '%s' is not a number of GiB from above 0 to 1e9%s",
						  argv[i + 1], config_number_why(argv[i + 1], st));
					return -1;
				}
				o->memory_budget_gib = v;
			} else if (!strcmp(a, "--global-batch")) {
				long long v = 0;
				enum config_number st = config_parse_integer(argv[i + 1], &v);
				if (st != CONFIG_NUMBER_OK || v < 1 || v > (1LL << 40)) {
					text_line(stderr, "--global-batch: '%s' is not an integer from 1 to %lld%s", argv[i + 1],
						  1LL << 40, config_number_why(argv[i + 1], st));
					return -1;
				}
				o->global_batch = (long)v;
			} else {
				long long v = 0;
				enum config_number st = config_parse_integer(argv[i + 1], &v);
				if (st != CONFIG_NUMBER_OK || v < 1 || v > 1000000) {
					text_line(stderr, "%s: '%s' is not an integer from 1 to 1000000%s", a, argv[i + 1],
						  config_number_why(argv[i + 1], st));
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
	/* --policy all tries every sharding: a sharding given beside it would be dropped unseen */
	for (int i = 1; o->all && i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (a && (!strncmp(a, "--policy", 8) || !strncmp(a, "--sharding", 10) ||
			  (!strcmp(a, "--set") && v && !strncmp(v, "policy.sharding=", 16)) ||
			  !strncmp(a, "--set=policy.sharding=", 22))) {
			int with_v = v && (!strcmp(a, "--set") || !strcmp(a, "--policy") || !strcmp(a, "--sharding"));
			text_line(stderr, "--policy all and %s%s%s given together: --policy all tries every sharding", a,
				with_v ? " " : "", with_v ? v : "");
			return -1;
		}
	}
	return 0;
}

/*
 * The file --compare reads, then appends its predictions to, before any
 * is made: a results file (not a directory, a device or another file),
 * one an append may add runs to (results_refusal) and, like --out, in a
 * writable directory and writable itself (core/outfile.h). 0, or -1
 * after a message.
 */
static int check_compare_file(const char *path)
{
	const struct outfile out[] = { { "--compare", path, NULL } }; /* what it holds: checked first */
	const char *why = results_unreadable(path);

	if (!why)
		why = results_refusal(path);
	if (why) {
		text_line(stderr, "--compare: %s: %s", path, why);
		return -1;
	}
	if (outfile_check(out, 1, NULL) != 0) {
		text_line(stderr, "--compare: %s cannot be appended to (the predictions are appended to it): compare a "
				"writable copy", path);
		return -1;
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
	const char *other = o->schedule ? schedule_flag(o) : o->trace ? "--trace" : o->all ? "--policy all" :
			    o->top ? "--top" : o->bench ? "--bench" : o->sweep ? "--sweep" : o->advise ? "--advise" :
			    o->nwhat_if ? "--what-if" : o->memory_budget_gib ? "--memory-budget" :
			    o->global_batch ? "--global-batch" : NULL;

	if (other) {
		text_line(stderr, "--compare and %s cannot be used together: --compare predicts the runs of a file "
				"(allowed with it: --calibration FILE or none, --catalog-now, --json)", other);
		return 2;
	}
	int named = 0; /* a --calibration flag seen */

	for (int i = 1; i < argc; i++) {
		const char *v = NULL;
		if (!argv[i])
			continue;
		if (!strcmp(argv[i], "--calibration")) {
			if (i + 1 >= argc || !argv[i + 1]) {
				text_line(stderr, "--calibration: missing value (a calibration file, FILE@NNNNNN, or none)");
				return 2;
			}
			v = argv[++i];
		} else if (!strncmp(argv[i], "--calibration=", 14)) {
			v = argv[i] + 14;
		}
		if (v) {
			if (named) {
				text_line(stderr, "--calibration is given twice ('%s', then '%s'): one calibration prices a "
						"file's runs", cal, v);
				return 2;
			}
			if (!v[0]) {
				text_line(stderr, "--calibration: an empty value (write a calibration file, FILE@NNNNNN, or none; "
						"without the flag, data/calibration/<hardware>-<device>.h5 where it exists)");
				return 2;
			}
			cal = v;
			named = 1;
		} else {
			text_line(stderr, "--compare: '%s' is not allowed here: a measured run brings its own configuration "
					"(allowed: --calibration FILE or none, --catalog-now, --json)", argv[i]);
			return 2;
		}
	}
	if (calibration_named(cal) && calibration_access(cal) != 0) {
		text_line(stderr, "--calibration: %s cannot be read: %s (make one with gpu_run --calibrate)", cal,
			strerror(errno));
		return 2;
	}
	if (access(o->compare, R_OK) != 0) {
		text_line(stderr, "--compare: %s cannot be read: %s", o->compare, strerror(errno));
		return 2;
	}
	return check_compare_file(o->compare) != 0 ? 2 : compare_file(o->compare, cal, o->catalog_now, o->json, stdout);
}

/*
 * Flags that contradict each other, named both: 0, or -1 after a message.
 * run.out counts as --out wherever it was set.
 */
static int check_flags(const struct opts *o, const struct experiment *e)
{
	const char *single[] = { o->trace ? "--trace" : NULL, o->schedule ? schedule_flag(o) : NULL,
				 o->bench ? "--bench" : NULL };
	const char *bench_not[] = { o->all ? "--policy all" : NULL, o->json ? "--json" : NULL,
				    o->schedule ? schedule_flag(o) : NULL, e->run.out[0] ? "--out" : NULL,
				    o->trace ? "--trace" : NULL };
	const char *many = o->all ? "--policy all" : o->advise ? "--advise" : NULL;

	if (o->bench) {
		for (size_t i = 0; i < sizeof bench_not / sizeof bench_not[0]; i++)
			if (bench_not[i]) {
				text_line(stderr, "--bench and %s cannot be used together: --bench only times the "
						"simulation", bench_not[i]);
				return -1;
			}
	}
	if (o->json && o->schedule) {
		text_line(stderr, "--json and %s cannot be used together: --json prints one JSON "
				"object and nothing else", schedule_flag(o));
		return -1;
	}
	if (o->top && !o->all && !o->advise && !o->sweep) {
		text_line(stderr, "--top needs --policy all, --sweep or --advise: it keeps the N fastest of the ranking");
		return -1;
	}
	if (o->all && o->advise) {
		text_line(stderr, "--policy all and --advise cannot be used together: --advise walks every policy "
				"itself");
		return -1;
	}
	if (many) {
		for (size_t i = 0; i < sizeof single / sizeof single[0]; i++)
			if (single[i]) {
				text_line(stderr, "%s and %s cannot be used together: %s needs a single policy", many,
					single[i], single[i]);
				return -1;
			}
	}
	if (o->nwhat_if && !o->advise) {
		text_line(stderr, "--what-if needs --advise: it asks for the advice at each value of a resource "
				"(a sweep file says it with what_if)");
		return -1;
	}
	if ((o->memory_budget_gib || o->global_batch) && !many) {
		text_line(stderr, "%s needs --policy all, --sweep or --advise: it constrains the configurations "
				"they compare", o->memory_budget_gib ? "--memory-budget" : "--global-batch");
		return -1;
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
		text_line(stderr, "%s: %s", e->path[0] ? e->path : "sim", err);
		return 2;
	}
	if (engine_run(s, e->run.out[0] || o->trace, &r, err, sizeof(err)) != 0) {
		text_line(stderr, "%s: %s", e->path[0] ? e->path : "sim", err);
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
		schedule_print(s, stdout, o->kernels);
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
	uint64_t events = 0, issued = 0, skipped = 0;
	int nops = 0;
	double s;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < n; i++) {
		char err[256];
		struct schedule *sc = schedule_new(e, err, sizeof(err));
		struct sim_result r;
		if (!sc) {
			text_line(stderr, "%s", err);
			return 2;
		}
		if (engine_run(sc, 0, &r, err, sizeof(err)) != 0) {
			text_line(stderr, "%s", err);
			schedule_free(sc);
			return 2;
		}
		events += r.events;
		issued = r.peaks.ops_issued;
		skipped = r.peaks.ops_skipped;
		nops = sc->nops;
		sim_result_release(&r);
		schedule_free(sc);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	getrusage(RUSAGE_SELF, &ru);
	s = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
	printf("%d steps of %d ops: %.1f us per simulated step, %.2f M events/s, peak RSS %.1f MB\n", n, nops,
	       1e6 * s / n, events / s / 1e6, ru.ru_maxrss / 1024.0);
	/* the allocator's share: the run's steps it replayed (core/memory.h, memory_predict) */
	printf("  allocator: %.2f steps' ops issued, %.2f steps' skipped (repeated microbatches)\n",
	       nops ? (double)issued / nops : 0.0, nops ? (double)skipped / nops : 0.0);
	return 0;
}

/* ---- sweeps: --policy all, --sweep, --advise ------------------------------------ */

static int cmp_step(const void *a, const void *b)
{
	const struct sweep_row *x = a, *y = b;
	if (x->fig.step_time_s != y->fig.step_time_s)
		return x->fig.step_time_s < y->fig.step_time_s ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* "1 breaks a rule (...), 2 duplicates, ..." of a sweep's skipped candidates, or "" */
static const char *skipped_text(const struct explore_result *r, char *buf, size_t n)
{
	static const char *const what[SWEEP_END] = { NULL, "break a rule", "are another combination's name",
						     "miss the global batch" };
	size_t used = 0;

	buf[0] = '\0';
	for (int k = 1; k < SWEEP_END && used < n; k++)
		if (r->skipped[k])
			used += (size_t)snprintf(buf + used, n - used, "%s%llu %s (first: %s)", used ? "; " : "",
						 (unsigned long long)r->skipped[k], what[k], r->why[k]);
	return buf;
}

/*
 * A global batch that no candidate could make (none simulated, some
 * skipped for it, the others for a rule) is bad input: said with the
 * first reason, 2; else 0.
 */
static int global_batch_refused(const struct sweep *sw, const struct explore_result *r)
{
	if (r->nrows || r->interrupted || !r->skipped[SWEEP_OFF_BATCH])
		return 0;
	text_line(stderr, "sim: %s: global batch %ld: no configuration makes it (%llu tried; the first: %s)",
		sw->global_batch_where, sw->global_batch, (unsigned long long)r->skipped[SWEEP_OFF_BATCH],
		r->why[SWEEP_OFF_BATCH]);
	return 2;
}

/* One line on how the sweep went: what it simulated, how fast, where the rows are. */
static void sweep_line(FILE *f, const struct explore_result *r, const char *out, uint64_t candidates)
{
	char skip[1024];

	fprintf(f, "%llu configurations of %llu candidates%s in %.1f s on %d rank%s (%.0f configurations per s, %.0f per s "
		   "per rank, %.0f per CPU second)\n", (unsigned long long)r->nrows, (unsigned long long)candidates,
		r->interrupted ? ", interrupted" : "", r->seconds, r->ranks, r->ranks == 1 ? "" : "s",
		r->seconds > 0 ? (double)r->nrows / r->seconds : 0,
		r->seconds > 0 ? (double)r->nrows / r->seconds / r->ranks : 0,
		r->cpu_s > 0 ? (double)r->nrows / r->cpu_s : 0);
	if (skipped_text(r, skip, sizeof skip)[0])
		fprintf(f, "skipped: %s\n", skip);
	if (out && out[0] && r->group[0])
		fprintf(f, "rows: %s, /sweeps/%s\n", out, r->group);
}

/*
 * Every distinct valid policy (policy_next, core/policy.h) on base's model,
 * cluster and run, ranked by step time: a sweep of the policy walk
 * (explore.h). The policy lines are written for the ranks printed only.
 */
static int run_all(const struct experiment *base, const struct opts *o)
{
	struct experiment e = *base; /* shares base's origins: not released */
	struct explore_opts eo = { o->out, !o->json, 1, 0 };
	struct explore_result res;
	struct sweep sw;
	struct sweep_row *rk;
	int n, shown, best_fit = -1, rc;
	uint64_t gpu_bytes = 0;
	char line[256], b[32];

	if (sweep_of_experiment(&sw, base, 1) != 0)
		return 2;
	sweep_set_constraints(&sw, o->global_batch, o->memory_budget_gib);
	if (explore_plan(&sw, !o->json) != 0) {
		sweep_release(&sw);
		return 2;
	}
	rc = explore_run(&sw, &eo, &res);
	if (!explore_is_root())
		goto out;
	if (global_batch_refused(&sw, &res)) {
		rc = 2;
		goto out;
	}
	if (res.skipped[SWEEP_INVALID]) {
		/* policy_next emits checked policies: a rule is missing from policy.c */
		text_line(stderr, "sim: --policy all: %llu policies could not be simulated, the first: %s",
			(unsigned long long)res.skipped[SWEEP_INVALID], res.why[SWEEP_INVALID]);
		rc = rc ? rc : 1;
	}
	rk = res.rows;
	n = (int)res.nrows;
	qsort(rk, n, sizeof(*rk), cmp_step);
	for (int i = 0; i < n && best_fit < 0; i++)
		if (rk[i].fig.fits)
			best_fit = i;
	if (n)
		gpu_bytes = rk[0].fig.budget_bytes;
	shown = o->top && o->top < n ? o->top : n;
	if (o->json) {
		printf("[");
		for (int i = 0; i < shown; i++) {
			sweep_policy_unpack(&rk[i].policy, &e.policy);
			printf("%s{\"rank\": %d, \"policy\": \"%s\", \"step_time_s\": %.9g, \"mfu\": %.6g, "
			       "\"tokens_per_s_per_gpu\": %.9g, \"peak_reserved_bytes\": %llu, \"fits\": %s}",
			       i ? ",\n " : "", i + 1, report_policy_line(&e, line, sizeof(line)),
			       rk[i].fig.step_time_s, rk[i].fig.mfu, rk[i].fig.tokens_per_s_per_gpu,
			       (unsigned long long)rk[i].fig.peak_reserved_bytes, rk[i].fig.fits ? "true" : "false");
		}
		printf("]\n");
	} else {
		char mb[96];
		/* a global batch sets the microbatches of every row (one world, one batch): the rows', not the base's */
		if (n)
			sweep_policy_unpack(&rk[0].policy, &e.policy);
		if (o->global_batch)
			snprintf(mb, sizeof mb, "%d microbatches (global batch %ld)", e.policy.microbatches, o->global_batch);
		else
			snprintf(mb, sizeof mb, "%d microbatches", e.policy.microbatches);
		printf("%s on %d x %d %s, seq %d, batch %d, %s: %d policies%s\n", base->model.name, base->cluster.nodes,
		       base->cluster.gpus_per_node, base->cluster.gpu.name, base->model.seq, base->run.batch, mb, n,
		       res.interrupted ? " (interrupted: the policies done before it)" : "");
		printf("%4s %10s %6s %12s %5s  %s\n", "rank", "step_s", "MFU%", "peak", "fits", "policy");
		for (int i = 0; i < shown; i++) {
			sweep_policy_unpack(&rk[i].policy, &e.policy);
			printf("%4d %10.4f %6.1f %12s %5s  %s\n", i + 1, rk[i].fig.step_time_s, 100 * rk[i].fig.mfu,
			       report_bytes(rk[i].fig.peak_reserved_bytes, b, sizeof(b)), rk[i].fig.fits ? "yes" : "NO",
			       report_policy_line(&e, line, sizeof(line)));
		}
		if (best_fit >= 0) {
			sweep_policy_unpack(&rk[best_fit].policy, &e.policy);
			printf("fastest that fits: rank %d, %.4f s, %s\n", best_fit + 1, rk[best_fit].fig.step_time_s,
			       report_policy_line(&e, line, sizeof(line)));
		} else {
			printf("no policy%s fits in %s\n", res.interrupted ? " done before the interruption" : "",
			       report_bytes(gpu_bytes, b, sizeof(b)));
		}
		if (o->out && o->out[0] && res.group[0])
			printf("rows: %s, /sweeps/%s\n", o->out, res.group);
	}
out:
	explore_result_release(&res);
	sweep_release(&sw);
	return rc;
}

/* --sweep: every configuration of a sweep file; the rows to --out, the fastest printed. */
/*
 * The n fastest rows of a sweep that fit, fastest first (ties: index):
 * the explore's own best (EXPLORE_BEST), or, with more wanted, every row
 * kept (keep_rows) filtered and sorted into *own (freed by the caller).
 */
static const struct sweep_row *fastest_fits(const struct explore_result *res, int want, struct sweep_row **own, int *n)
{
	*own = NULL;
	if (want <= EXPLORE_BEST) {
		*n = res->nbest < want ? res->nbest : want;
		return res->best;
	}
	*own = xmalloc(sizeof(**own) * (size_t)(res->nrows + 1));
	*n = 0;
	for (uint64_t i = 0; i < res->nrows; i++)
		if (res->rows[i].fig.fits && isfinite(res->rows[i].fig.step_time_s))
			(*own)[(*n)++] = res->rows[i];
	qsort(*own, (size_t)*n, sizeof(**own), cmp_step);
	if (*n > want)
		*n = want;
	return *own;
}

/* A sweep row's label, with its policy for a sweep of the policy walk. */
static const char *row_label(const struct sweep *sw, const struct sweep_row *r, char *label, size_t len)
{
	struct experiment e;
	char line[256];

	sweep_row_label(sw, r, label, len);
	if (sw->walk && sweep_experiment_of(sw, r, &e) == 0) {
		snprintf(label + strlen(label), len - strlen(label), "%s%s", label[0] ? "; " : "",
			 report_policy_line(&e, line, sizeof line));
		config_release(&e);
	}
	return label;
}

/* Run sw and print its fastest rows (rank 0). */
static int run_sweep(const struct sweep *sw, const struct opts *o)
{
	int want = o->top ? o->top : 10;
	struct explore_opts eo = { o->out, !o->json, want > EXPLORE_BEST, 0 };
	struct explore_result res;
	int rc = explore_run(sw, &eo, &res), shown;
	struct sweep_row *own;
	const struct sweep_row *best;
	char label[512], b[32];

	if (!explore_is_root())
		return rc;
	if (global_batch_refused(sw, &res)) {
		explore_result_release(&res);
		return 2;
	}
	best = fastest_fits(&res, want, &own, &shown);
	if (o->json) {
		fputs("{\"sweep\": ", stdout);
		json_str(stdout, sw->path);
		printf(", \"candidates\": %llu, \"configurations\": %llu, \"skipped_invalid\": %llu, "
		       "\"skipped_duplicate\": %llu, \"skipped_off_batch\": %llu, \"seconds\": %.6g, \"ranks\": %d, "
		       "\"interrupted\": %s, \"group\": ",
		       (unsigned long long)sw->ncandidates, (unsigned long long)res.nrows,
		       (unsigned long long)res.skipped[SWEEP_INVALID], (unsigned long long)res.skipped[SWEEP_DUPLICATE],
		       (unsigned long long)res.skipped[SWEEP_OFF_BATCH], res.seconds, res.ranks,
		       res.interrupted ? "true" : "false");
		json_str(stdout, res.group);
		fputs(", \"fastest\": [", stdout);
		for (int i = 0; i < shown; i++) {
			printf("%s{\"index\": %llu, \"configuration\": ", i ? ", " : "", (unsigned long long)best[i].index);
			json_str(stdout, row_label(sw, &best[i], label, sizeof label));
			printf(", \"step_time_s\": %.9g, \"mfu\": %.6g, \"peak_reserved_bytes\": %llu}",
			       best[i].fig.step_time_s, best[i].fig.mfu, (unsigned long long)best[i].fig.peak_reserved_bytes);
		}
		printf("]}\n");
	} else {
		printf("sweep %s: ", sw->path);
		sweep_line(stdout, &res, o->out, sw->ncandidates);
		if (shown) {
			printf("fastest that fit%s:\n%4s %10s %6s %12s  %s\n",
			       res.interrupted ? " (of the configurations done before the interruption)" : "", "rank",
			       "step_s", "MFU%", "peak", "configuration");
			for (int i = 0; i < shown; i++)
				printf("%4d %10.4f %6.1f %12s  %s\n", i + 1, best[i].fig.step_time_s, 100 * best[i].fig.mfu,
				       report_bytes(best[i].fig.peak_reserved_bytes, b, sizeof b),
				       row_label(sw, &best[i], label, sizeof label));
		} else {
			printf("no configuration fits\n");
		}
	}
	free(own);
	explore_result_release(&res);
	return rc;
}

/* Run sw and print its advice (rank 0). */
static int advise_sweep(const struct sweep *sw, const struct opts *o)
{
	struct explore_opts eo = { o->out, !o->json, 1, 0 };
	struct advise_opts ao = { o->top, o->json, 0 };
	struct explore_result res;
	int rc = explore_run(sw, &eo, &res);

	if (explore_is_root() && global_batch_refused(sw, &res)) {
		rc = 2;
	} else if (explore_is_root()) {
		int arc = advise_print(sw, &res, &ao, stdout);
		if (!o->json)
			sweep_line(stdout, &res, o->out, sw->ncandidates);
		rc = rc ? rc : arc;
	}
	explore_result_release(&res);
	return rc;
}

/* --advise: the policy walk (and the resources of --what-if) around the experiment, then the advice. */
static int run_advise(const struct experiment *base, const struct opts *o)
{
	struct sweep sw;
	int rc;

	if (sweep_of_experiment(&sw, base, 1) != 0)
		return 2;
	for (int i = 0; i < o->nwhat_if; i++) {
		char origin[64];
		snprintf(origin, sizeof origin, "--what-if %s", o->what_if[i]);
		origin[strcspn(origin, "=")] = '\0';
		if (sweep_add_axis(&sw, o->what_if[i], origin) != 0) {
			sweep_release(&sw);
			return 2;
		}
	}
	sweep_set_constraints(&sw, o->global_batch, o->memory_budget_gib);
	if (explore_plan(&sw, !o->json) != 0) {
		sweep_release(&sw);
		return 2;
	}
	rc = advise_sweep(&sw, o);
	sweep_release(&sw);
	return rc;
}

/* --out for --sweep, which takes no other experiment flag: its value, or NULL; -1 on a bad use. */
static int sweep_out(int argc, char **argv, const char **out)
{
	for (int i = 1; i < argc; i++) {
		if (!argv[i])
			continue;
		if ((!strcmp(argv[i], "--out") || !strcmp(argv[i], "--set")) && i + 1 < argc && argv[i + 1] &&
		    (!strcmp(argv[i], "--out") || !strncmp(argv[i + 1], "run.out=", 8))) {
			*out = !strcmp(argv[i], "--out") ? argv[i + 1] : argv[i + 1] + 8;
			argv[i] = argv[i + 1] = NULL;
			i++;
		} else if (!strncmp(argv[i], "--out=", 6)) {
			*out = argv[i] + 6;
			argv[i] = NULL;
		} else {
			text_line(stderr, "--sweep: '%s' is not allowed here: the sweep file gives the configurations "
					"(its [sweep] experiment, and its axes); allowed: --out FILE.h5, --top N, --json, "
					"--advise, --memory-budget GiB, --global-batch N", argv[i]);
			return -1;
		}
	}
	return 0;
}

/* Under mpirun, ranks other than 0 print nothing: stdout, and stderr while reading the input. */
static int quiet_rank(int rank, int *saved_err)
{
	int null;

	*saved_err = -1;
	if (rank == 0)
		return 0;
	null = open("/dev/null", O_WRONLY);
	if (null < 0)
		return -1;
	fflush(stdout);
	fflush(stderr);
	*saved_err = dup(2);
	dup2(null, 1);
	dup2(null, 2);
	close(null);
	return 0;
}

static void loud_again(int saved_err)
{
	if (saved_err >= 0) {
		fflush(stderr);
		dup2(saved_err, 2);
		close(saved_err);
	}
}

/*
 * A sweep, --policy all and --bench build and free a schedule, an
 * allocator and an event graph per configuration. glibc's default gives
 * the heap's free top back to the system whenever a free leaves it past a
 * threshold it adapts as it goes, and which allocation pattern sets that
 * off is a matter of layout: when it did, every configuration faulted its
 * pages in again (about 400 page faults per step of the 70b case of make
 * bench, a third of its time). Freed memory is kept for the next
 * configuration, and only blocks of 32 MiB and more are mapped apart.
 */
static void keep_freed_memory(void)
{
#ifdef __GLIBC__
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
}

int main(int argc, char **argv)
{
	struct experiment e;
	struct opts o = { 0 };
	int rc, rank, size, saved_err;

	keep_freed_memory();
	explore_mpi_init(&argc, &argv, &rank, &size);
	quiet_rank(rank, &saved_err);
	rc = take_own_flags(argc, argv, &o) != 0 ? 2 : 0;
	if (rc || o.help) {
		if (!rc)
			usage(stdout);
		explore_mpi_exit(rc);
	}
	if (o.catalog_now && !o.compare) {
		text_line(stderr, "--catalog-now goes with --compare: it prices measured runs by today's catalog "
				"(./sim alone always does)");
		explore_mpi_exit(2);
	}
	if (o.compare) {
		loud_again(saved_err);
		explore_mpi_exit(rank ? 0 : run_compare(argc, argv, &o));
	}
	if (o.sweep) {
		struct sweep sw;
		const char *bad = o.all ? "--policy all" : o.schedule ? "--schedule" : o.trace ? "--trace" :
				  o.bench ? "--bench" : o.nwhat_if ? "--what-if" : NULL;
		if (bad) {
			text_line(stderr, "--sweep and %s cannot be used together: a sweep file gives its configurations "
					"(write policies = all and what_if in its [sweep] section)", bad);
			explore_mpi_exit(2);
		}
		if (sweep_out(argc, argv, &o.out) != 0 || sweep_load(&sw, o.sweep) != 0)
			explore_mpi_exit(2);
		sweep_set_constraints(&sw, o.global_batch, o.memory_budget_gib);
		const struct outfile outs[] = { { "--out", o.out, results_refusal } };
		if (outfile_check(outs, 1, (const char *const[]){ o.sweep, sw.experiment, NULL }) != 0 ||
		    explore_plan(&sw, !o.json) != 0) {
			sweep_release(&sw);
			explore_mpi_exit(2);
		}
		loud_again(saved_err);
		rc = o.advise ? advise_sweep(&sw, &o) : run_sweep(&sw, &o);
		sweep_release(&sw);
		explore_mpi_exit(rc);
	}
	config_init_job(&e);
	if (config_parse_args(&e, argc, argv) != 0 || config_check_leftovers(argc, argv, "./sim", own_flags) != 0 ||
	    config_resolve(&e) != 0) {
		config_release(&e);
		explore_mpi_exit(2);
	}
	o.out = e.run.out;
	const struct outfile outs[] = { { "run.out =", e.run.out, results_refusal },
					{ "--trace", o.trace, trace_refusal } };
	if (check_flags(&o, &e) != 0 || outfile_check(outs, 2, (const char *const[]){ e.path, NULL }) != 0) {
		config_release(&e);
		explore_mpi_exit(2);
	}
	if (!o.all && !o.advise && e.calibration[0]) {
		/* named with its sessions as they are now, as the run records it (--policy all and --advise: the sweep) */
		char err[512];
		if (calibration_pin(e.calibration, e.calibration, sizeof e.calibration, err, sizeof err) != 0) {
			text_line(stderr, "%s: cluster.calibration: %s", e.path[0] ? e.path : "sim", err);
			config_release(&e);
			explore_mpi_exit(2);
		}
	}
	loud_again(saved_err);
	if (o.all || o.advise) {
		rc = o.all ? run_all(&e, &o) : run_advise(&e, &o);
	} else if (rank != 0) {
		rc = 0; /* one configuration: rank 0 simulates it */
	} else if (o.bench) {
		rc = run_bench(&e, o.bench);
	} else {
		rc = run_one(&e, &o);
	}
	config_release(&e);
	explore_mpi_exit(rc);
}
