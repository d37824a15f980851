/*
 * backend_cuda.c - the CUDA backend (see backend.h): CUDA streams and
 * events, the bf16 CUDA model of gpu/cuda, NCCL collectives, the host
 * optimizer on a thread, the emulated fabric as paced device traffic.
 *
 * Plain C over the CUDA runtime API; its own kernels (conversions,
 * accumulation, pack/unpack, mixed-type AdamW, emulated traffic) are in
 * backend_cuda_kernels.cu. Built only where CUDA is (GPU_RUN_CUDA).
 *
 * Streams. One CUDA stream per schedule stream, non-blocking, the
 * communication streams (all-gather, reduce-scatter, all-reduce) at the
 * device's highest priority. ST_HOST, the host optimizer's stream, is a
 * thread draining an in-order queue, as in the CPU backend. Every op has
 * two events (start, end). A wait between two CUDA streams is
 * cudaStreamWaitEvent; a host-stream op waiting for a CUDA op blocks its
 * thread in cudaEventSynchronize (the host optimizer "gated by events");
 * a CUDA stream waiting for a host-stream op waits on a flag in mapped
 * pinned memory that the host thread sets (cuStreamWaitValue32 through
 * the runtime's driver entry point). A wait for an event not yet recorded
 * (the gate of gpu_run --calibrate, which the host stream records once all
 * the work is queued) is a one-thread kernel polling the same flag, which
 * the event's record then sets: the host thread, or the recording CUDA
 * stream right after the event (cuStreamWriteValue32). The kernel opens by
 * itself after a second (GATE_TIMEOUT_NS) and says so at the next sync: a
 * host that waits for a gated stream (a synchronising call behind the gate)
 * makes a late measurement, not a hang. The walker's thread
 * never waits inside a step: sync, at its end, polls the streams and checks
 * NCCL's asynchronous errors every millisecond.
 *
 * The watchdog (watchdog.h, run.timeout_s). Every event a CUDA stream
 * passes and every command the host thread finishes is progress; sync's
 * polls find the events passed. What each stream is stuck in (the op whose
 * end it has not reached, or whose start it waits for) is described for
 * the watchdog's message, and its abort aborts the NCCL communicators
 * first, so that no collective in flight holds the exit.
 *
 * Times. step_begin records an event on the idle device, waits for it and
 * reads the host clock at once: a CUDA op's times are
 * cudaEventElapsedTime from that event, a host op's the host clock from
 * that moment (the two clocks agree to some microseconds).
 *
 * Memory. Device segments are cudaMalloc'ed (ncclMemAlloc'ed and
 * registered as symmetric NCCL windows under NCCL's zero-CTA policy,
 * which its copy-engine collectives need), host buffers pinned and mapped
 * (cudaHostAlloc), so copies to and from the host are asynchronous and a
 * conversion kernel can read or write them directly. What the backend
 * holds outside the walker's allocator (the model context's scratch and
 * cuBLASLt workspace, the bf16 staging of fp32 parameters, tokens, losses,
 * layout tables) is counted and reported as backend.workspace_bytes.
 *
 * The work. Segments run the CUDA model on the compute stream (one model
 * context serves it): activations bf16, the stores laid out by
 * cuda_layout.h over the buffers the walker gives, gradients accumulated
 * by the model's kernels in the gradient buffer's type (fp32, or bf16:
 * cuda_ctx_grad_bf16). Parameters that are fp32 (ddp under mixed
 * precision: the full parameters are the fp32 replica) are cast to a bf16
 * staging copy first, as autocast does. All-gather: this rank's shard is
 * cast (or copied) into its slot of the output, then an in-place
 * ncclAllGather; reductions are ncclReduceScatter / ncclAllReduce with
 * ncclAvg in the buffer's type. Staged (--staged-collectives, several
 * ranks on one GPU, which NCCL refuses): the stream copies the input into
 * its pinned host buffer (a reduction's as fp32), the host thread runs the
 * collective over MPI once that copy has landed (in issue order on every
 * rank, so every communicator sees its collectives in the same order),
 * sets the stream's flag, and the stream, waiting on it, copies the
 * output back (a reduction's averaged in fp32, rounded once to the
 * buffer's type). The optimizer: the CUDA model's AdamW
 * forms as the policy names them (fused: one launch per unit shard;
 * foreach: one multi-tensor launch per 192 model tensors; per-param: one
 * launch per model tensor), after scaling the gradient by 1/M when M > 1;
 * a mixed-type AdamW kernel where an operand is bf16; on the host thread,
 * ref_adamw. Every CUDA, cuBLAS and NCCL call is checked (gpu/cuda/check.h:
 * the call, file:line and the library's message, then MPI_Abort).
 */
#include <assert.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <pmmintrin.h> /* the host thread's MXCSR: subnormals flushed */
#endif

#include <cuda.h> /* driver types only: cuStreamWaitValue32 comes through cudaGetDriverEntryPointByVersion */
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "backend.h"
#include "backend_cuda.h"
#include "check.h"
#include "comm.h"
#include "cuda_model.h"
#include "host_adamw.h"
#include "layout.h"
#include "ref.h"
#include "watchdog.h"
#include "xalloc.h"

#define SYNC_POLL_NS 50000       /* between polls of the streams at the end of a step */
#define ASYNC_CHECK_NS 1000000   /* between checks of NCCL's asynchronous errors */
#define COMM_STREAM_ELEMS_MAX (1ull << 62)
#define CAL_EVENTS 1024          /* events beyond a step's two per op, for calibration's chains and gate */
/*
 * How long a gate (a wait for an event not yet recorded: calibrate.c's)
 * holds its stream at most. Queuing a measurement's calls takes
 * milliseconds; a gate still closed after a second has a host that cannot
 * go on until the stream does (a synchronising call, a full launch
 * queue): it opens, the measurement is late and said to be.
 */
#define GATE_TIMEOUT_NS 1000000000ull
/*
 * Calls of work one stream may take while it waits for an event not yet
 * recorded: its launch queue holds about a thousand launches, beyond which
 * the host blocks in the launch and never records the event. A call is at
 * most CALL_LAUNCHES launches but for the loss's chunks and the copy
 * engine's ring steps (gate_calls counts those).
 */
#define QUEUE_LAUNCHES 960
#define CALL_LAUNCHES 8

