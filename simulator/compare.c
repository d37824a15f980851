/*
 * compare.c - ./sim --compare: every measured run of a results file set
 * against the simulator's prediction of it (compare.h).
 */
#include "compare.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>

#include "calibration.h"
#include "cost.h"
#include "engine.h"
#include "json.h"
#include "report.h"
#include "results.h"
#include "schedule.h"
#include "text.h"
#include "xalloc.h"

/*
 * A PyTorch run is timed per device kernel (its profiler's), not per op of
 * the schedule. Its kernels are summed by the kind of work they do, and so
 * are the predicted ops: NCCL's kernels by collective (their names carry
 * it: ncclDevKernel_AllGather_..., _ReduceScatter_..., _AllReduce_...),
 * every other kernel as compute, which on the schedule's side is every op
 * that runs kernels and is not a collective (forward, recompute, backward,
 * accumulation, FSDP2's copies in and out, the optimizer).
 */
enum work { W_COMPUTE, W_ALLGATHER, W_REDUCE_SCATTER, W_ALLREDUCE, W_OTHER_COMM, W_COUNT };

static const char *const work_name[W_COUNT] = { "compute", "allgather", "reduce_scatter", "allreduce",
						 "other collectives" };

static enum work kernel_work(const char *name)
{
	if (!strstr(name, "nccl"))
		return W_COMPUTE;
	if (strstr(name, "AllGather"))
		return W_ALLGATHER;
	if (strstr(name, "ReduceScatter"))
		return W_REDUCE_SCATTER;
	if (strstr(name, "AllReduce"))
		return W_ALLREDUCE;
	return W_OTHER_COMM;
}

/* The kind of work of a schedule op, or -1 for those that run no device kernel (frees, host work, copies over PCIe). */
static int op_work(enum op_kind k)
{
	switch (k) {
	case OP_ALLGATHER:
		return W_ALLGATHER;
	case OP_REDUCE_SCATTER:
		return W_REDUCE_SCATTER;
	case OP_ALLREDUCE:
		return W_ALLREDUCE;
	case OP_FREE:
	case OP_CPU_OPTIM:
	case OP_D2H:
	case OP_H2D:
		return -1;
	default:
		return W_COMPUTE;
	}
}

/*
 * A run with kernel times and no op times (PyTorch's): its compute split
 * by class of kernel, measured from the kernels' names, predicted from the
 * schedule's kernels each priced alone (the catalog, or the calibration),
 * so that a class the prices get wrong shows apart from the step's
 * overlaps and waits.
 */
enum kclass { KC_GEMM, KC_ATTN, KC_OPTIM, KC_OTHER, KC_COUNT };

static const char *const kclass_name[KC_COUNT] = { "gemm", "attention", "optimizer", "other (elementwise, copies)" };

/* A measured compute kernel's class, by the names cuBLAS(Lt), cuDNN, PyTorch and Inductor give them. */
static enum kclass kernel_class(const char *name)
{
	static const char *const attn[] = { "sdpa", "flash", "fmha", "attention", "cudnn", NULL };
	static const char *const optim[] = { "multi_tensor_apply", "lpnorm", "adam", NULL };
	static const char *const gemm[] = { "nvjet", "gemm", "xmma", "cutlass", "cublas", "triton_tem", NULL };

	for (int i = 0; attn[i]; i++)
		if (strstr(name, attn[i]))
			return KC_ATTN;
	for (int i = 0; optim[i]; i++)
		if (strstr(name, optim[i]))
			return KC_OPTIM;
	for (int i = 0; gemm[i]; i++)
		if (strstr(name, gemm[i]))
			return KC_GEMM;
	return KC_OTHER;
}

/* What one comparison found. */
struct cmp {
	struct run_read *m;              /* the measured run; its experiment gets the calibration */
	char policy[256];                /* the policy as a person reads it */
	char policy_key[1024];           /* every policy key: runs of the same policy share it */
	char calibration[CONFIG_PATH_MAX];
	char group[4096];                /* runs that differ only in policy share it (the ranking); every
					    model and cluster key, so a cut-off key would join runs that differ */
	struct summary pred;
	double step_err, alloc_err, reserved_err;
	int within_noise;
	double kind_meas[OP_KIND_COUNT], kind_pred[OP_KIND_COUNT]; /* seconds of op time, summed */
	int kind_n[OP_KIND_COUNT];
	double stream_meas[ST_COUNT], stream_pred[ST_COUNT];
	int stream_n[ST_COUNT];
	/*
	 * the compute stream's ops apart by whether, measured, a collective
	 * ran beside them for over BESIDE_FRAC of their time ([1]) or not
	 * ([0]): where contention with communication carries the error
	 */
	double beside_meas[2], beside_pred[2];
	int beside_n[2];
	int timed;                       /* the run has op times (a PyTorch run has kernel times instead) */
	int kernel_timed;                /* it has kernel times (a kernels table whose time is not all 0) */
	int mem_measured;                /* it has peak memory (a PyTorch run on the CPU has none) */
	int alloc_measured, reserved_measured; /* each peak apart (a published run may give reserved alone) */
	double work_meas[W_COUNT], work_pred[W_COUNT]; /* untimed runs with kernels: seconds per kind of work */
	double class_meas[KC_COUNT], class_pred[KC_COUNT]; /* and their compute by kernel class, each kernel alone */
	int class_kernels[KC_COUNT];
	int work_kernels[W_COUNT], work_ops[W_COUNT];
	struct schedule *s;
	struct sim_result r;
	double rank_wait_s;              /* measured: the first rank's wait for the last, summed over the collectives */
	/*
	 * predicted: from the first device op's start to the last one's end,
	 * and the time some op of some device stream runs (the rest: the GPU
	 * idle), against a PyTorch run's profiled step (summary profile_*)
	 */
	double gpu_span_s, gpu_busy_s;
	/*
	 * A PyTorch run's own allocator events (alloc_trace) served by the
	 * allocator of its runtime (alloc_replay): its model on PyTorch's
	 * requests, apart from the schedule's
	 */
	int replayed;
	struct alloc_replay rep;
	/*
	 * the calibration's newest session: when it was measured, and how
	 * long before the run was written (NAN when either date is unknown):
	 * a shared machine drifts, and a calibration is the machine as it was
	 */
	char cal_date[32];
	double cal_before_s;
	/*
	 * whether that session was measured by the build of gpu_run that made
	 * the run (1), another (0), or either does not say (-1): two builds of
	 * one source can run the CPU backend's kernels 1.2 times apart
	 * (gpu/run/runinfo.h, runinfo_binary)
	 */
	int cal_same_binary;
	char cal_binary[24];
	int have;                        /* pred and r hold a prediction */
};

/* Seconds since 1970 of a UTC ISO 8601 date ("2026-11-28T10:15:06Z"), NAN when it is not one. */
static double iso_seconds(const char *iso)
{
	struct tm tm;
	const char *end;

	memset(&tm, 0, sizeof tm);
	end = strptime(iso, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!end || (*end && strcmp(end, "Z")))
		return NAN;
	return (double)timegm(&tm);
}

/* c->cal_date and c->cal_before_s of the calibration that priced it (none: "" and NAN). */
static void calibration_age(struct cmp *c)
{
	struct cost cost;
	char err[512];

	c->cal_date[0] = '\0';
	c->cal_before_s = NAN;
	c->cal_same_binary = -1;
	if (!c->calibration[0] || cost_init(&cost, c->s, err, sizeof err) != 0)
		return;
	if (cost.cal) {
		snprintf(c->cal_date, sizeof c->cal_date, "%s", cost.cal->date);
		c->cal_before_s = iso_seconds(c->m->created) - iso_seconds(cost.cal->date);
		snprintf(c->cal_binary, sizeof c->cal_binary, "%s", cost.cal->binary);
		if (cost.cal->binary[0] && c->m->binary[0])
			c->cal_same_binary = !strcmp(cost.cal->binary, c->m->binary);
	}
	cost_release(&cost);
}

