/*
 * cost.c - kernel, collective and copy costs (see cost.h).
 */
#include "cost.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fabric.h"
#include "recipe.h"
#include "xalloc.h"

#define MEMO_CAP 4096 /* a step has a handful of kernel lists and SM counts */

/* The calibration last read (by path, world size and fabric): a --policy all reads it once. */
static struct calibration cached;
static char cached_path[CONFIG_PATH_MAX], cached_fabric[16];
static int cached_ranks = -1;

static void release_cached(void)
{
	calibration_release(&cached);
}

static const struct calibration *calibration_of(const char *path, int ranks, const char *fabric, char *err,
						 int errlen)
{
	if (cached_ranks == ranks && !strcmp(cached_path, path) && !strcmp(cached_fabric, fabric))
		return &cached;
	if (cached_ranks < 0)
		atexit(release_cached);
	calibration_release(&cached);
	cached_ranks = -2;
	if (calibration_read_on(path, ranks, fabric, &cached, err, errlen) != 0)
		return NULL;
	snprintf(cached_path, sizeof cached_path, "%s", path);
	snprintf(cached_fabric, sizeof cached_fabric, "%s", fabric);
	cached_ranks = ranks;
	return &cached;
}

/*
 * Whether cal measured every collective of s (a kind over a group size):
 * one it lacks would cost nothing. 0, or -1 with a message in err.
 */
static int calibration_covers(const struct calibration *cal, const struct schedule *s, char *err, int errlen)
{
	uint8_t seen[OP_KIND_COUNT][256] = { { 0 } }; /* by kind and group (uint8_t) */

	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		int n;
		if (!op_is_collective(o->kind) || seen[o->kind][o->group])
			continue;
		seen[o->kind][o->group] = 1;
		n = schedule_group_size(s, o->group);
		if (n > 1 && !calibration_has_collective(cal, o->kind, n)) {
			snprintf(err, (size_t)errlen, "%s: no %s over %d ranks measured (sessions of %d ranks, newest "
				 "/calibration/%s); calibrate on this cluster with gpu_run --calibrate", cal->path,
				 op_kind_name(o->kind), n, cal->ranks, cal->session);
			return -1;
		}
	}
	return 0;
}

/*
 * The rate each access pattern's kernels reached in the calibration: over
 * the schedule's memory-bound kernels of that pattern measured under their
 * names (each name once), their bytes over their time.
 */
static void cal_access_rates(struct cost *c, const struct schedule *s)
{
	double bytes[MA_COUNT] = { 0 }, ns[MA_COUNT] = { 0 };

	for (int i = 0; i < s->nkernels; i++) {
		const struct kernel *k = &s->kernels[i];
		uint64_t b;
		double t;
		int seen = 0;

		if (k->kind != K_ELEMENTWISE || k->access == MA_STREAM)
			continue;
		for (int j = 0; j < i && !seen; j++)
			seen = !strcmp(s->kernels[j].name, k->name);
		if (!seen && calibration_kernel_named(c->cal, k->name, &b, &t) == 0) {
			bytes[k->access] += (double)b;
			ns[k->access] += t;
		}
	}
	for (int a = 0; a < MA_COUNT; a++)
		c->cal_access_rate[a] = ns[a] > 0 ? bytes[a] / ns[a] : 0;
}

int cost_init(struct cost *c, const struct schedule *s, char *err, int errlen)
{
	const struct experiment *e = s->exp;
	const struct gpu_spec *g = &e->cluster.gpu;

	memset(c, 0, sizeof(*c));
	if (e->calibration[0]) {
		c->cal = calibration_of(e->calibration, s->world, e->calibration_fabric, err, errlen);
		if (!c->cal || calibration_covers(c->cal, s, err, errlen) != 0)
			return -1;
		for (int k = 0; k < CAL_BESIDE_COUNT; k++) {
			c->cal_op_ns[k] = xmalloc(sizeof(double) * (size_t)(s->nops + 1));
			for (int i = 0; i < s->nops; i++)
				c->cal_op_ns[k][i] = -1;
		}
		cal_access_rates(c, s);
	}
	c->s = s;
	c->gpu = g;
	/* 10^12 FLOP/s = 10^3 FLOP/ns; 1 GB/s = 1 byte/ns */
	c->peak_flops_per_ns = 1e-9 * s->peak_flops * hw_clock_factor(g);
	c->hbm_bytes_per_ns = g->hbm_gbps * g->hbm_eff;
	c->attention = s->attention;
	{
		static const struct runtime_spec streams; /* every rate 0 */
		c->rates = !e->launch_kernels[0] || !strcmp(e->launch_kernels, e->runtime.kernels) ? &e->runtime
												  : &streams;
	}
	c->link_bytes_per_ns[LINK_INTRA] = e->cluster.intra_gbps;
	/* the node's NICs: what a ring spanning nodes crosses them with; a rail's ring is capped at its share */
	c->link_bytes_per_ns[LINK_INTER] = e->cluster.node_inter_gbps;
	c->link_bytes_per_ns[LINK_PCIE_H2D] = g->pcie_gbps;
	c->link_bytes_per_ns[LINK_PCIE_D2H] = g->pcie_gbps;
	c->memo_cap = MEMO_CAP;
	c->memo = xmalloc(sizeof(*c->memo) * c->memo_cap);
	for (int i = 0; i < c->memo_cap; i++)
		c->memo[i].ktab = -1;
	return 0;
}

