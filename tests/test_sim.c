/*
 * test_sim.c - the simulator: event queue order, kernel and collective
 * costs, determinism, and the policy effects of DOMAIN.md section 2
 * coming out of the mechanisms.
 */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "calibration.h"
#include "config.h"
#include "cost.h"
#include "engine.h"
#include "eq.h"
#include "report.h"
#include "schedule.h"
#include "summary.h"
#include "testutil.h"

static void test_eq_order(void)
{
	struct eq q;
	struct event e;
	uint64_t seq;
	int order[6], n = 0;

	eq_init(&q);
	eq_push(&q, 30, 0);
	eq_push(&q, 10, 1);
	eq_push(&q, 20, 2);
	seq = eq_take_seq(&q); /* an event kept outside the queue, numbered between ops 2 and 3 */
	eq_push(&q, 10, 3); /* same time as op 1: pops after it */
	eq_push(&q, 5, 4);
	eq_push(&q, 20, 5);
	CU_ASSERT_EQUAL(eq_top(&q)->op, 4);
	CU_ASSERT(eq_before(5, seq, eq_top(&q)));  /* at op 4's time, numbered before it: first */
	CU_ASSERT(!eq_before(6, seq, eq_top(&q))); /* later: after */
	CU_ASSERT(!eq_before(5, eq_take_seq(&q), eq_top(&q))); /* numbered after: after */
	while (eq_pop(&q, &e))
		order[n++] = e.op;
	CU_ASSERT_EQUAL(n, 6);
	CU_ASSERT_EQUAL(order[0], 4);
	CU_ASSERT_EQUAL(order[1], 1);
	CU_ASSERT_EQUAL(order[2], 3);
	CU_ASSERT_EQUAL(order[3], 2);
	CU_ASSERT_EQUAL(order[4], 5);
	CU_ASSERT_EQUAL(order[5], 0);
	eq_release(&q);
}

static double last_backward_s; /* the last simulate(): time in backward and recompute ops */

/* Simulate an experiment given as `section.key=value` settings. */
static void simulate(struct summary *sum, ...)
{
	struct experiment e;
	struct schedule *s;
	struct sim_result r;
	va_list ap;

	va_start(ap, sum);
	s = test_schedulev(&e, ap);
	va_end(ap);
	CU_ASSERT_FATAL(engine_run(s, 0, &r, NULL, 0) == 0);
	report_summarize(s, &r, sum);
	last_backward_s = 0;
	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == OP_BACKWARD || s->ops[i].kind == OP_RECOMPUTE)
			last_backward_s += (r.ops[i].end_ns - r.ops[i].start_ns) * 1e-9;
	sim_result_release(&r);
	schedule_free(s);
	config_release(&e);
}

/* An experiment from settings, resolved (config_release it). */
static void set_all(struct experiment *e, const char *const *kv)
{
	config_init(e);
	for (; *kv; kv++)
		CU_ASSERT_FATAL(config_set(e, *kv, "t") == 0);
	CU_ASSERT_FATAL(config_resolve(e) == 0);
}

/*
 * What a step may count: past its ops, FLOPs, a buffer's bytes or the
 * clock, a configuration is refused with the reason, never wrapped (each
 * used to wrap a uint64 or trip an assertion); just inside, it is priced.
 */
/*
 * policy.sdpa: the attention kernel priced at the backend it names, on the
 * curve T / (T + attn_half_seq); the default is the runtime's (pytorch:
 * flash); the testbed refuses it.
 */
static void test_sdpa_backend(void)
{
	const char *names[] = { "runtime", "flash", "cudnn" };
	double fwd[3], bwd[3];
	/*
	 * 33 heads of 8192 tokens, head dim 128 (33 x 64 blocks of 128 rows: 16
	 * full waves on 132 SMs), causal FLOPs as the recipes count them
	 */
	struct kernel f = { "attention", K_ATTN, 33, 8192, 128, 0, 0, 0, MA_STREAM }, b = f;

	f.flops = 33ull * 2 * 8192 * 8192 * 128;
	b.flops = 5 * f.flops / 2;
	b.backward = 1;
	for (int i = 0; i < 3; i++) {
		struct experiment e;
		struct cost c;
		char set[64];
		struct schedule *s;
		snprintf(set, sizeof set, "policy.sdpa=%s", names[i]);
		s = test_schedule(&e, "cluster.gpu=h100-sxm", "policy.runtime=pytorch", set, NULL);
		CU_ASSERT_PTR_NOT_NULL_FATAL(s);
		CU_ASSERT_FATAL(cost_init(&c, s, NULL, 0) == 0);
		fwd[i] = cost_kernel_ns(&c, &f, c.gpu->sms, c.hbm_bytes_per_ns);
		bwd[i] = cost_kernel_ns(&c, &b, c.gpu->sms, c.hbm_bytes_per_ns);
		if (i == 2) { /* cuDNN's fractions of peak, forward and backward */
			double curve = 8192.0 / (8192.0 + c.gpu->attn_half_seq);
			CU_ASSERT_DOUBLE_EQUAL((double)f.flops / fwd[i], c.peak_flops_per_ns * c.gpu->cudnn_fwd_eff * curve,
					       1e-6 * c.peak_flops_per_ns);
			CU_ASSERT_DOUBLE_EQUAL((double)b.flops / bwd[i], c.peak_flops_per_ns * c.gpu->cudnn_bwd_eff * curve,
					       1e-6 * c.peak_flops_per_ns);
		}
		cost_release(&c);
		schedule_free(s);
		config_release(&e);
	}
	CU_ASSERT_DOUBLE_EQUAL(fwd[0], fwd[1], 1e-9); /* pytorch's catalog entry: flash */
	CU_ASSERT_DOUBLE_EQUAL(bwd[0], bwd[1], 1e-9);
	CU_ASSERT(fwd[2] < 0.7 * fwd[1]); /* cuDNN on an H100: 0.6 of peak forward against FlashAttention-2's 0.35 */
	{
		struct experiment e;
		config_init(&e);
		CU_ASSERT_EQUAL(config_set(&e, "policy.sdpa=cudnn", "t"), 0);
		CU_ASSERT_NOT_EQUAL(config_resolve(&e), 0); /* the testbed runs its own attention kernel */
		config_release(&e);
	}
}

static void test_step_limits(void)
{
	static const char *const ops[] = { "model.name=tiny", "model.layers=1000", "policy.microbatches=263", NULL };
	static const char *const ops_ok[] = { "model.name=tiny", "model.layers=1000", "policy.microbatches=262", NULL };
	static const char *const flops[] = { "model.name=llama3-8b", "model.seq=4194304", NULL };
	static const char *const buf[] = { "model.name=llama3-8b", "policy.runtime=pytorch", "run.batch=254", NULL };
	static const char *const buf_ok[] = { "model.name=llama3-8b", "policy.runtime=pytorch", "run.batch=253", NULL };
	/* 405b on a GPU of a gigaflop, a megabyte per second: its step would outrun the clock */
	static const char *const slow[] = { "model.name=llama3-405b", "model.seq=131072", "cluster.gpu=custom",
					    "cluster.sms=1", "cluster.bf16_tflops=0.001", "cluster.fp32_tflops=0.001",
					    "cluster.hbm_gbps=0.001", "cluster.hbm_gib=0.001", "cluster.intra_gbps=0.001",
					    "cluster.nics_per_node=1", "cluster.nic_gbps=0.001", "cluster.pcie_gbps=0.001",
					    "cluster.gemm_tile_m=1", "cluster.gemm_tile_n=1", "cluster.tiles_per_sm=1",
					    "cluster.gemm_eff=0.01", "cluster.attn_eff=0.01", "cluster.fa2_fwd_eff=0.01",
					    "cluster.fa2_bwd_eff=0.01", "cluster.cudnn_fwd_eff=0.01",
					    "cluster.cudnn_bwd_eff=0.01", "cluster.attn_half_seq=0", "cluster.hbm_eff=0.01",
					    "cluster.nccl_sms=1", "cluster.nccl_hbm_factor=0",
					    "cluster.elementwise_sms_frac=0.01", "cluster.cpu_adam_gparams=0.001",
					    "cluster.net_latency_us=0", "cluster.nvlink_latency_us=0",
					    "cluster.kernel_min_us=0", "cluster.tdp_w=100000", "cluster.power_cap_w=100000", NULL };
	const char *const *refused[] = { ops, flops, buf };
	const char *const why[] = { "more than the 262144 a step may have", "more than the 9.22e+18 a step may count",
				    "more than the 1 TiB a buffer may have" };
	const char *const *priced[] = { ops_ok, buf_ok };
	struct experiment e;
	struct schedule *s;
	struct sim_result r;
	char err[256];

	for (int i = 0; i < 3; i++) {
		set_all(&e, refused[i]);
		err[0] = '\0';
		s = schedule_new(&e, err, sizeof err);
		CU_ASSERT_PTR_NULL(s);
		CU_ASSERT_PTR_NOT_NULL(strstr(err, why[i]));
		schedule_free(s);
		config_release(&e);
	}
	for (int i = 0; i < 2; i++) {
		set_all(&e, priced[i]);
		s = schedule_new(&e, err, sizeof err);
		CU_ASSERT_PTR_NOT_NULL_FATAL(s);
		CU_ASSERT_FATAL(engine_run(s, 0, &r, err, sizeof err) == 0);
		CU_ASSERT(r.step_ns > 0);
		sim_result_release(&r);
		schedule_free(s);
		config_release(&e);
	}
	set_all(&e, slow);
	s = schedule_new(&e, err, sizeof err);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	err[0] = '\0';
	CU_ASSERT(engine_run(s, 0, &r, err, sizeof err) != 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "the step would run past 146 years of simulated time"));
	schedule_free(s);
	config_release(&e);
}

