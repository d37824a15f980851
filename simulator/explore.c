/*
 * explore.c - a sweep's configurations simulated over MPI (see explore.h).
 *
 * Messages: a rank asks for work by sending what it did (TAG_DONE: a
 * header with its skip counts, then its rows; the first ask has none);
 * rank 0 answers with a block [start, end) of candidates (TAG_BLOCK), an
 * empty one when there is no work left. Blocks are sized so that a rank
 * spends a fraction of a second on one and every rank gets several, and
 * hold whole groups of configurations that share a schedule.
 */
#include "explore.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "config.h"
#include "engine.h"
#include "report.h"
#include "results.h"
#include "schedule.h"
#include "summary.h"
#include "sweep_table.h"
#include "text.h"
#include "xalloc.h"

#define TAG_DONE 1
#define TAG_BLOCK 2
#define BLOCK_TARGET 32      /* candidates per block, at least (each takes about a millisecond) */
#define BLOCKS_PER_RANK 8    /* blocks each rank gets, at least, when the sweep is large enough */
#define FLUSH_S 2.0          /* shortest time between two writes of the results file */
#define FLUSH_COST 20.0      /* and at least this many times as long as the last write took */
#define EXPLORE_RANKS_MAX 4096 /* ranks whose CPU time is tallied */

/* ---- MPI ------------------------------------------------------------------------ */

static int mpi_on, mpi_rank, mpi_size = 1;

static void mpi_check(int rc, const char *call, const char *file, int line)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	if (rc == MPI_SUCCESS)
		return;
	if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
		snprintf(msg, sizeof msg, "error %d", rc);
	fprintf(stderr, "sim: %s failed at %s:%d: %s\n", call, file, line, msg);
	fflush(stderr);
	MPI_Abort(MPI_COMM_WORLD, 1);
}
#define mpi_ok(call) mpi_check((call), #call, __FILE__, __LINE__)

void explore_mpi_init(int *argc, char ***argv, int *rank, int *size)
{
	/* a launcher's environment: Open MPI's mpirun, PMIx, PMI (srun, MPICH's hydra) */
	if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK") || getenv("PMI_SIZE")) {
		mpi_ok(MPI_Init(argc, argv));
		mpi_on = 1;
		mpi_ok(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
		mpi_ok(MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank));
		mpi_ok(MPI_Comm_size(MPI_COMM_WORLD, &mpi_size));
	}
	*rank = mpi_rank;
	*size = mpi_size;
}

void explore_mpi_exit(int rc)
{
	fflush(stdout);
	fflush(stderr);
	if (mpi_on) {
		if (rc == 130 && mpi_size > 1)
			MPI_Abort(MPI_COMM_WORLD, rc); /* the other ranks wait for work that will not come */
		MPI_Finalize();
	}
	exit(rc);
}

int explore_mpi_ranks(void)
{
	return mpi_on ? mpi_size : 1;
}

int explore_is_root(void)
{
	return mpi_rank == 0;
}

/* ---- one configuration ------------------------------------------------------------ */

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* What a rank keeps between configurations: the schedule and prep they may share. */
struct worker {
	const struct sweep *sw;
	struct sweep_iter it;
	struct experiment exp;        /* what the cached schedule points to (origins not copied) */
	struct schedule *s;
	struct engine_prep *prep;
	struct summary_plan plan;     /* of s */
	struct sim_result r;
};

static void worker_init(struct worker *w, const struct sweep *sw)
{
	memset(w, 0, sizeof(*w));
	w->sw = sw;
	sweep_iter_init(&w->it, sw);
}

static void worker_drop(struct worker *w)
{
	if (w->s)
		summary_plan_release(&w->plan);
	engine_prep_free(w->prep);
	schedule_free(w->s);
	w->prep = NULL;
	w->s = NULL;
}

static void worker_release(struct worker *w)
{
	worker_drop(w);
	sim_result_release(&w->r);
	sweep_iter_release(&w->it);
}

/*
 * Whether the cached prep serves e: the same schedule, and the same
 * allocator run (steps; a caching allocator's capacity, the GPU's memory)
 * and launch thread.
 */
