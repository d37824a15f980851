/*
 * main.c - ./gpu_run: execute the step schedule of an experiment and
 * measure it.
 *
 *   mpirun -np N ./gpu_run [EXPERIMENT.ini] [experiment flags]
 *
 * Every rank parses the same input with the simulator's parser, builds the
 * same schedule (core/schedule.c) and executes it (exec.c) on a backend
 * (run.device; backend_cpu.c) for run.warmup + run.steps optimizer
 * steps. Rank 0 prints a line per step and a summary (core/summary.h, the
 * simulator's definitions), and with run.out set appends one run to the
 * results file in the simulator's schema (source "gpu_run", the op timings
 * of the last measured step, its memory timeline).
 *
 * Exit status: 0 on success, 2 on bad input (every rank: all see the same
 * input and fail alike; only rank 0 prints; nothing is written; run.out is
 * checked by rank 0, which writes it, before the first step: see
 * core/outfile.h), 1 when the results could not be written, 3 when
 * training diverged: a loss (or, after the last step, a parameter) that is
 * not finite stops the run on every rank at that step with a message, and
 * nothing is appended to run.out; 4 when the watchdog aborts the job: a
 * rank made no progress for run.timeout_s (watchdog.h). A failed MPI call
 * aborts the job.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "config.h"
#include "exec.h"
#include "outfile.h"
#include "results.h"
#include "schedule.h"
#include "summary.h"
#include "watchdog.h"
#include "xalloc.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: mpirun -np N ./gpu_run [EXPERIMENT.ini] [flags] [--serialize]\n"
		   "  N must be cluster.nodes * cluster.gpus_per_node; run.device = cpu\n"
		   "  runs the fp32 reference kernels over MPI, a thread per stream. run.out\n"
		   "  appends the run to an HDF5 results file.\n"
		   "  --serialize  run one op at a time in issue order (no overlap): the\n"
		   "               blocking execution, to compare the streams' results with\n");
	config_usage(f);
}

/* Leave MPI (the watchdog still watching) and stop the watchdog. */
static void mpi_finish(void)
{
	watchdog_finalizing();
	watchdog_waiting("MPI_Finalize");
	MPI_Finalize();
	watchdog_stop();
}

/* Leave MPI and exit with rc, on every rank. */
static void finish(int rc)
{
	mpi_finish();
	exit(rc);
}

/* Rank 0 prints; the others stay quiet (every rank sees the same input). */
static void say0(int rank, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say0(int rank, const char *fmt, ...)
{
	va_list ap;

	if (rank != 0)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

/* Flags gpu_run handles itself: --help, --serialize. Returns 1 when help was asked for. */
static int take_own_flags(int argc, char **argv, int *serialize)
{
	int help = 0;

	for (int i = 1; i < argc; i++) {
		if (argv[i] && (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))) {
			help = 1;
			argv[i] = NULL;
		} else if (argv[i] && !strcmp(argv[i], "--serialize")) {
			*serialize = 1;
			argv[i] = NULL;
		}
	}
	return help;
}

/* Parse and check everything; on bad input every rank exits 2. */
static void setup(struct experiment *e, int rank, int world, int argc, char **argv)
{
	const char *where;

	config_init(e);
	if (config_parse_args(e, argc, argv) != 0 || config_check_leftovers(argc, argv, "./gpu_run") != 0 ||
	    config_resolve(e) != 0) {
		config_release(e);
		finish(2);
	}
	where = e->path[0] ? e->path : "gpu_run";
	if (strcmp(e->run.device, "cpu") != 0) {
		say0(rank, "%s: run.device = %s: this build of gpu_run has no CUDA backend; use --device cpu\n",
		     where, e->run.device);
		config_release(e);
		finish(2);
	}
	if (world != cluster_world(&e->cluster)) {
		say0(rank, "%s: gpu_run was started with %d MPI rank%s, but the experiment's cluster has "
			   "cluster.nodes * cluster.gpus_per_node = %d * %d = %d GPUs; start it with "
			   "mpirun -np %d\n",
		     where, world, world == 1 ? "" : "s", e->cluster.nodes, e->cluster.gpus_per_node,
		     cluster_world(&e->cluster), cluster_world(&e->cluster));
		config_release(e);
		finish(2);
	}
}

/* run.out breaks no rule of core/outfile.h: checked by rank 0, which writes it; 0 or -1 on every rank. */
static int check_outputs(const struct experiment *e, int rank)
{
	const struct outfile out = { "run.out =", e->run.out, results_refusal };
	int rc = rank == 0 ? outfile_check(&out, 1, (const char *const[]){ e->path, NULL }) : 0;

	mpi_check(MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD));
	return rc;
}

