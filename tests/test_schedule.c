/*
 * test_schedule.c - the op graph of a step: exact bytes per policy, counts
 * and order of collectives, buffer lifetimes, invariants of every graph.
 */
#include <CUnit/CUnit.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "recipe.h"
#include "schedule.h"
#include "testutil.h"

static void done(struct schedule *s, struct experiment *e)
{
	schedule_free(s);
	config_release(e);
}

static uint64_t wire(const struct schedule *s, enum op_kind k)
{
	uint64_t t = 0;
	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == k)
			t += collective_wire_bytes(k, s->ops[i].bytes, schedule_group_size(s, s->ops[i].group));
	return t;
}

/* Invariants every schedule keeps (schedule.h). */
static void check_invariants(const struct schedule *s)
{
	char err[256];
	int rc = schedule_check(s, err, sizeof(err));

	if (rc != 0)
		fprintf(stderr, "schedule_check: %s\n", err);
	CU_ASSERT_EQUAL(rc, 0);
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		for (uint32_t d = 0; d < o->ndeps; d++)
			CU_ASSERT(s->deps[o->dep_first + d] < (uint32_t)i);
	}
	for (int b = 0; b < s->nbufs; b++) {
		const struct buffer *x = &s->bufs[b];
		/* what the step allocates, it frees, after allocating it; but what the first step makes once */
		if (x->once) {
			CU_ASSERT(x->alloc_op >= 0 && x->free_op == -1 && x->kind == BUF_OPTIM_STATE);
		} else if (x->alloc_op >= 0) {
			CU_ASSERT(x->free_op >= x->alloc_op);
		} else {
			CU_ASSERT_EQUAL(x->free_op, -1);
		}
	}
}

#define LLAMA8B_2x8 "model.name=llama3-8b", "cluster.gpu=h100-sxm", "cluster.nodes=2", "cluster.gpus_per_node=8"

static void test_fsdp_moves_one_and_a_half_ddp(void)
{
	struct experiment e1, e2;
	/* block+io: every unit is resharded after forward, so every parameter is gathered twice */
	struct schedule *f = test_schedule(&e1, LLAMA8B_2x8, "policy.sharding=fsdp", "policy.reduce_dtype=bf16",
				   "policy.wrap=block+io", NULL);
	struct schedule *d = test_schedule(&e2, LLAMA8B_2x8, "policy.sharding=ddp", "policy.reduce_dtype=bf16", NULL);
	uint64_t P = 8030261248ull, fs = wire(f, OP_ALLGATHER) + wire(f, OP_REDUCE_SCATTER);
	uint64_t dd = wire(d, OP_ALLREDUCE);

	/* ddp all-reduces 2 (n-1)/n of the bf16 gradient; fsdp gathers twice and reduce-scatters once */
	CU_ASSERT_EQUAL(dd, 2 * (2 * P / 16 * 15));
	CU_ASSERT_EQUAL(2 * fs, 3 * dd);
	CU_ASSERT_EQUAL(wire(f, OP_ALLREDUCE), 0);
	CU_ASSERT_EQUAL(wire(d, OP_ALLGATHER) + wire(d, OP_REDUCE_SCATTER), 0);
	check_invariants(f);
	check_invariants(d);
	done(f, &e1);
	done(d, &e2);
}

static void test_sync_each_multiplies_reduce_scatter(void)
{
	struct experiment e1, e2, e3;
	struct schedule *se = test_schedule(&e1, LLAMA8B_2x8, "policy.microbatches=4", "policy.accum=sync-each", NULL);
	struct schedule *ns = test_schedule(&e2, LLAMA8B_2x8, "policy.microbatches=4", "policy.accum=no-sync", NULL);
	struct schedule *one = test_schedule(&e3, LLAMA8B_2x8, "policy.microbatches=1", NULL);

	CU_ASSERT_EQUAL(schedule_bytes_of(se, OP_REDUCE_SCATTER), 4 * schedule_bytes_of(ns, OP_REDUCE_SCATTER));
	CU_ASSERT_EQUAL(schedule_bytes_of(ns, OP_REDUCE_SCATTER), schedule_bytes_of(one, OP_REDUCE_SCATTER));
	/* gathers do not depend on the accumulation policy */
	CU_ASSERT_EQUAL(schedule_bytes_of(se, OP_ALLGATHER), schedule_bytes_of(ns, OP_ALLGATHER));
	check_invariants(se);
	check_invariants(ns);
	done(se, &e1);
	done(ns, &e2);
	done(one, &e3);
}

static void test_model_state_bytes(void)
{
	struct experiment e1, e2, e3;
	struct schedule *m = test_schedule(&e1, LLAMA8B_2x8, NULL);
	struct schedule *b = test_schedule(&e2, LLAMA8B_2x8, "policy.precision=pure-bf16", NULL);
	struct schedule *d = test_schedule(&e3, LLAMA8B_2x8, "policy.sharding=ddp", NULL);
	uint64_t st[MEM_CAT_COUNT], P = 8030261248ull;

	/* mixed precision: fp32 master shard (4) and two fp32 moments (8), over 16 ranks */
	schedule_static_bytes(m, st);
	CU_ASSERT_EQUAL(st[MEM_SHARDED_PARAMS], 4 * P / 16);
	CU_ASSERT_EQUAL(st[MEM_OPTIM_STATE], 8 * P / 16);
	/* pure bf16: 2 + 4 */
	schedule_static_bytes(b, st);
	CU_ASSERT_EQUAL(st[MEM_SHARDED_PARAMS], 2 * P / 16);
	CU_ASSERT_EQUAL(st[MEM_OPTIM_STATE], 4 * P / 16);
	/* ddp replicates everything */
	schedule_static_bytes(d, st);
	CU_ASSERT_EQUAL(st[MEM_SHARDED_PARAMS] + st[MEM_OPTIM_STATE], 12 * P);
	done(m, &e1);
	done(b, &e2);
	done(d, &e3);
}

/* The collectives of a step, in issue order, as a string like "AG AG AG RS ...". */
static void collective_order(const struct schedule *s, char *buf, int len)
{
	int n = 0;
	buf[0] = 0;
	for (int i = 0; i < s->nops && n < len - 4; i++) {
		const char *k = s->ops[i].kind == OP_ALLGATHER ? "AG" : s->ops[i].kind == OP_REDUCE_SCATTER ? "RS"
			      : s->ops[i].kind == OP_ALLREDUCE ? "AR" : NULL;
		if (k)
			n += snprintf(buf + n, len - n, "%s%s%d", n ? " " : "", k, s->ops[i].unit);
	}
}

static void test_collective_order(void)
{
	struct experiment e;
	char order[512];
	struct schedule *s;

	/* tiny: root unit 0 (embedding, head), blocks 1 and 2; prefetch 1 */
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", NULL);
	collective_order(s, order, sizeof(order));
	CU_ASSERT_STRING_EQUAL(order, "AG0 AG1 AG2 AG2 AG1 RS2 RS1 RS0");
	check_invariants(s);
	done(s, &e);

	/* zero2 keeps the gathered params from forward to backward */
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.sharding=zero2", NULL);
	collective_order(s, order, sizeof(order));
	CU_ASSERT_STRING_EQUAL(order, "AG0 AG1 AG2 RS2 RS1 RS0");
	done(s, &e);

	/* all-but-last: the last block is not gathered again */
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.reshard=all-but-last", NULL);
	collective_order(s, order, sizeof(order));
	CU_ASSERT_STRING_EQUAL(order, "AG0 AG1 AG2 AG1 RS2 RS1 RS0");
	done(s, &e);

	/* block+io: embedding and output units of their own, both resharded */
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.wrap=block+io", NULL);
	collective_order(s, order, sizeof(order));
	CU_ASSERT_STRING_EQUAL(order, "AG0 AG1 AG2 AG3 AG3 AG2 RS3 AG1 RS2 AG0 RS1 RS0");
	CU_ASSERT_EQUAL(s->nunits, 4);
	done(s, &e);

	/* hsdp: every reduce-scatter is followed by an all-reduce across replicas */
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=2", "cluster.gpus_per_node=2", "policy.sharding=hsdp", NULL);
	collective_order(s, order, sizeof(order));
	CU_ASSERT_STRING_EQUAL(order, "AG0 AG1 AG2 AG2 AG1 RS2 AR2 RS1 AR1 RS0 AR0");
	CU_ASSERT_EQUAL(s->shard_n, 2);
	CU_ASSERT_EQUAL(s->replica_n, 2);
	done(s, &e);
}