/*
 * A memory-bound kernel's rate by how it moves its bytes (enum mem_access):
 * under PyTorch's runtime a norm at norm_eff of the HBM, a gather capped at
 * its rate per SM (times the SMs it has, so that fewer SMs slow it where a
 * stream would not slow), a stream at hbm_eff; under the testbed runtime,
 * whose catalog entry gives no rates, every pattern is a stream, and so
 * under PyTorch's schedule where gpu_run launched its own kernels (a
 * measured run ./sim --compare prices). The optimizer's multi-tensor
 * kernels and a widening copy likewise. No pattern beats a stream: on a
 * GPU whose hbm_eff is set below norm_eff, a norm runs as a stream.
 */
static void test_memory_access_rates(void)
{
	static const char *const runtimes[] = { "pytorch", "testbed", "pytorch", "pytorch" };
	const uint64_t bytes = 1ull << 30;

	for (int r = 0; r < 4; r++) {
		struct experiment e;
		struct schedule *s;
		struct cost c;
		char err[256], set[64];
		struct kernel stream = { "x", K_ELEMENTWISE, 0, 0, 0, 0, bytes, 0, MA_STREAM };
		struct kernel norm = stream, gather = stream, up = stream;
		double hbm, ts, tn, tg, tg_few, tu;
		int pt = r == 0, optim = -1, widen = -1;

		norm.access = MA_NORM;
		gather.access = MA_GATHER;
		up.access = MA_CAST_UP;
		config_init(&e);
		config_set(&e, "cluster.gpu=h100-sxm", "t");
		config_set(&e, "model.name=llama3-8b", "t");
		config_set(&e, "model.layers=2", "t");
		config_set(&e, "policy.precision=mixed", "t");
		snprintf(set, sizeof set, "policy.runtime=%s", runtimes[r]);
		config_set(&e, set, "t");
		CU_ASSERT_FATAL(config_resolve(&e) == 0);
		if (r == 2)
			snprintf(e.launch_kernels, sizeof e.launch_kernels, "testbed");
		if (r == 3)
			e.cluster.gpu.hbm_eff = 0.5;
		s = schedule_new(&e, err, sizeof(err));
		CU_ASSERT_PTR_NOT_NULL_FATAL(s);
		CU_ASSERT_FATAL(cost_init(&c, s, NULL, 0) == 0);
		hbm = c.hbm_bytes_per_ns;
		CU_ASSERT_DOUBLE_EQUAL(hbm, 3350 * (r == 3 ? 0.5 : 0.9), 1e-9);
		ts = cost_kernel_ns(&c, &stream, 132, hbm);
		tn = cost_kernel_ns(&c, &norm, 132, hbm);
		tg = cost_kernel_ns(&c, &gather, 132, hbm);
		tg_few = cost_kernel_ns(&c, &gather, 66, hbm);
		tu = cost_kernel_ns(&c, &up, 132, hbm);
		CU_ASSERT_DOUBLE_EQUAL(ts, bytes / hbm, 1e-6 * ts);
		if (r == 3) {
			CU_ASSERT_DOUBLE_EQUAL(tn, ts, 1e-9 * ts);
			/* 132 x 9.1 GB/s is 1201 GB/s, below the stream's 1675 */
			CU_ASSERT_DOUBLE_EQUAL(tg, bytes / (132 * 9.1), 1e-6 * tg);
		} else if (pt) {
			CU_ASSERT_DOUBLE_EQUAL(tn, bytes / (3350 * 0.62), 1e-6 * tn);
			CU_ASSERT_DOUBLE_EQUAL(tg, bytes / (132 * 9.1), 1e-6 * tg);
			CU_ASSERT_DOUBLE_EQUAL(tg_few / tg, 2.0, 1e-9);
			CU_ASSERT_DOUBLE_EQUAL(tu, bytes / (132 * 15.6), 1e-6 * tu);
		} else {
			CU_ASSERT_DOUBLE_EQUAL(tn, ts, 1e-9 * ts);
			CU_ASSERT_DOUBLE_EQUAL(tg, ts, 1e-9 * ts);
			CU_ASSERT_DOUBLE_EQUAL(tu, ts, 1e-9 * ts);
			/* a stream on half the SMs still has the quarter it needs to saturate the HBM */
			CU_ASSERT_DOUBLE_EQUAL(tg_few, ts, 1e-9 * ts);
		}
		for (int i = 0; i < s->nops; i++) {
			const struct op *o = &s->ops[i];
			if (o->kind == OP_OPTIM && optim < 0)
				optim = i;
			if (o->kind == OP_COPY_IN && widen < 0)
				widen = i;
		}
		CU_ASSERT_FATAL(optim >= 0);
		CU_ASSERT_DOUBLE_EQUAL(cost_op_memory_ns(&c, &s->ops[optim], 132, hbm),
				       s->ops[optim].bytes / (r == 3 ? hbm : 3350 * (pt ? 0.8 : 0.9)), 1e-3);
		/* bf16 gradients cast into an fp32 reduce-scatter input: FSDP2's chunk_cat, or the testbed's stream */
		CU_ASSERT_FATAL(widen >= 0);
		CU_ASSERT_DOUBLE_EQUAL(cost_op_memory_ns(&c, &s->ops[widen], 132, hbm),
				       s->ops[widen].bytes / (pt ? 132 * 15.6 : hbm), 1e-3);
		cost_release(&c);
		schedule_free(s);
		config_release(&e);
	}
}

static void test_wave_quantization(void)
{
	struct experiment e;
	struct schedule *s;
	struct cost c;
	char err[256];
	/* h100: 128x256 tiles, one per SM, 132 SMs: 132 tiles fill one wave */
	struct kernel k132 = { "g", K_GEMM, 128 * 12, 256 * 11, 4096, 0, 0, 0, MA_STREAM };
	struct kernel k133 = { "g", K_GEMM, 128 * 7, 256 * 19, 4096, 0, 0, 0, MA_STREAM };
	double t132, t133, t132_contended;

	config_init(&e);
	config_set(&e, "cluster.gpu=h100-sxm", "t");
	CU_ASSERT_FATAL(config_resolve(&e) == 0);
	s = schedule_new(&e, err, sizeof(err));
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_FATAL(cost_init(&c, s, NULL, 0) == 0);
	CU_ASSERT_EQUAL(c.gpu->sms, 132);
	t132 = cost_kernel_ns(&c, &k132, 132, c.hbm_bytes_per_ns);
	t133 = cost_kernel_ns(&c, &k133, 132, c.hbm_bytes_per_ns);
	/* one tile more than the SMs: a second, almost empty wave */
	CU_ASSERT_DOUBLE_EQUAL(t133 / t132, 2.0, 1e-9);
	/* an all-gather holding nccl_sms SMs turns the full wave into two */
	t132_contended = cost_kernel_ns(&c, &k132, 132 - c.gpu->nccl_sms, c.hbm_bytes_per_ns);
	CU_ASSERT_DOUBLE_EQUAL(t132_contended / t132, 2.0, 1e-9);
	/* a full wave runs at gemm_eff of peak */
	CU_ASSERT_DOUBLE_EQUAL(2.0 * 128 * 12 * 256 * 11 * 4096 / t132,
			       c.peak_flops_per_ns * c.gpu->gemm_eff, 1e-6 * c.peak_flops_per_ns);
	{
		/*
		 * n = 37 x 128: in 128x256 tiles the last column overhangs by half,
		 * 7 x 19 = 133 tiles, two waves; in 128x128 tiles 7 x 37 = 259 fit in
		 * two waves of half the work at 0.75 of the efficiency (operand reuse
		 * 64 against 85.3): 4/3 of one large wave instead of 2. The library's
		 * choice is the smaller tile.
		 */
		struct kernel odd = { "g", K_GEMM, 128 * 7, 128 * 37, 4096, 0, 0, 0, MA_STREAM };
		struct gemm_choice ch;
		cost_gemm(&c, &odd, 132, &ch);
		CU_ASSERT_EQUAL(ch.tile_m, 128);
		CU_ASSERT_EQUAL(ch.tile_n, 128);
		CU_ASSERT_EQUAL(ch.tiles, 259);
		CU_ASSERT_EQUAL(ch.waves, 2);
		CU_ASSERT_DOUBLE_EQUAL(ch.ns / t132, 4.0 / 3.0, 1e-9);
		/* n = 36 x 128: 7 x 18 = 126 large tiles, one wave, beat 252 small ones in two */
		odd.n = 128 * 36;
		cost_gemm(&c, &odd, 132, &ch);
		CU_ASSERT_EQUAL(ch.tile_n, 256);
		CU_ASSERT_EQUAL(ch.waves, 1);
		CU_ASSERT_DOUBLE_EQUAL(ch.ns / t132, 1.0, 1e-9);
		/*
		 * m = 12 x 256, n = 11 x 128: the largest tile only in the catalog's
		 * orientation, 128x256 (24 x 6 = 144 tiles, two waves), not 256x128
		 * (132, one wave); 128x128 tiles then win, 264 in two waves: 4/3
		 */
		odd.m = 256 * 12;
		odd.n = 128 * 11;
		cost_gemm(&c, &odd, 132, &ch);
		CU_ASSERT_EQUAL(ch.tile_m, 128);
		CU_ASSERT_EQUAL(ch.tile_n, 128);
		CU_ASSERT_DOUBLE_EQUAL(ch.ns / t132, 4.0 / 3.0, 1e-9);
	}
	cost_release(&c);
	schedule_free(s);
	config_release(&e);

	/*
	 * The other way round: a GPU whose largest tile is 256x128 does not
	 * run 128x256 either. m = 128, n = 264 x 128: 128x256 tiles would fill
	 * one wave (132); in 256x128 tiles the rows overhang by half, 264 tiles
	 * in two full waves, so 128x128 tiles win (264 in two waves of half the
	 * work at 0.75 of the efficiency: 4/3 of one large wave)
	 */
	{
		struct kernel wide = { "g", K_GEMM, 128, 128 * 264, 4096, 0, 0, 0, MA_STREAM };
		struct gemm_choice ch;

		s = test_schedule(&e, "cluster.gpu=h100-sxm", "cluster.gemm_tile_m=256", "cluster.gemm_tile_n=128", NULL);
		CU_ASSERT_FATAL(s != NULL && cost_init(&c, s, NULL, 0) == 0);
		cost_gemm(&c, &wide, 132, &ch);
		CU_ASSERT_EQUAL(ch.tile_m, 128);
		CU_ASSERT_EQUAL(ch.tile_n, 128);
		CU_ASSERT_EQUAL(ch.waves, 2);
		CU_ASSERT_DOUBLE_EQUAL(ch.ns / t132, 4.0 / 3.0, 1e-9);
		cost_release(&c);
		schedule_free(s);
		config_release(&e);
	}
}

