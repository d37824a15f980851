/*
 * calibrate.c - the microbenchmarks of `gpu_run --calibrate` (see
 * calibrate.h).
 *
 * Every measurement has the same shape: all ranks meet at a barrier, start
 * the backend's step clock, launch the work between two events on a
 * stream, wait for the streams, and read the events; the per-call time is
 * the slowest rank's (a rank's own overheads: their mean over the ranks).
 * Repetitions are chosen so that each measurement
 * lasts about TARGET_NS (QUICK_NS in quick mode), and a measurement is
 * repeated MEASURES times, keeping the median.
 */
#include "calibrate.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>

#include "calibration.h"
#include "exec.h"
#include "layout.h"
#include "runinfo.h"
#include "xalloc.h"

#define TARGET_NS 30e6     /* each measurement lasts about this long */
#define QUICK_NS 2e6
#define MEASURES 3         /* median of this many measurements */
#define MAX_REPS 200
#define CHAIN 64           /* empty ops or ping-pongs per overhead measurement */

struct cal {
	const struct schedule *s;
	struct comm *c;
	struct backend *b;
	const struct backend_ops *o;
	int quick;
	double target_ns;
	int max_reps;          /* calls one stream may queue behind the gate: MAX_REPS, or the backend's gate_calls */
	int done, total;       /* progress */
	struct timespec t0;
	void *dev[4];          /* collective buffers: in and out of one, of a second beside it */
	uint64_t dev_bytes;
};

static double median(double *v, size_t n)
{
	gsl_sort(v, 1, n);
	return gsl_stats_median_from_sorted_data(v, 1, n);
}

/* The mean over the processes of x (one on an emulated fabric, whose world is the job's N). */
static double over_ranks(struct cal *k, double x)
{
	int procs = 1;

	(void)k;
	mpi_check(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
	mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &procs));
	return x / procs;
}

/*
 * The slowest rank's x. What the ranks of a data-parallel step do at once
 * goes at the pace of the slowest: each collective waits for its last
 * rank, and the step ends when the last rank ends. Work is therefore
 * measured as its slowest rank does it; a rank's own costs (issuing an
 * op, waking a stream) as their mean.
 */
