/*
 * cost.h - what one kernel, collective or copy costs on the hardware.
 *
 * Pure functions of the hardware spec and the conditions at the moment
 * (SMs free, HBM bandwidth left): the engine calls them again whenever the
 * conditions change. Times are nanoseconds as doubles here; the engine
 * rounds them to its integer clock.
 *
 * Kernels: a GEMM is cut into output tiles that run in waves over the free
 * SMs, so its time steps up when the tile count crosses a multiple of the
 * SMs (wave quantization) and it pays for the part of an edge tile that
 * overhangs the matrix (tile quantization); the tile is the one of the
 * library's shapes that finishes first. Attention runs at its backend's
 * efficiency, forward and backward apart, rising with the sequence
 * length. Memory-bound kernels take bytes / the bandwidth a streaming
 * kernel achieves; no kernel takes less than kernel_min_us. Compute peaks
 * scale with the clock a power cap sustains. Collectives follow the
 * nccl-tests bus-bandwidth convention with a per-step ring latency; a
 * ring spanning nodes crosses them at the node's NIC bandwidth, a ring of
 * one rank per node (a rail) at its NIC's share; a cross-node all-reduce
 * takes the tree when latency plus bytes make it faster, as NCCL's tuner
 * does.
 */
#ifndef SIM_COST_H
#define SIM_COST_H

#include <stdint.h>
#include "calibration.h"
#include "schedule.h"

/* Links a transfer can use; each is a rate shared by the transfers on it. */
enum link { LINK_INTRA, LINK_INTER, LINK_PCIE_H2D, LINK_PCIE_D2H, LINK_COUNT };

struct cost {
	const struct schedule *s;
	const struct gpu_spec *gpu;
	double peak_flops_per_ns;   /* dense, in the compute dtype, at the clock the power cap sustains */
	int attention;              /* enum attention_kernel of the runtime */
	double hbm_bytes_per_ns;
	double link_bytes_per_ns[LINK_COUNT];
	/*
	 * the runtime's rates of its memory-bound kernels by access pattern
	 * (runtime_spec.norm_eff ...): its own when the step launches the
	 * runtime's kernels, none (streams) when another's run under its
	 * schedule (gpu_run's, experiment.launch_kernels)
	 */
	const struct runtime_spec *rates;
	/* cache of op times by (ktab, SMs, HBM share) */
	struct cost_memo { int32_t ktab, sms; uint32_t hbm_key; double ns; } *memo;
	int memo_cap;               /* a power of two */
	/* with a calibration (cluster.calibration): measured prices instead of the catalog's */
	const struct calibration *cal;
	/*
	 * with a calibration, the rate (bytes/ns, alone) its memory-bound
	 * kernels of each access pattern reached: those of the schedule's
	 * kernels it measured under their names, at any size; 0 where none
	 */
	double cal_access_rate[MA_COUNT];
	double *cal_op_ns[CAL_BESIDE_COUNT]; /* per op: its work alone and beside collectives (cal_beside); < 0 until asked */
};

/*
 * Prices for schedule s. With cluster.calibration set, the calibration
 * measured with the schedule's world size is read once per process (the
 * last one read is kept). 0, or -1 with a message in err (a calibration
 * that cannot be read, or none measured with this many ranks).
 */
int cost_init(struct cost *c, const struct schedule *s, char *err, int errlen);
void cost_release(struct cost *c);

/* One kernel on `sms` SMs with `hbm` bytes/ns of HBM bandwidth. */
double cost_kernel_ns(const struct cost *c, const struct kernel *k, int sms, double hbm);
/* The bandwidth (bytes/ns) of a memory-bound kernel moving its bytes by `access` on `sms` SMs, a stream's being hbm. */
double cost_access_bw(const struct cost *c, enum mem_access access, int sms, double hbm);
/* An op without a kernel list, priced by its bytes (the optimizer's multi-tensor kernels at their own rate). */
double cost_op_memory_ns(const struct cost *c, const struct op *o, int sms, double hbm);
/* Computes the time of kernel list ktab into memo slot m, keyed by hk; see cost_ktab_ns. */
double cost_ktab_fill(struct cost *c, struct cost_memo *m, int ktab, int sms, double hbm, uint32_t hk);

