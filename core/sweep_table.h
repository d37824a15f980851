/*
 * sweep_table.h - a sweep's rows in a results file: one group
 * /sweeps/NNNNNN per sweep, whose dataset `configs` gets a row per
 * configuration as the sweep runs (schema: data/README.md).
 *
 * Every write is an h5file_append() (core/h5file.h): the file's new image
 * (what it held, plus the rows since the last write appended to `configs`,
 * an extensible chunked dataset, and the group's progress attributes) is
 * written beside it and renamed over it. So at every moment the file is a
 * complete HDF5 file holding every row written so far, whatever happens to
 * the sweep (Ctrl-C, a dead rank, a full disk); rows and runs already
 * there are never modified, only the sweep's own progress attributes
 * (`status`, `rows`, `seconds`, the counts) are replaced. A write costs a
 * copy of the whole file: the caller spaces its writes out (explore.c).
 */
#ifndef CORE_SWEEP_TABLE_H
#define CORE_SWEEP_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "results.h"
#include "sweep.h"

/* Where a sweep stands, for the group's attributes. */
struct sweep_progress {
	const char *status;         /* "running", "complete", "interrupted" */
	uint64_t skipped[SWEEP_END];
	double seconds;
	int ranks;
};

struct sweep_table {
	const struct sweep *sw;
	char path[CONFIG_PATH_MAX];
	char group[16];       /* the sweep's group under /sweeps, "" before the first write */
	uint64_t written;     /* rows in the file */
	size_t row_bytes;     /* one row as stored */
	int ncols;
	struct sweep_column {
		char name[64];    /* "cluster.inter_gbps", "policy.sharding", "step_time_s" */
		int axis;         /* the axis (file order), or -1 */
		int field;        /* a policy field (enum policy_field) of the walk or a derived one, or -1 */
		int figure;       /* a figure (index into the figure table), or -1 */
		char type;        /* 'i' int64, 'u' uint64, 'r' float64, 'b' uint8, 's' string, 'e' enum (axis values) */
		size_t offset, size;
	} cols[SWEEP_AXES_MAX + 40];
};

/* The table of sweep sw in the results file at path (nothing is written yet). */
void sweep_table_init(struct sweep_table *t, const struct sweep *sw, const char *path);

/*
 * Append rows[0..n) (and the runs, the per-op timelines of some of them,
 * as /runs groups naming the sweep and the row) and set the progress
 * attributes, in one h5file_append. The first call creates the group. 0,
 * or -1 after a message (the file is as it was; the rows are not counted
 * as written).
 */
int sweep_table_append(struct sweep_table *t, const struct sweep_row *rows, size_t n,
		       const struct run_result *runs, const uint64_t *run_rows, int nruns,
		       const struct sweep_progress *p);

#endif
