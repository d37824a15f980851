/*
 * layout.h - where a unit's parameters live, full and sharded.
 *
 * A unit's full parameters are one flat buffer: its modules in segment
 * order (embedding; blocks, each in enum block_tensor order, the layout
 * the kernels expect; final norm; output). A rank's shard is, as the
 * schedule says (schedule.per_tensor_shards):
 *   - flat: elements [r S, (r + 1) S) of the flat buffer padded at its end
 *     to n S elements. An all-gather's output is the flat buffer itself and
 *     a reduce-scatter's input the flat gradient: no copies (the testbed
 *     runtime);
 *   - per tensor: tensor by tensor, the rank's slice of dim-0 rows padded
 *     to a multiple of the group (a norm weight shards along its D
 *     elements), as FSDP2 does. An all-gather's output is the n shards one
 *     after the other; layout_unpack turns it into the flat buffer (the
 *     COPY_OUT op) and layout_pack does the reverse before a reduce-scatter
 *     (COPY_IN).
 * Pad elements are zero in every shard and stay zero (zero gradient, zero
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

/* One tensor of a unit. */
struct layout_tensor {
	size_t flat_off;   /* elements, in the unit's flat buffer */
	size_t shard_off;  /* per tensor: elements, in one rank's shard */
	size_t model_off;  /* elements, in the whole-model buffer (core/model.h module offsets) */
	int64_t rows;      /* dim-0 rows (a norm weight: its D elements) */
	int64_t cols;      /* elements per row (a norm weight: 1) */
	int64_t rows_per_rank; /* per tensor: ceil(rows / n) */
	float init_mean, init_std; /* initial values: norm weights 1; the embedding N(0, 1); weights N(0, 1/fan_in) */
};

struct unit_layout {
	int per_tensor;       /* 1: per-tensor shards; 0: flat */
	int ntensors;
	struct layout_tensor *t;
	size_t full_floats;   /* = unit->params */
	size_t shard_floats;  /* = unit->shard_elems */
};

/* Where a segment's parameters sit in its unit's flat buffer (elements). */
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

/*
 * The piece of tensor t that rank r holds in its shard of unit u: the
 * count of elements (0 for a rank past its end) at *dst in the shard, from
 * model element t->model_off + *src on. Per tensor, rows_per_rank of its
 * rows; a flat parameter, the part of the tensor inside [r S, (r + 1) S)
 * of the flat buffer.
 */
size_t layout_rank_piece(const struct unit_layout *u, const struct layout_tensor *t, int r, size_t *dst,
			 size_t *src);

/* Rank r's shard (shard_floats) of a unit, from the whole-model buffer (model_total_params). */
void layout_shard_from_model(const struct unit_layout *u, float *shard, const float *model, int r);
/*
 * Rank r's shard (shard_floats) of a unit's initial parameters, computed
 * from the seed alone, without the rest of the model: element k of the
 * whole model (its model_total_params layout) is its tensor's init_mean +
 * init_std z(seed, k), z a counter-based approximately standard normal
 * (the centred sum of four 16-bit uniforms of one 64-bit hash of (seed, k),
 * scaled to unit variance; |z| <= 3.47). So a shard holds exactly the
 * values of its slice of the model whatever the world size, wrapping or
 * shard layout, each rank makes only its shards (a 70B model never exists
 * whole on one rank), and the cost is O(shard), split over `threads`
 * (>= 1, the caller's one of them) by element ranges: each element is
 * computed alone, so the shard is the same bytes whatever their number.
 * Pads are zero.
 */
void layout_shard_init(const struct unit_layout *u, float *shard, int r, unsigned long seed, int threads);
/* Per tensor: the whole unit, flat, from the n shards one after the other (an all-gather's output). */
void layout_unpack(const struct unit_layout *u, float *flat, const float *gathered, int n);
/* Per tensor: the n shards one after the other (a reduce-scatter's input), pads zeroed, from flat. */
void layout_pack(const struct unit_layout *u, float *packed, const float *flat, int n);

#endif
