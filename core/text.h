/*
 * text.h - user text quoted back in messages.
 *
 * What a file, a flag or an HDF5 attribute gave may hold control
 * characters: `--model $'ti\x1bny'` would send an escape sequence to the
 * terminal through the error message that quotes it, and a newline would
 * forge a second line. Every message that quotes user text goes through
 * text_escape (a value into a buffer) or text_line (a whole message line),
 * the one escaping of the binaries' messages; JSON output has its own
 * (json.h).
 */
#ifndef CORE_TEXT_H
#define CORE_TEXT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/* Whether s[0..n) is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF). */
int text_utf8_valid(const char *s, size_t n);
/* The length of the well-formed UTF-8 sequence at s (n bytes left; 1 for ASCII), 0 when none starts there. */
size_t text_utf8_seq(const char *s, size_t n);

/* What a file that is not a regular one is, by its st_mode, for messages: "a directory", "a FIFO", ... */
const char *text_file_kind(mode_t mode);

/*
 * s as a message quotes it, into buf (n >= 1 bytes; cut at a whole
 * escape when it does not fit): a tab, line feed and carriage return as
 * \t, \n, \r; every other C0 control character, DEL, a C1 control
 * character (U+0080 to U+009F) and a byte that is not part of valid UTF-8
 * as \xNN, byte by byte; everything else as it is. Returns buf.
 */
char *text_escape(const char *s, char *buf, size_t n);

/*
 * fmt formatted, escaped as text_escape does, then a newline, to f: one
 * line of a message that quotes user text (a message is one line: a '\n'
 * in it is escaped too). text_vline puts "<prefix>: " before it (the
 * place, "x.ini:3" or "--layers", escaped too) unless prefix is NULL.
 */
void text_line(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void text_vline(FILE *f, const char *prefix, const char *fmt, va_list ap);

#endif