typedef CUresult (*wait_value_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*write_value_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef ncclResult_t (*nccl_mem_alloc_fn)(void **, size_t);
typedef ncclResult_t (*nccl_mem_free_fn)(void *);
typedef ncclResult_t (*nccl_win_reg_fn)(ncclComm_t, void *, size_t, void **, int);
typedef ncclResult_t (*nccl_win_dereg_fn)(ncclComm_t, void *);

/* ---- the host stream: a thread and its queue --------------------------------------- */

enum hcmd_type { H_RECORD, H_WAIT_DEVICE, H_WAIT_FLAG, H_OPTIM, H_ZERO, H_BENCH_ADAMW, H_COLL };

struct hcmd {
	enum hcmd_type type;
	int event;
	void *p;                      /* H_ZERO; H_COLL: the host copy of the input */
	uint64_t bytes;               /* H_COLL: an all-gather's bytes per rank, a reduction's fp32 elements */
	void *q;                      /* H_COLL: the host buffer of the output */
	struct comm_handle *h;        /* H_COLL: the group's communicator */
	enum op_kind kind;            /* H_COLL */
	cudaEvent_t ready;            /* H_COLL: the input is on the host */
	int stream;                   /* H_COLL: the stream it sets free, by its flag's value `seq` */
	uint32_t seq;
	struct optim_tensor *t;       /* H_OPTIM: owned, freed once run */
	int count;
	struct ref_adamw_hparams hp;
	int step;
	float scale;
};

struct hostq {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct hcmd *k;
	int n, cap, head;
	int stop;
};

/* A device segment registered as NCCL windows (zero-CTA policy). */
struct window_seg {
	void *p;
	int nwin;
	void *win[GRP_COUNT * ST_COUNT];
	ncclComm_t comm[GRP_COUNT * ST_COUNT];
};

struct cu {
	struct backend base;
	const struct schedule *s;
	const struct model_shape *m;
	struct comm *comm;
	struct cuda_opts opt;
	int device;
	struct cudaDeviceProp prop;
	int B, N, D, V, M;
	/* streams and events */
	cudaStream_t cs[ST_COUNT];    /* NULL for ST_HOST */
	int nevents;
	cudaEvent_t *ev;
	uint8_t *ev_host;             /* event recorded by the host stream this step */
	uint8_t *ev_dev;              /* event recorded by a CUDA stream this step */
	uint8_t *ev_future;           /* waited for before it was recorded: its record sets its flag */
	uint64_t *host_ns;
	volatile uint32_t *hflag;     /* mapped pinned memory: host event done, or a waited-for event recorded;
				       * hflag[nevents]: the gates that opened by their timeout, since the last sync */
	CUdeviceptr hflag_dev;
	wait_value_fn wait_value;     /* cuStreamWaitValue32 (required: backend_cuda_new) */
	write_value_fn write_value;   /* cuStreamWriteValue32 (required) */
	int gated[ST_COUNT];          /* calls queued on a stream since it began waiting for an unrecorded event, -1: none */
	int gate_timeouts;            /* gates opened by their timeout (GATE_TIMEOUT_NS) */
	int host_threads;             /* the host optimizer's (parts_threads) */
	/* the watchdog: each CUDA stream's events of this step in record order, and how many have passed */
	pthread_mutex_t wd_mu;
	int *rec[ST_COUNT];
	int nrec[ST_COUNT], passed[ST_COUNT];
	cudaEvent_t t0;
	struct timespec t0_host;
	struct hostq hq;
	/* the model */
	struct cuda_ctx *ctx;
	struct cuda_block_store *stores;  /* per segment, host-side */
	struct cuda_head_store head;
	int *d_tokens, *d_targets;        /* (M, N) */
	float *d_loss;                    /* (M): each microbatch's mean loss */
	bf16 *stage;                      /* fp32 parameters' bf16 copy, the largest segment's */
	size_t stage_elems;
	/* per-tensor layouts on the device */
	struct layout *lay;
	struct bcu_tensor **tdev;
	int64_t *most;
	/* emulated fabric on the copy engine: a clock word per stream */
	uint64_t *emu_t0;
	/*
	 * staged collectives (comm->staged): per stream, a pinned host buffer the
	 * stream copies a collective's input into and its output from, and the
	 * count of its collectives, the value of its flag hflag[nevents + 1 + st]
	 * that the host thread sets once it has run one over MPI
	 */
	void *shost[ST_COUNT];
	uint64_t shost_bytes[ST_COUNT];
	uint32_t sseq[ST_COUNT];
	/* calibration (cu_kernel): one kernel's operands, token ids, host optimizer's memory; grown, kept */
	void *bench;
	uint64_t bench_bytes;
	int *bench_ids;
	int bench_grad_bf16;          /* the schedule's parameter gradients are bf16 */
	float *host_bench;
	size_t host_bench_elems;
	/* NCCL zero-CTA policy: segments registered as windows */
	int windows;
	nccl_mem_alloc_fn mem_alloc;
	nccl_mem_free_fn mem_free;
	nccl_win_reg_fn win_reg;
	nccl_win_dereg_fn win_dereg;
	struct window_seg *wsegs;
	int nwsegs;
	uint64_t workspace_bytes;
};

static struct cu *cu_of(struct backend *b)
{
	return (struct cu *)b;
}

static uint64_t host_clock_ns(const struct timespec *t0)
{
	struct timespec t;
	int64_t d;

	clock_gettime(CLOCK_MONOTONIC, &t);
	d = (int64_t)(t.tv_sec - t0->tv_sec) * 1000000000 + (t.tv_nsec - t0->tv_nsec);
	return d > 0 ? (uint64_t)d : 0;
}

static size_t ebytes(enum elem e)
{
	return (size_t)elem_bytes(e);
}

static ncclDataType_t nccl_type(enum elem e)
{
	switch (e) {
	case ELEM_FP32:
		return ncclFloat32;
	case ELEM_BF16:
		return ncclBfloat16;
	default:
		cuda_assert(!"a collective of neither fp32 nor bf16");
		return ncclFloat32;
	}
}

/* ---- the host thread ------------------------------------------------------------------- */

static void *host_main(void *arg)
{
	struct cu *c = arg;
	struct hostq *q = &c->hq;

	cudaCheck(cudaSetDevice(c->device));
#if defined(__x86_64__) || defined(__i386__)
	/*
	 * The host optimizer's time must not depend on the values, as a GPU's
	 * fp32 arithmetic does not: x86 takes a hundred cycles and more for an
	 * operation on a subnormal (the results flush to zero, the operands
	 * count as zero: FTZ, DAZ). The first GPU session's offload runs spent
	 * 3 to 5.5 s a step in it, 25 to 45 ns an element, growing with the
	 * steps, where this code takes about 3 ns on normal values and 10 when
	 * a quarter of them make subnormals: the emulated fabric's repeated
	 * shards make a model whose saturated softmax leaves subnormal
	 * gradients (its first loss: 255, against 12.4 for the real model).
	 */
	_MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
	_MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
#endif
	pthread_mutex_lock(&q->mu);
	for (;;) {
		struct hcmd k;
		while (!q->stop && q->head == q->n)
			pthread_cond_wait(&q->cv, &q->mu);
		if (q->head == q->n)
			break;
		k = q->k[q->head];
		pthread_mutex_unlock(&q->mu);
		switch (k.type) {
		case H_RECORD:
			c->host_ns[k.event] = host_clock_ns(&c->t0_host);
			__atomic_store_n(&c->hflag[k.event], 1u, __ATOMIC_SEQ_CST);
			break;
		case H_WAIT_DEVICE:
			cudaCheck(cudaEventSynchronize(c->ev[k.event]));
			break;
		case H_WAIT_FLAG: { /* an event recorded after the wait was queued: its record sets the flag */
			const struct timespec nap = { 0, 20000 };
			while (__atomic_load_n(&c->hflag[k.event], __ATOMIC_SEQ_CST) == 0)
				nanosleep(&nap, NULL);
			break;
		}
		case H_BENCH_ADAMW: { /* calibration: ref_adamw over k.bytes elements (only this thread touches host_bench) */
			struct ref_adamw_hparams hp = { 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f };
			size_t n = (size_t)k.bytes;
			if (c->host_bench_elems < 4 * n) {
				free(c->host_bench);
				c->host_bench = xmalloc(sizeof(float) * 4 * n);
				c->host_bench_elems = 4 * n;
				for (size_t j = 0; j < 4 * n; j++) /* finite, and the moments' second half positive */
					c->host_bench[j] = (float)((j * 2654435761u) % 1000) * 1e-3f;
			}
			{ /* the optimizer the runs take: the scaling pass, then the step, over the same threads */
				struct optim_tensor t = { c->host_bench, c->host_bench + n, c->host_bench + 2 * n,
							  c->host_bench + 3 * n, n, ELEM_FP32, ELEM_FP32, ELEM_FP32, -1 };
				host_adamw(&t, 1, &hp, 1, 1.0f, c->host_threads);
			}
			break;
		}
		case H_OPTIM:
			host_adamw(k.t, k.count, &k.hp, k.step, k.scale, c->host_threads);
			free(k.t);
			break;
		case H_COLL: /* a staged collective: its input is on the host once the stream passes `ready` */
			cudaCheck(cudaEventSynchronize(k.ready));
			cudaCheck(cudaEventDestroy(k.ready));
			if (k.kind == OP_ALLGATHER)
				comm_all_gather_bytes(k.h, k.q, k.p, (size_t)k.bytes);
			else if (k.kind == OP_REDUCE_SCATTER)
				comm_reduce_scatter_mean(k.h, k.q, k.p, (size_t)k.bytes);
			else
				comm_all_reduce_mean(k.h, k.p, (size_t)k.bytes);
			__atomic_store_n(&c->hflag[c->nevents + 1 + k.stream], k.seq, __ATOMIC_SEQ_CST);
			break;
		case H_ZERO: /* cudaMemset of device memory may return before it is done: wait, then go on */
			cudaCheck(cudaMemset(k.p, 0, k.bytes));
			cudaCheck(cudaStreamSynchronize(cudaStreamLegacy));
			break;
		}
		watchdog_progress();
		pthread_mutex_lock(&q->mu);
		q->head++;
		pthread_cond_broadcast(&q->cv);
	}
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

static void host_push(struct cu *c, const struct hcmd *k)
{
	struct hostq *q = &c->hq;

	pthread_mutex_lock(&q->mu);
	if (q->n == q->cap) {
		q->cap = q->cap ? 2 * q->cap : 256;
		q->k = xrealloc(q->k, sizeof(*q->k) * (size_t)q->cap);
	}
	q->k[q->n++] = *k;
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
}

static int host_idle(struct cu *c)
{
	int idle;

	pthread_mutex_lock(&c->hq.mu);
	idle = c->hq.head == c->hq.n;
	pthread_mutex_unlock(&c->hq.mu);
	return idle;
}

/* ---- streams and events ------------------------------------------------------------------ */

static int gate_calls(struct backend *b);

/* The CUDA stream of a schedule stream, for one call of work (counted while it waits for an unrecorded event). */
static cudaStream_t dev_stream(struct cu *c, int stream)
{
	assert(stream >= 0 && stream < ST_COUNT && stream != ST_HOST && "device work on the host stream");
	if (c->gated[stream] >= 0 && ++c->gated[stream] > gate_calls(&c->base)) {
		/* the caller queued more than the launch queue holds behind a closed gate: the host would block */
		fprintf(stderr, "gpu_run: %d calls on stream %s behind an event not yet recorded (at most %d): a bug in "
				"the caller\n", c->gated[stream], stream_name(stream), gate_calls(&c->base));
		abort();
	}
	return c->cs[stream];
}

/* The watchdog's view: event `event` recorded on CUDA stream st. */
static void rec_push(struct cu *c, int st, int event)
{
	pthread_mutex_lock(&c->wd_mu);
	assert(c->nrec[st] < c->nevents && "an event recorded twice in a step");
	c->rec[st][c->nrec[st]++] = event;
	pthread_mutex_unlock(&c->wd_mu);
}

/* A driver call's result: anything but success ends the job, as cudaCheck does. */
#define driverCheck(call) driver_check((call), #call, __FILE__, __LINE__)
static void driver_check(CUresult r, const char *call, const char *file, int line)
{
	char msg[64];

	if (r == CUDA_SUCCESS)
		return;
	snprintf(msg, sizeof(msg), "CUresult %d", (int)r);
	cuda_fail("CUDA driver", call, msg, file, line);
}

/* Event `event`'s flag set by CUDA stream `stream` once it has passed the event. */
static void set_flag_after(struct cu *c, int stream, int event)
{
	driverCheck(c->write_value((CUstream)c->cs[stream], c->hflag_dev + sizeof(uint32_t) * (size_t)event, 1,
				   CU_STREAM_WRITE_VALUE_DEFAULT));
}

/*
 * CUDA stream `stream` waits until event `event`'s flag is set, or a
 * second has passed: a gate kernel (bcu_gate), not a stream memory wait,
 * which would wait for ever.
 */
static void gate_flag(struct cu *c, int stream, int event)
{
	bcu_gate((const uint32_t *)(uintptr_t)(c->hflag_dev + sizeof(uint32_t) * (size_t)event), GATE_TIMEOUT_NS,
		 (uint32_t *)(uintptr_t)(c->hflag_dev + sizeof(uint32_t) * (size_t)c->nevents), c->cs[stream]);
}

/* CUDA stream `stream` waits until event `event`'s flag is set. */
static void wait_flag(struct cu *c, int stream, int event)
{
	driverCheck(c->wait_value((CUstream)c->cs[stream], c->hflag_dev + sizeof(uint32_t) * (size_t)event, 1,
				  CU_STREAM_WAIT_VALUE_GEQ));
}

static void cu_record(struct backend *b, int stream, int event)
{
	struct cu *c = cu_of(b);

	assert(event >= 0 && event < c->nevents);
	c->ev_host[event] = stream == ST_HOST;
	c->ev_dev[event] = stream != ST_HOST;
	if (stream == ST_HOST) {
		struct hcmd k = { .type = H_RECORD, .event = event };
		host_push(c, &k);
		return;
	}
	cudaCheck(cudaEventRecord(c->ev[event], c->cs[stream]));
	rec_push(c, stream, event);
	if (c->ev_future[event]) /* a stream waits for it on its flag */
		set_flag_after(c, stream, event);
}

static void cu_wait(struct backend *b, int stream, int event)
{
	struct cu *c = cu_of(b);

	assert(event >= 0 && event < c->nevents);
	if (!c->ev_host[event] && !c->ev_dev[event]) {
		/* not recorded yet (calibrate.c's gate): wait on its flag, which its record will set */
		c->ev_future[event] = 1;
		if (stream == ST_HOST) {
			struct hcmd k = { .type = H_WAIT_FLAG, .event = event };
			host_push(c, &k);
		} else {
			gate_flag(c, stream, event);
			if (c->gated[stream] < 0)
				c->gated[stream] = 0;
		}
	} else if (stream == ST_HOST) {
		if (!c->ev_host[event]) { /* a host event is earlier on this very queue */
			struct hcmd k = { .type = H_WAIT_DEVICE, .event = event };
			host_push(c, &k);
		}
	} else if (c->ev_host[event]) {
		wait_flag(c, stream, event);
	} else {
		cudaCheck(cudaStreamWaitEvent(c->cs[stream], c->ev[event], 0));
	}
}

/* 1 when every CUDA stream has run everything queued on it. */
static int streams_idle(struct cu *c)
{
	for (int st = 0; st < ST_COUNT; st++) {
		cudaError_t e;
		if (!c->cs[st])
			continue;
		e = cudaStreamQuery(c->cs[st]);
		if (e == cudaErrorNotReady)
			return 0;
		cudaCheck(e);
	}
	return 1;
}

/* Progress for the watchdog: the events each CUDA stream has passed since the last look. */
static void streams_progress(struct cu *c)
{
	pthread_mutex_lock(&c->wd_mu);
	for (int st = 0; st < ST_COUNT; st++)
		while (c->passed[st] < c->nrec[st]) {
			cudaError_t e = cudaEventQuery(c->ev[c->rec[st][c->passed[st]]]);
			if (e == cudaErrorNotReady)
				break;
			cudaCheck(e);
			c->passed[st]++;
			watchdog_progress();
		}
	pthread_mutex_unlock(&c->wd_mu);
}

/*
 * Wait for every stream without blocking in CUDA: poll, report the events
 * passed to the watchdog (run.timeout_s ends a job that makes none), and
 * check NCCL's asynchronous errors.
 */
static void cu_sync(struct backend *b)
{
	struct cu *c = cu_of(b);
	const struct timespec nap = { 0, SYNC_POLL_NS };
	struct timespec start;
	uint64_t last_check = 0;

	clock_gettime(CLOCK_MONOTONIC, &start);
	while (!(host_idle(c) && streams_idle(c))) {
		uint64_t waited = host_clock_ns(&start);
		if (waited - last_check >= ASYNC_CHECK_NS) {
			streams_progress(c);
			if (!c->comm->emulated)
				comm_nccl_check_async(c->comm);
			last_check = waited;
		}
		nanosleep(&nap, NULL);
	}
	streams_progress(c);
	cudaCheck(cudaGetLastError());
	if (!c->comm->emulated)
		comm_nccl_check_async(c->comm);
	if (c->hflag[c->nevents]) { /* streams idle: no gate writes it now */
		c->gate_timeouts += c->hflag[c->nevents];
		c->hflag[c->nevents] = 0;
		fprintf(stderr, "gpu_run: a gate opened after %.0f s, not when its event was recorded (%d so far): the "
				"host waited for the gated stream meanwhile; that measurement is late\n",
			1e-9 * (double)GATE_TIMEOUT_NS, c->gate_timeouts);
	}
}

static void cu_step_begin(struct backend *b)
{
	struct cu *c = cu_of(b);

	cu_sync(b);
	pthread_mutex_lock(&c->hq.mu);
	c->hq.n = c->hq.head = 0;
	pthread_mutex_unlock(&c->hq.mu);
	memset(c->ev_host, 0, (size_t)c->nevents);
	memset(c->ev_dev, 0, (size_t)c->nevents);
	memset(c->ev_future, 0, (size_t)c->nevents);
	memset((void *)c->hflag, 0, sizeof(uint32_t) * (size_t)c->nevents);
	pthread_mutex_lock(&c->wd_mu);
	for (int st = 0; st < ST_COUNT; st++) {
		c->gated[st] = -1;
		c->nrec[st] = c->passed[st] = 0;
	}
	pthread_mutex_unlock(&c->wd_mu);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	cudaCheck(cudaEventRecord(c->t0, c->cs[ST_COMPUTE]));
	cudaCheck(cudaEventSynchronize(c->t0));
	clock_gettime(CLOCK_MONOTONIC, &c->t0_host);
}

static uint64_t cu_now_ns(struct backend *b)
{
	return host_clock_ns(&cu_of(b)->t0_host);
}

static uint64_t cu_event_ns(struct backend *b, int event)
{
	struct cu *c = cu_of(b);
	float ms = 0;

	assert(event >= 0 && event < c->nevents);
	if (c->ev_host[event])
		return c->host_ns[event];
	cudaCheck(cudaEventElapsedTime(&ms, c->t0, c->ev[event]));
	return ms > 0 ? (uint64_t)((double)ms * 1e6 + 0.5) : 0;
}

static double cu_loss(struct backend *b)
{
	struct cu *c = cu_of(b);
	float *l = xmalloc(sizeof(float) * (size_t)c->M);
	double sum = 0;

	cudaCheck(cudaMemcpy(l, c->d_loss, sizeof(float) * (size_t)c->M, cudaMemcpyDeviceToHost));
	for (int i = 0; i < c->M; i++)
		sum += l[i];
	free(l);
	return sum;
}

/* ---- memory ------------------------------------------------------------------------------- */

/* Every NCCL communicator of this rank (zero-CTA windows are registered with each). */
static int all_nccl(struct cu *c, ncclComm_t out[GRP_COUNT * ST_COUNT])
{
	int n = 0;

	for (int g = 0; g < GRP_COUNT; g++)
		for (int st = 0; st < ST_COUNT; st++)
			if (c->comm->handle[g][st].nccl)
				out[n++] = (ncclComm_t)c->comm->handle[g][st].nccl;
	return n;
}

static void *cu_dev_alloc(struct backend *b, uint64_t bytes)
{
	struct cu *c = cu_of(b);
	void *p = NULL;

	if (!c->windows) {
		if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
			(void)cudaGetLastError(); /* out of memory: the walker reports it */
			return NULL;
		}
		return p;
	}
	/* zero-CTA policy: NCCL's copy-engine collectives need symmetric windows on NCCL memory */
	if (c->mem_alloc(&p, bytes ? bytes : 1) != ncclSuccess) {
		(void)cudaGetLastError();
		return NULL;
	}
	c->wsegs = xrealloc(c->wsegs, sizeof(*c->wsegs) * (size_t)(c->nwsegs + 1));
	{
		struct window_seg *w = &c->wsegs[c->nwsegs++];
		memset(w, 0, sizeof(*w));
		w->p = p;
		w->nwin = all_nccl(c, w->comm);
		for (int i = 0; i < w->nwin; i++)
			ncclCheck(c->win_reg(w->comm[i], p, bytes, &w->win[i], NCCL_WIN_COLL_SYMMETRIC));
	}
	return p;
}

static void cu_dev_free(struct backend *b, void *p)
{
	struct cu *c = cu_of(b);

	if (!c->windows) {
		cudaCheck(cudaFree(p));
		return;
	}
	for (int i = 0; i < c->nwsegs; i++) {
		struct window_seg *w = &c->wsegs[i];
		if (w->p != p)
			continue;
		for (int k = 0; k < w->nwin; k++)
			ncclCheck(c->win_dereg(w->comm[k], w->win[k]));
		ncclCheck(c->mem_free(p));
		w->p = NULL;
		return;
	}
	cuda_assert(!"freeing a segment the backend did not allocate");
}

static void *cu_host_alloc(struct backend *b, uint64_t bytes)
{
	void *p = NULL;

	(void)b;
	/* mapped: a conversion kernel reads or writes it directly (offload's casts across PCIe) */
	if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
		(void)cudaGetLastError();
		return NULL;
	}
	return p;
}

