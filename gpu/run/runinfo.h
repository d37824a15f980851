/*
 * runinfo.h - what a gpu_run run was on, as key = value pairs: the
 * backend, the device and library versions, the NCCL configuration, the
 * fabric (real, or emulated with its parameters), memory the backend holds
 * outside the allocator. gpu_run prints them and adds them to the run's
 * group in the results file as string attributes, one per key (names like
 * `fabric`, `fabric.shard.link_gbps`, `device.name`, `nccl.max_ctas`:
 * none starts with a config section's name, asserted by runinfo_put, so
 * they never meet the `section.key` attributes results_append writes and
 * results_read rebuilds the configuration from; it keeps the fabric.*
 * ones, which ./sim --compare checks, core/fabric.h). The keys each
 * backend gives are listed in gpu/run/README.md.
 */
#ifndef GPU_RUN_RUNINFO_H
#define GPU_RUN_RUNINFO_H

#include <stdio.h>

struct runinfo {
	int n, cap;
	char (*key)[64];
	char (*value)[192];
};

void runinfo_init(struct runinfo *ri);
void runinfo_release(struct runinfo *ri);
/* Add key = value (ctx is a struct runinfo *: the callback backends and comm_describe call). */
void runinfo_put(void *ctx, const char *key, const char *value);
/* One line per pair: "run: key = value". */
void runinfo_print(const struct runinfo *ri, FILE *f);
/*
 * Append run r to the results file at path (results_write_run: the next
 * /runs/NNNNNN) with the pairs as string attributes of its group, in one
 * h5file_append session: under the file's lock, so no other writer's run
 * comes between the two, and the file is never written in place. 0, or -1
 * after a message.
 */
struct run_result;
int runinfo_append_run(const char *path, const struct run_result *r, const struct runinfo *ri);
/*
 * This executable's identity, 16 hex digits: a 64-bit FNV-1a hash of its
 * file (/proc/self/exe), "" when it cannot be read. Two builds of the same
 * source may run the CPU backend's kernels at different speeds (the
 * code's layout, most likely: 1.14 to 1.23 times apart in two builds of 2026-11-28
 * that differed in calibrate.c alone), so a run and the calibration that
 * prices it each record the build that made them (the run's `binary`, the
 * session's), and ./sim --compare says when they differ.
 */
void runinfo_binary(char *buf, size_t len);

#endif