static void test_collective_cost(void)
{
	struct experiment e;
	struct schedule *s;
	struct cost c;
	struct coll k;
	char err[256];
	struct op ag = { 0 };

	config_init(&e);
	config_set(&e, "model.name=llama3-8b", "t");
	config_set(&e, "cluster.gpu=h100-sxm", "t");
	config_set(&e, "cluster.nodes=4", "t");
	config_set(&e, "cluster.gpus_per_node=8", "t");
	config_set(&e, "policy.sharding=hsdp", "t");
	CU_ASSERT_FATAL(config_resolve(&e) == 0);
	s = schedule_new(&e, err, sizeof(err));
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_FATAL(cost_init(&c, s, NULL, 0) == 0);
	ag.kind = OP_ALLGATHER;
	ag.group = GRP_SHARD;
	ag.bytes = 800000000;
	cost_collective(&c, &ag, &k);
	/* inside a node: 7/8 of the buffer over NVLink, 7 ring steps */
	CU_ASSERT_EQUAL(k.n, 8);
	CU_ASSERT_EQUAL(k.wire, 700000000ull);
	CU_ASSERT_EQUAL(k.links, 1u << LINK_INTRA);
	CU_ASSERT_DOUBLE_EQUAL(k.latency_ns, 7e3 * c.gpu->nvlink_latency_us, 1e-6);
	/* the replica all-reduce crosses nodes only, NIC to NIC */
	ag.kind = OP_ALLREDUCE;
	ag.group = GRP_REPLICA;
	cost_collective(&c, &ag, &k);
	CU_ASSERT_EQUAL(k.n, 4);
	CU_ASSERT_EQUAL(k.wire, 2 * 600000000ull);
	CU_ASSERT_EQUAL(k.links, 1u << LINK_INTER);
	/* a rail: its NIC's share of the node's (8 NICs of 48 GB/s, 8 GPUs), the node's link being all 8 */
	CU_ASSERT_DOUBLE_EQUAL(k.cap, 48.0, 1e-12);
	CU_ASSERT_DOUBLE_EQUAL(c.link_bytes_per_ns[LINK_INTER], 8 * 48.0, 1e-12);
	CU_ASSERT_EQUAL(k.tree, 0);
	/* a small all-reduce: the tree's fewer steps win, as NCCL's tuner picks it */
	ag.bytes = 4096;
	cost_collective(&c, &ag, &k);
	CU_ASSERT_EQUAL(k.tree, 1);
	CU_ASSERT_DOUBLE_EQUAL(k.latency_ns, 2 * 2 * 1e3 * c.gpu->net_latency_us, 1e-6);
	cost_release(&c);
	schedule_free(s);
	config_release(&e);

	/*
	 * hsdp with shard groups of 2 on 8-GPU nodes: each replica group has 4
	 * members on a node (NVLink between them) and the node's 4 replica
	 * groups cross its NICs at once, each with 4 of the 8 NICs: 192 GB/s,
	 * under NVLink's 360; groups of 4: 2 members a node, 96 GB/s
	 */
	for (int sg = 2; sg <= 4; sg += 2) {
		char kv[64];
		snprintf(kv, sizeof kv, "policy.shard_group=%d", sg);
		s = test_schedule(&e, "model.name=llama3-8b", "cluster.gpu=h100-sxm", "cluster.nodes=4",
				  "cluster.gpus_per_node=8", "policy.sharding=hsdp", kv, NULL);
		CU_ASSERT_FATAL(s != NULL && cost_init(&c, s, NULL, 0) == 0);
		ag.kind = OP_ALLREDUCE;
		ag.group = GRP_REPLICA;
		ag.bytes = 800000000;
		cost_collective(&c, &ag, &k);
		CU_ASSERT_EQUAL(k.n, 32 / sg);
		CU_ASSERT_EQUAL(k.links, (1u << LINK_INTRA) | (1u << LINK_INTER));
		CU_ASSERT_DOUBLE_EQUAL(k.cap, 8 * 48.0 / sg, 1e-9);
		cost_release(&c);
		schedule_free(s);
		config_release(&e);
	}

	/* one GPU a node: fsdp's ring runs NIC to NIC, no NVLink hop to cap it */
	s = test_schedule(&e, "model.name=llama3-8b", "cluster.gpu=h100-sxm", "cluster.nodes=16",
			  "cluster.gpus_per_node=1", "cluster.intra_gbps=0.001", NULL);
	CU_ASSERT_FATAL(s != NULL && cost_init(&c, s, NULL, 0) == 0);
	ag.kind = OP_ALLGATHER;
	ag.group = GRP_SHARD;
	cost_collective(&c, &ag, &k);
	CU_ASSERT_EQUAL(k.n, 16);
	CU_ASSERT_EQUAL(k.links, 1u << LINK_INTER);
	CU_ASSERT_DOUBLE_EQUAL(k.cap, e.cluster.inter_gbps, 1e-9);
	CU_ASSERT(k.cap > 1.0);
	cost_release(&c);
	schedule_free(s);
	config_release(&e);
}

static void test_deterministic(void)
{
	struct experiment e;
	struct schedule *s;
	struct sim_result a, b;
	char err[256];

	config_init(&e);
	config_set(&e, "model.name=llama3-8b", "t");
	config_set(&e, "cluster.nodes=2", "t");
	config_set(&e, "policy.sharding=hsdp", "t");
	config_set(&e, "policy.microbatches=2", "t");
	config_set(&e, "policy.optim_in_backward=true", "t");
	config_set(&e, "policy.runtime=pytorch", "t");
	CU_ASSERT_FATAL(config_resolve(&e) == 0);
	s = schedule_new(&e, err, sizeof(err));
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_FATAL(engine_run(s, 1, &a, NULL, 0) == 0);
	CU_ASSERT_FATAL(engine_run(s, 1, &b, NULL, 0) == 0);
	CU_ASSERT(a.step_ns > 0);
	CU_ASSERT_EQUAL(a.step_ns, b.step_ns);
	CU_ASSERT_EQUAL(a.nmem, b.nmem);
	CU_ASSERT(memcmp(a.ops, b.ops, sizeof(*a.ops) * s->nops) == 0);
	CU_ASSERT(memcmp(a.mem, b.mem, sizeof(*a.mem) * a.nmem) == 0);
	/* every op ran, after what it depends on */
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		CU_ASSERT(a.ops[i].end_ns >= a.ops[i].start_ns);
		for (uint32_t d = 0; d < o->ndeps; d++)
			CU_ASSERT(a.ops[s->deps[o->dep_first + d]].end_ns <= a.ops[i].start_ns);
	}
	/* the timeline ends where it began: everything the step allocated is freed */
	{
		uint64_t st[MEM_CAT_COUNT], end = 0, begin = 0;
		schedule_static_bytes(s, st);
		for (int c = 0; c < MEM_CAT_COUNT; c++) {
			begin += st[c];
			end += a.mem[a.nmem - 1].alloc[c];
		}
		CU_ASSERT_EQUAL(end, begin);
	}
	sim_result_release(&a);
	sim_result_release(&b);
	schedule_free(s);
	config_release(&e);
}

