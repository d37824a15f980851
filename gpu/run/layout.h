/*
 * layout.h - where a unit's parameters live, full and sharded.
 *
 * A unit's full parameters are one flat buffer: its modules in segment
 * order (embedding; blocks, each in enum block_tensor order, the layout
 * ref_block_* expect; final norm; output), unpadded. A rank's shard is,
 * tensor by tensor, its slice of dim-0 rows padded to a multiple of the
 * shard group (a 1-D norm weight shards along its D elements), exactly as
 * core/schedule.c counts unit->shard_elems. An all-gather output (and a
 * reduce-scatter input) is the n shards one after the other, rank order:
 * layout_unpack / layout_pack convert between that and the flat buffer.
 * Pad rows are zero in every shard and stay zero (zero gradient, zero
 * AdamW update).
 *
 * Invariant, asserted at build: the layout's element counts equal the
 * schedule's unit->params and unit->shard_elems.
 */
#ifndef GPU_RUN_LAYOUT_H
#define GPU_RUN_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "schedule.h"

/* One tensor of a unit, for sharding. */
struct layout_tensor {
	size_t flat_off;   /* floats, in the unit's flat buffer */
	size_t shard_off;  /* floats, in one rank's shard */
	size_t model_off;  /* floats, in the reference's whole-model buffer (ref_model_init) */
	int64_t rows;      /* dim-0 rows (a norm weight: its D elements) */
	int64_t cols;      /* elements per row (a norm weight: 1) */
	int64_t rows_per_rank; /* ceil(rows / n) */
};

struct unit_layout {
	int ntensors;
	struct layout_tensor *t;
	size_t full_floats;   /* = unit->params */
	size_t shard_floats;  /* = unit->shard_elems */
};

/* Where a segment's parameters sit in its unit's flat buffer (floats). */
struct seg_params {
	size_t off;       /* embed: (V, D); block: the block's flat buffer; head: final norm (D) */
	size_t out_off;   /* head only: output (V, D) */
};

struct layout {
	int nunits, nsegs;
	int shard_n;
	struct unit_layout *units;
	struct seg_params *segs;
};

/* Build the layout of every unit of s; layout_free releases it. */
struct layout *layout_new(const struct schedule *s);
void layout_free(struct layout *l);

/* Rank r's shard (shard_floats) of a unit, from the whole-model buffer (ref_model_floats). */
void layout_shard_from_model(const struct unit_layout *u, float *shard, const float *model, int r);
/* The whole unit, flat, from the n shards one after the other (an all-gather's output). */
void layout_unpack(const struct unit_layout *u, float *flat, const float *gathered, int n);
/* The n shards one after the other (a reduce-scatter's input), pads zeroed, from flat. */
void layout_pack(const struct unit_layout *u, float *packed, const float *flat, int n);
/* Add rank r's shard of the unit into the whole-model buffer (pads dropped). */
void layout_shard_to_model(const struct unit_layout *u, float *model, const float *shard, int r);

#endif
