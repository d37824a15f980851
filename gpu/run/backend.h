/*
 * backend.h - the seam between gpu_run's walker over the schedule
 * (exec.c) and a device that does the work.
 *
 * A backend offers what a GPU runtime offers: memory (device segments and
 * host buffers), in-order streams with events, and the step's work
 * launched asynchronously on a stream: forward, recompute and backward of
 * a segment, the three collectives, accumulation, the optimizer, copies.
 * The walker issues a step the way a CUDA program would: for every op, in
 * issue order, it makes the op's stream wait for the events of its
 * dependencies on other streams, records an event before and after it,
 * and launches its work; then it waits for the streams once, at the end of
 * the step. Nothing in a backend decides policy: it does what it is told,
 * with the memory it is given.
 *
 * Launch functions copy what they need from their arguments: the caller's
 * structs and arrays may be reused as soon as they return. Pointers into
 * device memory stay valid until the op has run (the walker's allocator
 * guarantees it, core/alloc.h).
 *
 * Backends: backend_cpu.c (threads for streams, the fp32 reference
 * kernels, MPI for collectives: runs everywhere) and backend_cuda.c (CUDA
 * streams and events, the bf16 CUDA model of gpu/cuda, NCCL; built where
 * CUDA is). A collective whose communicator is emulated (comm.h,
 * --emulate-world) is device traffic of the bytes one rank of the ring
 * would move, paced to the emulated link, in either backend.
 *
 * Element types travel with the memory wherever the two sides of an
 * operation may differ (an fp32 master shard gathered into bf16 full
 * parameters, an unsharded bf16 gradient packed into an fp32 reduction
 * input): a backend converts, or refuses the schedule when created.
 */
#ifndef GPU_RUN_BACKEND_H
#define GPU_RUN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"
#include "schedule.h"

struct backend;
struct comm;
struct comm_handle; /* a group's communicator for one stream (comm.h) */

/* One segment's forward, recompute or backward, with its memory. */
struct seg_args {
	int seg;                /* index in the schedule's segments */
	int micro;              /* which microbatch's tokens and targets */
	const void *params;     /* the segment's parameters (full, compute type); head: the final norm */
	const void *out_params; /* head: the output projection (V, D) */
	void *grads;            /* backward: the segment's gradient, accumulated into (+=) */
	void *out_grads;        /* head backward: the output projection's gradient */
	void *saved;            /* what forward keeps for backward (BUF_ACTS, or BUF_TOKENS) */
	void *recomputed;       /* what recompute rebuilds (BUF_RECOMPUTED), or NULL */
	void *scratch;          /* the op's transient memory (BUF_TRANSIENT), or NULL */
	void *resid;            /* forward: the residual stream (in and out); backward: its gradient */
	enum elem param_elem;   /* of params and out_params */
	enum elem grad_elem;    /* of grads and out_grads */
};

/* One tensor of an optimizer step: parameters, gradient, its two moments (each n elements). */
struct optim_tensor {
	void *p;
	void *g;
	void *m, *v;
	size_t n;               /* elements */
	enum elem p_elem, g_elem, state_elem;
	int unit;               /* whose shard: the model tensors inside it are layout.h's; -1: one tensor */
};

struct optim_args {
	const struct optim_tensor *t;
	int count;
	float lr, beta1, beta2, eps, weight_decay;
	int step;               /* AdamW's t, from 1 */
	float grad_scale;       /* the gradients are sums over microbatches: 1 / M */
	enum optim form;        /* the schedule's launch form: foreach, fused or per-tensor */
};

struct backend_ops {
	const char *name;
	void (*release)(struct backend *b);

	/* memory: device segments (NULL when out of memory), host buffers; synchronous copies outside a step */
	void *(*dev_alloc)(struct backend *b, uint64_t bytes);
	void (*dev_free)(struct backend *b, void *p);
	void *(*host_alloc)(struct backend *b, uint64_t bytes);
	void (*host_free)(struct backend *b, void *p);
	void (*upload)(struct backend *b, void *dev, const void *host, uint64_t bytes);
	void (*download)(struct backend *b, void *host, const void *dev, uint64_t bytes);

	/* the step: its data, its clock, its events (two per op: start and end) */
	void (*set_batch)(struct backend *b, int micro, const int *tokens, const int *targets);
	void (*step_begin)(struct backend *b);
	uint64_t (*now_ns)(struct backend *b);            /* host clock since step_begin */
	void (*record)(struct backend *b, int stream, int event);
	/* stream waits for event: recorded earlier in the step, or later by another stream (a gate) */
	void (*wait)(struct backend *b, int stream, int event);
	void (*sync)(struct backend *b);                  /* every stream has run everything */
	uint64_t (*event_ns)(struct backend *b, int event); /* after sync: ns since step_begin */
	double (*loss)(struct backend *b);                /* after sync: sum of the microbatches' mean losses */

