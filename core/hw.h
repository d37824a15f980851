/*
 * hw.h - the hardware a run is priced on or runs on.
 *
 * A GPU spec comes from the catalog (core/catalog.ini, where every value
 * carries its public source) and may be overridden key by key from the
 * experiment's [cluster] section. The runtime constants (kernel launch
 * cost, allocator rounding, ...) are catalog data as well, per runtime.
 * Bandwidths are bytes per second written as GB/s (10^9 bytes/s).
 */
#ifndef CORE_HW_H
#define CORE_HW_H

#include <stddef.h>
#include <stdint.h>

#define HW_NAME_MAX 32

struct gpu_spec {
	char name[HW_NAME_MAX];
	int sms;               /* streaming multiprocessors */
	double bf16_tflops;    /* peak dense bf16, 10^12 FLOP/s */
	double fp32_tflops;    /* peak dense fp32 (no tensor cores), 10^12 FLOP/s */
	double hbm_gbps;       /* HBM bandwidth, GB/s */
	double hbm_gib;        /* HBM capacity, GiB */
	double intra_gbps;     /* intra-node bus bandwidth per GPU for all-gather/reduce-scatter, GB/s */
	int nics_per_node;
	double nic_gbps;       /* one NIC, GB/s */
	double pcie_gbps;      /* host-device copies, GB/s, one direction */
	int gemm_tile_m;       /* output tile rows of a large bf16 GEMM */
	int gemm_tile_n;       /* output tile columns */
	int tiles_per_sm;      /* resident tiles per SM (1 for persistent Hopper kernels) */
	double gemm_eff;       /* fraction of peak a full wave of the largest tile reaches */
	double attn_eff;       /* fraction of peak this project's fused attention reaches, forward */
	double attn_bwd_eff;   /* its backward (attn_eff when only that is set) */
	double fa2_fwd_eff;    /* FlashAttention-2 (SDPA's flash backend): forward, long sequences, head dim 128 */
	double fa2_bwd_eff;    /* its backward */
	double cudnn_fwd_eff;  /* cuDNN attention (SDPA's cudnn backend): forward */
	double cudnn_bwd_eff;  /* its backward */
	double attn_half_seq;  /* sequence length at which attention reaches half those fractions */
	double hbm_eff;        /* fraction of hbm_gbps a streaming kernel achieves */
	int nccl_sms;          /* SMs one NCCL collective holds (channels) */
	double nccl_hbm_factor;/* HBM bytes a collective moves per wire byte */
	double elementwise_sms_frac; /* fraction of SMs a memory-bound kernel needs to reach full HBM bandwidth */
	double cpu_adam_gparams; /* host optimizer rate of the node's CPUs per GPU, 10^9 params/s */
	double net_latency_us;   /* ring step latency across nodes */
	double nvlink_latency_us;/* ring step latency inside a node */
	double kernel_min_us;    /* shortest time any kernel takes on the GPU */
	double tdp_w;            /* board power at which the datasheet's peaks hold */
	double power_cap_w;      /* board power as deployed; below tdp_w the clock drops */
	char source[160];      /* where the numbers come from */
};

/* The GPU's memory in bytes: what the report's "GPU has" says, and the caching allocator's capacity. */
static inline uint64_t gpu_spec_bytes(const struct gpu_spec *g)
{
	return (uint64_t)(g->hbm_gib * 1073741824.0);
}

struct cluster {
	struct gpu_spec gpu;
	int nodes;
	int gpus_per_node;
	double intra_gbps;     /* resolved: GPU's intra value unless overridden */
	double inter_gbps;     /* per GPU, a ring within one rail (hsdp's replicas): nics * nic_gbps / gpus_per_node unless overridden */
	double node_inter_gbps;/* per node, a ring spanning nodes (fsdp, ddp): nics * nic_gbps unless overridden */
};