static void test_accumulation_counts(void)
{
	struct experiment e;
	struct schedule *s;

	/* hsdp, 3 microbatches: sync-each all-reduces every microbatch, defer-replica once */
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=2", "cluster.gpus_per_node=2", "policy.sharding=hsdp",
		  "policy.microbatches=3", "policy.accum=sync-each", NULL);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_REDUCE_SCATTER), 9);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_ALLREDUCE), 9);
	check_invariants(s);
	done(s, &e);
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=2", "cluster.gpus_per_node=2", "policy.sharding=hsdp",
		  "policy.microbatches=3", "policy.accum=defer-replica", NULL);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_REDUCE_SCATTER), 9);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_ALLREDUCE), 3);
	check_invariants(s);
	done(s, &e);

	/* partial:2 over 4 blocks, 2 microbatches: blocks 1 and 3 reduce once, the rest twice */
	s = test_schedule(&e, "model.name=tiny", "model.layers=4", "cluster.nodes=1", "cluster.gpus_per_node=2",
		  "policy.microbatches=2", "policy.accum=partial:2", NULL);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_REDUCE_SCATTER), 3 * 2 + 2 * 1);
	/* ... the units of blocks 1 and 3 (every second block, counting from 1) defer and keep a full gradient */
	for (int u = 0; u < s->nunits; u++) {
		const struct unit *x = &s->units[u];
		int blk = s->segs[x->last_seg].block, defers = !x->is_root && blk >= 0 && blk % 2 == 1;
		CU_ASSERT_EQUAL(x->defer_sync, defers);
		CU_ASSERT_EQUAL(x->accumulates_full, defers);
	}
	check_invariants(s);
	done(s, &e);

	/* no-sync over two microbatches: every unit keeps its full gradient from the first to the second */
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.microbatches=2",
			  "policy.accum=no-sync", NULL);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_REDUCE_SCATTER), s->nunits);
	for (int u = 0; u < s->nunits; u++)
		CU_ASSERT(s->units[u].accumulates_full);
	done(s, &e);
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.microbatches=2",
			  NULL);
	for (int u = 0; u < s->nunits; u++)
		CU_ASSERT(!s->units[u].accumulates_full);
	done(s, &e);

	/*
	 * zero2 keeps a unit's gathered parameters from its backward to the
	 * next microbatch's forward while it does not reduce (FSDP1's
	 * _should_free_in_backward): under no-sync each unit is gathered once
	 * a step and freed once, after the last backward; sync-each gathers
	 * every microbatch, and so does FSDP2 (the pytorch runtime), which
	 * reshards after backward whatever the sync; fsdp gathers twice a
	 * microbatch
	 */
	{
		/* (fsdp with reshard no is zero2 by another name) */
		static const struct { const char *sharding, *accum, *runtime; int gathers; } z[] = {
			{ "policy.sharding=zero2", "policy.accum=no-sync", "policy.runtime=testbed", 1 },
			{ "policy.sharding=zero2", "policy.accum=sync-each", "policy.runtime=testbed", 3 },
			{ "policy.sharding=zero2", "policy.accum=no-sync", "policy.runtime=pytorch", 3 },
			{ "policy.sharding=fsdp", "policy.accum=no-sync", "policy.runtime=testbed", 6 },
			{ "policy.sharding=fsdp", "policy.accum=no-sync", "policy.reshard=no", 1 },
		};
		for (size_t k = 0; k < sizeof z / sizeof z[0]; k++) {
			int full = 0, freed_last = 0;
			s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2",
					  "policy.microbatches=3", z[k].sharding, z[k].accum, z[k].runtime, NULL);
			for (int i = 0; i < s->nbufs; i++)
				if (s->bufs[i].kind == BUF_FULL_PARAM) {
					full++;
					freed_last += s->bufs[i].free_op >= 0 && s->ops[s->bufs[i].free_op].micro == 2;
				}
			/* every non-root unit under fsdp's reshard, the root kept to its backward */
			CU_ASSERT_EQUAL(schedule_count_of(s, OP_ALLGATHER),
					z[k].gathers == 6 ? 3 * (2 * s->nunits - 1) : z[k].gathers * s->nunits);
			if (z[k].gathers == 1) /* one gathered buffer a unit, freed in the last microbatch */
				CU_ASSERT(full == s->nunits && freed_last == s->nunits);
			check_invariants(s);
			done(s, &e);
		}
	}

	/* optimizer: one foreach step, one per unit per-param, one per unit in backward */
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", NULL);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_OPTIM), 1);
	done(s, &e);
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.optim=per-param", NULL);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_OPTIM), 3);
	done(s, &e);
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.optim_in_backward=true", NULL);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_OPTIM), 3);
	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == OP_OPTIM)
			CU_ASSERT_EQUAL(s->ops[i].stream, ST_REDUCE_SCATTER);
	check_invariants(s);
	done(s, &e);
}

static void test_concat_last_only(void)
{
	struct experiment e1, e2;
	struct schedule *a = test_schedule(&e1, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2",
				   "policy.microbatches=4", "policy.accum=no-sync", "policy.flat_params=true", NULL);
	struct schedule *b = test_schedule(&e2, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2",
				   "policy.microbatches=4", "policy.accum=no-sync", "policy.flat_params=true",
				   "policy.concat_last_only=true", NULL);

	/* three units, four microbatches: concatenate every time, or only on the last */
	CU_ASSERT_EQUAL(schedule_count_of(a, OP_CONCAT), 12);
	CU_ASSERT_EQUAL(schedule_count_of(b, OP_CONCAT), 3);
	/*
	 * the bytes: the first microbatch copies the gradients in (read, write),
	 * a later one adds them to the flat gradient kept (read both, write);
	 * concatenating on the last only copies them in once
	 */
	for (int i = 0; i < a->nops; i++)
		if (a->ops[i].kind == OP_CONCAT)
			CU_ASSERT_EQUAL(a->ops[i].bytes,
					(a->ops[i].micro > 0 ? 3 : 2) * a->units[a->ops[i].unit].full_grad_bytes);
	for (int i = 0; i < b->nops; i++)
		if (b->ops[i].kind == OP_CONCAT)
			CU_ASSERT_EQUAL(b->ops[i].bytes, 2 * b->units[b->ops[i].unit].full_grad_bytes);
	done(a, &e1);
	done(b, &e2);
}

/*
 * PyTorch (a tensor per parameter) under no-sync: autograd adds a later
 * microbatch's gradient into the one kept, an accumulation op per unit and
 * later microbatch that reads both and writes one.
 */
static void test_pytorch_accumulation_bytes(void)
{
	struct experiment e;
	struct schedule *s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2",
					   "policy.runtime=pytorch", "policy.microbatches=3", "policy.accum=no-sync", NULL);
	int n = 0;

	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == OP_ACCUM) {
			CU_ASSERT(s->ops[i].micro > 0);
			CU_ASSERT_EQUAL(s->ops[i].bytes, 3 * s->units[s->ops[i].unit].full_grad_bytes);
			n++;
		}
	CU_ASSERT_EQUAL(n, 2 * s->nunits);
	done(s, &e);
}

/*
 * The sharded gradient is kept in the accumulation dtype, whatever the
 * reduce dtype (FSDP2's foreach_reduce casts each reduced shard to the
 * sharded parameter's dtype and adds it there). Mixed precision with a
 * bf16 reduce: every unit's reduce-scatter writes a bf16 shard, which the
 * first microbatch casts into an fp32 gradient (a copy on the
 * reduce-scatter stream reading 2 and writing 4 bytes an element) and the
 * second adds into it (2 + 2 x 4 bytes an element); the optimizer and the
 * offloaded host gradient take 4 bytes an element. With accum_dtype bf16
 * nothing is cast and the sum is the reduce-scatter's own buffer. HSDP's
 * deferred replica reduction adds in bf16, all-reduces in bf16, then casts
 * once.
 */