static double rel(double pred, double meas)
{
	return meas != 0 ? (pred - meas) / meas : (pred == 0 ? 0 : INFINITY);
}

/* "the build", "step 1 (warm-up)", "step 3": what row k of memory_by_step follows */
static const char *after_name(int k, int warmup, char *buf, size_t n)
{
	if (!k)
		snprintf(buf, n, "the build");
	else
		snprintf(buf, n, "step %d%s", k, k <= warmup ? " (warm-up)" : "");
	return buf;
}

/*
 * A PyTorch run's memory after the build and after each warm-up step
 * (memory_by_step) beside the prediction's at the same points: where the
 * reserved bytes part, which phase of the run the allocator's model or the
 * requests it is given miss (the build, the first step, which makes the
 * optimizer's state, the steps after).
 */
static void print_by_step(FILE *out, const struct cmp *c)
{
	const struct run_read *m = c->m;
	const struct mem_peaks *p = &c->r.peaks;
	char b1[32], b2[32], b3[32], b4[32], name[32];

	fprintf(out, "    %-24s %11s %11s %11s %11s %9s\n", "memory after", "alloc meas.", "predicted", "reserv. meas.",
		"predicted", "error");
	for (int k = 0; k < m->nby_step && k < MEM_AFTER_MAX; k++) {
		char e[16] = "-";
		if (k < p->nafter)
			snprintf(e, sizeof e, "%+.2f%%", 100 * rel((double)p->after[k].reserved, (double)m->by_step[k].reserved));
		fprintf(out, "    %-24s %11s %11s %11s %11s %9s\n", after_name(k, m->exp.run.warmup, name, sizeof name),
			report_bytes(m->by_step[k].alloc, b1, sizeof b1),
			k < p->nafter ? report_bytes(p->after[k].alloc, b2, sizeof b2) : "-",
			report_bytes(m->by_step[k].reserved, b3, sizeof b3),
			k < p->nafter ? report_bytes(p->after[k].reserved, b4, sizeof b4) : "-", e);
	}
	if (m->nby_step > MEM_AFTER_MAX)
		fprintf(out, "    (%d more rows, not compared)\n", m->nby_step - MEM_AFTER_MAX);
	if (!strcmp(m->build, "device"))
		fprintf(out, "    built on the device: the model made on the GPU, then each fully_shard copied its "
			     "parameters into their shards and freed the originals, which the cache keeps; ./sim's build "
			     "allocates the shards alone, as a build on the meta device (to_empty) does\n");
}

/*
 * The calibration that prices a measured run: the one given ("none": the
 * catalog's constants), else its hardware's if there is one, else none;
 * named FILE@NNNNNN, the sessions it had then (calibration_pin), so that
 * the prediction records what priced it, and later sessions of the file
 * leave it as it is. A file that cannot be pinned keeps its name: reading
 * it says why.
 */
static void pick_calibration(const char *given, const struct run_read *m, char *out, int len)
{
	static char last[CONFIG_PATH_MAX], pinned[CONFIG_PATH_MAX]; /* a file's runs share one calibration */
	char path[CONFIG_PATH_MAX], err[512];

	out[0] = '\0';
	if (given && given[0] && !calibration_named(given))
		return; /* none: the catalog's constants, whatever file its hardware has */
	if (given && given[0]) {
		snprintf(path, sizeof path, "%s", given);
	} else {
		if (!m->hardware[0])
			return;
		snprintf(path, sizeof path, "data/calibration/%s-%s.h5", m->hardware, m->exp.run.device);
		if (access(path, R_OK) != 0)
			return;
	}
	if (strcmp(path, last) != 0) {
		snprintf(last, sizeof last, "%s", path);
		if (calibration_pin(path, pinned, sizeof pinned, err, sizeof err) != 0)
			snprintf(pinned, sizeof pinned, "%s", path);
	}
	snprintf(out, len, "%s", pinned);
}

struct key_ctx {
	char *buf;
	int len, n;
};

/*
 * The model, cluster, batch and device enter the group key (predict() adds
 * the hardware and the fabric); the policy and the run's bookkeeping do not.
 */
static void key_attr(void *ctx, const char *section, const char *key, const char *value)
{
	struct key_ctx *k = ctx;

	if (strcmp(section, "model") && strcmp(section, "cluster") &&
	    !(!strcmp(section, "run") && (!strcmp(key, "batch") || !strcmp(key, "device"))))
		return;
	if (!strcmp(key, "calibration"))
		return;
	if (k->n < k->len)
		k->n += snprintf(k->buf + k->n, (size_t)(k->len - k->n), "%s.%s=%s;", section, key, value);
}

/* Every key of the policy section enters the policy key (the policy line leaves some out). */
static void policy_attr(void *ctx, const char *section, const char *key, const char *value)
{
	struct key_ctx *k = ctx;

	if (strcmp(section, "policy") || k->n >= k->len)
		return;
	k->n += snprintf(k->buf + k->n, (size_t)(k->len - k->n), "%s=%s;", key, value);
}

#define BESIDE_FRAC 0.01 /* a compute op this much of whose measured time a collective overlapped is beside one */

/* The compute stream's ops alone and beside a collective (struct cmp: beside_*), by the measured timeline. */
static void tally_beside(struct cmp *c)
{
	const struct schedule *s = c->s;
	const struct op_timing *t = c->m->ops;

	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		uint64_t over = 0, dm = t[i].end_ns > t[i].start_ns ? t[i].end_ns - t[i].start_ns : 0;
		int k;
		if (o->stream != ST_COMPUTE || op_is_collective((enum op_kind)o->kind) || !dm)
			continue;
		for (int j = 0; j < s->nops; j++) {
			uint64_t a, b;
			if (!op_is_collective((enum op_kind)s->ops[j].kind))
				continue;
			a = t[j].start_ns > t[i].start_ns ? t[j].start_ns : t[i].start_ns;
			b = t[j].end_ns < t[i].end_ns ? t[j].end_ns : t[i].end_ns;
			over += b > a ? b - a : 0;
		}
		k = (double)over > BESIDE_FRAC * (double)dm;
		c->beside_meas[k] += (double)dm * 1e-9;
		c->beside_pred[k] += (double)(c->r.ops[i].end_ns - c->r.ops[i].start_ns) * 1e-9;
		c->beside_n[k]++;
	}
}

/*
 * The predicted step's device time: from its first device op's start to
 * its last one's end (the host optimizer's stream is not the device's), and
 * the union of those ops' times, as a profiled step's kernels give them
 * (experiments/pytorch/timeline.py).
 */
static void gpu_idle(struct cmp *c)
{
	const struct schedule *s = c->s;
	double *start = xmalloc(sizeof(double) * (size_t)(s->nops + 1));
	double *end = xmalloc(sizeof(double) * (size_t)(s->nops + 1));
	size_t n = 0;
	double busy = 0, a, b;

	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].stream != ST_HOST && c->r.ops[i].end_ns > c->r.ops[i].start_ns) {
			start[n] = (double)c->r.ops[i].start_ns;
			end[n++] = (double)c->r.ops[i].end_ns;
		}
	c->gpu_span_s = c->gpu_busy_s = 0;
	if (n) {
		gsl_sort2(start, 1, end, 1, n);
		a = start[0], b = end[0]; /* the stretch of busy time so far; b, the latest end yet */
		for (size_t i = 1; i < n; i++) {
			if (start[i] > b) {
				busy += b - a;
				a = start[i];
			}
			if (end[i] > b)
				b = end[i];
		}
		busy += b - a;
		c->gpu_span_s = (b - start[0]) * 1e-9;
		c->gpu_busy_s = busy * 1e-9;
	}
	free(start);
	free(end);
}

