/*
 * test_fabric.c - the one rule for a collective group's link and latency
 * (core/fabric.h), shared by ./sim's prices and gpu_run's emulated fabric,
 * and the check that refuses to compare runs on an emulated fabric ./sim
 * does not price.
 *
 * The rule's values are checked against the catalog's numbers for 2 nodes
 * of 8 H100 (fsdp across both nodes, hsdp's shard and replica rings, ddp's
 * world); the simulator's cost_collective is checked to give, for every
 * collective op of several schedules, exactly the latency and links of the
 * rule; a run's recorded fabric is parsed from its attributes and refused
 * for each override (bandwidth, step latency, engine, SMs, world size).
 */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "cost.h"
#include "fabric.h"
#include "summary.h"
#include "testutil.h"

static void link_of(const char *sharding, const char *shard_group, int group, struct fabric_link *l,
		    struct experiment *e)
{
	struct schedule *s = test_schedule(e, "model.name=llama3-8b", "model.layers=2", "cluster.gpu=h100-sxm",
					   "cluster.nodes=2", "cluster.gpus_per_node=8", sharding, shard_group, NULL);
	CU_ASSERT_FATAL(s != NULL);
	fabric_link_of(s, group, l);
	schedule_free(s);
}

static void test_links(void)
{
	struct experiment e;
	struct fabric_link l;
	double intra, inter, node, nvl, net;

	link_of("policy.sharding=fsdp", "policy.shard_group=16", GRP_SHARD, &l, &e);
	intra = e.cluster.intra_gbps;
	inter = e.cluster.inter_gbps;
	node = e.cluster.node_inter_gbps;
	nvl = 1e3 * e.cluster.gpu.nvlink_latency_us;
	net = 1e3 * e.cluster.gpu.net_latency_us;
	/* the catalog's H100 node: 8 rails, NVLink the faster for latency */
	CU_ASSERT_FATAL(node == 8 * inter && intra > inter && net > nvl);
	/* fsdp over 16: the ring crosses nodes through all the node's NICs, held to the slower link, the network's latency */
	CU_ASSERT(l.spans && !l.only_inter);
	CU_ASSERT_EQUAL(l.gbps, fmin(intra, node));
	CU_ASSERT_EQUAL(l.step_lat_ns, net);
	config_release(&e);

	/* hsdp 8 x 2: the shard ring inside a node, the replica ring NIC to NIC */
	link_of("policy.sharding=hsdp", "policy.shard_group=8", GRP_SHARD, &l, &e);
	CU_ASSERT(!l.spans && !l.only_inter);
	CU_ASSERT_EQUAL(l.gbps, intra);
	CU_ASSERT_EQUAL(l.step_lat_ns, nvl);
	config_release(&e);
	link_of("policy.sharding=hsdp", "policy.shard_group=8", GRP_REPLICA, &l, &e);
	CU_ASSERT(l.spans && l.only_inter);
	CU_ASSERT_EQUAL(l.gbps, inter);
	CU_ASSERT_EQUAL(l.step_lat_ns, net);
	config_release(&e);
	/*
	 * hsdp 4 x 4: each replica ring has 2 members a node (an NVLink hop
	 * between them) and crosses the NICs with the node's 3 other replica
	 * rings: a quarter of the node's NICs each
	 */
	link_of("policy.sharding=hsdp", "policy.shard_group=4", GRP_REPLICA, &l, &e);
	CU_ASSERT(l.spans && !l.only_inter);
	CU_ASSERT_EQUAL(l.gbps, fmin(intra, node / 4));
	CU_ASSERT_EQUAL(l.step_lat_ns, net);
	config_release(&e);
}

/*
 * What a step sends (the summary's comm_bytes_per_gpu): each all-reduce as
 * the algorithm the rule picks. ddp of the tiny model over 2 x 8: every
 * all-reduce is small enough for the tree, 2 S each, not the ring's
 * 2 S 15/16.
 */
