/*
 * json.h - the one JSON string writer of the binaries.
 *
 * Every JSON output (./sim --json, --advise --json, --compare --json, the
 * Chrome traces) writes its strings through json_str, so a name, label or
 * path with a quote, backslash or control character reads back as itself.
 */
#ifndef CORE_JSON_H
#define CORE_JSON_H

#include <stdio.h>

/* s as a JSON string literal, quotes included: " and \ escaped, \n \r \t by
 * name, other control characters (and DEL) as \u00XX, well-formed UTF-8 as
 * is, and each byte of anything else (a Latin-1 file name) as \ufffd, the
 * replacement character: JSON text is UTF-8 (RFC 8259), and a reader such
 * as Python's json refuses the rest. */
void json_str(FILE *f, const char *s);

#endif