/* Per op kind and per stream: the time ops spend, measured and predicted. */
static void tally(struct cmp *c)
{
	const struct schedule *s = c->s;

	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		double dm = (double)(c->m->ops[i].end_ns - c->m->ops[i].start_ns) * 1e-9;
		double dp = (double)(c->r.ops[i].end_ns - c->r.ops[i].start_ns) * 1e-9;
		c->kind_meas[o->kind] += dm;
		c->kind_pred[o->kind] += dp;
		c->kind_n[o->kind]++;
		c->stream_meas[o->stream] += dm;
		c->stream_pred[o->stream] += dp;
		c->stream_n[o->stream]++;
		c->timed |= c->m->ops[i].end_ns > c->m->ops[i].start_ns;
		if (op_work(o->kind) >= 0) {
			c->work_pred[op_work(o->kind)] += dp;
			c->work_ops[op_work(o->kind)]++;
		}
	}
	for (int i = 0; i < c->m->nkernels; i++) {
		enum work w = kernel_work(c->m->kernels[i].name);
		c->work_meas[w] += c->m->kernels[i].device_us * 1e-6;
		c->work_kernels[w] += c->m->kernels[i].calls;
		c->kernel_timed |= c->m->kernels[i].device_us > 0;
		if (w == W_COMPUTE) {
			enum kclass k = kernel_class(c->m->kernels[i].name);
			c->class_meas[k] += c->m->kernels[i].device_us * 1e-6;
			c->class_kernels[k] += c->m->kernels[i].calls;
		}
	}
	c->alloc_measured = c->m->sum.peak_alloc_bytes > 0;
	c->reserved_measured = c->m->sum.peak_reserved_bytes > 0;
	c->mem_measured = c->alloc_measured || c->reserved_measured;
}

/*
 * Over the collectives of rank 0's groups in the recorded step, how long
 * the first rank to start each waited for the last (the ranks' timings,
 * ops_by_rank): what the ranks' drifting apart, which a model of ranks
 * that run alike does not see, cost.
 * Ranks are laid out as the schedule assumes: a shard group is shard_n
 * consecutive ranks, a replica group those with the same index in theirs.
 */
static double rank_wait(const struct schedule *s, const struct run_read *m)
{
	double w = 0;

	if (!m->by_rank || m->nranks < 2)
		return 0;
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		uint64_t first = m->by_rank[i].start_ns, last = first;
		if (!op_is_collective(o->kind) || schedule_group_size(s, o->group) < 2)
			continue;
		for (int r = 1; r < m->nranks; r++) {
			int in = o->group == GRP_WORLD || (o->group == GRP_SHARD && r / s->shard_n == 0) ||
				 (o->group == GRP_REPLICA && r % s->shard_n == 0);
			uint64_t t = m->by_rank[(size_t)r * (size_t)m->nops + (size_t)i].start_ns;
			if (in && t > last)
				last = t;
			if (in && t < first)
				first = t;
		}
		w += (double)(last - first) * 1e-9;
	}
	return w;
}

/*
 * The schedule's compute by kernel class, each kernel priced alone on the
 * whole GPU: a kernel list's kernels by their kind (and the attention's
 * helpers by name), the optimizer op, and the other compute ops' memory
 * traffic (copies, casts); with a calibration, its prices.
 */
static int class_predict(struct cmp *c, char *err, int errlen)
{
	const struct schedule *s = c->s;
	struct cost cost;

	if (cost_init(&cost, s, err, errlen) != 0)
		return -1;
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		if (op_work(o->kind) != W_COMPUTE)
			continue;
		if (o->ktab >= 0) {
			const struct ktab *t = &s->ktabs[o->ktab];
			for (uint32_t k = 0; k < t->count; k++) {
				const struct kernel *kn = &s->kernels[t->first + k];
				enum kclass kc = kn->kind == K_GEMM ? KC_GEMM
						 : kn->kind == K_ATTN || !strncmp(kn->name, "attention", 9) ? KC_ATTN
						 : KC_OTHER;
				c->class_pred[kc] += 1e-9 * (cost.cal ? cost_cal_kernel_ns(&cost, kn, 0)
								      : cost_kernel_ns(&cost, kn, cost.gpu->sms,
										       cost.hbm_bytes_per_ns));
			}
		} else if (o->bytes || o->kind == OP_OPTIM) {
			double ns = cost.cal ? cost_cal_op_ns(&cost, i, 0) : cost_op_memory_ns(&cost, o, cost.gpu->sms,
												 cost.hbm_bytes_per_ns);
			c->class_pred[o->kind == OP_OPTIM ? KC_OPTIM : KC_OTHER] += 1e-9 * ns;
		}
	}
	cost_release(&cost);
	return 0;
}

/*
 * Predict measured run m (with catalog_now, its GPU model constants
 * today's catalog's). 0, or -1 with the reason in err.
 */
static int predict(struct cmp *c, const char *calibration, int catalog_now, char *err, int errlen)
{
	struct run_read *m = c->m;
	struct experiment *e = &m->exp;
	struct key_ctx k = { c->group, sizeof c->group, 0 };
	struct key_ctx pk = { c->policy_key, sizeof c->policy_key, 0 };

	if (m->error[0]) {
		snprintf(err, errlen, "%s", m->error);
		return -1;
	}
	if (catalog_now && config_gpu_model_from_catalog(e) != 0) {
		snprintf(err, errlen, "its configuration with today's catalog does not resolve (see above)");
		return -1;
	}
	pick_calibration(calibration, m, c->calibration, sizeof c->calibration);
	snprintf(e->calibration, sizeof e->calibration, "%s", c->calibration);
	/*
	 * gpu_run launches its own kernels under every runtime's schedule
	 * (gpu/run/README.md), its attention this project's kernel or, where
	 * the run says so, cuDNN's; and its run says which fabric it ran on:
	 * the calibration's sessions of that fabric price it
	 */
	if (!strcmp(m->source, "gpu_run")) {
		snprintf(e->launch_kernels, sizeof e->launch_kernels, "testbed");
		snprintf(e->launch_attention, sizeof e->launch_attention, "%s",
			 !strcmp(m->attention_used, "cudnn") ? "cudnn" : "testbed");
		snprintf(e->calibration_fabric, sizeof e->calibration_fabric, "%s",
			 m->fabric.emulated ? "emulated" : "real");
	}
	report_policy_line(e, c->policy, sizeof c->policy);
	config_each(e, key_attr, &k);
	config_each(e, policy_attr, &pk);
	/* one configuration on a real and on an emulated fabric is two machines, each with its own prediction */
	if (k.n < k.len)
		k.n += snprintf(c->group + k.n, (size_t)(k.len - k.n), "hardware=%s;fabric=%s", m->hardware,
				m->fabric.staged ? "staged" : m->fabric.emulated ? "emulated" : "real");
	if (k.n >= k.len || pk.n >= pk.len) {
		snprintf(err, errlen, "its configuration (%d characters of model, cluster and batch keys, %d of policy keys) "
			 "is longer than the comparison groups runs by (%d, %d)", k.n, pk.n, k.len - 1, pk.len - 1);
		return -1;
	}
	c->s = schedule_new(e, err, errlen);
	if (!c->s)
		return -1;
	if (fabric_record_check(&m->fabric, c->s, err, errlen) != 0) /* an emulated fabric ./sim does not price */
		return -1;
	if (c->s->nops != m->nops) {
		snprintf(err, errlen, "the run has %d ops, its schedule today %d: it was measured with another schedule",
			 m->nops, c->s->nops);
		return -1;
	}
	for (int i = 0; i < m->nops; i++)
		if (c->s->ops[i].kind != m->kinds[i] || c->s->ops[i].stream != m->streams[i]) {
			snprintf(err, errlen, "op %d is a %s on %s in the run, a %s on %s in its schedule today", i,
				 op_kind_name((enum op_kind)m->kinds[i]), stream_name((enum stream_id)m->streams[i]),
				 op_kind_name(c->s->ops[i].kind), stream_name(c->s->ops[i].stream));
			return -1;
		}
	if (engine_run(c->s, 1, &c->r, err, errlen) != 0)
		return -1;
	calibration_age(c);
	c->have = 1;
	report_summarize(c->s, &c->r, &c->pred);
	c->step_err = rel(c->pred.step_time_s, m->sum.step_time_s);
	c->alloc_err = rel((double)c->pred.peak_alloc_bytes, (double)m->sum.peak_alloc_bytes);
	c->reserved_err = rel((double)c->pred.peak_reserved_bytes, (double)m->sum.peak_reserved_bytes);
	c->within_noise = m->sum.steps > 1 && c->pred.step_time_s >= m->sum.step_time_p10_s &&
			  c->pred.step_time_s <= m->sum.step_time_p90_s; /* one figure has no noise to be inside */
	tally(c);
	gpu_idle(c);
	if (c->timed)
		tally_beside(c);
	if (!c->timed && c->kernel_timed && class_predict(c, err, errlen) != 0)
		return -1;
	if (!c->alloc_measured)
		c->alloc_err = NAN;
	if (!c->reserved_measured)
		c->reserved_err = NAN;
	c->rank_wait_s = rank_wait(c->s, m);
	if (m->nalloc_trace && m->exp.runtime.caching_allocator) {
		struct alloc_cfg cfg;
		char why[200];
		memory_alloc_cfg(&m->exp, &cfg);
		if (alloc_replay(&cfg, m->alloc_trace, (size_t)m->nalloc_trace, &c->rep, why, sizeof why) != 0) {
			snprintf(err, errlen, "its alloc_trace: %s", why);
			return -1;
		}
		c->replayed = 1;
	}
	return 0;
}