static int prep_serves(const struct experiment *a, const struct experiment *b)
{
	return schedule_same_inputs(a, b) && a->run.steps == b->run.steps && a->run.warmup == b->run.warmup &&
	       (!a->runtime.caching_allocator || a->cluster.gpu.hbm_gib == b->cluster.gpu.hbm_gib) &&
	       !strcmp(a->calibration, b->calibration);
}

/*
 * The figures of e with the cached schedule and prep, rebuilt unless they
 * serve it. 0, or -1 with a message in why (the schedule or the prep
 * cannot be made: a rule missing from policy_check, a calibration).
 */
static int worker_figures(struct worker *w, const struct experiment *e, struct sweep_figures *f, char *why, size_t n)
{
	const struct sweep *sw = w->sw;
	char err[256];

	if (!w->s || !prep_serves(&w->exp, e)) {
		worker_drop(w);
		w->exp = *e;
		w->exp.origins = NULL;
		w->s = schedule_new(&w->exp, err, sizeof err);
		if (w->s)
			w->prep = engine_prepare(w->s, 0, err, sizeof err);
		if (!w->s || !w->prep) {
			snprintf(why, n, "%s", err);
			engine_prep_free(w->prep);
			schedule_free(w->s);
			w->prep = NULL;
			w->s = NULL;
			return -1;
		}
		w->prep->no_pred = 1; /* rows hold no critical path */
		summary_plan_init(&w->plan, w->s);
	} else {
		w->exp = *e; /* the same graph, priced by this configuration's links and speeds */
		w->exp.origins = NULL;
	}
	memset(f, 0, sizeof(*f));
	f->peak_alloc_bytes = w->prep->peaks.alloc;
	f->peak_reserved_bytes = w->prep->peaks.reserved;
	f->budget_bytes = sw->memory_budget_gib > 0 ? (uint64_t)(sw->memory_budget_gib * 1073741824.0)
						    : gpu_spec_bytes(&e->cluster.gpu);
	f->fits = f->peak_reserved_bytes <= f->budget_bytes;
	if (sw->must_fit && !f->fits) {
		f->step_time_s = f->tokens_per_s_per_gpu = f->mfu = f->compute_s = f->exposed_comm_s = NAN;
		f->comm_bytes_per_gpu = w->plan.wire_bytes;
		return 0;
	}
	if (engine_simulate(w->prep, w->s, &w->r, err, sizeof err) != 0) {
		snprintf(why, n, "%s", err);
		return -1;
	}
	struct summary sum;
	summary_of_step_planned(&w->plan, w->r.ops, w->r.step_ns, &w->r.peaks, &sum);
	f->step_time_s = sum.step_time_s;
	f->tokens_per_s_per_gpu = sum.tokens_per_s_per_gpu;
	f->mfu = sum.mfu;
	f->compute_s = sum.compute_s;
	f->exposed_comm_s = sum.exposed_comm_s;
	f->comm_bytes_per_gpu = sum.comm_bytes_per_gpu;
	return 0;
}

/* What a block (or the whole sweep, on rank 0) tallies besides its rows. */
struct tally {
	uint64_t skipped[SWEEP_END];
	uint64_t why_index[SWEEP_END];  /* the candidate whose reason is kept */
	char why[SWEEP_END][256];
};

static void tally_init(struct tally *t)
{
	memset(t, 0, sizeof(*t));
	for (int k = 0; k < SWEEP_END; k++)
		t->why_index[k] = UINT64_MAX;
}

/* Keep the reason of the earliest candidate of each kind: the same whatever the ranks. */
static void tally_add(struct tally *t, int kind, uint64_t count, uint64_t index, const char *why)
{
	t->skipped[kind] += count;
	if (count && index < t->why_index[kind]) {
		t->why_index[kind] = index;
		snprintf(t->why[kind], sizeof t->why[kind], "%s", why);
	}
}

/* Candidate index: a row into *row (1), or a skip counted in t (0). */
static int worker_one(struct worker *w, uint64_t index, struct sweep_row *row, struct tally *t)
{
	const struct experiment *e;
	char why[256];
	enum sweep_status st = sweep_iter_at(&w->it, index, &e, row, why, sizeof why);

	assert(st != SWEEP_END);
	if (st == SWEEP_OK && worker_figures(w, e, &row->fig, why, sizeof why) != 0)
		st = SWEEP_INVALID;
	if (st != SWEEP_OK) {
		tally_add(t, st, 1, index, why);
		return 0;
	}
	return 1;
}

