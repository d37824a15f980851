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
 * Backends: `cpu` (backend_cpu.c) everywhere; `cuda` (backend_cuda.c)
 * where the build has CUDA: one rank per GPU (the node's local rank picks
 * it), NCCL communicators made from an id rank 0 broadcasts over MPI.
 * --emulate-world N runs this one process as rank 0 of an N-rank job on
 * an emulated fabric (comm.h), on either backend. What the run was on
 * (device, library versions, NCCL configuration, the emulated fabric's
 * parameters) is printed and added to the run's attributes in the results
 * file (runinfo.h). Last, rank 0 prints where the run's wall-clock time
 * went (start, backend, buffers and weights, steps, results, release).
 *
 * Exit status: 0 on success, 2 on bad input (every rank: all see the same
 * input and fail alike; only rank 0 prints; nothing is written; a step
 * whose memory the device cannot hold is bad input too; run.out and
 * --calibrate's file are checked by rank 0, which writes them, before the
 * first step or microbenchmark: see core/outfile.h), 1 when the results
 * could not be written or a step ran out of device memory (every rank
 * stops at that step), 3 when training diverged: a loss (or, after the
 * last step, a parameter) that is not finite stops the run on every rank
 * at that step with a message, and nothing is appended to run.out; 4
 * when the watchdog aborts the job: a rank made no progress for
 * run.timeout_s (watchdog.h). A failed MPI, CUDA, cuBLAS or NCCL call
 * aborts the job.
 */
#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>

#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "calibrate.h"
#include "calibration.h"
#include "comm.h"
#include "config.h"
#include "exec.h"
#include "outfile.h"
#include "results.h"
#include "runinfo.h"
#include "schedule.h"
#include "summary.h"
#include "text.h"
#include "watchdog.h"

/* The most memory the measured steps' op timings may take (the median step's are recorded at the end). */
#define STEP_TIMINGS_MAX (4.0 * (1u << 30))
#include "xalloc.h"

/* The options gpu_run takes itself (the experiment's keys are config's). */
struct run_opts {
	int serialize;
	int calibrate, quick, hardware;  /* --calibrate [FILE.h5] [--quick], --hardware */
	const char *calibration;         /* --calibrate FILE.h5, or NULL for the default */
	int calibrate_word;              /* argv index of a word.ini after --calibrate (the experiment?), or 0 */
	const char *series;              /* --series NAME: the calibration repeats a series */
	struct comm_emu_opts emu;        /* emu.world > 0: --emulate-world */
	struct comm_nccl_opts nccl;
	struct cuda_opts cuda;
	int staged;                      /* --staged-collectives: collectives through host memory and MPI */
	int cuda_flag;                   /* a flag only the cuda backend reads was given: its name */
	const char *cuda_flag_name;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: mpirun -np N ./gpu_run [EXPERIMENT.ini] [flags] [gpu_run's flags]\n"
		   "  N must be cluster.nodes * cluster.gpus_per_node (1 with --emulate-world).\n"
		   "  run.device = cpu runs the fp32 reference kernels over MPI, a thread per\n"
		   "  stream; cuda (builds with CUDA) the bf16 CUDA model on one GPU per rank,\n"
		   "  NCCL for the collectives. run.out appends the run to an HDF5 results file.\n"
		   "  --serialize            one op at a time in issue order (no overlap): the\n"
		   "                         blocking execution, to compare the streams' results with\n"
		   "  --emulate-world N      this one process is rank 0 of an N-rank job (N =\n"
		   "                         nodes * gpus_per_node); every collective is the bytes\n"
		   "                         that rank moves in a ring, paced to the emulated link\n"
		   "  --emulate-gbps X       the emulated link's bandwidth, GB/s, for every group\n"
		   "                         (default: the cluster's, as ./sim prices each group)\n"
		   "  --emulate-lat-us X     latency of one ring step (default: the cluster's)\n"
		   "  --emulate-engine E     cuda: sm (a kernel holding --emulate-ctas SMs, the\n"
		   "                         default) or ce (all-gathers on the copy engine)\n"
		   "  --emulate-ctas N       cuda: SMs the emulated traffic holds (default: the\n"
		   "                         GPU's nccl_sms from the catalog)\n"
		   "  --nccl-min-ctas N, --nccl-max-ctas N, --nccl-cga N\n"
		   "                         NCCL communicator config: CTAs (SMs) a collective may\n"
		   "                         use, CGA cluster size (default: NCCL's)\n"
		   "  --nccl-cta-policy P    default, efficiency or zero (NCCL 2.28: copy-engine\n"
		   "                         collectives on symmetric windows where it can)\n"
		   "  --attention A          cuda: mma (the mma.sync flash kernels, the default) or\n"
		   "                         cudnn (cuDNN's fused SDPA, falling back to mma)\n"
		   "  --gemm-autotune        cuda: time cuBLASLt's top 8 algorithms once per shape\n"
		   "  --staged-collectives   cuda: collectives through host memory and MPI, no NCCL,\n"
		   "                         so that several ranks may share one GPU: the numbers of\n"
		   "                         an N-rank job checked on one GPU (slow; the run is\n"
		   "                         marked fabric = staged and ./sim --compare skips it)\n"
		   "  --calibrate [FILE.h5]  measure this machine's kernels, collectives and\n"
		   "                         overheads for ./sim --calibration (default file:\n"
		   "                         data/calibration/<hardware>-<backend>.h5; a calibration\n"
		   "                         file, new or empty HDF5); --quick: a few points; with\n"
		   "                         --emulate-world N, rank 0 of N\n"
		   "  --series NAME          with --calibrate: this calibration repeats the earlier\n"
		   "                         ones of series NAME (separate processes); ./sim takes\n"
		   "                         the median of the series' measurements of each point;\n"
		   "                         NAME: letters, digits, '.', '_' and '-' (not first)\n"
		   "  --hardware             print <hardware>-<backend>, the name of this machine's\n"
		   "                         calibration\n");
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
	text_vline(stderr, NULL, fmt, ap); /* one line, the values it quotes escaped */
	va_end(ap);
}