static void test_summary_wire(void)
{
	struct experiment e;
	struct schedule *s = test_schedule(&e, "model.name=tiny", "cluster.gpu=h100-sxm", "cluster.nodes=2",
					   "cluster.gpus_per_node=8", "policy.sharding=ddp", NULL);
	struct summary_plan p;
	uint64_t sum = 0;
	int n = 0;

	CU_ASSERT_FATAL(s != NULL);
	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == OP_ALLREDUCE) {
			sum += s->ops[i].bytes;
			n++;
		} else {
			CU_ASSERT(!op_is_collective(s->ops[i].kind));
		}
	CU_ASSERT(n > 0);
	summary_plan_init(&p, s);
	CU_ASSERT_EQUAL(p.wire_bytes, 2 * sum);
	summary_plan_release(&p);
	schedule_free(s);
	config_release(&e);
}

static void test_latency(void)
{
	struct fabric_link inside = { 0, 0, 100, 1000 }, across = { 1, 0, 50, 5000 };
	struct fabric_coll f;

	fabric_collective(&inside, OP_ALLGATHER, 8, 800, &f);
	CU_ASSERT_EQUAL(f.latency_ns, 7 * 1000.0);
	CU_ASSERT_EQUAL(f.wire, 700);
	CU_ASSERT_EQUAL(f.tree, 0);
	fabric_collective(&inside, OP_REDUCE_SCATTER, 8, 800, &f);
	CU_ASSERT_EQUAL(f.latency_ns, 7 * 1000.0);
	fabric_collective(&inside, OP_ALLREDUCE, 8, 8, &f); /* no tree inside a node */
	CU_ASSERT_EQUAL(f.latency_ns, 14 * 1000.0);
	CU_ASSERT_EQUAL(f.tree, 0);
	/* across nodes, 16 ranks, a small message: a tree of depth 4, up and down: 8 steps instead of 30 */
	fabric_collective(&across, OP_ALLREDUCE, 16, 1600, &f);
	CU_ASSERT_EQUAL(f.latency_ns, 8 * 5000.0);
	CU_ASSERT_EQUAL(f.tree, 1);
	CU_ASSERT_EQUAL(f.wire, 2 * 1600);
	/*
	 * a large one: the ring sends 2 S 15/16 against the tree's 2 S; at 50 GB/s
	 * the 110 us of latency the tree saves are 5.5 MB, so 2 S / 16 > 5.5 MB
	 * (S = 64 MB) takes the ring
	 */
	fabric_collective(&across, OP_ALLREDUCE, 16, 64u << 20, &f);
	CU_ASSERT_EQUAL(f.tree, 0);
	CU_ASSERT_EQUAL(f.latency_ns, 30 * 5000.0);
	CU_ASSERT_EQUAL(f.wire, collective_wire_bytes(OP_ALLREDUCE, 64u << 20, 16));
	/* 2 ranks: the ring's 2 steps are no longer than the tree's */
	fabric_collective(&across, OP_ALLREDUCE, 2, 200, &f);
	CU_ASSERT_EQUAL(f.latency_ns, 2 * 5000.0);
	CU_ASSERT_EQUAL(f.tree, 0);
	fabric_collective(&across, OP_ALLGATHER, 16, 1600, &f);
	CU_ASSERT_EQUAL(f.latency_ns, 15 * 5000.0);
	/* 5 ranks, not a power of two: a tree of depth 3 (the ceiling of log2 5), 6 steps instead of the ring's 8 */
	fabric_collective(&across, OP_ALLREDUCE, 5, 100, &f);
	CU_ASSERT_EQUAL(f.tree, 1);
	CU_ASSERT_EQUAL(f.latency_ns, 6 * 5000.0);
}

