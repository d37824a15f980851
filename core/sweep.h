/*
 * sweep.h - a design space: the configurations of a sweep file, one by
 * one, resolved and checked as experiment files are.
 *
 * A sweep file is an INI file (read with inih, as experiments are):
 *
 *   [sweep]
 *   experiment = ../llama3.ini   ; the base (relative to the sweep file); none: ./sim's defaults
 *   policies = all              ; every valid policy around each configuration (policy_next)
 *   global_batch = 256           ; sequences per optimizer step, over every rank
 *   memory_budget_gib = 70       ; what "fits" means (default: the GPU's memory)
 *   must_fit = true              ; configurations over the budget are not timed
 *   timelines = false            ; also record each configuration's ops as a run
 *   what_if = cluster.inter_gbps ; the resource the advisor answers for, value by value
 *
 *   [cluster]
 *   nodes = 1, 2, 4, 8           ; a list of values
 *   inter_gbps = 6.25..100 times 2  ; a range: lo..hi [step S | times F]
 *
 *   [policy]
 *   sharding = fsdp, hsdp
 *
 * Every key of [model], [cluster], [policy] and [run] is an axis (one value
 * is an axis of one value), and every value goes through the experiment
 * key table (config_set): a bad value is `file:line: <the experiment
 * file's message>`. run.out cannot be swept: a sweep writes where --out
 * says.
 *
 * Configurations are the combinations of the axes' values, with the
 * policy walk (policies = all) inside each combination. They are numbered
 * (the candidate index) in a fixed order: the axes that change the step's
 * schedule outermost, in file order; then the policy walk; then the axes
 * that only price it (cluster.inter_gbps, the GPU spec keys but the peak
 * FLOP rates, and the [run] keys the simulator does not read), so that
 * configurations sharing a schedule are neighbours. A candidate is
 * skipped, with its reason, when it breaks a rule of config_resolve (a
 * shard group that does not divide the world, defer-replica without hsdp,
 * ...), when the rules resolve it to another combination of the sweep
 * (zero2 with reshard yes is zero2 with reshard no), or when it misses the
 * global batch. Each valid configuration is a row (struct sweep_row),
 * from which it can be rebuilt.
 *
 * Global batch G: microbatches = G / (batch * ranks) for each
 * configuration when policy.microbatches is not an axis (a candidate where
 * that is not a whole number is skipped); when it is, only candidates with
 * batch * microbatches * ranks = G are kept.
 */
#ifndef CORE_SWEEP_H
#define CORE_SWEEP_H

#include <stddef.h>
#include <stdint.h>

#include "experiment.h"

#define SWEEP_AXES_MAX 24
/*
 * values of one axis: the sweep's group in the results file lists them in
 * one attribute (core/sweep_table.c), which must fit an HDF5 object header
 * (64 KiB, 16 bytes a string); and a row keeps each index in 16 bits
 */
#define SWEEP_VALUES_MAX 4000

struct sweep_axis {
	char section[16];
	char name[32];
	int type;            /* config_key_type: 'i', 'r', 'b', 'n' */
	int policy;          /* a [policy] key */
	int price_only;      /* does not change the schedule: an inner axis */
	int line;            /* in the sweep file */
	char where[CONFIG_PATH_MAX + 16]; /* "file:line", the origin of its values */
	int nvalues;
	char **values;       /* canonical text (as config_get gives it back) */
};

struct sweep {
	char path[CONFIG_PATH_MAX];        /* the sweep file, or the experiment a sweep was made of */
	int from_file;                     /* read from a sweep file (sweep_load) */
	char experiment[CONFIG_PATH_MAX];  /* the base experiment file, "" for ./sim's defaults */
	struct experiment base;            /* the base, with every axis of one value applied */
	int naxes;
	struct sweep_axis axes[SWEEP_AXES_MAX];
	int order[SWEEP_AXES_MAX];         /* axes by enumeration place, outermost first */
	int nouter;                        /* order[0..nouter) change the schedule, the rest only price it */
	int walk;                          /* policies = all */
	long global_batch;                 /* 0: free */
	double memory_budget_gib;          /* 0: each configuration's GPU memory */
	int must_fit;
	int timelines;
	int what_if;                       /* the axis the advisor answers for each value of, -1 none */
	uint64_t ninner;                   /* combinations of the inner axes */
	uint64_t nouter_combos;            /* combinations of the outer axes */
	/* with the walk: candidates before each outer combination (nouter_combos + 1 entries) */
	uint64_t *outer_first;
	uint64_t ncandidates;
	int microbatches_axis;             /* policy.microbatches is an axis */
	int key_microbatches_line;
	char global_batch_where[CONFIG_PATH_MAX + 32];
};

/*
 * Read a sweep file. 0, or -1 after printing every error as
 * `path:line: ...` (the caller exits 2).
 */
int sweep_load(struct sweep *sw, const char *path);

/*
 * A sweep of one experiment with no axes: e (resolved; copied), with the
 * policy walk when walk is set. For `./sim --policy all` and --advise.
 * 0, or -1 after printing.
 */
