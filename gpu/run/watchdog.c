/*
 * watchdog.c - the rank's progress watchdog (see watchdog.h).
 */
#include "watchdog.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#define DESCRIBE_MAX 1024

static struct {
	pthread_mutex_t mu;     /* guards everything below but the atomics */
	pthread_cond_t cv;      /* signals stop */
	pthread_t thread;
	int running, stop;
	double timeout_s;
	int rank;
	char waiting[128];      /* what the host waits on, "" for nothing */
	void (*describe)(void *ctx, char *buf, size_t n);
	void *ctx;
	void (*before_abort)(void *ctx);
	void *abort_ctx;
	atomic_ulong progress;
	atomic_int finalizing;
} wd = { .mu = PTHREAD_MUTEX_INITIALIZER };

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* No progress for the timeout: say what this rank waits on and end the job. wd.mu is held. */
static void fire(double idle_s)
{
	char streams[DESCRIBE_MAX] = "";

	if (wd.describe)
		wd.describe(wd.ctx, streams, sizeof streams);
	fflush(stdout);
	fprintf(stderr, "gpu_run: rank %d: no progress for %.0f s (run.timeout_s = %g): waiting on %s%s%s; a peer "
			"rank is stopped, dead or stuck: aborting the job\n",
		wd.rank, idle_s, wd.timeout_s, wd.waiting[0] ? wd.waiting : "nothing the host knows of",
		streams[0] ? ": " : "", streams);
	fflush(stderr);
	if (wd.before_abort)
		wd.before_abort(wd.abort_ctx);
	if (atomic_load(&wd.finalizing))
		_exit(WATCHDOG_EXIT);
	MPI_Abort(MPI_COMM_WORLD, WATCHDOG_EXIT);
	_exit(WATCHDOG_EXIT); /* MPI_Abort does not return; should it, still end */
}

static void *watchdog_main(void *arg)
{
	double tick = fmin(1.0, wd.timeout_s / 10), last = now_s();
	unsigned long seen = atomic_load(&wd.progress);

	(void)arg;
	pthread_mutex_lock(&wd.mu);
	while (!wd.stop) {
		struct timespec until;
		double now;
		unsigned long p;

		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += (time_t)tick;
		until.tv_nsec += (long)((tick - floor(tick)) * 1e9);
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		while (!wd.stop && pthread_cond_timedwait(&wd.cv, &wd.mu, &until) != ETIMEDOUT)
			;
		if (wd.stop)
			break;
		now = now_s();
		p = atomic_load(&wd.progress);
		if (p != seen) {
			seen = p;
			last = now;
		} else if (now - last >= wd.timeout_s) {
			fire(now - last);
		}
	}
	pthread_mutex_unlock(&wd.mu);
	return NULL;
}

void watchdog_start(double timeout_s, int rank)
{
	if (timeout_s <= 0 || wd.running)
		return;
	wd.timeout_s = timeout_s;
	wd.rank = rank;
	wd.stop = 0;
	pthread_cond_init(&wd.cv, NULL);
	if (pthread_create(&wd.thread, NULL, watchdog_main, NULL) != 0) {
		fprintf(stderr, "gpu_run: rank %d: cannot start the watchdog thread\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	wd.running = 1;
}

void watchdog_stop(void)
{
	if (!wd.running)
		return;
	pthread_mutex_lock(&wd.mu);
	wd.stop = 1;
	pthread_cond_signal(&wd.cv);
	pthread_mutex_unlock(&wd.mu);
	pthread_join(wd.thread, NULL);
	pthread_cond_destroy(&wd.cv);
	wd.running = 0;
}

void watchdog_progress(void)
{
	atomic_fetch_add_explicit(&wd.progress, 1, memory_order_relaxed);
}

void watchdog_waiting(const char *what)
{
	pthread_mutex_lock(&wd.mu);
	snprintf(wd.waiting, sizeof wd.waiting, "%s", what ? what : "");
	pthread_mutex_unlock(&wd.mu);
	watchdog_progress();
}

void watchdog_describe_with(void (*fn)(void *ctx, char *buf, size_t n), void *ctx)
{
	pthread_mutex_lock(&wd.mu);
	wd.describe = fn;
	wd.ctx = ctx;
	pthread_mutex_unlock(&wd.mu);
}

void watchdog_before_abort(void (*fn)(void *ctx), void *ctx)
{
	pthread_mutex_lock(&wd.mu);
	wd.before_abort = fn;
	wd.abort_ctx = ctx;
	pthread_mutex_unlock(&wd.mu);
}

void watchdog_finalizing(void)
{
	atomic_store(&wd.finalizing, 1);
}