/*
 * A number from flag's value, in [lo, hi] (a decimal number as config
 * reads one, config_parse_real or, for an integer, config_parse_integer);
 * bad input exits 2 on every rank.
 */
static double flag_number(int rank, const char *flag, const char *v, double lo, double hi, int integer)
{
	enum config_number st = CONFIG_NUMBER_BAD;
	double x = 0;

	if (v && integer) {
		long long i = 0;
		st = config_parse_integer(v, &i);
		x = (double)i;
	} else if (v) {
		st = config_parse_real(v, &x);
	}
	if (st != CONFIG_NUMBER_OK || !(x >= lo && x <= hi)) {
		const char *why = v ? config_number_why(v, st) : "";
		if (integer)
			say0(rank, "gpu_run: %s wants an integer from %.0f to %.0f, not '%s'%s", flag, lo, hi,
			     v ? v : "(nothing)", why);
		else
			say0(rank, "gpu_run: %s wants a number in [%g, %g], not '%s'%s", flag, lo, hi, v ? v : "(nothing)",
			     why);
		finish(2);
	}
	return x;
}

/* flag's value among names[] (n of them): its index; bad input exits 2. */
static int flag_name(int rank, const char *flag, const char *v, const char *const *names, int n)
{
	for (int i = 0; v && i < n; i++)
		if (!strcmp(v, names[i]))
			return i;
	char list[256] = "";
	for (int i = 0; i < n; i++)
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s %s", i ? "," : "", names[i]);
	say0(rank, "gpu_run: %s is one of%s, not '%s'", flag, list, v ? v : "(nothing)");
	finish(2);
	return -1;
}

/* Whether flag a is among the n in given[] (flags that take a value, seen so far); if not, add it. */
static int given_before(const char **given, int *n, int max, const char *a)
{
	for (int i = 0; i < *n; i++)
		if (!strcmp(given[i], a))
			return 1;
	assert(*n < max); /* each of gpu_run's flags that take a value is kept once: fewer than max */
	given[(*n)++] = a;
	return 0;
}

/* A word w after --calibrate that is no FILE.h5: say so (rank 0). */
static void calibrate_word_bad(int rank, const char *w)
{
	say0(rank, "gpu_run: --calibrate %s: --calibrate takes the calibration file, a name ending in .h5, or "
		   "nothing (data/calibration/<hardware>-<backend>.h5); the experiment file goes first: "
		   "gpu_run EXPERIMENT.ini --calibrate [FILE.h5]", w);
}

static int ends_with(const char *s, const char *end)
{
	size_t n = strlen(s), e = strlen(end);

	return n > e && !strcmp(s + n - e, end);
}

/* gpu_run's own flags (usage()), for the flag closest to an unknown one. */
static const char *const own_flags[] = { "--help", "--serialize", "--quick", "--hardware", "--calibrate", "--series",
					 "--emulate-world", "--emulate-gbps", "--emulate-lat-us", "--emulate-engine",
					 "--emulate-ctas", "--nccl-max-ctas", "--nccl-min-ctas", "--nccl-cga",
					 "--nccl-cta-policy", "--attention", "--gemm-autotune", "--staged-collectives", NULL };

#define SERIES_RULE "1 to %d letters, digits, '.', '_' or '-', not starting with '-'"

/*
 * Flags gpu_run handles itself (usage()); they are removed from argv for
 * config's parser. A flag that takes a value may be given once. Returns 1
 * when help was asked for.
 */