int sweep_of_experiment(struct sweep *sw, const struct experiment *e, int walk);

/*
 * Add an axis given on the command line (`--what-if cluster.inter_gbps=1..100 times 2`):
 * "section.key=VALUES" in the syntax of a sweep file; origin names it in
 * messages. Call before sweep_plan. 0, or -1 after printing.
 */
int sweep_add_axis(struct sweep *sw, const char *assignment, const char *origin);

/*
 * Set the constraints from flags (0 / < 0 keep the file's): call before
 * sweep_plan. global_batch must be at least 1, the budget positive.
 */
void sweep_set_constraints(struct sweep *sw, long global_batch, double memory_budget_gib);

/*
 * Number the candidates (with the walk: walks each outer combination's
 * policies once to count them, some 8 ms each for an 8B model, so 4,000
 * combinations take half a minute). Call once, after the axes and
 * constraints are set. progress, when not NULL, is called with ctx after
 * each combination the walk counts (done of total, the candidates so
 * far). 0, or -1 after printing (a sweep with too many candidates).
 */
typedef void sweep_plan_progress(void *ctx, uint64_t done, uint64_t total, uint64_t candidates);
int sweep_plan(struct sweep *sw, sweep_plan_progress *progress, void *ctx);

void sweep_release(struct sweep *sw);

/* ---- configurations ---------------------------------------------------- */

/* A policy in a few bytes, for rows (sweep_policy_pack). */
struct sweep_policy {
	uint32_t shard_group;
	uint16_t partial_k, wrap_k, ac_k, microbatches;
	uint8_t sharding, accum, accum_dtype, wrap, reshard, optim, optim_in_backward, precision,
		reduce_dtype, ac, loss, offload, prefetch, flat_params, concat_last_only, runtime,
		expandable_segments, compile, sdpa, hold_logits;
};

void sweep_policy_pack(const struct policy *p, struct sweep_policy *out);
void sweep_policy_unpack(const struct sweep_policy *in, struct policy *p);

/* What a simulated configuration costs: the figures a row keeps. */
struct sweep_figures {
	double step_time_s;          /* NaN when not timed (must_fit and over the budget) */
	double tokens_per_s_per_gpu;
	double mfu;
	double compute_s;
	double exposed_comm_s;
	uint64_t comm_bytes_per_gpu;
	uint64_t peak_alloc_bytes;
	uint64_t peak_reserved_bytes;
	uint64_t budget_bytes;       /* what fits means for it */
	uint8_t fits;                /* peak reserved <= budget */
};

/* One valid configuration and what it costs. */
struct sweep_row {
	uint64_t index;                   /* candidate index */
	uint16_t value[SWEEP_AXES_MAX];   /* per axis (file order): the index of its value */
	struct sweep_policy policy;       /* the resolved policy (the walk's, or the axes' resolved) */
	struct sweep_figures fig;
};

/* Why a candidate has no row. */
enum sweep_status { SWEEP_OK, SWEEP_INVALID, SWEEP_DUPLICATE, SWEEP_OFF_BATCH, SWEEP_END };

/*
 * Walks the candidates in order; it only moves forward (a rank's blocks
 * come in increasing order). The experiment it builds is its own: valid
 * until the next call.
 */
struct sweep_iter {
	const struct sweep *sw;
	uint64_t outer;              /* the outer combination the walk is at; UINT64_MAX: none */
	struct experiment outer_exp; /* that combination resolved (for the walk's base) */
	int outer_ok;
	char outer_why[512];
	struct policy_walk walk;
	struct policy policy;        /* the walk's current policy */
	uint64_t walk_pos;           /* its index in the walk; UINT64_MAX before the first */
	struct experiment e;         /* the configuration last built */
	int have_e;
	void *errbuf;                /* messages of rejected candidates (a memory stream) */
	char *errtext;               /* its buffer */
	size_t errsize;
};

void sweep_iter_init(struct sweep_iter *it, const struct sweep *sw);
void sweep_iter_release(struct sweep_iter *it);

/*
 * Build candidate `index` (at least the last one asked for): SWEEP_OK with
 * *e its resolved experiment (it->e) and row->index, value and policy
 * filled in; SWEEP_END past the last candidate; otherwise the reason it is
 * skipped, with the first line of the message in why (n bytes).
 */
enum sweep_status sweep_iter_at(struct sweep_iter *it, uint64_t index, const struct experiment **e,
				struct sweep_row *row, char *why, size_t n);

/*
 * The experiment of a row, rebuilt on its own (for the advisor and the
 * timelines): into e (release it with config_release). 0, or -1 when it
 * no longer resolves (a bug: the row was made from it).
 */
int sweep_experiment_of(const struct sweep *sw, const struct sweep_row *row, struct experiment *e);

/* The axis value of a row as text: an axis's value, or a policy field's resolved value. */
const char *sweep_row_text(const struct sweep *sw, const struct sweep_row *row, int axis);

/* "nodes=4 inter_gbps=12.5": the row's values of the axes with more than one value, into buf. */
const char *sweep_row_label(const struct sweep *sw, const struct sweep_row *row, char *buf, size_t n);

#endif
