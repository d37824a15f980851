/*
 * watchdog.h - abort the whole job when this rank makes no progress for
 * run.timeout_s seconds.
 *
 * A rank waits on its peers in collectives (a stream's MPI request) and in
 * the host's MPI calls between steps. A peer that is stopped (SIGSTOP),
 * dead without MPI noticing, or stuck in another collective makes such a
 * wait last for ever. The watchdog is a thread that counts progress: the
 * backend reports every command that finishes on a stream
 * (watchdog_progress), and the host every phase it enters
 * (watchdog_waiting). When the count has not moved for the timeout, it
 * prints one line on stderr,
 *
 *   gpu_run: rank 0: no progress for 5 s (run.timeout_s = 5): waiting on
 *   step 3: RS block1 m0 running on stream reduce_scatter; ...; aborting the job
 *
 * naming what the host waits on and what the backend's streams are stuck
 * in (the backend's describe callback), lets the backend prepare (its
 * before-abort callback), and aborts the job (MPI_Abort, exit status
 * WATCHDOG_EXIT); mpirun then kills every rank, a stopped one included.
 * The timeout must exceed the longest single op.
 *
 * One watchdog per process (one rank): the functions use process-wide
 * state. watchdog_progress is a relaxed atomic increment, cheap enough for
 * every command; the thread wakes ten times per timeout, and at least once
 * a second: it fires between the timeout and a tenth more (a second more
 * at most).
 */
#ifndef GPU_RUN_WATCHDOG_H
#define GPU_RUN_WATCHDOG_H

#include <stddef.h>

#define WATCHDOG_EXIT 4 /* the job's exit status when the watchdog aborts it */

/* Start the watchdog of rank `rank` with a timeout in seconds; 0 starts nothing. */
void watchdog_start(double timeout_s, int rank);

/* Stop and join the thread (a no-op when none runs). */
void watchdog_stop(void);

/* Something finished: a command of a stream. Safe from any thread. */
void watchdog_progress(void);

/*
 * The host now waits on `what` ("step 3", "the barrier before step 4"),
 * or on nothing (NULL); entering a phase is progress. The text is copied.
 */
void watchdog_waiting(const char *what);

/*
 * What the backend's streams are doing, for the message: fn writes it into
 * buf[n] ("" when idle); called from the watchdog's thread, so it must lock
 * what it reads and must not block for long. NULL unregisters; a backend
 * unregisters before it is released.
 */
void watchdog_describe_with(void (*fn)(void *ctx, char *buf, size_t n), void *ctx);

/*
 * What to do right before the job is aborted (the CUDA backend aborts its
 * NCCL communicators, so that no collective in flight holds the exit);
 * called from the watchdog's thread. NULL unregisters; a backend
 * unregisters before it is released.
 */
void watchdog_before_abort(void (*fn)(void *ctx), void *ctx);

/* MPI is being finalized: MPI_Abort is no longer allowed, the watchdog exits the process instead. */
void watchdog_finalizing(void);

#endif
