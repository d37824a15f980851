/*
 * engine.c - discrete-event simulation of a step (see engine.h).
 *
 * Activities and how they progress:
 *   kernels     work = 1.0 (the whole op), rate = 1 / time under the SMs
 *               and HBM bandwidth they get now;
 *   collectives a fixed latency, then wire bytes at the share of the
 *               slowest link they cross; they hold SMs and HBM meanwhile;
 *   copies      bytes at the share of their PCIe direction;
 *   host ops    a fixed time on the host.
 * At most a handful of activities run at once, so recomputing all rates
 * on every change is cheap; events whose rate did not change keep their
 * finish event. An activity's finish event is its own (finish, seq), not
 * in the queue: the loop takes the earliest of them and the queue's top,
 * so a rescheduled finish leaves nothing stale behind.
 */
#include "engine.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "eq.h"
#include "memory.h"
#include "xalloc.h"

enum act_type { ACT_KERNEL, ACT_COLL, ACT_COPY, ACT_HOST, ACT_INSTANT };

#define MAX_ACTIVE 32
#define COLL_MEMO 64 /* a step's collectives come in a handful of shapes */
#define TIME_MAX_NS (1ull << 62) /* the clock's range: 146 years */

struct act {
	int op;
	enum act_type type;
	double remaining;  /* kernels: fraction; collectives and copies: bytes; host: ns */
	double fixed_ns;   /* collectives: latency still to pay; 0 for the others */
	double rate;       /* per ns */
	double cap;        /* collectives: the most bytes/ns whatever the links' shares (struct coll), or 0 */
	unsigned links;
	int main;          /* a kernel of the compute stream */
	uint64_t last_t;
	uint64_t finish;
	uint64_t floor;    /* cannot end before its launch has */
	uint64_t seq;      /* the finish event's sequence number (eq_take_seq) */
};

/* What the CPU thread spends launching an op. */
struct launch_cost {
	uint64_t per_op, per_kernel;
	int host;              /* the op's own host time counts (not with a calibration of gpu_run's: its issue time has it) */
};

static struct launch_cost launch_cost_of(const struct schedule *s, const struct cost *cost)
{
	const struct runtime_spec *rt = &s->exp->runtime;
	struct launch_cost lc = { (uint64_t)llround(rt->op_overhead_us * 1e3), (uint64_t)llround(rt->launch_us * 1e3), 1 };

	if (cost->cal && calibration_host_dispatch(cost->cal)) {
		/* eager PyTorch: each kernel issued at the measured cost of one eager op; the runtime's hooks as before */
		lc.per_kernel = (uint64_t)llround(cost->cal->dispatch_ns);
	} else if (cost->cal) { /* the runtime's walker issues an op in the time it measured */
		lc.per_op = (uint64_t)llround(cost->cal->issue_ns);
		lc.per_kernel = 0;
		lc.host = 0;
	}
	return lc;
}

/* The kernels an op puts in its stream's queue (a host op and a free put none). */
static int queue_kernels(const struct op *o)
{
	return o->kind == OP_FREE || o->kind == OP_CPU_OPTIM ? 0 : (int)o->launches;
}

/* The launch of op o, which puts k kernels in its stream's queue. */
static uint64_t launch_ns_k(const struct launch_cost *lc, const struct op *o, int k)
{
	return lc->per_op + lc->per_kernel * (uint64_t)k + (lc->host ? o->host_ns : 0);
}

static uint64_t launch_ns(const struct launch_cost *lc, const struct op *o)
{
	return launch_ns_k(lc, o, queue_kernels(o));
}