static void test_sharded_grad_in_accum_dtype(void)
{
	const char *const accum[2] = { "policy.accum_dtype=fp32", "policy.accum_dtype=bf16" };

	for (int a = 0; a < 2; a++) {
		struct experiment e;
		struct schedule *s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2",
						   "policy.precision=mixed", "policy.reduce_dtype=bf16", accum[a],
						   "policy.microbatches=2", "policy.accum=sync-each", NULL);
		int db = a == 0 ? 4 : 2, casts = 0, accums = 0;
		for (int i = 0; i < s->nops; i++) {
			const struct op *o = &s->ops[i];
			uint64_t n = o->unit >= 0 ? s->units[o->unit].shard_elems : 0;
			int g = op_operand(s, i, BUF_SHARD_GRAD, OPD_INOUT), in = op_operand(s, i, BUF_RS_OUT, OPD_INOUT);
			if (o->kind == OP_REDUCE_SCATTER) {
				int out = op_operand(s, i, a == 0 || o->micro > 0 ? BUF_RS_OUT : BUF_SHARD_GRAD, OPD_OUT);
				CU_ASSERT_FATAL(out >= 0);
				CU_ASSERT_EQUAL(s->bufs[out].elem, ELEM_BF16);
				CU_ASSERT_EQUAL(s->bufs[out].bytes, 2 * n);
			} else if (o->kind == OP_COPY && o->stream == ST_REDUCE_SCATTER) {
				CU_ASSERT_EQUAL(o->micro, 0);
				CU_ASSERT_FATAL(g >= 0 && in >= 0);
				CU_ASSERT_EQUAL(s->bufs[g].elem, ELEM_FP32);
				CU_ASSERT_EQUAL(s->bufs[g].bytes, 4 * n);
				CU_ASSERT_EQUAL(s->bufs[g].cat, MEM_SHARDED_GRADS);
				CU_ASSERT_EQUAL(o->bytes, 6 * n);
				casts++;
			} else if (o->kind == OP_ACCUM) {
				CU_ASSERT_EQUAL(o->micro, 1);
				CU_ASSERT_FATAL(g >= 0);
				CU_ASSERT_EQUAL(s->bufs[g].bytes, (uint64_t)db * n);
				CU_ASSERT_EQUAL(o->bytes, (2 + 2 * (uint64_t)db) * n);
				accums++;
			}
		}
		CU_ASSERT_EQUAL(casts, a == 0 ? s->nunits : 0);
		CU_ASSERT_EQUAL(accums, s->nunits);
		check_invariants(s);
		done(s, &e);
	}

	/* the optimizer reads, and offload copies to the host, the gradient in the accumulation dtype */
	for (int a = 0; a < 2; a++) {
		struct experiment e;
		struct schedule *s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2",
						   "policy.precision=mixed", "policy.reduce_dtype=bf16", accum[a],
						   "policy.offload=optim", NULL);
		int h = 0;
		for (int i = 0; i < s->nbufs; i++)
			if (s->bufs[i].kind == BUF_HOST_GRAD) {
				CU_ASSERT_EQUAL(s->bufs[i].bytes, (a == 0 ? 4 : 2) * s->units[s->bufs[i].unit].shard_elems);
				CU_ASSERT_EQUAL(s->bufs[i].elem, a == 0 ? ELEM_FP32 : ELEM_BF16);
				h++;
			}
		CU_ASSERT_EQUAL(h, s->nunits);
		check_invariants(s);
		done(s, &e);
	}

	/* hsdp, the replica reduction deferred: bf16 sums, a bf16 all-reduce, one cast after it */
	{
		struct experiment e;
		struct schedule *s = test_schedule(&e, "model.name=tiny", "cluster.nodes=2", "cluster.gpus_per_node=2",
						   "policy.sharding=hsdp", "policy.precision=mixed", "policy.reduce_dtype=bf16",
						   "policy.microbatches=3", "policy.accum=defer-replica", NULL);
		int casts = 0;
		for (int i = 0; i < s->nops; i++) {
			const struct op *o = &s->ops[i];
			uint64_t n = o->unit >= 0 ? s->units[o->unit].shard_elems : 0;
			if (o->kind == OP_ACCUM)
				CU_ASSERT_EQUAL(o->bytes, 6 * n);
			if (o->kind == OP_ALLREDUCE) {
				CU_ASSERT_EQUAL(o->micro, 2);
				CU_ASSERT_EQUAL(o->bytes, 2 * n);
				CU_ASSERT_EQUAL(s->bufs[op_operand(s, i, BUF_SHARD_GRAD, OPD_INOUT)].elem, ELEM_BF16);
			}
			if (o->kind == OP_COPY) {
				int g = op_operand(s, i, BUF_SHARD_GRAD, OPD_OUT);
				CU_ASSERT_EQUAL(o->stream, ST_ALLREDUCE);
				CU_ASSERT_EQUAL(o->micro, 2);
				CU_ASSERT_FATAL(g >= 0);
				CU_ASSERT_EQUAL(s->bufs[g].elem, ELEM_FP32);
				CU_ASSERT_EQUAL(s->bufs[g].bytes, 4 * n);
				CU_ASSERT(i > 0 && s->ops[i - 1].kind == OP_ALLREDUCE && s->ops[i - 1].unit == o->unit);
				casts++;
			}
		}
		CU_ASSERT_EQUAL(casts, s->nunits);
		check_invariants(s);
		done(s, &e);
	}
}

static void test_every_policy_is_well_formed(void)
{
	static const char *const shard[] = { "policy.sharding=ddp", "policy.sharding=fsdp", "policy.sharding=zero2",
					     "policy.sharding=hsdp" };
	static const char *const acc[] = { "policy.accum=sync-each", "policy.accum=no-sync", "policy.accum=partial:2" };
	static const char *const wrap[] = { "policy.wrap=block", "policy.wrap=block+io", "policy.wrap=whole",
					    "policy.wrap=every:2" };
	static const char *const off[] = { "policy.offload=none", "policy.offload=optim", "policy.offload=params" };
	int built = 0;

	for (int a = 0; a < 4; a++)
		for (int b = 0; b < 3; b++)
			for (int c = 0; c < 4; c++)
				for (int d = 0; d < 3; d++) {
					struct experiment e;
					char err[256];
					struct schedule *s;
					if (a == 0 && d > 0)
						continue; /* ddp does not offload */
					config_init(&e);
					config_set(&e, "model.name=tiny", "t");
					config_set(&e, "model.layers=4", "t");
					config_set(&e, "cluster.nodes=2", "t");
					config_set(&e, "cluster.gpus_per_node=2", "t");
					config_set(&e, "policy.microbatches=2", "t");
					config_set(&e, shard[a], "t");
					config_set(&e, acc[b], "t");
					config_set(&e, wrap[c], "t");
					config_set(&e, off[d], "t");
					config_set(&e, "policy.ac=full", "t");
					CU_ASSERT_FATAL(config_resolve(&e) == 0);
					s = schedule_new(&e, err, sizeof(err));
					CU_ASSERT_PTR_NOT_NULL_FATAL(s);
					check_invariants(s);
					built++;
					done(s, &e);
				}
	CU_ASSERT_EQUAL(built, 4 * 3 * 4 * 3 - 3 * 4 * 2);
}

/* The operand of op i of kind k (any role), or -1. */
static int operand(const struct schedule *s, int i, enum buf_kind k)
{
	return op_operand(s, i, k, OPD_INOUT);
}

/* The first op of a kind on segment seg (-1: any) in microbatch 0. */
static int first_op(const struct schedule *s, enum op_kind k, int seg)
{
	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == k && (seg < 0 || s->ops[i].seg == seg))
			return i;
	return -1;
}

