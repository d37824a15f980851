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
#include "alloc.h"    /* a PyTorch run's allocator events */
#include "fabric.h"
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

/* Memory at a step boundary: after the build (the first), after a step (the rest). */
struct mem_after {
	uint64_t alloc;    /* bytes allocated */
	uint64_t reserved; /* bytes the allocator holds */
};

#define MEM_AFTER_MAX 9 /* the build and 8 steps */

struct summary {
	double step_time_s;        /* measured runs: the median of the measured steps */
	double step_time_p10_s;    /* measured runs: the 10th and 90th percentiles of the steps (a prediction: = step_time_s) */
	double step_time_p90_s;
	int steps;                 /* measured steps (1 for a prediction) */
	double tokens_per_s_per_gpu;
	double mfu;
	double compute_s;          /* time the compute stream is busy */
	double exposed_comm_s;     /* step time with communication and no compute */
	uint64_t comm_bytes_per_gpu; /* wire bytes one GPU sends in the step */
	uint64_t peak_alloc_bytes;
	uint64_t peak_reserved_bytes;
	uint64_t peak_by_cat[MEM_CAT_COUNT]; /* allocation by category at the peak */
	uint64_t gpu_bytes;        /* memory the GPU has */
	/* a PyTorch run on a GPU: device memory in use outside its caching allocator at the run's end (the
	 * CUDA context, NCCL's buffers); read where a run has it, never written: 0 otherwise */
	uint64_t outside_bytes;
	/*
	 * a PyTorch run on a GPU: its caching allocator's segments at the
	 * run's end (torch.cuda.memory_snapshot()) by the stream that
	 * allocated them and pool, the attribute reserved_by_pool
	 * ("compute/large=BYTES allgather/small=BYTES ..."), laid out as
	 * mem_peaks.end_by_pool (2 * stream + 1: large); a stream the
	 * schedule has no name for in reserved_other. Read where a run has it,
	 * never written: has_reserved_by_pool 0 otherwise
	 */
	int has_reserved_by_pool;
	uint64_t reserved_by_pool[2 * ST_COUNT];
	uint64_t reserved_other;
	int fits;
	/*
	 * the caching allocator at the GPU's memory, over the run's steps
	 * (warmup included) and in its last; a file's run without them (a
	 * PyTorch run on a CPU, or from before they were recorded) reads
	 * has_alloc_retries 0 and zeros
	 */
	int has_alloc_retries;
	int alloc_retries;         /* flushes of its cache (PyTorch's num_alloc_retries) */
	int alloc_ooms;            /* new segments reserved past the GPU's memory even so (num_ooms) */
	int alloc_retries_step;    /* flushes in the last step (every step's, once the allocator settled) */
	/*
	 * a PyTorch run on a GPU, its profiled step (fsdp_bench.py
	 * --profile): from its first kernel's start to its last one's end,
	 * and the time some kernel of some stream ran; the rest is the GPU
	 * idle, waiting for its host or for another stream. Read where a run
	 * has them, never written: 0 otherwise
	 */
	double profile_span_s, profile_busy_s;
	int ncrit;
	char crit_name[RESULTS_CRIT_MAX][48]; /* the op groups that dominate the critical path */
	double crit_s[RESULTS_CRIT_MAX];      /* their time on it */
};

struct run_result {
	const char *source;               /* "sim", "gpu_run", "pytorch" or "published" */
	const char *hardware;             /* what ran or was priced: "amd-epyc-2-cores", "h100-sxm"; NULL for none */
	const char *compares;             /* a prediction of a measured run of the same file: its name, "000003" */
	const struct experiment *exp;
	const struct schedule *sched;
	const struct op_timing *ops;      /* sched->nops entries */
	const struct op_timing *ops_by_rank; /* measured runs: nranks * nops entries, rank by rank (NULL: none) */
	int nranks;
	int nmem;
	const struct mem_sample *mem;
	struct summary sum;
};

/* Append r to the HDF5 file at path (created if missing). 0, or -1 after a message on stderr. */
int results_append(const char *path, const struct run_result *r);

/*
 * Whether run r is already among the file's runs (all[0..n)), as a
 * results_append_runs caller judges it: then r is not written again.
 */
struct run_read;
typedef int (*results_there_fn)(void *ctx, const struct run_result *r, const struct run_read *all, int n);