struct engine {
	const struct schedule *s;
	const struct experiment *e;
	struct sim_result *r;
	struct cost cost;
	struct eq q;
	uint64_t now;
	/* graph: the schedule's dependencies and the waits the allocator adds (core/memory.h) */
	int *deps_left;
	const int *pred_first, *pred;  /* CSR of what each op waits for (the prep's) */
	const int *succ_first, *succ;  /* CSR of dependents (the prep's) */
	const int *stream_ops[ST_COUNT];
	int stream_n[ST_COUNT], stream_head[ST_COUNT], stream_busy[ST_COUNT];
	int *launch_wait; /* op has a pending launch event */
	/* the CPU thread launching the ops in schedule order (launch_advance) */
	struct launch_cost lc;
	uint64_t lfree;        /* when it can begin the next launch */
	int lnext;             /* the next op to launch: ops from it on are not launched yet */
	int lblocked;          /* the next launch waits for a kernel of its stream, or every launched op, to finish */
	int lblocked_st, lblocked_k; /* then: its stream, and the kernels it puts there */
	const uint8_t *sync;   /* per op: its launch waits until every op launched before has finished; NULL: none */
	int nfinished;         /* ops finished so far */
	int lby;               /* the op whose end let the next launch begin, -1 */
	int depth;             /* kernels a stream holds before a launch blocks; 0: no bound */
	int queued[ST_COUNT];  /* kernels launched on each stream whose op has not finished */
	/* activities */
	struct act act[MAX_ACTIVE];
	int nact;
	int want_pred;    /* record what bounded each start (the critical path) */
	int dirty;        /* the set of activities changed since the rates were last set */
	int overflow;     /* an activity would end past TIME_MAX_NS: the step is refused */
	int side_sms;     /* the SMs a side kernel (optimizer, accumulation on a reduction stream) takes */
	double free_sms[MAX_ACTIVE + 1];   /* by collectives running: the SMs they leave to kernels */
	double hbm_floor;                  /* the HBM bandwidth kernels keep whatever the collectives take */
	/* collectives' shapes by (group, kind, bytes), what cost_collective makes of them */
	struct coll_memo { uint64_t bytes; uint8_t group, kind, valid; struct coll c; } coll_memo[COLL_MEMO];
};

/* ---- rates -------------------------------------------------------------- */

static inline void progress(struct engine *g, struct act *a)
{
	double dt = (double)(g->now - a->last_t);

	a->last_t = g->now;
	if (dt <= 0)
		return;
	if (a->type == ACT_COLL && a->fixed_ns > 0) {
		if (a->fixed_ns >= dt) {
			a->fixed_ns -= dt;
			return;
		}
		dt -= a->fixed_ns;
		a->fixed_ns = 0;
	}
	a->remaining -= dt * a->rate;
	if (a->remaining < 0)
		a->remaining = 0;
}

static double time_left(const struct act *a)
{
	if (a->type == ACT_INSTANT)
		return 0;
	if (a->remaining <= 0)
		return a->type == ACT_COLL ? a->fixed_ns : 0;
	return (a->type == ACT_COLL ? a->fixed_ns : 0) + a->remaining / a->rate;
}

/*
 * Reschedule a's finish event if its finish time changed. The activities
 * are rescheduled in order of their index, so events at equal times keep
 * their order from run to run.
 */
static inline void reschedule(struct engine *g, struct act *a)
{
	double left = time_left(a);
	uint64_t fin;

	if (left >= 0 && left < 0x1p62) { /* ceil, exact on this range */
		int64_t n = (int64_t)left;
		fin = g->now + (uint64_t)n + ((double)n < left);
	} else {
		fin = left < 0 ? g->now : TIME_MAX_NS + 1;
	}
	if (fin > TIME_MAX_NS) { /* past what the clock holds: the run stops, saying so */
		g->overflow = 1;
		fin = TIME_MAX_NS;
	}

	if (fin < a->floor)
		fin = a->floor;
	if (fin != a->finish) {
		a->finish = fin;
		a->seq = eq_take_seq(&g->q); /* an event: r->events is the sequence's end */
	}
}

/*
 * Calibrated rates: each op's measured time, plus the runtime's dispatch
 * cost per op. A kernel beside running collectives takes its time
 * measured beside one, beside an all-reduce when that is the one, or
 * beside two when two or more run (they take more of the processors, or
 * of the host's cores, than one); a collective beside a running kernel
 * takes its time measured beside one; kernels of different streams
 * running at once share the rank's processors equally.
 */
static void update_rates_calibrated(struct engine *g)
{
	const struct calibration *cal = g->cost.cal;
	int ncoll = 0, nkern = 0, nar = 0, beside;

	for (int i = 0; i < g->nact; i++) {
		progress(g, &g->act[i]);
		ncoll += g->act[i].type == ACT_COLL;
		nar += g->act[i].type == ACT_COLL && g->s->ops[g->act[i].op].kind == OP_ALLREDUCE;
		nkern += g->act[i].type == ACT_KERNEL;
	}
	beside = ncoll >= 2 ? CAL_BESIDE_TWO : !ncoll ? CAL_ALONE : nar ? CAL_BESIDE_ALLREDUCE : CAL_BESIDE_ONE;
	for (int i = 0; i < g->nact; i++) {
		struct act *a = &g->act[i];
		const struct op *o = &g->s->ops[a->op];
		double ns = calibration_host_dispatch(cal) ? 0 : cal->dispatch_ns; /* the runtime's cost on the stream */
		switch (a->type) {
		case ACT_KERNEL:
			ns += cost_cal_op_ns(&g->cost, a->op, beside) * (nkern > 1 ? nkern : 1);
			break;
		case ACT_COLL:
			ns += cost_cal_collective_ns(&g->cost, o, nkern > 0);
			break;
		case ACT_COPY:
			ns += calibration_copy_ns(cal, o->kind, o->bytes);
			break;
		default: /* host work: the host optimizer, or nothing but the runtime's cost */
			if (o->kind == OP_CPU_OPTIM)
				ns += cost_cal_op_ns(&g->cost, a->op, 0);
			break;
		}
		a->rate = 1.0 / (ns > 1 ? ns : 1);
		reschedule(g, a);
	}
}