static void test_operands_name_the_memory(void)
{
	struct experiment e;
	struct schedule *s;
	int f, b, p, rs, g, opt, n;

	/* fsdp: block 0's forward reads the params its all-gather wrote, writes its activations */
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.precision=fp32", NULL);
	f = first_op(s, OP_FORWARD, 1);
	p = operand(s, f, BUF_FULL_PARAM);
	CU_ASSERT_FATAL(p >= 0);
	CU_ASSERT_EQUAL(s->ops[s->bufs[p].alloc_op].kind, OP_ALLGATHER);
	CU_ASSERT_EQUAL(op_operand(s, s->bufs[p].alloc_op, BUF_FULL_PARAM, OPD_OUT), p);
	CU_ASSERT(op_operand(s, f, BUF_ACTS, OPD_OUT) >= 0);
	CU_ASSERT(op_operand(s, f, BUF_RESIDUAL, OPD_INOUT) >= 0);
	/* its backward reads them back and adds into the unit's zeroed gradient */
	b = first_op(s, OP_BACKWARD, 1);
	CU_ASSERT_EQUAL(op_operand(s, b, BUF_ACTS, OPD_IN), op_operand(s, f, BUF_ACTS, OPD_OUT));
	g = op_operand(s, b, BUF_FULL_GRAD, OPD_INOUT);
	CU_ASSERT_FATAL(g >= 0);
	CU_ASSERT(s->bufs[g].zero);
	/* the reduce-scatter reads that gradient (flat shards: no copy-in) and writes the shard */
	rs = s->bufs[g].free_op;
	CU_ASSERT_EQUAL(s->ops[rs].kind, OP_REDUCE_SCATTER);
	CU_ASSERT_EQUAL(op_operand(s, rs, BUF_FULL_GRAD, OPD_IN), g);
	CU_ASSERT(op_operand(s, rs, BUF_SHARD_GRAD, OPD_OUT) >= 0);
	/* flat shards span the unit's padding: the gradient is n shards long */
	CU_ASSERT_EQUAL(s->bufs[g].bytes, 4 * s->units[s->ops[b].unit].shard_elems * 2);
	/* the optimizer after backward: parameters, gradient and moments of every unit */
	opt = first_op(s, OP_OPTIM, -1);
	n = 0;
	for (int k = 0; k < s->ops[opt].nopd; k++) {
		enum buf_kind bk = s->bufs[s->opds[s->ops[opt].opd_first + k].buf].kind;
		n += bk == BUF_SHARD_PARAM || bk == BUF_SHARD_GRAD || bk == BUF_OPTIM_STATE;
	}
	CU_ASSERT_EQUAL(n, 3 * s->nunits);
	done(s, &e);

	/* ddp: the full params are the shard itself (an alias, no memory of its own) */
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.sharding=ddp", NULL);
	p = operand(s, first_op(s, OP_FORWARD, 1), BUF_FULL_PARAM);
	CU_ASSERT_FATAL(p >= 0);
	CU_ASSERT(s->bufs[p].alias_of >= 0 && s->bufs[s->bufs[p].alias_of].kind == BUF_SHARD_PARAM);
	CU_ASSERT_EQUAL(s->bufs[p].bytes, 0);
	CU_ASSERT_EQUAL(first_op(s, OP_ALLGATHER, -1), -1);
	done(s, &e);

	/* pytorch: gathers land in a flat buffer that the copy-out unpacks */
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.runtime=pytorch", NULL);
	p = op_operand(s, first_op(s, OP_ALLGATHER, -1), BUF_GATHER_OUT, OPD_OUT);
	CU_ASSERT_FATAL(p >= 0);
	CU_ASSERT_EQUAL(s->ops[s->bufs[p].free_op].kind, OP_COPY_OUT);
	CU_ASSERT_EQUAL(op_operand(s, s->bufs[p].free_op, BUF_GATHER_OUT, OPD_IN), p);
	done(s, &e);

	/* offload params: the master comes from the host into a stage the gather reads */
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.offload=params", NULL);
	g = first_op(s, OP_ALLGATHER, -1);
	p = op_operand(s, g, BUF_HOST_STAGE, OPD_IN);
	CU_ASSERT_FATAL(p >= 0);
	CU_ASSERT_EQUAL(s->ops[s->bufs[p].alloc_op].kind, OP_H2D);
	CU_ASSERT(s->bufs[op_operand(s, s->bufs[p].alloc_op, BUF_HOST_MASTER, OPD_IN)].host);
	check_invariants(s);
	done(s, &e);
}

/*
 * FSDP2's reduce-scatter input (foreach_reduce, _fsdp_param_group.py): the
 * compute stream allocates and fills it, and keeps it until the next
 * unit's reduce or the end of backward, when it waits for that
 * reduce-scatter and drops it. The testbed's cast to the reduce dtype runs
 * on the reduce-scatter stream, which frees it as it reads it.
 */
static void test_reduce_scatter_input_lifetime(void)
{
	struct experiment e;
	struct schedule *s;
	int n = 0, last_free = -1;

	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.runtime=pytorch",
			  "policy.reduce_dtype=fp32", "policy.microbatches=2", "policy.accum=sync-each", NULL);
	check_invariants(s);
	for (int b = 0; b < s->nbufs; b++) {
		const struct buffer *x = &s->bufs[b];
		int rs, alive = 0;

		if (x->kind != BUF_RS_IN)
			continue;
		n++;
		CU_ASSERT_EQUAL(s->ops[x->alloc_op].kind, OP_COPY_IN);
		CU_ASSERT_EQUAL(s->ops[x->alloc_op].stream, ST_COMPUTE);
		rs = x->alloc_op + 1;
		CU_ASSERT_EQUAL_FATAL(s->ops[rs].kind, OP_REDUCE_SCATTER);
		CU_ASSERT_EQUAL(op_operand(s, rs, BUF_RS_IN, OPD_IN), b);
		/* dropped by the compute stream once that reduce-scatter is done */
		CU_ASSERT_EQUAL(s->ops[x->free_op].kind, OP_FREE);
		CU_ASSERT_EQUAL(s->ops[x->free_op].stream, ST_COMPUTE);
		CU_ASSERT(schedule_happens_before(s, rs, x->free_op));
		CU_ASSERT_EQUAL(s->ops[x->free_op].micro, s->ops[rs].micro);
		/* ... just before the next copy-in, or at the end of its microbatch's backward */
		CU_ASSERT(s->ops[x->free_op + 1].kind == OP_COPY_IN || x->free_op + 1 == s->nops ||
			  s->ops[x->free_op + 1].micro != s->ops[rs].micro || s->ops[x->free_op + 1].kind == OP_OPTIM);
		/* one held at a time */
		CU_ASSERT(x->alloc_op > last_free);
		last_free = x->free_op;
		for (int c = 0; c < s->nbufs; c++)
			alive += s->bufs[c].kind == BUF_RS_IN && s->bufs[c].alloc_op <= x->alloc_op &&
				 s->bufs[c].free_op > x->alloc_op;
		CU_ASSERT_EQUAL(alive, 1);
	}
	/* a reduce per unit and microbatch (sync-each) */
	CU_ASSERT_EQUAL(n, 2 * s->nunits);
	done(s, &e);

	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.reduce_dtype=fp32",
			  NULL);
	n = 0;
	for (int b = 0; b < s->nbufs; b++) {
		const struct buffer *x = &s->bufs[b];

		if (x->kind != BUF_RS_IN)
			continue;
		n++;
		CU_ASSERT_EQUAL(s->ops[x->alloc_op].stream, ST_REDUCE_SCATTER);
		CU_ASSERT_EQUAL(s->ops[x->free_op].kind, OP_REDUCE_SCATTER);
	}
	CU_ASSERT_EQUAL(n, s->nunits);
	done(s, &e);
}

/*
 * FSDP2's gathered buffers (the pytorch runtime's copy-outs): in forward a
 * unit's is alive until the next unit's copy-out, so a gather finds the
 * one before it alive; in backward pre_backward copies the unit's
 * parameters out, freeing its gathered buffer, and only then prefetches the
 * next unit, whose all-gather waits for that copy-out: a gather finds none
 * alive. (The gather order itself is checked against FSDP2 by
 * experiments/pytorch/attach_schedule.py.)
 */
static void test_gathered_buffer_lifetime(void)
{
	struct experiment e;
	struct schedule *s;
	int in_backward = 0, fwd = 0, bwd = 0;

	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.runtime=pytorch",
			  "policy.microbatches=1", NULL);
	check_invariants(s);
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		int alive = 0, own = -1;

		in_backward |= o->kind == OP_BACKWARD;
		if (o->kind != OP_ALLGATHER)
			continue;
		own = op_operand(s, i, BUF_GATHER_OUT, OPD_OUT);
		CU_ASSERT_FATAL(own >= 0);
		for (int c = 0; c < s->nbufs; c++)
			alive += c != own && s->bufs[c].kind == BUF_GATHER_OUT && s->bufs[c].alloc_op < i &&
				 s->bufs[c].free_op > i;
		if (!in_backward) {
			CU_ASSERT(alive <= 1);
			fwd += alive;
			continue;
		}
		CU_ASSERT_EQUAL(alive, 0);
		/* after the copy-out of the unit computing, which it waits for */
		if (i > 0 && s->ops[i - 1].kind == OP_COPY_OUT) {
			CU_ASSERT(schedule_happens_before(s, i - 1, i));
			bwd++;
		}
	}
	CU_ASSERT(fwd > 0);  /* forward keeps the one before alive (the first gathers aside) */
	/* every backward gather but the first follows a copy-out (the root, computing before it, stays gathered) */
	CU_ASSERT_EQUAL(bwd, s->nunits - 2);
	done(s, &e);
}

/*
 * FSDP2 at a shard group of one issues no collective (world_size == 1 in
 * FSDPParamGroup.unshard, wait_for_unshard and foreach_reduce): a unit's
 * first use copies its shard, cast tensor by tensor, into the unsharded
 * params on the compute stream, with no gathered buffer, and its reduction
 * copies the reduce-scatter input into its output on the reduce-scatter
 * stream. The testbed, and FSDP2 over two ranks, keep their collectives;
 * HSDP with shard groups of one keeps its replicas' all-reduces.
 */
