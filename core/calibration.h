/*
 * calibration.h - what the machine a run executes on really costs, as
 * microbenchmarks measured it (`gpu_run --calibrate`), for the simulator
 * to price kernels, collectives and overheads with (`./sim --calibration`)
 * instead of datasheet constants.
 *
 * A calibration is measured op kind by op kind, never from the end-to-end
 * runs it is then used to predict: every kernel of the model's lists on
 * its own (and beside a running collective), a grid of GEMMs, a
 * memory-bound pass over sizes, host-device copies each way over sizes,
 * each collective of the schedule's groups
 * over message sizes (and beside a running kernel), the optimizer, and the
 * runtime's per-op overheads. Everything is timed with all ranks of the
 * job running the same microbenchmark at once, so a machine whose ranks
 * share cores or memory bandwidth is measured as the runs use it, and
 * work is timed as its slowest rank does it, the pace of a synchronous
 * step.
 *
 * File: `data/calibration/<hardware>-<backend>.h5`, one group per session,
 * /calibration/NNNNNN (appended, never rewritten; core/h5file.h). Its
 * attributes and datasets are documented in data/README.md.
 */
#ifndef CORE_CALIBRATION_H
#define CORE_CALIBRATION_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "schedule.h"

#define CAL_NAME_MAX 24
#define PASS_TRAFFIC 1.5 /* a pass's traffic per byte of its label (struct cal_pass) */
#define CAL_TEXT_MAX 160

/*
 * One kernel (or GEMM of the grid) measured: ns alone, ns_comm beside a
 * running collective (the schedule's largest), ns_comm2 beside two at once
 * on two streams (that one and the largest of another stream: FSDP's
 * backward overlaps a reduce-scatter with the next all-gather; HSDP's
 * replica all-reduce with both), ns_ar beside the largest all-reduce alone
 * (DDP's gradients: a reduction over twice a ring's steps, which takes
 * more from the kernels beside it than a gather). 0: not measured
 * (ns_comm2 and ns_ar are not in files from before them).
 */
struct cal_kernel {
	char name[CAL_NAME_MAX];
	uint8_t kind;     /* enum kernel_kind */
	int64_t m, n, k;
	uint64_t flops, bytes;
	double ns, ns_comm, ns_comm2, ns_ar;
};

/* What runs beside a kernel, for its price: nothing, one collective, two or more, one all-reduce. */
enum cal_beside { CAL_ALONE, CAL_BESIDE_ONE, CAL_BESIDE_TWO, CAL_BESIDE_ALLREDUCE, CAL_BESIDE_COUNT };

/* One collective of a group measured at one size: ns alone, and beside a running kernel. */
struct cal_coll {
	uint8_t kind;     /* enum op_kind: OP_ALLGATHER, OP_REDUCE_SCATTER, OP_ALLREDUCE */
	int32_t ranks;    /* in the group */
	uint64_t bytes;   /* S, the full buffer (the schedule's op bytes) */
	double ns, ns_busy;
};

/*
 * A memory-bound pass labelled `bytes`: dst += src over bytes / 8 fp32
 * elements, so half its bytes read and half read and written, 1.5 times
 * its bytes of traffic (PASS_TRAFFIC), the traffic an op's bytes count.
 */
struct cal_pass {
	uint64_t bytes;
	double ns;
};

/* A copy of `bytes` between host and device memory on the copy stream, kind OP_H2D or OP_D2H. */
struct cal_copy {
	uint8_t kind;
	uint64_t bytes;
	double ns;
};