/*
 * A configuration's measured step time against its prediction: one
 * compared run, or (configurations()) the runs of one configuration
 * measured more than once, at the median of their medians.
 */
struct point {
	const char *group, *policy_key; /* the ranking's group; the policy */
	double meas, pred, lo, hi;      /* lo, hi: the runs' smallest and largest median step */
	int runs;
};

/* The compared runs, one point each; how many. */
static int run_points(const struct cmp *c, int n, struct point *out)
{
	int np = 0;

	for (int i = 0; i < n; i++)
		if (c[i].have) {
			double t = c[i].m->sum.step_time_s;
			out[np++] = (struct point){ c[i].group, c[i].policy_key, t, c[i].pred.step_time_s, t, t, 1 };
		}
	return np;
}

/*
 * The configurations of the points (the same policy in the same group:
 * model, cluster, batch, hardware and fabric), each measured at the median of its
 * runs' median steps (a run's repeats, in make validate's rounds, sample
 * the machine at different moments); how many.
 */
static int configurations(const struct point *p, int n, struct point *out)
{
	int *seen = xcalloc((size_t)n + 1, sizeof(int)), np = 0;
	double *v = xcalloc((size_t)n + 1, sizeof(double));

	for (int i = 0; i < n; i++) {
		struct point x = p[i];
		size_t k = 0;
		if (seen[i])
			continue;
		for (int j = i; j < n; j++)
			if (j == i || (!seen[j] && !strcmp(x.group, p[j].group) && !strcmp(x.policy_key, p[j].policy_key))) {
				seen[j] = 1;
				v[k++] = p[j].meas;
				x.lo = fmin(x.lo, p[j].meas);
				x.hi = fmax(x.hi, p[j].meas);
			}
		gsl_sort(v, 1, k);
		x.meas = gsl_stats_median_from_sorted_data(v, 1, k);
		x.runs = (int)k;
		out[np++] = x;
	}
	free(seen);
	free(v);
	return np;
}

/* The median and the largest of v[0..n), sorting it (NAN for none). */
static void median_worst(double *v, size_t n, double *median, double *worst)
{
	*median = *worst = NAN;
	if (n) {
		gsl_sort(v, 1, n);
		*median = gsl_stats_median_from_sorted_data(v, 1, n);
		*worst = v[n - 1];
	}
}

/* The median and worst absolute step-time error of the points. */
static void point_errors(const struct point *p, int n, double *median, double *worst)
{
	double *v = xcalloc((size_t)n + 1, sizeof(double));

	for (int i = 0; i < n; i++)
		v[i] = fabs(rel(p[i].pred, p[i].meas));
	median_worst(v, (size_t)n, median, worst);
	free(v);
}

/*
 * Kendall's tau-a between the measured and the predicted order by step
 * time, over the pairs of points in the same group (same model, cluster,
 * batch, hardware and fabric) with different policies; with `separated`, only the
 * pairs of configurations measured more than once whose runs the
 * machine's noise never mixed up (every run of one faster than every run
 * of the other: the pairs whose measured order is not chance). GSL has
 * Spearman's rho but not Kendall's tau, so the pairs are counted here.
 * NAN with no pair.
 */
static double kendall_tau(const struct point *p, int n, int separated, int *pairs)
{
	long conc = 0, disc = 0, np = 0;

	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++) {
			double dm, dp;
			if (strcmp(p[i].group, p[j].group) || !strcmp(p[i].policy_key, p[j].policy_key))
				continue; /* another group, or the same policy measured again */
			if (separated && (p[i].runs < 2 || p[j].runs < 2 || (p[i].hi >= p[j].lo && p[j].hi >= p[i].lo)))
				continue; /* their runs overlap: the machine cannot tell which is faster */
			dm = p[i].meas - p[j].meas;
			dp = p[i].pred - p[j].pred;
			np++;
			if (dm * dp > 0)
				conc++;
			else if (dm * dp < 0)
				disc++;
		}
	*pairs = (int)np;
	return np ? (double)(conc - disc) / (double)np : NAN;
}

/*
 * Whether two calibration names name one calibration: the same text, or
 * FILE@NNNNNN with one session of one file however its path is spelled
 * ("data/x.h5", "./data/x.h5", "/abs/data/x.h5"), the files compared as
 * realpath() has them (a file no longer there: the text alone).
 */
static int same_calibration(const char *a, const char *b)
{
	char fa[CONFIG_PATH_MAX], fb[CONFIG_PATH_MAX], ua[CAL_SESSION_LEN], ub[CAL_SESSION_LEN];
	char ra[PATH_MAX], rb[PATH_MAX];

	if (!strcmp(a, b))
		return 1;
	if (calibration_file(a, fa, sizeof fa, ua) < 0 || calibration_file(b, fb, sizeof fb, ub) < 0 || strcmp(ua, ub))
		return 0;
	return realpath(fa, ra) && realpath(fb, rb) && !strcmp(ra, rb);
}