static void test_local_shards(void)
{
	struct experiment e;
	struct schedule *s;
	int copy_outs = 0, copies = 0, transient = 0;

	s = test_schedule(&e, "model.name=llama3-8b", "model.layers=2", "cluster.gpu=h100-sxm", "cluster.nodes=1",
			  "cluster.gpus_per_node=1", "policy.runtime=pytorch", "policy.precision=mixed",
			  "policy.microbatches=2", "policy.accum=sync-each", NULL);
	check_invariants(s);
	CU_ASSERT_EQUAL(s->local_shards, 1);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_ALLGATHER), 0);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_REDUCE_SCATTER), 0);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_ALLREDUCE), 0);
	for (int b = 0; b < s->nbufs; b++)
		CU_ASSERT(s->bufs[b].kind != BUF_GATHER_OUT && s->bufs[b].stream != ST_ALLGATHER);
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		const struct unit *x = &s->units[o->unit < 0 ? 0 : o->unit];
		int in, out, t;

		CU_ASSERT(o->stream != ST_ALLGATHER);
		if (o->kind == OP_COPY_OUT) {
			copy_outs++;
			CU_ASSERT_EQUAL(o->stream, ST_COMPUTE);
			in = op_operand(s, i, BUF_SHARD_PARAM, OPD_IN);
			CU_ASSERT_FATAL(in >= 0);
			CU_ASSERT_EQUAL(s->bufs[in].elem, ELEM_FP32);
			CU_ASSERT_EQUAL(s->bufs[in].free_op, -1); /* the shard stays */
			CU_ASSERT_EQUAL(s->bufs[op_operand(s, i, BUF_FULL_PARAM, OPD_OUT)].elem, ELEM_BF16);
			/* fp32 read, bf16 cast written, read, and copied: 10 bytes an element, 2 kernels a tensor */
			CU_ASSERT_EQUAL(o->bytes, 10 * (uint64_t)x->params);
			CU_ASSERT_EQUAL(o->launches, 2u * (uint32_t)x->ntensors);
			/* two casts alive at once: in a block, the gate and up projections (D x F each) */
			t = op_operand(s, i, BUF_TRANSIENT, OPD_OUT);
			CU_ASSERT_FATAL(t >= 0);
			if (!x->is_root) {
				CU_ASSERT_EQUAL(s->bufs[t].bytes, 2 * 2 * (uint64_t)e.model.hidden * (uint64_t)e.model.ffn);
				transient++;
			} else { /* the root: the final norm's weight and the output projection (V x D) */
				CU_ASSERT_EQUAL(s->bufs[t].bytes,
						2 * ((uint64_t)e.model.vocab + 1) * (uint64_t)e.model.hidden);
			}
		}
		if (o->kind == OP_COPY) {
			copies++;
			CU_ASSERT_EQUAL(o->stream, ST_REDUCE_SCATTER);
			in = op_operand(s, i, BUF_RS_IN, OPD_IN);
			out = op_operand(s, i, BUF_SHARD_GRAD, OPD_OUT);
			if (out < 0)
				out = op_operand(s, i, BUF_RS_OUT, OPD_OUT);
			CU_ASSERT_FATAL(in >= 0 && out >= 0);
			CU_ASSERT_EQUAL(s->bufs[in].bytes, s->bufs[out].bytes);
			CU_ASSERT_EQUAL(o->bytes, 2 * s->bufs[in].bytes);
			CU_ASSERT(schedule_happens_before(s, s->bufs[in].alloc_op, i));
		}
	}
	/* each unit is copied in before forward and again before backward (resharded), per microbatch */
	CU_ASSERT_EQUAL(copy_outs, 2 * (2 * (s->nunits - 1) + 1));
	CU_ASSERT_EQUAL(transient, 2 * 2 * (s->nunits - 1));
	CU_ASSERT_EQUAL(copies, 2 * s->nunits); /* sync-each: a reduction per unit and microbatch */
	done(s, &e);

	/* fp32 params: the shard itself is copied, a kernel per tensor, no cast */
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=1", "policy.runtime=pytorch",
			  "policy.precision=fp32", NULL);
	check_invariants(s);
	CU_ASSERT(schedule_count_of(s, OP_COPY_OUT) > 0);
	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == OP_COPY_OUT) {
			CU_ASSERT_EQUAL(s->ops[i].bytes, 8 * (uint64_t)s->units[s->ops[i].unit].params);
			CU_ASSERT_EQUAL(s->ops[i].launches, (uint32_t)s->units[s->ops[i].unit].ntensors);
			CU_ASSERT_EQUAL(op_operand(s, i, BUF_TRANSIENT, OPD_OUT), -1);
		}
	done(s, &e);

	/* the testbed at one rank, and FSDP2 at two, keep their collectives */
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=1", NULL);
	CU_ASSERT_EQUAL(s->local_shards, 0);
	CU_ASSERT(schedule_count_of(s, OP_ALLGATHER) > 0);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_COPY), 0);
	done(s, &e);
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.runtime=pytorch",
			  NULL);
	CU_ASSERT_EQUAL(s->local_shards, 0);
	CU_ASSERT(schedule_count_of(s, OP_ALLGATHER) > 0 && schedule_count_of(s, OP_REDUCE_SCATTER) > 0);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_COPY), 0);
	done(s, &e);

	/* hsdp over shard groups of one: copies, then the replicas' all-reduce of each */
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=2", "cluster.gpus_per_node=1", "policy.runtime=pytorch",
			  "policy.sharding=hsdp", "policy.shard_group=1", NULL);
	check_invariants(s);
	CU_ASSERT_EQUAL(s->local_shards, 1);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_ALLGATHER) + schedule_count_of(s, OP_REDUCE_SCATTER), 0);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_ALLREDUCE), schedule_count_of(s, OP_COPY));
	CU_ASSERT(schedule_count_of(s, OP_COPY) > 0);
	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == OP_ALLREDUCE) {
			CU_ASSERT_EQUAL(s->ops[i].group, GRP_REPLICA);
			CU_ASSERT_EQUAL(s->ops[i - 1].kind, OP_COPY);
			CU_ASSERT(schedule_happens_before(s, i - 1, i));
		}
	done(s, &e);
}

/*
 * Each transient tensor of a PyTorch phase is a buffer of its own: the
 * eager head's forward holds the bf16 logits and their fp32 copy, its
 * backward two fp32 gradients of the logits; the testbed's block forward
 * one scratch region.
 */
static void test_transient_tensors(void)
{
	struct experiment e;
	struct schedule *s;
	uint64_t NV;

	for (int rt = 0; rt < 2; rt++) {
		s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2",
				  rt ? "policy.runtime=pytorch" : "policy.runtime=testbed", "policy.ac=full", NULL);
		NV = (uint64_t)s->batch * e.model.seq * e.model.vocab;
		for (int i = 0; i < s->nops; i++) {
			const struct op *o = &s->ops[i];
			uint64_t sizes[8];
			int n = 0;

			if (o->micro != 0 || (o->kind != OP_FORWARD && o->kind != OP_BACKWARD && o->kind != OP_LOSS_BACKWARD))
				continue;
			for (uint32_t k = 0; k < o->nopd; k++) {
				const struct buffer *x = &s->bufs[s->opds[o->opd_first + k].buf];
				if (x->kind == BUF_TRANSIENT && n < 8)
					sizes[n++] = x->bytes;
			}
			if (s->segs[o->seg].kind == SEG_HEAD && rt) {
				/*
				 * forward: the bf16 logits and their fp32 copy; the loss's
				 * backward: its two fp32 gradients; the head's: the bf16
				 * gradient its GEMMs read
				 */
				CU_ASSERT_EQUAL_FATAL(n, o->kind == OP_BACKWARD ? 1 : 2);
				CU_ASSERT_EQUAL(sizes[0], (o->kind == OP_LOSS_BACKWARD ? 4 : 2) * NV);
				if (n == 2)
					CU_ASSERT_EQUAL(sizes[1], 4 * NV);
			} else if (s->segs[o->seg].kind == SEG_BLOCK && o->kind == OP_FORWARD) {
				/* full checkpointing: forward makes every tensor backward would read, and keeps the input */
				CU_ASSERT(rt ? n > 4 : n == 1);
			}
		}
		done(s, &e);
	}
	/* torch.compile on the blocks only (policy.compile = model): the loss runs eager, with its fp32 logits */
	for (int scope = 0; scope < 2; scope++) {
		int head_tr = 0, loss_tr = -1;

		s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2",
				  "policy.runtime=pytorch-compile", scope ? "policy.compile=model" : "policy.compile=model+loss",
				  NULL);
		NV = (uint64_t)s->batch * e.model.seq * e.model.vocab;
		for (int i = 0; i < s->nops; i++)
			if (s->ops[i].micro == 0 && s->ops[i].kind == OP_BACKWARD && s->segs[s->ops[i].seg].kind == SEG_HEAD)
				op_transient_bytes(s, i, &head_tr);
			else if (s->ops[i].micro == 0 && s->ops[i].kind == OP_LOSS_BACKWARD)
				op_transient_bytes(s, i, &loss_tr);
		CU_ASSERT_EQUAL(head_tr, scope ? 1 : 0);
		CU_ASSERT_EQUAL(loss_tr, scope ? 2 : -1); /* the compiled loss's backward is the head's */
		/* and keeps the fp32 log-probabilities, not the bf16 logits */
		for (int b = 0; b < s->nbufs; b++)
			if (s->bufs[b].kind == BUF_ACTS && s->bufs[b].seg >= 0 && s->segs[s->bufs[b].seg].kind == SEG_HEAD &&
			    s->bufs[b].micro == 0)
				CU_ASSERT(scope ? s->bufs[b].bytes >= 4 * NV : s->bufs[b].bytes < 4 * NV);
		done(s, &e);
	}
}