static int take_own_flags(int rank, int argc, char **argv, struct run_opts *o)
{
	static const char *const engines[] = { "sm", "ce" };
	static const char *const policies[] = { "default", "efficiency", "zero" };
	static const char *const attention[] = { "mma", "cudnn" };
	const char *given[32];
	int help = 0, ngiven = 0;

	memset(o, 0, sizeof(*o));
	o->emu.lat_us = -1;
	o->nccl = (struct comm_nccl_opts){ -1, -1, -1, -1 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int takes = 1, cuda_only = 0;
		if (!a)
			continue;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			help = 1;
			takes = 0;
		} else if (!strcmp(a, "--serialize")) {
			o->serialize = 1;
			takes = 0;
		} else if (!strcmp(a, "--quick")) {
			o->quick = 1;
			takes = 0;
		} else if (!strcmp(a, "--hardware")) {
			o->hardware = 1;
			takes = 0;
		} else if (!strcmp(a, "--calibrate")) {
			/* an optional FILE.h5; a word.ini after it may be the experiment (setup() decides) */
			o->calibrate = 1;
			takes = v && ends_with(v, ".h5");
			if (takes) {
				o->calibration = v;
			} else if (v && v[0] != '-' && ends_with(v, ".ini")) {
				o->calibrate_word = i + 1;
			} else if (v && v[0] != '-') {
				calibrate_word_bad(rank, v);
				finish(2);
			}
		} else if (!strcmp(a, "--series")) {
			size_t n = v ? strlen(v) : 0;
			if (!n || v[0] == '-') {
				say0(rank, "gpu_run: --series needs a name (" SERIES_RULE "), %s%s%s", CAL_NAME_MAX - 1,
				     v ? "not '" : "and nothing follows it", v ? v : "", v ? "'" : "");
				finish(2);
			}
			if (n >= CAL_NAME_MAX || strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != n) {
				say0(rank, "gpu_run: --series '%s': a name of " SERIES_RULE "", v, CAL_NAME_MAX - 1);
				finish(2);
			}
			o->series = v;
		} else if (!strcmp(a, "--emulate-world")) {
			o->emu.world = (int)flag_number(rank, a, v, 1, 1 << 20, 1);
		} else if (!strcmp(a, "--emulate-gbps")) {
			o->emu.gbps = flag_number(rank, a, v, 1e-3, 1e6, 0);
		} else if (!strcmp(a, "--emulate-lat-us")) {
			o->emu.lat_us = flag_number(rank, a, v, 0, 1e6, 0);
		} else if (!strcmp(a, "--emulate-engine")) {
			o->emu.engine = flag_name(rank, a, v, engines, 2);
			cuda_only = 1;
		} else if (!strcmp(a, "--emulate-ctas")) {
			o->emu.ctas = (int)flag_number(rank, a, v, 1, 1024, 1);
			cuda_only = 1;
		} else if (!strcmp(a, "--nccl-min-ctas")) {
			o->nccl.min_ctas = (int)flag_number(rank, a, v, 1, 64, 1);
			cuda_only = 1;
		} else if (!strcmp(a, "--nccl-max-ctas")) {
			o->nccl.max_ctas = (int)flag_number(rank, a, v, 1, 64, 1);
			cuda_only = 1;
		} else if (!strcmp(a, "--nccl-cga")) {
			o->nccl.cga_cluster = (int)flag_number(rank, a, v, 0, 8, 1);
			cuda_only = 1;
		} else if (!strcmp(a, "--nccl-cta-policy")) {
			o->nccl.cta_policy = flag_name(rank, a, v, policies, 3);
			cuda_only = 1;
		} else if (!strcmp(a, "--attention")) {
			o->cuda.attention = flag_name(rank, a, v, attention, 2);
			cuda_only = 1;
		} else if (!strcmp(a, "--gemm-autotune")) {
			o->cuda.gemm_autotune = 1;
			takes = 0;
			cuda_only = 1;
		} else if (!strcmp(a, "--staged-collectives")) {
			o->staged = 1;
			takes = 0;
			cuda_only = 1;
		} else {
			continue;
		}
		if ((takes || !strcmp(a, "--calibrate")) &&
		    given_before(given, &ngiven, (int)(sizeof given / sizeof given[0]), a)) {
			say0(rank, "gpu_run: %s: given twice", a);
			finish(2);
		}
		if (cuda_only && !o->cuda_flag) {
			o->cuda_flag = 1;
			o->cuda_flag_name = a;
		}
		argv[i] = NULL;
		if (takes)
			argv[++i] = NULL;
	}
	if (o->series && !o->calibrate) {
		say0(rank, "gpu_run: --series names a calibration's series: it goes with --calibrate");
		finish(2);
	}
	if (o->quick && !o->calibrate) {
		say0(rank, "gpu_run: --quick makes a calibration short (a few points): it goes with --calibrate");
		finish(2);
	}
	if (o->calibrate && o->cuda.gemm_autotune) {
		say0(rank, "gpu_run: --calibrate with --gemm-autotune: the autotuning synchronizes the stream, and the "
			   "calibration queues its work behind a gate first; calibrate with the heuristic's first "
			   "algorithm (the default)");
		finish(2);
	}
	if (o->calibrate && o->cuda.attention == 1) {
		say0(rank, "gpu_run: --calibrate with --attention cudnn: a cuDNN plan that needs a larger workspace "
			   "synchronizes the device, and the calibration queues its work behind a gate first, so the "
			   "two would wait for each other; calibrate with mma (the default)");
		finish(2);
	}
	if (o->staged && o->emu.world > 0) {
		say0(rank, "gpu_run: --staged-collectives with --emulate-world: an emulated rank has no peers to stage "
			   "collectives with; run the N ranks (mpirun -np N) with --staged-collectives, or one as rank 0 "
			   "of N with --emulate-world");
		finish(2);
	}
	if (o->staged && o->calibrate) {
		say0(rank, "gpu_run: --calibrate with --staged-collectives: a calibration measures the collectives "
			   "./sim prices (NCCL's, or an emulated fabric's), and staged ones go through the host");
		finish(2);
	}
	if (o->staged && (o->nccl.min_ctas > 0 || o->nccl.max_ctas > 0 || o->nccl.cga_cluster >= 0 ||
			  o->nccl.cta_policy >= 0)) {
		say0(rank, "gpu_run: --staged-collectives makes no NCCL communicator: the --nccl-* flags have "
			   "nothing to configure");
		finish(2);
	}
	if (o->nccl.min_ctas > 0 && o->nccl.max_ctas > 0 && o->nccl.min_ctas > o->nccl.max_ctas) {
		say0(rank, "gpu_run: --nccl-min-ctas %d is more than --nccl-max-ctas %d", o->nccl.min_ctas,
		     o->nccl.max_ctas);
		finish(2);
	}
	return help;
}