static void cu_host_free(struct backend *b, void *p)
{
	(void)b;
	cudaCheck(cudaFreeHost(p));
}

/*
 * From pageable host memory cudaMemcpy may return before its DMA has landed,
 * and the step's streams (non-blocking) do not wait for the legacy stream
 * it runs on: wait for it here, so that a kernel never reads what is still
 * on its way.
 */
static void cu_upload(struct backend *b, void *dev, const void *host, uint64_t bytes)
{
	(void)b;
	cudaCheck(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
	cudaCheck(cudaStreamSynchronize(cudaStreamLegacy));
}

static void cu_download(struct backend *b, void *host, const void *dev, uint64_t bytes)
{
	(void)b;
	cudaCheck(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

static void cu_set_batch(struct backend *b, int micro, const int *tokens, const int *targets)
{
	struct cu *c = cu_of(b);
	size_t n = sizeof(int) * (size_t)c->N;

	cudaCheck(cudaMemcpy(c->d_tokens + (size_t)micro * c->N, tokens, n, cudaMemcpyHostToDevice));
	cudaCheck(cudaMemcpy(c->d_targets + (size_t)micro * c->N, targets, n, cudaMemcpyHostToDevice));
	cudaCheck(cudaStreamSynchronize(cudaStreamLegacy)); /* as cu_upload */
}

/* ---- work: the model --------------------------------------------------------------------- */

static void cu_zero(struct backend *b, int stream, void *p, uint64_t bytes)
{
	struct cu *c = cu_of(b);

	if (stream == ST_HOST) {
		struct hcmd k = { .type = H_ZERO, .p = p, .bytes = bytes };
		host_push(c, &k);
		return;
	}
	cudaCheck(cudaMemsetAsync(p, 0, bytes, c->cs[stream]));
}

/* Elements of a segment's parameters: its flat block, the embedding, or the head's norm and output. */
static size_t seg_param_elems(const struct cu *c, int seg, size_t *out_elems)
{
	*out_elems = 0;
	switch (c->s->segs[seg].kind) {
	case SEG_EMBED:
		return (size_t)c->V * c->D;
	case SEG_BLOCK:
		return cuda_block_elems(c->m);
	case SEG_HEAD:
		*out_elems = (size_t)c->V * c->D;
		return (size_t)c->D;
	default:
		assert(!"bad segment kind");
		return 0;
	}
}

/* The segment's parameters in bf16: themselves, or (fp32: ddp's replica) a staging copy. */
static void seg_params(struct cu *c, const struct seg_args *a, cudaStream_t st, const bf16 **p, const bf16 **out)
{
	size_t n, nout;

	if (a->param_elem == ELEM_BF16) {
		*p = a->params;
		*out = a->out_params;
		return;
	}
	cuda_assert(a->param_elem == ELEM_FP32);
	n = seg_param_elems(c, a->seg, &nout);
	cuda_assert(n + nout <= c->stage_elems);
	bcu_convert(c->stage, ELEM_BF16, a->params, ELEM_FP32, n, st);
	if (nout)
		bcu_convert(c->stage + n, ELEM_BF16, a->out_params, ELEM_FP32, nout, st);
	*p = c->stage;
	*out = nout ? c->stage + n : NULL;
}

static const int *micro_tokens(const struct cu *c, int micro)
{
	return c->d_tokens + (size_t)micro * c->N;
}

static const int *micro_targets(const struct cu *c, int micro)
{
	return c->d_targets + (size_t)micro * c->N;
}

static void cu_forward(struct backend *b, int stream, const struct seg_args *a)
{
	struct cu *c = cu_of(b);
	cudaStream_t st = dev_stream(c, stream);
	size_t nd = (size_t)c->N * c->D * sizeof(bf16);
	const bf16 *p, *pout;

	assert(stream == ST_COMPUTE && "the model context serves the compute stream");
	seg_params(c, a, st, &p, &pout);
	switch (c->s->segs[a->seg].kind) {
	case SEG_EMBED:
		/* the backward reads the tokens here */
		cudaCheck(cudaMemcpyAsync(a->saved, micro_tokens(c, a->micro), sizeof(int) * (size_t)c->N,
					  cudaMemcpyDeviceToDevice, st));
		cuda_embedding_forward(a->resid, micro_tokens(c, a->micro), p, c->N, c->D, st);
		break;
	case SEG_BLOCK: {
		struct cuda_block_store *bs = &c->stores[a->seg];
		/* every field is computed: the ones the mode does not keep land in the scratch */
		cuda_block_store_init(bs, a->saved, c->s->ac == AC_NONE ? NULL : a->scratch, c->m, c->B, c->s->ac);
		cudaCheck(cudaMemcpyAsync(bs->x, a->resid, nd, cudaMemcpyDeviceToDevice, st));
		cuda_block_forward(c->ctx, a->resid, bs, p, c->m, c->B, st);
		break;
	}
	case SEG_HEAD:
		cuda_head_store_init_split(&c->head, a->saved, a->scratch, c->m, c->B, c->s->loss,
					   c->s->loss_chunk_rows);
		cudaCheck(cudaMemcpyAsync(c->head.x, a->resid, nd, cudaMemcpyDeviceToDevice, st));
		cuda_head_forward(c->ctx, c->d_loss + a->micro, &c->head, p, pout, micro_targets(c, a->micro), c->m,
				  c->B, st);
		break;
	default:
		assert(!"bad segment kind");
	}
}

static void cu_recompute(struct backend *b, int stream, const struct seg_args *a)
{
	struct cu *c = cu_of(b);
	cudaStream_t st = dev_stream(c, stream);
	struct cuda_block_store *bs = &c->stores[a->seg];
	const bf16 *p, *pout;

	assert(stream == ST_COMPUTE && c->s->segs[a->seg].kind == SEG_BLOCK);
	seg_params(c, a, st, &p, &pout);
	/* the same saved memory, so the same field layout; the rest now in the recomputed buffer */
	cuda_block_store_init(bs, a->saved, a->recomputed, c->m, c->B, c->s->ac);
	cuda_block_recompute(c->ctx, bs, p, c->m, c->B, st);
}

static void cu_backward(struct backend *b, int stream, const struct seg_args *a)
{
	struct cu *c = cu_of(b);
	cudaStream_t st = dev_stream(c, stream);
	const bf16 *p, *pout;
	int gbf = a->grad_elem == ELEM_BF16;

	assert(stream == ST_COMPUTE);
	cuda_assert(a->grad_elem == ELEM_FP32 || a->grad_elem == ELEM_BF16);
	seg_params(c, a, st, &p, &pout);
	cuda_ctx_grad_bf16(c->ctx, gbf);
	switch (c->s->segs[a->seg].kind) {
	case SEG_EMBED:
		if (gbf)
			cuda_embedding_backward_bf16(a->grads, a->resid, a->saved, c->N, c->D, st);
		else
			cuda_embedding_backward(a->grads, a->resid, a->saved, c->N, c->D, st);
		break;
	case SEG_BLOCK: {
		struct cuda_block_store *bs = &c->stores[a->seg];
		if (c->s->ac == AC_NONE)
			cuda_block_store_init(bs, a->saved, NULL, c->m, c->B, AC_NONE);
		cuda_block_backward(c->ctx, a->resid, a->grads, a->resid, bs, p, a->scratch, c->m, c->B, st);
		break;
	}
	case SEG_HEAD:
		cuda_head_store_init_split(&c->head, a->saved, a->scratch, c->m, c->B, c->s->loss,
					   c->s->loss_chunk_rows);
		cuda_head_backward(c->ctx, a->resid, a->grads, a->out_grads, &c->head, p, pout,
				   micro_targets(c, a->micro), c->m, c->B, st);
		break;
	default:
		assert(!"bad segment kind");
	}
}

/* ---- work: collectives -------------------------------------------------------------------- */

static void emu_of(const struct comm_handle *h, enum op_kind k, uint64_t S, struct bcu_emu *e)
{
	struct comm_emu_plan p;

	comm_emu_plan(h, k, S, &p);
	e->steps = p.steps;
	e->reduce_steps = p.reduce_steps;
	e->q = p.steps ? p.wire_bytes / (uint64_t)p.steps : 0;
	e->r = p.steps ? p.wire_bytes % (uint64_t)p.steps : 0;
	e->bytes_per_ns = p.bytes_per_ns;
	e->lat_ns = p.step_lat_ns;
}

/*
 * Stream st's host buffer, at least `bytes`. It grows only once the stream
 * has run all it was given: its earlier collectives' copies read the old
 * one (and the host thread, which those wait for, never waits for this
 * thread).
 */
static void *staged_buffer(struct cu *c, int st, uint64_t bytes)
{
	if (bytes > c->shost_bytes[st]) {
		cudaCheck(cudaStreamSynchronize(c->cs[st]));
		if (c->shost[st])
			cudaCheck(cudaFreeHost(c->shost[st]));
		c->shost[st] = NULL;
		cudaCheck(cudaHostAlloc(&c->shost[st], bytes, cudaHostAllocMapped | cudaHostAllocPortable));
		c->shost_bytes[st] = bytes;
	}
	return c->shost[st];
}

/*
 * A staged collective of stream st (several ranks on one GPU: no NCCL):
 * the stream has queued its input's copy into the host buffer; the host
 * thread runs the collective over the group's MPI communicator once that
 * copy has landed (in issue order, as every rank does), and the stream
 * waits for it before it copies the output back.
 */
static void staged_run(struct cu *c, int st, struct comm_handle *h, enum op_kind kind, void *in, void *out,
		       uint64_t n)
{
	struct hcmd k = { .type = H_COLL, .p = in, .q = out, .bytes = n, .h = h, .kind = kind, .stream = st };

	cudaCheck(cudaEventCreateWithFlags(&k.ready, cudaEventDisableTiming));
	cudaCheck(cudaEventRecord(k.ready, c->cs[st]));
	k.seq = ++c->sseq[st];
	host_push(c, &k);
	driverCheck(c->wait_value((CUstream)c->cs[st],
				  c->hflag_dev + sizeof(uint32_t) * (size_t)(c->nevents + 1 + st), k.seq,
				  CU_STREAM_WAIT_VALUE_GEQ));
}

static void cu_all_gather(struct backend *b, int stream, struct comm_handle *h, void *out, enum elem oe,
			  const void *in, enum elem ie, size_t count)
{
	struct cu *c = cu_of(b);
	cudaStream_t st = dev_stream(c, stream);
	size_t slot_bytes = count * ebytes(oe);
	char *slot = (char *)out + (size_t)h->rank * slot_bytes;

	/* this rank's shard into its slot of the output, in the output's type */
	if (ie != oe)
		bcu_convert(slot, oe, in, ie, count, st);
	else if ((const void *)slot != in)
		cudaCheck(cudaMemcpyAsync(slot, in, slot_bytes, cudaMemcpyDefault, st));
	if (h->emulated) {
		struct bcu_emu e;
		emu_of(h, OP_ALLGATHER, (uint64_t)slot_bytes * (uint64_t)h->size, &e);
		h->wire_bytes += e.q * (uint64_t)e.steps + e.r;
		if (c->comm->emu.engine == 1) {
			/* the copy engine: one copy per ring step, each step's end paced by one warp */
			double deadline = 0;
			bcu_emu_stamp(&c->emu_t0[stream], st);
			for (int i = 0; i < e.steps; i++) {
				uint64_t n = e.q + ((uint64_t)i < e.r);
				int dst = (h->rank + i + 1) % h->size;
				cudaCheck(cudaMemcpyAsync((char *)out + (size_t)dst * slot_bytes, slot,
							  n < slot_bytes ? n : slot_bytes, cudaMemcpyDeviceToDevice, st));
				deadline += (double)n / e.bytes_per_ns + e.lat_ns;
				bcu_emu_wait(&c->emu_t0[stream], deadline, st);
			}
		} else {
			bcu_emu_all_gather(out, slot_bytes, h->rank, h->size, &e, c->comm->emu.ctas, st);
		}
		return;
	}
	if (c->comm->staged) { /* the host buffer: every rank's slot, then this rank's own */
		size_t total = slot_bytes * (size_t)h->size;
		char *host = staged_buffer(c, stream, total + slot_bytes);
		cudaCheck(cudaMemcpyAsync(host + total, slot, slot_bytes, cudaMemcpyDefault, st));
		staged_run(c, stream, h, OP_ALLGATHER, host + total, host, slot_bytes);
		cudaCheck(cudaMemcpyAsync(out, host, total, cudaMemcpyDefault, st));
		return;
	}
	ncclCheck(ncclAllGather(slot, out, count, nccl_type(oe), (ncclComm_t)h->nccl, st));
}

static void cu_reduce_scatter(struct backend *b, int stream, struct comm_handle *h, void *out, const void *in,
			      size_t count, enum elem e)
{
	struct cu *c = cu_of(b);
	cudaStream_t st = dev_stream(c, stream);

	if (h->emulated) {
		struct bcu_emu em;
		size_t bytes = count * ebytes(e);
		emu_of(h, OP_REDUCE_SCATTER, (uint64_t)bytes * (uint64_t)h->size, &em);
		h->wire_bytes += em.q * (uint64_t)em.steps + em.r;
		cudaCheck(cudaMemcpyAsync(out, (const char *)in + (size_t)h->rank * bytes, bytes,
					  cudaMemcpyDeviceToDevice, st));
		/* reductions need the SMs: no copy-engine form, as with NCCL's */
		bcu_emu_reduce_scatter(out, in, count, e, h->rank, h->size, &em, c->comm->emu.ctas, st);
		return;
	}
	if (c->comm->staged) { /* fp32 on the host: the input's n chunks, then this rank's mean */
		size_t full = count * (size_t)h->size;
		float *host = staged_buffer(c, stream, sizeof(float) * (full + count));
		bcu_convert(host, ELEM_FP32, in, e, full, st);
		staged_run(c, stream, h, OP_REDUCE_SCATTER, host, host + full, count);
		bcu_convert(out, e, host + full, ELEM_FP32, count, st);
		return;
	}
	ncclCheck(ncclReduceScatter(in, out, count, nccl_type(e), ncclAvg, (ncclComm_t)h->nccl, st));
}

static void cu_all_reduce(struct backend *b, int stream, struct comm_handle *h, void *buf, size_t count,
			  enum elem e)
{
	struct cu *c = cu_of(b);
	cudaStream_t st = dev_stream(c, stream);

	if (h->emulated) {
		struct bcu_emu em;
		emu_of(h, OP_ALLREDUCE, (uint64_t)count * ebytes(e), &em);
		h->wire_bytes += em.q * (uint64_t)em.steps + em.r;
		bcu_emu_all_reduce(buf, count, e, h->size, &em, c->comm->emu.ctas, st);
		return;
	}
	if (c->comm->staged) { /* fp32 on the host, averaged in place */
		float *host = staged_buffer(c, stream, sizeof(float) * count);
		bcu_convert(host, ELEM_FP32, buf, e, count, st);
		staged_run(c, stream, h, OP_ALLREDUCE, host, host, count);
		bcu_convert(buf, e, host, ELEM_FP32, count, st);
		return;
	}
	ncclCheck(ncclAllReduce(buf, buf, count, nccl_type(e), ncclAvg, (ncclComm_t)h->nccl, st));
}

/* ---- work: element-wise, copies, layouts ----------------------------------------------------- */

static void cu_accumulate(struct backend *b, int stream, void *dst, enum elem de, const void *src, enum elem se,
			  size_t count)
{
	struct cu *c = cu_of(b);
	bcu_accumulate(dst, de, src, se, count, dev_stream(c, stream));
}

static void cu_copy(struct backend *b, int stream, void *dst, enum elem de, const void *src, enum elem se,
		    size_t count)
{
	struct cu *c = cu_of(b);
	cudaStream_t st = dev_stream(c, stream);

	if (de == se)
		cudaCheck(cudaMemcpyAsync(dst, src, count * ebytes(de), cudaMemcpyDefault, st));
	else
		bcu_convert(dst, de, src, se, count, st); /* host memory too: it is mapped */
}

/* The backend's copy of a unit's layout: units are told apart by their first tensor's place in the model. */
static int unit_of(const struct cu *c, const struct unit_layout *u)
{
	for (int i = 0; i < c->lay->nunits; i++)
		if (c->lay->units[i].ntensors == u->ntensors && c->lay->units[i].t[0].model_off == u->t[0].model_off)
			return i;
	cuda_assert(!"a unit layout the backend does not know");
	return -1;
}

static void cu_unpack(struct backend *b, int stream, const struct unit_layout *u, void *flat, const void *gathered,
		      enum elem e, int n)
{
	struct cu *c = cu_of(b);
	int k = unit_of(c, u);

	bcu_unpack(flat, gathered, e, c->tdev[k], u->ntensors, u->shard_floats, n, c->most[k], dev_stream(c, stream));
}

static void cu_pack(struct backend *b, int stream, const struct unit_layout *u, void *packed, enum elem pe,
		    const void *flat, enum elem fe, int n)
{
	struct cu *c = cu_of(b);
	int k = unit_of(c, u);

	bcu_pack(packed, pe, flat, fe, c->tdev[k], u->ntensors, u->shard_floats, n, c->most[k],
		 dev_stream(c, stream));
}

/* ---- work: the optimizer ------------------------------------------------------------------- */

/*
 * The model tensors inside unit k's shard on this rank, as [offset, offset
 * + n) ranges of the shard: the launches a per-parameter or foreach step
 * makes (the shard's padding is zero and stays zero, so it is left out).
 */
static int shard_pieces(const struct cu *c, int k, size_t *off, size_t *len, int max)
{
	const struct unit_layout *u = &c->lay->units[k];
	int r = c->comm->shard_rank, n = 0;

	for (int i = 0; i < u->ntensors && n < max; i++) {
		size_t src, l = layout_rank_piece(u, &u->t[i], r, &off[n], &src);
		if (l)
			len[n++] = l;
	}
	return n;
}

static void device_optimizer(struct cu *c, cudaStream_t st, const struct optim_args *a)
{
	const struct cuda_adamw_hparams hp = { a->lr, a->beta1, a->beta2, a->eps, a->weight_decay };
	enum optim form = a->form;
	struct cuda_adamw_tensor *list = NULL;
	int nlist = 0, cap = 0;

	for (int i = 0; i < a->count; i++) {
		const struct optim_tensor *t = &a->t[i];
		float *p = t->p, *g = t->g, *m = t->m, *v = t->v;
		if (t->p_elem != ELEM_FP32 || t->g_elem != ELEM_FP32 || t->state_elem != ELEM_FP32) {
			/* bf16 somewhere: one mixed-type launch over the shard, the 1/M folded in */
			struct bcu_adam k = { a->lr, a->beta1, a->beta2, a->eps, a->weight_decay,
					      1.0f - powf(a->beta1, (float)a->step), 1.0f - powf(a->beta2, (float)a->step),
					      a->grad_scale };
			bcu_adamw(t->p, t->p_elem, t->g, t->g_elem, t->m, t->v, t->state_elem, t->n, &k, st);
			continue;
		}
		if (a->grad_scale != 1.0f)
			bcu_scale(g, t->n, ELEM_FP32, a->grad_scale, st);
		if (form == OPT_FUSED) {
			cuda_adamw_fused(p, NULL, g, m, v, t->n, &hp, a->step, 0, st);
		} else if (t->unit < 0) { /* one tensor: a launch of its own, or its place in the list */
			if (form == OPT_PER_PARAM) {
				cuda_adamw(p, g, m, v, t->n, &hp, a->step, st);
				continue;
			}
			if (nlist == cap) {
				cap = cap ? 2 * cap : 64;
				list = xrealloc(list, sizeof(*list) * (size_t)cap);
			}
			list[nlist++] = (struct cuda_adamw_tensor){ p, g, m, v, t->n };
		} else {
			const struct unit_layout *u = &c->lay->units[t->unit];
			size_t *off = xmalloc(sizeof(size_t) * (size_t)(u->ntensors + 1));
			size_t *len = xmalloc(sizeof(size_t) * (size_t)(u->ntensors + 1));
			int np = shard_pieces(c, t->unit, off, len, u->ntensors);
			for (int j = 0; j < np; j++) {
				if (form == OPT_PER_PARAM) {
					cuda_adamw(p + off[j], g + off[j], m + off[j], v + off[j], len[j], &hp, a->step, st);
					continue;
				}
				if (nlist == cap) {
					cap = cap ? 2 * cap : 64;
					list = xrealloc(list, sizeof(*list) * (size_t)cap);
				}
				list[nlist++] = (struct cuda_adamw_tensor){ p + off[j], g + off[j], m + off[j], v + off[j],
									    len[j] };
			}
			free(off);
			free(len);
		}
	}
	if (nlist)
		cuda_adamw_multi(list, nlist, &hp, a->step, st); /* ceil(nlist / 192) launches */
	free(list);
}

static void cu_optimizer(struct backend *b, int stream, const struct optim_args *a)
{
	struct cu *c = cu_of(b);

	if (stream == ST_HOST) {
		struct hcmd k = { .type = H_OPTIM };
		k.t = xmalloc(sizeof(*a->t) * (size_t)(a->count > 0 ? a->count : 1));
		memcpy(k.t, a->t, sizeof(*a->t) * (size_t)a->count);
		k.count = a->count;
		k.hp = (struct ref_adamw_hparams){ a->lr, a->beta1, a->beta2, a->eps, a->weight_decay };
		k.step = a->step;
		k.scale = a->grad_scale;
		host_push(c, &k);
		return;
	}
	device_optimizer(c, dev_stream(c, stream), a);
}

/* ---- calibration ------------------------------------------------------------------------------- */

/*
 * The calibration's device memory, at least `bytes`: grown in the order of
 * stream st (cudaMallocAsync: no synchronization, which a stream waiting
 * for calibrate.c's gate could not allow) and filled with finite random
 * words once, kept for the next kernels.
 */
static void bench_reserve(struct cu *c, uint64_t bytes, cudaStream_t st)
{
	uint64_t want = bytes > c->bench_bytes + c->bench_bytes / 2 ? bytes : c->bench_bytes + c->bench_bytes / 2;

	if (bytes <= c->bench_bytes)
		return;
	if (c->bench)
		cudaCheck(cudaFreeAsync(c->bench, st));
	cudaCheck(cudaMallocAsync(&c->bench, want, st));
	c->bench_bytes = want;
	cuda_kernel_fill(c->bench, want, NULL, 0, 0, 0x5eed, st);
}

/* Token ids for the kernels that read them: N values in [0, V). */
static void bench_ids(struct cu *c, cudaStream_t st)
{
	if (c->bench_ids)
		return;
	cudaCheck(cudaMallocAsync((void **)&c->bench_ids, sizeof(int) * (size_t)c->N, st));
	cuda_kernel_fill(NULL, 0, c->bench_ids, c->N, c->V, 0, st);
}

/* The element types of the schedule's optimizer operands: the sharded parameters, gradient and moments. */
static void optim_elems(const struct cu *c, enum elem *pe, enum elem *ge, enum elem *se)
{
	*pe = *ge = *se = ELEM_FP32;
	for (int i = c->s->nbufs - 1; i >= 0; i--) {
		const struct buffer *b = &c->s->bufs[i];
		if (b->kind == BUF_SHARD_PARAM)
			*pe = b->elem;
		else if (b->kind == BUF_SHARD_GRAD || b->kind == BUF_RS_OUT)
			*ge = b->elem;
		else if (b->kind == BUF_OPTIM_STATE)
			*se = b->elem;
	}
}

/* AdamW over n elements on the compute stream, in the form and element types the run's optimizer uses. */
static void bench_adamw(struct cu *c, cudaStream_t st, size_t n)
{
	enum elem pe, ge, se;
	size_t b;
	char *p, *g, *m, *v;
	const struct cuda_adamw_hparams hp = { 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f };

	optim_elems(c, &pe, &ge, &se);
	b = n * (ebytes(pe) + ebytes(ge) + 2 * ebytes(se));
	bench_reserve(c, b, st);
	p = c->bench;
	g = p + n * ebytes(pe);
	m = g + n * ebytes(ge);
	v = m + n * ebytes(se);
	if (pe != ELEM_FP32 || ge != ELEM_FP32 || se != ELEM_FP32) {
		struct bcu_adam k = { hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, 1.0f - hp.beta1,
				      1.0f - hp.beta2, 1.0f / (float)c->M };
		bcu_adamw(p, pe, g, ge, m, v, se, n, &k, st);
		return;
	}
	if (c->M > 1) /* the gradient's mean over microbatches, as device_optimizer does */
		bcu_scale(g, n, ELEM_FP32, 1.0f / (float)c->M, st);
	switch (c->s->optim) {
	case OPT_FUSED:
		cuda_adamw_fused((float *)p, NULL, (float *)g, (float *)m, (float *)v, n, &hp, 1, 0, st);
		break;
	case OPT_PER_PARAM:
		cuda_adamw((float *)p, (const float *)g, (float *)m, (float *)v, n, &hp, 1, st);
		break;
	default: {
		struct cuda_adamw_tensor t = { (float *)p, (const float *)g, (float *)m, (float *)v, n };
		cuda_adamw_multi(&t, 1, &hp, 1, st);
		break;
	}
	}
}

/*
 * gpu_run --calibrate's kernels (backend.h): one kernel of the model's
 * lists as the CUDA model launches it (gpu/cuda/cuda_kernel.h), on the
 * compute stream whose context serves the model; "pass", a memory-bound
 * pass of k->bytes (half read, half read and written: dst += src in fp32);
 * "adamw", the optimizer over k->m elements, on the compute stream in the
 * run's form and element types, or on the host thread (ref_adamw, the
 * host optimizer's).
 */
static void cu_kernel(struct backend *b, int stream, const struct kernel *k, const struct model_shape *m, int batch)
{
	struct cu *c = cu_of(b);
	struct cuda_kernel_plan p;
	cudaStream_t st;
	char err[256];

	if (stream == ST_HOST) {
		struct hcmd h = { .type = H_BENCH_ADAMW, .bytes = (uint64_t)k->m };
		assert(!strcmp(k->name, "adamw") && "the host stream runs the optimizer only");
		host_push(c, &h);
		return;
	}
	assert(stream == ST_COMPUTE && "the model context serves the compute stream");
	st = dev_stream(c, stream);
	if (!strcmp(k->name, "adamw")) {
		bench_adamw(c, st, (size_t)k->m);
		return;
	}
	if (!strcmp(k->name, "pass")) {
		size_t n = (size_t)(k->bytes / (2 * sizeof(float)));
		bench_reserve(c, 2 * n * sizeof(float), st);
		bcu_accumulate(c->bench, ELEM_FP32, (const float *)c->bench + n, ELEM_FP32, n, st);
		return;
	}
	if (cuda_kernel_plan(k, m, batch, c->bench_grad_bf16, &p, err, sizeof err) != 0) {
		fprintf(stderr, "gpu_run: calibration: %s\n", err); /* a kernel list the CUDA model does not know: a bug */
		abort();
	}
	bench_reserve(c, cuda_kernel_bytes(&p), st);
	if (p.ids)
		bench_ids(c, st);
	cuda_kernel_run(c->ctx, &p, c->bench, c->bench_ids, st);
}

/* Calls one stream may queue behind an event not yet recorded (calibrate.c's gate): see QUEUE_LAUNCHES. */
static int gate_calls(struct backend *b)
{
	struct cu *c = cu_of(b);
	int chunk = model_loss_chunk_rows(c->m, c->B), per = CALL_LAUNCHES, most = 1;

	if ((c->N + chunk - 1) / chunk + 1 > per) /* the loss's launches, a chunk each */
		per = (c->N + chunk - 1) / chunk + 1;
	for (int g = 0; g < GRP_COUNT; g++)
		if (c->s->group_n[g] > most)
			most = c->s->group_n[g];
	if (c->comm->emulated && c->comm->emu.engine == 1 && 2 * most + 2 > per) /* a copy and a timer per ring step */
		per = 2 * most + 2;
	return QUEUE_LAUNCHES / per > 1 ? QUEUE_LAUNCHES / per : 1;
}

/* ---- what the run is on ---------------------------------------------------------------------- */

static void put_int(void (*put)(void *, const char *, const char *), void *ctx, const char *key, long long v)
{
	char s[32];
	snprintf(s, sizeof(s), "%lld", v);
	put(ctx, key, s);
}

/* cuDNN's version as text: "9.10.1", or why there is none. */
static void cudnn_version(char *out, size_t len)
{
	const char *why = NULL;
	size_t v = cuda_cudnn_version(&why);

	if (v)
		snprintf(out, len, "%zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
	else
		snprintf(out, len, "none (%s)", why ? why : "not loadable");
}

/* The libraries the timings depend on, one line (a calibration session's versions; the device is its hardware). */
static void cu_versions(struct backend *b, char *buf, int len)
{
	struct cu *c = cu_of(b);
	char drv[64], dnn[96];
	int api = 0, rt = 0, nv = c->comm->nccl_version;
	size_t blas = cublasLtGetVersion();

	cuda_driver_version(drv, sizeof drv);
	cudnn_version(dnn, sizeof dnn);
	cudaCheck(cudaDriverGetVersion(&api));
	cudaCheck(cudaRuntimeGetVersion(&rt));
	snprintf(buf, (size_t)len, "driver %s (CUDA %d.%d), runtime %d.%d, cuBLASLt %zu.%zu.%zu, NCCL %d.%d.%d, cuDNN %s",
		 drv, api / 1000, api % 1000 / 10, rt / 1000, rt % 1000 / 10, blas / 10000, blas / 100 % 100, blas % 100,
		 nv / 10000, nv / 100 % 100, nv % 100, dnn);
}

static void cu_describe(struct backend *b, void (*put)(void *ctx, const char *key, const char *value), void *ctx)
{
	struct cu *c = cu_of(b);
	char s[128];
	int v = 0;
	size_t blas = cublasLtGetVersion();
	const char *why = NULL;
	enum cuda_attention used = cuda_ctx_attention_used(c->ctx, &why);
	static const char *const policy[] = { "default", "efficiency", "zero" };
	const struct comm_nccl_opts *no = &c->comm->nccl_opts;

	put(ctx, "device.name", c->prop.name);
	snprintf(s, sizeof(s), "sm_%d%d", c->prop.major, c->prop.minor);
	put(ctx, "device.arch", s);
	put_int(put, ctx, "device.sms", c->prop.multiProcessorCount);
	put_int(put, ctx, "device.memory_bytes", (long long)c->prop.totalGlobalMem);
	cuda_driver_version(s, sizeof(s));
	put(ctx, "device.driver", s);
	cudaCheck(cudaDriverGetVersion(&v));
	snprintf(s, sizeof(s), "%d.%d", v / 1000, v % 1000 / 10);
	put(ctx, "cuda.driver_api", s);
	cudaCheck(cudaRuntimeGetVersion(&v));
	snprintf(s, sizeof(s), "%d.%d", v / 1000, v % 1000 / 10);
	put(ctx, "cuda.runtime", s);
	snprintf(s, sizeof(s), "%zu.%zu.%zu", blas / 10000, blas / 100 % 100, blas % 100);
	put(ctx, "cuda.cublaslt", s);
	v = c->comm->nccl_version;
	snprintf(s, sizeof(s), "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
	put(ctx, "nccl.version", s);
	cudnn_version(s, sizeof(s));
	put(ctx, "cudnn.version", s);
	if (c->comm->staged) {
		put(ctx, "backend.collectives", "staged: each stream's input to pinned host memory, MPI on the host "
						"thread in issue order, the output back (no NCCL communicator)");
	} else if (!c->comm->emulated) {
		put_int(put, ctx, "nccl.min_ctas", no->min_ctas);
		put_int(put, ctx, "nccl.max_ctas", no->max_ctas);
		put_int(put, ctx, "nccl.cga_cluster_size", no->cga_cluster);
		put(ctx, "nccl.cta_policy", no->cta_policy >= 0 && no->cta_policy <= 2 ? policy[no->cta_policy] : "nccl");
		put(ctx, "nccl.symmetric_windows", c->windows ? "yes" : "no");
	} else {
		put(ctx, "fabric.engine", c->comm->emu.engine ? "copy-engine (all-gather; reductions on SMs)" : "sm");
		put_int(put, ctx, "fabric.ctas", c->comm->emu.ctas);
	}
	put(ctx, "kernels.attention_asked", c->opt.attention ? "cudnn" : "mma");
	put(ctx, "kernels.attention_used", used == CUDA_ATTN_CUDNN ? "cudnn" : "mma");
	if (c->opt.attention && used != CUDA_ATTN_CUDNN && why)
		put(ctx, "kernels.attention_fallback", why);
	{
		/* under GQA, which graph cuDNN's backward ran (cuda_model.h) */
		const char *not_kv = NULL, *gqa = cuda_ctx_attention_gqa(c->ctx, &not_kv);
		if (gqa)
			put(ctx, "kernels.attention_gqa_backward", gqa);
		if (gqa && not_kv)
			put(ctx, "kernels.attention_gqa_why", not_kv);
	}
	put(ctx, "kernels.gemm_algorithms", c->opt.gemm_autotune ? "timed (top 8 of the heuristic)" : "heuristic's first");
	put(ctx, "backend.host_waits", "cuStreamWaitValue32");
	put(ctx, "backend.flag_writes", "cuStreamWriteValue32");
#if defined(__x86_64__) || defined(__i386__)
	put(ctx, "backend.host_subnormals", "flushed to zero (FTZ, DAZ)");
#else
	put(ctx, "backend.host_subnormals", "kept");
#endif
	put_int(put, ctx, "backend.host_threads", c->host_threads);
	put_int(put, ctx, "backend.workspace_bytes", (long long)c->workspace_bytes);
}

/*
 * The device's name as a file-name word: lower case, runs of other
 * characters to one '-', the vendor's prefix and a trailing memory size and
 * type dropped (the part is what tells timings apart): "NVIDIA H100 80GB
 * HBM3" -> "h100", "NVIDIA H200" -> "h200", "NVIDIA H100 PCIe" ->
 * "h100-pcie", "NVIDIA A100-SXM4-80GB" -> "a100-sxm4-80gb".
 */
static void cu_hardware(struct backend *b, char *buf, int len)
{
	const char *n = cu_of(b)->prop.name, *hbm;
	int k = 0, dash = 0;

	for (; *n && k < len - 1; n++) {
		char ch = *n;
		if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')) {
			buf[k++] = ch;
			dash = 0;
		} else if (ch >= 'A' && ch <= 'Z') {
			buf[k++] = (char)(ch - 'A' + 'a');
			dash = 0;
		} else if (!dash && k > 0) {
			buf[k++] = '-';
			dash = 1;
		}
	}
	while (k > 0 && buf[k - 1] == '-')
		k--;
	buf[k] = '\0';
	if (!strncmp(buf, "nvidia-", 7))
		memmove(buf, buf + 7, strlen(buf + 7) + 1);
	/* "-80gb-hbm3", "-141gb-hbm3e": the memory, at the end */
	hbm = strstr(buf, "gb-hbm");
	if (hbm && !strchr(hbm + 6, '-')) {
		char *cut = (char *)hbm;
		while (cut > buf && cut[-1] >= '0' && cut[-1] <= '9')
			cut--;
		if (cut > buf && cut[-1] == '-' && cut < hbm)
			cut[-1] = '\0';
	}
}

/* ---- the watchdog ------------------------------------------------------------------------------ */

/* "OP label (kind)" of event ev, or "calibration event ev". */
static void event_what(const struct cu *c, int ev, char *buf, size_t n)
{
	char label[64];

	if (ev / 2 < c->s->nops)
		snprintf(buf, n, "%s (%s)", op_label(c->s, ev / 2, label, sizeof label),
			 op_kind_name((enum op_kind)c->s->ops[ev / 2].kind));
	else
		snprintf(buf, n, "calibration event %d", ev);
}

/*
 * For the watchdog's message (watchdog.h): each CUDA stream's first event
 * of the step it has not passed (the op it runs, or the op whose start it
 * waits for), and the host thread's command. Runs on the watchdog's
 * thread; gives up on what stays locked.
 */
static void cu_wd_describe(void *ctx, char *buf, size_t n)
{
	struct cu *c = ctx;
	struct timespec until;
	size_t used = 0;
	char what[128];

	buf[0] = '\0';
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 1;
	if (cudaSetDevice(c->device) != cudaSuccess || pthread_mutex_timedlock(&c->wd_mu, &until) != 0) {
		snprintf(buf, n, "the CUDA streams (busy)");
		return;
	}
	for (int st = 0; st < ST_COUNT && used < n; st++) {
		int i = c->passed[st];
		while (i < c->nrec[st] && cudaEventQuery(c->ev[c->rec[st][i]]) == cudaSuccess)
			i++;
		(void)cudaGetLastError();
		if (i == c->nrec[st])
			continue;
		event_what(c, c->rec[st][i], what, sizeof what);
		used += (size_t)snprintf(buf + used, n - used, c->rec[st][i] % 2 ? "%s%s running on stream %s"
										 : "%sstream %s waiting to start %s",
					 used ? "; " : "", c->rec[st][i] % 2 ? what : stream_name(st),
					 c->rec[st][i] % 2 ? stream_name(st) : what);
	}
	pthread_mutex_unlock(&c->wd_mu);
	if (used < n && pthread_mutex_timedlock(&c->hq.mu, &until) == 0) {
		if (c->hq.head < c->hq.n) {
			const struct hcmd *k = &c->hq.k[c->hq.head];
			if (k->type == H_WAIT_DEVICE || k->type == H_WAIT_FLAG) {
				event_what(c, k->event, what, sizeof what);
				snprintf(buf + used, n - used, "%sstream host waiting for %s", used ? "; " : "", what);
			} else if (k->type == H_COLL) {
				snprintf(buf + used, n - used, "%sstream host in a staged %s of stream %s (MPI, the other "
								"ranks' host threads)", used ? "; " : "",
					 op_kind_name(k->kind), stream_name(k->stream));
			} else {
				snprintf(buf + used, n - used, "%sstream host running its %s", used ? "; " : "",
					 k->type == H_OPTIM ? "optimizer step" : "command");
			}
		}
		pthread_mutex_unlock(&c->hq.mu);
	}
}

/* Before the watchdog aborts the job: no NCCL collective in flight may hold the exit. */
static void cu_wd_abort(void *ctx)
{
	struct cu *c = ctx;

	if (!c->comm->emulated)
		comm_nccl_abort(c->comm);
}

/* ---- setup ------------------------------------------------------------------------------------- */

static void cu_release(struct backend *b)
{
	struct cu *c = cu_of(b);

	if (!c)
		return;
	cu_sync(b);
	watchdog_describe_with(NULL, NULL);
	watchdog_before_abort(NULL, NULL);
	pthread_mutex_lock(&c->hq.mu);
	c->hq.stop = 1;
	pthread_cond_broadcast(&c->hq.cv);
	pthread_mutex_unlock(&c->hq.mu);
	pthread_join(c->hq.thread, NULL);
	pthread_mutex_destroy(&c->hq.mu);
	pthread_cond_destroy(&c->hq.cv);
	free(c->hq.k);
	for (int i = 0; i < c->nevents; i++)
		cudaCheck(cudaEventDestroy(c->ev[i]));
	cudaCheck(cudaEventDestroy(c->t0));
	for (int st = 0; st < ST_COUNT; st++)
		if (c->cs[st])
			cudaCheck(cudaStreamDestroy(c->cs[st]));
	cuda_ctx_free(c->ctx);
	for (int k = 0; c->lay && k < c->lay->nunits; k++)
		cudaCheck(cudaFree(c->tdev[k]));
	layout_free(c->lay);
	cudaCheck(cudaFree(c->d_tokens));
	cudaCheck(cudaFree(c->d_targets));
	cudaCheck(cudaFree(c->d_loss));
	cudaCheck(cudaFree(c->stage));
	cudaCheck(cudaFree(c->emu_t0));
	cudaCheck(cudaFree(c->bench)); /* stream-ordered allocations: cudaFree after the streams have ended is fine */
	cudaCheck(cudaFree(c->bench_ids));
	cudaCheck(cudaFreeHost((void *)c->hflag));
	for (int st = 0; st < ST_COUNT; st++)
		if (c->shost[st])
			cudaCheck(cudaFreeHost(c->shost[st]));
	free(c->host_bench);
	pthread_mutex_destroy(&c->wd_mu);
	for (int st = 0; st < ST_COUNT; st++)
		free(c->rec[st]);
	free(c->ev);
	free(c->ev_host);
	free(c->ev_dev);
	free(c->ev_future);
	free(c->host_ns);
	free(c->stores);
	free(c->tdev);
	free(c->most);
	free(c->wsegs);
	free(c);
}

static const struct backend_ops cuda_ops = {
	.name = "cuda",
	.release = cu_release,
	.dev_alloc = cu_dev_alloc,
	.dev_free = cu_dev_free,
	.host_alloc = cu_host_alloc,
	.host_free = cu_host_free,
	.upload = cu_upload,
	.download = cu_download,
	.set_batch = cu_set_batch,
	.step_begin = cu_step_begin,
	.now_ns = cu_now_ns,
	.record = cu_record,
	.wait = cu_wait,
	.sync = cu_sync,
	.event_ns = cu_event_ns,
	.loss = cu_loss,
	.zero = cu_zero,
	.forward = cu_forward,
	.recompute = cu_recompute,
	.backward = cu_backward,
	.all_gather = cu_all_gather,
	.reduce_scatter = cu_reduce_scatter,
	.all_reduce = cu_all_reduce,
	.accumulate = cu_accumulate,
	.optimizer = cu_optimizer,
	.copy = cu_copy,
	.unpack = cu_unpack,
	.pack = cu_pack,
	.describe = cu_describe,
	.kernel = cu_kernel,
	.hardware = cu_hardware,
	.gate_calls = gate_calls,
	.versions = cu_versions,
};

/* Bytes the CUDA model needs in buffer b (0: nothing beyond what the schedule says). */
static uint64_t need_bytes(const struct cu *c, const struct buffer *b)
{
	const struct schedule *s = c->s;
	enum segment_kind sk = b->seg >= 0 ? s->segs[b->seg].kind : SEG_KIND_COUNT;
	int phase = b->alloc_op >= 0 ? s->ops[b->alloc_op].kind : -1;

	switch (b->kind) {
	case BUF_ACTS:
		if (sk == SEG_BLOCK)
			return cuda_block_saved_bytes(c->m, c->B, s->ac);
		if (sk == SEG_HEAD)
			return cuda_head_saved_bytes(c->m, c->B, s->loss);
		return 0;
	case BUF_RECOMPUTED:
		return cuda_block_transient_bytes(c->m, c->B, s->ac);
	case BUF_TRANSIENT:
		if (sk == SEG_BLOCK && phase == OP_FORWARD)
			return cuda_block_transient_bytes(c->m, c->B, s->ac);
		if (sk == SEG_BLOCK && phase == OP_BACKWARD)
			return cuda_block_scratch_bytes(c->m, c->B);
		if (sk == SEG_HEAD)
			return cuda_head_transient_bytes(c->m, c->B, s->loss, s->loss_chunk_rows);
		return 0;
	case BUF_RESIDUAL:
	case BUF_RESIDUAL_GRAD:
		return (uint64_t)c->N * c->D * sizeof(bf16);
	case BUF_TOKENS:
		return (uint64_t)c->N * sizeof(int);
	default:
		return 0;
	}
}

/* Refuse what the CUDA model cannot compute: 0, or -1 with the reason in err. */
static int check_schedule(const struct schedule *s, char *err, int errlen)
{
	if (s->act_elem != ELEM_BF16) {
		snprintf(err, errlen, "the cuda backend computes in bf16, but the schedule's activations are %s: "
				      "set precision = mixed or pure-bf16 in [policy]", elem_name(s->act_elem));
		return -1;
	}
	if (cuda_shape_check(&s->exp->model, err, errlen) != 0)
		return -1;
	for (int i = 0; i < s->nbufs; i++) {
		const struct buffer *b = &s->bufs[i];
		if (b->elem != ELEM_FP32 && b->elem != ELEM_BF16 && b->elem != ELEM_I32) {
			snprintf(err, errlen, "a %s buffer of element type %s: the cuda backend has fp32 and bf16",
				 buf_kind_name(b->kind), elem_name(b->elem));
			return -1;
		}
	}
	return 0;
}

/* A driver function (cuStreamWaitValue32, cuStreamWriteValue32) through the runtime (no link against libcuda); NULL if absent. */
static void *driver_entry(const char *name)
{
	void *fn = NULL;
	enum cudaDriverEntryPointQueryResult q;

	if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
	    q != cudaDriverEntryPointSuccess) {
		(void)cudaGetLastError();
		return NULL;
	}
	return fn;
}

/* The per-tensor layout of every unit in device memory, for pack and unpack. */
static void layout_tables(struct cu *c)
{
	c->lay = layout_new(c->s);
	c->tdev = xcalloc((size_t)c->lay->nunits, sizeof(*c->tdev));
	c->most = xcalloc((size_t)c->lay->nunits, sizeof(*c->most));
	for (int k = 0; k < c->lay->nunits; k++) {
		const struct unit_layout *u = &c->lay->units[k];
		struct bcu_tensor *t = xcalloc((size_t)u->ntensors + 1, sizeof(*t));
		for (int i = 0; i < u->ntensors; i++) {
			const struct layout_tensor *x = &u->t[i];
			t[i] = (struct bcu_tensor){ (int64_t)x->flat_off, (int64_t)x->shard_off, x->rows, x->cols,
						    x->rows_per_rank };
			if (x->rows_per_rank * x->cols > c->most[k])
				c->most[k] = x->rows_per_rank * x->cols;
		}
		cudaCheck(cudaMalloc((void **)&c->tdev[k], sizeof(*t) * (size_t)(u->ntensors + 1)));
		cudaCheck(cudaMemcpy(c->tdev[k], t, sizeof(*t) * (size_t)u->ntensors, cudaMemcpyHostToDevice));
		c->workspace_bytes += sizeof(*t) * (size_t)(u->ntensors + 1);
		free(t);
	}
}

/* The largest segment's parameters, when some are fp32 (ddp's replica under mixed precision): the staging. */
static size_t staging_elems(const struct cu *c)
{
	size_t most = 0;

	for (int i = 0; i < c->s->nbufs; i++) {
		const struct buffer *b = &c->s->bufs[i];
		if (b->kind == BUF_FULL_PARAM && b->elem == ELEM_FP32)
			for (int g = 0; g < c->s->nsegs; g++) {
				size_t nout, n = seg_param_elems(c, g, &nout);
				if (n + nout > most)
					most = n + nout;
			}
	}
	return most;
}

/* NCCL's zero-CTA policy: segments from ncclMemAlloc, registered as symmetric windows (when the library has them). */
static void windows_setup(struct cu *c)
{
	if (c->comm->emulated || c->comm->nccl_opts.cta_policy != 2)
		return;
	c->mem_alloc = (nccl_mem_alloc_fn)dlsym(RTLD_DEFAULT, "ncclMemAlloc");
	c->mem_free = (nccl_mem_free_fn)dlsym(RTLD_DEFAULT, "ncclMemFree");
	c->win_reg = (nccl_win_reg_fn)dlsym(RTLD_DEFAULT, "ncclCommWindowRegister");
	c->win_dereg = (nccl_win_dereg_fn)dlsym(RTLD_DEFAULT, "ncclCommWindowDeregister");
	c->windows = c->mem_alloc && c->mem_free && c->win_reg && c->win_dereg;
	if (!c->windows && c->comm->rank == 0)
		fprintf(stderr, "gpu_run: this NCCL (%d) has no symmetric windows: the zero-CTA policy runs on "
				"plain memory (NCCL may then use CTAs)\n", c->comm->nccl_version);
}

int backend_cuda_select(int local_rank, int local_size, int staged, char *err, int errlen)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess || n == 0) {
		snprintf(err, errlen, "--device cuda: no CUDA device here (%s)",
			 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		(void)cudaGetLastError();
		return -1;
	}
	if (staged) {
		cudaCheck(cudaSetDevice(local_rank % n));
		return local_rank % n;
	}
	if (local_size > n) {
		snprintf(err, errlen, "%d ranks on this node but %d GPU%s: NCCL cannot put two ranks on one GPU; "
				      "run one rank of the job with --emulate-world N (mpirun -np 1), or check the "
				      "numbers of several with --staged-collectives (collectives through host memory "
				      "and MPI, slow)",
			 local_size, n, n == 1 ? "" : "s");
		return -1;
	}
	cudaCheck(cudaSetDevice(local_rank));
	return local_rank;
}

static struct comm *failing_comm;

static void abort_job(int code)
{
	(void)code;
	if (failing_comm)
		comm_nccl_abort(failing_comm); /* collectives in flight must not hang the exit */
	MPI_Abort(MPI_COMM_WORLD, 1);
}

void backend_cuda_on_failure(struct comm *c)
{
	failing_comm = c;
	cuda_set_abort(abort_job);
}

struct backend *backend_cuda_new(const struct schedule *s, struct comm *comm, const struct cuda_opts *o, char *err,
				 int errlen)
{
	struct cu *c;
	int lo = 0, hi = 0;
	size_t scratch;

	if (check_schedule(s, err, errlen) != 0)
		return NULL;
	c = xcalloc(1, sizeof(*c));
	c->base.ops = &cuda_ops;
	c->s = s;
	c->m = &s->exp->model;
	c->comm = comm;
	c->opt = *o;
	c->B = s->batch;
	c->N = s->batch * c->m->seq;
	c->D = c->m->hidden;
	c->V = c->m->vocab;
	c->M = s->microbatches;
	cudaCheck(cudaGetDevice(&c->device));
	cudaCheck(cudaGetDeviceProperties(&c->prop, c->device));
	{
		/* the host optimizer's threads: this node's CPUs, shared by its ranks (one, emulated) */
		int lrank = 0, lsize = 1;
		if (!comm->emulated)
			comm_node(&lrank, &lsize);
		c->host_threads = parts_threads(lsize);
	}
	for (int i = 0; i < s->nbufs; i++) {
		uint64_t need = need_bytes(c, &s->bufs[i]);
		uint64_t have = buf_kernel_bytes(s, i);
		if (need > have) {
			/* the schedule and the CUDA model disagree on a size: a bug, not an input error */
			fprintf(stderr, "gpu_run: a %s buffer of %llu bytes is too small for the cuda backend's %llu\n",
				buf_kind_name(s->bufs[i].kind), (unsigned long long)have, (unsigned long long)need);
			abort();
		}
	}

	/* streams: communication first in line */
	cudaCheck(cudaDeviceGetStreamPriorityRange(&lo, &hi));
	for (int st = 0; st < ST_COUNT; st++) {
		int comm_stream = st == ST_ALLGATHER || st == ST_REDUCE_SCATTER || st == ST_ALLREDUCE;
		if (st == ST_HOST)
			continue;
		cudaCheck(cudaStreamCreateWithPriority(&c->cs[st], cudaStreamNonBlocking, comm_stream ? hi : lo));
	}
	c->nevents = 2 * s->nops + CAL_EVENTS;
	c->ev = xcalloc((size_t)c->nevents + 1, sizeof(*c->ev));
	for (int i = 0; i < c->nevents; i++)
		cudaCheck(cudaEventCreate(&c->ev[i]));
	cudaCheck(cudaEventCreate(&c->t0));
	c->ev_host = xcalloc((size_t)c->nevents + 1, 1);
	c->ev_dev = xcalloc((size_t)c->nevents + 1, 1);
	c->ev_future = xcalloc((size_t)c->nevents + 1, 1);
	for (int st = 0; st < ST_COUNT; st++) {
		c->rec[st] = xcalloc((size_t)c->nevents + 1, sizeof(int));
		c->gated[st] = -1;
	}
	pthread_mutex_init(&c->wd_mu, NULL);
	c->host_ns = xcalloc((size_t)c->nevents + 1, sizeof(uint64_t));
	{
		void *flags = NULL, *dflags = NULL;
		/* the events' flags, the gates' timeouts, then a staged collective's flag per stream */
		size_t words = (size_t)c->nevents + 1 + ST_COUNT;
		cudaCheck(cudaHostAlloc(&flags, sizeof(uint32_t) * words, cudaHostAllocMapped));
		memset(flags, 0, sizeof(uint32_t) * words);
		cudaCheck(cudaHostGetDevicePointer(&dflags, flags, 0));
		c->hflag = flags;
		c->hflag_dev = (CUdeviceptr)(uintptr_t)dflags;
		/* the gate kernel loaded now (a closed flag, no time to wait), never first behind a gate */
		bcu_gate((const uint32_t *)dflags, 0, NULL, c->cs[ST_COMPUTE]);
		cudaCheck(cudaStreamSynchronize(c->cs[ST_COMPUTE]));
	}
	/*
	 * Required: a stream that waits for the host, or for another stream's
	 * flag, through a blocking host function instead (cudaLaunchHostFunc)
	 * could hold the one thread that runs host functions while the one that
	 * would set its flag waits behind it.
	 */
	c->wait_value = (wait_value_fn)driver_entry("cuStreamWaitValue32");
	c->write_value = (write_value_fn)driver_entry("cuStreamWriteValue32");
	if (!c->wait_value || !c->write_value)
		cuda_fail("CUDA driver", "cudaGetDriverEntryPointByVersion(cuStreamWaitValue32, cuStreamWriteValue32, 12000)",
			  "stream memory operations not found: this backend needs a CUDA 12 or later driver", __FILE__,
			  __LINE__);

	/* the model: its context (cuBLASLt, scratch), the step's data, stores, staging */
	scratch = cuda_scratch_bytes(c->m, c->B);
	c->ctx = cuda_ctx_new(scratch);
	cuda_ctx_attention(c->ctx, o->attention ? CUDA_ATTN_CUDNN : CUDA_ATTN_MMA);
	cuda_ctx_gemm_autotune(c->ctx, o->gemm_autotune);
	c->workspace_bytes = scratch + (32u << 20); /* + cuBLASLt's workspace (gpu/cuda/internal.h) */
	cudaCheck(cudaMalloc((void **)&c->d_tokens, sizeof(int) * (size_t)c->M * c->N));
	cudaCheck(cudaMalloc((void **)&c->d_targets, sizeof(int) * (size_t)c->M * c->N));
	cudaCheck(cudaMalloc((void **)&c->d_loss, sizeof(float) * (size_t)c->M));
	cudaCheck(cudaMemset(c->d_loss, 0, sizeof(float) * (size_t)c->M));
	c->workspace_bytes += 2 * sizeof(int) * (size_t)c->M * c->N + sizeof(float) * (size_t)c->M;
	c->stores = xcalloc((size_t)s->nsegs, sizeof(*c->stores));
	c->stage_elems = staging_elems(c);
	if (c->stage_elems) {
		cudaCheck(cudaMalloc((void **)&c->stage, sizeof(bf16) * c->stage_elems));
		c->workspace_bytes += sizeof(bf16) * c->stage_elems;
	}
	cudaCheck(cudaMalloc((void **)&c->emu_t0, sizeof(uint64_t) * ST_COUNT));
	layout_tables(c);
	windows_setup(c);

	pthread_mutex_init(&c->hq.mu, NULL);
	pthread_cond_init(&c->hq.cv, NULL);
	clock_gettime(CLOCK_MONOTONIC, &c->t0_host);
	if (pthread_create(&c->hq.thread, NULL, host_main, c) != 0) {
		fprintf(stderr, "gpu_run: cannot start the host stream's thread\n");
		abort();
	}
	for (int i = 0; i < s->nbufs; i++) /* the parameter gradients the backward accumulates into */
		if (s->bufs[i].kind == BUF_FULL_GRAD && s->bufs[i].elem == ELEM_BF16)
			c->bench_grad_bf16 = 1;
	cudaCheck(cudaDeviceSynchronize());
	watchdog_describe_with(cu_wd_describe, c);
	watchdog_before_abort(cu_wd_abort, c);
	return &c->base;
}