/*
 * A compute op's kernel list under the same conditions, memoized by
 * (ktab, SMs, HBM share in steps of 1/16 byte/ns): a repeated shape is a
 * lookup, inline in the engine's rate updates.
 */
static inline double cost_ktab_ns(struct cost *c, int ktab, int sms, double hbm)
{
	uint32_t hk = (uint32_t)(hbm * 16.0);
	uint32_t h = ((uint32_t)ktab * 2654435761u) ^ ((uint32_t)sms * 40503u) ^ (hk * 2246822519u);
	struct cost_memo *m = &c->memo[h & (uint32_t)(c->memo_cap - 1)];

	if (m->ktab == ktab && m->sms == sms && m->hbm_key == hk)
		return m->ns;
	return cost_ktab_fill(c, m, ktab, sms, hbm, hk);
}
/* Bandwidth a memory-bound kernel gets on `sms` SMs: it needs a fraction of them to saturate HBM (hbm: achieved bytes/ns). */
static inline double cost_membw(const struct cost *c, int sms, double hbm)
{
	double need = c->gpu->elementwise_sms_frac * c->gpu->sms;
	return need > sms ? hbm * sms / need : hbm;
}

/* A kernel's time t, at least the shortest time any kernel takes on the GPU (kernel_min_us). */
static inline double cost_floor_ns(const struct cost *c, double t)
{
	double floor = 1e3 * c->gpu->kernel_min_us;
	return t > floor ? t : floor;
}

/* A memory-bound op of `bytes` HBM traffic. */
static inline double cost_memory_ns(const struct cost *c, uint64_t bytes, int sms, double hbm)
{
	return cost_floor_ns(c, (double)bytes / cost_membw(c, sms, hbm));
}

/* A collective op's shape: ranks, the links it crosses, its bytes and latency. */
struct coll {
	int n;              /* ranks in the group */
	unsigned links;     /* bit set of enum link */
	uint64_t wire;      /* bytes one rank sends */
	double latency_ns;  /* the fixed part */
	double cap;         /* the most bytes/ns it can move whatever its links' shares (a rail's NIC), or 0 */
	int tree;           /* 1: tree algorithm chosen */
};

/*
 * The GEMM tile the library would choose for an (m x n) output with
 * reduction k on `sms` SMs, and the time it takes (ns): see cost.c.
 */
struct gemm_choice {
	int tile_m, tile_n;
	int64_t tiles, waves;
	double ns;
};
void cost_gemm(const struct cost *c, const struct kernel *k, int sms, struct gemm_choice *out);
void cost_collective(const struct cost *c, const struct op *o, struct coll *out);

/* Host optimizer time for `params` elements. */
double cost_host_optim_ns(const struct cost *c, uint64_t params);

/*
 * A kernel as the calibration prices it (calibration_kernel_ns); a GEMM
 * or attention kernel smaller than every one measured of its kind, the
 * smallest one's time scaled by the model's ratio of the two; a
 * memory-bound one it did not measure at its name and size, whose pattern
 * it measured in other kernels, at those kernels' rate.
 */
double cost_cal_kernel_ns(const struct cost *c, const struct kernel *k, int beside);
/*
 * Calibrated prices (c->cal set), in ns, of op `op` on its own: its
 * kernels (beside, enum cal_beside: what runs beside it), or its
 * memory-bound work, or the optimizer's per-element work, plus the
 * zero-fill of the buffers it accumulates into; and of a collective
 * (busy: with a kernel running beside it).
 */
double cost_cal_op_ns(struct cost *c, int op, int beside);
double cost_cal_collective_ns(const struct cost *c, const struct op *o, int busy);

#endif