static double slowest_rank(double x)
{
	mpi_check(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
	return x;
}

static void progress(struct cal *k, const char *what)
{
	struct timespec t;

	int tty = isatty(2);

	k->done++;
	if (k->c->rank || (!tty && k->done * 10 / k->total == (k->done - 1) * 10 / k->total && k->done < k->total))
		return; /* to a file: a line every tenth */
	clock_gettime(CLOCK_MONOTONIC, &t);
	fprintf(stderr, "%scalibrate: %3d/%d %-28s %6.1f s%s", tty ? "\r" : "", k->done, k->total, what,
		(double)(t.tv_sec - k->t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - k->t0.tv_nsec),
		tty && k->done < k->total ? "" : "\n");
}

/* The event that opens the gate, and a stream that is neither st nor one measured beside it. */
#define GATE 1000

static int gate_stream(int st)
{
	return st == ST_HOST ? ST_COPY : ST_HOST;
}

/* What a measurement launches: reps times, on stream st, between events 0 and 1. */
typedef void (*work_fn)(struct cal *k, int st, void *arg);

/*
 * ns per call of fn, all ranks at once; `beside` runs before it (on another
 * stream) when not NULL. The streams start only when all the work is
 * queued (they wait for a gate event the host stream records last), so
 * the calls run back to back, as a step's ops do once issued. Whatever
 * runs behind the gate has run once before without one (probe).
 */
static double measure_once(struct cal *k, int st, work_fn fn, void *arg, int reps, work_fn beside, void *barg)
{
	mpi_check(MPI_Barrier(MPI_COMM_WORLD));
	k->o->step_begin(k->b);
	k->o->wait(k->b, st, GATE);
	if (beside)
		beside(k, -1, barg);
	k->o->record(k->b, st, 0);
	for (int r = 0; r < reps; r++)
		fn(k, st, arg);
	k->o->record(k->b, st, 1);
	k->o->record(k->b, gate_stream(st), GATE);
	k->o->sync(k->b);
	return slowest_rank((double)(k->o->event_ns(k->b, 1) - k->o->event_ns(k->b, 0)) / reps);
}

/*
 * ns of one call of fn, issued with no gate: what sizes the repetitions,
 * and the first use of whatever the call needs (a kernel's module, a
 * library's plan or heuristics, a pool's memory) before any gate is closed
 * on it. A first use may synchronise the context (CUDA Programming Guide,
 * "Lazy Loading", potential hazards; main.c asks for eager loading, but a
 * library may load its kernels its own way): behind a gate it would wait
 * for streams that wait for the host, for ever. The first GPU session's
 * calibration stopped after 32 of 160 measurements, its GPU idle and its
 * host busy, about where the model's kernels were first measured beside a
 * collective; what it waited in is not known (the backend's gate kernel
 * now opens by itself and says so).
 */
static double probe(struct cal *k, int st, work_fn fn, void *arg)
{
	mpi_check(MPI_Barrier(MPI_COMM_WORLD));
	k->o->step_begin(k->b);
	k->o->record(k->b, st, 0);
	fn(k, st, arg);
	k->o->record(k->b, st, 1);
	k->o->sync(k->b);
	return slowest_rank((double)(k->o->event_ns(k->b, 1) - k->o->event_ns(k->b, 0)));
}

/* The median of MEASURES measurements, with repetitions for about target_ns each. */
static double measure(struct cal *k, int st, work_fn fn, void *arg, work_fn beside, void *barg)
{
	double one = probe(k, st, fn, arg), v[MEASURES];
	int reps = one > 0 ? (int)(k->target_ns / one) : MAX_REPS;

	if (reps < 1)
		reps = 1;
	if (reps > k->max_reps)
		reps = k->max_reps;
	for (int i = 0; i < MEASURES; i++)
		v[i] = measure_once(k, st, fn, arg, reps, beside, barg);
	return median(v, MEASURES);
}

/* ---- work ------------------------------------------------------------------------ */

struct kernel_arg {
	const struct kernel *kn;
	const struct model_shape *m;
	int batch;
	int count;       /* when run beside other work */
};

static void run_kernel(struct cal *k, int st, void *arg)
{
	const struct kernel_arg *a = arg;
	k->o->kernel(k->b, st, a->kn, a->m, a->batch);
}

struct coll_arg {
	struct comm *c;  /* the communicators of the schedule it comes from */
	enum op_kind kind;
	int group;
	int stream;
	uint64_t bytes;  /* S */
	int reps;        /* when run beside other work */
	int second;      /* on the second pair of buffers: beside another collective */
};

static void run_collective(struct cal *k, int st, void *arg)
{
	const struct coll_arg *a = arg;
	struct comm_handle *h = comm_handle_of(a->c, a->group, a->stream);
	size_t count = (size_t)(a->bytes / sizeof(float) / (uint64_t)h->size);
	void *in = k->dev[2 * a->second], *out = k->dev[2 * a->second + 1];

	if (count < 1)
		count = 1;
	(void)st;
	switch (a->kind) {
	case OP_ALLGATHER:
		k->o->all_gather(k->b, a->stream, h, out, ELEM_FP32, in, ELEM_FP32, count);
		break;
	case OP_REDUCE_SCATTER:
		k->o->reduce_scatter(k->b, a->stream, h, out, in, count, ELEM_FP32);
		break;
	default:
		k->o->all_reduce(k->b, a->stream, h, in, count * (size_t)h->size, ELEM_FP32);
		break;
	}
}

/* a->reps collectives on their stream, started before the measured work */
static void run_collectives_beside(struct cal *k, int st, void *arg)
{
	const struct coll_arg *a = arg;
	(void)st;
	k->o->wait(k->b, a->stream, GATE);
	for (int i = 0; i < a->reps; i++)
		run_collective(k, a->stream, (void *)a);
}

/* Two collectives, a[0] and a[1], each a[i].reps times on its stream, started before the measured work. */
static void run_two_collectives_beside(struct cal *k, int st, void *arg)
{
	struct coll_arg *a = arg;

	run_collectives_beside(k, st, &a[0]);
	run_collectives_beside(k, st, &a[1]);
}

/*
 * What the collectives are timed beside (ns_busy): a block's kernels,
 * forward then backward, back to back, as an FSDP step overlaps its
 * collectives with them. (Until 2026-11-28 it was the model's largest
 * kernel, the output GEMM, repeated: on the H200 a collective beside it
 * took 2.0-2.2 times its time alone, where the runs' all-gathers beside a
 * forward block took 1.0-1.1 and beside a backward block 1.1-1.7.)
 */
struct busy {
	struct kernel kn[2 * MODEL_MAX_KERNELS];
	int n;
	double ns; /* one pass of the list, its kernels' times alone */
	const struct model_shape *m;
	int batch;
	int count; /* passes, when run beside the measured collectives */
};

/* b->count passes of the list on the compute stream, started before the measured collectives */
static void run_busy_beside(struct cal *k, int st, void *arg)
{
	struct busy *b = arg;
	(void)st;
	k->o->wait(k->b, ST_COMPUTE, GATE);
	for (int c = 0; c < b->count; c++)
		for (int i = 0; i < b->n; i++)
			k->o->kernel(k->b, ST_COMPUTE, &b->kn[i], b->m, b->batch);
}

static void run_zero(struct cal *k, int st, void *arg)
{
	(void)arg;
	k->o->zero(k->b, st, k->dev[0], 64);
}

/* ---- the tables ------------------------------------------------------------------ */

/* Overheads: an empty op as the walker issues it, and the wake of a waiting stream. */
static void overheads(struct cal *k, struct calibration *cal)
{
	double gaps[CHAIN], wakes[2 * CHAIN];
	uint64_t issue;
	int n = 0;

	/* CHAIN empty ops on the compute stream, each between its start and end events, queued before they run */
	mpi_check(MPI_Barrier(MPI_COMM_WORLD));
	k->o->step_begin(k->b);
	k->o->wait(k->b, ST_COMPUTE, GATE);
	issue = k->o->now_ns(k->b);
	for (int i = 0; i < CHAIN; i++) {
		k->o->record(k->b, ST_COMPUTE, 2 * i);
		run_zero(k, ST_COMPUTE, NULL);
		k->o->record(k->b, ST_COMPUTE, 2 * i + 1);
	}
	issue = k->o->now_ns(k->b) - issue;
	k->o->record(k->b, gate_stream(ST_COMPUTE), GATE);
	k->o->sync(k->b);
	cal->issue_ns = over_ranks(k, (double)issue / CHAIN);
	for (int i = 1; i < CHAIN; i++)
		gaps[i - 1] = (double)(k->o->event_ns(k->b, 2 * i + 1) - k->o->event_ns(k->b, 2 * i - 1));
	cal->dispatch_ns = over_ranks(k, median(gaps, CHAIN - 1));
	progress(k, "dispatch");

	/* ping-pong between the compute and the all-gather streams */
	mpi_check(MPI_Barrier(MPI_COMM_WORLD));
	k->o->step_begin(k->b);
	for (int i = 0; i < 2 * CHAIN; i++) {
		int from = i % 2 ? ST_ALLGATHER : ST_COMPUTE, to = i % 2 ? ST_COMPUTE : ST_ALLGATHER;
		if (i == 0)
			k->o->record(k->b, from, 0);
		k->o->wait(k->b, to, i);
		k->o->record(k->b, to, i + 1);
	}
	k->o->sync(k->b);
	for (int i = 0; i < 2 * CHAIN; i++)
		wakes[n++] = (double)(k->o->event_ns(k->b, i + 1) - k->o->event_ns(k->b, i));
	cal->wake_ns = over_ranks(k, median(wakes, (size_t)n));
	progress(k, "wake");
}

static void add_kernel(struct cal_kernel **v, int *n, int *cap, const struct kernel *kn)
{
	struct cal_kernel *x;

	for (int i = 0; i < *n; i++)
		if (!strcmp((*v)[i].name, kn->name) && (*v)[i].m == kn->m && (*v)[i].n == kn->n && (*v)[i].k == kn->k &&
		    (*v)[i].bytes == kn->bytes)
			return;
	if (*n == *cap) {
		*cap = *cap ? 2 * *cap : 64;
		*v = xrealloc(*v, sizeof(**v) * (size_t)*cap);
	}
	x = &(*v)[(*n)++];
	memset(x, 0, sizeof(*x));
	snprintf(x->name, sizeof x->name, "%s", kn->name);
	x->kind = (uint8_t)kn->kind;
	x->m = kn->m;
	x->n = kn->n;
	x->k = kn->k;
	x->flops = kn->flops;
	x->bytes = kn->bytes;
}

/* Every kernel the model's segments run, under every checkpointing and loss mode. */
static int model_kernels(const struct schedule *s, struct cal_kernel **out)
{
	const struct model_shape *m = &s->exp->model;
	struct kernel ks[MODEL_MAX_KERNELS];
	int n = 0, cap = 0, act = elem_bytes(s->act_elem);

	*out = NULL;
	for (int sk = 0; sk < SEG_KIND_COUNT; sk++)
		for (int ph = 0; ph < PH_COUNT; ph++)
			for (int ac = 0; ac < AC_COUNT; ac++)
				for (int loss = 0; loss < LOSS_COUNT; loss++) {
					int nk = model_segment_kernels(m, s->batch, sk, ph, ac, loss, act, ks, MODEL_MAX_KERNELS);
					for (int i = 0; i < nk; i++)
						add_kernel(out, &n, &cap, &ks[i]);
				}
	return n;
}

/*
 * GEMMs around the model's: each of its shapes with m and n halved and
 * doubled, and m across the GPU's tile boundary (t tiles, and one row
 * more), so that shapes the model does not have are priced from
 * neighbours.
 */
static int gemm_grid(const struct schedule *s, const struct cal_kernel *mk, int nmk, int quick, struct cal_kernel **out)
{
	static const double scale[] = { 0.5, 1.0, 2.0 };
	int tm = s->exp->cluster.gpu.gemm_tile_m, n = 0, cap = 0;

	*out = NULL;
	for (int i = 0; i < nmk; i++) {
		if (mk[i].kind != K_GEMM)
			continue;
		for (int a = 0; a < 3; a++)
			for (int b = 0; b < 3; b++) {
				struct kernel kn = { .kind = K_GEMM };
				snprintf(kn.name, sizeof kn.name, "gemm");
				kn.m = (int64_t)(mk[i].m * scale[a]);
				kn.n = (int64_t)(mk[i].n * scale[b]);
				kn.k = mk[i].k;
				if (kn.m < 1 || kn.n < 1)
					continue;
				kn.flops = 2ull * (uint64_t)kn.m * (uint64_t)kn.n * (uint64_t)kn.k;
				kn.bytes = 4ull * ((uint64_t)kn.m * kn.k + (uint64_t)kn.k * kn.n + (uint64_t)kn.m * kn.n);
				add_kernel(out, &n, &cap, &kn);
				if (quick)
					break;
			}
		if (tm > 1 && !quick) {
			int64_t t = mk[i].m / tm > 0 ? mk[i].m / tm : 1;
			for (int d = 0; d < 2; d++) {
				struct kernel kn = { .kind = K_GEMM };
				snprintf(kn.name, sizeof kn.name, "gemm");
				kn.m = t * tm + d;
				kn.n = mk[i].n;
				kn.k = mk[i].k;
				kn.flops = 2ull * (uint64_t)kn.m * (uint64_t)kn.n * (uint64_t)kn.k;
				kn.bytes = 4ull * ((uint64_t)kn.m * kn.k + (uint64_t)kn.k * kn.n + (uint64_t)kn.m * kn.n);
				add_kernel(out, &n, &cap, &kn);
			}
		}
	}
	return n;
}

/* The collective each kernel is measured beside: the schedule's largest all-gather, on its group. */
static int beside_collective(const struct schedule *s, struct comm *c, struct coll_arg *a)
{
	memset(a, 0, sizeof(*a));
	a->c = c;
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		if (op_is_collective(o->kind) && schedule_group_size(s, o->group) > 1 && o->bytes > a->bytes) {
			a->kind = o->kind;
			a->group = o->group;
			a->stream = o->stream;
			a->bytes = o->bytes;
		}
	}
	return a->bytes > 0;
}