/* A kernel's time on `sms` SMs with `share` of the HBM bandwidth. */
static inline void kernel_rate(struct engine *g, struct act *a, int sms, double share)
{
	const struct op *o = &g->s->ops[a->op];
	double ns;

	if (o->ktab >= 0) {
		ns = cost_ktab_ns(&g->cost, o->ktab, sms, share);
	} else {
		ns = cost_op_memory_ns(&g->cost, o, sms, share);
		if (o->launches > 1) {
			/* many small launches: each kernel takes at least its minimum time */
			double floor = 1e3 * g->cost.gpu->kernel_min_us * o->launches;
			if (ns < floor)
				ns = floor;
		}
	}
	a->rate = 1.0 / ns;
}

/* Recompute every activity's rate for the current set, and reschedule the changed ones. */
static void update_rates(struct engine *g)
{
	if (g->cost.cal) {
		update_rates_calibrated(g);
		return;
	}

	int on_link[LINK_COUNT] = { 0 }, ncoll = 0, nlinked = 0, nside = 0, nmain = 0, sms_main, sms_side;
	double coll_hbm = 0, hbm, free_sms, share;

	for (int i = 0; i < g->nact; i++) {
		const struct act *a = &g->act[i];
		switch (a->type) {
		case ACT_COLL:
			ncoll++;
			/* fall through */
		case ACT_COPY:
			nlinked++;
			for (unsigned m = a->links; m; m &= m - 1)
				on_link[__builtin_ctz(m)]++;
			break;
		case ACT_KERNEL:
			if (a->main)
				nmain++;
			else
				nside++;
			break;
		default:
			break;
		}
	}
	if (nlinked) {
		for (int i = 0; i < g->nact; i++) {
			struct act *a = &g->act[i];
			double bw = INFINITY;
			if (a->type != ACT_COLL && a->type != ACT_COPY)
				continue;
			progress(g, a);
			for (unsigned m = a->links; m; m &= m - 1) { /* the links in order */
				int l = __builtin_ctz(m);
				double per_act = g->cost.link_bytes_per_ns[l] / on_link[l];
				if (per_act < bw)
					bw = per_act;
			}
			if (a->cap > 0 && a->cap < bw) /* 0 but for a collective */
				bw = a->cap;
			a->rate = bw;
			if (a->type == ACT_COLL)
				coll_hbm += g->cost.gpu->nccl_hbm_factor * bw;
		}
	}
	/* NCCL kernels hold whole SMs and take HBM bandwidth from the kernels beside them */
	hbm = g->cost.hbm_bytes_per_ns - coll_hbm;
	if (hbm < g->hbm_floor)
		hbm = g->hbm_floor;
	free_sms = g->free_sms[ncoll];
	if (nmain && nside) {
		/* side kernels (optimizer or accumulation on a reduction stream) take their SMs */
		sms_main = (int)free_sms - nside * g->side_sms;
		sms_side = g->side_sms;
		share = hbm / (nside + 1);
	} else if (nmain || nside) {
		sms_main = sms_side = (int)(free_sms / (nmain ? 1 : nside));
		share = hbm / (nmain ? 1 : nside);
	} else {
		sms_main = sms_side = 1;
		share = hbm; /* no kernel to share it */
	}
	if (sms_main < 1)
		sms_main = 1;
	if (sms_side < 1)
		sms_side = 1;
	for (int i = 0; i < g->nact; i++) {
		struct act *a = &g->act[i];
		switch (a->type) {
		case ACT_KERNEL:
			progress(g, a);
			kernel_rate(g, a, a->main ? sms_main : sms_side, share);
			break;
		case ACT_COLL:
		case ACT_COPY:
			break; /* progressed and rated above */
		default:
			progress(g, a);
			break;
		}
		reschedule(g, a);
	}
}

