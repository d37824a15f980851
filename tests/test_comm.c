/*
 * test_comm.c - gpu_run's emulated collectives (gpu/run/comm.c): one
 * process as rank 0 of an N-rank job, each other rank's contribution a copy
 * of this rank's. What each moves: an all-gather fills every slot with
 * this rank's shard; a reduce-scatter gives the mean of the n chunks of its
 * input, each added once; an all-reduce leaves the mean of identical
 * contributions, the buffer itself; and the bytes each puts on the wire,
 * step by step, add up to a ring's.
 */
#include <CUnit/CUnit.h>
#include <math.h>
#include <string.h>

#include "run/comm.h"
#include "fabric.h"

/* rank 0 of n on an emulated link too fast to wait for */
static struct comm_handle emu(int n)
{
	struct comm_handle h;

	memset(&h, 0, sizeof h);
	h.comm = MPI_COMM_NULL;
	h.size = n;
	h.emulated = 1;
	h.link.gbps = 1e9;
	return h;
}

/* the step bytes of a plan add up to its wire bytes */
static uint64_t steps_sum(const struct comm_emu_plan *p)
{
	uint64_t b = 0;

	for (int i = 0; i < p->steps; i++)
		b += comm_emu_step_bytes(p, i);
	return b;
}

static void test_emulated_collectives(void)
{
	enum { N = 4, C = 5 }; /* ranks; elements of a shard (not a multiple of a step's split) */
	struct comm_handle h = emu(N);
	struct comm_emu_plan p;
	float shard[C], all[N * C], out[C];

	for (int i = 0; i < C; i++)
		shard[i] = 1.0f + (float)i;
	for (int i = 0; i < N * C; i++)
		all[i] = NAN;
	comm_emu_all_gather(&h, all, shard, C, sizeof(float));
	for (int r = 0; r < N; r++)
		CU_ASSERT(!memcmp(all + r * C, shard, sizeof shard));
	CU_ASSERT_EQUAL(h.wire_bytes, collective_wire_bytes(OP_ALLGATHER, N * C * sizeof(float), N));

	/* chunk r of the input holds r + 1 + j / 8: the mean over the chunks is 2.5 + j / 8 */
	for (int r = 0; r < N; r++)
		for (int j = 0; j < C; j++)
			all[r * C + j] = (float)(r + 1) + (float)j / 8;
	h.wire_bytes = 0;
	comm_emu_reduce_scatter(&h, out, all, C);
	for (int j = 0; j < C; j++)
		CU_ASSERT_DOUBLE_EQUAL(out[j], 2.5 + j / 8.0, 1e-6);
	CU_ASSERT_EQUAL(h.wire_bytes, collective_wire_bytes(OP_REDUCE_SCATTER, N * C * sizeof(float), N));

	memcpy(out, shard, sizeof shard);
	h.wire_bytes = 0;
	comm_emu_all_reduce(&h, out, C);
	CU_ASSERT(!memcmp(out, shard, sizeof shard));
	CU_ASSERT_EQUAL(h.wire_bytes, collective_wire_bytes(OP_ALLREDUCE, C * sizeof(float), N));

	/* a ring's steps: n - 1, twice that for an all-reduce; their bytes the wire's */
	comm_emu_plan(&h, OP_ALLGATHER, 1000003, &p);
	CU_ASSERT_EQUAL(p.steps, N - 1);
	CU_ASSERT_EQUAL(steps_sum(&p), p.wire_bytes);
	comm_emu_plan(&h, OP_REDUCE_SCATTER, 1000003, &p);
	CU_ASSERT(p.steps == N - 1 && p.reduce_steps == N - 1);
	CU_ASSERT_EQUAL(steps_sum(&p), p.wire_bytes);
	comm_emu_plan(&h, OP_ALLREDUCE, 1000003, &p);
	CU_ASSERT(p.steps == 2 * (N - 1) && p.reduce_steps == N - 1);
	CU_ASSERT_EQUAL(steps_sum(&p), p.wire_bytes);
	/* bytes the steps do not divide: the first steps take one more each (10 over 3: 4, 3, 3) */
	p.wire_bytes = 10;
	p.steps = 3;
	CU_ASSERT(comm_emu_step_bytes(&p, 0) == 4 && comm_emu_step_bytes(&p, 1) == 3 &&
		  comm_emu_step_bytes(&p, 2) == 3);
}

void suite_comm(void)
{
	CU_pSuite s = CU_add_suite("comm", NULL, NULL);
	CU_add_test(s, "emulated collectives: what each moves, and its wire bytes", test_emulated_collectives);
}