static void add_coll(struct cal_coll **v, int *n, int *cap, enum op_kind kind, int ranks, uint64_t bytes)
{
	for (int i = 0; i < *n; i++)
		if ((*v)[i].kind == kind && (*v)[i].ranks == ranks && (*v)[i].bytes == bytes)
			return;
	if (*n == *cap) {
		*cap = *cap ? 2 * *cap : 64;
		*v = xrealloc(*v, sizeof(**v) * (size_t)*cap);
	}
	(*v)[(*n)++] = (struct cal_coll){ (uint8_t)kind, ranks, bytes, 0, 0 };
}

/*
 * The schedules whose collectives are measured: the run's own, and ddp,
 * fsdp and hsdp on its cluster where the rules allow them, so that one
 * calibration prices every sharding (each has its own collective kinds,
 * groups and sizes). v[0] is the run's; the others are made here.
 */
struct variant {
	struct experiment e;
	struct schedule *s;
	struct comm c;
};

static int variants(const struct schedule *s, struct comm *c, int nccl, struct variant *v)
{
	(void)nccl; /* a build without CUDA has no NCCL */
	struct experiment others[POLICY_SHARDING_VARIANTS];
	int n = 1, nothers = schedule_calibration_variants(s, others);

	v[0].s = (struct schedule *)s;
	v[0].c = *c;
	for (int i = 0; i < nothers; i++) {
		struct variant *w = &v[n];
		char err[256];

		w->e = others[i]; /* shares the run's strings: never released */
		w->s = schedule_new(&w->e, err, sizeof err);
		if (!w->s)
			continue;
		if (c->emulated) { /* rank 0 of the same emulated job */
			comm_init_emulated(&w->c, w->s, &c->emu);
		} else {
			comm_init(&w->c, w->s);
#ifdef GPU_RUN_CUDA
			if (nccl) /* the cuda backend's collectives run on NCCL communicators of their own */
				comm_nccl_init(&w->c, w->s, &c->nccl_opts);
#endif
		}
		n++;
	}
	return n;
}

