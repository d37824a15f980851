/*
 * trace.h - a run as a Chrome trace (JSON), for Perfetto or chrome://tracing.
 *
 * One process; one track (thread) per stream, named by stream_name(); one
 * complete event per op, named by op_label(), with its kind, unit, segment,
 * microbatch, bytes and FLOPs as arguments; two counter series from the
 * memory timeline: "memory" (GiB allocated by category, stacked) and
 * "memory reserved" (GiB the allocator holds). Times are microseconds,
 * printed exactly from the nanosecond integers.
 */
#ifndef CORE_TRACE_H
#define CORE_TRACE_H

#include "results.h"

/*
 * Write r as a trace file at path. The file is written beside path under a
 * temporary name and renamed when complete, so path is never half-written.
 * A symbolic link is followed (its target is replaced); an existing file
 * is replaced only when it is a trace this testbed wrote (core/outfile.h).
 * 0, or -1 after a message on stderr (the old file, if any, stays).
 */
int trace_write(const char *path, const struct run_result *r);

/*
 * Why the existing regular file at path is not a trace trace_write() may
 * replace (it does not begin as every trace it writes does), or NULL: an
 * outfile_refusal_fn (core/outfile.h), for the checks before a run.
 */
const char *trace_refusal(const char *path);

#endif