/*
 * Append n runs at once (one copy of the file). With `there`, the caller
 * has left out the runs already in the file as it read it, `seen` runs
 * long; should another writer have appended since (under the file's lock
 * its count is not `seen`), the file is read again and each run that
 * `there` finds in it now is left out too, so that two writers never add
 * the same run twice. The runs written are counted in *written (may be
 * NULL). 0, or -1 after a message (nothing written).
 */
int results_append_runs(const char *path, const struct run_result *runs, int n, int seen, results_there_fn there,
			void *ctx, int *written);

/*
 * Inside an h5file_append() writer (core/h5file.h) that adds more than
 * runs: write r as the next group of /runs of the open file (an hid_t),
 * its name into name_out (NULL: not wanted). 0, or -1 after reporting.
 */
struct h5file_session;
int results_write_run(struct h5file_session *s, int64_t file, const struct run_result *r, char name_out[16]);

/*
 * Why the existing regular file at path is not one results_append() may
 * add to (not HDF5; HDF5 with other contents than /runs or /sweeps; one
 * of them no group, or full: core/h5file.h), or NULL when it is: an
 * outfile_refusal_fn (core/outfile.h), for the checks before a run.
 */
const char *results_refusal(const char *path);

/*
 * Why the file at path cannot be read as a results file ("is a directory,
 * not a results file (data/README.md)", a device or FIFO likewise, "is
 * not an HDF5 results file (data/README.md)", or stat()'s error), or NULL
 * when it may be one (results_read() says what else it lacks). Quiet; a
 * FIFO or device is never opened. For readers before they start
 * (./sim --compare) and results_read().
 */
const char *results_unreadable(const char *path);

/* Number of runs in a results file, or -1 when it cannot be read. */
int results_count(const char *path);

/* A device kernel of a PyTorch run's profiled step (dataset `kernels`, experiments/pytorch/fsdp_bench.py). */
struct run_kernel {
	char name[64];
	int32_t calls;
	double device_us; /* summed over its calls in the step */
};

/* One run read back from a results file (results_read). */
struct run_read {
	char name[16];             /* "000003" */
	char source[16];
	char hardware[64];
	char compares[16];
	char collectives_check[256]; /* PyTorch runs: its collectives against the schedule's (attach_schedule.py), "" */
	char build[16];            /* PyTorch runs: where the model was made, "device" or "meta" (attribute build), "" */
	char attention_used[16];   /* gpu_run's CUDA runs: the attention kernels launched (kernels.attention_used), "" */
	char created[32];          /* when the run was written (UTC, ISO 8601; attribute created), "" */
	char binary[24];           /* gpu_run's runs: the build that ran it (attribute binary), "" */
	char error[256];           /* why it could not be rebuilt ("" when it could) */
	int foreign;               /* error says why it is not of this schema (a source or schema_version
				      this build does not know): results_read refuses the file */
	struct experiment exp;     /* its configuration, resolved again from its attributes (config_release) */
	struct op_timing *ops;     /* nops entries, in schedule order */
	uint8_t *kinds, *streams;  /* per op, as recorded */
	int nops;
	struct op_timing *by_rank; /* measured runs: nranks * nops, rank by rank (NULL when not recorded) */
	int nranks;
	struct mem_sample *mem;
	int nmem;
	struct run_kernel *kernels; /* PyTorch runs: the device's kernels of one step (NULL: none recorded) */
	int nkernels;
	struct alloc_event *alloc_trace; /* PyTorch runs: its caching allocator's events (core/alloc.h; NULL: none) */
	int nalloc_trace;
	/* PyTorch runs: memory after the build and after each warm-up step (memory_by_step; NULL: none) */
	struct mem_after *by_step;
	int nby_step;
	struct summary sum;
	struct fabric_record fabric; /* gpu_run's fabric.* attributes (core/fabric.h) */
};

/*
 * Every run of a results file: configuration rebuilt through the config
 * parser from its section.key attributes (the others, what gpu_run was on,
 * are not configuration; its fabric.* ones are kept in `fabric`), ops,
 * memory timeline, summary. A run whose
 * configuration cannot be rebuilt keeps its error in `error`. A run of
 * another schema (a schema_version other than this build's, a source it
 * does not know) refuses the whole file: -1 after a message naming each
 * such run, with no run. *runs is malloc'ed; results_read_free releases
 * it. 0, or -1 after a message.
 */
int results_read(const char *path, struct run_read **runs, int *n);
void results_read_free(struct run_read *runs, int n);

#endif
