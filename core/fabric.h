/*
 * fabric.h - the link a collective group's ring runs over, and the
 * latency of one of its collectives: one rule, which ./sim prices
 * (simulator/cost.c, cost_collective) and gpu_run's emulated fabric paces
 * (gpu/run/comm.c, --emulate-world), so that a run on the emulated fabric
 * moves at the pace the simulator's catalog prices for the N-rank job.
 *
 * A ring inside a node runs over the intra-node bus (NVLink) with its step
 * latency; a ring that crosses nodes with k of its members on each node
 * runs at the slower of the intra-node bus and its share of the node's
 * network, k / gpus_per_node of cluster.node_inter_gbps (NCCL runs a
 * channel through every NIC, and the node's other groups cross at once:
 * all of it for fsdp's and ddp's one group, a quarter for each of hsdp's
 * replica rings when shard groups of 2 cut a node of 8), with the
 * network's step latency; a ring with one member per node (hsdp's
 * replicas of a node-wide shard group, any group over nodes of one GPU)
 * runs NIC to NIC at its rail's rate (cluster.inter_gbps, per GPU). An all-gather or reduce-scatter over n
 * ranks takes n - 1 ring steps, an all-reduce 2 (n - 1), or, across nodes,
 * a double binary tree when its latency plus bytes is the smaller (NCCL's
 * tuner, src/graph/tuning.cc: 2 ceil(log2 n) steps, about 2 S sent).
 *
 * What a gpu_run run recorded of its emulated fabric (run attributes
 * fabric.*, gpu/run/README.md) is checked against the same rule before
 * ./sim --compare predicts it: a run whose links were overridden
 * (--emulate-gbps, --emulate-lat-us) or whose traffic held other SMs than
 * the simulator's collectives (--emulate-engine ce, --emulate-ctas) is not
 * what the simulator prices, and is refused with the reason; so is a run
 * whose collectives went through host memory and MPI (fabric = staged,
 * gpu_run --staged-collectives: several ranks on one GPU, its numbers
 * checked, its times no GPU job's).
 */
#ifndef CORE_FABRIC_H
#define CORE_FABRIC_H

#include "schedule.h"

struct fabric_link {
	int spans;          /* the ring crosses nodes */
	int only_inter;     /* one member per node: NIC to NIC, no intra-node hop */
	double gbps;        /* what the ring gets alone: the slowest link it crosses, GB/s (= bytes/ns) */
	double step_lat_ns; /* one ring step */
};

/* One collective on a link: its latency, the bytes each rank sends, and whether it is a tree. */
struct fabric_coll {
	double latency_ns;
	uint64_t wire;
	int tree;
};

/* The link of a collective of `group` (GRP_SHARD, GRP_REPLICA, GRP_WORLD) in schedule s. */
void fabric_link_of(const struct schedule *s, int group, struct fabric_link *out);

/*
 * A collective of kind k over n ranks of S bytes on link l: the ring (its
 * steps' latency, collective_wire_bytes), or for an all-reduce across
 * nodes the double binary tree when its latency plus 2 S at the link's
 * rate is the smaller.
 */
void fabric_collective(const struct fabric_link *l, enum op_kind k, int n, uint64_t S, struct fabric_coll *out);

/* What a run recorded of its fabric: gpu_run's run attributes fabric.* (zero: nothing recorded). */
struct fabric_record {
	int emulated;                  /* fabric = "emulated" */
	int staged;                    /* fabric = "staged": collectives through host memory and MPI */
	int world;                     /* fabric.world */
	double link_gbps[GRP_COUNT];   /* fabric.<group>.link_gbps, 0 when not recorded */
	double step_lat_us[GRP_COUNT]; /* fabric.<group>.step_latency_us, < 0 when not recorded */
	char engine[48];               /* fabric.engine (cuda): "sm" or the copy engine's */
	int ctas;                      /* fabric.ctas (cuda), 0 when not recorded */
};

void fabric_record_init(struct fabric_record *r);
/* One run attribute (name, value as text) into r when it is a fabric one; 1 if it was, else 0. */
int fabric_record_attr(struct fabric_record *r, const char *name, const char *value);

/*
 * 0 when what run r recorded is what ./sim prices for schedule s (a real
 * fabric, or an emulated one on every group's link of fabric_link_of,
 * with the traffic on the SMs the simulator's collectives hold); else -1
 * with the reason in err (a staged fabric always).
 */
int fabric_record_check(const struct fabric_record *r, const struct schedule *s, char *err, int errlen);

#endif
