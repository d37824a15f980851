/*
 * outfile.c - output paths: symbolic links followed, the rules of
 * outfile.h checked before a run, stale temporaries removed.
 */
#include "outfile.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "text.h"
#include "xalloc.h"

#define LINKS_MAX 40 /* links followed before ELOOP, as the kernel does */

int outfile_resolve(const char *path, char *target, size_t n)
{
	char cur[PATH_MAX], link[PATH_MAX];

	if ((size_t)snprintf(cur, sizeof cur, "%s", path) >= sizeof cur) {
		errno = ENAMETOOLONG;
		return -1;
	}
	for (int hops = 0;; hops++) {
		struct stat st;
		ssize_t len;

		if (lstat(cur, &st) < 0) {
			if (errno == ENOENT || errno == ENOTDIR)
				break; /* nothing there: the target; its directory is checked by the caller */
			return -1;
		}
		if (!S_ISLNK(st.st_mode))
			break;
		if (hops == LINKS_MAX) {
			errno = ELOOP;
			return -1;
		}
		len = readlink(cur, link, sizeof link - 1);
		if (len < 0)
			return -1;
		link[len] = '\0';
		if (link[0] == '/') {
			memcpy(cur, link, (size_t)len + 1);
		} else {
			/* relative to the link's directory */
			char *slash = strrchr(cur, '/');
			size_t dirlen = slash ? (size_t)(slash - cur) + 1 : 0;
			if (dirlen + (size_t)len >= sizeof cur) {
				errno = ENAMETOOLONG;
				return -1;
			}
			memmove(cur + dirlen, link, (size_t)len + 1);
		}
	}
	if ((size_t)snprintf(target, n, "%s", cur) >= n) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

/* The directory of path ("." when it has none) into dir[n]. */
static void dir_of(const char *path, char *dir, size_t n)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		snprintf(dir, n, ".");
	else if (slash == path)
		snprintf(dir, n, "/");
	else
		snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

/* One checked output: its target and, when the directory exists, a canonical name for comparisons. */
struct checked {
	char target[PATH_MAX];
	char canon[2 * PATH_MAX + 2];
	int exists;
	struct stat st;
};

static int say(const struct outfile *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int say(const struct outfile *o, const char *fmt, ...)
{
	char *where = xmalloc(strlen(o->what) + strlen(o->path) + 2);
	va_list ap;

	sprintf(where, "%s %s", o->what, o->path);
	va_start(ap, fmt);
	text_vline(stderr, where, fmt, ap);
	va_end(ap);
	free(where);
	return -1;
}

/* Check one output; fill c. 0, or -1 after a message. */
static int check_one(const struct outfile *o, const char *const *inputs, struct checked *c)
{
	char dir[PATH_MAX], real[PATH_MAX];
	const char *base, *why;
	struct stat st;

	if (outfile_resolve(o->path, c->target, sizeof c->target) < 0)
		return say(o, "cannot follow the link: %s", strerror(errno));
	dir_of(c->target, dir, sizeof dir);
	if (stat(dir, &st) < 0)
		return say(o, "directory %s %s", dir, errno == ENOENT ? "does not exist" : strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return say(o, "%s is not a directory", dir);
	if (access(dir, W_OK | X_OK) < 0)
		return say(o, "directory %s is not writable: %s", dir, strerror(errno));
	base = strrchr(c->target, '/') ? strrchr(c->target, '/') + 1 : c->target;
	if (!*base)
		return say(o, "names a directory, not a file");
	if (!realpath(dir, real))
		return say(o, "directory %s: %s", dir, strerror(errno));
	snprintf(c->canon, sizeof c->canon, "%s/%s", real, base);

	c->exists = stat(c->target, &c->st) == 0;
	if (!c->exists) {
		if (errno != ENOENT)
			return say(o, "%s", strerror(errno));
		return 0;
	}
	if (S_ISDIR(c->st.st_mode))
		return say(o, "is a directory, not a file");
	if (!S_ISREG(c->st.st_mode))
		return say(o, "exists and is not a regular file: not writing to it");
	for (int i = 0; inputs && inputs[i]; i++) {
		struct stat in;
		if (inputs[i][0] && stat(inputs[i], &in) == 0 && in.st_dev == c->st.st_dev &&
		    in.st_ino == c->st.st_ino)
			return say(o, "is the input %s: not overwriting it", inputs[i]);
	}
	why = o->refusal ? o->refusal(c->target) : NULL;
	if (why)
		return say(o, "%s: not overwriting it", why);
	if (access(c->target, W_OK) < 0)
		return say(o, "is not writable: %s", strerror(errno));
	return 0;
}

int outfile_check(const struct outfile *outs, int n, const char *const *inputs)
{
	struct checked *c = xcalloc((size_t)(n > 0 ? n : 1), sizeof *c);
	int *ok = xcalloc((size_t)(n > 0 ? n : 1), sizeof *ok);
	int errors = 0;

	for (int i = 0; i < n; i++) {
		if (!outs[i].path || !outs[i].path[0])
			continue;
		ok[i] = check_one(&outs[i], inputs, &c[i]) == 0;
		errors += !ok[i];
	}
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++) {
			int same;
			if (!ok[i] || !ok[j])
				continue;
			same = strcmp(c[i].canon, c[j].canon) == 0 ||
			       (c[i].exists && c[j].exists && c[i].st.st_dev == c[j].st.st_dev &&
				c[i].st.st_ino == c[j].st.st_ino);
			if (same) {
				text_line(stderr, "%s %s and %s %s are the same file: give them different paths",
					outs[i].what, outs[i].path, outs[j].what, outs[j].path);
				errors++;
			}
		}
	free(c);
	free(ok);
	return errors ? -1 : 0;
}

/* Whether name is `<base>.tmp.<pid>`; the pid in *pid. */
static int stale_name(const char *name, const char *base, size_t blen, pid_t *pid)
{
	const char *digits = name + blen + 5;
	char *end;
	long v;

	if (strncmp(name, base, blen) != 0 || strncmp(name + blen, ".tmp.", 5) != 0)
		return 0;
	if (!isdigit((unsigned char)*digits) || strlen(digits) > 10)
		return 0;
	errno = 0;
	v = strtol(digits, &end, 10);
	if (*end || errno || v <= 0 || v > INT_MAX)
		return 0;
	*pid = (pid_t)v;
	return 1;
}

int outfile_remove_stale(const char *who, const char *target)
{
	char dir[PATH_MAX];
	const char *base = strrchr(target, '/') ? strrchr(target, '/') + 1 : target;
	size_t blen = strlen(base);
	struct dirent *d;
	DIR *dp;
	int removed = 0;

	dir_of(target, dir, sizeof dir);
	dp = opendir(dir);
	if (!dp)
		return 0;
	while ((d = readdir(dp))) {
		struct stat st;
		pid_t pid;

		if (!stale_name(d->d_name, base, blen, &pid))
			continue;
		if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
			continue; /* ours (the caller replaces it), or a live process's */
		if (fstatat(dirfd(dp), d->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (unlinkat(dirfd(dp), d->d_name, 0) == 0) {
			text_line(stderr, "%s: removed %s/%s, left by a writer (pid %ld) that died", who, dir,
				d->d_name, (long)pid);
			removed++;
		}
	}
	closedir(dp);
	return removed;
}