static void variants_release(struct variant *v, int n, int nccl)
{
	(void)nccl;
	for (int i = 1; i < n; i++) {
#ifdef GPU_RUN_CUDA
		if (nccl && !v[i].c.emulated)
			comm_nccl_release(&v[i].c);
#endif
		comm_release(&v[i].c);
		schedule_free(v[i].s);
	}
}

/*
 * The collectives of the schedules, per kind and group size: sizes from
 * 1 KiB up to the largest, and each size the schedules use.
 */
static int collective_list(struct variant *v, int nv, int quick, struct cal_coll **out, struct coll_arg **how)
{
	int n = 0, cap = 0, have;

	*out = NULL;
	for (int x = 0; x < nv; x++) {
		const struct schedule *s = v[x].s;
		for (int i = 0; i < s->nops; i++) {
			const struct op *o = &s->ops[i];
			int ranks = schedule_group_size(s, o->group);
			uint64_t largest = 0;
			if (!op_is_collective(o->kind) || ranks < 2)
				continue;
			add_coll(out, &n, &cap, o->kind, ranks, o->bytes);
			for (int j = 0; j < s->nops; j++)
				if (s->ops[j].kind == o->kind && s->ops[j].group == o->group && s->ops[j].bytes > largest)
					largest = s->ops[j].bytes;
			for (uint64_t b = 1024; b < largest; b *= quick ? 64 : 4)
				add_coll(out, &n, &cap, o->kind, ranks, b);
		}
	}
	/* how to run each: the group and stream of the first op of that kind and size of group */
	*how = xcalloc((size_t)n + 1, sizeof(**how));
	for (int c = 0; c < n; c++) {
		have = 0;
		for (int x = 0; x < nv && !have; x++)
			for (int i = 0; i < v[x].s->nops && !have; i++) {
				const struct op *o = &v[x].s->ops[i];
				if (o->kind == (*out)[c].kind && schedule_group_size(v[x].s, o->group) == (*out)[c].ranks) {
					(*how)[c] = (struct coll_arg){ &v[x].c, o->kind, o->group, o->stream, (*out)[c].bytes, 0, 0 };
					have = 1;
				}
			}
	}
	return n;
}

/*
 * What the model's kernels are measured beside: one collective (the
 * schedule's largest), two at once on two streams (that one and the
 * largest of the calibrated schedules on another stream, on buffers of
 * its own), and the largest all-reduce of the calibrated schedules alone
 * (the one collective, when that is it), each with its time alone.
 */
struct beside {
	struct coll_arg one, two[2], ar;
	double one_ns, two_ns[2], ar_ns;
	int has_one, has_two, has_ar, ar_is_one;
};

/* The time alone of the collective of kind, group size and bytes measured in cs (0: not measured). */
static double coll_ns_of(const struct cal_coll *cs, int n, enum op_kind kind, int ranks, uint64_t bytes)
{
	for (int i = 0; i < n; i++)
		if (cs[i].kind == kind && cs[i].ranks == ranks && cs[i].bytes == bytes)
			return cs[i].ns;
	return 0;
}