/* Whether all[0..n) holds this prediction: a simulated run of measured run `compares`, its calibration and figures. */
static int prediction_there(const char *compares, const char *calibration, const struct summary *pred,
			    const struct run_read *all, int n)
{
	for (int i = 0; i < n; i++) {
		const struct run_read *p = &all[i];
		if (strcmp(p->source, "sim") || strcmp(p->compares, compares) || p->error[0])
			continue;
		if (p->sum.step_time_s == pred->step_time_s && p->sum.peak_reserved_bytes == pred->peak_reserved_bytes &&
		    same_calibration(p->exp.calibration, calibration))
			return 1;
	}
	return 0;
}

/* results_there_fn of the predictions appended: found again in the file as another ./sim --compare left it. */
static int appended_there(void *ctx, const struct run_result *r, const struct run_read *all, int n)
{
	(void)ctx;
	return prediction_there(r->compares, r->exp->calibration, &r->sum, all, n);
}

static void print_ms_row(FILE *out, const char *what, double meas, double pred, int n)
{
	double e = rel(pred, meas);

	if (isfinite(e))
		fprintf(out, "    %-22s %4d %11.3f %11.3f %+8.1f%%\n", what, n, meas * 1e3, pred * 1e3, 100 * e);
	else /* nothing measured to be off from */
		fprintf(out, "    %-22s %4d %11.3f %11.3f %9s\n", what, n, meas * 1e3, pred * 1e3, "n/a");
}

/* The op kinds, heaviest absolute difference first. */
static void kinds_by_error(const struct cmp *c, int *order, int *n)
{
	*n = 0;
	for (int k = 0; k < OP_KIND_COUNT; k++)
		if (c->kind_n[k])
			order[(*n)++] = k;
	for (int i = 1; i < *n; i++)
		for (int j = i; j > 0; j--) {
			double a = fabs(c->kind_pred[order[j]] - c->kind_meas[order[j]]);
			double b = fabs(c->kind_pred[order[j - 1]] - c->kind_meas[order[j - 1]]);
			if (a <= b)
				break;
			int t = order[j];
			order[j] = order[j - 1];
			order[j - 1] = t;
		}
}

static void print_text(FILE *out, const struct cmp *c)
{
	const struct run_read *m = c->m;
	const struct summary *p = &c->pred;
	int order[OP_KIND_COUNT], nk;
	char b1[32], b2[32], b3[32], b4[32], spread[96];

	fprintf(out, "run %s  %s  (%s, runtime %s, %s)\n", m->name, c->policy, m->source,
		runtime_names[m->exp.policy.runtime], m->hardware[0] ? m->hardware : "?");
	fprintf(out, "  calibration %s", c->calibration[0] ? c->calibration : "none (catalog constants)");
	if (isfinite(c->cal_before_s) && fabs(c->cal_before_s) < 3600)
		fprintf(out, " (measured %s, %.0f min %s the run)", c->cal_date, fabs(c->cal_before_s) / 60,
			c->cal_before_s >= 0 ? "before" : "after");
	else if (isfinite(c->cal_before_s))
		fprintf(out, " (measured %s, %.1f h %s the run)", c->cal_date, fabs(c->cal_before_s) / 3600,
			c->cal_before_s >= 0 ? "before" : "after");
	else if (c->cal_date[0])
		fprintf(out, " (measured %s)", c->cal_date);
	fputc('\n', out);
	if (c->cal_same_binary == 0)
		fprintf(out, "  calibration measured by another build of gpu_run than the run's (binary %s; the run's %s): "
			     "its kernels may run at another speed\n", c->cal_binary, m->binary);
	if (m->collectives_check[0])
		fprintf(out, "  collectives %s\n", m->collectives_check);
	if (m->sum.steps > 1)
		snprintf(spread, sizeof spread, "%d steps, p10-p90 %.3f-%.3f", m->sum.steps, m->sum.step_time_p10_s * 1e3,
			 m->sum.step_time_p90_s * 1e3);
	else
		snprintf(spread, sizeof spread, "one figure, no spread");
	fprintf(out, "  step        measured %.3f ms (%s)  predicted %.3f ms  error %+.1f%%%s\n", m->sum.step_time_s * 1e3,
		spread, p->step_time_s * 1e3, 100 * c->step_err, c->within_noise ? "  (inside the run's noise)" : "");
	if (c->timed) {
		fprintf(out, "  compute     measured %.3f ms  predicted %.3f ms  error %+.1f%%\n", m->sum.compute_s * 1e3,
			p->compute_s * 1e3, 100 * rel(p->compute_s, m->sum.compute_s));
		fprintf(out, "  exposed comm measured %.3f ms  predicted %.3f ms\n", m->sum.exposed_comm_s * 1e3,
			p->exposed_comm_s * 1e3);
	} else {
		fprintf(out, "  compute     not measured (no op times)  predicted %.3f ms\n", p->compute_s * 1e3);
		fprintf(out, "  exposed comm not measured  predicted %.3f ms\n", p->exposed_comm_s * 1e3);
	}
	if (m->sum.profile_span_s > 0)
		fprintf(out, "  GPU idle    measured %.3f ms of the profiled step's %.3f ms (no kernel running)  predicted "
			     "%.3f ms of %.3f ms (no op running)\n",
			(m->sum.profile_span_s - m->sum.profile_busy_s) * 1e3, m->sum.profile_span_s * 1e3,
			(c->gpu_span_s - c->gpu_busy_s) * 1e3, c->gpu_span_s * 1e3);
	if (m->nranks > 1)
		fprintf(out, "  rank skew   %.3f ms: the collectives' first rank waiting for their last, summed "
			     "(%d ranks measured; the model's ranks run alike)\n", c->rank_wait_s * 1e3, m->nranks);
	if (c->alloc_measured)
		fprintf(out, "  peak alloc  measured %s  predicted %s  error %+.2f%%\n",
			report_bytes(m->sum.peak_alloc_bytes, b1, sizeof b1),
			report_bytes(p->peak_alloc_bytes, b2, sizeof b2), 100 * c->alloc_err);
	else
		fprintf(out, "  peak alloc  not measured  predicted %s\n", report_bytes(p->peak_alloc_bytes, b2, sizeof b2));
	if (c->reserved_measured)
		fprintf(out, "  peak reserved measured %s  predicted %s  error %+.2f%%\n",
			report_bytes(m->sum.peak_reserved_bytes, b1, sizeof b1),
			report_bytes(p->peak_reserved_bytes, b2, sizeof b2), 100 * c->reserved_err);
	else
		fprintf(out, "  peak reserved not measured  predicted %s\n",
			report_bytes(p->peak_reserved_bytes, b2, sizeof b2));
	if (m->sum.outside_bytes)
		fprintf(out, "  outside the allocator measured %s (the CUDA context, NCCL's buffers), which the "
			     "predicted capacity, the GPU's %s, does not subtract\n",
			report_bytes(m->sum.outside_bytes, b1, sizeof b1), report_bytes(p->gpu_bytes, b2, sizeof b2));
	if (m->sum.has_alloc_retries && (m->sum.alloc_retries || p->alloc_retries || m->sum.alloc_ooms || p->alloc_ooms))
		/* the cache flushed at the GPU's memory (PyTorch's num_alloc_retries, num_ooms), over the run's steps */
		fprintf(out, "  cache flushes measured %d (%d in the last step, %d OOMs)  predicted %d (%d, %d segments "
			     "past the GPU's memory)\n",
			m->sum.alloc_retries, m->sum.alloc_retries_step, m->sum.alloc_ooms, p->alloc_retries,
			p->alloc_retries_step, p->alloc_ooms);
	if (c->replayed) /* the allocator's model on PyTorch's own requests, apart from the schedule's */
		fprintf(out, "  allocator   PyTorch's %d requests (alloc_trace) replayed: peak allocated %s (requested %s), "
			     "reserved %s (traced %s, error %+.2f%%)\n",
			c->rep.requests, report_bytes(c->rep.replayed_alloc, b1, sizeof b1),
			report_bytes(c->rep.traced_alloc, b2, sizeof b2), report_bytes(c->rep.replayed_reserved, b3, sizeof b3),
			report_bytes(c->rep.traced_reserved, b4, sizeof b4),
			100 * rel((double)c->rep.replayed_reserved, (double)c->rep.traced_reserved));
	if (m->nby_step)
		print_by_step(out, c);
	if (m->sum.has_reserved_by_pool) {
		const uint64_t *pred = c->r.peaks.end_by_pool;
		fprintf(out, "    %-28s %11s %11s\n", "reserved at the end, by pool", "measured", "predicted");
		for (int i = 0; i < 2 * ST_COUNT; i++)
			if (m->sum.reserved_by_pool[i] || pred[i]) {
				char name[40];
				snprintf(name, sizeof name, "%s/%s", stream_name((enum stream_id)(i / 2)), i % 2 ? "large" : "small");
				/* a pool with no segment: 0 */
				fprintf(out, "    %-28s %11s %11s\n", name,
					m->sum.reserved_by_pool[i] ? report_bytes(m->sum.reserved_by_pool[i], b1, sizeof b1) : "0",
					pred[i] ? report_bytes(pred[i], b2, sizeof b2) : "0");
			}
		if (m->sum.reserved_other)
			fprintf(out, "    %-28s %11s %11s\n", "streams of no op", report_bytes(m->sum.reserved_other, b1, sizeof b1),
				"-");
	}
	if (!c->timed) {
		if (!c->kernel_timed) {
			fprintf(out, "    per op kind: not measured (no op times, no kernel times)\n");
			return;
		}
		fprintf(out, "    %-22s %4s %11s %11s %9s\n", "work (summed kernels)", "ops", "measured ms",
			"predicted ms", "error");
		for (int w = 0; w < W_COUNT; w++)
			if (c->work_kernels[w] || c->work_ops[w])
				print_ms_row(out, work_name[w], c->work_meas[w], c->work_pred[w], c->work_ops[w]);
		fprintf(out, "    %-30s %7s %11s %11s %9s\n", "compute by class (alone)", "kernels", "measured ms",
			"predicted ms", "error");
		for (int k = 0; k < KC_COUNT; k++) {
			char e[16] = "-"; /* no kernel of the class ran: nothing to be off from */
			if (!c->class_kernels[k] && !(c->class_pred[k] > 0))
				continue;
			if (c->class_meas[k] > 0)
				snprintf(e, sizeof e, "%+.1f%%", 100 * rel(c->class_pred[k], c->class_meas[k]));
			fprintf(out, "    %-30s %7d %11.3f %11.3f %9s\n", kclass_name[k], c->class_kernels[k],
				c->class_meas[k] * 1e3, c->class_pred[k] * 1e3, e);
		}
		return;
	}
	fprintf(out, "    %-22s %4s %11s %11s %9s\n", "op kind (summed time)", "ops", "measured ms", "predicted ms",
		"error");
	kinds_by_error(c, order, &nk);
	for (int i = 0; i < nk; i++)
		print_ms_row(out, op_kind_name((enum op_kind)order[i]), c->kind_meas[order[i]], c->kind_pred[order[i]],
			     c->kind_n[order[i]]);
	fprintf(out, "    %-22s\n", "stream (busy time)");
	for (int st = 0; st < ST_COUNT; st++)
		if (c->stream_n[st])
			print_ms_row(out, stream_name((enum stream_id)st), c->stream_meas[st], c->stream_pred[st],
				     c->stream_n[st]);
	if (c->beside_n[0] + c->beside_n[1]) { /* where contention with communication carries the error */
		fprintf(out, "    %-22s\n", "compute ops (measured)");
		print_ms_row(out, "alone", c->beside_meas[0], c->beside_pred[0], c->beside_n[0]);
		print_ms_row(out, "beside a collective", c->beside_meas[1], c->beside_pred[1], c->beside_n[1]);
	}
}