struct calibration {
	char path[512];            /* the file it was read from */
	char session[16];          /* its newest session, "000003" */
	int sessions;              /* sessions merged (the tables of older ones fill in what newer ones lack) */
	char hardware[64];         /* "amd-epyc-2-cores", "h100-sxm" */
	char backend[16];          /* one of calibration_backends */
	char date[32];
	char versions[CAL_TEXT_MAX];
	char binary[24];           /* the build of gpu_run that measured it (a hash of its executable), "": not recorded */
	char fabric[CAL_TEXT_MAX]; /* "real", or "emulated" (gpu_run --emulate-world) with its overrides */
	char series[CAL_NAME_MAX]; /* sessions of one series are repeats: each point is their median ("": none) */
	int ranks;                 /* the world size the tables stand for: processes measured at once, or N emulated */
	struct cal_kernel *kernels; /* the model's kernels, by name and shape */
	int nkernels;
	struct cal_kernel *gemm;   /* a grid of GEMMs, for shapes not measured by name */
	int ngemm;
	struct cal_pass *passes;   /* memory-bound passes by size */
	int npasses;
	struct cal_coll *colls;
	int ncolls;
	struct cal_copy *copies;   /* host-device copies by direction and size (none in files from before them) */
	int ncopies;
	double dispatch_ns;        /* an op on a stream that does nothing: the runtime's own cost per op
				    * (backend pytorch: the host's, per eager op: calibration_host_dispatch) */
	double issue_ns;           /* the host issuing one op (the walker's cost per op) */
	double wake_ns;            /* from an op's end to the start of an op of another stream waiting for it */
	/*
	 * The optimizer's time is call_ns + ns_per_elem x elements: gpu_run
	 * times it at two sizes (a small one and the schedule's largest
	 * optimizer call), ns_per_elem the slope between them; sessions from
	 * before have one size (at 2^20) and no call_ns (0).
	 */
	double adamw_ns_per_elem;  /* the optimizer, per parameter element */
	double adamw_call_ns;      /* the optimizer, per call (0: not measured) */
	double host_adamw_ns_per_elem; /* the host optimizer (offload), per element */
	double host_adamw_call_ns; /* the host optimizer, per call (its threads' start; 0: not measured) */
	double adamw_fused_ns_per_elem; /* PyTorch's fused AdamW, per element; 0: not measured (adamw_ns_per_elem) */
	int launch_queue;          /* kernels a stream holds before a launch blocks; 0: no bound; -1: not measured */
};

/*
 * What may measure a session, its backend attribute: gpu_run's backends
 * (cpu, cuda) and experiments/pytorch/microbench.py (pytorch).
 * NULL-terminated. A file naming another is refused when read.
 */
extern const char *const calibration_backends[];

/*
 * Append a session to the calibration file at path (created when missing;
 * an existing file must be a calibration file: HDF5 with /calibration, or
 * an empty HDF5 file). 0, or -1 after a message, the file left as it was.
 */
int calibration_write(const char *path, const struct calibration *c);

/*
 * Why the existing regular file at path is not one calibration_write() may
 * add to (not HDF5; HDF5 with other contents than /calibration, a results
 * file among them), or NULL when it is: an outfile_refusal_fn
 * (core/outfile.h), for the checks before gpu_run --calibrate measures.
 */
const char *calibration_refusal(const char *path);

/*
 * A calibration is named by its file, FILE (every session of it), or by
 * FILE@NNNNNN: the file as it stood when session /calibration/NNNNNN was
 * appended, the sessions up to that one, which sessions appended later
 * do not change (a prediction records its calibration so, and reads it
 * again as it was). Every function below that takes a path takes either.
 * calibration_file() puts the file into file (n bytes) and the session
 * into upto (CAL_SESSION_LEN bytes; "" for none); 1 when the name selects
 * a session, 0 when it does not, -1 when the file's name does not fit.
 */
#define CAL_SESSION_LEN 8
int calibration_file(const char *spec, char *file, size_t n, char *upto);
/* access(FILE, R_OK) of the calibration named spec: 0, or -1 with errno set (ENAMETOOLONG: no such name fits). */
int calibration_access(const char *spec);
/*
 * Whether spec names a file: "" and "none" name none (the catalog's
 * constants price the run; none is what a sweep's axis or --compare
 * writes for it).
 */
int calibration_named(const char *spec);
/*
 * The name FILE@NNNNNN of the calibration named spec (into out, n bytes;
 * out may be spec): its session, or the file's newest. What ./sim records
 * and prints: a prediction --compare appends, a run of --out, a sweep's
 * rows. 0, or -1 with the message in err (the file cannot be read, holds
 * no session, or has no such session).
 */
int calibration_pin(const char *spec, char *out, size_t n, char *err, int errlen);

/*
 * The sessions of the file at path measured with `ranks` processes (0:
 * any), merged: the overheads and the optimizer of the newest; the tables
 * of all, a point measured again (the same kernel and shape, GEMM, pass
 * size, or collective, group size and bytes) taken from the newest session
 * that measured it. So calibrating one model and then another gives the
 * kernels of both. Only sessions on the newest one's fabric merge (a real
 * 4-rank job and rank 0 of an emulated one are different machines; a file
 * without the attribute was measured on a real fabric). Sessions that
 * merge must name one hardware and backend.
 *
 * Everything read is checked (the values data/README.md allows: times
 * finite, positive and at most an hour, sizes positive, kinds the tables'
 * own, every field of a table there); a file that breaks a rule is refused
 * at its first fault, with a message naming the file, the session group
 * (/calibration/NNNNNN), the attribute or the table, row and field, and
 * what is allowed. Merging sorts the rows of all sessions: O(n log n) for
 * n rows. 0, or -1 with the message in err.
 */