/*
 * A block's saved activations, and what its recompute rebuilds, are a
 * buffer per tensor under PyTorch's runtimes (each its own allocation, in
 * forward's order), one region under the testbed's; backward reads and
 * frees all of them.
 */
static void test_saved_tensor_buffers(void)
{
	for (int rt = 0; rt < 2; rt++)
		for (int ac = 0; ac < 2; ac++) {
			struct experiment e;
			struct schedule *s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2",
							   rt ? "policy.runtime=pytorch" : "policy.runtime=testbed",
							   ac ? "policy.ac=full" : "policy.ac=none", NULL);
			uint64_t want[RECIPE_TRANSIENT_MAX], rebuilt[RECIPE_TRANSIENT_MAX];
			int nwant = recipe_saved_tensors(rt ? KR_EAGER : KR_TESTBED, &e.model, s->batch, SEG_BLOCK,
							 ac ? AC_FULL : AC_NONE, s->loss, elem_bytes(s->act_elem), want);
			int nre = recipe_transient_tensors(rt ? KR_EAGER : KR_TESTBED, &e.model, s->batch, SEG_BLOCK,
							   PH_RECOMPUTE, AC_FULL, s->loss, elem_bytes(s->act_elem), rebuilt);
			int blocks = 0;

			for (int i = 0; i < s->nops; i++) {
				const struct op *o = &s->ops[i];
				int n = 0, r = 0, freed = 0;
				if (o->seg < 0 || s->segs[o->seg].kind != SEG_BLOCK || o->micro != 0)
					continue;
				if (o->kind == OP_FORWARD) {
					for (uint32_t k = 0; k < o->nalloc; k++) {
						const struct buffer *x = &s->bufs[s->bufrefs[o->buf_first + k]];
						if (x->kind == BUF_ACTS && n < RECIPE_TRANSIENT_MAX)
							CU_ASSERT_EQUAL(x->bytes, want[n++]);
					}
					CU_ASSERT_EQUAL(n, nwant);
					CU_ASSERT_EQUAL(op_made_bytes(s, i, BUF_ACTS, &n), buf_kernel_bytes(s, op_operand(s, i, BUF_ACTS, OPD_OUT)));
					blocks++;
				} else if (o->kind == OP_RECOMPUTE) {
					op_made_bytes(s, i, BUF_RECOMPUTED, &r);
					CU_ASSERT_EQUAL(r, rt ? nre : 1);
				} else if (o->kind == OP_BACKWARD) {
					for (uint32_t k = 0; k < o->nfree; k++) {
						enum buf_kind bk = s->bufs[s->bufrefs[o->buf_first + o->nalloc + k]].kind;
						freed += bk == BUF_ACTS || bk == BUF_RECOMPUTED;
					}
					CU_ASSERT_EQUAL(freed, nwant + (ac ? (rt ? nre : 1) : 0));
				}
			}
			CU_ASSERT(blocks > 0);
			CU_ASSERT(rt ? nwant > 1 || ac : nwant == 1);
			done(s, &e);
		}
}

/*
 * PyTorch's optimizer makes its state at its first step (lazy_optim_state):
 * no moment exists before the step; the optimizer's op makes an exp_avg
 * and an exp_avg_sq per tensor, each zero-filled and made once, in the
 * order of the model's parameters (the embedding's first, the output's
 * last); with the optimizer in backward, each unit's op makes its own.
 * The testbed's state exists from the start.
 */
static void test_lazy_optim_state(void)
{
	for (int c = 0; c < 3; c++) {
		struct experiment e;
		struct schedule *s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2",
						   c == 2 ? "policy.runtime=testbed" : "policy.runtime=pytorch",
						   c == 1 ? "policy.optim_in_backward=true" : "policy.optim_in_backward=false",
						   NULL);
		int tensors = 0, made = 0, optims = 0, before = 0;
		uint64_t bytes = 0, want = 0;

		for (int u = 0; u < s->nunits; u++) {
			tensors += s->units[u].ntensors;
			want += 8 * (uint64_t)s->units[u].shard_elems; /* fp32 m and v */
		}
		for (int b = 0; b < s->nbufs; b++)
			if (s->bufs[b].kind == BUF_OPTIM_STATE && s->bufs[b].alloc_op < 0)
				before++;
		for (int i = 0; i < s->nops; i++) {
			const struct op *o = &s->ops[i];
			int first = -1, last = -1;
			if (o->kind != OP_OPTIM)
				continue;
			optims++;
			for (uint32_t k = 0; k < o->nalloc; k++) {
				int id = (int)s->bufrefs[o->buf_first + k];
				const struct buffer *x = &s->bufs[id];
				if (x->kind != BUF_OPTIM_STATE)
					continue;
				CU_ASSERT(x->once && x->zero && x->free_op < 0);
				CU_ASSERT(c == 1 ? x->unit == o->unit : 1);
				bytes += x->bytes;
				if (first < 0)
					first = id;
				last = id;
				made++;
			}
			if (c == 0) { /* model order: the embedding's exp_avg first, the output's exp_avg_sq last */
				CU_ASSERT_EQUAL(s->bufs[first].bytes, 4 * (uint64_t)s->units[s->segs[0].unit].tensor_shard[0]);
				CU_ASSERT_EQUAL(s->bufs[last].unit, s->segs[s->nsegs - 1].unit);
				CU_ASSERT_EQUAL(s->bufs[last].bytes, 4 * (uint64_t)s->units[s->bufs[last].unit].tensor_shard[
									     s->units[s->bufs[last].unit].ntensors - 1]);
			}
		}
		if (c == 2) {
			CU_ASSERT_EQUAL(made, 0);
			CU_ASSERT_EQUAL(before, s->nunits);
		} else {
			CU_ASSERT_EQUAL(made, 2 * tensors);
			CU_ASSERT_EQUAL(bytes, want);
			CU_ASSERT_EQUAL(before, 0);
			CU_ASSERT_EQUAL(optims, c == 1 ? s->nunits : 1);
		}
		done(s, &e);
	}
}

/* The op of micro m, kind k, on a segment of kind sk (-1: any), or -1. */
static int op_of(const struct schedule *s, enum op_kind k, int sk, int m)
{
	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == k && s->ops[i].micro == m && (sk < 0 || (int)s->segs[s->ops[i].seg].kind == sk))
			return i;
	return -1;
}

/*
 * Eager PyTorch's loss backward is an op of its own before the head's: its
 * four kernels and two fp32 gradients, no weight gradient, and the head's
 * unit gathered only after it (FSDP2's pre-backward hook); the head's
 * backward allocates the unit's gradient and runs the rest of its kernels.
 * The testbed's and the compiled loss's backward stay one op.
 */