/* Training diverged at step (0: after the last step): say so on rank 0, and every rank exits 3. */
static void diverged(const struct experiment *e, int rank, int step, const char *what, double v)
{
	char when[32];

	snprintf(when, sizeof when, step ? "step %d" : "after the last step", step);
	say0(rank, "gpu_run: %s: %s is %s: training diverged (run.lr = %g, run.weight_decay = %g); "
		   "stopping%s%s\n", when, what, isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf", e->run.lr, e->run.weight_decay,
	     e->run.out[0] ? ", nothing appended to " : "", e->run.out);
	fflush(stdout);
	finish(3);
}

static const char *mib(uint64_t b, char *buf, int len)
{
	snprintf(buf, len, "%.2f MiB", b / 1048576.0);
	return buf;
}

static void print_summary(const struct schedule *s, const struct summary *m)
{
	char b[32], r[32];

	printf("summary: step time %.3f ms, %.0f tokens/s per rank, MFU %.2f%% of %s\n", m->step_time_s * 1e3,
	       m->tokens_per_s_per_gpu, 100 * m->mfu, s->exp->cluster.gpu.name);
	printf("summary: compute %.3f ms, exposed communication %.3f ms, %llu wire bytes per rank\n",
	       m->compute_s * 1e3, m->exposed_comm_s * 1e3, (unsigned long long)m->comm_bytes_per_gpu);
	printf("summary: peak memory %llu bytes allocated (%s), %llu reserved (%s):",
	       (unsigned long long)m->peak_alloc_bytes, mib(m->peak_alloc_bytes, b, sizeof(b)),
	       (unsigned long long)m->peak_reserved_bytes, mib(m->peak_reserved_bytes, r, sizeof(r)));
	for (int c = 0; c < MEM_CAT_COUNT; c++)
		if (m->peak_by_cat[c])
			printf(" %s %s", mem_cat_name(c), mib(m->peak_by_cat[c], b, sizeof(b)));
	printf("\n");
}