/* A number, or null where JSON has none (an error against zero). */
static void json_num(FILE *out, double v)
{
	if (isfinite(v))
		fprintf(out, "%.9g", v);
	else
		fputs("null", out);
}

/* , "key": v (null where v is no number) */
static void json_key_num(FILE *out, const char *key, double v)
{
	fprintf(out, ", \"%s\": ", key);
	json_num(out, v);
}

static void print_json_run(FILE *out, const struct cmp *c, int first)
{
	const struct run_read *m = c->m;
	const struct summary *p = &c->pred;
	int sep = 0;

	fprintf(out, "%s\n  {\"run\": ", first ? "" : ",");
	json_str(out, m->name);
	fputs(", \"policy\": ", out);
	json_str(out, c->policy);
	fputs(", \"source\": ", out);
	json_str(out, m->source);
	fputs(", \"hardware\": ", out);
	json_str(out, m->hardware);
	fputs(", \"calibration\": ", out);
	json_str(out, c->calibration);
	fputs(", \"calibration_date\": ", out);
	if (c->cal_date[0])
		json_str(out, c->cal_date);
	else
		fputs("null", out);
	json_key_num(out, "calibration_before_run_s", c->cal_before_s);
	fprintf(out, ", \"calibration_same_binary\": %s",
		c->cal_same_binary < 0 ? "null" : c->cal_same_binary ? "true" : "false");
	fputs(", \"collectives_check\": ", out);
	if (m->collectives_check[0])
		json_str(out, m->collectives_check);
	else
		fputs("null", out);
	json_key_num(out, "measured_step_s", m->sum.step_time_s);
	json_key_num(out, "measured_step_p10_s", m->sum.step_time_p10_s);
	json_key_num(out, "measured_step_p90_s", m->sum.step_time_p90_s);
	fprintf(out, ", \"measured_steps\": %d", m->sum.steps);
	json_key_num(out, "predicted_step_s", p->step_time_s);
	json_key_num(out, "step_err", c->step_err);
	/* what the run did not measure (a PyTorch run: op times; on the CPU, memory) is null */
	fprintf(out, ", \"within_noise\": %s, \"measured_compute_s\": ", c->within_noise ? "true" : "false");
	json_num(out, c->timed ? m->sum.compute_s : NAN);
	json_key_num(out, "predicted_compute_s", p->compute_s);
	json_key_num(out, "measured_exposed_comm_s", c->timed ? m->sum.exposed_comm_s : NAN);
	json_key_num(out, "predicted_exposed_comm_s", p->exposed_comm_s);
	json_key_num(out, "measured_rank_wait_s", c->rank_wait_s);
	/* a PyTorch run's profiled step on a GPU: the time no kernel ran, null where it has none */
	json_key_num(out, "measured_gpu_idle_s",
		     m->sum.profile_span_s > 0 ? m->sum.profile_span_s - m->sum.profile_busy_s : NAN);
	json_key_num(out, "measured_gpu_span_s", m->sum.profile_span_s > 0 ? m->sum.profile_span_s : NAN);
	json_key_num(out, "predicted_gpu_idle_s", c->gpu_span_s - c->gpu_busy_s);
	json_key_num(out, "predicted_gpu_span_s", c->gpu_span_s);
	json_key_num(out, "measured_peak_alloc_bytes", c->alloc_measured ? (double)m->sum.peak_alloc_bytes : NAN);
	fprintf(out, ", \"predicted_peak_alloc_bytes\": %llu, \"peak_alloc_err\": ", (unsigned long long)p->peak_alloc_bytes);
	json_num(out, c->alloc_err);
	fputs(", \"measured_peak_reserved_bytes\": ", out);
	json_num(out, c->reserved_measured ? (double)m->sum.peak_reserved_bytes : NAN);
	fprintf(out, ", \"predicted_peak_reserved_bytes\": %llu, \"peak_reserved_err\": ",
		(unsigned long long)p->peak_reserved_bytes);
	json_num(out, c->reserved_err);
	json_key_num(out, "measured_outside_bytes", m->sum.outside_bytes ? (double)m->sum.outside_bytes : NAN);
	/* the cache's flushes at the GPU's memory over the run's steps, in its last, and its OOMs (segments past it) */
	json_key_num(out, "measured_alloc_retries", m->sum.has_alloc_retries ? m->sum.alloc_retries : NAN);
	json_key_num(out, "measured_alloc_retries_step", m->sum.has_alloc_retries ? m->sum.alloc_retries_step : NAN);
	json_key_num(out, "measured_alloc_ooms", m->sum.has_alloc_retries ? m->sum.alloc_ooms : NAN);
	fprintf(out, ", \"predicted_alloc_retries\": %d, \"predicted_alloc_retries_step\": %d, \"predicted_alloc_ooms\": %d",
		p->alloc_retries, p->alloc_retries_step, p->alloc_ooms);
	if (c->replayed) { /* PyTorch's own requests served by the runtime's allocator (alloc_replay) */
		fprintf(out, ", \"alloc_replay\": {\"requests\": %d, \"unmatched_frees\": %d, \"requested_peak_bytes\": %llu, "
			     "\"replayed_peak_alloc_bytes\": %llu, \"traced_peak_reserved_bytes\": %llu, "
			     "\"replayed_peak_reserved_bytes\": %llu, \"replayed_flushes\": %u",
			c->rep.requests, c->rep.unmatched, (unsigned long long)c->rep.traced_alloc,
			(unsigned long long)c->rep.replayed_alloc, (unsigned long long)c->rep.traced_reserved,
			(unsigned long long)c->rep.replayed_reserved, c->rep.retries);
		json_key_num(out, "reserved_err", rel((double)c->rep.replayed_reserved, (double)c->rep.traced_reserved));
		fputc('}', out);
	}
	if (m->nby_step) { /* memory after the build and each warm-up step */
		fputs(", \"memory_by_step\": [", out);
		for (int k = 0; k < m->nby_step && k < MEM_AFTER_MAX; k++) {
			const struct mem_peaks *pk = &c->r.peaks;
			fprintf(out, "%s{\"after_step\": %d, \"measured_alloc_bytes\": %llu, \"measured_reserved_bytes\": %llu, "
				     "\"predicted_alloc_bytes\": ", k ? ", " : "", k, (unsigned long long)m->by_step[k].alloc,
				(unsigned long long)m->by_step[k].reserved);
			if (k < pk->nafter) /* bytes as integers: a double's 9 digits would round them */
				fprintf(out, "%llu, \"predicted_reserved_bytes\": %llu}", (unsigned long long)pk->after[k].alloc,
					(unsigned long long)pk->after[k].reserved);
			else
				fputs("null, \"predicted_reserved_bytes\": null}", out);
		}
		fputs("], \"build\": ", out); /* where the model was made: device, meta, or null (not recorded) */
		fprintf(out, m->build[0] ? "\"%s\"" : "null", m->build);
	}
	if (m->sum.has_reserved_by_pool) { /* the segments at the run's end, by stream and pool */
		int n = 0;
		fputs(", \"reserved_by_pool\": {", out);
		for (int i = 0; i < 2 * ST_COUNT; i++)
			if (m->sum.reserved_by_pool[i] || c->r.peaks.end_by_pool[i])
				fprintf(out, "%s\"%s/%s\": {\"measured_bytes\": %llu, \"predicted_bytes\": %llu}", n++ ? ", " : "",
					stream_name((enum stream_id)(i / 2)), i % 2 ? "large" : "small",
					(unsigned long long)m->sum.reserved_by_pool[i],
					(unsigned long long)c->r.peaks.end_by_pool[i]);
		fprintf(out, "}, \"measured_reserved_other_bytes\": %llu", (unsigned long long)m->sum.reserved_other);
	}
	fprintf(out, ", \"memory_measured\": %s, \"op_times_measured\": %s", c->mem_measured ? "true" : "false",
		c->timed ? "true" : "false");
	if (!c->timed) {
		/* per kind of work, from the kernels (null where there are none); no per-stream times */
		fputs(", \"by_kind\": {", out);
		for (int w = 0; w < W_COUNT; w++) {
			if (!c->work_kernels[w] && !c->work_ops[w])
				continue;
			fprintf(out, "%s\"%s\": {\"ops\": %d, \"kernels\": %d, \"measured_s\": ", sep++ ? ", " : "",
				work_name[w], c->work_ops[w], c->work_kernels[w]);
			json_num(out, c->kernel_timed ? c->work_meas[w] : NAN);
			json_key_num(out, "predicted_s", c->work_pred[w]);
			json_key_num(out, "err", c->kernel_timed ? rel(c->work_pred[w], c->work_meas[w]) : NAN);
			fputc('}', out);
		}
		fputs("}, \"compute_by_class\": {", out);
		for (int k = 0, n = 0; k < KC_COUNT && c->kernel_timed; k++) {
			if (!c->class_kernels[k] && !(c->class_pred[k] > 0))
				continue;
			fprintf(out, "%s\"%s\": {\"kernels\": %d", n++ ? ", " : "", kclass_name[k], c->class_kernels[k]);
			json_key_num(out, "measured_s", c->class_meas[k]);
			json_key_num(out, "predicted_s", c->class_pred[k]);
			json_key_num(out, "err", c->class_meas[k] > 0 ? rel(c->class_pred[k], c->class_meas[k]) : NAN);
			fputc('}', out);
		}
		fputs("}, \"by_stream\": {}}", out);
		return;
	}
	fputs(", \"by_kind\": {", out);
	for (int k = 0; k < OP_KIND_COUNT; k++) {
		if (!c->kind_n[k])
			continue;
		fprintf(out, "%s\"%s\": {\"ops\": %d", sep++ ? ", " : "", op_kind_name((enum op_kind)k), c->kind_n[k]);
		json_key_num(out, "measured_s", c->kind_meas[k]);
		json_key_num(out, "predicted_s", c->kind_pred[k]);
		json_key_num(out, "err", rel(c->kind_pred[k], c->kind_meas[k]));
		fputc('}', out);
	}
	fputs("}, \"by_stream\": {", out);
	sep = 0;
	for (int st = 0; st < ST_COUNT; st++) {
		if (!c->stream_n[st])
			continue;
		fprintf(out, "%s\"%s\": {\"ops\": %d", sep++ ? ", " : "", stream_name((enum stream_id)st),
			c->stream_n[st]);
		json_key_num(out, "measured_s", c->stream_meas[st]);
		json_key_num(out, "predicted_s", c->stream_pred[st]);
		json_key_num(out, "err", rel(c->stream_pred[st], c->stream_meas[st]));
		fputc('}', out);
	}
	/* the compute stream's ops apart by whether a collective ran beside them, as measured */
	fputs("}, \"compute_ops\": {", out);
	for (int k = 0; k < 2; k++) {
		fprintf(out, "%s\"%s\": {\"ops\": %d", k ? ", " : "", k ? "beside_collective" : "alone", c->beside_n[k]);
		json_key_num(out, "measured_s", c->beside_meas[k]);
		json_key_num(out, "predicted_s", c->beside_pred[k]);
		json_key_num(out, "err", c->beside_n[k] ? rel(c->beside_pred[k], c->beside_meas[k]) : NAN);
		fputc('}', out);
	}
	fputs("}}", out);
}