static void beside_plan(struct beside *b, const struct schedule *s, struct comm *c, struct variant *v, int nv,
			const struct cal_coll *cs, int ncs)
{
	memset(b, 0, sizeof(*b));
	if (!beside_collective(s, c, &b->one))
		return;
	b->one_ns = coll_ns_of(cs, ncs, b->one.kind, schedule_group_size(s, b->one.group), b->one.bytes);
	b->has_one = b->one_ns > 0;
	b->two[0] = b->one;
	b->two_ns[0] = b->one_ns;
	for (int x = 0; x < nv; x++)
		for (int i = 0; i < v[x].s->nops; i++) {
			const struct op *o = &v[x].s->ops[i];
			int ranks = schedule_group_size(v[x].s, o->group);
			if (op_is_collective(o->kind) && ranks > 1 && o->stream != b->one.stream &&
			    o->bytes > b->two[1].bytes) {
				b->two[1] = (struct coll_arg){ &v[x].c, o->kind, o->group, o->stream, o->bytes, 0, 1 };
				b->two_ns[1] = coll_ns_of(cs, ncs, o->kind, ranks, o->bytes);
			}
			if (o->kind == OP_ALLREDUCE && ranks > 1 && o->bytes > b->ar.bytes) {
				b->ar = (struct coll_arg){ &v[x].c, o->kind, o->group, o->stream, o->bytes, 0, 0 };
				b->ar_ns = coll_ns_of(cs, ncs, o->kind, ranks, o->bytes);
			}
		}
	b->has_two = b->has_one && b->two_ns[1] > 0;
	b->has_ar = b->has_one && b->ar_ns > 0;
	b->ar_is_one = b->one.kind == OP_ALLREDUCE && b->ar.bytes == b->one.bytes;
}

/* Collectives of ns each to cover reps kernels of kernel_ns, started first (20% more), at most max_reps. */
static int covering(const struct cal *k, int reps, double kernel_ns, double coll_ns)
{
	int n = (int)(1.2 * reps * kernel_ns / coll_ns) + 1;

	return n > k->max_reps ? k->max_reps : n;
}

/* Kernels ks[0..n) alone, and beside what b plans (NULL: alone only). */
static void kernels(struct cal *k, struct cal_kernel *ks, int n, const char *what, struct beside *b)
{
	const struct schedule *s = k->s;

	for (int i = 0; i < n; i++) {
		struct kernel kn = { .kind = (enum kernel_kind)ks[i].kind, .m = ks[i].m, .n = ks[i].n, .k = ks[i].k,
				     .flops = ks[i].flops, .bytes = ks[i].bytes };
		struct kernel_arg a = { &kn, &s->exp->model, s->batch, 0 };
		int reps;
		snprintf(kn.name, sizeof kn.name, "%s", ks[i].name);
		ks[i].ns = measure(k, ST_COMPUTE, run_kernel, &a, NULL, NULL);
		ks[i].ns_comm = ks[i].ns;
		ks[i].ns_comm2 = ks[i].ns_ar = 0;
		progress(k, what);
		if (!b || !b->has_one)
			continue;
		reps = (int)(k->target_ns / (ks[i].ns > 0 ? ks[i].ns : 1));
		reps = reps < 1 ? 1 : reps > k->max_reps ? k->max_reps : reps;
		b->one.reps = covering(k, reps, ks[i].ns, b->one_ns);
		ks[i].ns_comm = measure_once(k, ST_COMPUTE, run_kernel, &a, reps, run_collectives_beside, &b->one);
		if (b->has_ar && b->ar_is_one) {
			ks[i].ns_ar = ks[i].ns_comm;
		} else if (b->has_ar) {
			b->ar.reps = covering(k, reps, ks[i].ns, b->ar_ns);
			ks[i].ns_ar = measure_once(k, ST_COMPUTE, run_kernel, &a, reps, run_collectives_beside, &b->ar);
			progress(k, "model kernels beside an all-reduce");
		}
		if (!b->has_two)
			continue;
		for (int j = 0; j < 2; j++)
			b->two[j].reps = covering(k, reps, ks[i].ns, b->two_ns[j]);
		ks[i].ns_comm2 = measure_once(k, ST_COMPUTE, run_kernel, &a, reps, run_two_collectives_beside, b->two);
		progress(k, "model kernels beside two collectives");
	}
}

static void collectives(struct cal *k, struct cal_coll *cs, struct coll_arg *how, int n, struct busy *busy)
{
	for (int i = 0; i < n; i++) {
		cs[i].ns = measure(k, how[i].stream, run_collective, &how[i], NULL, NULL);
		cs[i].ns_busy = cs[i].ns;
		/* one pass of the list must fit the calls a gated stream may queue (max_reps; past
		 * them dev_stream aborts): else the collective is priced as timed alone */
		if (busy && busy->n > 0 && busy->n <= k->max_reps && busy->ns > 0) {
			int reps = (int)(k->target_ns / (cs[i].ns > 0 ? cs[i].ns : 1));
			reps = reps < 1 ? 1 : reps > k->max_reps ? k->max_reps : reps;
			/* passes of the list to cover the collectives (in double: a list of a few
			 * nanoseconds would overflow an int) */
			double passes = 1.2 * reps * cs[i].ns / busy->ns + 1;
			busy->count = passes * busy->n > k->max_reps ? 0 : (int)passes;
			if (!busy->count) {
				/* the calls a gated stream may queue (max_reps) are passes of the list: fewer
				 * collectives, so that the passes that fit still cover them */
				busy->count = k->max_reps / busy->n;
				reps = (int)(busy->count * busy->ns / (1.2 * (cs[i].ns > 0 ? cs[i].ns : 1)));
				reps = reps < 1 ? 1 : reps;
			}
			cs[i].ns_busy = measure_once(k, how[i].stream, run_collective, &how[i], reps, run_busy_beside, busy);
		}
		progress(k, "collectives");
	}
}

/* A block's kernels, forward then backward without recomputation, with their times measured alone. */
static void busy_plan(struct busy *b, const struct schedule *s, const struct calibration *cal)
{
	int act = elem_bytes(s->act_elem);

	memset(b, 0, sizeof(*b));
	b->m = &s->exp->model;
	b->batch = s->batch;
	for (int ph = 0; ph < 2; ph++) {
		int nk = model_segment_kernels(b->m, s->batch, SEG_BLOCK, ph ? PH_BWD : PH_FWD, AC_NONE, s->loss, act,
					       b->kn + b->n, MODEL_MAX_KERNELS);
		b->n += nk;
	}
	for (int i = 0; i < b->n; i++) { /* as measured by name and shape (every block kernel is, above) */
		int exact;
		double ns = calibration_kernel_ns(cal, &b->kn[i], CAL_ALONE, &exact);
		if (exact)
			b->ns += ns;
	}
}