int calibration_read(const char *path, int ranks, struct calibration *c, char *err, int errlen);
/*
 * calibration_read of the sessions on one fabric: "real" or "emulated"
 * (what a measured run ran on: its kernels and collectives are that
 * fabric's, so sessions of its world size on another are left out; NULL
 * or "": the newest session's, as calibration_read). A file whose
 * sessions of that world size are all on another fabric is refused,
 * saying so.
 */
int calibration_read_on(const char *path, int ranks, const char *fabric, struct calibration *c, char *err,
			int errlen);
/*
 * Whether the file at path can price a run of every world size it holds:
 * calibration_read of each. For a calibration named before anything is
 * simulated (a sweep's axis). 0, or -1 with the message in err.
 */
int calibration_check(const char *path, char *err, int errlen);
void calibration_release(struct calibration *c);

/*
 * Prices, in ns, of one thing on its own. A kernel measured by name and
 * shape is looked up; otherwise a GEMM or attention kernel is priced from
 * the grid at its FLOP rate for the nearest work, a memory-bound one from
 * the passes at its bytes (both interpolated in log-log with GSL); *exact
 * says which. beside (enum cal_beside): what runs beside the kernel; its
 * time measured beside that where it was, else beside one collective,
 * else alone.
 */
double calibration_kernel_ns(const struct calibration *c, const struct kernel *k, int beside, int *exact);
/*
 * A GEMM or attention kernel not measured by name whose FLOPs are below
 * every point it is priced from (calibration_kernel_ns gives it the
 * smallest point's time): 1, and that point as a kernel in *anchor (its
 * shape as measured); else 0.
 */
int calibration_kernel_anchor(const struct calibration *c, const struct kernel *k, struct kernel *anchor);
/*
 * A collective of S bytes over `ranks` (interpolated between sizes); busy:
 * beside a kernel. -1 when no collective of that kind and group size was
 * measured (calibration_has_collective).
 */
double calibration_collective_ns(const struct calibration *c, enum op_kind k, int ranks, uint64_t bytes,
				 int busy);
/* Whether collectives of kind k over `ranks` were measured. */
int calibration_has_collective(const struct calibration *c, enum op_kind k, int ranks);
/*
 * Whether dispatch_ns is the host's cost of each kernel rather than a cost
 * of each op on its stream: a session of experiments/pytorch/microbench.py
 * (backend pytorch) times one eager op issued from Python (the dispatcher
 * and the launch) on a busy GPU, and each kernel's own time with events on
 * the device, which holds no cost of the runtime's beside them; eager
 * PyTorch issues each kernel so. gpu_run's backends (cpu, cuda) measure an
 * empty op on a stream (the executor's cost per op, on the stream) and
 * their walker's issue time per op (issue_ns).
 */
int calibration_host_dispatch(const struct calibration *c);
/* A memory-bound op moving `bytes` (reads and writes counted): the pass of that much traffic. */
double calibration_pass_ns(const struct calibration *c, uint64_t bytes);
/* How much what `beside` (enum cal_beside) says runs beside a kernel slows it: the measured kernels' median. */
double calibration_slowdown(const struct calibration *c, int beside);
/* The memory-bound kernel measured under `name`, at whatever size: 0 and its bytes and time alone, or -1. */
int calibration_kernel_named(const struct calibration *c, const char *name, uint64_t *bytes, double *ns);
/*
 * A copy of `bytes` from host to device memory (OP_H2D) or back (OP_D2H):
 * the measured copies of that direction, interpolated; a calibration
 * without them prices it as a pass reading and writing its bytes.
 */
double calibration_copy_ns(const struct calibration *c, enum op_kind k, uint64_t bytes);
/*
 * A memory-bound op of no kernel list (a copy FSDP2 runs, an accumulation)
 * named `name` (op_kind_name) moving `bytes`: the kernels row of that name
 * and bytes where one was measured (experiments/pytorch/microbench.py
 * times FSDP2's copies so; beside collectives, its time measured beside
 * them where it was, as calibration_kernel_ns), else the pass of that
 * traffic.
 */
double calibration_op_ns(const struct calibration *c, const char *name, uint64_t bytes, int beside);
/*
 * One optimizer call over elems parameter elements under optimizer o, on
 * the host (offload) or the device: call_ns + ns_per_elem x elems; on the
 * device PyTorch's fused AdamW per element where measured apart.
 */
double calibration_adamw_ns(const struct calibration *c, enum optim o, int host, double elems);
/*
 * The optimizer's call_ns and ns_per_elem from its times t0 and t1 at n0 <
 * n1 elements: the line through both, where it rises and crosses zero
 * above zero calls; else no call cost and t1 / n1 an element (a smaller
 * size no faster, or one whose line would give a negative call cost).
 */
void calibration_adamw_fit(double n0, double t0, double n1, double t1, double *call_ns, double *ns_per_elem);

#endif