/*
 * The ops an event ends and starts change the set of activities; the
 * rates are set once for the set they leave (an op's start or end at the
 * same instant moves no work, so only the last set's rates matter).
 */
static void settle(struct engine *g)
{
	if (g->dirty) {
		g->dirty = 0;
		update_rates(g);
	}
}

/* The activity whose finish event comes first, by (time, sequence); -1 when none has one. */
static int earliest_finish(const struct engine *g)
{
	int best = -1;

	for (int i = 0; i < g->nact; i++) {
		const struct act *a = &g->act[i];
		if (a->finish == UINT64_MAX)
			continue;
		if (best < 0 || a->finish < g->act[best].finish ||
		    (a->finish == g->act[best].finish && a->seq < g->act[best].seq))
			best = i;
	}
	return best;
}

/* cost_collective of o, which depends on its group, kind and bytes only: remembered for the ops alike. */
static void collective_of(struct engine *g, const struct op *o, struct coll *c)
{
	uint32_t h = (uint32_t)(o->bytes ^ o->bytes >> 32) * 2654435761u ^ (uint32_t)(o->group << 8 | o->kind) * 40503u;
	struct coll_memo *m = &g->coll_memo[(h >> 16) % COLL_MEMO];

	if (!m->valid || m->bytes != o->bytes || m->group != o->group || m->kind != o->kind) {
		cost_collective(&g->cost, o, &m->c);
		m->bytes = o->bytes;
		m->group = o->group;
		m->kind = o->kind;
		m->valid = 1;
	}
	*c = m->c;
}

/* ---- ops ------------------------------------------------------------------ */

static void start_op(struct engine *g, int op);
static void finish_op(struct engine *g, int i);

/*
 * When op may start once its dependencies have ended: after its launch,
 * and with a calibration, the calibrated wake after each dependency on
 * another stream (a waiting stream is woken, not already running).
 */
static uint64_t ready_at(const struct engine *g, int op)
{
	const struct op *o = &g->s->ops[op];
	uint64_t t = g->r->launch[op].end_ns;

	if (g->cost.cal)
		for (int d = g->pred_first[op]; d < g->pred_first[op + 1]; d++) {
			int p = g->pred[d];
			uint64_t w = g->r->ops[p].end_ns + (uint64_t)llround(g->cost.cal->wake_ns);
			if (g->s->ops[p].stream != o->stream && w > t)
				t = w;
		}
	return t;
}

static void try_stream(struct engine *g, int st)
{
	uint64_t t;
	int op;

	if (g->stream_busy[st] || g->stream_head[st] >= g->stream_n[st])
		return;
	op = g->stream_ops[st][g->stream_head[st]];
	if (g->deps_left[op] > 0 || op >= g->lnext)
		return; /* waits for an op, or for its launch to begin (launch_advance tries it then) */
	t = ready_at(g, op);
	if (t > g->now) {
		if (!g->launch_wait[op]) {
			g->launch_wait[op] = 1;
			eq_push(&g->q, t, op);
		}
		return;
	}
	start_op(g, op);
}

static void set_pred(struct engine *g, int op)
{
	const struct schedule *s = g->s;
	const struct op *o = &s->ops[op];
	uint64_t best = g->r->launch[op].end_ns;
	int pred = best > 0 ? -2 : -1;
	int st = o->stream, h = g->stream_head[st];

	if (h > 0) {
		int prev = g->stream_ops[st][h - 1];
		if (g->r->ops[prev].end_ns >= best && g->r->ops[prev].end_ns > 0) {
			best = g->r->ops[prev].end_ns;
			pred = prev;
		}
	}
	for (int d = g->pred_first[op]; d < g->pred_first[op + 1]; d++) {
		int p = g->pred[d];
		if (g->r->ops[p].end_ns >= best) {
			best = g->r->ops[p].end_ns;
			pred = p;
		}
	}
	g->r->pred[op] = pred;
}

/*
 * A calibrated activity: every op does its work at a rate of 1 / (its
 * measured time), set in update_rates; what it shares is decided there.
 */
