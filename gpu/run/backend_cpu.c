/*
 * backend_cpu.c - the CPU backend: streams are threads, the work is the
 * fp32 reference (gpu/ref), collectives are MPI (see backend.h).
 *
 * Each stream of the schedule is a thread draining an in-order queue of
 * commands: record an event (the time on a monotonic clock, and "done"),
 * wait for an event, or run a piece of work. So the ops of different
 * streams run at the same time exactly when the schedule lets them, and a
 * collective on its stream overlaps the compute of the compute stream, as
 * on a GPU. One mutex guards the queues and the events; each stream's
 * thread sleeps on a condition variable of its own, woken when its queue
 * gets a command or when the event it waits for is recorded (nobody else
 * is woken), and holds the mutex only to take a command, never while it
 * works. Collectives run on communicators of their own per stream
 * (comm.h), which needs MPI_THREAD_MULTIPLE.
 *
 * Every command that finishes is progress for the watchdog (watchdog.h),
 * and the backend tells it which op each stream is stuck in.
 *
 * Memory is host memory standing for device memory: segments come from
 * aligned_alloc and the walker places buffers in them (core/alloc.h). On an
 * emulated fabric (comm.h) a collective is the ring's copies of the bytes
 * rank 0 would move, paced to the emulated link, on its stream's thread. The
 * reference kernels compute in fp32, so every buffer must be fp32 (or the
 * int32 token ids): backend_cpu_new refuses other schedules, and checks
 * that every buffer holds what the kernels need.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "host_adamw.h"
#include "comm.h"
#include "ref.h"
#include "watchdog.h"
#include "xalloc.h"

struct sched_attr { /* the kernel's (sched_setattr(2)); glibc has no wrapper */
	uint32_t size, sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime, sched_deadline, sched_period;
	uint32_t sched_util_min, sched_util_max;
};

enum cmd_type { CMD_RECORD, CMD_WAIT, CMD_RUN };

#define CAL_EVENTS 1024 /* events beyond a step's two per op, for calibration's chains */

struct cpu;

struct cmd {
	enum cmd_type type;
	int event;
	void (*run)(struct cpu *c, const struct cmd *k);
	union {
		struct seg_args seg;
		struct {
			struct comm_handle *h;
			void *out;
			const void *in;
			size_t count;
		} coll;
		struct {
			void *dst;
			const void *src;
			size_t count;
		} copy;
		struct {
			const struct unit_layout *u;
			void *dst;
			const void *src;
			int n;
		} pack;
		struct {
			struct kernel k;
			struct model_shape m;
			int batch;
		} bench;
		struct {
			struct optim_tensor *t; /* owned by the command, freed once run */
			int count;
			struct ref_adamw_hparams hp;
			int step;
			float scale;
		} optim;
	} a;
};

struct queue {
	struct cpu *owner;
	struct cmd *k;
	int n, cap, head;
	int waiting;          /* the event its thread waits for, -1 */
	pthread_cond_t cv;    /* its thread waits here: for a command, or for `waiting` */
	int op;                 /* the op whose start event the stream recorded last, -1 before any */
	pthread_t thread;
};

#define COMPUTE_NICE 10 /* the compute stream's thread below the others (stream_main) */
#define COMM_SLICE_NS 100000ull /* the other streams' time slice: the shortest the kernel grants (stream_main) */

/* The calibration kernels' buffers (bench_buf); BENCH_V, the optimizer's second moments, never negative */
enum { BENCH_IN0, BENCH_IN1, BENCH_OUT0, BENCH_OUT1, BENCH_TOK, BENCH_V, BENCH_BUFS };

struct cpu {
	struct backend base;
	const struct schedule *s;
	const struct model_shape *m;
	int B, N, D, V;
	/* the step's data and the activations' bookkeeping, compute stream only */
	int *tokens, *targets;            /* (M, N) each */
	struct ref_block_store *stores;   /* per segment: forward to recompute to backward */
	struct ref_head_store head;
	double loss_sum;
	/* streams and events */
	pthread_mutex_t mu;
	pthread_cond_t idle;              /* sync waits here for outstanding to reach 0 */
	struct queue q[ST_COUNT];
	int nevents;
	uint8_t *done;
	uint64_t *ns;
	int outstanding;                  /* commands queued and not yet finished */
	int stop;
	int short_slice;                  /* the communication threads ask for a short slice (stream_main) */
	struct timespec t0;
	/* calibration: inputs and outputs of one kernel at a time, grown as needed, kept */
	float *bench[BENCH_BUFS];
	size_t bench_floats[BENCH_BUFS];
	uint64_t bench_calls;         /* kernels run by calibration: where their buffers are placed */
};

static struct cpu *cpu_of(struct backend *b)
{
	return (struct cpu *)b;
}

static uint64_t clock_ns(const struct cpu *c)
{
	struct timespec t;
	int64_t d;

	clock_gettime(CLOCK_MONOTONIC, &t);
	d = (int64_t)(t.tv_sec - c->t0.tv_sec) * 1000000000 + (t.tv_nsec - c->t0.tv_nsec);
	return d > 0 ? (uint64_t)d : 0;
}