/* Every collective op of a schedule: the simulator prices the rule's links and latency. */
static void sim_follows_rule(const char *sharding, const char *shard_group, const char *nodes)
{
	struct experiment e;
	struct schedule *s = test_schedule(&e, "model.name=llama3-8b", "model.layers=2", "cluster.gpu=h100-sxm",
					   nodes, "cluster.gpus_per_node=8", sharding, shard_group,
					   "policy.microbatches=2", NULL);
	struct cost c;
	char err[256];
	int n = 0;

	CU_ASSERT_FATAL(s != NULL);
	CU_ASSERT_FATAL(cost_init(&c, s, err, sizeof err) == 0);
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		struct coll k;
		struct fabric_link l;
		struct fabric_coll f;
		int g = schedule_group_size(s, o->group);
		unsigned links;
		if (!op_is_collective(o->kind) || g < 2)
			continue;
		cost_collective(&c, o, &k);
		fabric_link_of(s, o->group, &l);
		fabric_collective(&l, o->kind, g, o->bytes, &f);
		links = l.only_inter ? 1u << LINK_INTER : l.spans ? (1u << LINK_INTRA) | (1u << LINK_INTER) : 1u << LINK_INTRA;
		CU_ASSERT_EQUAL(k.latency_ns, f.latency_ns);
		CU_ASSERT_EQUAL(k.tree, f.tree);
		CU_ASSERT_EQUAL(k.wire, f.wire);
		CU_ASSERT_EQUAL(k.links, links);
		/* the slowest link the sim's collective crosses alone (a rail's cap included) is the rule's bandwidth */
		CU_ASSERT_EQUAL(fmin(fmin(links & (1u << LINK_INTRA) ? c.link_bytes_per_ns[LINK_INTRA] : INFINITY,
					  links & (1u << LINK_INTER) ? c.link_bytes_per_ns[LINK_INTER] : INFINITY),
				     k.cap > 0 ? k.cap : INFINITY), l.gbps);
		n++;
	}
	CU_ASSERT(n > 0);
	cost_release(&c);
	schedule_free(s);
	config_release(&e);
}

static void test_sim_prices_the_rule(void)
{
	sim_follows_rule("policy.sharding=fsdp", "policy.shard_group=16", "cluster.nodes=2");
	sim_follows_rule("policy.sharding=hsdp", "policy.shard_group=8", "cluster.nodes=2");
	sim_follows_rule("policy.sharding=ddp", "policy.shard_group=1", "cluster.nodes=2");
	sim_follows_rule("policy.sharding=zero2", "policy.shard_group=8", "cluster.nodes=1");
}

/* A record of the fabric the rule gives for s, as gpu_run's attributes would carry it. */
static void record_of(const struct schedule *s, struct fabric_record *r, int with_cuda)
{
	char v[64];

	fabric_record_init(r);
	CU_ASSERT(fabric_record_attr(r, "fabric", "emulated") == 1);
	snprintf(v, sizeof v, "%d", s->world);
	fabric_record_attr(r, "fabric.world", v);
	for (int g = GRP_SHARD; g < GRP_COUNT; g++) {
		struct fabric_link l;
		char k[64];
		if (schedule_group_size(s, g) < 2)
			continue;
		fabric_link_of(s, g, &l);
		snprintf(k, sizeof k, "fabric.%s.link_gbps", comm_group_name((enum comm_group)g));
		snprintf(v, sizeof v, "%.6g", l.gbps);
		fabric_record_attr(r, k, v);
		snprintf(k, sizeof k, "fabric.%s.step_latency_us", comm_group_name((enum comm_group)g));
		snprintf(v, sizeof v, "%.6g", l.step_lat_ns / 1e3);
		fabric_record_attr(r, k, v);
	}
	if (with_cuda) {
		fabric_record_attr(r, "fabric.engine", "sm");
		snprintf(v, sizeof v, "%d", s->exp->cluster.gpu.nccl_sms);
		fabric_record_attr(r, "fabric.ctas", v);
	}
}