static void start_calibrated(struct engine *g, struct act *a, const struct op *o)
{
	if (op_is_collective(o->kind))
		a->type = schedule_group_size(g->s, o->group) > 1 ? ACT_COLL : ACT_HOST;
	else if (o->kind == OP_H2D || o->kind == OP_D2H)
		a->type = ACT_COPY;
	else if (op_is_kernel(o) || o->kind == OP_CPU_OPTIM)
		a->type = o->kind == OP_CPU_OPTIM ? ACT_HOST : ACT_KERNEL;
	else
		a->type = ACT_HOST; /* frees: the runtime's own cost of an op */
	a->remaining = 1.0;
}

static void start_op(struct engine *g, int op)
{
	const struct schedule *s = g->s;
	const struct op *o = &s->ops[op];
	struct act *a;

	assert(g->nact < MAX_ACTIVE);
	g->stream_busy[o->stream] = 1;
	g->r->ops[op].start_ns = g->now;
	if (g->want_pred)
		set_pred(g, op);

	a = &g->act[g->nact++];
	a->op = op;
	a->remaining = a->fixed_ns = a->rate = a->cap = 0;
	a->links = 0;
	a->main = 0;
	a->last_t = g->now;
	a->finish = UINT64_MAX;
	a->floor = g->r->launch[op].end_ns;
	a->seq = 0;
	if (g->cost.cal) {
		start_calibrated(g, a, o);
		g->dirty = 1;
		return;
	}
	if (op_is_collective(o->kind)) {
		struct coll c;
		collective_of(g, o, &c);
		if (c.n <= 1) {
			a->type = ACT_INSTANT;
		} else {
			a->type = ACT_COLL;
			a->links = c.links;
			a->remaining = (double)c.wire;
			a->fixed_ns = c.latency_ns;
			a->cap = c.cap;
		}
	} else if (o->kind == OP_H2D || o->kind == OP_D2H) {
		a->type = o->bytes ? ACT_COPY : ACT_INSTANT;
		a->links = 1u << (o->kind == OP_H2D ? LINK_PCIE_H2D : LINK_PCIE_D2H);
		a->remaining = (double)o->bytes;
	} else if (o->kind == OP_CPU_OPTIM) {
		a->type = ACT_HOST;
		a->remaining = cost_host_optim_ns(&g->cost, o->bytes);
		a->rate = 1.0;
	} else if (op_is_kernel(o) && (o->ktab >= 0 || o->bytes > 0)) {
		a->type = ACT_KERNEL;
		a->remaining = 1.0;
		a->main = o->stream == ST_COMPUTE;
	} else {
		a->type = ACT_INSTANT; /* frees, empty kernel lists */
	}
	if (a->type == ACT_INSTANT && a->floor <= g->now) {
		/* nothing to share: it ends as it starts, and the others' rates stay */
		finish_op(g, g->nact - 1);
		return;
	}
	g->dirty = 1;
}

/*
 * Launch ops in schedule order for as long as their streams' queues have
 * room: a stream holds `depth` kernels launched and not yet finished, and
 * a launch that would overfill it blocks the CPU thread until enough of
 * them finish (CUDA's pending-launch queue; an op's kernels are counted
 * as finishing together, at its end). A launched op that heads its stream
 * may start once its launch has ended.
 */
static int queue_full(const struct engine *g, int st, int k)
{
	int q = g->queued[st];

	return g->depth && k && q && q + k > g->depth; /* an op of more kernels than the queue takes goes into an empty one */
}

/*
 * The launch of op (o, of k kernels) waits: for room in its stream's
 * queue, or, when its memory flushed the allocator's cache (a device
 * synchronization, then cudaFree), for every op launched before it to
 * finish.
 */
static int launch_waits(const struct engine *g, int op, const struct op *o, int k)
{
	return queue_full(g, o->stream, k) || (g->sync && g->sync[op] && g->nfinished < op);
}

/* Whether the blocked launch (op, g->lblocked_st, g->lblocked_k) still waits. */
static int launch_blocked(const struct engine *g, int op)
{
	return queue_full(g, g->lblocked_st, g->lblocked_k) || (g->sync && g->sync[op] && g->nfinished < op);
}

static void launch_advance(struct engine *g)
{
	const struct schedule *s = g->s;

	while (g->lnext < s->nops) {
		int op = g->lnext;
		const struct op *o = &s->ops[op];
		int st = o->stream, k = queue_kernels(o);

		if (launch_waits(g, op, o, k)) {
			g->lblocked = 1;
			g->lblocked_st = st;
			g->lblocked_k = k;
			return;
		}
		g->lblocked = 0;
		g->r->launch[op].start_ns = g->lfree;
		g->lfree += launch_ns_k(&g->lc, o, k);
		g->r->launch[op].end_ns = g->lfree;
		if (g->r->launch_by)
			g->r->launch_by[op] = g->lby;
		g->lby = -1;
		g->queued[st] += k;
		g->lnext++;
		if (g->stream_head[st] < g->stream_n[st] && g->stream_ops[st][g->stream_head[st]] == op)
			try_stream(g, st);
	}
}