/* The CPU thread launches in order, and blocks while the op's stream holds the runtime's queue of kernels. */
static void test_launch_queue(void)
{
	struct experiment e;
	struct schedule *s;
	struct sim_result free_run, one;
	char err[256];
	int blocked = 0;

	config_init(&e);
	config_set(&e, "model.name=llama3-8b", "t");
	config_set(&e, "cluster.gpu=h100-sxm", "t");
	config_set(&e, "cluster.nodes=1", "t");
	config_set(&e, "cluster.gpus_per_node=8", "t");
	config_set(&e, "policy.runtime=pytorch", "t");
	/* a GPU whose memory the caching allocator never fills: no flush makes a launch wait for the GPU */
	config_set(&e, "cluster.hbm_gib=1000", "t");
	CU_ASSERT_FATAL(config_resolve(&e) == 0);
	CU_ASSERT_EQUAL(e.runtime.launch_queue, 1024);
	e.runtime.launch_queue = 0; /* no bound: each launch begins where the one before it ended */
	s = schedule_new(&e, err, sizeof(err));
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_FATAL(engine_run(s, 0, &free_run, NULL, 0) == 0);
	CU_ASSERT_EQUAL(free_run.launch[0].start_ns, 0);
	for (int i = 1; i < s->nops; i++) {
		CU_ASSERT_EQUAL(free_run.launch[i].start_ns, free_run.launch[i - 1].end_ns);
		CU_ASSERT_EQUAL(free_run.launch_by[i], -1);
	}
	/* a queue of one kernel: a launch waits for the stream's op before it to finish */
	e.runtime.launch_queue = 1;
	CU_ASSERT_FATAL(engine_run(s, 0, &one, NULL, 0) == 0);
	for (int st = 0; st < ST_COUNT; st++) {
		int prev = -1;
		for (int i = 0; i < s->nops; i++) {
			const struct op *o = &s->ops[i];
			if (o->stream != st || o->kind == OP_FREE || o->kind == OP_CPU_OPTIM || !o->launches)
				continue;
			if (prev >= 0)
				CU_ASSERT(one.launch[i].start_ns >= one.ops[prev].end_ns);
			prev = i;
		}
	}
	for (int i = 1; i < s->nops; i++) {
		CU_ASSERT(one.launch[i].start_ns >= one.launch[i - 1].end_ns);
		blocked += one.launch_by[i] >= 0;
	}
	CU_ASSERT(blocked > 0);
	/* the GPU now idles while each launch is made: a longer step */
	CU_ASSERT(one.step_ns > free_run.step_ns);
	/* a launch that waited began at the end of the op it waited for, one of its stream's */
	for (int i = 0; i < s->nops; i++)
		if (one.launch_by[i] >= 0) {
			CU_ASSERT_EQUAL(one.launch[i].start_ns, one.ops[one.launch_by[i]].end_ns);
			CU_ASSERT_EQUAL(s->ops[one.launch_by[i]].stream, s->ops[i].stream);
		}
	sim_result_release(&free_run);
	sim_result_release(&one);
	schedule_free(s);
	config_release(&e);
}

/*
 * A calibration of `ranks` processes on backend, with two passes, an
 * optimizer of 1 ns per element and nothing else, for the caller to add
 * to before writing it.
 */
static void test_cal(struct calibration *c, const char *backend, int ranks, struct cal_pass *pass)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->hardware, sizeof c->hardware, "test");
	snprintf(c->backend, sizeof c->backend, "%s", backend);
	c->ranks = ranks;
	c->passes = pass;
	c->npasses = 2;
	c->adamw_ns_per_elem = c->host_adamw_ns_per_elem = 1.0;
}

/* The tiny model on one GPU under `runtime`, priced by the calibration `cal_set` names; not yet resolved. */
static void tiny_on_one_gpu(struct experiment *e, const char *runtime, const char *cal_set)
{
	char set[64];

	config_init(e);
	config_set(e, "model.name=tiny", "t");
	config_set(e, "cluster.nodes=1", "t");
	config_set(e, "cluster.gpus_per_node=1", "t");
	snprintf(set, sizeof set, "policy.runtime=%s", runtime);
	config_set(e, set, "t");
	config_set(e, cal_set, "t");
}

/* The tiny model on one GPU under pytorch, priced by a calibration written to a file of its own. */
struct priced {
	char dir[32], path[96];
	struct experiment e; /* resolved */
	struct schedule *sc;
	struct cost cost;    /* ready */
};

/* c written to a new temporary file, and the tiny model priced by it into *p. */
static void tiny_priced_by(const struct calibration *c, struct priced *p)
{
	char set[160], err[256];

	snprintf(p->dir, sizeof p->dir, "/tmp/test_sim_cal.XXXXXX");
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(p->dir));
	snprintf(p->path, sizeof p->path, "%s/cal.h5", p->dir);
	CU_ASSERT_FATAL(calibration_write(p->path, c) == 0);
	snprintf(set, sizeof set, "cluster.calibration=%s", p->path);
	tiny_on_one_gpu(&p->e, "pytorch", set);
	CU_ASSERT_FATAL(config_resolve(&p->e) == 0);
	p->sc = schedule_new(&p->e, err, sizeof err);
	CU_ASSERT_PTR_NOT_NULL_FATAL(p->sc);
	CU_ASSERT_FATAL(cost_init(&p->cost, p->sc, err, sizeof err) == 0);
}

/* What tiny_priced_by made, released, its file removed. */
static void tiny_priced_free(struct priced *p)
{
	cost_release(&p->cost);
	schedule_free(p->sc);
	config_release(&p->e);
	unlink(p->path);
	rmdir(p->dir);
}

/* The schedule's last kernel named name (the fatal assertion fails without one). */
static const struct kernel *kernel_named(const struct schedule *sc, const char *name)
{
	const struct kernel *k = NULL;

	for (int i = 0; i < sc->nkernels; i++)
		if (!strcmp(sc->kernels[i].name, name))
			k = &sc->kernels[i];
	CU_ASSERT_PTR_NOT_NULL_FATAL(k);
	return k;
}

/*
 * A calibrated optimizer step over every parameter: the update at the
 * measured cost per call plus ns per element of the optimizer the policy
 * names (PyTorch's fused AdamW apart, where measured: per element alone),
 * plus the gradient-norm clipping the pytorch runtime does before it,
 * priced as the pass of its traffic (a read for the norm, a read and write
 * to scale: 3 x the gradient's bytes). The testbed runtime does not clip.
 * Offloaded, the host optimizer's step at the host's own cost per call and
 * per element.
 */
static void test_calibrated_optimizer(void)
{
	char dir[] = "/tmp/test_sim_cal.XXXXXX", path[96], set[160], err[256];
	struct cal_pass pass[] = { { 1 << 20, 1e5 }, { 1 << 30, 1e8 } };
	struct calibration c;
	double got[2] = { 0, 0 }, update = 0;

	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/cal.h5", dir);
	test_cal(&c, "pytorch", 1, pass);
	c.adamw_fused_ns_per_elem = 0.25;
	c.adamw_call_ns = 5e3;
	c.host_adamw_ns_per_elem = 3.0;
	c.host_adamw_call_ns = 7e5;
	CU_ASSERT_FATAL(calibration_write(path, &c) == 0);
	snprintf(set, sizeof set, "cluster.calibration=%s", path);
	for (int run = 0; run < 4; run++) {
		const char *optim = run == 1 ? "policy.optim=fused" : "policy.optim=foreach";
		struct experiment e;
		struct schedule *sc;
		struct cost cost;
		double elems = 0, want;
		uint64_t clip;
		int op = -1;

		tiny_on_one_gpu(&e, run >= 2 ? "testbed" : "pytorch", set);
		config_set(&e, optim, "t");
		if (run == 3)
			config_set(&e, "policy.offload=optim", "t");
		CU_ASSERT_FATAL(config_resolve(&e) == 0);
		sc = schedule_new(&e, err, sizeof err);
		CU_ASSERT_PTR_NOT_NULL_FATAL(sc);
		CU_ASSERT_FATAL(cost_init(&cost, sc, err, sizeof err) == 0);
		for (int i = 0; i < sc->nops; i++)
			if (sc->ops[i].kind == (run == 3 ? OP_CPU_OPTIM : OP_OPTIM) && sc->ops[i].unit < 0)
				op = i;
		CU_ASSERT_FATAL(op >= 0);
		for (int u = 0; u < sc->nunits; u++)
			elems += (double)sc->units[u].shard_elems;
		CU_ASSERT_DOUBLE_EQUAL(schedule_optim_elems(sc, &sc->ops[op]), elems, 0);
		CU_ASSERT_DOUBLE_EQUAL(schedule_largest_optim_elems(sc), elems, 0);
		clip = schedule_clip_bytes(sc, op);
		CU_ASSERT_EQUAL(clip, run >= 2 ? 0 : 3 * (uint64_t)elems * (uint64_t)policy_grad_bytes(&e.policy));
		want = (run == 1 ? 0.25 * elems : run == 3 ? 7e5 + 3.0 * elems : 5e3 + elems) +
		       (clip ? calibration_pass_ns(cost.cal, clip) : 0);
		CU_ASSERT_DOUBLE_EQUAL(cost_cal_op_ns(&cost, op, 0), want, 1e-9 * want);
		if (run < 2)
			got[run] = cost_cal_op_ns(&cost, op, 0);
		update = elems;
		cost_release(&cost);
		schedule_free(sc);
		config_release(&e);
	}
	CU_ASSERT(update > 0);
	/* fused: a quarter of the update, no cost per call */
	CU_ASSERT_DOUBLE_EQUAL(got[0] - got[1], 5e3 + 0.75 * update, 1e-6 * update);
	unlink(path);
	rmdir(dir);
}

