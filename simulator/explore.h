/*
 * explore.h - simulating every configuration of a sweep (core/sweep.h),
 * over MPI when ./sim runs under mpirun.
 *
 * Rank 0 hands out blocks of candidates as ranks ask for them (no static
 * split: a rank that finishes early takes the next block), simulates
 * blocks itself between requests, gathers every row, prints the progress
 * and is the only writer of the results file: every few seconds (at least
 * 2 s apart, and 20 times as long as the last write took) it appends the
 * rows gathered since the last write through core/sweep_table.h, so the
 * file always holds the rows done so far. On SIGINT or SIGTERM (Ctrl-C;
 * mpirun stopping the job because a rank died) it writes what it has,
 * marks the sweep interrupted and ends the job.
 *
 * Configurations that differ only in what prices a step (links, the GPU's
 * speeds) share one schedule and one engine prep (schedule_same_inputs);
 * the sweep's order makes them neighbours. A configuration that does not
 * fit its memory budget under must_fit is not timed.
 *
 * Without mpirun, ./sim runs the sweep alone, as one rank, without
 * starting MPI.
 */
#ifndef SIM_EXPLORE_H
#define SIM_EXPLORE_H

#include <stdint.h>

#include "sweep.h"

struct explore_opts {
	const char *out;      /* results file the rows go to; NULL or "" for none */
	int progress;         /* rank 0 prints progress on stderr */
	int keep_rows;        /* rank 0 keeps every row (the ranking, the advisor) */
	double flush_s;       /* shortest time between two writes; 0: 2 s */
};

#define EXPLORE_BEST 20

struct explore_result {
	struct sweep_row *rows;          /* rank 0 with keep_rows: every row, in candidate order */
	struct sweep_row best[EXPLORE_BEST]; /* rank 0: the fastest rows that fit, fastest first (ties: index) */
	int nbest;
	uint64_t nrows;                  /* rows made (rank 0) */
	uint64_t skipped[SWEEP_END];     /* candidates without a row, by reason */
	char why[SWEEP_END][256];        /* the reason of the first such candidate of each kind */
	double seconds;
	double cpu_s;                    /* CPU time of every rank together */
	int ranks;
	int write_failed;                /* a write of the results file failed (the sweep went on) */
	int interrupted;                 /* a signal stopped it: the rows are those done so far */
	char group[16];                  /* the sweep's group in the results file */
};

/*
 * Start MPI when ./sim was started by mpirun (or another launcher that
 * sets the MPI environment); else stay a single rank without MPI.
 * *rank and *size tell which.
 */
void explore_mpi_init(int *argc, char ***argv, int *rank, int *size);
/* Finish MPI if it was started; exit(rc). */
void explore_mpi_exit(int rc) __attribute__((noreturn));
/* The ranks of the job (1 without MPI), and whether this one is rank 0 (it prints and writes). */
int explore_mpi_ranks(void);
int explore_is_root(void);

/*
 * Plan sweep sw (sweep_plan) on every rank. With progress, rank 0 says on
 * stderr how far the counting is when it takes long (the policy walk in
 * many combinations of the axes: a line once it has taken a second, then
 * every 10 s, or 0.5 s on a terminal, as the run's), and, for a sweep of more than
 * EXPLORE_SAY_CANDIDATES candidates, how many there are before it runs,
 * with how to stop it or make it smaller. 0, or -1 after a message.
 */
#define EXPLORE_SAY_CANDIDATES 1000000
int explore_plan(struct sweep *sw, int progress);

/*
 * Run sweep sw (planned) on every rank; every rank calls it. Rank 0
 * returns the rows and counts in *res (release with explore_result_release);
 * the others return with res empty. 0; 1 when the results file could not
 * be written (the sweep still ran); 130 when interrupted (after the rows
 * so far are written).
 */
int explore_run(const struct sweep *sw, const struct explore_opts *o, struct explore_result *res);
void explore_result_release(struct explore_result *res);

#endif
