/*
 * test_run_layout.c - gpu_run's initial parameter shards
 * (gpu/run/layout.h, layout_shard_init): the same bytes on any number of
 * threads, for every unit and rank, flat shards and per-tensor ones, most
 * of them drawn (not a norm's 1 or a pad's 0).
 */
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "config.h"
#include "run/layout.h"
#include "run/parts.h"
#include "testutil.h"

/* Every unit's shard of every rank, on 1 thread and on `threads`: the same bytes. Returns the elements compared. */
static size_t same_on_threads(const char *runtime, const char *nodes, int threads)
{
	struct experiment e;
	struct schedule *s = test_schedule(&e, "model.layers=3", runtime, nodes, "cluster.gpus_per_node=4", NULL);
	struct layout *l = layout_new(s);
	size_t compared = 0;

	for (int u = 0; u < l->nunits; u++) {
		const struct unit_layout *ul = &l->units[u];
		float *one = malloc(sizeof(float) * ul->shard_floats), *many = malloc(sizeof(float) * ul->shard_floats);
		for (int r = 0; r < s->shard_n; r++) {
			size_t drawn = 0;
			memset(many, 0x7f, sizeof(float) * ul->shard_floats); /* a part left out shows */
			layout_shard_init(ul, one, r, 1234, 1);
			layout_shard_init(ul, many, r, 1234, threads);
			CU_ASSERT_EQUAL(memcmp(one, many, sizeof(float) * ul->shard_floats), 0);
			for (size_t k = 0; k < ul->shard_floats; k++)
				drawn += one[k] != 1.0f && one[k] != 0.0f;
			/* most elements are drawn weights; the norms (1) and the pads (0) a few */
			CU_ASSERT(drawn > ul->shard_floats / 2);
			compared += ul->shard_floats;
		}
		free(one);
		free(many);
	}
	layout_free(l);
	schedule_free(s);
	config_release(&e);
	return compared;
}

static void test_threads(void)
{
	/* flat shards (testbed) and per-tensor padded ones (pytorch), one node and two */
	CU_ASSERT(same_on_threads("policy.runtime=testbed", "cluster.nodes=1", 3) > 0);
	CU_ASSERT(same_on_threads("policy.runtime=testbed", "cluster.nodes=2", 7) > 0);
	CU_ASSERT(same_on_threads("policy.runtime=pytorch", "cluster.nodes=1", 5) > 0);
	CU_ASSERT(same_on_threads("policy.runtime=pytorch", "cluster.nodes=2", 64) > 0);
}

/* How many parts a split takes: the threads asked, at most one per `per` elements, 1 to PARTS_MAX. */
static void test_count(void)
{
	CU_ASSERT_EQUAL(parts_count(5, 3, 1), 3);
	CU_ASSERT_EQUAL(parts_count(2, 10, 1), 2);
	CU_ASSERT_EQUAL(parts_count(100, 1000, 1), PARTS_MAX);
	CU_ASSERT_EQUAL(parts_count(8, 0, 1), 1);
	CU_ASSERT_EQUAL(parts_count(0, 10, 1), 1);
	CU_ASSERT_EQUAL(parts_count(16, (size_t)3 << 20, (size_t)1 << 20), 3);
	CU_ASSERT_EQUAL(parts_count(16, ((size_t)3 << 20) + 1, (size_t)1 << 20), 4);
	CU_ASSERT_EQUAL(parts_count(16, 5, (size_t)1 << 20), 1);
}

void suite_run_layout(void)
{
	CU_pSuite s = CU_add_suite("run_layout", NULL, NULL);
	CU_add_test(s, "initial shards: the same bytes on 1, 3, 5, 7 and 64 threads, flat and per tensor", test_threads);
	CU_add_test(s, "parts_count: the threads asked, at most one per part's least elements, 1 to PARTS_MAX", test_count);
}
