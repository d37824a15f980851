/*
 * fabric.c - the links of the collective groups and their latency (see
 * fabric.h).
 */
#include "fabric.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fabric_link_of(const struct schedule *s, int group, struct fabric_link *out)
{
	const struct cluster *cl = &s->exp->cluster;
	const struct gpu_spec *g = &cl->gpu;
	int gpn = cl->gpus_per_node, per_node = gpn; /* the group's members on one node */

	memset(out, 0, sizeof(*out));
	switch (group) {
	case GRP_SHARD:
		out->spans = s->shard_spans_nodes;
		per_node = s->shard_n < gpn ? s->shard_n : gpn;
		break;
	case GRP_REPLICA:
		out->spans = cl->nodes > 1;
		/* ranks shard_n apart: gpn / shard_n on a node, or at most one */
		per_node = s->shard_n < gpn ? gpn / s->shard_n : 1;
		break;
	case GRP_WORLD:
		out->spans = cl->nodes > 1;
		break;
	default:
		assert(!"a collective without a group");
	}
	/* one member per node (a rail, or one GPU a node): the ring runs NIC to NIC, no NVLink hop */
	out->only_inter = out->spans && per_node == 1;
	/*
	 * more: every group of the node crosses the node's NICs at once (the
	 * same collective of the other groups, in step), each with its
	 * members' share of them: per_node / gpn of node_inter_gbps
	 */
	out->gbps = out->only_inter ? cl->inter_gbps
		    : out->spans    ? fmin(cl->intra_gbps, cl->node_inter_gbps * per_node / gpn)
				    : cl->intra_gbps;
	out->step_lat_ns = 1e3 * (out->spans ? g->net_latency_us : g->nvlink_latency_us);
}

void fabric_collective(const struct fabric_link *l, enum op_kind k, int n, uint64_t S, struct fabric_coll *out)
{
	memset(out, 0, sizeof(*out));
	if (n <= 1)
		return;
	out->wire = collective_wire_bytes(k, S, n);
	out->latency_ns = l->step_lat_ns * (k == OP_ALLREDUCE ? 2 * (n - 1) : n - 1);
	if (k == OP_ALLREDUCE && l->spans) {
		/* a double binary tree: up and down a tree of depth log2 n, each rank sending about 2 S */
		double lat = 2.0 * ceil(log2((double)n)) * l->step_lat_ns;
		if (lat + 2.0 * (double)S / l->gbps < out->latency_ns + (double)out->wire / l->gbps) {
			out->latency_ns = lat;
			out->wire = 2 * S;
			out->tree = 1;
		}
	}
}

void fabric_record_init(struct fabric_record *r)
{
	memset(r, 0, sizeof(*r));
	for (int g = 0; g < GRP_COUNT; g++)
		r->step_lat_us[g] = -1;
}

/* The group of a fabric.<group>.* attribute name, or -1. */
static int group_of(const char *name, const char **rest)
{
	for (int g = GRP_SHARD; g < GRP_COUNT; g++) {
		const char *n = comm_group_name((enum comm_group)g);
		size_t len = strlen(n);
		if (!strncmp(name, n, len) && name[len] == '.') {
			*rest = name + len + 1;
			return g;
		}
	}
	return -1;
}

int fabric_record_attr(struct fabric_record *r, const char *name, const char *value)
{
	const char *rest;
	int g;

	if (strcmp(name, "fabric") && strncmp(name, "fabric.", 7))
		return 0;
	if (!strcmp(name, "fabric")) {
		r->emulated = !strcmp(value, "emulated");
		r->staged = !strcmp(value, "staged");
	} else if (!strcmp(name, "fabric.world")) {
		r->world = atoi(value);
	} else if (!strcmp(name, "fabric.engine")) {
		snprintf(r->engine, sizeof r->engine, "%s", value);
	} else if (!strcmp(name, "fabric.ctas")) {
		r->ctas = atoi(value);
	} else if ((g = group_of(name + 7, &rest)) >= 0) {
		if (!strcmp(rest, "link_gbps"))
			r->link_gbps[g] = strtod(value, NULL);
		else if (!strcmp(rest, "step_latency_us"))
			r->step_lat_us[g] = strtod(value, NULL);
	}
	return 1;
}

/* a and b agree to the 6 significant digits a run attribute holds ("%.6g") */
static int same6(double a, double b)
{
	return fabs(a - b) <= 1e-5 * fmax(fabs(a), fabs(b));
}

int fabric_record_check(const struct fabric_record *r, const struct schedule *s, char *err, int errlen)
{
	const struct gpu_spec *gpu = &s->exp->cluster.gpu;

	if (r->staged) {
		snprintf(err, errlen, "its collectives went through host memory and MPI (gpu_run --staged-collectives: "
				      "several ranks on one GPU), which checks a run's numbers, not its time: not compared");
		return -1;
	}
	if (!r->emulated)
		return 0;
	if (r->world && r->world != s->world) {
		snprintf(err, errlen, "emulated as rank 0 of %d ranks, but its cluster has %d", r->world, s->world);
		return -1;
	}
	for (int g = GRP_SHARD; g < GRP_COUNT; g++) {
		struct fabric_link l;
		if (r->link_gbps[g] <= 0 && r->step_lat_us[g] < 0)
			continue;
		fabric_link_of(s, g, &l);
		if (!same6(r->link_gbps[g], l.gbps) || !same6(r->step_lat_us[g], l.step_lat_ns / 1e3)) {
			snprintf(err, errlen, "measured on an emulated fabric whose %s link was %.6g GB/s and %.6g us "
					      "per ring step (--emulate-gbps, --emulate-lat-us), not the cluster's "
					      "%.6g GB/s and %.6g us that ./sim prices: not compared",
				 comm_group_name((enum comm_group)g), r->link_gbps[g], r->step_lat_us[g], l.gbps,
				 l.step_lat_ns / 1e3);
			return -1;
		}
	}
	if (r->engine[0] && strcmp(r->engine, "sm")) {
		snprintf(err, errlen, "measured on an emulated fabric whose all-gathers ran on the copy engine "
				      "(--emulate-engine ce), while ./sim's collectives hold SMs: not compared");
		return -1;
	}
	if (r->ctas && r->ctas != gpu->nccl_sms) {
		snprintf(err, errlen, "measured on an emulated fabric whose traffic held %d SMs (--emulate-ctas), "
				      "while ./sim's collectives hold %s's nccl_sms = %d: not compared",
			 r->ctas, gpu->name, gpu->nccl_sms);
		return -1;
	}
	return 0;
}
