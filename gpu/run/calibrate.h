/*
 * calibrate.h - `gpu_run --calibrate`: microbenchmarks of what a step is
 * made of, on the backend and machine gpu_run runs on, written as a
 * calibration session (core/calibration.h) for ./sim --calibration.
 *
 * All ranks run every microbenchmark at once, as they run a step; each
 * times itself with its backend's events and the times are averaged over
 * the ranks. Measured: the per-op overheads of the runtime (an empty op on
 * a stream; the wake of an op waiting for another stream's), every kernel
 * of the experiment's model lists on its own and beside a running
 * collective, a grid of GEMMs around the model's shapes (and across the
 * GPU's tile boundaries), memory-bound passes over sizes, host-device
 * copies each way over sizes, the optimizer per
 * element, and each collective the schedule uses, on its group and stream,
 * from 1 KiB to the largest unit (and the schedule's own sizes), on its own
 * and beside a running kernel. Nothing here runs a training step.
 */
#ifndef GPU_RUN_CALIBRATE_H
#define GPU_RUN_CALIBRATE_H

#include "backend.h"
#include "comm.h"
#include "schedule.h"

/*
 * Measure and (rank 0) append the session to path, which the caller has
 * checked before (core/outfile.h, calibration_refusal()): a file that is
 * not a calibration file is then left as it was, after the measurements.
 * quick: a few points of each table, for tests. series: the series this
 * session repeats (NULL: none). Collective over MPI_COMM_WORLD. 0, or -1
 * after a message (rank 0).
 */
int calibrate(const struct schedule *s, struct comm *c, struct backend *b, const char *path, const char *series,
	      int quick);

/*
 * The default calibration file of backend b's machine into buf[len]:
 * data/calibration/<hardware>-<backend>.h5, the name --hardware prints;
 * its folder is made when missing.
 */
void calibrate_default_path(struct backend *b, char *buf, size_t len);

#endif