static void test_loss_backward(void)
{
	struct experiment e;
	struct schedule *s;
	struct kernel k[MODEL_MAX_KERNELS];
	uint64_t flops = 0;
	int n;

	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.runtime=pytorch",
			  "policy.microbatches=2", "policy.wrap=block+io", NULL);
	n = recipe_kernels(KR_EAGER, &e.model, s->batch, SEG_HEAD, PH_BWD, AC_NONE, s->loss, 2, k, MODEL_MAX_KERNELS);
	for (int i = 0; i < n; i++)
		flops += k[i].flops;
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_LOSS_BACKWARD), 2);
	for (int m = 0; m < 2; m++) {
		int fwd = op_of(s, OP_FORWARD, SEG_HEAD, m), a = op_of(s, OP_LOSS_BACKWARD, SEG_HEAD, m);
		int b = op_of(s, OP_BACKWARD, SEG_HEAD, m), u, grad;
		const struct ktab *ta, *tb;

		CU_ASSERT_FATAL(fwd >= 0 && a > fwd && b > a);
		u = s->ops[b].unit;
		ta = &s->ktabs[s->ops[a].ktab];
		tb = &s->ktabs[s->ops[b].ktab];
		/* the recipe's kernels, split: the loss's four, then the rest */
		CU_ASSERT_EQUAL(ta->count, 4);
		CU_ASSERT_EQUAL(s->ops[a].launches, 4);
		CU_ASSERT_EQUAL(ta->count + tb->count, (uint32_t)n);
		CU_ASSERT_EQUAL(tb->first, ta->first + 4);
		CU_ASSERT_STRING_EQUAL(s->kernels[ta->first + 2].name, "log_softmax_bwd");
		CU_ASSERT_STRING_EQUAL(s->kernels[tb->first].name, "output_dgrad");
		CU_ASSERT_EQUAL(s->ops[a].flops + s->ops[b].flops, flops);
		/* the loss's op allocates its two gradients only; the unit's gradient comes with the head's */
		for (int j = 0; j < s->ops[a].nalloc; j++)
			CU_ASSERT_EQUAL(s->bufs[s->bufrefs[s->ops[a].buf_first + j]].kind, BUF_TRANSIENT);
		grad = op_operand(s, b, BUF_FULL_GRAD, OPD_OUT);
		CU_ASSERT_FATAL(grad >= 0);
		if (m == 0)
			CU_ASSERT_EQUAL(s->bufs[grad].alloc_op, b);
		/* the head's unit (norm and output, resharded after forward) is gathered again after the loss's backward */
		{
			int gathered = 0;
			for (int i = fwd + 1; i < a; i++)
				CU_ASSERT(s->ops[i].unit != u || (s->ops[i].kind != OP_ALLGATHER && s->ops[i].kind != OP_COPY_OUT));
			for (int i = a + 1; i < b; i++)
				gathered += s->ops[i].unit == u && s->ops[i].kind == OP_ALLGATHER;
			CU_ASSERT_EQUAL(gathered, 1);
		}
	}
	CU_ASSERT_EQUAL(schedule_check(s, NULL, 0), 0);
	done(s, &e);
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", NULL);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_LOSS_BACKWARD), 0);
	done(s, &e);
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2",
			  "policy.runtime=pytorch-compile", NULL);
	CU_ASSERT_EQUAL(schedule_count_of(s, OP_LOSS_BACKWARD), 0);
	done(s, &e);
}

/*
 * A run gpu_run measured under a PyTorch runtime's schedule launched the
 * testbed's kernels (e->launch_kernels = "testbed", as ./sim --compare
 * sets for it): each compute op prices the testbed's list of its segment
 * and phase (a block's forward its 11 kernels, the head's backward the
 * testbed's whole list, the loss's backward op none), while the ops, their
 * order and every buffer stay the runtime's: the same memory.
 */
static void test_launched_kernels(void)
{
	struct experiment e, f;
	struct schedule *s, *t;
	struct kernel k[MODEL_MAX_KERNELS];
	int n, checked = 0;

	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.runtime=pytorch",
			  "policy.microbatches=2", "policy.ac=full", NULL);
	test_experiment(&f, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.runtime=pytorch",
			"policy.microbatches=2", "policy.ac=full", NULL);
	snprintf(f.launch_kernels, sizeof f.launch_kernels, "testbed");
	{
		char err[256];
		t = schedule_new(&f, err, sizeof err);
		CU_ASSERT_PTR_NOT_NULL_FATAL(t);
	}
	CU_ASSERT_EQUAL_FATAL(t->nops, s->nops);
	CU_ASSERT_EQUAL_FATAL(t->nbufs, s->nbufs);
	for (int i = 0; i < s->nbufs; i++)
		CU_ASSERT(t->bufs[i].bytes == s->bufs[i].bytes && t->bufs[i].kind == s->bufs[i].kind &&
			  t->bufs[i].alloc_op == s->bufs[i].alloc_op);
	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &t->ops[i];
		enum phase ph = o->kind == OP_FORWARD ? PH_FWD : o->kind == OP_RECOMPUTE ? PH_RECOMPUTE : PH_BWD;
		CU_ASSERT_EQUAL(o->kind, s->ops[i].kind);
		if (o->kind == OP_LOSS_BACKWARD) {
			CU_ASSERT(o->ktab < 0 && o->flops == 0);
			CU_ASSERT(s->ops[i].ktab >= 0); /* eager launches it apart */
			continue;
		}
		if (o->kind != OP_FORWARD && o->kind != OP_RECOMPUTE && o->kind != OP_BACKWARD)
			continue;
		n = recipe_kernels(KR_TESTBED, &f.model, t->batch, t->segs[o->seg].kind, ph, AC_FULL, t->loss, 2, k,
				   MODEL_MAX_KERNELS);
		if (o->ktab < 0) {
			CU_ASSERT_EQUAL(n, 0);
			continue;
		}
		CU_ASSERT_EQUAL_FATAL(t->ktabs[o->ktab].count, (uint32_t)n);
		for (int j = 0; j < n; j++)
			CU_ASSERT_STRING_EQUAL(t->kernels[t->ktabs[o->ktab].first + j].name, k[j].name);
		if (o->kind == OP_FORWARD && t->segs[o->seg].kind == SEG_BLOCK)
			CU_ASSERT_EQUAL(n, 11);
		if (o->kind == OP_FORWARD && t->segs[o->seg].kind == SEG_BLOCK)
			CU_ASSERT(s->ktabs[s->ops[i].ktab].count > (uint32_t)n); /* eager launches more */
		checked++;
	}
	CU_ASSERT(checked >= 10);
	CU_ASSERT_EQUAL(schedule_check(t, NULL, 0), 0);
	schedule_free(t);
	config_release(&f);
	done(s, &e);
}

/*
 * policy.hold_logits: each microbatch's logits are a buffer of their own
 * from the head's forward, dropped before the next microbatch's head (an
 * OP_FREE right before it) or alive at the step's end, through the
 * optimizer; the head's forward keeps one transient (eager) or saves the
 * logits' bytes less (compiled).
 */
static void test_hold_logits(void)
{
	struct experiment e;
	struct schedule *s, *t;
	uint64_t NV, L;
	int found = 0, tr = 0, optim;

	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.runtime=pytorch",
			  "policy.microbatches=3", "policy.hold_logits=true", NULL);
	NV = (uint64_t)s->batch * e.model.seq * e.model.vocab;
	L = (2 * NV + RECIPE_TENSOR_ALIGN - 1) / RECIPE_TENSOR_ALIGN * RECIPE_TENSOR_ALIGN;
	optim = first_op(s, OP_OPTIM, -1);
	CU_ASSERT_FATAL(optim >= 0);
	for (int i = 0; i < s->nbufs; i++) {
		const struct buffer *x = &s->bufs[i];
		if (x->cat != MEM_LOGITS || x->kind != BUF_TRANSIENT)
			continue;
		found++;
		CU_ASSERT_EQUAL(x->bytes, L);
		CU_ASSERT_EQUAL(s->ops[x->alloc_op].kind, OP_FORWARD);
		CU_ASSERT_EQUAL(s->segs[s->ops[x->alloc_op].seg].kind, SEG_HEAD);
		if (x->micro < 2) {
			CU_ASSERT_FATAL(x->free_op >= 0);
			CU_ASSERT_EQUAL(s->ops[x->free_op].kind, OP_FREE);
			CU_ASSERT_EQUAL(op_of(s, OP_FORWARD, SEG_HEAD, x->micro + 1), x->free_op + 1);
		} else {
			CU_ASSERT_EQUAL(x->free_op, -1); /* through the optimizer step, to the step's end */
			CU_ASSERT(x->alloc_op < optim);
		}
	}
	CU_ASSERT_EQUAL(found, 3);
	{
		/* the head's forward frees the fp32 copy alone: the logits are the loop's */
		const struct op *o = &s->ops[op_of(s, OP_FORWARD, SEG_HEAD, 0)];
		for (int i = 0; i < o->nfree; i++)
			tr += s->bufs[s->bufrefs[o->buf_first + o->nalloc + i]].kind == BUF_TRANSIENT;
		CU_ASSERT_EQUAL(tr, 1);
	}
	CU_ASSERT_EQUAL(schedule_check(s, NULL, 0), 0);
	CU_ASSERT_PTR_NOT_NULL(schedule_priced_only(s));
	done(s, &e);
	/* compiled: the head saves the logits' bytes less, and holds them apart */
	s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2",
			  "policy.runtime=pytorch-compile", "policy.hold_logits=true", NULL);
	{
		struct experiment e2;
		t = test_schedule(&e2, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2",
				  "policy.runtime=pytorch-compile", NULL);
		CU_ASSERT_EQUAL(t->bufs[op_operand(t, op_of(t, OP_FORWARD, SEG_HEAD, 0), BUF_ACTS, OPD_OUT)].bytes,
				s->bufs[op_operand(s, op_of(s, OP_FORWARD, SEG_HEAD, 0), BUF_ACTS, OPD_OUT)].bytes + L);
		CU_ASSERT_PTR_NULL(schedule_priced_only(t));
		done(t, &e2);
	}
	done(s, &e);
}

