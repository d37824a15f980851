/*
 * outfile.h - the files the binaries write (results files, traces): where
 * a path really leads, whether writing there is allowed, and temporaries
 * left by writers that died.
 *
 * The rules, which outfile_check() applies to every output of a run
 * before its first step and the writers (h5file.c, trace.c) apply again
 * when they write:
 *
 *  - a symbolic link is followed: the file written is the link's final
 *    target (a temporary beside it, renamed over it), and the link stays;
 *  - the target's directory must exist and be writable;
 *  - an existing target must be a regular file that this kind of output
 *    may replace or append to (an HDF5 results file; a calibration file;
 *    a trace this testbed wrote), and writable; anything else is left
 *    alone;
 *  - a target is never one of the run's inputs (the same device and
 *    inode as the experiment file), and two outputs of one run are never
 *    the same file.
 *
 * A writer's temporary is `<target>.tmp.<pid>`. One whose process no
 * longer exists was left by a writer that was killed; outfile_remove_stale()
 * deletes those of one target.
 */
#ifndef CORE_OUTFILE_H
#define CORE_OUTFILE_H

#include <stddef.h>

/*
 * Why the existing regular file at path may not be written by this kind
 * of output ("is not an HDF5 file"), or NULL when it may.
 */
typedef const char *(*outfile_refusal_fn)(const char *path);

struct outfile {
	const char *what;          /* how the user named it, for messages: "run.out", "--trace" */
	const char *path;          /* as given; NULL or "" for no output */
	outfile_refusal_fn refusal;
};

/*
 * Follow path's symbolic links (of its last component; the kernel follows
 * those of the directories) to the file they lead to, into target[n]. A
 * missing file is its own target. 0, or -1 with errno set (ELOOP,
 * ENAMETOOLONG, or lstat's and readlink's).
 */
int outfile_resolve(const char *path, char *target, size_t n);

/*
 * Check the n outputs of a run against the rules above and against the
 * inputs (NULL-terminated paths; "" entries are skipped). Creates and
 * changes nothing. 0, or -1 after one message per broken rule on stderr,
 * `<what> <path>: <why>`: the caller exits 2.
 */
int outfile_check(const struct outfile *outs, int n, const char *const *inputs);

/*
 * Remove `<target>.tmp.<pid>` files whose process is gone (a writer killed
 * mid-write), saying so on stderr as `who: removed ...`. For a writer that
 * holds the directory lock (h5file.c) or owns its target (trace.c).
 * Returns the number removed.
 */
int outfile_remove_stale(const char *who, const char *target);

#endif
