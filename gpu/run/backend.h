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
 * kernels, MPI for collectives: runs everywhere); a CUDA backend (CUDA
 * streams and events, the CUDA model, NCCL) plugs in behind the same table.
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
};

/* One tensor of an optimizer step: parameters, gradient, both moments (m then v). */
struct optim_tensor {
	void *p;
	void *g;
	void *moments;
	size_t n;               /* elements */
	enum elem p_elem, g_elem, state_elem;
};

struct optim_args {
	const struct optim_tensor *t;
	int count;
	float lr, beta1, beta2, eps, weight_decay;
	int step;               /* AdamW's t, from 1 */
	float grad_scale;       /* the gradients are sums over microbatches: 1 / M */
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
	void (*wait)(struct backend *b, int stream, int event);
	void (*sync)(struct backend *b);                  /* every stream has run everything */
	uint64_t (*event_ns)(struct backend *b, int event); /* after sync: ns since step_begin */
	double (*loss)(struct backend *b);                /* after sync: sum of the microbatches' mean losses */

	/* work on a stream */
	void (*zero)(struct backend *b, int stream, void *p, uint64_t bytes);
	void (*forward)(struct backend *b, int stream, const struct seg_args *a);
	void (*recompute)(struct backend *b, int stream, const struct seg_args *a);
	void (*backward)(struct backend *b, int stream, const struct seg_args *a);
	/* collectives of `count` elements per rank; reductions average over the group */
	void (*all_gather)(struct backend *b, int stream, struct comm_handle *h, void *out, const void *in,
			   size_t count, enum elem e);
	void (*reduce_scatter)(struct backend *b, int stream, struct comm_handle *h, void *out, const void *in,
			       size_t count, enum elem e);
	void (*all_reduce)(struct backend *b, int stream, struct comm_handle *h, void *buf, size_t count,
			   enum elem e);
	void (*accumulate)(struct backend *b, int stream, void *dst, const void *src, size_t count, enum elem e);
	void (*optimizer)(struct backend *b, int stream, const struct optim_args *a);
	/* bytes from src to dst, converting when the element types differ */
	void (*copy)(struct backend *b, int stream, void *dst, enum elem de, const void *src, enum elem se,
		     size_t count);
	/* per-tensor shards: a gather's output to the flat layout, and a flat gradient to a reduction's input */
	void (*unpack)(struct backend *b, int stream, const struct unit_layout *u, void *flat, const void *gathered,
		       int n);
	void (*pack)(struct backend *b, int stream, const struct unit_layout *u, void *packed, const void *flat,
		     int n);

	/*
	 * Calibration (gpu/run/calibrate.c): one kernel of the model's lists
	 * (core/model.h; a GEMM of any shape) on its own, on scratch memory the
	 * backend keeps; and the hardware's name for file names and run
	 * attributes ("amd-epyc-7b13-2-cores").
	 */
	void (*kernel)(struct backend *b, int stream, const struct kernel *k, const struct model_shape *m, int batch);
	void (*hardware)(struct backend *b, char *buf, int len);
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