/* ---- planning ------------------------------------------------------------------------ */

struct plan_say {
	double t0, last;
	int tty, shown;
};

/*
 * sweep_plan's progress: the first line once counting has taken a second
 * (a count that takes long says so early, a short one says nothing), then
 * as the run's progress (coord_progress): every 10 s, 0.5 s on a terminal.
 */
static void plan_progress(void *ctx, uint64_t done, uint64_t total, uint64_t candidates)
{
	struct plan_say *p = ctx;
	double t = now_s(), el = t - p->t0;

	if (done == total || (p->shown ? t - p->last < (p->tty ? 0.5 : 10) : el < 1))
		return;
	p->last = t;
	p->shown = 1;
	fprintf(stderr, "%ssweep: counting the policy walk: %llu of %llu combinations of the axes (%.1f%%), %llu "
			"candidates so far, ETA %.0f s   %s",
		p->tty ? "\r" : "", (unsigned long long)done, (unsigned long long)total, 100.0 * (double)done / (double)total,
		(unsigned long long)candidates, el / (double)done * (double)(total - done), p->tty ? "" : "\n");
	fflush(stderr);
}

int explore_plan(struct sweep *sw, int progress)
{
	int say = progress && explore_is_root();
	struct plan_say p = { now_s(), 0, isatty(2), 0 };
	int rc;

	rc = sweep_plan(sw, say ? plan_progress : NULL, &p);
	if (p.shown && p.tty)
		fputc('\n', stderr);
	if (rc == 0 && say && (p.shown || sw->ncandidates > EXPLORE_SAY_CANDIDATES)) {
		uint64_t combos = sw->nouter_combos * sw->ninner;
		text_line(stderr, "sweep: %s: %llu candidates (%llu combination%s of the axes%s); Ctrl-C stops it and "
				  "keeps the rows done; mpirun -np N shares it, fewer values%s make it smaller",
			  sw->path, (unsigned long long)sw->ncandidates, (unsigned long long)combos, combos == 1 ? "" : "s",
			  sw->walk ? ", the policy walk in each" : "", sw->walk ? " or policies = axes" : "");
	}
	fflush(stderr);
	return rc;
}

/* ---- rank 0: rows, the file, progress ------------------------------------------------ */

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

struct coord {
	const struct sweep *sw;
	const struct explore_opts *o;
	struct explore_result *res;
	struct tally tally;
	struct sweep_table table;
	struct sweep_row *pending;       /* rows not yet written */
	size_t npending, cap_pending;
	struct sweep_row *all;           /* keep_rows: every row */
	size_t nall, cap_all;
	uint64_t done;                   /* candidates finished */
	double t0, last_flush, flush_cost, last_progress;
	double worker_cpu_s[EXPLORE_RANKS_MAX]; /* each rank's CPU time, as it last said */
	int tty, progress_shown;
};

static void rows_push(struct sweep_row **a, size_t *n, size_t *cap, const struct sweep_row *r, size_t k)
{
	if (*n + k > *cap) {
		*cap = *cap ? *cap : 1024;
		while (*n + k > *cap)
			*cap *= 2;
		*a = xrealloc(*a, sizeof(**a) * *cap);
	}
	memcpy(*a + *n, r, sizeof(*r) * k);
	*n += k;
}

/* Whether row a ranks before row b: faster, then earlier. */
static int row_before(const struct sweep_row *a, const struct sweep_row *b)
{
	if (a->fig.step_time_s != b->fig.step_time_s)
		return a->fig.step_time_s < b->fig.step_time_s;
	return a->index < b->index;
}

static void best_add(struct explore_result *res, const struct sweep_row *r)
{
	int i;

	if (!r->fig.fits || !isfinite(r->fig.step_time_s))
		return;
	if (res->nbest == EXPLORE_BEST && !row_before(r, &res->best[EXPLORE_BEST - 1]))
		return;
	i = res->nbest < EXPLORE_BEST ? res->nbest++ : EXPLORE_BEST - 1;
	for (; i > 0 && row_before(r, &res->best[i - 1]); i--)
		res->best[i] = res->best[i - 1];
	res->best[i] = *r;
}