/*
 * The machine's own run-to-run noise: over the configurations measured
 * more than once, the spread of their median steps, (largest - smallest)
 * / smallest. Fills the median and the worst spread; returns how many
 * configurations were repeated.
 */
static int repeat_spread(const struct point *cf, int n, double *median, double *worst)
{
	double *v = xcalloc((size_t)n + 1, sizeof(double));
	int nv = 0;

	for (int i = 0; i < n; i++)
		if (cf[i].runs > 1 && cf[i].lo > 0)
			v[nv++] = (cf[i].hi - cf[i].lo) / cf[i].lo;
	median_worst(v, (size_t)nv, median, worst);
	free(v);
	return nv;
}

int compare_file(const char *path, const char *calibration, int catalog_now, int json, FILE *out)
{
	struct run_read *runs;
	struct cmp *c;
	struct run_result *app;
	struct point *pts, *cfs;
	double median, worst, tau, rep_median, rep_worst, cf_median, cf_worst, cf_tau, sep_tau;
	int n, nc = 0, ok = 0, napp = 0, pairs, rc = 0, first = 1, within = 0, repeated, npts, ncf, cf_pairs, sep_pairs;
	char why[512];

	/* the calibration given prices every run: a bad one is the input's fault, said once */
	if (calibration_named(calibration) && calibration_check(calibration, why, sizeof why) != 0) {
		text_line(stderr, "--calibration: %s", why);
		return 2;
	}
	if (results_read(path, &runs, &n) != 0)
		return 2;
	for (int i = 0; i < n; i++)
		nc += strcmp(runs[i].source, "sim") != 0;
	if (!nc) {
		text_line(stderr, "sim --compare: %s holds no measured run%s: nothing to compare (measured runs come "
				"from gpu_run --out and experiments/pytorch)", path, n ? ", only ./sim's own" : "");
		results_read_free(runs, n);
		return 2;
	}
	nc = 0;
	c = xcalloc((size_t)n + 1, sizeof(*c));
	app = xcalloc((size_t)n + 1, sizeof(*app));
	if (json)
		fputs("{\"file\": ", out), json_str(out, path), fputs(", \"runs\": [", out);
	for (int i = 0; i < n; i++) {
		char err[512];
		struct cmp *x;

		if (!strcmp(runs[i].source, "sim"))
			continue;
		x = &c[nc++];
		x->m = &runs[i];
		if (predict(x, calibration, catalog_now, err, sizeof err) != 0) {
			text_line(stderr, "sim --compare: %s: run %s: %s", path, runs[i].name, err);
			rc = 1;
			continue;
		}
		ok++;
		within += x->within_noise;
		if (json) {
			print_json_run(out, x, first);
			first = 0;
		} else {
			print_text(out, x);
		}
		if (!prediction_there(runs[i].name, x->calibration, &x->pred, runs, n)) {
			struct run_result *a = &app[napp++];
			a->source = "sim";
			a->hardware = runs[i].hardware[0] ? runs[i].hardware : NULL;
			a->compares = runs[i].name;
			a->exp = &runs[i].exp;
			a->sched = x->s;
			a->ops = x->r.ops;
			a->nmem = x->r.nmem;
			a->mem = x->r.mem;
			a->sum = x->pred;
		}
	}
	pts = xcalloc((size_t)nc + 1, sizeof(*pts));
	cfs = xcalloc((size_t)nc + 1, sizeof(*cfs));
	npts = run_points(c, nc, pts);
	ncf = configurations(pts, npts, cfs);
	point_errors(pts, npts, &median, &worst);
	point_errors(cfs, ncf, &cf_median, &cf_worst);
	tau = kendall_tau(pts, npts, 0, &pairs);
	cf_tau = kendall_tau(cfs, ncf, 0, &cf_pairs);
	sep_tau = kendall_tau(cfs, ncf, 1, &sep_pairs);
	repeated = repeat_spread(cfs, ncf, &rep_median, &rep_worst);
	if (napp) {
		int put = napp;
		if (results_append_runs(path, app, napp, n, appended_there, NULL, &put) != 0) {
			text_line(stderr, "sim --compare: %s: the predictions were not appended (the file is as it was)", path);
			rc = 1;
		}
		napp = put; /* what the file holds now of this comparison: none after a failed write */
	}
	if (json) {
		fprintf(out, "%s], \"compared\": %d, \"failed\": %d, \"within_noise\": %d", first ? "" : "\n", ok, nc - ok,
			within);
		json_key_num(out, "median_abs_step_err", median);
		json_key_num(out, "worst_abs_step_err", worst);
		fprintf(out, ", \"ranked_pairs\": %d", pairs);
		json_key_num(out, "kendall_tau", tau);
		fprintf(out, ", \"repeated_configs\": %d", repeated);
		json_key_num(out, "repeat_spread_median", rep_median);
		json_key_num(out, "repeat_spread_worst", rep_worst);
		fprintf(out, ", \"configurations\": %d", ncf);
		json_key_num(out, "config_median_abs_step_err", cf_median);
		json_key_num(out, "config_worst_abs_step_err", cf_worst);
		fprintf(out, ", \"config_ranked_pairs\": %d", cf_pairs);
		json_key_num(out, "config_kendall_tau", cf_tau);
		fprintf(out, ", \"separated_pairs\": %d", sep_pairs);
		json_key_num(out, "separated_kendall_tau", sep_tau);
		fprintf(out, ", \"appended\": %d}\n", napp);
	} else {
		fprintf(out, "%d measured run%s compared", ok, ok == 1 ? "" : "s");
		if (nc > ok)
			fprintf(out, ", %d could not be", nc - ok);
		if (ok)
			fprintf(out, ": step-time error median %.1f%%, worst %.1f%%; %d inside their run's noise", 100 * median,
				100 * worst, within);
		fputc('\n', out);
		if (repeated)
			fprintf(out, "the machine's own noise: %d configuration%s measured more than once, their median "
				     "steps apart by %.1f%% (median), %.1f%% (worst)\n",
				repeated, repeated == 1 ? "" : "s", 100 * rep_median, 100 * rep_worst);
		if (pairs)
			fprintf(out, "policy ranking by step time: Kendall's tau %.3f over %d pairs of runs that differ "
				     "only in policy%s\n",
				tau, pairs, tau == 1 ? " (the same order)" : "");
		if (repeated) {
			fprintf(out, "per configuration, at the median of its runs (%d configurations, %d measured more "
				     "than once): step-time error median %.1f%%, worst %.1f%%",
				ncf, repeated, 100 * cf_median, 100 * cf_worst);
			if (cf_pairs)
				fprintf(out, "; Kendall's tau %.3f over %d pairs", cf_tau, cf_pairs);
			fputc('\n', out);
			if (sep_pairs)
				fprintf(out, "policy ranking where the machine's noise separates the configurations (every "
					     "run of one faster than every run of the other): Kendall's tau %.3f over %d pairs\n",
					sep_tau, sep_pairs);
			else if (cf_pairs)
				fputs("policy ranking where the machine's noise separates the configurations: no such pair "
				      "(the runs of every two overlap)\n", out);
		}
		fprintf(out, "%d prediction%s appended to %s", napp, napp == 1 ? "" : "s", path);
		if (ok > napp)
			fprintf(out, " (%d already there)", ok - napp);
		fputc('\n', out);
	}
	for (int i = 0; i < nc; i++) {
		if (c[i].have)
			sim_result_release(&c[i].r);
		if (c[i].s)
			schedule_free(c[i].s);
	}
	free(c);
	free(app);
	free(pts);
	free(cfs);
	results_read_free(runs, n);
	return rc;
}