/* MPI with every thread free to call it: each stream of the CPU backend runs its own collectives. */
static void mpi_start(int *argc, char ***argv)
{
	int provided = MPI_THREAD_SINGLE;

	/* streams that wait in a collective should give their core to the compute stream */
	setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
	mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
	if (provided < MPI_THREAD_MULTIPLE) {
		fprintf(stderr, "gpu_run: this MPI gives thread level %d, and the backend's streams need "
				"MPI_THREAD_MULTIPLE (%d)\n", provided, MPI_THREAD_MULTIPLE);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
}

static void abort_job(void)
{
	MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv)
{
	struct experiment e;
	struct schedule *s;
	struct comm c;
	struct backend *be;
	struct exec *x;
	struct op_timing *t;
	struct summary sum;
	int rank, world, rc = 0, total, serialize = 0;
	double psum, psq, step_s = 0, compute_s = 0, exposed_s = 0;
	char err[512], accum[32], wrap[32], phase[64];
	FILE *quiet = NULL;

	mpi_start(&argc, &argv);
	xalloc_failed = abort_job;
	mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
	mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &world));
	if (rank != 0) {
		quiet = fopen("/dev/null", "w");
		config_errfile = quiet;
	}
	if (take_own_flags(argc, argv, &serialize)) {
		if (rank == 0)
			usage(stdout);
		finish(0);
	}
	setup(&e, rank, world, argc, argv);
	if (check_outputs(&e, rank) != 0) {
		config_release(&e);
		finish(2);
	}
	watchdog_start(e.run.timeout_s, rank);
	watchdog_waiting("the setup (communicators, memory, initial weights)");
	s = schedule_new(&e, err, sizeof(err));
	if (!s) {
		say0(rank, "%s: %s\n", e.path[0] ? e.path : "gpu_run", err);
		config_release(&e);
		finish(2);
	}
	comm_init(&c, s);
	be = backend_cpu_new(s, &c, err, sizeof(err));
	if (!be) {
		say0(rank, "%s: %s\n", e.path[0] ? e.path : "gpu_run", err);
		finish(2);
	}
	x = exec_new(s, &c, be, serialize, err, sizeof(err));
	if (!x) {
		fprintf(stderr, "gpu_run: rank %d: %s\n", rank, err);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	t = xcalloc((size_t)s->nops, sizeof(*t));
	total = e.run.warmup + e.run.steps;
	if (rank == 0)
		printf("gpu_run: %s on %d x %d %s (%s backend%s), %s, accum %s x %d, wrap %s, "
		       "ac %s: %d ops per step, %d warmup + %d steps\n",
		       e.model.name, e.cluster.nodes, e.cluster.gpus_per_node, e.cluster.gpu.name, be->ops->name,
		       serialize ? ", serialized" : "",
		       sharding_names[e.policy.sharding], policy_accum_str(&e.policy, accum, sizeof(accum)),
		       e.policy.microbatches, policy_wrap_str(&e.policy, wrap, sizeof(wrap)),
		       ac_names[e.policy.ac], s->nops, e.run.warmup, e.run.steps);
	for (int step = 1; step <= total; step++) {
		double v[2];
		uint64_t step_ns = 0;
		snprintf(phase, sizeof phase, "the barrier before step %d", step);
		watchdog_waiting(phase);
		mpi_check(MPI_Barrier(MPI_COMM_WORLD));
		snprintf(phase, sizeof phase, "step %d", step);
		watchdog_waiting(phase);
		v[0] = exec_step(x, step, t, &step_ns);
		v[1] = step_ns * 1e-6;
		snprintf(phase, sizeof phase, "the all-reduce of the loss of step %d", step);
		watchdog_waiting(phase);
		mpi_check(MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
		mpi_check(MPI_Allreduce(MPI_IN_PLACE, &v[1], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
		if (!isfinite(v[0])) /* the same sum on every rank: they stop together */
			diverged(&e, rank, step, "the loss", v[0]);
		if (rank == 0)
			printf("step %d loss %.9f time %.3f ms%s\n", step, v[0] / ((double)world * s->microbatches),
			       v[1], step <= e.run.warmup ? " (warmup)" : "");
		if (step > e.run.warmup) {
			double cs, xs;
			summary_overlap(s, t, &cs, &xs);
			step_s += v[1] * 1e-3 / e.run.steps;
			compute_s += cs / e.run.steps;
			exposed_s += xs / e.run.steps;
		}
	}
	/* the means of the measured steps; memory peaks over the run; ops of the last step */
	summary_of_step(s, t, (uint64_t)(step_s * 1e9 + 0.5), &exec_memory(x)->peaks, &sum);
	sum.compute_s = compute_s;
	sum.exposed_comm_s = exposed_s;
	watchdog_waiting("the all-reduce of the parameter sums");
	exec_param_sums(x, &psum, &psq);
	if (!isfinite(psq)) /* the same over every shard group */
		diverged(&e, rank, 0, "the sum of squares of the parameters", psq);
	if (rank == 0) {
		printf("params sum %.9e sumsq %.9e\n", psum, psq);
		print_summary(s, &sum);
		if (e.run.out[0]) {
			const struct memory *mem = exec_memory(x);
			struct run_result rr = {
				.source = "gpu_run",
				.exp = &e,
				.sched = s,
				.ops = t,
				.nmem = mem->nsamples,
				.mem = mem->samples,
				.sum = sum,
			};
			fflush(stdout); /* the report is out before the file is written */
			if (results_append(e.run.out, &rr) != 0)
				rc = 1;
		}
		fflush(stdout);
	}
	watchdog_waiting("the broadcast of the exit status (rank 0 writes run.out)");
	mpi_check(MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD));
	free(t);
	exec_free(x);
	be->ops->release(be);
	comm_release(&c);
	schedule_free(s);
	config_release(&e);
	if (quiet)
		fclose(quiet);
	mpi_finish();
	return rc;
}