static void coord_rows(struct coord *c, const struct sweep_row *rows, size_t n)
{
	for (size_t i = 0; i < n; i++)
		best_add(c->res, &rows[i]);
	if (c->o->out && c->o->out[0])
		rows_push(&c->pending, &c->npending, &c->cap_pending, rows, n);
	if (c->o->keep_rows)
		rows_push(&c->all, &c->nall, &c->cap_all, rows, n);
	c->res->nrows += n;
}

/* The timelines of the pending rows, simulated again (timelines = true). */
static int timeline_runs(struct coord *c, struct run_result **runs, uint64_t **idx, struct schedule ***sched,
			 struct sim_result **sims, struct experiment **exps)
{
	int n = (int)c->npending, k = 0;

	*runs = xcalloc((size_t)n + 1, sizeof(**runs));
	*idx = xcalloc((size_t)n + 1, sizeof(**idx));
	*sched = xcalloc((size_t)n + 1, sizeof(**sched));
	*sims = xcalloc((size_t)n + 1, sizeof(**sims));
	*exps = xcalloc((size_t)n + 1, sizeof(**exps));
	for (int i = 0; i < n; i++) {
		const struct sweep_row *row = &c->pending[i];
		char err[256];
		if (sweep_experiment_of(c->sw, row, &(*exps)[k]) != 0)
			continue;
		(*sched)[k] = schedule_new(&(*exps)[k], err, sizeof err);
		if (!(*sched)[k] || engine_run((*sched)[k], 1, &(*sims)[k], err, sizeof err) != 0) {
			schedule_free((*sched)[k]);
			config_release(&(*exps)[k]);
			continue;
		}
		struct run_result *r = &(*runs)[k];
		r->source = "sim";
		r->exp = &(*exps)[k];
		r->sched = (*sched)[k];
		r->ops = (*sims)[k].ops;
		r->nmem = (*sims)[k].nmem;
		r->mem = (*sims)[k].mem;
		report_summarize((*sched)[k], &(*sims)[k], &r->sum);
		(*idx)[k] = row->index;
		k++;
	}
	return k;
}

/* Write the pending rows (and their timelines) with the progress so far. */
static void coord_flush(struct coord *c, const char *status)
{
	struct sweep_progress p = { status, { 0 }, now_s() - c->t0, explore_mpi_ranks() };
	struct run_result *runs = NULL;
	uint64_t *idx = NULL;
	struct schedule **sched = NULL;
	struct sim_result *sims = NULL;
	struct experiment *exps = NULL;
	int nruns = 0;
	double t = now_s();

	if (!c->o->out || !c->o->out[0])
		return;
	memcpy(p.skipped, c->tally.skipped, sizeof p.skipped);
	if (c->sw->timelines && c->npending)
		nruns = timeline_runs(c, &runs, &idx, &sched, &sims, &exps);
	if (sweep_table_append(&c->table, c->pending, c->npending, runs, idx, nruns, &p) == 0)
		c->npending = 0;
	else
		c->res->write_failed = 1; /* the rows stay pending: the next write tries again */
	for (int i = 0; i < nruns; i++) {
		sim_result_release(&sims[i]);
		schedule_free(sched[i]);
		config_release(&exps[i]);
	}
	free(runs);
	free(idx);
	free(sched);
	free(sims);
	free(exps);
	c->last_flush = now_s();
	c->flush_cost = c->last_flush - t;
}

static void coord_maybe_flush(struct coord *c)
{
	double wait = c->o->flush_s > 0 ? c->o->flush_s : FLUSH_S;

	if (FLUSH_COST * c->flush_cost > wait)
		wait = FLUSH_COST * c->flush_cost;
	if (c->npending && now_s() - c->last_flush >= wait)
		coord_flush(c, "running");
}

static void coord_progress(struct coord *c, int last)
{
	double t = now_s(), el = t - c->t0, rate = el > 0 ? (double)c->done / el : 0;
	uint64_t left = c->sw->ncandidates - c->done;

	if (!c->o->progress || (!last && t - c->last_progress < (c->tty ? 0.5 : 10)) || (last && !c->progress_shown))
		return;
	c->last_progress = t;
	c->progress_shown = 1;
	fprintf(stderr, "%ssweep: %llu of %llu candidates (%.1f%%), %llu rows, %.0f per s",
		c->tty ? "\r" : "", (unsigned long long)c->done, (unsigned long long)c->sw->ncandidates,
		c->sw->ncandidates ? 100.0 * (double)c->done / (double)c->sw->ncandidates : 100.0,
		(unsigned long long)c->res->nrows, rate);
	if (!last && rate > 0)
		fprintf(stderr, ", ETA %.0f s   ", (double)left / rate);
	if (!c->tty || last)
		fputc('\n', stderr);
	fflush(stderr);
}