	/* work on a stream */
	void (*zero)(struct backend *b, int stream, void *p, uint64_t bytes);
	void (*forward)(struct backend *b, int stream, const struct seg_args *a);
	void (*recompute)(struct backend *b, int stream, const struct seg_args *a);
	void (*backward)(struct backend *b, int stream, const struct seg_args *a);
	/*
	 * Collectives of `count` elements per rank; reductions average over the
	 * group. all_gather: out (count x group size, type oe) gets every rank's
	 * in (type ie, converted).
	 */
	void (*all_gather)(struct backend *b, int stream, struct comm_handle *h, void *out, enum elem oe,
			   const void *in, enum elem ie, size_t count);
	void (*reduce_scatter)(struct backend *b, int stream, struct comm_handle *h, void *out, const void *in,
			       size_t count, enum elem e);
	void (*all_reduce)(struct backend *b, int stream, struct comm_handle *h, void *buf, size_t count,
			   enum elem e);
	/* dst += src, count elements of dst's type and src's (a shard in the reduce dtype into the accumulated one) */
	void (*accumulate)(struct backend *b, int stream, void *dst, enum elem de, const void *src, enum elem se,
			   size_t count);
	void (*optimizer)(struct backend *b, int stream, const struct optim_args *a);
	/* bytes from src to dst, converting when the element types differ */
	void (*copy)(struct backend *b, int stream, void *dst, enum elem de, const void *src, enum elem se,
		     size_t count);
	/*
	 * Per-tensor shards: a gather's output to the flat layout (one type e),
	 * and a flat gradient (type fe) to a reduction's input (type pe).
	 */
	void (*unpack)(struct backend *b, int stream, const struct unit_layout *u, void *flat, const void *gathered,
		       enum elem e, int n);
	void (*pack)(struct backend *b, int stream, const struct unit_layout *u, void *packed, enum elem pe,
		     const void *flat, enum elem fe, int n);
	/*
	 * Optional (NULL): what the run is on, as key = value pairs (the device,
	 * library versions, the communication setup, memory the backend holds
	 * outside the allocator), for the summary and the results file. Once,
	 * after a step.
	 */
	void (*describe)(struct backend *b, void (*put)(void *ctx, const char *key, const char *value), void *ctx);

	/*
	 * Calibration (gpu/run/calibrate.c): one kernel of the model's lists
	 * (core/model.h; a GEMM of any shape) on its own, on scratch memory the
	 * backend keeps, and the pseudo-kernels "pass" (a memory-bound pass of
	 * k->bytes) and "adamw" (the optimizer over k->m elements, on the
	 * compute or the host stream) (NULL: the backend cannot calibrate);
	 * and the hardware's name for file names and run attributes
	 * ("amd-epyc-7b13-2-cores", "nvidia-h100-80gb-hbm3").
	 */
	void (*kernel)(struct backend *b, int stream, const struct kernel *k, const struct model_shape *m, int batch);
	void (*hardware)(struct backend *b, char *buf, int len);
	/*
	 * Optional (NULL: no limit): the calls of work one stream may take while
	 * it waits for an event not yet recorded (calibrate.c's gate, recorded
	 * once everything is queued). A CUDA stream's launch queue holds about a
	 * thousand launches; a host that fills it blocks in the next launch and
	 * never records the event.
	 */
	int (*gate_calls)(struct backend *b);
	/* Optional: the device and the versions of the libraries its timings depend on, one line. */
	void (*versions)(struct backend *b, char *buf, int len);
};

struct backend {
	const struct backend_ops *ops;
};

/*
 * The CPU backend for schedule s on this rank's communicators. NULL with a
 * message in err when the schedule asks for what it cannot do (element
 * types other than fp32).
 */
struct backend *backend_cpu_new(const struct schedule *s, struct comm *c, char *err, int errlen);

/*
 * The CUDA backend (backend_cuda.c, built only where CUDA is: GPU_RUN_CUDA)
 * for schedule s on the current device (the caller selects it) and this
 * rank's communicators, whose NCCL communicators comm_nccl_init has made
 * (unless every collective is emulated). NULL with a message in err when
 * the schedule asks for what it cannot do (fp32 activations, shapes the
 * kernels do not support). Options: struct cuda_opts.
 */
struct cuda_opts {
	int attention;        /* 0: the mma.sync flash kernel; 1: cuDNN's fused SDPA where it builds */
	int gemm_autotune;    /* 1: time cuBLASLt's top heuristic candidates once per shape */
};
struct backend *backend_cuda_new(const struct schedule *s, struct comm *c, const struct cuda_opts *o, char *err,
				 int errlen);
/*
 * One GPU per rank: the local_rank-th device of this node (local_size
 * ranks share it), made current. -1 with a message in err when the node
 * has fewer GPUs than ranks (NCCL refuses two ranks on one GPU: run one
 * rank of the job with --emulate-world, or stage the collectives) or none
 * at all. staged (gpu_run --staged-collectives: no NCCL): ranks share the
 * node's GPUs in turn, device local_rank % GPUs.
 */
int backend_cuda_select(int local_rank, int local_size, int staged, char *err, int errlen);
/* The failure hook of the CUDA check macros: the message is printed; abort the job (every rank). */
void backend_cuda_on_failure(struct comm *c);

/* Events of op i: its start and its end. */
static inline int event_start(int op)
{
	return 2 * op;
}

static inline int event_end(int op)
{
	return 2 * op + 1;
}

#endif
