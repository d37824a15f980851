/*
 * results.h - one run's results, and the HDF5 schema both binaries write.
 *
 * A run is the resolved configuration, the timing of every op of the step
 * schedule, a memory timeline by category and a summary. results_append()
 * adds it to an HDF5 file as a new group /runs/NNNNNN and never touches the
 * runs already there: it writes a copy of the file and renames it over the
 * original only when complete, so an interrupted run leaves the file as it
 * was. The schema is documented in data/README.md.
 */
#ifndef CORE_RESULTS_H
#define CORE_RESULTS_H

#include <stdint.h>
#include "config.h"   /* a run records its resolved configuration: config_each() */
#include "schedule.h"

#define RESULTS_CRIT_MAX 3

struct op_timing {
	uint64_t start_ns;
	uint64_t end_ns;
};

struct mem_sample {
	uint64_t t_ns;
	uint64_t alloc[MEM_CAT_COUNT]; /* bytes allocated by category */
	uint64_t reserved;             /* bytes the allocator holds */
};

struct summary {
	double step_time_s;
	double tokens_per_s_per_gpu;
	double mfu;
	double compute_s;          /* time the compute stream is busy */
	double exposed_comm_s;     /* step time with communication and no compute */
	uint64_t comm_bytes_per_gpu; /* wire bytes one GPU sends in the step */
	uint64_t peak_alloc_bytes;
	uint64_t peak_reserved_bytes;
	uint64_t peak_by_cat[MEM_CAT_COUNT]; /* allocation by category at the peak */
	uint64_t gpu_bytes;        /* memory the GPU has */
	int fits;
	int ncrit;
	char crit_name[RESULTS_CRIT_MAX][48]; /* the op groups that dominate the critical path */
	double crit_s[RESULTS_CRIT_MAX];      /* their time on it */
};

struct run_result {
	const char *source;               /* "sim" or "gpu_run" */
	const struct experiment *exp;
	const struct schedule *sched;
	const struct op_timing *ops;      /* sched->nops entries */
	int nmem;
	const struct mem_sample *mem;
	struct summary sum;
};

/* Append r to the HDF5 file at path (created if missing). 0, or -1 after a message on stderr. */
int results_append(const char *path, const struct run_result *r);

/*
 * Why the existing regular file at path is not one results_append() may
 * add to (not HDF5; HDF5 with other contents than /runs), or NULL when it
 * is: an outfile_refusal_fn (core/outfile.h), for the checks before a run.
 */
const char *results_refusal(const char *path);

/* Number of runs in a results file, or -1 when it cannot be read. */
int results_count(const char *path);

#endif