/*
 * Eager PyTorch priced by its own calibration (microbench.py: backend
 * pytorch), whose dispatch_ns is the host's cost of one eager op: an op's
 * launch costs the runtime's hooks (op_overhead_us), that per kernel, and
 * its DTensor work, and on the device an op takes its measured time alone,
 * no cost of the runtime's added (its kernels were timed with events). A
 * calibration of gpu_run's (cuda) keeps its meaning: its walker's issue_ns
 * per op on the host, its dispatch_ns on the op's stream.
 */
static void test_calibrated_eager_dispatch(void)
{
	char err[256];
	struct cal_pass pass[] = { { 1 << 20, 1e5 }, { 1 << 30, 1e8 } };

	for (int b = 0; b < 2; b++) {
		const double dispatch = 20e3, issue = 3e3;
		struct calibration c;
		struct priced p;
		struct sim_result r;
		struct schedule *s;
		int alone = 0, kernels = 0;

		test_cal(&c, b ? "cuda" : "pytorch", 1, pass);
		c.dispatch_ns = dispatch;
		c.issue_ns = issue;
		tiny_priced_by(&c, &p);
		s = p.sc;
		CU_ASSERT(p.e.runtime.op_overhead_us > 0 && p.e.runtime.launch_us > 0);
		CU_ASSERT_FATAL(engine_run(s, 0, &r, err, sizeof err) == 0);
		for (int i = 0; i < s->nops; i++) {
			const struct op *o = &s->ops[i];
			uint64_t k = o->kind == OP_FREE || o->kind == OP_CPU_OPTIM ? 0 : o->launches;
			uint64_t want = b ? (uint64_t)issue :
					    (uint64_t)llround(p.e.runtime.op_overhead_us * 1e3) + k * (uint64_t)dispatch + o->host_ns;
			int overlaps = 0;
			CU_ASSERT_EQUAL(r.launch[i].end_ns - r.launch[i].start_ns, want);
			kernels += (int)k;
			if (o->kind != OP_FORWARD && o->kind != OP_BACKWARD)
				continue;
			for (int j = 0; j < s->nops; j++)
				overlaps |= j != i && s->ops[j].kind != OP_FREE && r.ops[j].end_ns > r.ops[j].start_ns &&
					    r.ops[j].start_ns < r.ops[i].end_ns && r.ops[i].start_ns < r.ops[j].end_ns;
			if (overlaps)
				continue;
			alone++;
			CU_ASSERT_DOUBLE_EQUAL((double)(r.ops[i].end_ns - r.ops[i].start_ns),
					       cost_cal_op_ns(&p.cost, i, 0) + (b ? dispatch : 0), 1.0);
		}
		CU_ASSERT(alone >= 2);
		CU_ASSERT(kernels > 20);
		sim_result_release(&r);
		tiny_priced_free(&p);
	}
}

/*
 * With a calibration that measured some of eager PyTorch's memory-bound
 * kernels by name at another size (microbench.py without a ./sim, or at
 * other shapes), a kernel it did not measure whose access pattern it
 * measured in another kernel runs at that kernel's rate: RMSNorm's
 * backward at the forward's; a stream it did not measure (and a pattern
 * none of whose kernels it measured) is the pass of its bytes, as before.
 */
static void test_calibrated_access_rates(void)
{
	struct cal_pass pass[] = { { 1 << 20, 1e5 }, { 1 << 30, 1e8 } };
	struct cal_kernel norm = { "attn_norm", K_ELEMENTWISE, 0, 0, 0, 0, 1 << 24, 2e4, 0, 0, 0 };
	struct calibration c;
	struct priced p;
	struct cost *cost = &p.cost;
	const struct kernel *bwd, *silu, *rep;

	test_cal(&c, "pytorch", 1, pass);
	c.kernels = &norm;
	c.nkernels = 1;
	tiny_priced_by(&c, &p);
	bwd = kernel_named(p.sc, "attn_norm_bwd0");
	silu = kernel_named(p.sc, "silu");
	rep = kernel_named(p.sc, "k_repeat");
	CU_ASSERT_EQUAL(bwd->access, MA_NORM);
	/* 2^24 bytes in 20 us: the forward's rate, whatever the size */
	CU_ASSERT_DOUBLE_EQUAL(cost->cal_access_rate[MA_NORM], (double)(1 << 24) / 2e4, 1e-9);
	CU_ASSERT_DOUBLE_EQUAL(cost_cal_kernel_ns(cost, bwd, 0), bwd->bytes / ((double)(1 << 24) / 2e4), 1e-6);
	CU_ASSERT_DOUBLE_EQUAL(cost_cal_kernel_ns(cost, silu, 0), calibration_pass_ns(cost->cal, silu->bytes), 1e-6);
	CU_ASSERT_EQUAL(cost->cal_access_rate[MA_GATHER], 0);
	CU_ASSERT_DOUBLE_EQUAL(cost_cal_kernel_ns(cost, rep, 0), calibration_pass_ns(cost->cal, rep->bytes), 1e-6);
	tiny_priced_free(&p);
}

/*
 * A GEMM or attention kernel smaller than every one the calibration
 * measured of its kind (an attention measured at sequence 8192, asked at
 * the tiny model's 32) is the smallest one's time scaled by the model's
 * ratio of the two, not that one's whole time; one above it is the table's
 * (the largest one's rate per FLOP, an attention's from the rows of its
 * own direction), one measured by name its row.
 */
static void test_calibrated_below_the_table(void)
{
	struct cal_pass pass[] = { { 1 << 20, 1e5 }, { 1 << 30, 1e8 } };
	/* attention of 32 heads at sequence 8192, head dim 128, causal: 2 x 2 x 32 x 8192^2 x 128 / 2 FLOPs */
	struct cal_kernel rows[] = {
		{ "attention", K_ATTN, 32, 8192, 128, 549755813888ull, 1ull << 27, 9e5, 0, 0, 0 },
		{ "attention_bwd", K_ATTN, 32, 8192, 128, 1374389534720ull, 1ull << 28, 2.6e6, 0, 0, 0 },
	};
	struct cal_kernel grid[] = { { "gemm", K_GEMM, 4096, 4096, 4096, 137438953472ull, 3ull << 25, 2.5e5, 0, 0, 0 } };
	struct calibration c;
	struct priced p;
	struct cost *cost = &p.cost;
	const struct kernel *attn, *attn_bwd, *wq;

	test_cal(&c, "pytorch", 1, pass);
	c.kernels = rows;
	c.nkernels = 2;
	c.gemm = grid;
	c.ngemm = 1;
	tiny_priced_by(&c, &p);
	attn = kernel_named(p.sc, "attention");
	attn_bwd = kernel_named(p.sc, "attention_bwd");
	wq = kernel_named(p.sc, "wq");
	for (int i = 0; i < 3; i++) {
		const struct kernel *k = i == 0 ? attn : i == 1 ? attn_bwd : wq;
		const struct cal_kernel *x = i == 0 ? &rows[0] : i == 1 ? &rows[1] : &grid[0];
		struct kernel a = { .kind = (enum kernel_kind)x->kind, .m = x->m, .n = x->n, .k = x->k,
				    .flops = x->flops, .bytes = x->bytes, .backward = k->backward };
		double want = x->ns * cost_kernel_ns(cost, k, cost->gpu->sms, cost->hbm_bytes_per_ns) /
			      cost_kernel_ns(cost, &a, cost->gpu->sms, cost->hbm_bytes_per_ns);
		CU_ASSERT(k->flops < x->flops);
		CU_ASSERT_DOUBLE_EQUAL(cost_cal_kernel_ns(cost, k, 0), want, 1e-9 * want);
		CU_ASSERT(want < x->ns / 10);
	}
	{ /* above the table: the largest point's time per FLOP; the row measured by name: its own */
		struct kernel big = *wq;
		big.flops = 2 * grid[0].flops;
		CU_ASSERT_DOUBLE_EQUAL(cost_cal_kernel_ns(cost, &big, 0), 2 * grid[0].ns, 1e-6);
		big = *attn;
		big.m = rows[0].m, big.n = rows[0].n, big.k = rows[0].k, big.flops = rows[0].flops, big.bytes = rows[0].bytes;
		CU_ASSERT_DOUBLE_EQUAL(cost_cal_kernel_ns(cost, &big, 0), rows[0].ns, 1e-6);
		/* a forward of twice the forward's FLOPs: from the forward alone (the backward's row is larger still) */
		big.n = 2 * rows[0].n;
		big.flops = 2 * rows[0].flops;
		CU_ASSERT(big.flops < rows[1].flops);
		CU_ASSERT_DOUBLE_EQUAL(cost_cal_kernel_ns(cost, &big, 0), 2 * rows[0].ns, 1e-6);
	}
	tiny_priced_free(&p);
}