/*
 * The word.ini after --calibrate, when config's parser did not take it as
 * the experiment file (there is one before it): -1 after saying so.
 */
static int check_calibrate_word(int rank, const struct run_opts *o, char **argv)
{
	if (!o->calibrate_word || !argv[o->calibrate_word])
		return 0;
	calibrate_word_bad(rank, argv[o->calibrate_word]);
	return -1;
}

/* Parse and check everything; on bad input every rank exits 2. */
static void setup(struct experiment *e, struct run_opts *o, int rank, int world, int argc, char **argv)
{
	const char *where;
	int cuda;

	config_init(e);
	if (config_parse_args(e, argc, argv) != 0 || check_calibrate_word(rank, o, argv) != 0 ||
	    config_check_leftovers(argc, argv, "./gpu_run", own_flags) != 0 || config_resolve(e) != 0) {
		config_release(e);
		finish(2);
	}
	where = e->path[0] ? e->path : "gpu_run";
	cuda = !strcmp(e->run.device, "cuda");
	/* run.out would be silently ignored: neither mode runs the steps whose results it holds */
	if (e->run.out[0] && (o->calibrate || o->hardware)) {
		if (o->calibrate)
			say0(rank, "gpu_run: --out (run.out = %s) cannot be used with --calibrate (the calibration goes "
				   "to its own file: --calibrate FILE.h5, or data/calibration/<hardware>-<backend>.h5)",
			     e->run.out);
		else
			say0(rank, "gpu_run: --out (run.out = %s) cannot be used with --hardware (it prints the name "
				   "of this machine's calibration and runs nothing)", e->run.out);
		config_release(e);
		finish(2);
	}
#ifndef GPU_RUN_CUDA
	if (cuda) {
		say0(rank, "%s: run.device = cuda: this build of gpu_run has no CUDA backend (CUDA was not found "
			   "when it was built: nvcc, nccl.h, libnccl); use --device cpu", where);
		config_release(e);
		finish(2);
	}
#endif
	if (e->policy.ac >= AC_COUNT) {
		say0(rank, "%s: policy.ac = %s: gpu_run's models (gpu/ref, gpu/cuda) keep activations for none, "
			   "full and selective only; PyTorch's per-op and per-layer checkpointing are priced by ./sim",
		     where, ac_names[e->policy.ac]);
		config_release(e);
		finish(2);
	}
	if (!cuda && o->cuda_flag) {
		say0(rank, "%s: %s is an option of the cuda backend; this run's device is %s", where,
		     o->cuda_flag_name, e->run.device);
		config_release(e);
		finish(2);
	}
	if (o->emu.world > 0) {
		if (o->emu.world != cluster_world(&e->cluster)) {
			say0(rank, "%s: --emulate-world %d: the job it emulates has cluster.nodes * "
				   "cluster.gpus_per_node = %d * %d = %d ranks; the two must agree",
			     where, o->emu.world, e->cluster.nodes, e->cluster.gpus_per_node,
			     cluster_world(&e->cluster));
			config_release(e);
			finish(2);
		}
		if (world != 1) {
			say0(rank, "%s: --emulate-world runs one process as rank 0 of the job: start it with "
				   "mpirun -np 1 (it has %d ranks)", where, world);
			config_release(e);
			finish(2);
		}
		if (o->emu.ctas == 0)
			o->emu.ctas = e->cluster.gpu.nccl_sms > 0 ? e->cluster.gpu.nccl_sms : 16;
		return;
	}
	if (o->emu.gbps > 0 || o->emu.lat_us >= 0 || o->emu.ctas || o->emu.engine) {
		say0(rank, "%s: --emulate-gbps, --emulate-lat-us, --emulate-engine and --emulate-ctas need "
			   "--emulate-world N", where);
		config_release(e);
		finish(2);
	}
	if (world != cluster_world(&e->cluster)) {
		say0(rank, "%s: gpu_run was started with %d MPI rank%s, but the experiment's cluster has "
			   "cluster.nodes * cluster.gpus_per_node = %d * %d = %d GPUs; start it with "
			   "mpirun -np %d",
		     where, world, world == 1 ? "" : "s", e->cluster.nodes, e->cluster.gpus_per_node,
		     cluster_world(&e->cluster), cluster_world(&e->cluster));
		config_release(e);
		finish(2);
	}
}