/* op has finished: its kernels leave its stream's queue, which may let the blocked launch go on. */
static void launch_release(struct engine *g, int op)
{
	const struct op *o = &g->s->ops[op];

	g->queued[o->stream] -= queue_kernels(o);
	g->nfinished++;
	if (!g->lblocked || launch_blocked(g, g->lnext))
		return;
	if (g->lfree < g->now) { /* the thread waited for this op */
		g->lfree = g->now;
		g->lby = op;
	}
	launch_advance(g);
}

static void finish_op(struct engine *g, int i)
{
	const struct schedule *s = g->s;
	int op = g->act[i].op;
	const struct op *o = &s->ops[op];

	int instant = g->act[i].type == ACT_INSTANT;
	unsigned streams = 1u << o->stream;

	if (i != --g->nact)
		g->act[i] = g->act[g->nact];
	g->r->ops[op].end_ns = g->now;
	if (g->now > g->r->step_ns)
		g->r->step_ns = g->now;
	g->stream_busy[o->stream] = 0;
	g->stream_head[o->stream]++;
	for (int k = g->succ_first[op]; k < g->succ_first[op + 1]; k++) {
		int d = g->succ[k];
		if (--g->deps_left[d] == 0)
			streams |= 1u << g->s->ops[d].stream;
	}
	if (!instant)
		g->dirty = 1;
	/* only the op's own stream and those of ops it released can start something */
	for (; streams; streams &= streams - 1)
		try_stream(g, __builtin_ctz(streams));
	launch_release(g, op); /* last: the streams' heads are where this op's end left them */
}

/*
 * The CPU thread issues ops in schedule order; each op's kernels take
 * launch time. Unbounded, as the allocator's issue order assumes: the
 * simulation bounds it by the streams' queues (launch_advance).
 */
static void plan_launches(const struct schedule *s, const struct cost *cost, struct op_timing *launch, uint64_t *issue)
{
	struct launch_cost lc = launch_cost_of(s, cost);
	uint64_t t = 0;

	for (int i = 0; i < s->nops; i++) {
		launch[i].start_ns = issue[i] = t;
		t += launch_ns(&lc, &s->ops[i]);
		launch[i].end_ns = t;
	}
	launch[s->nops] = (struct op_timing){ 0 };
}

/* Whether any of the n bytes at b is set: a word at a time. */
static int any_set(const uint8_t *b, size_t n)
{
	size_t i = 0;
	uint64_t acc = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, b + i, 8);
		acc |= w;
	}
	for (; i < n; i++)
		acc |= b[i];
	return acc != 0;
}

/* Whether an op's allocator waits (one per stream, -1: none) are all none: the common case, in one test. */
static int all_negative(const int32_t *wait)
{
	int32_t all = -1;

	for (int t = 0; t < ST_COUNT; t++)
		all &= wait[t];
	return all < 0;
}

/* The op graph: the schedule's dependencies and the allocator's waits, both ways, and the streams' ops. */
static void build_graph(struct engine_prep *p, const struct memory *mem)
{
	const struct schedule *s = p->s;
	int n = s->nops, np = 0;
	int *cnt = xcalloc(n + 1, sizeof(int));

	p->deps_left = xmalloc(sizeof(int) * (size_t)(n + 1));
	if (any_set(mem->sync, (size_t)n)) {
		p->sync = xmalloc((size_t)n);
		memcpy(p->sync, mem->sync, (size_t)n);
	}
	p->pred_first = xmalloc(sizeof(int) * (size_t)(n + 1));
	p->pred = xmalloc(sizeof(int) * (s->ndeps + (size_t)n * ST_COUNT + 1));
	p->succ_first = xcalloc(n + 1, sizeof(int));
	for (int i = 0; i < n; i++) {
		const struct op *o = &s->ops[i];
		const uint32_t *dep = s->deps + o->dep_first;
		const int32_t *wait = mem->wait + (size_t)i * ST_COUNT;
		p->pred_first[i] = np;
		for (uint32_t d = 0; d < o->ndeps; d++)
			p->pred[np++] = (int)dep[d];
		if (!all_negative(wait))
			for (int t = 0; t < ST_COUNT; t++)
				if (wait[t] >= 0)
					p->pred[np++] = wait[t];
		p->deps_left[i] = np - p->pred_first[i];
		p->stream_n[o->stream]++;
	}
	p->pred_first[n] = np;
	p->succ = xmalloc(sizeof(int) * (size_t)(np + 1));
	for (int k = 0; k < np; k++)
		p->succ_first[p->pred[k] + 1]++;
	for (int i = 0; i < n; i++)
		p->succ_first[i + 1] += p->succ_first[i];
	for (int i = 0; i < n; i++)
		for (int k = p->pred_first[i]; k < p->pred_first[i + 1]; k++) {
			int q = p->pred[k];
			p->succ[p->succ_first[q] + cnt[q]++] = i;
		}
	for (int st = 0; st < ST_COUNT; st++) {
		p->stream_ops[st] = xmalloc(sizeof(int) * (p->stream_n[st] + 1));
		p->stream_n[st] = 0;
	}
	for (int i = 0; i < n; i++) {
		int st = s->ops[i].stream;
		p->stream_ops[st][p->stream_n[st]++] = i;
	}
	free(cnt);
}