/*
 * With a calibration, a kernel beside two collectives at once (FSDP's
 * backward: a reduce-scatter and the next all-gather) runs at its time
 * measured beside two, beside one all-reduce (DDP's) at its time beside an
 * all-reduce, beside one other collective at its time beside one, alone
 * at its own: over each compute op's life, the work done at each moment's
 * rate (1 / its price for what runs beside it then, times the kernels of
 * other streams sharing the processors) adds up to the op, exactly. Every
 * kernel is priced from the passes, slowed by the kernels' median: 2
 * beside one collective, 5 beside two, 3 beside an all-reduce, so a
 * simulator that took one for another would leave the sums off.
 */
static void test_calibrated_beside_two(void)
{
	char dir[] = "/tmp/test_sim_cal2.XXXXXX", path[96], set[160], err[256];
	struct cal_pass pass[] = { { 1 << 10, 1e3 }, { 1 << 30, 1e9 } };
	struct cal_kernel k = { "probe", K_ELEMENTWISE, 0, 0, 0, 0, 4096, 1e3, 2e3, 5e3, 3e3 };
	struct cal_coll coll[6];
	struct calibration c;
	int seen[CAL_BESIDE_COUNT] = { 0 };

	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/cal.h5", dir);
	for (int i = 0; i < 6; i++) /* 100 us to 300 us, whatever the size */
		coll[i] = (struct cal_coll){ (uint8_t)(i < 2 ? OP_ALLGATHER : i < 4 ? OP_REDUCE_SCATTER : OP_ALLREDUCE), 2,
					     i % 2 ? 1ull << 30 : 1024, i % 2 ? 3e5 : 1e5, i % 2 ? 3e5 : 1e5 };
	test_cal(&c, "cpu", 2, pass);
	c.kernels = &k;
	c.nkernels = 1;
	c.colls = coll;
	c.ncolls = 6;
	c.wake_ns = 7e3; /* a stream woken by another's event starts 7 us after it */
	CU_ASSERT_FATAL(calibration_write(path, &c) == 0);
	snprintf(set, sizeof set, "cluster.calibration=%s", path);

	for (int run = 0; run < 2; run++) {
		struct experiment e;
		struct schedule *sc;
		struct cost cost;
		struct sim_result r;

		config_init(&e);
		config_set(&e, "model.name=tiny", "t");
		config_set(&e, "cluster.gpu=cpu", "t");
		config_set(&e, "cluster.nodes=1", "t");
		config_set(&e, "cluster.gpus_per_node=2", "t");
		config_set(&e, "policy.microbatches=2", "t");
		config_set(&e, run ? "policy.sharding=ddp" : "policy.sharding=fsdp", "t");
		config_set(&e, set, "t");
		CU_ASSERT_FATAL(config_resolve(&e) == 0);
		sc = schedule_new(&e, err, sizeof err);
		CU_ASSERT_PTR_NOT_NULL_FATAL(sc);
		CU_ASSERT_FATAL(cost_init(&cost, sc, err, sizeof err) == 0);
		CU_ASSERT_FATAL(engine_run(sc, 0, &r, err, sizeof err) == 0);
		for (int i = 0; i < sc->nops; i++) /* the wake after a dependency on another stream */
			for (uint32_t d = 0; d < sc->ops[i].ndeps; d++) {
				uint32_t p = sc->deps[sc->ops[i].dep_first + d];
				if (sc->ops[p].stream != sc->ops[i].stream)
					CU_ASSERT(r.ops[i].start_ns >= r.ops[p].end_ns + 7000);
			}
		for (int i = 0; i < sc->nops; i++) {
			const struct op *o = &sc->ops[i];
			double done = 0;
			uint64_t t0 = r.ops[i].start_ns, t1 = r.ops[i].end_ns;
			if (!op_is_kernel(o) || op_is_collective(o->kind) || o->kind == OP_CPU_OPTIM || t1 <= t0)
				continue;
			/* a kernel list is slowed (5, 3 against 2); a memory-bound op of no list, a pass, is not */
			CU_ASSERT(o->ktab < 0 || (cost_cal_op_ns(&cost, i, CAL_BESIDE_TWO) >
							  2 * cost_cal_op_ns(&cost, i, CAL_BESIDE_ONE) &&
						  cost_cal_op_ns(&cost, i, CAL_BESIDE_ALLREDUCE) >
							  cost_cal_op_ns(&cost, i, CAL_BESIDE_ONE)));
			/* the moments where what runs beside it changes, in order */
			for (uint64_t t = t0; t < t1;) {
				uint64_t next = t1;
				int ncoll = 0, nar = 0, nkern = 0, beside;
				for (int j = 0; j < sc->nops; j++) {
					const struct op *x = &sc->ops[j];
					int is_coll = op_is_collective(x->kind) && schedule_group_size(sc, x->group) > 1;
					int kern = !op_is_collective(x->kind) && op_is_kernel(x) && x->kind != OP_CPU_OPTIM;
					if (!is_coll && !kern)
						continue;
					if (r.ops[j].start_ns <= t && r.ops[j].end_ns > t) {
						ncoll += is_coll;
						nar += is_coll && x->kind == OP_ALLREDUCE;
						nkern += kern;
						if (r.ops[j].end_ns < next)
							next = r.ops[j].end_ns;
					} else if (r.ops[j].start_ns > t && r.ops[j].start_ns < next) {
						next = r.ops[j].start_ns;
					}
				}
				beside = ncoll >= 2 ? CAL_BESIDE_TWO : !ncoll ? CAL_ALONE : nar ? CAL_BESIDE_ALLREDUCE
												 : CAL_BESIDE_ONE;
				seen[beside]++;
				done += (double)(next - t) / (cost_cal_op_ns(&cost, i, beside) * nkern);
				t = next;
			}
			CU_ASSERT_DOUBLE_EQUAL(done, 1.0, 2e-3);
		}
		sim_result_release(&r);
		cost_release(&cost);
		schedule_free(sc);
		config_release(&e);
	}
	/* compute ran alone, beside one collective, beside two (fsdp) and beside an all-reduce (ddp) */
	for (int b = 0; b < CAL_BESIDE_COUNT; b++)
		CU_ASSERT(seen[b] > 0);
	unlink(path);
	rmdir(dir);
}

#define L8 "model.name=llama3-8b", "cluster.gpu=h100-sxm"

static void test_accumulation_tradeoff(void)
{
	struct summary se, ns;

	/* 8 nodes on a slow network: syncing every microbatch costs time, no-sync costs memory */
	simulate(&se, L8, "cluster.nodes=8", "cluster.nic_gbps=6", "policy.microbatches=8",
		 "policy.accum=sync-each", "model.seq=4096", NULL);
	simulate(&ns, L8, "cluster.nodes=8", "cluster.nic_gbps=6", "policy.microbatches=8",
		 "policy.accum=no-sync", "model.seq=4096", NULL);
	CU_ASSERT(se.step_time_s > 1.3 * ns.step_time_s);
	CU_ASSERT(ns.peak_alloc_bytes > se.peak_alloc_bytes);
	CU_ASSERT(se.comm_bytes_per_gpu > ns.comm_bytes_per_gpu);
}

static void test_hsdp_vs_fsdp(void)
{
	struct summary node, per_gpu, h_slow;

	/*
	 * A ring spanning nodes crosses them through every NIC of the node (NCCL
	 * runs a channel per NIC): fsdp over 8 nodes on 3 GB/s NICs moves its
	 * gradients at 8 x 3 GB/s. Pricing it at one GPU's share instead makes
	 * the step far longer.
	 */
	simulate(&node, L8, "cluster.nodes=8", "cluster.nic_gbps=3", "policy.sharding=fsdp", NULL);
	simulate(&per_gpu, L8, "cluster.nodes=8", "cluster.nic_gbps=3", "cluster.node_inter_gbps=3",
		 "policy.sharding=fsdp", NULL);
	CU_ASSERT(per_gpu.step_time_s > 3 * node.step_time_s);
	/* hsdp's replicas ring within rails at a NIC's rate: about the same bytes per NIC, the same time */
	simulate(&h_slow, L8, "cluster.nodes=8", "cluster.nic_gbps=3", "policy.sharding=hsdp", NULL);
	CU_ASSERT(h_slow.step_time_s < 1.2 * node.step_time_s && h_slow.step_time_s > 0.8 * node.step_time_s);
}