void cost_release(struct cost *c)
{
	free(c->memo);
	c->memo = NULL;
	for (int k = 0; k < CAL_BESIDE_COUNT; k++) {
		free(c->cal_op_ns[k]);
		c->cal_op_ns[k] = NULL;
	}
}

static int64_t ceil_div(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

/*
 * Output tiles the library chooses among: CUTLASS's tile shapes for the
 * GPU's tensor cores (its profiler's default configurations for sm80 and
 * sm90), the largest first. The catalog's gemm_tile_m x gemm_tile_n is the
 * largest the GPU uses; the list keeps the shapes no larger than it.
 */
static const int tile_shapes[][2] = {
	{ 256, 128 }, { 128, 256 }, { 128, 128 }, { 128, 64 }, { 64, 128 }, { 64, 64 },
};

/*
 * A tile's efficiency relative to the largest: its operand reuse, the
 * FLOPs per byte it loads, m n / (m + n), over the largest tile's; a
 * smaller tile loads more bytes per FLOP and keeps the tensor cores less
 * busy. The largest runs at gemm_eff.
 */
static double tile_eff(const struct gpu_spec *g, int tm, int tn)
{
	double ref = (double)g->gemm_tile_m * g->gemm_tile_n / (g->gemm_tile_m + g->gemm_tile_n);
	double r = (double)tm * tn / (tm + tn) / ref;
	return g->gemm_eff * (r < 1 ? r : 1);
}

/*
 * The time of a GEMM with tile tm x tn on `sms` SMs: waves of tiles, each
 * tile a full tile's work (an edge tile overhangs the matrix) at the
 * tile's efficiency. cuBLAS's heuristics pick, per shape, the kernel
 * expected to be fastest (cublasLtMatmulAlgoGetHeuristic); here, the tile
 * that finishes first, ties to the larger.
 */
void cost_gemm(const struct cost *c, const struct kernel *k, int sms, struct gemm_choice *out)
{
	const struct gpu_spec *g = c->gpu;
	double per_sm = c->peak_flops_per_ns / g->sms;
	int any = 0;

	for (size_t i = 0; i < sizeof tile_shapes / sizeof tile_shapes[0]; i++) {
		int tm = tile_shapes[i][0], tn = tile_shapes[i][1];
		int64_t tiles, waves;
		double ns;
		if (tm * tn > g->gemm_tile_m * g->gemm_tile_n || (tm > g->gemm_tile_m && tn > g->gemm_tile_n))
			continue;
		if (tm * tn == g->gemm_tile_m * g->gemm_tile_n && (tm != g->gemm_tile_m || tn != g->gemm_tile_n))
			continue; /* the catalog's orientation of the largest tile, either way round */
		tiles = ceil_div(k->m, tm) * ceil_div(k->n, tn);
		waves = ceil_div(tiles, (int64_t)sms * g->tiles_per_sm);
		ns = (double)waves * 2.0 * tm * tn * (double)k->k * g->tiles_per_sm / (per_sm * tile_eff(g, tm, tn));
		if (!any || ns < out->ns) {
			*out = (struct gemm_choice){ tm, tn, tiles, waves, ns };
			any = 1;
		}
	}
	if (!any) { /* a tile smaller than every listed shape: the catalog's own */
		int tm = g->gemm_tile_m, tn = g->gemm_tile_n;
		int64_t tiles = ceil_div(k->m, tm) * ceil_div(k->n, tn);
		int64_t waves = ceil_div(tiles, (int64_t)sms * g->tiles_per_sm);
		*out = (struct gemm_choice){ tm, tn, tiles, waves,
					     (double)waves * 2.0 * tm * tn * (double)k->k * g->tiles_per_sm /
						     (per_sm * g->gemm_eff) };
	}
}

/*
 * Attention's fraction of peak: its backend's, forward or backward, on the
 * curve T / (T + attn_half_seq) that the published figures follow from
 * short to long sequences.
 */
static double attn_eff(const struct cost *c, const struct kernel *k)
{
	const struct gpu_spec *g = c->gpu;
	double e, T = (double)k->n;

	switch (c->attention) {
	case AK_FLASH:
		e = k->backward ? g->fa2_bwd_eff : g->fa2_fwd_eff;
		break;
	case AK_CUDNN:
		e = k->backward ? g->cudnn_bwd_eff : g->cudnn_fwd_eff;
		break;
	default:
		/* this project's kernel: measured at the catalog's shapes, one figure each way */
		return k->backward ? g->attn_bwd_eff : g->attn_eff;
	}
	return e * T / (T + g->attn_half_seq);
}

double cost_kernel_ns(const struct cost *c, const struct kernel *k, int sms, double hbm)
{
	const struct gpu_spec *g = c->gpu;
	double per_sm = c->peak_flops_per_ns / g->sms, t = 0, tmem;

	assert(sms >= 1);
	switch (k->kind) {
	case K_GEMM: {
		struct gemm_choice ch;
		cost_gemm(c, k, sms, &ch);
		t = ch.ns;
		break;
	}
	case K_ATTN: {
		/* one thread block per (sequence*head, 128 query rows) */
		int64_t blocks = k->m * ceil_div(k->n, 128);
		int64_t waves = ceil_div(blocks, sms);
		t = (double)waves * ((double)k->flops / blocks) / (per_sm * attn_eff(c, k));
		break;
	}
	case K_ELEMENTWISE:
		t = (double)k->bytes / cost_access_bw(c, k->access, sms, hbm);
		break;
	default:
		assert(!"bad kernel kind");
	}
	if (k->kind != K_ELEMENTWISE) {
		tmem = (double)k->bytes / cost_membw(c, sms, hbm);
		if (tmem > t)
			t = tmem;
	}
	return cost_floor_ns(c, t);
}

/*
 * The bandwidth of a memory-bound kernel that moves its bytes by `access`
 * on `sms` SMs, where a stream gets `hbm` of the HBM (the runtime's rates,
 * core/catalog.ini): a fraction of the HBM scales the stream's; a rate per
 * SM caps it, the SMs the kernel has times that rate. No pattern is faster
 * than a stream (a GPU whose hbm_eff is set below a pattern's fraction).
 */
double cost_access_bw(const struct cost *c, enum mem_access access, int sms, double hbm)
{
	const struct runtime_spec *r = c->rates;
	double bw = cost_membw(c, sms, hbm), per_sm = 0;

	switch (access) {
	case MA_NORM:
		return r->norm_eff > 0 && r->norm_eff < c->gpu->hbm_eff ? bw * r->norm_eff / c->gpu->hbm_eff : bw;
	case MA_CAST_UP: per_sm = r->cast_up_sm_gbps; break;
	case MA_GATHER: per_sm = r->gather_sm_gbps; break;
	case MA_BROADCAST: per_sm = r->broadcast_sm_gbps; break;
	case MA_REDUCE: per_sm = r->reduce_sm_gbps; break;
	default: break;
	}
	return per_sm > 0 && per_sm * sms < bw ? per_sm * sms : bw;
}

/* A copy into a wider element type: the narrowest it reads is narrower than the widest it writes. */
static int copy_widens(const struct schedule *s, const struct op *o)
{
	int in = 0, out = 0;

	if (o->kind != OP_COPY_IN && o->kind != OP_COPY_OUT && o->kind != OP_COPY && o->kind != OP_CONCAT)
		return 0;
	for (uint32_t i = 0; i < o->nopd; i++) {
		const struct operand *x = &s->opds[o->opd_first + i];
		int b = elem_bytes((enum elem)s->bufs[x->buf].elem);
		if (x->role & OPD_IN && (!in || b < in))
			in = b;
		if (x->role & OPD_OUT && b > out)
			out = b;
	}
	return in && out > in;
}

double cost_op_memory_ns(const struct cost *c, const struct op *o, int sms, double hbm)
{
	double eff = c->rates->multi_tensor_eff;

	/* a foreach or fused optimizer's multi-tensor kernels at their own fraction of the HBM */
	if (o->kind == OP_OPTIM && c->s->optim != OPT_PER_PARAM && eff > 0 && eff < c->gpu->hbm_eff)
		return cost_memory_ns(c, o->bytes, sms, hbm * eff / c->gpu->hbm_eff);
	/* a copy that widens (FSDP2's bf16 gradients into its fp32 reduce-scatter input, chunk_cat) as a cast up */
	if (copy_widens(c->s, o))
		return cost_floor_ns(c, (double)o->bytes / cost_access_bw(c, MA_CAST_UP, sms, hbm));
	return cost_memory_ns(c, o->bytes, sms, hbm);
}

double cost_ktab_fill(struct cost *c, struct cost_memo *m, int ktab, int sms, double hbm, uint32_t hk)
{
	const struct ktab *t = &c->s->ktabs[ktab];
	double ns = 0;

	for (uint32_t i = 0; i < t->count; i++)
		ns += cost_kernel_ns(c, &c->s->kernels[t->first + i], sms, hbm);
	m->ktab = ktab;
	m->sms = sms;
	m->hbm_key = hk;
	m->ns = ns;
	return ns;
}

void cost_collective(const struct cost *c, const struct op *o, struct coll *out)
{
	const struct schedule *s = c->s;
	int n = schedule_group_size(s, o->group);
	struct fabric_link l;
	struct fabric_coll fc;

	memset(out, 0, sizeof(*out));
	out->n = n;
	if (n <= 1)
		return;
	/* the group's link, latency and algorithm: core/fabric.c, the rule gpu_run's emulated fabric paces */
	fabric_link_of(s, o->group, &l);
	fabric_collective(&l, o->kind, n, o->bytes, &fc);
	out->wire = fc.wire;
	out->latency_ns = fc.latency_ns;
	out->tree = fc.tree;
	out->links = l.only_inter ? 1u << LINK_INTER
				  : l.spans ? (1u << LINK_INTRA) | (1u << LINK_INTER) : 1u << LINK_INTRA;
	/*
	 * across nodes, the ring's share of the node's NICs: a rail's own NIC
	 * share, or its members' share where the node's other groups cross too
	 * (hsdp's replicas of a shard group smaller than a node)
	 */
	if (l.spans)
		out->cap = l.gbps;
}

double cost_host_optim_ns(const struct cost *c, uint64_t params)
{
	/* 10^9 params/s = 1 param/ns */
	return (double)params / c->gpu->cpu_adam_gparams;
}

/* ---- calibrated ------------------------------------------------------------- */

/*
 * A kernel priced by the calibration. One not measured by name: a GEMM or
 * attention kernel smaller than every one measured of its kind is the
 * smallest one's time scaled by what the model says of the two (its tiles
 * and waves; attention's efficiency by sequence length; the floor of a
 * kernel's time), since the table alone would give it the smallest's
 * whole time (an attention measured at sequence 8192 and asked at 512);
 * a memory-bound one at the rate its access pattern's measured kernels
 * reached.
 */
double cost_cal_kernel_ns(const struct cost *c, const struct kernel *k, int beside)
{
	int exact;
	double ns = calibration_kernel_ns(c->cal, k, beside, &exact);
	struct kernel anchor;

	if (exact)
		return ns;
	if (k->kind != K_ELEMENTWISE) { /* a GEMM or attention kernel */
		if (calibration_kernel_anchor(c->cal, k, &anchor))
			ns *= cost_kernel_ns(c, k, c->gpu->sms, c->hbm_bytes_per_ns) /
			      cost_kernel_ns(c, &anchor, c->gpu->sms, c->hbm_bytes_per_ns);
		return ns;
	}
	if (k->access == MA_STREAM || !(c->cal_access_rate[k->access] > 0))
		return ns;
	return (double)k->bytes / c->cal_access_rate[k->access] * calibration_slowdown(c->cal, beside);
}

double cost_cal_op_ns(struct cost *c, int op, int beside)
{
	const struct schedule *s = c->s;
	const struct op *o = &s->ops[op];
	double *memo = &c->cal_op_ns[beside][op], ns = 0;

	if (*memo >= 0)
		return *memo;
	if (o->ktab >= 0) {
		const struct ktab *t = &s->ktabs[o->ktab];
		for (uint32_t i = 0; i < t->count; i++)
			ns += cost_cal_kernel_ns(c, &s->kernels[t->first + i], beside);
	} else if (o->kind == OP_OPTIM) {
		/* the update as measured, the clipping before it as a pass */
		uint64_t clip = schedule_clip_bytes(s, op);
		ns = calibration_adamw_ns(c->cal, s->optim, 0, schedule_optim_elems(s, o)) +
		     (clip ? calibration_pass_ns(c->cal, clip) : 0);
	} else if (o->kind == OP_CPU_OPTIM) {
		ns = calibration_adamw_ns(c->cal, s->optim, 1, schedule_optim_elems(s, o));
	} else if (o->bytes) {
		ns = calibration_op_ns(c->cal, op_kind_name((enum op_kind)o->kind), o->bytes, beside);
	}
	/*
	 * the runtime zero-fills the buffers the op accumulates into before it
	 * runs; not the ones made once, at the run's first step (the lazy
	 * optimizer state): the step priced is a later one
	 */
	for (int i = 0; i < o->nalloc; i++) {
		const struct buffer *b = &s->bufs[s->bufrefs[o->buf_first + i]];
		if (b->zero && !b->once)
			ns += calibration_pass_ns(c->cal, b->bytes);
	}
	return *memo = ns;
}

double cost_cal_collective_ns(const struct cost *c, const struct op *o, int busy)
{
	return calibration_collective_ns(c->cal, o->kind, schedule_group_size(c->s, o->group), o->bytes, busy);
}