struct engine_prep *engine_prepare(const struct schedule *s, int record_memory, char *err, int errlen)
{
	struct engine_prep *p = xcalloc(1, sizeof(*p));
	struct cost cost;
	uint64_t *issue;

	p->s = s;
	p->record_memory = record_memory;
	memset(&cost, 0, sizeof(cost));
	/* a calibration times the launch thread; without one, the runtime spec does */
	if (s->exp->calibration[0] && cost_init(&cost, s, err, errlen) != 0) {
		free(p);
		return NULL;
	}
	p->launch = xmalloc(sizeof(*p->launch) * (size_t)(s->nops + 1));
	issue = xmalloc(sizeof(uint64_t) * (size_t)(s->nops + 1));
	plan_launches(s, &cost, p->launch, issue);
	cost_release(&cost);
	/* memory follows issue order: the allocator runs as the launch thread issues the ops */
	p->mem = memory_new(s, record_memory, NULL, NULL);
	memory_predict(p->mem, issue);
	free(issue);
	/* the step's end frees nothing that could raise a peak: the peaks are final */
	p->peaks = p->mem->peaks;
	build_graph(p, p->mem);
	if (!record_memory) { /* nothing left to record at the step's end */
		memory_free(p->mem);
		p->mem = NULL;
	}
	return p;
}

void engine_prep_free(struct engine_prep *p)
{
	if (!p)
		return;
	memory_free(p->mem);
	free(p->launch);
	free(p->sync);
	free(p->deps_left);
	free(p->pred_first);
	free(p->pred);
	free(p->succ_first);
	free(p->succ);
	for (int st = 0; st < ST_COUNT; st++)
		free(p->stream_ops[st]);
	free(p->scratch);
	if (p->q)
		eq_release(p->q);
	free(p->q);
	free(p);
}

/*
 * Arrays of n entries, kept across simulations of schedules of at most the
 * size they have. A simulation sets every op's start and end, and with
 * want_pred every op's pred.
 */
static void result_arrays(struct sim_result *r, int n, int want_pred)
{
	if (n > r->cap) {
		free(r->ops);
		free(r->launch);
		free(r->pred);
		free(r->launch_by);
		r->ops = xmalloc(sizeof(*r->ops) * (size_t)(n + 1));
		r->launch = xmalloc(sizeof(*r->launch) * (size_t)(n + 1));
		r->pred = xmalloc(sizeof(*r->pred) * (size_t)(n + 1));
		r->launch_by = xmalloc(sizeof(*r->launch_by) * (size_t)(n + 1));
		r->cap = n;
	}
	if (!want_pred)
		memset(r->pred, 0, sizeof(*r->pred) * (size_t)n);
	free(r->mem);
	r->mem = NULL;
	r->nmem = 0;
	r->step_ns = 0;
	r->events = 0;
}