static void test_block_io_lowers_peak(void)
{
	struct summary b, io;

	simulate(&b, L8, "cluster.nodes=2", "policy.wrap=block", NULL);
	simulate(&io, L8, "cluster.nodes=2", "policy.wrap=block+io", NULL);
	CU_ASSERT(io.peak_alloc_bytes < b.peak_alloc_bytes);
	/* the root unit holds less: its full parameters and gradients at the peak */
	CU_ASSERT(io.peak_by_cat[MEM_FULL_PARAMS] + io.peak_by_cat[MEM_FULL_GRADS] <
		  b.peak_by_cat[MEM_FULL_PARAMS] + b.peak_by_cat[MEM_FULL_GRADS]);
}

static void test_optim_in_backward(void)
{
	struct summary after, inb;
	double bwd_after, bwd_inb;

	/* with checkpointing the peak is at the end of backward, where the sharded gradients pile up */
	simulate(&after, L8, "cluster.nodes=1", "cluster.gpus_per_node=8", "policy.optim=fused", "policy.ac=full",
		 "policy.loss=chunked", NULL);
	bwd_after = last_backward_s;
	simulate(&inb, L8, "cluster.nodes=1", "cluster.gpus_per_node=8", "policy.optim=fused", "policy.ac=full",
		 "policy.loss=chunked", "policy.optim_in_backward=true", NULL);
	bwd_inb = last_backward_s;
	/* the sharded gradients of the whole model never coexist */
	CU_ASSERT(inb.peak_alloc_bytes < after.peak_alloc_bytes);
	CU_ASSERT(after.peak_by_cat[MEM_SHARDED_GRADS] > 4ull * 8030261248ull / 8 / 2);
	CU_ASSERT(inb.peak_by_cat[MEM_SHARDED_GRADS] < after.peak_by_cat[MEM_SHARDED_GRADS] / 4);
	/* the step runs beside backward on the reduce-scatter stream and takes its SMs */
	CU_ASSERT(bwd_inb > bwd_after);
}

static void test_per_param_optimizer_is_launch_bound(void)
{
	struct summary fused, per;

	simulate(&fused, L8, "cluster.nodes=1", "policy.optim=fused", "policy.runtime=pytorch", NULL);
	simulate(&per, L8, "cluster.nodes=1", "policy.optim=per-param", "policy.runtime=pytorch", NULL);
	CU_ASSERT(per.step_time_s > fused.step_time_s);
}

/*
 * Two prices op by op, from the catalog: the host optimizer (offload) at
 * cpu_adam_gparams, over this rank's shard of llama3-8b's parameters on
 * 8 ranks; a per-parameter optimizer step of the tiny model, whose
 * kernels move a few KiB each, at kernel_min_us per launch.
 */
static void test_optimizer_op_prices(void)
{
	struct experiment e;
	struct schedule *s = test_schedule(&e, L8, "cluster.nodes=1", "cluster.gpus_per_node=8", "policy.offload=optim",
					   NULL);
	struct sim_result r;
	int seen = 0;

	CU_ASSERT_FATAL(engine_run(s, 0, &r, NULL, 0) == 0);
	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == OP_CPU_OPTIM) {
			double want = 8030261248.0 / 8 / e.cluster.gpu.cpu_adam_gparams;
			CU_ASSERT_DOUBLE_EQUAL((double)(r.ops[i].end_ns - r.ops[i].start_ns), want, 1.0);
			seen++;
		}
	CU_ASSERT_EQUAL(seen, 1);
	sim_result_release(&r);
	schedule_free(s);
	config_release(&e);

	s = test_schedule(&e, "model.name=tiny", "cluster.gpu=h100-sxm", "cluster.nodes=1", "cluster.gpus_per_node=2",
			  "policy.optim=per-param", "policy.runtime=pytorch", NULL);
	seen = 0;
	CU_ASSERT_FATAL(engine_run(s, 0, &r, NULL, 0) == 0);
	CU_ASSERT_FATAL(e.cluster.gpu.kernel_min_us > 0);
	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == OP_OPTIM) {
			double want = 1e3 * e.cluster.gpu.kernel_min_us * s->ops[i].launches;
			CU_ASSERT(s->ops[i].launches > 1);
			CU_ASSERT_DOUBLE_EQUAL((double)(r.ops[i].end_ns - r.ops[i].start_ns), want, 1.0);
			seen++;
		}
	CU_ASSERT(seen > 1);
	sim_result_release(&r);
	schedule_free(s);
	config_release(&e);
}

static void test_concat_saving(void)
{
	struct summary each, last;

	simulate(&each, L8, "cluster.nodes=1", "policy.microbatches=8", "policy.accum=no-sync",
		 "policy.flat_params=true", NULL);
	simulate(&last, L8, "cluster.nodes=1", "policy.microbatches=8", "policy.accum=no-sync",
		 "policy.flat_params=true", "policy.concat_last_only=true", NULL);
	CU_ASSERT(last.step_time_s < each.step_time_s);
}

static void test_offload_and_checkpointing(void)
{
	struct summary none, off, full;

	simulate(&none, L8, "cluster.nodes=1", NULL);
	simulate(&off, L8, "cluster.nodes=1", "policy.offload=optim", NULL);
	CU_ASSERT(off.peak_by_cat[MEM_OPTIM_STATE] == 0);
	CU_ASSERT(off.peak_alloc_bytes < none.peak_alloc_bytes);
	CU_ASSERT(off.step_time_s > none.step_time_s);
	simulate(&full, L8, "cluster.nodes=1", "policy.ac=full", NULL);
	CU_ASSERT(full.peak_by_cat[MEM_ACTIVATIONS] < none.peak_by_cat[MEM_ACTIVATIONS] / 4);
	CU_ASSERT(full.step_time_s > 1.15 * none.step_time_s);
}

static void test_not_fitting_is_reported(void)
{
	struct summary s;

	/* 70b on one GPU with ddp: simulated, and reported as not fitting */
	simulate(&s, "model.name=llama3-70b", "model.layers=4", "cluster.nodes=1", "cluster.gpus_per_node=1",
		 "policy.sharding=ddp", NULL);
	CU_ASSERT(s.step_time_s > 0);
	CU_ASSERT_EQUAL(s.fits, 0);
	CU_ASSERT(s.peak_reserved_bytes > s.gpu_bytes);
}

/*
 * PyTorch's caching allocator at the GPU's capacity. experiments/llama3.ini
 * with 4 microbatches on the pytorch runtime allocates 67.8 GiB; without a
 * capacity its cache reserves 75.1 GiB. On a GPU with less, cudaMalloc
 * fails: PyTorch flushes its cache then, and so does the model. Some GPU
 * between the two (found going down a quarter GiB at a time) has the
 * cache flushed in every step: reserved stays within the GPU, no
 * allocation fails, the step fits; the op whose memory flushed the cache
 * is launched once every op before it has finished (the flush
 * synchronizes the device).
 */
static void test_caching_allocator_at_capacity(void)
{
	struct experiment e;
	struct schedule *s = NULL;
	struct engine_prep *p = NULL;
	struct sim_result r;
	struct summary sum, unbounded;
	char err[256], kv[64];
	uint64_t drained = 0;
	int synced = 0;

	config_init_job(&e);
	CU_ASSERT_FATAL(config_load(&e, "experiments/llama3.ini") == 0);
	CU_ASSERT_FATAL(config_set(&e, "policy.runtime=pytorch", "t") == 0);
	CU_ASSERT_FATAL(config_set(&e, "policy.microbatches=4", "t") == 0);
	/* a GPU of 1000 GiB: never at its capacity */
	CU_ASSERT_FATAL(config_set(&e, "cluster.hbm_gib=1000", "t") == 0);
	CU_ASSERT_FATAL(config_resolve(&e) == 0);
	s = schedule_new(&e, err, sizeof(err));
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_FATAL(engine_run(s, 0, &r, NULL, 0) == 0);
	report_summarize(s, &r, &unbounded);
	CU_ASSERT_EQUAL(unbounded.alloc_retries, 0);
	CU_ASSERT_FATAL(unbounded.peak_reserved_bytes > unbounded.peak_alloc_bytes + (1ull << 30));
	sim_result_release(&r);
	schedule_free(s);

	for (double gib = (double)unbounded.peak_reserved_bytes / 1073741824.0 - 0.25;
	     gib * 1073741824.0 > (double)unbounded.peak_alloc_bytes; gib -= 0.25) {
		snprintf(kv, sizeof kv, "cluster.hbm_gib=%.2f", gib);
		CU_ASSERT_FATAL(config_set(&e, kv, "t") == 0);
		CU_ASSERT_FATAL(config_resolve(&e) == 0);
		s = schedule_new(&e, err, sizeof(err));
		CU_ASSERT_PTR_NOT_NULL_FATAL(s);
		memset(&r, 0, sizeof(r));
		p = engine_prepare(s, 0, err, sizeof(err));
		CU_ASSERT_PTR_NOT_NULL_FATAL(p);
		CU_ASSERT_FATAL(engine_simulate(p, s, &r, err, sizeof(err)) == 0);
		report_summarize(s, &r, &sum);
		/* below the reserve it needs, the cache is flushed in some step, or the run does not fit */
		CU_ASSERT(sum.alloc_retries > 0 || !sum.fits);
		if (sum.alloc_retries_step > 0 && sum.fits)
			break;
		sim_result_release(&r);
		engine_prep_free(p);
		schedule_free(s);
		s = NULL;
	}
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT(sum.gpu_bytes < unbounded.peak_reserved_bytes);
	CU_ASSERT(sum.peak_reserved_bytes <= sum.gpu_bytes);
	CU_ASSERT(sum.peak_reserved_bytes >= sum.peak_alloc_bytes);
	CU_ASSERT_EQUAL(sum.alloc_ooms, 0);
	CU_ASSERT(sum.alloc_retries >= (e.run.warmup + e.run.steps) * sum.alloc_retries_step / 2);
	/* the flushes of the step simulated: each op's launch waits for every op before it */
	CU_ASSERT_PTR_NOT_NULL_FATAL(p->sync);
	for (int i = 0; i < s->nops; i++) {
		if (p->sync[i]) {
			CU_ASSERT(r.launch[i].start_ns >= drained);
			synced++;
		}
		if (r.ops[i].end_ns > drained)
			drained = r.ops[i].end_ns;
	}
	CU_ASSERT_EQUAL(synced, sum.alloc_retries_step);
	sim_result_release(&r);
	engine_prep_free(p);
	schedule_free(s);
	config_release(&e);
}

