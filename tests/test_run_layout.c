/*
 * test_run_layout.c - gpu_run's initial parameter shards
 * (gpu/run/layout.h, layout_shard_init): the same bytes on any number of
 * threads, for every unit and rank, flat shards and per-tensor ones, most
 * of them drawn (not a norm's 1 or a pad's 0); over 3 ranks, the pads
 * zero whatever the memory held.
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

/*
 * Over 3 ranks the shards have pads (a tensor's rows, or the flat
 * buffer, not a multiple of 3): whatever the memory held before, every
 * element no tensor's piece covers is 0 after layout_shard_init,
 * layout_shard_from_model and layout_pack, and the covered ones are not
 * the garbage. Returns the pads seen.
 */
static size_t pads_zero(const char *runtime)
{
	struct experiment e;
	struct schedule *s = test_schedule(&e, "model.layers=3", runtime, "cluster.nodes=1", "cluster.gpus_per_node=3", NULL);
	struct layout *l = layout_new(s);
	size_t pads = 0, model_n = 0;
	float *model;

	CU_ASSERT_EQUAL_FATAL(s->shard_n, 3);
	for (int u = 0; u < l->nunits; u++)
		for (int i = 0; i < l->units[u].ntensors; i++) {
			const struct layout_tensor *t = &l->units[u].t[i];
			size_t end = t->model_off + (size_t)(t->rows * t->cols);
			model_n = end > model_n ? end : model_n;
		}
	model = malloc(sizeof(float) * model_n);
	for (size_t k = 0; k < model_n; k++)
		model[k] = 1.0f + (float)(k % 7);
	for (int u = 0; u < l->nunits; u++) {
		const struct unit_layout *ul = &l->units[u];
		float *shard = malloc(sizeof(float) * ul->shard_floats);
		float *packed = malloc(sizeof(float) * ul->shard_floats * 3), *flat = malloc(sizeof(float) * ul->full_floats);
		char *covered = malloc(ul->shard_floats);
		for (size_t k = 0; k < ul->full_floats; k++)
			flat[k] = 2.0f;
		if (ul->per_tensor) {
			memset(packed, 0x7f, sizeof(float) * ul->shard_floats * 3);
			layout_pack(ul, packed, flat, 3);
		}
		for (int r = 0; r < 3; r++) {
			memset(covered, 0, ul->shard_floats);
			for (int i = 0; i < ul->ntensors; i++) {
				size_t dst, src, n = layout_rank_piece(ul, &ul->t[i], r, &dst, &src);
				memset(covered + dst, 1, n);
			}
			for (int way = 0; way < 3; way++) {
				size_t bad = 0;
				memset(shard, 0x7f, sizeof(float) * ul->shard_floats);
				if (way == 0)
					layout_shard_init(ul, shard, r, 1234, 2);
				else if (way == 1)
					layout_shard_from_model(ul, shard, model, r);
				else if (ul->per_tensor)
					memcpy(shard, packed + (size_t)r * ul->shard_floats, sizeof(float) * ul->shard_floats);
				else
					continue;
				for (size_t k = 0; k < ul->shard_floats; k++) {
					uint32_t bits;
					memcpy(&bits, &shard[k], 4);
					bad += covered[k] ? bits == 0x7f7f7f7fu : shard[k] != 0.0f;
					pads += way == 0 && !covered[k];
				}
				CU_ASSERT_EQUAL(bad, 0);
			}
		}
		free(shard);
		free(packed);
		free(flat);
		free(covered);
	}
	free(model);
	layout_free(l);
	schedule_free(s);
	config_release(&e);
	return pads;
}

static void test_pads(void)
{
	CU_ASSERT(pads_zero("policy.runtime=testbed") > 0);
	CU_ASSERT(pads_zero("policy.runtime=pytorch") > 0);
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
	CU_add_test(s, "pads are zero over 3 ranks, whatever the memory held: init, from the model, packed", test_pads);
	CU_add_test(s, "parts_count: the threads asked, at most one per part's least elements, 1 to PARTS_MAX", test_count);
}