static void passes(struct cal *k, struct calibration *cal)
{
	uint64_t top = k->quick ? (1u << 20) : (64u << 20);

	for (uint64_t b = 4096; b <= top; b *= k->quick ? 16 : 4) {
		struct kernel kn = { .kind = K_ELEMENTWISE, .bytes = b };
		struct kernel_arg a = { &kn, &k->s->exp->model, k->s->batch, 0 };
		snprintf(kn.name, sizeof kn.name, "pass");
		cal->passes = xrealloc(cal->passes, sizeof(*cal->passes) * (size_t)(cal->npasses + 1));
		cal->passes[cal->npasses].bytes = b;
		cal->passes[cal->npasses++].ns = measure(k, ST_COMPUTE, run_kernel, &a, NULL, NULL);
		progress(k, "memory passes");
	}
}

struct copy_arg {
	void *dst;
	const void *src;
	uint64_t bytes;
};

static void run_copy(struct cal *k, int st, void *arg)
{
	const struct copy_arg *a = arg;
	k->o->copy(k->b, st, a->dst, ELEM_FP32, a->src, ELEM_FP32, (size_t)(a->bytes / sizeof(float)));
}

/*
 * Copies between host and device memory on the copy stream, each way, over
 * the passes' sizes: what offloading moves (on the CPU backend, a memcpy
 * between two allocations; on CUDA, over the host link from pinned
 * memory).
 */
static void copies(struct cal *k, struct calibration *cal)
{
	uint64_t top = k->quick ? (1u << 20) : (64u << 20);
	void *host = k->o->host_alloc(k->b, top), *dev = k->o->dev_alloc(k->b, top);

	if (!host || !dev) { /* none measured: ./sim prices copies as passes */
		if (k->c->rank == 0)
			fprintf(stderr, "calibrate: no %llu bytes of %s memory for the copies: not measured\n",
				(unsigned long long)top, host ? "device" : "host");
		if (host)
			k->o->host_free(k->b, host);
		if (dev)
			k->o->dev_free(k->b, dev);
		k->done += 2 * (k->quick ? 3 : 8);
		return;
	}
	for (int d = 0; d < 2; d++)
		for (uint64_t b = 4096; b <= top; b *= k->quick ? 16 : 4) {
			struct copy_arg a = { d ? host : dev, d ? dev : host, b };
			struct cal_copy *c;
			cal->copies = xrealloc(cal->copies, sizeof(*cal->copies) * (size_t)(cal->ncopies + 1));
			c = &cal->copies[cal->ncopies++];
			c->kind = (uint8_t)(d ? OP_D2H : OP_H2D);
			c->bytes = b;
			c->ns = measure(k, ST_COPY, run_copy, &a, NULL, NULL);
			progress(k, "host-device copies");
		}
	k->o->sync(k->b);
	k->o->host_free(k->b, host);
	k->o->dev_free(k->b, dev);
}

/* ---- the schedules' own copies ------------------------------------------------------- */

/* One copy op of a schedule, on the calibration's buffers: what it reads in `in`, what it writes in `out`. */
struct copy_op {
	const struct schedule *s;
	const struct layout *lay;
	int op;
	void *in, *out;
};

static void *copy_op_ptr(void *ctx, int buf)
{
	const struct copy_op *a = ctx;
	const struct op *o = &a->s->ops[a->op];

	for (int j = 0; j < o->nopd; j++)
		if ((int)a->s->opds[o->opd_first + j].buf == buf)
			return a->s->opds[o->opd_first + j].role == OPD_OUT ? a->out : a->in;
	return a->in;
}

static void run_copy_op(struct cal *k, int st, void *arg)
{
	struct copy_op *a = arg;
	(void)st;
	exec_launch_copy(k->o, k->b, a->s, a->lay, a->op, copy_op_ptr, a);
}

/*
 * Whether op i of s is a copy whose operands fit the calibration's buffers
 * of `most` bytes; a per-tensor pack or unpack only where own_layout (the
 * run's schedule: the CUDA backend knows its units' tensors alone, not
 * those of another sharding's shards).
 */
static int copy_op_fits(const struct schedule *s, int i, uint64_t most, int own_layout)
{
	const struct op *o = &s->ops[i];

	if ((o->kind != OP_COPY_OUT && o->kind != OP_COPY_IN && o->kind != OP_CONCAT) || !o->bytes)
		return 0;
	if (!own_layout && ((o->kind == OP_COPY_OUT && op_operand(s, i, BUF_GATHER_OUT, OPD_IN) >= 0) ||
			    (o->kind == OP_COPY_IN && s->per_tensor_shards)))
		return 0;
	for (int j = 0; j < o->nopd; j++)
		if (s->bufs[s->opds[o->opd_first + j].buf].bytes > most)
			return 0;
	return 1;
}

/*
 * The copies the schedules launch (FSDP2's unpack of a gather and pack of
 * a reduction's input, per tensor; the testbed's cast to the reduce dtype;
 * FSDP1's concatenation), each kind and size once, as a step launches them
 * (exec_launch_copy): a kernels row named after the op kind with its
 * bytes, which prices the ops of that kind and bytes (calibration_op_ns)
 * where a pass of their bytes did. The first H200 session's pytorch-runtime
 * run took 1.6 to 1.8 times the passes for them, 6.6 % of its step.
 */