/* ---- the run ------------------------------------------------------------------------ */

static uint64_t block_size(const struct sweep *sw, int ranks)
{
	uint64_t b = sw->ninner >= BLOCK_TARGET ? sw->ninner
						: sw->ninner * ((BLOCK_TARGET + sw->ninner - 1) / sw->ninner);
	uint64_t cap = sw->ncandidates / ((uint64_t)ranks * BLOCKS_PER_RANK);

	if (cap < 1)
		cap = 1;
	if (b > cap)
		b = cap >= sw->ninner ? cap - cap % sw->ninner : cap;
	return b;
}

struct done_head {
	uint64_t nrows;
	double cpu_s;        /* the rank's CPU time so far */
	struct tally tally;
};

static double cpu_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A rank other than 0: ask, simulate the block, send its rows, until told there is nothing left. */
static void run_worker(const struct sweep *sw)
{
	struct worker w;
	struct sweep_row *rows = NULL;
	size_t cap = 0;
	char *msg = NULL;
	size_t msg_cap = 0;
	uint64_t block[2];
	struct done_head head;
	double t0 = cpu_s();

	/*
	 * Ctrl-C reaches every rank (mpirun's process group), and mpirun sends
	 * SIGTERM to every rank when it is stopped: rank 0 writes what it has,
	 * marks the sweep interrupted and ends the job (MPI_Abort). A worker
	 * that died of the signal first would have mpirun end the job at
	 * once, rank 0 killed before its last write.
	 */
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	worker_init(&w, sw);
	memset(&head, 0, sizeof head);
	tally_init(&head.tally);
	mpi_ok(MPI_Send(&head, sizeof head, MPI_BYTE, 0, TAG_DONE, MPI_COMM_WORLD));
	for (;;) {
		mpi_ok(MPI_Recv(block, 2, MPI_UINT64_T, 0, TAG_BLOCK, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
		if (block[0] >= block[1])
			break;
		if (block[1] - block[0] > cap) {
			cap = block[1] - block[0];
			rows = xrealloc(rows, sizeof(*rows) * cap);
		}
		memset(&head, 0, sizeof head);
		tally_init(&head.tally);
		for (uint64_t i = block[0]; i < block[1]; i++)
			head.nrows += (uint64_t)worker_one(&w, i, &rows[head.nrows], &head.tally);
		head.cpu_s = cpu_s() - t0;
		size_t need = sizeof head + sizeof(*rows) * head.nrows;
		if (need > msg_cap) {
			msg_cap = need;
			msg = xrealloc(msg, msg_cap);
		}
		memcpy(msg, &head, sizeof head);
		memcpy(msg + sizeof head, rows, sizeof(*rows) * head.nrows);
		mpi_ok(MPI_Send(msg, (int)need, MPI_BYTE, 0, TAG_DONE, MPI_COMM_WORLD));
	}
	free(msg);
	free(rows);
	worker_release(&w);
}

/* Rank 0: take what a rank sent, give it the next block. */
static void serve(struct coord *c, uint64_t *next, uint64_t bsize, int *active)
{
	MPI_Status st;
	int flag = 0, bytes;

	for (;;) {
		mpi_ok(MPI_Iprobe(MPI_ANY_SOURCE, TAG_DONE, MPI_COMM_WORLD, &flag, &st));
		if (!flag)
			return;
		mpi_ok(MPI_Get_count(&st, MPI_BYTE, &bytes));
		char *msg = xmalloc((size_t)bytes);
		mpi_ok(MPI_Recv(msg, bytes, MPI_BYTE, st.MPI_SOURCE, TAG_DONE, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
		struct done_head head;
		memcpy(&head, msg, sizeof head);
		if (st.MPI_SOURCE < EXPLORE_RANKS_MAX)
			c->worker_cpu_s[st.MPI_SOURCE] = head.cpu_s;
		if (head.nrows)
			coord_rows(c, (const struct sweep_row *)(msg + sizeof head), head.nrows);
		for (int k = 1; k < SWEEP_END; k++)
			tally_add(&c->tally, k, head.tally.skipped[k], head.tally.why_index[k], head.tally.why[k]);
		free(msg);
		uint64_t block[2] = { *next, *next };
		if (*next < c->sw->ncandidates) {
			block[1] = *next + bsize < c->sw->ncandidates ? *next + bsize : c->sw->ncandidates;
			*next = block[1];
		} else {
			(*active)--;
		}
		mpi_ok(MPI_Send(block, 2, MPI_UINT64_T, st.MPI_SOURCE, TAG_BLOCK, MPI_COMM_WORLD));
	}
}

static int cmp_index(const void *a, const void *b)
{
	const struct sweep_row *x = a, *y = b;
	return x->index < y->index ? -1 : x->index > y->index;
}

int explore_run(const struct sweep *sw, const struct explore_opts *o, struct explore_result *res)
{
	int ranks = explore_mpi_ranks(), active = ranks - 1, rc = 0;
	uint64_t next = 0, own = 0, own_end = 0, bsize = block_size(sw, ranks);
	struct sigaction sa, old_int, old_term;
	struct coord c;
	struct worker w;
	struct sweep_row row;

	memset(res, 0, sizeof(*res));
	res->ranks = ranks;
	if (mpi_on && mpi_rank != 0) {
		run_worker(sw);
		return 0;
	}
	double cpu0 = cpu_s();

	memset(&c, 0, sizeof c);
	c.sw = sw;
	c.o = o;
	c.res = res;
	tally_init(&c.tally);
	c.t0 = c.last_flush = c.last_progress = now_s();
	c.tty = isatty(2);
	if (o->out && o->out[0]) {
		sweep_table_init(&c.table, sw, o->out);
		coord_flush(&c, "running"); /* the group exists from the start */
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	stop_signal = 0;
	worker_init(&w, sw);

	while (!stop_signal) {
		if (ranks > 1)
			serve(&c, &next, bsize, &active);
		if (own < own_end) {
			if (worker_one(&w, own, &row, &c.tally))
				coord_rows(&c, &row, 1);
			own++;
		} else if (next < sw->ncandidates) {
			own = next;
			own_end = next + bsize < sw->ncandidates ? next + bsize : sw->ncandidates;
			next = own_end;
		} else if (active == 0) {
			break;
		} else {
			nanosleep(&(struct timespec){ 0, 200000 }, NULL);
		}
		/* what other ranks finished counts when its rows arrive */
		c.done = c.res->nrows;
		for (int k = 1; k < SWEEP_END; k++)
			c.done += c.tally.skipped[k];
		coord_maybe_flush(&c);
		coord_progress(&c, 0);
	}
	worker_release(&w);
	res->seconds = now_s() - c.t0;
	res->cpu_s = cpu_s() - cpu0;
	for (int r = 1; r < ranks && r < EXPLORE_RANKS_MAX; r++)
		res->cpu_s += c.worker_cpu_s[r];
	if (stop_signal) {
		coord_flush(&c, "interrupted");
		if (o->progress)
			fprintf(stderr, "%ssweep: interrupted (%s) after %llu of %llu candidates; %s\n", c.tty ? "\n" : "",
				stop_signal == SIGINT ? "SIGINT" : "SIGTERM", (unsigned long long)c.done,
				(unsigned long long)sw->ncandidates,
				o->out && o->out[0] ? "the rows so far are in the file" : "nothing was written");
		rc = 130;
		res->interrupted = 1;
	} else {
		coord_flush(&c, "complete");
		coord_progress(&c, 1);
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	memcpy(res->skipped, c.tally.skipped, sizeof res->skipped);
	memcpy(res->why, c.tally.why, sizeof res->why);
	snprintf(res->group, sizeof res->group, "%s", c.table.group);
	if (o->keep_rows) {
		if (c.nall > 1) /* none: c.all may be NULL, which qsort must not get */
			qsort(c.all, c.nall, sizeof(*c.all), cmp_index);
		res->rows = c.all;
	} else {
		free(c.all);
	}
	free(c.pending);
	if (res->write_failed && rc == 0)
		rc = 1;
	return rc;
}

void explore_result_release(struct explore_result *res)
{
	free(res->rows);
	memset(res, 0, sizeof(*res));
}