static void test_record_check(void)
{
	struct experiment e;
	struct schedule *s = test_schedule(&e, "model.name=llama3-8b", "model.layers=2", "cluster.gpu=h100-sxm",
					   "cluster.nodes=2", "cluster.gpus_per_node=8", "policy.sharding=hsdp",
					   "policy.shard_group=8", NULL);
	struct fabric_record r;
	char err[512];

	CU_ASSERT_FATAL(s != NULL);
	/* a real fabric, and attributes that are not the fabric's */
	fabric_record_init(&r);
	CU_ASSERT(fabric_record_attr(&r, "fabric", "real") == 1);
	CU_ASSERT(fabric_record_attr(&r, "device.name", "NVIDIA H100 80GB HBM3") == 0);
	CU_ASSERT(fabric_record_attr(&r, "fabrics", "x") == 0);
	CU_ASSERT_EQUAL(fabric_record_check(&r, s, err, sizeof err), 0);
	/* the emulation of the rule's links, on the CPU and on CUDA */
	record_of(s, &r, 0);
	CU_ASSERT(r.emulated && r.world == 16 && r.link_gbps[GRP_REPLICA] > 0);
	CU_ASSERT_EQUAL(fabric_record_check(&r, s, err, sizeof err), 0);
	record_of(s, &r, 1);
	CU_ASSERT_EQUAL(fabric_record_check(&r, s, err, sizeof err), 0);
	/* each override is refused, saying which */
	record_of(s, &r, 1);
	fabric_record_attr(&r, "fabric.replica.link_gbps", "100");
	CU_ASSERT_EQUAL(fabric_record_check(&r, s, err, sizeof err), -1);
	CU_ASSERT(strstr(err, "replica link was 100 GB/s") && strstr(err, "--emulate-gbps"));
	record_of(s, &r, 1);
	fabric_record_attr(&r, "fabric.shard.step_latency_us", "50");
	CU_ASSERT_EQUAL(fabric_record_check(&r, s, err, sizeof err), -1);
	CU_ASSERT(strstr(err, "shard link") && strstr(err, "--emulate-lat-us"));
	record_of(s, &r, 1);
	fabric_record_attr(&r, "fabric.engine", "copy-engine (all-gather; reductions on SMs)");
	CU_ASSERT_EQUAL(fabric_record_check(&r, s, err, sizeof err), -1);
	CU_ASSERT(strstr(err, "--emulate-engine ce") != NULL);
	record_of(s, &r, 1);
	fabric_record_attr(&r, "fabric.ctas", "3");
	CU_ASSERT_EQUAL(fabric_record_check(&r, s, err, sizeof err), -1);
	CU_ASSERT(strstr(err, "held 3 SMs") != NULL);
	record_of(s, &r, 0);
	fabric_record_attr(&r, "fabric.world", "8");
	CU_ASSERT_EQUAL(fabric_record_check(&r, s, err, sizeof err), -1);
	CU_ASSERT(strstr(err, "rank 0 of 8 ranks") != NULL);
	/* collectives staged through host memory (several ranks on one GPU): never priced */
	fabric_record_init(&r);
	CU_ASSERT(fabric_record_attr(&r, "fabric", "staged") == 1);
	CU_ASSERT(r.staged && !r.emulated);
	CU_ASSERT_EQUAL(fabric_record_check(&r, s, err, sizeof err), -1);
	CU_ASSERT(strstr(err, "--staged-collectives") && strstr(err, "not compared"));
	schedule_free(s);
	config_release(&e);
}

void suite_fabric(void)
{
	CU_pSuite s = CU_add_suite("fabric", NULL, NULL);

	CU_add_test(s, "links of shard, replica and world rings", test_links);
	CU_add_test(s, "latency: ring steps, or a tree across nodes", test_latency);
	CU_add_test(s, "a step's bytes sent: each all-reduce as the algorithm picked", test_summary_wire);
	CU_add_test(s, "./sim prices every collective by the rule", test_sim_prices_the_rule);
	CU_add_test(s, "recorded fabrics: emulated ones checked, overrides and staged ones refused", test_record_check);
}