/*
 * The outputs break no rule of core/outfile.h: run_out (a results file)
 * and cal (--calibrate's file), either NULL or "" for none; checked by
 * rank 0, which writes them. 0 or -1 on every rank.
 */
static int check_outputs(const struct experiment *e, const char *run_out, const char *cal, int rank)
{
	const struct outfile outs[] = { { "run.out =", run_out, results_refusal },
					{ "--calibrate", cal, calibration_refusal } };
	int rc = rank == 0 ? outfile_check(outs, 2, (const char *const[]){ e->path, NULL }) : 0;

	mpi_check(MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD));
	return rc;
}

/* Training diverged at step (0: after the last step): say so on rank 0, and every rank exits 3. */
static void diverged(const struct experiment *e, int rank, int step, const char *what, double v)
{
	char when[32];

	snprintf(when, sizeof when, step ? "step %d" : "after the last step", step);
	say0(rank, "gpu_run: %s: %s is %s: training diverged (run.lr = %g, run.weight_decay = %g); "
		   "stopping%s%s", when, what, isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf", e->run.lr, e->run.weight_decay,
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
	char b[32], r[32], line[256];

	printf("summary: step time %.3f ms (median of %d steps, 10th to 90th percentile %.3f to %.3f ms), "
	       "%.0f tokens/s per rank, MFU %.2f%% of %s\n", m->step_time_s * 1e3, m->steps, m->step_time_p10_s * 1e3,
	       m->step_time_p90_s * 1e3, m->tokens_per_s_per_gpu, 100 * m->mfu, s->exp->cluster.gpu.name);
	printf("summary: compute %.3f ms, exposed communication %.3f ms, %llu wire bytes per rank\n",
	       m->compute_s * 1e3, m->exposed_comm_s * 1e3, (unsigned long long)m->comm_bytes_per_gpu);
	printf("summary: peak memory %llu bytes allocated (%s), %llu reserved (%s):",
	       (unsigned long long)m->peak_alloc_bytes, mib(m->peak_alloc_bytes, b, sizeof(b)),
	       (unsigned long long)m->peak_reserved_bytes, mib(m->peak_reserved_bytes, r, sizeof(r)));
	for (int c = 0; c < MEM_CAT_COUNT; c++)
		if (m->peak_by_cat[c])
			printf(" %s %s", mem_cat_name(c), mib(m->peak_by_cat[c], b, sizeof(b)));
	printf("\n");
	if (summary_allocator_line(s->exp, m, line, sizeof(line)))
		printf("summary: %s\n", line);
}

static double sorted_stat(double *v, int n, double q)
{
	gsl_sort(v, 1, (size_t)n);
	return q < 0 ? gsl_stats_median_from_sorted_data(v, 1, (size_t)n)
		     : gsl_stats_quantile_from_sorted_data(v, 1, (size_t)n, q);
}

/*
 * The summary of the measured steps: the median step time with its 10th
 * and 90th percentiles, the median compute and exposed communication, the
 * ops of the recorded step (summary_median_step's), the memory peaks of
 * the run.
 */
static void measured_summary(const struct schedule *s, const struct op_timing *recorded, double *step_s,
			     double *compute_s, double *exposed_s, int n, const struct mem_peaks *peaks,
			     struct summary *sum)
{
	double *v = xmalloc(sizeof(double) * (size_t)n), med;

	memcpy(v, step_s, sizeof(double) * (size_t)n);
	med = sorted_stat(v, n, -1);
	summary_of_step(s, recorded, (uint64_t)(med * 1e9 + 0.5), peaks, sum);
	sum->step_time_p10_s = sorted_stat(v, n, 0.1);
	sum->step_time_p90_s = sorted_stat(v, n, 0.9);
	sum->steps = n;
	sum->compute_s = sorted_stat(compute_s, n, -1);
	sum->exposed_comm_s = sorted_stat(exposed_s, n, -1);
	free(v);
}

/* The wall clock in seconds (the phases of a run). */
static double wall_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/*
 * Where a run's time went, one line: at[0] its start, at[i] the end of
 * phase i (the steps' own time is what each step line says, summed).
 */
enum run_phase { RP_START = 1, RP_BACKEND, RP_BUFFERS, RP_STEPS, RP_RESULTS, RP_RELEASE, RP_COUNT };

static void print_phases(const double *at, int steps)
{
	printf("gpu_run: %.2f s in all: start (MPI, the experiment, the schedule) %.2f s, backend (device, libraries, "
	       "communicators) %.2f s, buffers and initial weights %.2f s, %d steps %.2f s, results %.2f s, "
	       "release %.2f s\n",
	       at[RP_RELEASE] - at[0], at[RP_START] - at[0], at[RP_BACKEND] - at[RP_START],
	       at[RP_BUFFERS] - at[RP_BACKEND], steps, at[RP_STEPS] - at[RP_BUFFERS], at[RP_RESULTS] - at[RP_STEPS],
	       at[RP_RELEASE] - at[RP_RESULTS]);
}

/* MPI with every thread free to call it: each stream of the CPU backend runs its own collectives. */
static void mpi_start(int *argc, char ***argv)
{
	int provided = MPI_THREAD_SINGLE;

	/* streams that wait in a collective should give their core to the compute stream */
	setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
	mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
	if (provided < MPI_THREAD_MULTIPLE) {
		text_line(stderr, "gpu_run: this MPI gives thread level %d, and the backend's streams need "
				"MPI_THREAD_MULTIPLE (%d)", provided, MPI_THREAD_MULTIPLE);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
}

static void abort_job(void)
{
	MPI_Abort(MPI_COMM_WORLD, 1);
}

/*
 * The backend of run.device. The CUDA one needs a GPU per rank and, unless
 * emulated, NCCL communicators; a failure on any rank (no GPU, too few)
 * is bad input on every rank: exit 2 together.
 */
static struct backend *backend_new(const struct experiment *e, const struct schedule *s, struct comm *c,
				   const struct run_opts *o, char *err, int errlen)
{
	if (strcmp(e->run.device, "cuda") != 0)
		return backend_cpu_new(s, c, err, errlen);
#ifdef GPU_RUN_CUDA
	{
		int lrank = 0, lsize = 1, bad, any = 0;
		struct backend *be = NULL;
		if (!c->emulated)
			comm_node(&lrank, &lsize);
		/*
		 * The calibration queues its work behind a gate that a stream waits
		 * on in the device. A kernel launched the first time loads its module
		 * lazily (CUDA's default), which may wait for the whole device: for
		 * the gated stream, then, which waits for the host. Every module is
		 * loaded at start instead (unless the environment says otherwise).
		 */
		if (o->calibrate)
			setenv("CUDA_MODULE_LOADING", "EAGER", 0);
		bad = backend_cuda_select(lrank, lsize, o->staged, err, errlen) < 0;
		mpi_check(MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
		if (any) {
			if (!bad)
				snprintf(err, errlen, "another rank has no GPU of its own");
			return NULL;
		}
		backend_cuda_on_failure(c);
		comm_nccl_init(c, s, &o->nccl);
		be = backend_cuda_new(s, c, &o->cuda, err, errlen);
		bad = be == NULL;
		mpi_check(MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
		return any ? NULL : be;
	}
#else
	(void)o;
	snprintf(err, errlen, "no CUDA backend in this build");
	return NULL;
#endif
}

/* Release what main() set up, in the reverse order, and leave MPI. */
static void release_run(struct backend *be, struct comm *c, struct schedule *s, struct experiment *e, FILE *quiet)
{
	be->ops->release(be);
#ifdef GPU_RUN_CUDA
	if (!strcmp(e->run.device, "cuda"))
		comm_nccl_release(c);
#endif
	comm_release(c);
	schedule_free(s);
	config_release(e);
	if (quiet)
		fclose(quiet);
	mpi_finish();
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
	struct run_opts opts;
	struct runinfo info;
	int rank, world, rc = 0, total;
	double psum, psq;
	struct op_timing *steps_t;   /* the ops of every measured step */
	const struct op_timing *recorded; /* those of the one a run records */
	struct op_timing *by_rank = NULL; /* rank 0: every rank's ops of the recorded step */
	double *step_s, *compute_s, *exposed_s;
	char hw[64];
	char err[512], accum[32], wrap[32], phase[64];
	FILE *quiet = NULL;
	double at[RP_COUNT];

	at[0] = wall_s();
	mpi_start(&argc, &argv);
	xalloc_failed = abort_job;
	mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
	mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &world));
	if (rank != 0) {
		quiet = fopen("/dev/null", "w");
		config_errfile = quiet;
	}
	if (take_own_flags(rank, argc, argv, &opts)) {
		if (rank == 0)
			usage(stdout);
		finish(0);
	}
	setup(&e, &opts, rank, world, argc, argv);
	if (check_outputs(&e, e.run.out, opts.calibration, rank) != 0) {
		config_release(&e);
		finish(2);
	}
	watchdog_start(e.run.timeout_s, rank);
	watchdog_waiting("the setup (communicators, memory, initial weights)");
	s = schedule_new(&e, err, sizeof(err));
	if (!s) {
		say0(rank, "%s: %s", e.path[0] ? e.path : "gpu_run", err);
		config_release(&e);
		finish(2);
	}
	if (opts.emu.world > 0)
		comm_init_emulated(&c, s, &opts.emu);
	else
		comm_init(&c, s);
	c.staged = opts.staged; /* the CUDA backend's collectives through the host (the option is CUDA's alone) */
	at[RP_START] = wall_s();
	be = backend_new(&e, s, &c, &opts, err, sizeof(err));
	if (!be) {
		/* every rank fails alike; rank 0 says why (its own reason, or that another rank failed) */
		say0(rank, "%s: %s", e.path[0] ? e.path : "gpu_run", err);
		finish(2);
	}
	if (opts.hardware || opts.calibrate) {
		if (opts.hardware) {
			be->ops->hardware(be, hw, sizeof hw);
			if (rank == 0)
				printf("%s-%s\n", hw, be->ops->name);
		} else if (!be->ops->kernel) {
			say0(rank, "gpu_run: --calibrate: the %s backend has no kernel microbenchmark", be->ops->name);
			rc = 2;
		} else {
			char file[1024] = "";
			const char *path = opts.calibration;
			if (!path) { /* the default names the hardware: checked now that the backend knows it */
				if (rank == 0) /* which writes it */
					calibrate_default_path(be, file, sizeof file);
				path = file;
				rc = check_outputs(&e, NULL, path, rank) != 0 ? 2 : 0;
			}
			if (rc == 0) {
				/*
				 * the streams run microbenchmarks, not the schedule's ops that the
				 * backend's description names by their events: the phase alone
				 */
				watchdog_describe_with(NULL, NULL);
				watchdog_waiting("the calibration's microbenchmarks");
				rc = calibrate(s, &c, be, path, opts.series, opts.quick) == 0 ? 0 : 1;
			}
		}
		release_run(be, &c, s, &e, quiet);
		return rc;
	}
	at[RP_BACKEND] = wall_s();
	x = exec_new(s, &c, be, opts.serialize, err, sizeof(err));
	{
		/* a step the device cannot hold: every rank stops before the first step, exit 2; the first that failed says why */
		int first = x ? INT_MAX : rank;
		mpi_check(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
		if (first != INT_MAX) {
			if (rank == first)
				text_line(stderr, "gpu_run: rank %d: %s", rank, err);
			exec_free(x);
			finish(2);
		}
	}
	at[RP_BUFFERS] = wall_s();
	t = xcalloc((size_t)s->nops, sizeof(*t));
	total = e.run.warmup + e.run.steps;
	{
		/*
		 * every measured step's op timings are kept until the end, when the
		 * median step is the one recorded: refuse a run whose timings would not
		 * fit in memory before its first step, not with an allocation's failure
		 */
		double need = (double)e.run.steps * s->nops * sizeof(*steps_t);
		if (need > STEP_TIMINGS_MAX) {
			say0(rank, "gpu_run: run.steps = %d: each measured step's op timings are kept to record the median "
				   "step, %.1f GiB for this schedule's %d ops; at most %lld steps (%.0f GiB): measure fewer "
				   "steps", e.run.steps, need / (1u << 30), s->nops,
			     (long long)(STEP_TIMINGS_MAX / ((double)s->nops * sizeof(*steps_t))),
			     STEP_TIMINGS_MAX / (1u << 30));
			exec_free(x);
			finish(2);
		}
	}
	if (rank == 0)
		printf("gpu_run: %s on %d x %d %s (%s backend%s%s), %s, accum %s x %d, wrap %s, "
		       "ac %s: %d ops per step, %d warmup + %d steps\n",
		       e.model.name, e.cluster.nodes, e.cluster.gpus_per_node, e.cluster.gpu.name, be->ops->name,
		       opts.serialize ? ", serialized" : "", c.emulated ? ", rank 0 of an emulated fabric" : "",
		       sharding_names[e.policy.sharding], policy_accum_str(&e.policy, accum, sizeof(accum)),
		       e.policy.microbatches, policy_wrap_str(&e.policy, wrap, sizeof(wrap)),
		       ac_names[e.policy.ac], s->nops, e.run.warmup, e.run.steps);
	steps_t = xcalloc((size_t)e.run.steps * (size_t)s->nops + 1, sizeof(*steps_t));
	step_s = xcalloc((size_t)e.run.steps, sizeof(double));
	compute_s = xcalloc((size_t)e.run.steps, sizeof(double));
	exposed_s = xcalloc((size_t)e.run.steps, sizeof(double));
	for (int step = 1; step <= total; step++) {
		double v[3];
		uint64_t step_ns = 0;
		snprintf(phase, sizeof phase, "the barrier before step %d", step);
		watchdog_waiting(phase);
		mpi_check(MPI_Barrier(MPI_COMM_WORLD));
		snprintf(phase, sizeof phase, "step %d", step);
		watchdog_waiting(phase);
		v[0] = exec_step(x, step, t, &step_ns);
		v[1] = step_ns * 1e-6;
		v[2] = exec_out_of_memory(x);
		if (v[2] > 0 && world > 1) {
			/*
			 * this rank stopped mid-step (said above), and the others wait in
			 * the collectives it will not post: end the job now, not at the
			 * watchdog's limit
			 */
			text_line(stderr, "gpu_run: step %d: rank %d is out of device memory: the step does not fit this "
					"device (./sim predicts its peak reserved memory); stopping every rank%s%s", step,
				  rank, e.run.out[0] ? ", nothing appended to " : "", e.run.out);
			fflush(stdout);
			abort_job();
		}
		snprintf(phase, sizeof phase, "the all-reduce of the loss of step %d", step);
		watchdog_waiting(phase);
		mpi_check(MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
		mpi_check(MPI_Allreduce(MPI_IN_PLACE, &v[1], 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
		if (v[2] > 0) { /* a rank's device could not hold the step (said above): every rank stops */
			say0(rank, "gpu_run: step %d: out of device memory: the step does not fit this device (./sim predicts "
				   "its peak reserved memory); stopping%s%s", step,
			     e.run.out[0] ? ", nothing appended to " : "", e.run.out);
			fflush(stdout);
			finish(1);
		}
		if (!isfinite(v[0])) /* the same sum on every rank: they stop together */
			diverged(&e, rank, step, "the loss", v[0]);
		if (rank == 0)
			printf("step %d loss %.9f time %.3f ms%s\n", step, v[0] / ((double)world * s->microbatches),
			       v[1], step <= e.run.warmup ? " (warmup)" : "");
		if (step > e.run.warmup) {
			int j = step - e.run.warmup - 1;
			summary_overlap(s, t, &compute_s[j], &exposed_s[j]);
			step_s[j] = v[1] * 1e-3;
			memcpy(steps_t + (size_t)j * s->nops, t, sizeof(*t) * (size_t)s->nops);
		}
	}
	at[RP_STEPS] = wall_s();
	/* the step whose ops are recorded: the same index on every rank (the step times are the slowest rank's) */
	recorded = steps_t + (size_t)summary_median_step(step_s, e.run.steps) * s->nops;
	measured_summary(s, recorded, step_s, compute_s, exposed_s, e.run.steps, &exec_memory(x)->peaks, &sum);
	be->ops->hardware(be, hw, sizeof hw);
	watchdog_waiting("the all-reduce of the parameter sums");
	exec_param_sums(x, &psum, &psq);
	if (!isfinite(psq)) /* the same over every shard group */
		diverged(&e, rank, 0, "the sum of squares of the parameters", psq);
	runinfo_init(&info);
	runinfo_put(&info, "backend", be->ops->name);
	{
		char id[24];
		runinfo_binary(id, sizeof id);
		if (id[0])
			runinfo_put(&info, "binary", id);
	}
	comm_describe(&c, runinfo_put, &info);
	if (be->ops->describe)
		be->ops->describe(be, runinfo_put, &info);
	/* every rank's timings of the recorded step (the median's index is the same on every rank) */
	watchdog_waiting("the gather of every rank's timings");
	by_rank = rank == 0 ? xcalloc((size_t)world * (size_t)s->nops + 1, sizeof(*by_rank)) : NULL;
	mpi_check(MPI_Gather(recorded, 2 * s->nops, MPI_UINT64_T, by_rank, 2 * s->nops, MPI_UINT64_T, 0, MPI_COMM_WORLD));
	if (rank == 0) {
		printf("params sum %.9e sumsq %.9e%s\n", psum, psq, c.emulated ? " (this rank's shards)" : "");
		print_summary(s, &sum);
		runinfo_print(&info, stdout);
		if (e.run.out[0]) {
			const struct memory *mem = exec_memory(x);
			struct run_result rr = {
				.source = "gpu_run",
				.hardware = hw,
				.exp = &e,
				.sched = s,
				.ops = recorded,
				.ops_by_rank = by_rank,
				.nranks = world,
				.nmem = mem->nsamples,
				.mem = mem->samples,
				.sum = sum,
			};
			fflush(stdout); /* the report is out before the file is written */
			if (runinfo_append_run(e.run.out, &rr, &info) != 0)
				rc = 1;
		}
		fflush(stdout);
	}
	watchdog_waiting("the broadcast of the exit status (rank 0 writes run.out)");
	mpi_check(MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD));
	runinfo_release(&info);
	at[RP_RESULTS] = wall_s();
	free(t);
	free(steps_t);
	free(by_rank);
	free(step_s);
	free(compute_s);
	free(exposed_s);
	exec_free(x);
	release_run(be, &c, s, &e, quiet);
	at[RP_RELEASE] = wall_s();
	if (rank == 0) {
		print_phases(at, total);
		fflush(stdout);
	}
	return rc;
}