/* Shards: flat for the testbed runtime, per tensor (dim 0, padded) for pytorch. */
static void test_shard_layouts(void)
{
	struct experiment e1, e2;
	struct schedule *t = test_schedule(&e1, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=3", NULL);
	struct schedule *p = test_schedule(&e2, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=3",
				   "policy.runtime=pytorch", NULL);
	struct tensor_desc td[BT_COUNT];
	uint64_t want = 0;
	int n = model_module_tensor_list(&e2.model, MOD_BLOCK, td, BT_COUNT);

	/* a block unit: flat is ceil(params / 3); per tensor pads each tensor's rows to a multiple of 3 */
	CU_ASSERT_EQUAL(t->units[1].shard_elems, (uint64_t)(model_block_params(&e1.model) + 2) / 3);
	for (int i = 0; i < n; i++) {
		int64_t rows = td[i].rows == 1 ? td[i].cols : td[i].rows, cols = td[i].rows == 1 ? 1 : td[i].cols;
		want += (uint64_t)((rows + 2) / 3 * cols);
	}
	CU_ASSERT_EQUAL(p->units[1].shard_elems, want);
	CU_ASSERT_EQUAL(t->per_tensor_shards, 0);
	CU_ASSERT_EQUAL(p->per_tensor_shards, 1);
	done(t, &e1);
	done(p, &e2);
}

/* Does a reach b through dependencies and stream order? (depth-first, for comparison) */
static int reaches(const struct schedule *s, int a, int b, char *seen)
{
	if (a == b)
		return 1;
	if (b < a || seen[b])
		return 0;
	seen[b] = 1;
	for (uint32_t d = 0; d < s->ops[b].ndeps; d++)
		if (reaches(s, a, (int)s->deps[s->ops[b].dep_first + d], seen))
			return 1;
	for (int p = b - 1; p >= 0; p--)
		if (s->ops[p].stream == s->ops[b].stream)
			return reaches(s, a, p, seen);
	return 0;
}

static void test_clocks_are_reachability(void)
{
	struct experiment e;
	struct schedule *s = test_schedule(&e, "model.name=tiny", "cluster.nodes=2", "cluster.gpus_per_node=2",
				   "policy.sharding=hsdp", "policy.microbatches=2", "policy.optim_in_backward=true", NULL);
	char *seen = malloc((size_t)s->nops);
	int agree = 1;

	for (int a = 0; a < s->nops; a++)
		for (int b = 0; b < s->nops; b++) {
			memset(seen, 0, (size_t)s->nops);
			agree &= reaches(s, a, b, seen) == schedule_happens_before(s, a, b);
		}
	CU_ASSERT(agree);
	free(seen);
	done(s, &e);
}

/* The checker finds a race: drop the dependency of a forward on its gather. */
static void test_check_finds_races(void)
{
	struct experiment e;
	struct schedule *s = test_schedule(&e, "model.name=tiny", "cluster.nodes=1", "cluster.gpus_per_node=2", NULL);
	char err[256];
	int f = first_op(s, OP_FORWARD, 1);

	CU_ASSERT_EQUAL(schedule_check(s, err, sizeof(err)), 0);
	s->ops[f].ndeps = 0;
	schedule_clocks(s);
	CU_ASSERT_EQUAL(schedule_check(s, err, sizeof(err)), -1);
	/* the gather's output is now freed after a forward that no longer waits for the gather */
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "AG block0 m0"));
	done(s, &e);
}

/*
 * Every policy ./sim --policy all walks keeps the invariants, on 1 and 2
 * nodes, and under FSDP2 on one rank and on two nodes of one (shard groups
 * of one: copies instead of collectives).
 */
static void test_every_walked_policy_checks(void)
{
	static const char *const clusters[][3] = {
		{ "cluster.nodes=1", "cluster.gpus_per_node=2", "policy.runtime=testbed" },
		{ "cluster.nodes=2", "cluster.gpus_per_node=2", "policy.runtime=testbed" },
		{ "cluster.nodes=1", "cluster.gpus_per_node=1", "policy.runtime=pytorch" },
		{ "cluster.nodes=2", "cluster.gpus_per_node=1", "policy.runtime=pytorch" },
	};
	int checked = 0, bad = 0;

	for (int c = 0; c < 4; c++) {
		struct experiment e;
		struct policy_walk w;
		struct policy base;
		struct schedule *s = test_schedule(&e, "model.name=tiny", "model.layers=3", clusters[c][0], clusters[c][1],
						   clusters[c][2], "policy.microbatches=2", NULL);
		schedule_free(s);
		base = e.policy;
		policy_walk_init(&w, &base, &e.cluster, &e.model);
		while (policy_next(&w, &e.policy)) {
			char err[256];
			s = schedule_new(&e, err, sizeof(err));
			CU_ASSERT_PTR_NOT_NULL_FATAL(s);
			if (schedule_check(s, err, sizeof(err)) != 0 && bad++ < 3)
				fprintf(stderr, "schedule_check: %s\n", err);
			checked++;
			schedule_free(s);
		}
		config_release(&e);
	}
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT(checked > 5000);
}

void suite_schedule(void)
{
	CU_pSuite s = CU_add_suite("schedule", NULL, NULL);
	CU_add_test(s, "fsdp moves 1.5x the traffic of ddp", test_fsdp_moves_one_and_a_half_ddp);
	CU_add_test(s, "sync-each multiplies reduce-scatter by M", test_sync_each_multiplies_reduce_scatter);
	CU_add_test(s, "model state bytes per rank", test_model_state_bytes);
	CU_add_test(s, "the sharded gradient in the accumulation dtype, cast from the reduce dtype",
		    test_sharded_grad_in_accum_dtype);
	CU_add_test(s, "collective count and order", test_collective_order);
	CU_add_test(s, "FSDP2: one gathered buffer in backward, the prefetch after the copy-out",
		    test_gathered_buffer_lifetime);
	CU_add_test(s, "accumulation and optimizer counts", test_accumulation_counts);
	CU_add_test(s, "concat only on the last microbatch", test_concat_last_only);
	CU_add_test(s, "PyTorch's accumulation under no-sync", test_pytorch_accumulation_bytes);
	CU_add_test(s, "every policy builds a well-formed graph", test_every_policy_is_well_formed);
	CU_add_test(s, "operands name each op's memory", test_operands_name_the_memory);
	CU_add_test(s, "flat and per-tensor shards", test_shard_layouts);
	CU_add_test(s, "FSDP2 keeps the reduce-scatter input on the compute stream", test_reduce_scatter_input_lifetime);
	CU_add_test(s, "a PyTorch phase's transient tensors", test_transient_tensors);
	CU_add_test(s, "a block's saved and recomputed activations: a buffer per tensor under PyTorch", test_saved_tensor_buffers);
	CU_add_test(s, "PyTorch's optimizer state: a tensor per moment, made at the first step", test_lazy_optim_state);
	CU_add_test(s, "eager PyTorch's loss backward before the head's", test_loss_backward);
	CU_add_test(s, "gpu_run's kernels under PyTorch's schedule", test_launched_kernels);
	CU_add_test(s, "a training loop that holds the logits", test_hold_logits);
	CU_add_test(s, "FSDP2 at a shard group of one: copies, no collective", test_local_shards);
	CU_add_test(s, "vector clocks are reachability", test_clocks_are_reachability);
	CU_add_test(s, "schedule_check finds a race", test_check_finds_races);
	CU_add_test(s, "every walked policy keeps the invariants", test_every_walked_policy_checks);
}