static void copy_ops(struct cal *k, struct calibration *cal, struct variant *v, int nv)
{
	for (int w = 0; w < nv; w++) {
		const struct schedule *s = v[w].s;
		struct layout *lay = NULL;
		for (int i = 0; i < s->nops; i++) {
			const struct op *o = &s->ops[i];
			struct kernel kn = { .kind = K_ELEMENTWISE, .bytes = o->bytes };
			struct copy_op a = { s, NULL, i, k->dev[0], k->dev[1] };
			int before = cal->nkernels, cap = cal->nkernels;
			if (!copy_op_fits(s, i, k->dev_bytes, w == 0))
				continue;
			snprintf(kn.name, sizeof kn.name, "%s", op_kind_name((enum op_kind)o->kind));
			add_kernel(&cal->kernels, &cal->nkernels, &cap, &kn); /* each kind and size once */
			if (cal->nkernels == before)
				continue;
			if (!lay)
				lay = layout_new(s);
			a.lay = lay;
			cal->kernels[before].ns = measure(k, o->stream, run_copy_op, &a, NULL, NULL);
		}
		if (lay)
			layout_free(lay);
	}
	progress(k, "the schedules' copies");
}

/* ns of one optimizer call over n elements on stream (the compute stream: the device's; ST_HOST: the host's) */
static double adamw_at(struct cal *k, int stream, int64_t n)
{
	struct kernel kn = { .kind = K_ELEMENTWISE, .m = n };
	struct kernel_arg a = { &kn, &k->s->exp->model, k->s->batch, 0 };

	snprintf(kn.name, sizeof kn.name, "adamw");
	progress(k, "optimizer");
	return measure(k, stream, run_kernel, &a, NULL, NULL);
}

/*
 * The optimizer as call_ns + ns_per_elem x elements: timed at a small size
 * and at the schedule's largest optimizer call (at most OPTIM_ELEMS_MAX;
 * the run's step is one call over every shard of the rank). One size is
 * not enough: at 2^20 elements the first H200 session's device optimizer
 * was mostly its launch and its operands in L2 (0.0098 ns an element,
 * where the runs' step over 120 M elements took 0.0076), and the host
 * optimizer mostly its 16 threads' start (2.9 ns an element, where the
 * runs' took 0.68), which priced the offload runs 2.4 times their step.
 */
#define OPTIM_ELEMS_MAX (1 << 27)
static void adamw(struct cal *k, int stream, double *call_ns, double *ns_per_elem)
{
	double most = schedule_largest_optim_elems(k->s), t0, t1;
	int64_t n1 = most > OPTIM_ELEMS_MAX ? OPTIM_ELEMS_MAX : most >= 1 ? (int64_t)most : 1 << 20;
	int64_t n0 = k->quick ? 1 << 14 : 1 << 20;

	if (k->quick && n1 > 1 << 18)
		n1 = 1 << 18;
	if (n0 > n1 / 16)
		n0 = n1 / 16 > 256 ? n1 / 16 : 256;
	if (n1 <= n0)
		n1 = 16 * n0;
	t0 = adamw_at(k, stream, n0);
	t1 = adamw_at(k, stream, n1);
	calibration_adamw_fit((double)n0, t0, (double)n1, t1, call_ns, ns_per_elem);
}

/*
 * The fabric the collectives were measured on: "real", or "emulated" with
 * what was not the cluster's (the links ./sim prices, core/fabric.h; on
 * cuda, the traffic on the catalog GPU's nccl_sms SMs).
 */
static void fabric_text(const struct schedule *s, const struct comm *c, const char *backend, char *buf, size_t len)
{
	size_t n;

	if (!c->emulated) {
		snprintf(buf, len, "real");
		return;
	}
	n = (size_t)snprintf(buf, len, "emulated");
	if (c->emu.gbps > 0 && n < len)
		n += (size_t)snprintf(buf + n, len - n, ", --emulate-gbps %g", c->emu.gbps);
	if (c->emu.lat_us >= 0 && n < len)
		n += (size_t)snprintf(buf + n, len - n, ", --emulate-lat-us %g", c->emu.lat_us);
	if (!strcmp(backend, "cuda") && c->emu.engine && n < len)
		n += (size_t)snprintf(buf + n, len - n, ", --emulate-engine ce");
	if (!strcmp(backend, "cuda") && c->emu.ctas != s->exp->cluster.gpu.nccl_sms && n < len)
		snprintf(buf + n, len - n, ", --emulate-ctas %d", c->emu.ctas);
}

void calibrate_default_path(struct backend *b, char *buf, size_t len)
{
	char hw[64];

	b->ops->hardware(b, hw, sizeof hw);
	mkdir("data", 0777);
	mkdir("data/calibration", 0777);
	snprintf(buf, len, "data/calibration/%s-%s.h5", hw, b->ops->name);
}

