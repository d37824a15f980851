/*
 * text.c - user text quoted back in messages (text.h).
 */
#include "text.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "xalloc.h"

/* The length of the well-formed UTF-8 sequence at s (n bytes left), or 0 when none starts there. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0], need, cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		need = 1, cp = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef)
		need = 2, cp = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4)
		need = 3, cp = c & 0x07;
	else
		return 0;
	if (n <= need)
		return 0;
	for (unsigned j = 1; j <= need; j++) {
		if ((s[j] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[j] & 0x3f);
	}
	if ((need == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (need == 3 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return need + 1;
}

size_t text_utf8_seq(const char *s, size_t n)
{
	return n ? utf8_seq((const unsigned char *)s, n) : 0;
}

const char *text_file_kind(mode_t mode)
{
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	if (S_ISSOCK(mode))
		return "a socket";
	return "not a regular file";
}

int text_utf8_valid(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;

	for (size_t i = 0, k; i < n; i += k)
		if (!(k = utf8_seq(u + i, n - i)))
			return 0;
	return 1;
}

/* The escaped text of s[i..] (n bytes in all) into out: the bytes of s it stands for. */
static size_t piece(const unsigned char *s, size_t n, size_t i, char out[8])
{
	unsigned c = s[i];
	size_t k = utf8_seq(s + i, n - i);

	if (c == '\t' || c == '\n' || c == '\r') {
		snprintf(out, 8, "\\%c", c == '\t' ? 't' : c == '\n' ? 'n' : 'r');
		return 1;
	}
	if (c < 0x20 || c == 0x7f || k == 0 || (k == 2 && c == 0xc2 && s[i + 1] < 0xa0)) {
		snprintf(out, 8, "\\x%02x", c);
		return 1;
	}
	memcpy(out, s + i, k);
	out[k] = '\0';
	return k;
}

char *text_escape(const char *s, char *buf, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t len = strlen(s), used = 0;
	char p[8];

	buf[0] = '\0';
	for (size_t i = 0, k; i < len; i += k) {
		k = piece(u, len, i, p);
		size_t pl = strlen(p);
		if (used + pl >= n)
			break;
		memcpy(buf + used, p, pl + 1);
		used += pl;
	}
	return buf;
}

/* s[0..n) escaped to f */
static void put_escaped(FILE *f, const char *s, size_t n)
{
	char p[8];

	for (size_t i = 0, k; i < n; i += k) {
		k = piece((const unsigned char *)s, n, i, p);
		fputs(p, f);
	}
}

void text_vline(FILE *f, const char *prefix, const char *fmt, va_list ap)
{
	va_list again;
	char *msg;
	int len;

	va_copy(again, ap);
	len = vsnprintf(NULL, 0, fmt, again);
	va_end(again);
	if (len < 0)
		len = 0;
	msg = xmalloc((size_t)len + 1);
	msg[0] = '\0';
	vsnprintf(msg, (size_t)len + 1, fmt, ap);
	if (prefix) {
		put_escaped(f, prefix, strlen(prefix));
		fputs(": ", f);
	}
	put_escaped(f, msg, (size_t)len);
	fputc('\n', f);
	free(msg);
}

void text_line(FILE *f, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	text_vline(f, NULL, fmt, ap);
	va_end(ap);
}
