/*
 * json.c - the JSON string writer (json.h).
 */
#include "json.h"

#include <string.h>

#include "text.h"

void json_str(FILE *f, const char *s)
{
	const unsigned char *end = (const unsigned char *)s + strlen(s);

	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"':  fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		default:
			if (*p < 0x20 || *p == 0x7f) {
				fprintf(f, "\\u%04x", *p);
			} else if (*p < 0x80) {
				fputc(*p, f);
			} else {
				size_t n = text_utf8_seq((const char *)p, (size_t)(end - p));
				if (n) {
					fwrite(p, 1, n, f);
					p += n - 1;
				} else {
					fputs("\\ufffd", f); /* not UTF-8 (a path's Latin-1 byte): JSON must be */
				}
			}
		}
	}
	fputc('"', f);
}