int calibrate(const struct schedule *s, struct comm *c, struct backend *b, const char *path, const char *series,
	      int quick)
{
	struct cal k = { .s = s, .c = c, .b = b, .o = b->ops, .quick = quick, .target_ns = quick ? QUICK_NS : TARGET_NS,
			 .max_reps = MAX_REPS };
	struct calibration cal;
	struct coll_arg *how = NULL;
	struct variant v[1 + POLICY_SHARDING_VARIANTS];
	struct beside bp;
	int nv;
	char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
	struct busy *busy;
	int len = 0, rc = 0, nccl;
	uint64_t most = 1 << 20;

	memset(&cal, 0, sizeof(cal));
	clock_gettime(CLOCK_MONOTONIC, &k.t0);
	b->ops->hardware(b, cal.hardware, sizeof cal.hardware);
	snprintf(cal.backend, sizeof cal.backend, "%s", b->ops->name);
	runinfo_binary(cal.binary, sizeof cal.binary);
	assert(name_index(calibration_backends, cal.backend) >= 0 && "a backend ./sim reads in a calibration");
	/* the CPU backend's stream queues have no bound; CUDA's is not measured here (the catalog's applies) */
	cal.launch_queue = !strcmp(cal.backend, "cpu") ? 0 : -1;
	if (series)
		snprintf(cal.series, sizeof cal.series, "%s", series);
	MPI_Get_library_version(mpi, &len);
	mpi[strcspn(mpi, "\n,")] = '\0';
	snprintf(cal.versions, sizeof cal.versions, "%.100s; cc %.40s", mpi, __VERSION__);
	if (b->ops->versions) { /* the device's libraries */
		char libs[CAL_TEXT_MAX];
		size_t n = strlen(cal.versions);
		b->ops->versions(b, libs, sizeof libs);
		snprintf(cal.versions + n, sizeof cal.versions - n, "; %s", libs);
	}
	if (b->ops->gate_calls && b->ops->gate_calls(b) < k.max_reps)
		k.max_reps = b->ops->gate_calls(b);
	fabric_text(s, c, b->ops->name, cal.fabric, sizeof cal.fabric);
	cal.ranks = c->world; /* the job's: N on an emulated fabric */

	cal.nkernels = model_kernels(s, &cal.kernels);
	cal.ngemm = gemm_grid(s, cal.kernels, cal.nkernels, quick, &cal.gemm);
	nccl = !strcmp(b->ops->name, "cuda");
	nv = variants(s, c, nccl, v);
	cal.ncolls = collective_list(v, nv, quick, &cal.colls, &how);
	for (int i = 0; i < cal.ncolls; i++)
		if (cal.colls[i].bytes > most)
			most = cal.colls[i].bytes;
	k.dev_bytes = most + 4096;
	k.dev[0] = b->ops->dev_alloc(b, k.dev_bytes);
	k.dev[1] = b->ops->dev_alloc(b, k.dev_bytes);
	k.dev[2] = b->ops->dev_alloc(b, k.dev_bytes);
	k.dev[3] = b->ops->dev_alloc(b, k.dev_bytes);
	if (!k.dev[0] || !k.dev[1] || !k.dev[2] || !k.dev[3]) {
		if (c->rank == 0)
			fprintf(stderr, "calibrate: no device memory for %llu-byte collectives\n", (unsigned long long)most);
		for (int i = 0; i < 4; i++)
			if (k.dev[i])
				b->ops->dev_free(b, k.dev[i]);
		free(how);
		variants_release(v, nv, nccl);
		calibration_release(&cal);
		return -1;
	}
	k.o->step_begin(b);
	for (int i = 0; i < 4; i++)
		k.o->zero(b, ST_COMPUTE, k.dev[i], k.dev_bytes);
	k.o->sync(b);
	/*
	 * overheads, collectives alone and busy, kernels (and beside two
	 * collectives, where two streams have some), the grid, passes, copies
	 * both ways, the schedules' copies, two optimizers at two sizes each,
	 * the end
	 */
	k.total = 2 + 2 * cal.ncolls + cal.nkernels + cal.ngemm + (quick ? 3 : 8) + 2 * (quick ? 3 : 8) + 1 + 4 + 1;

	overheads(&k, &cal);
	collectives(&k, cal.colls, how, cal.ncolls, NULL);
	beside_plan(&bp, s, c, v, nv, cal.colls, cal.ncolls);
	k.total += (bp.has_two + (bp.has_ar && !bp.ar_is_one)) * cal.nkernels;
	kernels(&k, cal.kernels, cal.nkernels, "model kernels", &bp);
	kernels(&k, cal.gemm, cal.ngemm, "gemm grid", NULL);
	/* the collectives again, beside a block's kernels as measured */
	busy = xmalloc(sizeof(*busy));
	busy_plan(busy, s, &cal);
	if (busy->n > k.max_reps && c->rank == 0)
		fprintf(stderr, "calibrate: a block's %d kernels exceed the %d calls a gated stream may queue: the "
			"collectives beside them not measured (priced as alone)\n", busy->n, k.max_reps);
	collectives(&k, cal.colls, how, cal.ncolls, busy);
	free(busy);
	passes(&k, &cal);
	copies(&k, &cal);
	copy_ops(&k, &cal, v, nv);
	adamw(&k, ST_COMPUTE, &cal.adamw_call_ns, &cal.adamw_ns_per_elem);
	adamw(&k, ST_HOST, &cal.host_adamw_call_ns, &cal.host_adamw_ns_per_elem);
	k.done = k.total - 1;
	progress(&k, "done");

	if (c->rank == 0) {
		rc = calibration_write(path, &cal);
		if (rc == 0)
			printf("calibration: %s (%d ranks, %d kernels, %d GEMMs, %d collective sizes, dispatch %.1f us, "
			       "wake %.1f us) appended to %s\n", cal.hardware, cal.ranks, cal.nkernels, cal.ngemm,
			       cal.ncolls, 1e-3 * cal.dispatch_ns, 1e-3 * cal.wake_ns, path);
	}
	mpi_check(MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD));
	for (int i = 0; i < 4; i++)
		b->ops->dev_free(b, k.dev[i]);
	free(how);
	variants_release(v, nv, nccl);
	calibration_release(&cal);
	return rc;
}