/* Runtime behaviour constants, per runtime (testbed or pytorch). */
struct runtime_spec {
	char name[HW_NAME_MAX];
	double launch_us;         /* CPU time to launch one kernel */
	double op_overhead_us;    /* framework CPU time per schedule op (hooks, bookkeeping) */
	int per_param_kernels;    /* kernels a per-parameter optimizer step launches per tensor */
	int foreach_kernels;      /* kernels a foreach optimizer step launches per chunk of tensors */
	int fused_kernels;        /* kernels a fused optimizer step launches per chunk of tensors */
	int foreach_chunk;        /* tensors one multi-tensor launch covers */
	double unfused_traffic;   /* HBM traffic of a foreach or per-parameter step over a fused one */
	int caching_allocator;    /* 1: per-stream caching allocator; 0: preallocated arena */
	int copy_in_out;          /* 1: gathers copy out of, reductions copy into, a flat comm buffer */
	int64_t alloc_round_bytes;   /* allocations rounded up to this */
	int64_t segment_bytes;       /* smallest segment the allocator reserves for large blocks */
	char kernels[16];            /* the kernel recipe: testbed, eager or compile (core/recipe.h) */
	char attention[16];          /* its attention kernel: testbed, flash or cudnn */
	double optim_temp_bytes;     /* bytes per parameter a foreach optimizer step allocates for its temporaries */
	int clip_grad_norm;          /* 1: the gradient norm is clipped before the optimizer step */
	double dtensor_us;           /* host time per tensor of each multi-tensor optimizer op (DTensor dispatch) */
	int launch_queue;            /* kernels a stream holds launched and not yet finished before a launch blocks; 0: no bound */
	int lazy_optim_state;        /* 1: the optimizer makes its state, a tensor per moment and parameter, in its first step */
	/*
	 * The rates of its memory-bound kernels by how they move their bytes
	 * (enum mem_access, core/model.h): a fraction of the GPU's HBM
	 * bandwidth, or a rate per SM the kernel runs on (what its loads in
	 * flight allow, whatever the HBM); 0: as a stream (hbm_eff)
	 */
	double norm_eff;             /* MA_NORM: fraction of hbm_gbps */
	double cast_up_sm_gbps;      /* MA_CAST_UP: GB/s per SM */
	double gather_sm_gbps;       /* MA_GATHER: GB/s per SM */
	double broadcast_sm_gbps;    /* MA_BROADCAST: GB/s per SM, at most hbm_eff */
	double reduce_sm_gbps;       /* MA_REDUCE: GB/s per SM */
	double multi_tensor_eff;     /* the optimizer's multi-tensor kernels (foreach, fused): fraction of hbm_gbps */
	char source[160];
};

static inline int cluster_world(const struct cluster *c)
{
	return c->nodes * c->gpus_per_node;
}

/* Catalog look-ups: 0 and *out filled, or -1 when the name is unknown. */
int hw_gpu_lookup(const char *name, struct gpu_spec *out);
int hw_runtime_lookup(const char *name, struct runtime_spec *out);
/* The fraction of its datasheet peak a GPU computes at under its power cap (1 at or above tdp_w). */
double hw_clock_factor(const struct gpu_spec *g);
/* NULL-terminated list of catalog GPU names */
const char *const *hw_gpu_names(void);

/*
 * The numeric fields of struct gpu_spec, by the names catalog.ini and an
 * experiment's [cluster] section give them, with the range a value must
 * lie in. One table, so the catalog and the experiment files agree.
 */
enum hw_field_type { HW_FIELD_INT, HW_FIELD_DOUBLE };

struct hw_field {
	const char *name;
	enum hw_field_type type;
	size_t offset;         /* in struct gpu_spec */
	double min, max;       /* allowed values, inclusive */
	const char *doc;       /* meaning and unit, one line */
	/*
	 * a constant of the simulator's model of the GPU (an efficiency, a
	 * tile, what a collective holds), not a figure of the machine (its
	 * SMs, peaks, memory, links, power): ./sim --compare --catalog-now
	 * takes these from today's catalog
	 */
	int model;
};

/* Every numeric field of struct gpu_spec in declaration order; a NULL name ends it. */
extern const struct hw_field hw_gpu_fields[];

#endif