/*
 * Exposed communication, and which kinds carry it (summary_overlap_by_kind,
 * what --advise names), on a timeline set by hand: an all-gather over
 * [0, 1000) ns, a reduce-scatter over [500, 2000), a forward over [800,
 * 1200), a free of the compute stream over [1500, 1600) (a measured run
 * times its frees; a free is no compute), every other op at 0 for no time.
 * No compute runs over [0, 800) and (1200, 2000): 1600 ns exposed, 800 of
 * them the all-gather's, 300 + 800 the reduce-scatter's (both run over
 * [500, 800): each counts it), none any other kind's; 400 ns of compute.
 */
/* Bytes as the report prints them: GiB from a tenth of one (and nothing as 0.00 GiB), MiB below. */
static void test_report_bytes(void)
{
	char b[32];

	CU_ASSERT_STRING_EQUAL(report_bytes(0, b, sizeof b), "0.00 GiB");
	CU_ASSERT_STRING_EQUAL(report_bytes(1048576, b, sizeof b), "1.0 MiB");
	CU_ASSERT_STRING_EQUAL(report_bytes(107374182, b, sizeof b), "102.4 MiB"); /* just under 0.1 GiB */
	CU_ASSERT_STRING_EQUAL(report_bytes(107374183, b, sizeof b), "0.10 GiB");
	CU_ASSERT_STRING_EQUAL(report_bytes(85469849190ull, b, sizeof b), "79.60 GiB");
}

/* The step a measured run records: the one closest to the median, the first of equals, the last one too. */
static void test_median_step(void)
{
	const double odd[] = { 0.30, 0.10, 0.20 }, last[] = { 0.5, 0.1, 0.9, 0.7, 0.4 }, even[] = { 4, 1, 3, 2 };
	const double one[] = { 7 }, same[] = { 2, 2, 2 };

	CU_ASSERT_EQUAL(summary_median_step(odd, 3), 2);
	CU_ASSERT_EQUAL(summary_median_step(last, 5), 0);
	const double tie[] = { 1, 9, 7, 4 };
	CU_ASSERT_EQUAL(summary_median_step(tie, 4), 2);      /* median 5.5: 7 and 4 as close, 7 first */
	CU_ASSERT_EQUAL(summary_median_step(even, 4), 2);     /* median 2.5: 3 before 2 */
	CU_ASSERT_EQUAL(summary_median_step(one, 1), 0);
	CU_ASSERT_EQUAL(summary_median_step(same, 3), 0);
	const double tail[] = { 9, 1, 8, 2, 5 };
	CU_ASSERT_EQUAL(summary_median_step(tail, 5), 4);
}

static void test_exposed_by_kind(void)
{
	struct experiment e;
	struct schedule *s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", NULL);
	struct op_timing *t = calloc((size_t)s->nops, sizeof(*t));
	double compute, exposed, by[OP_KIND_COUNT], exposed2;
	int ag = -1, rs = -1, fwd = -1, fr = -1;

	CU_ASSERT_PTR_NOT_NULL_FATAL(t);
	for (int i = 0; i < s->nops; i++) {
		enum op_kind k = s->ops[i].kind;
		if (k == OP_ALLGATHER && ag < 0)
			ag = i;
		else if (k == OP_REDUCE_SCATTER && rs < 0)
			rs = i;
		else if (k == OP_FORWARD && fwd < 0)
			fwd = i;
		else if (k == OP_FREE && s->ops[i].stream == ST_COMPUTE && fr < 0)
			fr = i;
	}
	CU_ASSERT_FATAL(ag >= 0 && rs >= 0 && fwd >= 0 && fr >= 0);
	t[ag] = (struct op_timing){ 0, 1000 };
	t[rs] = (struct op_timing){ 500, 2000 };
	t[fwd] = (struct op_timing){ 800, 1200 };
	t[fr] = (struct op_timing){ 1500, 1600 };
	summary_overlap_by_kind(s, t, &compute, &exposed, by);
	CU_ASSERT_DOUBLE_EQUAL(compute, 400e-9, 1e-15);
	CU_ASSERT_DOUBLE_EQUAL(exposed, 1600e-9, 1e-15);
	CU_ASSERT_DOUBLE_EQUAL(by[OP_ALLGATHER], 800e-9, 1e-15);
	CU_ASSERT_DOUBLE_EQUAL(by[OP_REDUCE_SCATTER], 1100e-9, 1e-15);
	for (int k = 0; k < OP_KIND_COUNT; k++)
		if (k != OP_ALLGATHER && k != OP_REDUCE_SCATTER)
			CU_ASSERT_EQUAL(by[k], 0.0);
	/* without the kinds: the same totals */
	summary_overlap(s, t, &compute, &exposed2);
	CU_ASSERT_EQUAL(exposed2, exposed);
	free(t);
	schedule_free(s);
	config_release(&e);
}

void suite_sim(void)
{
	CU_pSuite s = CU_add_suite("sim", NULL, NULL);
	CU_add_test(s, "event queue order", test_eq_order);
	CU_add_test(s, "exposed communication by kind, on a timeline set by hand", test_exposed_by_kind);
	CU_add_test(s, "wave quantization", test_wave_quantization);
	CU_add_test(s, "memory-bound kernels at their access pattern's rate", test_memory_access_rates);
	CU_add_test(s, "attention at the SDPA backend the policy names", test_sdpa_backend);
	CU_add_test(s, "a step's limits: refused, never wrapped", test_step_limits);
	CU_add_test(s, "collective cost", test_collective_cost);
	CU_add_test(s, "a calibrated kernel beside two collectives", test_calibrated_beside_two);
	CU_add_test(s, "deterministic and consistent", test_deterministic);
	CU_add_test(s, "launch queue", test_launch_queue);
	CU_add_test(s, "sync-each vs no-sync", test_accumulation_tradeoff);
	CU_add_test(s, "hsdp vs fsdp by network speed", test_hsdp_vs_fsdp);
	CU_add_test(s, "block+io lowers peak memory", test_block_io_lowers_peak);
	CU_add_test(s, "optimizer in backward", test_optim_in_backward);
	CU_add_test(s, "per-param optimizer is launch bound", test_per_param_optimizer_is_launch_bound);
	CU_add_test(s, "concat on the last microbatch only", test_concat_saving);
	CU_add_test(s, "the optimizer's ops priced from the catalog", test_optimizer_op_prices);
	CU_add_test(s, "offload and checkpointing", test_offload_and_checkpointing);
	CU_add_test(s, "not fitting is reported", test_not_fitting_is_reported);
	CU_add_test(s, "the caching allocator at the GPU's capacity", test_caching_allocator_at_capacity);
	CU_add_test(s, "a calibrated optimizer step", test_calibrated_optimizer);
	CU_add_test(s, "calibrated eager PyTorch: dispatch on the host, per kernel", test_calibrated_eager_dispatch);
	CU_add_test(s, "calibrated: a kernel not measured at the rate of its pattern's", test_calibrated_access_rates);
	CU_add_test(s, "calibrated: a kernel below the table scaled from its smallest", test_calibrated_below_the_table);
	CU_add_test(s, "a measured run's recorded step: the closest to the median", test_median_step);
	CU_add_test(s, "bytes as the report prints them", test_report_bytes);
}
