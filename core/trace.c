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
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define TRACE_PID 1
#define GIB (1024.0 * 1024.0 * 1024.0)

/* s as a JSON string literal, quotes included. */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"':  fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		default:
			if (*p < 0x20 || *p == 0x7f)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('"', f);
}

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

int trace_write(const char *path, const struct run_result *r)
{
	char tmp[4096];
	FILE *f;
	int err;

	if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp) {
		fprintf(stderr, "trace: %s: path too long\n", path);
		return -1;
	}
	f = fopen(tmp, "w");
	if (!f) {
		fprintf(stderr, "trace: %s: cannot create %s: %s\n", path, tmp, strerror(errno));
		return -1;
	}
	fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", f);
	write_metadata(f, r);
	write_ops(f, r);
	write_memory(f, r);
	fputs("\n]}\n", f);
	err = ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0;
	if (fclose(f) != 0 || err) {
		fprintf(stderr, "trace: %s: write to %s failed: %s\n", path, tmp, strerror(errno));
		unlink(tmp);
		return -1;
	}
	if (rename(tmp, path) < 0) {
		fprintf(stderr, "trace: %s: rename from %s failed: %s\n", path, tmp, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}