int engine_simulate(struct engine_prep *p, const struct schedule *s, struct sim_result *r, char *err, int errlen)
{
	struct engine g;
	struct event ev;

	assert(s->nops == p->s->nops && (!p->mem || !p->used));
	p->used = 1;
	result_arrays(r, s->nops, !p->no_pred);
	memset(&g, 0, sizeof(g));
	g.s = s;
	g.e = s->exp;
	g.r = r;
	g.want_pred = !p->no_pred;
	if (cost_init(&g.cost, s, err, errlen) != 0)
		return -1;
	/* the graph is the prep's; what changes as the step runs starts from scratch */
	if (!p->scratch) {
		p->scratch = xmalloc(sizeof(int) * 2 * (size_t)(s->nops + 1));
		p->q = xmalloc(sizeof(*p->q));
		eq_init(p->q);
		/* no launch pending; a simulation ends with none, and leaves them so */
		memset(p->scratch + s->nops + 1, 0, sizeof(int) * (size_t)(s->nops + 1));
	}
	g.q = *p->q;
	eq_reset(&g.q);
	g.deps_left = p->scratch;
	g.launch_wait = p->scratch + s->nops + 1;
	memcpy(g.deps_left, p->deps_left, sizeof(int) * (size_t)s->nops);
	g.pred_first = p->pred_first;
	g.pred = p->pred;
	g.succ_first = p->succ_first;
	g.succ = p->succ;
	for (int st = 0; st < ST_COUNT; st++) {
		g.stream_ops[st] = p->stream_ops[st];
		g.stream_n[st] = p->stream_n[st];
	}

	g.lc = launch_cost_of(s, &g.cost);
	g.side_sms = (int)ceil(g.cost.gpu->elementwise_sms_frac * g.cost.gpu->sms);
	for (int n = 0; n <= MAX_ACTIVE; n++) {
		double free_sms = g.cost.gpu->sms - (double)n * g.cost.gpu->nccl_sms;
		g.free_sms[n] = free_sms < g.cost.gpu->sms / 4.0 ? g.cost.gpu->sms / 4.0 : free_sms;
	}
	g.hbm_floor = 0.1 * g.cost.hbm_bytes_per_ns;
	g.depth = g.cost.cal && g.cost.cal->launch_queue >= 0 ? g.cost.cal->launch_queue : s->exp->runtime.launch_queue;
	g.lby = -1;
	g.sync = p->sync;
	launch_advance(&g);
	for (int st = 0; st < ST_COUNT; st++)
		try_stream(&g, st);
	settle(&g);
	for (;;) {
		int next = earliest_finish(&g);

		if (!eq_empty(&g.q) && (next < 0 || !eq_before(g.act[next].finish, g.act[next].seq, eq_top(&g.q)))) {
			eq_pop(&g.q, &ev); /* a launch completed */
			assert(ev.t_ns >= g.now);
			g.now = ev.t_ns;
			g.launch_wait[ev.op] = 0;
			try_stream(&g, s->ops[ev.op].stream);
		} else if (next >= 0) {
			assert(g.act[next].finish >= g.now);
			g.now = g.act[next].finish;
			finish_op(&g, next);
		} else {
			break;
		}
		settle(&g);
		if (g.overflow) {
			snprintf(err, (size_t)errlen, "the step would run past %.0f years of simulated time: no step "
				 "this model prices takes that long; lower the sizes or raise the speeds",
				 (double)TIME_MAX_NS * 1e-9 / 3.156e7);
			*p->q = g.q;
			cost_release(&g.cost);
			return -1;
		}
	}
	for (int st = 0; st < ST_COUNT; st++)
		assert(g.stream_head[st] == g.stream_n[st] && "an op never ran: cycle in the schedule");

	r->peaks = p->peaks;
	if (p->mem) {
		memory_step_end(p->mem, r->step_ns);
		r->mem = p->mem->samples; /* the timeline moves to the result */
		r->nmem = p->mem->nsamples;
		p->mem->samples = NULL;
		p->mem->nsamples = 0;
	}
	r->events = g.q.next_seq; /* every event, queued or an activity's finish, took a sequence number */
	*p->q = g.q; /* its storage, for the next simulation */
	cost_release(&g.cost);
	return 0;
}

int engine_run(const struct schedule *s, int record_memory, struct sim_result *r, char *err, int errlen)
{
	struct engine_prep *p;
	int rc;

	memset(r, 0, sizeof(*r));
	p = engine_prepare(s, record_memory, err, errlen);
	if (!p)
		return -1;
	rc = engine_simulate(p, s, r, err, errlen);
	engine_prep_free(p);
	if (rc != 0)
		sim_result_release(r);
	return rc;
}

void sim_result_release(struct sim_result *r)
{
	free(r->ops);
	free(r->launch);
	free(r->pred);
	free(r->launch_by);
	free(r->mem);
	memset(r, 0, sizeof(*r));
}
