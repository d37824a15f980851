/*
 * trace.c - write a run in the Chrome trace event format (see trace.h).
 *
 * Layout of the file:
 *   {"displayTimeUnit":"ns","traceEvents":[
 *     metadata: process_name, then thread_name and thread_sort_index per stream,
 *     one "X" event per op in issue order,
 *     "C" events "memory" and "memory reserved" per memory sample
 *   ]}
 * Track ids are stream + 1 (tid 0 is special to some viewers). Output is a
 * pure function of the run: the same run gives the same bytes.
 */
#include "trace.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "outfile.h"
#include "text.h"

#define TRACE_PID 1
#define TRACE_HEAD "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n" /* how every trace begins */
#define GIB (1024.0 * 1024.0 * 1024.0)

/* ns as microseconds, exactly: "1234.567". */
static void json_us(FILE *f, uint64_t ns)
{
	fprintf(f, "%" PRIu64 ".%03" PRIu64, ns / 1000, ns % 1000);
}

static void write_metadata(FILE *f, const struct run_result *r)
{
	char name[600];

	snprintf(name, sizeof name, "%s%s%s", r->source ? r->source : "run",
		 r->exp && r->exp->path[0] ? " " : "", r->exp ? r->exp->path : "");
	fprintf(f, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":", TRACE_PID);
	json_str(f, name);
	fputs("}}", f);
	for (int st = 0; st < ST_COUNT; st++) {
		fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":",
			TRACE_PID, st + 1);
		json_str(f, stream_name((enum stream_id)st));
		fprintf(f, "}},\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_sort_index\","
			"\"args\":{\"sort_index\":%d}}", TRACE_PID, st + 1, st);
	}
}

static void write_ops(FILE *f, const struct run_result *r)
{
	const struct schedule *s = r->sched;
	char label[64];

	for (int i = 0; i < s->nops; i++) {
		const struct op *o = &s->ops[i];
		const struct op_timing *t = &r->ops[i];
		const char *kind = op_kind_name((enum op_kind)o->kind);

		assert(t->end_ns >= t->start_ns);
		fprintf(f, ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":", TRACE_PID, o->stream + 1);
		json_us(f, t->start_ns);
		fputs(",\"dur\":", f);
		json_us(f, t->end_ns - t->start_ns);
		fputs(",\"name\":", f);
		json_str(f, op_label(s, i, label, sizeof label));
		fputs(",\"cat\":", f);
		json_str(f, kind);
		fputs(",\"args\":{\"op\":", f);
		fprintf(f, "%d,\"kind\":", i);
		json_str(f, kind);
		fprintf(f, ",\"unit\":%d,\"seg\":%d,\"micro\":%d,\"bytes\":%" PRIu64 ",\"flops\":%" PRIu64 "}}",
			(int)o->unit, (int)o->seg, (int)o->micro, o->bytes, o->flops);
	}
}

static void write_memory(FILE *f, const struct run_result *r)
{
	for (int i = 0; i < r->nmem; i++) {
		const struct mem_sample *m = &r->mem[i];

		fprintf(f, ",\n{\"ph\":\"C\",\"pid\":%d,\"name\":\"memory\",\"ts\":", TRACE_PID);
		json_us(f, m->t_ns);
		fputs(",\"args\":{", f);
		for (int c = 0; c < MEM_CAT_COUNT; c++) {
			if (c)
				fputc(',', f);
			json_str(f, mem_cat_name((enum mem_cat)c));
			fprintf(f, ":%.6f", (double)m->alloc[c] / GIB);
		}
		fprintf(f, "}},\n{\"ph\":\"C\",\"pid\":%d,\"name\":\"memory reserved\",\"ts\":", TRACE_PID);
		json_us(f, m->t_ns);
		fprintf(f, ",\"args\":{\"reserved\":%.6f}}", (double)m->reserved / GIB);
	}
}

const char *trace_refusal(const char *path)
{
	char head[sizeof TRACE_HEAD];
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return "cannot be read";
	n = read(fd, head, sizeof TRACE_HEAD - 1);
	close(fd);
	if (n != (ssize_t)sizeof TRACE_HEAD - 1 || memcmp(head, TRACE_HEAD, sizeof TRACE_HEAD - 1) != 0)
		return "exists and is not a Chrome trace this testbed wrote";
	return NULL;
}

int trace_write(const char *path, const struct run_result *r)
{
	char target[PATH_MAX], tmp[PATH_MAX + 32];
	const char *why = NULL;
	struct stat st;
	FILE *f;
	int fd, err, exists;

	/* a symbolic link is followed: its target is replaced, the link stays (outfile.h) */
	if (outfile_resolve(path, target, sizeof target) < 0) {
		text_line(stderr, "trace: %s: cannot follow the link: %s", path, strerror(errno));
		return -1;
	}
	if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", target, (long)getpid()) >= sizeof tmp) {
		text_line(stderr, "trace: %s: path too long", path);
		return -1;
	}
	exists = stat(target, &st) == 0;
	if (exists)
		why = !S_ISREG(st.st_mode) ? "exists and is not a regular file" : trace_refusal(target);
	if (why) {
		text_line(stderr, "trace: %s: %s; not overwriting it", path, why);
		return -1;
	}
	outfile_remove_stale("trace", target);
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (fd >= 0 && exists)
		fchmod(fd, st.st_mode & 07777);
	f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		text_line(stderr, "trace: %s: cannot create %s: %s", path, tmp, strerror(errno));
		if (fd >= 0) {
			close(fd);
			unlink(tmp);
		}
		return -1;
	}
	fputs(TRACE_HEAD, f);
	write_metadata(f, r);
	write_ops(f, r);
	write_memory(f, r);
	fputs("\n]}\n", f);
	err = ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0;
	if (fclose(f) != 0 || err) {
		text_line(stderr, "trace: %s: write to %s failed: %s", path, tmp, strerror(errno));
		unlink(tmp);
		return -1;
	}
	if (rename(tmp, target) < 0) {
		text_line(stderr, "trace: %s: rename from %s failed: %s", path, tmp, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}
