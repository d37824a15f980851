/*
 * main.c - ./gpu_run: execute the step schedule of an experiment and
 * measure it.
 *
 *   mpirun -np N ./gpu_run [EXPERIMENT.ini] [experiment flags]
 *
 * Every rank parses the same input with the simulator's parser, builds the
 * same schedule (core/schedule.c) and executes it (exec.c) for run.warmup
 * + run.steps optimizer steps. Rank 0 prints a line per step and a
 * summary, and with run.out set appends one run to the results file in
 * the simulator's schema (source "gpu_run", the op timings of the last
 * measured step, its memory timeline).
 *
 * Exit status: 0 on success, 2 on bad input (every rank: all see the same
 * input and fail alike; only rank 0 prints; nothing is written), 1 when
 * the results could not be written. A failed MPI call aborts the job.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "config.h"
#include "exec.h"
#include "results.h"
#include "schedule.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: mpirun -np N ./gpu_run [EXPERIMENT.ini] [flags]\n"
		   "  N must be cluster.nodes * cluster.gpus_per_node; run.backend = cpu\n"
		   "  runs the fp32 reference kernels over MPI. run.out appends the run\n"
		   "  to an HDF5 results file.\n");
	config_usage(f);
}

/* Leave MPI and exit with rc, on every rank. */
static void finish(int rc)
{
	MPI_Finalize();
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

/* Flags gpu_run handles itself: --help. Returns 1 when help was asked for. */
static int take_own_flags(int argc, char **argv)
{
	int help = 0;

	for (int i = 1; i < argc; i++)
		if (argv[i] && (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))) {
			help = 1;
			argv[i] = NULL;
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
		say0(rank, "%s: run.backend = %s: this build has no CUDA backend yet; use backend = cpu\n",
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

static const char *mib(uint64_t b, char *buf, int len)
{
	snprintf(buf, len, "%.2f MiB", b / 1048576.0);
	return buf;
}

static int group_size(const struct schedule *s, int g)
{
	switch (g) {
	case GRP_SHARD: return s->shard_n;
	case GRP_REPLICA: return s->replica_n;
	case GRP_WORLD: return s->world;
	default: return 1;
	}
}

/* Time sums of one step's ops: the compute stream, and the collectives. */
static void step_split(const struct schedule *s, const struct op_timing *t, double *compute_s,
		       double *comm_s)
{
	for (int i = 0; i < s->nops; i++) {
		double d = (t[i].end_ns - t[i].start_ns) * 1e-9;
		int k = s->ops[i].kind;
		if (k == OP_ALLGATHER || k == OP_REDUCE_SCATTER || k == OP_ALLREDUCE)
			*comm_s += d;
		else if (s->ops[i].stream == ST_COMPUTE)
			*compute_s += d;
	}
}

static void summarize(const struct schedule *s, const struct memtrack *mt, double step_s,
		      double compute_s, double comm_s, struct summary *out)
{
	const struct experiment *e = s->exp;
	double peak = 1e12 * (e->policy.precision == PREC_FP32 ? e->cluster.gpu.fp32_tflops
								 : e->cluster.gpu.bf16_tflops);

	memset(out, 0, sizeof(*out));
	out->step_time_s = step_s;
	if (step_s > 0) {
		out->tokens_per_s_per_gpu = s->tokens_per_step / step_s;
		out->mfu = s->model_flops / step_s / peak;
	}
	out->compute_s = compute_s;
	out->exposed_comm_s = comm_s; /* one thread: no collective overlaps compute */
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		if (o->kind == OP_ALLGATHER || o->kind == OP_REDUCE_SCATTER || o->kind == OP_ALLREDUCE)
			out->comm_bytes_per_gpu +=
				collective_wire_bytes(o->kind, o->bytes, group_size(s, o->group));
	}
	out->peak_alloc_bytes = mt->peak;
	out->peak_reserved_bytes = mt->peak; /* no caching allocator on the CPU */
	memcpy(out->peak_by_cat, mt->peak_by_cat, sizeof(out->peak_by_cat));
	out->gpu_bytes = (uint64_t)(e->cluster.gpu.hbm_gib * 1073741824.0);
	out->fits = out->peak_reserved_bytes <= out->gpu_bytes;
	out->ncrit = 0;
}

static void print_summary(const struct schedule *s, const struct summary *m, uint64_t ws_bytes)
{
	char b[32];

	printf("summary: step time %.3f ms, %.0f tokens/s per rank, MFU %.2f%% of %s\n", m->step_time_s * 1e3,
	       m->tokens_per_s_per_gpu, 100 * m->mfu, s->exp->cluster.gpu.name);
	printf("summary: compute %.3f ms, communication %.3f ms (not overlapped), %llu wire bytes per rank\n",
	       m->compute_s * 1e3, m->exposed_comm_s * 1e3, (unsigned long long)m->comm_bytes_per_gpu);
	printf("summary: peak memory %s (runtime workspace %s):", mib(m->peak_alloc_bytes, b, sizeof(b)),
	       mib(ws_bytes, b + 16, 16));
	for (int c = 0; c < MEM_CAT_COUNT; c++)
		if (m->peak_by_cat[c])
			printf(" %s %s", mem_cat_name(c), mib(m->peak_by_cat[c], b, sizeof(b)));
	printf("\n");
}

int main(int argc, char **argv)
{
	struct experiment e;
	struct schedule *s;
	struct comm c;
	struct exec *x;
	struct op_timing *t;
	struct summary sum;
	int rank, world, rc = 0, total, measured = 0;
	double step_s = 0, compute_s = 0, comm_s = 0, psum, psq;
	char err[256], accum[32], wrap[32];
	FILE *quiet = NULL;

	mpi_check(MPI_Init(&argc, &argv));
	mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
	mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &world));
	if (rank != 0) {
		quiet = fopen("/dev/null", "w");
		config_errfile = quiet;
	}
	if (take_own_flags(argc, argv)) {
		if (rank == 0)
			usage(stdout);
		finish(0);
	}
	setup(&e, rank, world, argc, argv);
	s = schedule_new(&e, err, sizeof(err));
	if (!s) {
		say0(rank, "%s: %s\n", e.path[0] ? e.path : "gpu_run", err);
		config_release(&e);
		finish(2);
	}
	comm_init(&c, s);
	x = exec_new(s, &c);
	t = calloc((size_t)s->nops, sizeof(*t));
	if (!t) {
		fprintf(stderr, "gpu_run: out of memory for %d op timings\n", s->nops);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	total = e.run.warmup + e.run.steps;
	if (rank == 0)
		printf("gpu_run: %s on %d x %d %s (cpu backend, fp32), %s, accum %s x %d, wrap %s, "
		       "ac %s: %d ops per step, %d warmup + %d steps\n",
		       e.model.name, e.cluster.nodes, e.cluster.gpus_per_node, e.cluster.gpu.name,
		       sharding_names[e.policy.sharding], policy_accum_str(&e.policy, accum, sizeof(accum)),
		       e.policy.microbatches, policy_wrap_str(&e.policy, wrap, sizeof(wrap)),
		       ac_names[e.policy.ac], s->nops, e.run.warmup, e.run.steps);
	if (rank == 0 && e.policy.precision != PREC_FP32)
		printf("note: precision = %s: the cpu backend still computes and communicates in fp32; "
		       "buffers hold the larger of the schedule's bytes and the fp32 need\n",
		       precision_names[e.policy.precision]);
	for (int step = 1; step <= total; step++) {
		double v[1], ms;
		mpi_check(MPI_Barrier(MPI_COMM_WORLD));
		v[0] = exec_step(x, step, t);
		mpi_check(MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
		ms = s->nops ? t[s->nops - 1].end_ns * 1e-6 : 0;
		mpi_check(MPI_Allreduce(MPI_IN_PLACE, &ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
		if (rank == 0)
			printf("step %d loss %.9f time %.3f ms%s\n", step,
			       v[0] / ((double)world * e.policy.microbatches), ms,
			       step <= e.run.warmup ? " (warmup)" : "");
		if (step > e.run.warmup) {
			measured++;
			step_s += ms * 1e-3;
			step_split(s, t, &compute_s, &comm_s);
		}
	}
	exec_param_sums(x, &psum, &psq);
	summarize(s, exec_memtrack(x), step_s / measured, compute_s / measured, comm_s / measured, &sum);
	if (rank == 0) {
		printf("params sum %.9e sumsq %.9e\n", psum, psq);
		print_summary(s, &sum, exec_workspace_bytes(x));
		if (e.run.out[0]) {
			const struct memtrack *mt = exec_memtrack(x);
			struct run_result rr = {
				.source = "gpu_run",
				.exp = &e,
				.sched = s,
				.ops = t,
				.nmem = mt->nsamples,
				.mem = mt->samples,
				.sum = sum,
			};
			if (results_append(e.run.out, &rr) != 0)
				rc = 1;
		}
		fflush(stdout);
	}
	mpi_check(MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD));
	free(t);
	exec_free(x);
	comm_release(&c);
	schedule_free(s);
	config_release(&e);
	if (quiet)
		fclose(quiet);
	MPI_Finalize();
	return rc;
}