/* ---- streams ---------------------------------------------------------------- */

static void *stream_main(void *arg)
{
	struct queue *q = arg;
	struct cpu *c = q->owner;

	/* sleeps (a collective's polls) as short as asked: the default 50 us of slack is a collective's latency */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	/*
	 * The compute stream's thread yields to the others: a communication
	 * thread that wakes to poll its collective runs at once instead of
	 * waiting for the compute thread's time slice to end (a scheduler tick,
	 * milliseconds), as a GPU runs its communication kernels on SMs of
	 * their own while compute goes on. Communication still takes the
	 * processor time it needs from compute, which is what calibration
	 * measures as a kernel's time beside a collective.
	 */
	if (q - c->q == ST_COMPUTE) {
		id_t tid = (id_t)syscall(SYS_gettid);
		int now;
		errno = 0;
		now = getpriority(PRIO_PROCESS, tid);
		if (errno == 0)
			setpriority(PRIO_PROCESS, tid, now + COMPUTE_NICE > 19 ? 19 : now + COMPUTE_NICE);
	} else if (c->short_slice) {
		/*
		 * A communication thread asks for the shortest time slice the
		 * scheduler grants (sched_setattr's sched_runtime, a custom
		 * slice under EEVDF, Linux 6.12 on): woken to test its
		 * collective, it then preempts the compute thread sooner
		 * (PREEMPT_SHORT) instead of after the compute thread's slice,
		 * which the nice level above does not shorten. Only when each
		 * process has a CPU of its own: else it would preempt another
		 * rank's compute as often. A kernel that has no custom slices,
		 * or a sandbox that refuses the call, leaves the thread as it was.
		 */
		struct sched_attr at = { .size = sizeof at, .sched_policy = SCHED_OTHER, .sched_runtime = COMM_SLICE_NS };
		id_t tid = (id_t)syscall(SYS_gettid);
		errno = 0;
		at.sched_nice = getpriority(PRIO_PROCESS, tid);
		if (errno == 0)
			(void)syscall(SYS_sched_setattr, 0, &at, 0);
	}
	pthread_mutex_lock(&c->mu);
	for (;;) {
		struct cmd k;
		while (!c->stop && q->head == q->n)
			pthread_cond_wait(&q->cv, &c->mu);
		if (q->head == q->n)
			break; /* stopped and drained */
		k = q->k[q->head];
		if (k.type == CMD_WAIT && !c->done[k.event]) {
			q->waiting = k.event;
			pthread_cond_wait(&q->cv, &c->mu);
			q->waiting = -1;
			continue;
		}
		if (k.type == CMD_RUN) {
			pthread_mutex_unlock(&c->mu);
			k.run(c, &k);
			pthread_mutex_lock(&c->mu);
		} else if (k.type == CMD_RECORD) {
			c->ns[k.event] = clock_ns(c);
			c->done[k.event] = 1;
			if (k.event % 2 == 0) /* event_start(op) */
				q->op = k.event / 2;
			/* wake only the streams waiting for this event */
			for (int st = 0; st < ST_COUNT; st++)
				if (c->q[st].waiting == k.event)
					pthread_cond_signal(&c->q[st].cv);
		}
		q->head++;
		if (--c->outstanding == 0)
			pthread_cond_signal(&c->idle);
		watchdog_progress();
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static void push(struct cpu *c, int stream, const struct cmd *k)
{
	struct queue *q = &c->q[stream];

	pthread_mutex_lock(&c->mu);
	if (q->n == q->cap) {
		q->cap = q->cap ? 2 * q->cap : 1024;
		q->k = xrealloc(q->k, sizeof(*q->k) * (size_t)q->cap);
	}
	q->k[q->n++] = *k;
	c->outstanding++;
	if (q->head == q->n - 1)
		pthread_cond_signal(&q->cv); /* its queue was empty: its thread may be asleep */
	pthread_mutex_unlock(&c->mu);
}

static void cpu_record(struct backend *b, int stream, int event)
{
	struct cmd k = { .type = CMD_RECORD, .event = event };
	assert(event >= 0 && event < cpu_of(b)->nevents);
	push(cpu_of(b), stream, &k);
}

static void cpu_wait(struct backend *b, int stream, int event)
{
	struct cmd k = { .type = CMD_WAIT, .event = event };
	assert(event >= 0 && event < cpu_of(b)->nevents);
	push(cpu_of(b), stream, &k);
}

static void cpu_sync(struct backend *b)
{
	struct cpu *c = cpu_of(b);

	pthread_mutex_lock(&c->mu);
	while (c->outstanding > 0)
		pthread_cond_wait(&c->idle, &c->mu);
	pthread_mutex_unlock(&c->mu);
}

static void cpu_step_begin(struct backend *b)
{
	struct cpu *c = cpu_of(b);

	cpu_sync(b);
	for (int st = 0; st < ST_COUNT; st++)
		c->q[st].n = c->q[st].head = 0;
	memset(c->done, 0, (size_t)c->nevents);
	c->loss_sum = 0;
	clock_gettime(CLOCK_MONOTONIC, &c->t0);
}

static uint64_t cpu_now_ns(struct backend *b)
{
	return clock_ns(cpu_of(b));
}

static uint64_t cpu_event_ns(struct backend *b, int event)
{
	struct cpu *c = cpu_of(b);
	assert(event >= 0 && event < c->nevents && c->done[event]);
	return c->ns[event];
}

static double cpu_loss(struct backend *b)
{
	return cpu_of(b)->loss_sum;
}

/* ---- memory ------------------------------------------------------------------ */

static void *cpu_alloc(struct backend *b, uint64_t bytes)
{
	(void)b;
	return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

static void cpu_dealloc(struct backend *b, void *p)
{
	(void)b;
	free(p);
}

static void cpu_memcpy(struct backend *b, void *dst, const void *src, uint64_t bytes)
{
	(void)b;
	memcpy(dst, src, bytes);
}

static void cpu_set_batch(struct backend *b, int micro, const int *tokens, const int *targets)
{
	struct cpu *c = cpu_of(b);

	memcpy(c->tokens + (size_t)micro * c->N, tokens, sizeof(int) * (size_t)c->N);
	memcpy(c->targets + (size_t)micro * c->N, targets, sizeof(int) * (size_t)c->N);
}

/* ---- work ---------------------------------------------------------------------- */

static void launch(struct backend *b, int stream, void (*run)(struct cpu *, const struct cmd *), struct cmd *k)
{
	k->type = CMD_RUN;
	k->run = run;
	push(cpu_of(b), stream, k);
}

static void run_zero(struct cpu *c, const struct cmd *k)
{
	(void)c;
	memset(k->a.copy.dst, 0, k->a.copy.count);
}

static void cpu_zero(struct backend *b, int stream, void *p, uint64_t bytes)
{
	struct cmd k = { .a.copy = { p, NULL, bytes } };
	launch(b, stream, run_zero, &k);
}

static enum segment_kind seg_kind(const struct cpu *c, int seg)
{
	return c->s->segs[seg].kind;
}

static const int *micro_tokens(const struct cpu *c, int micro)
{
	return c->tokens + (size_t)micro * c->N;
}

static const int *micro_targets(const struct cpu *c, int micro)
{
	return c->targets + (size_t)micro * c->N;
}

/* Point the head store into the saved buffer; the chunked loss's logits chunk is the op's scratch. */
static void head_store(struct cpu *c, const struct seg_args *a)
{
	ref_head_store_init_split(&c->head, a->saved, a->scratch, c->m, c->B, c->s->loss, c->s->loss_chunk_rows);
}

static void run_forward(struct cpu *c, const struct cmd *k)
{
	const struct seg_args *a = &k->a.seg;
	size_t nd = (size_t)c->N * c->D;

	switch (seg_kind(c, a->seg)) {
	case SEG_EMBED:
		memcpy(a->saved, micro_tokens(c, a->micro), sizeof(int) * (size_t)c->N); /* backward reads them here */
		ref_embedding_forward(a->resid, micro_tokens(c, a->micro), a->params, c->N, c->D);
		break;
	case SEG_BLOCK: {
		struct ref_block_store *st = &c->stores[a->seg];
		/* forward computes every field: the ones the mode does not keep land in the scratch */
		ref_block_store_init(st, a->saved, c->s->ac == AC_NONE ? NULL : a->scratch, c->m, c->B, c->s->ac);
		memcpy(st->x, a->resid, sizeof(float) * nd);
		ref_block_forward(a->resid, st, a->params, c->m, c->B);
		break;
	}
	case SEG_HEAD:
		head_store(c, a);
		memcpy(c->head.x, a->resid, sizeof(float) * nd);
		c->loss_sum += ref_head_forward(&c->head, a->params, a->out_params, micro_targets(c, a->micro), c->m,
						c->B);
		break;
	default:
		assert(!"bad segment kind");
	}
}

static void run_recompute(struct cpu *c, const struct cmd *k)
{
	const struct seg_args *a = &k->a.seg;
	struct ref_block_store *st = &c->stores[a->seg];

	assert(seg_kind(c, a->seg) == SEG_BLOCK);
	/* the same saved memory, so the same field layout; the rest now in the recomputed buffer */
	ref_block_store_init(st, a->saved, a->recomputed, c->m, c->B, c->s->ac);
	ref_block_recompute(st, a->params, c->m, c->B);
}

static void run_backward(struct cpu *c, const struct cmd *k)
{
	const struct seg_args *a = &k->a.seg;

	switch (seg_kind(c, a->seg)) {
	case SEG_EMBED:
		ref_embedding_backward(a->grads, a->resid, a->saved, c->N, c->D);
		break;
	case SEG_BLOCK: {
		struct ref_block_store *st = &c->stores[a->seg];
		if (c->s->ac == AC_NONE)
			ref_block_store_init(st, a->saved, NULL, c->m, c->B, AC_NONE);
		ref_block_backward(a->resid, a->grads, a->resid, st, a->params, a->scratch, c->m, c->B);
		break;
	}
	case SEG_HEAD:
		head_store(c, a);
		ref_head_backward(a->resid, a->grads, a->out_grads, &c->head, a->params, a->out_params,
				  micro_targets(c, a->micro), c->m, c->B);
		break;
	default:
		assert(!"bad segment kind");
	}
}

static void cpu_forward(struct backend *b, int stream, const struct seg_args *a)
{
	struct cmd k = { .a.seg = *a };
	launch(b, stream, run_forward, &k);
}

static void cpu_recompute(struct backend *b, int stream, const struct seg_args *a)
{
	struct cmd k = { .a.seg = *a };
	launch(b, stream, run_recompute, &k);
}

static void cpu_backward(struct backend *b, int stream, const struct seg_args *a)
{
	struct cmd k = { .a.seg = *a };
	launch(b, stream, run_backward, &k);
}

/* Collectives: MPI, or on an emulated communicator the ring's paced copies on this stream's thread. */
static void run_all_gather(struct cpu *c, const struct cmd *k)
{
	(void)c;
	if (k->a.coll.h->emulated)
		comm_emu_all_gather(k->a.coll.h, k->a.coll.out, k->a.coll.in, k->a.coll.count, sizeof(float));
	else
		comm_all_gather(k->a.coll.h, k->a.coll.out, k->a.coll.in, k->a.coll.count);
}

static void run_reduce_scatter(struct cpu *c, const struct cmd *k)
{
	(void)c;
	if (k->a.coll.h->emulated)
		comm_emu_reduce_scatter(k->a.coll.h, k->a.coll.out, k->a.coll.in, k->a.coll.count);
	else
		comm_reduce_scatter_mean(k->a.coll.h, k->a.coll.out, k->a.coll.in, k->a.coll.count);
}

static void run_all_reduce(struct cpu *c, const struct cmd *k)
{
	(void)c;
	if (k->a.coll.h->emulated)
		comm_emu_all_reduce(k->a.coll.h, k->a.coll.out, k->a.coll.count);
	else
		comm_all_reduce_mean(k->a.coll.h, k->a.coll.out, k->a.coll.count);
}

static void fp32_only(enum elem e)
{
	assert(e == ELEM_FP32 && "backend_cpu_new admits fp32 schedules only");
	(void)e;
}

static void cpu_all_gather(struct backend *b, int stream, struct comm_handle *h, void *out, enum elem oe,
			   const void *in, enum elem ie, size_t count)
{
	struct cmd k = { .a.coll = { h, out, in, count } };
	fp32_only(oe);
	fp32_only(ie);
	launch(b, stream, run_all_gather, &k);
}

static void cpu_reduce_scatter(struct backend *b, int stream, struct comm_handle *h, void *out, const void *in,
			       size_t count, enum elem e)
{
	struct cmd k = { .a.coll = { h, out, in, count } };
	fp32_only(e);
	launch(b, stream, run_reduce_scatter, &k);
}

static void cpu_all_reduce(struct backend *b, int stream, struct comm_handle *h, void *buf, size_t count,
			   enum elem e)
{
	struct cmd k = { .a.coll = { h, buf, NULL, count } };
	fp32_only(e);
	launch(b, stream, run_all_reduce, &k);
}

static void run_accumulate(struct cpu *c, const struct cmd *k)
{
	float *dst = k->a.copy.dst;
	const float *src = k->a.copy.src;

	(void)c;
	for (size_t i = 0; i < k->a.copy.count; i++)
		dst[i] += src[i];
}

static void cpu_accumulate(struct backend *b, int stream, void *dst, enum elem de, const void *src, enum elem se,
			   size_t count)
{
	struct cmd k = { .a.copy = { dst, src, count } };
	fp32_only(de);
	fp32_only(se);
	launch(b, stream, run_accumulate, &k);
}

static void run_optimizer(struct cpu *c, const struct cmd *k)
{
	(void)c;
	/* one thread: the stream's own (the other streams' threads are the device's) */
	host_adamw(k->a.optim.t, k->a.optim.count, &k->a.optim.hp, k->a.optim.step, k->a.optim.scale, 1);
	free(k->a.optim.t);
}

static void cpu_optimizer(struct backend *b, int stream, const struct optim_args *a)
{
	struct cmd k = { 0 };

	for (int i = 0; i < a->count; i++) {
		fp32_only(a->t[i].p_elem);
		fp32_only(a->t[i].g_elem);
		fp32_only(a->t[i].state_elem);
	}
	k.a.optim.t = xmalloc(sizeof(*a->t) * (size_t)(a->count > 0 ? a->count : 1));
	memcpy(k.a.optim.t, a->t, sizeof(*a->t) * (size_t)a->count);
	k.a.optim.count = a->count;
	k.a.optim.hp = (struct ref_adamw_hparams){ a->lr, a->beta1, a->beta2, a->eps, a->weight_decay };
	k.a.optim.step = a->step;
	k.a.optim.scale = a->grad_scale;
	launch(b, stream, run_optimizer, &k);
}

static void run_copy(struct cpu *c, const struct cmd *k)
{
	(void)c;
	memcpy(k->a.copy.dst, k->a.copy.src, sizeof(float) * k->a.copy.count);
}

static void cpu_copy(struct backend *b, int stream, void *dst, enum elem de, const void *src, enum elem se,
		     size_t count)
{
	struct cmd k = { .a.copy = { dst, src, count } };
	fp32_only(de);
	fp32_only(se);
	launch(b, stream, run_copy, &k);
}

static void run_unpack(struct cpu *c, const struct cmd *k)
{
	(void)c;
	layout_unpack(k->a.pack.u, k->a.pack.dst, k->a.pack.src, k->a.pack.n);
}

static void run_pack(struct cpu *c, const struct cmd *k)
{
	(void)c;
	layout_pack(k->a.pack.u, k->a.pack.dst, k->a.pack.src, k->a.pack.n);
}

static void cpu_unpack(struct backend *b, int stream, const struct unit_layout *u, void *flat,
		       const void *gathered, enum elem e, int n)
{
	struct cmd k = { .a.pack = { u, flat, gathered, n } };
	fp32_only(e);
	launch(b, stream, run_unpack, &k);
}

static void cpu_pack(struct backend *b, int stream, const struct unit_layout *u, void *packed, enum elem pe,
		     const void *flat, enum elem fe, int n)
{
	struct cmd k = { .a.pack = { u, packed, flat, n } };
	fp32_only(pe);
	fp32_only(fe);
	launch(b, stream, run_pack, &k);
}

/* ---- calibration ------------------------------------------------------------------ */

/* Scratch i of at least n floats (random-ish, finite contents); grown on the stream thread, kept. */
/*
 * The calibration kernels' memory. Inputs (BENCH_IN0, BENCH_IN1) hold
 * values in [-0.5, 0.5) and are never written, so every repetition of a
 * kernel computes on the same ordinary numbers (an output fed back as an
 * input drifts, to subnormals for one, which x86 computes on many times
 * slower); outputs and in-place work go to the others; token ids to their
 * own; the optimizer's second moments to BENCH_V, which holds values in
 * [0, 1) and only the optimizer writes (0.95 v + 0.05 g^2 stays so): on
 * negative moments its square roots are NaN, and it ran 1.5 to 1.9 times
 * slower than on a real optimizer's state. Each call places every buffer at another offset inside its first
 * 4 KiB (64-byte steps, from a hash of the call and the buffer): how fast
 * the reference kernels run depends on how their operands fall against
 * each other in the caches, by up to twice here, and the runs' buffers
 * fall as the allocator places them, so a kernel is measured over
 * placements rather than at one.
 */
#define BENCH_SLACK 1024 /* floats: 4 KiB of offsets */

static float *bench_buf(struct cpu *c, int i, size_t n)
{
	uint64_t h = (c->bench_calls * BENCH_BUFS + (uint64_t)i + 1) * 0x9E3779B97F4A7C15ull;

	if (c->bench_floats[i] < n) {
		free(c->bench[i]);
		c->bench[i] = xmalloc(sizeof(float) * (n + BENCH_SLACK));
		for (size_t j = 0; j < n + BENCH_SLACK; j++)
			c->bench[i][j] = (float)((j * 2654435761u) % 1000) * 1e-3f - (i == BENCH_V ? 0.0f : 0.5f);
		c->bench_floats[i] = n;
	}
	return c->bench[i] + ((h >> 40) % (BENCH_SLACK / 16)) * 16;
}

static int *bench_tokens(struct cpu *c, int n, int vocab)
{
	int *t = (int *)bench_buf(c, BENCH_TOK, (size_t)n);
	for (int i = 0; i < n; i++)
		t[i] = i % vocab;
	return t;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && !strcmp(s + n - m, suffix);
}

/* dst += src over n floats: the residual adds of the reference block */
static void add_into(float *dst, const float *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] += src[i];
}

/*
 * One kernel of core/model.c's lists with the reference function that
 * computes it in ref_block.c / ref_layers.c (the GEMMs by shape; the rest by
 * name, with the model's dimensions).
 */
static void run_kernel(struct cpu *c, const struct cmd *k)
{
	const struct kernel *kn = &k->a.bench.k;
	struct model_dims d = model_dims_of(&k->a.bench.m, k->a.bench.batch);
	const char *name = kn->name;
	int N = (int)d.N, D = (int)d.D, F = (int)d.F, V = (int)d.V;

	c->bench_calls++;

	if (kn->kind == K_GEMM) {
		int m = (int)kn->m, n = (int)kn->n, kk = (int)kn->k;
		float *a = bench_buf(c, BENCH_IN0, (size_t)m * kk + (size_t)kk * n);
		float *w = bench_buf(c, BENCH_IN1, (size_t)n * kk + (size_t)m * kk);
		float *out = bench_buf(c, BENCH_OUT0, (size_t)m * n);
		if (ends_with(name, "_dgrad")) /* dx (m, n) = dout (m, k) w (k, n) */
			ref_linear_backward_dx(out, a, w, m, n, kk);
		else if (ends_with(name, "_wgrad")) /* dw (m, n) += dout^T (m, k) x (k, n), over k tokens */
			ref_linear_backward_dw(out, a, w, kk, n, m);
		else /* out (m, n) = x (m, k) w^T (n, k) */
			ref_linear_forward(out, a, w, m, kk, n);
	} else if (kn->kind == K_ATTN) {
		size_t qkv = (size_t)N * d.qkv, att = (size_t)N * d.hq, lse = (size_t)d.B * d.H * d.T;
		float *q = bench_buf(c, BENCH_IN0, qkv), *g = bench_buf(c, BENCH_IN1, att);
		float *o = bench_buf(c, BENCH_OUT0, att + lse), *dq = bench_buf(c, BENCH_OUT1, qkv);
		if (strstr(name, "bwd")) /* on the forward's output and lse of the last forward measured */
			ref_attention_backward(dq, g, q, o, o + att, (int)d.B, (int)d.T, (int)d.H, (int)d.KV, (int)d.Q);
		else
			ref_attention_forward(o, o + att, q, (int)d.B, (int)d.T, (int)d.H, (int)d.KV, (int)d.Q);
	} else {
		size_t nd = (size_t)N * D;
		size_t big = nd > (size_t)N * 2 * F ? nd : (size_t)N * 2 * F;
		if (big < (size_t)V * D) /* the embedding table */
			big = (size_t)V * D;
		float *x = bench_buf(c, BENCH_IN0, big), *y = bench_buf(c, BENCH_IN1, big);
		float *z = bench_buf(c, BENCH_OUT0, nd + (size_t)N * 2 * F + D);
		if (!strcmp(name, "rope") || !strcmp(name, "rope_bwd")) {
			/* in place: a rotation keeps the values' size however often it is repeated */
			float *qkv = bench_buf(c, BENCH_OUT1, (size_t)N * d.qkv);
			if (strstr(name, "bwd"))
				ref_rope_backward(qkv, (int)d.B, (int)d.T, (int)d.H, (int)d.KV, (int)d.Q, (float)d.rope_theta);
			else
				ref_rope_forward(qkv, (int)d.B, (int)d.T, (int)d.H, (int)d.KV, (int)d.Q, (float)d.rope_theta);
		} else if (strstr(name, "norm")) {
			if (strstr(name, "bwd"))
				ref_rmsnorm_backward(z, z + nd + N, y, x, y, z + nd, N, D); /* rstd: the last forward's */
			else
				ref_rmsnorm_forward(z, z + nd, x, y, N, D);
		} else if (!strcmp(name, "swiglu")) {
			ref_swiglu_forward(z, x, N, F);
		} else if (!strcmp(name, "swiglu_bwd")) {
			ref_swiglu_backward(z, y, x, N, F);
		} else if (!strncmp(name, "residual", 8)) {
			add_into(z, x, nd);
		} else if (!strcmp(name, "embed") || !strcmp(name, "embed_bwd")) {
			int *tok = bench_tokens(c, N, V);
			float *table = bench_buf(c, BENCH_OUT1, (size_t)V * D + nd);
			if (!strcmp(name, "embed")) {
				ref_embedding_forward(z, tok, x, N, D);
			} else {
				memset(table, 0, sizeof(float) * (size_t)V * D); /* the zeroed gradient */
				ref_embedding_backward(table, x, tok, N, D);
			}
		} else if (!strncmp(name, "loss", 4)) {
			const float *logits = bench_buf(c, BENCH_IN0, (size_t)N * V);
			float *out = bench_buf(c, BENCH_OUT0, (size_t)N * V + N);
			int *tgt = bench_tokens(c, N, V);
			if (!strcmp(name, "loss_bwd")) /* on the lse of the last forward measured */
				ref_cross_entropy_backward(out, logits, out + (size_t)N * V, tgt, N, V, 1.0f);
			else
				ref_cross_entropy_forward(out + (size_t)N * V, logits, tgt, N, V);
		} else if (!strcmp(name, "pass")) {
			/* a memory-bound pass of kn->bytes: half read, half read and written (1.5 times its bytes of traffic) */
			size_t n = kn->bytes / (2 * sizeof(float));
			float *src = bench_buf(c, BENCH_IN0, n), *dst = bench_buf(c, BENCH_OUT0, n);
			for (size_t i = 0; i < n; i++)
				dst[i] = src[i] * 0.5f + dst[i];
		} else if (!strcmp(name, "adamw")) {
			size_t n = (size_t)kn->m;
			struct ref_adamw_hparams hp = { 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f };
			float *p = bench_buf(c, BENCH_OUT0, n), *g = bench_buf(c, BENCH_IN0, n);
			float *mom = bench_buf(c, BENCH_OUT1, n), *v = bench_buf(c, BENCH_V, n);
			ref_adamw(p, g, mom, v, n, &hp, 1);
		} else {
			fprintf(stderr, "gpu_run: calibration: no reference for kernel '%s'\n", name);
			abort(); /* a kernel list the runner does not know: a bug */
		}
	}
}

static void cpu_kernel(struct backend *b, int stream, const struct kernel *k, const struct model_shape *m, int batch)
{
	struct cmd c = { 0 };

	c.a.bench.k = *k;
	c.a.bench.m = *m;
	c.a.bench.batch = batch;
	launch(b, stream, run_kernel, &c);
}

static void cpu_hardware(struct backend *b, char *buf, int len)
{
	char model[128] = "cpu", line[256];
	FILE *f = fopen("/proc/cpuinfo", "r");
	int n = 0, cores = 0;

	(void)b;
	while (f && fgets(line, sizeof line, f)) {
		char *colon = strchr(line, ':');
		if (!strncmp(line, "processor", 9))
			cores++;
		if (!strncmp(line, "model name", 10) && colon && !strcmp(model, "cpu"))
			snprintf(model, sizeof model, "%s", colon + 1);
	}
	if (f)
		fclose(f);
	/* a file-name slug: lower case, runs of other characters to one '-' */
	for (const char *p = model; *p && n < len - 16; p++) {
		char ch = *p;
		if (ch >= 'A' && ch <= 'Z')
			ch = (char)(ch - 'A' + 'a');
		if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'))
			buf[n++] = ch;
		else if (n && buf[n - 1] != '-')
			buf[n++] = '-';
	}
	while (n && buf[n - 1] == '-')
		n--;
	snprintf(buf + n, (size_t)(len - n), "-%d-cores", cores);
}

/* ---- setup ------------------------------------------------------------------------ */

/*
 * For the watchdog's message: each stream with work left, and the op it is
 * running or the op whose end it waits for. Runs on the watchdog's thread;
 * gives up when the mutex stays taken.
 */
static void cpu_describe(void *ctx, char *buf, size_t n)
{
	struct cpu *c = ctx;
	struct timespec until;
	size_t used = 0;
	char label[64];

	buf[0] = '\0';
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 1;
	if (pthread_mutex_timedlock(&c->mu, &until) != 0) {
		snprintf(buf, n, "the streams (busy)");
		return;
	}
	for (int st = 0; st < ST_COUNT && used < n; st++) {
		const struct queue *q = &c->q[st];
		const struct cmd *k = q->head < q->n ? &q->k[q->head] : NULL;
		if (!k)
			continue;
		if (k->type == CMD_RUN && q->op >= 0)
			used += (size_t)snprintf(buf + used, n - used, "%s%s (%s) running on stream %s",
						 used ? "; " : "", op_label(c->s, q->op, label, sizeof label),
						 op_kind_name((enum op_kind)c->s->ops[q->op].kind), stream_name(st));
		else if (k->type == CMD_WAIT)
			used += (size_t)snprintf(buf + used, n - used, "%sstream %s waiting for the end of %s",
						 used ? "; " : "", stream_name(st),
						 op_label(c->s, k->event / 2, label, sizeof label));
	}
	pthread_mutex_unlock(&c->mu);
}

static void cpu_release(struct backend *b)
{
	struct cpu *c = cpu_of(b);

	if (!c)
		return;
	watchdog_describe_with(NULL, NULL);
	pthread_mutex_lock(&c->mu);
	c->stop = 1;
	for (int st = 0; st < ST_COUNT; st++)
		pthread_cond_signal(&c->q[st].cv);
	pthread_mutex_unlock(&c->mu);
	for (int st = 0; st < ST_COUNT; st++) {
		pthread_join(c->q[st].thread, NULL);
		pthread_cond_destroy(&c->q[st].cv);
		free(c->q[st].k);
	}
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->idle);
	free(c->done);
	free(c->ns);
	free(c->tokens);
	free(c->targets);
	free(c->stores);
	for (int i = 0; i < BENCH_BUFS; i++)
		free(c->bench[i]);
	free(c);
}

static const struct backend_ops cpu_ops = {
	.name = "cpu",
	.release = cpu_release,
	.dev_alloc = cpu_alloc,
	.dev_free = cpu_dealloc,
	.host_alloc = cpu_alloc,
	.host_free = cpu_dealloc,
	.upload = cpu_memcpy,
	.download = cpu_memcpy,
	.set_batch = cpu_set_batch,
	.step_begin = cpu_step_begin,
	.now_ns = cpu_now_ns,
	.record = cpu_record,
	.wait = cpu_wait,
	.sync = cpu_sync,
	.event_ns = cpu_event_ns,
	.loss = cpu_loss,
	.zero = cpu_zero,
	.forward = cpu_forward,
	.recompute = cpu_recompute,
	.backward = cpu_backward,
	.all_gather = cpu_all_gather,
	.reduce_scatter = cpu_reduce_scatter,
	.all_reduce = cpu_all_reduce,
	.accumulate = cpu_accumulate,
	.optimizer = cpu_optimizer,
	.copy = cpu_copy,
	.unpack = cpu_unpack,
	.pack = cpu_pack,
	.kernel = cpu_kernel,
	.hardware = cpu_hardware,
};

/* Bytes the reference kernels need in buffer b, or 0 when they need no more than the schedule says. */
static uint64_t need_bytes(const struct cpu *c, const struct buffer *b)
{
	const struct schedule *s = c->s;
	enum segment_kind sk = b->seg >= 0 ? s->segs[b->seg].kind : SEG_KIND_COUNT;
	int phase = b->alloc_op >= 0 ? s->ops[b->alloc_op].kind : -1;
	size_t f = 0;

	switch (b->kind) {
	case BUF_ACTS:
		if (sk == SEG_BLOCK)
			f = ref_block_saved_floats(c->m, c->B, s->ac);
		else if (sk == SEG_HEAD)
			f = ref_head_saved_floats(c->m, c->B, s->loss);
		break;
	case BUF_RECOMPUTED:
		f = ref_block_transient_floats(c->m, c->B, s->ac);
		break;
	case BUF_TRANSIENT:
		if (sk == SEG_BLOCK && phase == OP_FORWARD)
			f = ref_block_transient_floats(c->m, c->B, s->ac);
		else if (sk == SEG_BLOCK && phase == OP_BACKWARD)
			f = ref_block_scratch_floats(c->m, c->B);
		else if (sk == SEG_HEAD)
			f = ref_head_transient_floats(c->m, c->B, s->loss, s->loss_chunk_rows);
		break;
	case BUF_RESIDUAL:
	case BUF_RESIDUAL_GRAD:
		f = (size_t)c->N * c->D;
		break;
	case BUF_TOKENS:
		f = (size_t)c->N;
		break;
	default:
		break;
	}
	return (uint64_t)f * sizeof(float);
}

/* Whether each process of the job on this node has a CPU of its own. Collective over MPI_COMM_WORLD. */
static int cpu_each(void)
{
	int rank, procs;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	comm_node(&rank, &procs);
	return cpus > 0 && procs <= cpus;
}

struct backend *backend_cpu_new(const struct schedule *s, struct comm *comm, char *err, int errlen)
{
	struct cpu *c;

	(void)comm;
	for (int i = 0; i < s->nbufs; i++) {
		const struct buffer *b = &s->bufs[i];
		if (b->elem != ELEM_FP32 && b->elem != ELEM_I32) {
			snprintf(err, errlen,
				 "the cpu backend computes in fp32, but the schedule holds %s %s buffers: "
				 "set precision = fp32 in [policy] (and reduce_dtype, accum_dtype fp32 if set)",
				 elem_name(b->elem), buf_kind_name(b->kind));
			return NULL;
		}
	}
	c = xcalloc(1, sizeof(*c));
	c->base.ops = &cpu_ops;
	c->s = s;
	c->m = &s->exp->model;
	c->B = s->batch;
	c->N = s->batch * c->m->seq;
	c->D = c->m->hidden;
	c->V = c->m->vocab;
	for (int i = 0; i < s->nbufs; i++) {
		const struct buffer *b = &s->bufs[i];
		uint64_t need = need_bytes(c, b);
		uint64_t have = buf_kernel_bytes(s, i);
		if (need > have) {
			/* the schedule and the reference disagree on a size: a bug, not an input error */
			fprintf(stderr, "gpu_run: a %s buffer of %llu bytes is too small for the cpu backend's %llu\n",
				buf_kind_name(b->kind), (unsigned long long)have, (unsigned long long)need);
			abort();
		}
	}
	c->tokens = xcalloc((size_t)s->microbatches * c->N, sizeof(int));
	c->targets = xcalloc((size_t)s->microbatches * c->N, sizeof(int));
	c->stores = xcalloc((size_t)s->nsegs, sizeof(*c->stores));
	c->nevents = 2 * s->nops + CAL_EVENTS;
	c->done = xcalloc((size_t)c->nevents + 1, 1);
	c->ns = xcalloc((size_t)c->nevents + 1, sizeof(uint64_t));
	c->short_slice = cpu_each();
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->idle, NULL);
	clock_gettime(CLOCK_MONOTONIC, &c->t0);
	for (int st = 0; st < ST_COUNT; st++) {
		c->q[st].owner = c;
		c->q[st].waiting = -1;
		pthread_cond_init(&c->q[st].cv, NULL);
		c->q[st].op = -1;
		if (pthread_create(&c->q[st].thread, NULL, stream_main, &c->q[st]) != 0) {
			fprintf(stderr, "gpu_run: cannot start the thread of stream %s\n", stream_name(st));
			abort();
		}
	}
	watchdog_describe_with(cpu_describe, c);
	return &c->base;
}
