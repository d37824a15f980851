/*
 * test_text.c - user text quoted back in messages (core/text.h): control
 * characters, C1 controls and bytes that are not UTF-8 come out escaped,
 * valid UTF-8 as it is; a buffer too small is cut at a whole escape; a
 * message line escapes its place and its text, and ends in one newline.
 */
#include <CUnit/CUnit.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

static void test_escape(void)
{
	char buf[128];

	CU_ASSERT_STRING_EQUAL(text_escape("tiny", buf, sizeof buf), "tiny");
	CU_ASSERT_STRING_EQUAL(text_escape("ti\x1bny", buf, sizeof buf), "ti\\x1bny");
	CU_ASSERT_STRING_EQUAL(text_escape("a\tb\nc\rd", buf, sizeof buf), "a\\tb\\nc\\rd");
	CU_ASSERT_STRING_EQUAL(text_escape("\x01\x7f", buf, sizeof buf), "\\x01\\x7f");
	/* UTF-8 text as it is: é, €, an emoji */
	CU_ASSERT_STRING_EQUAL(text_escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", buf, sizeof buf),
			       "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
	/* U+009B, the C1 CSI a terminal may take for ESC [; a lone byte 0x9b; a cut sequence; an overlong '/' */
	CU_ASSERT_STRING_EQUAL(text_escape("a\xc2\x9b" "b", buf, sizeof buf), "a\\xc2\\x9bb");
	CU_ASSERT_STRING_EQUAL(text_escape("a\x9b" "b", buf, sizeof buf), "a\\x9bb");
	CU_ASSERT_STRING_EQUAL(text_escape("a\xe2\x82", buf, sizeof buf), "a\\xe2\\x82");
	CU_ASSERT_STRING_EQUAL(text_escape("\xc0\xaf", buf, sizeof buf), "\\xc0\\xaf");
	/* the C1 range ends at U+009F: U+009F escaped, U+00A0 (a no-break space) as it is */
	CU_ASSERT_STRING_EQUAL(text_escape("a\xc2\x9f" "b", buf, sizeof buf), "a\\xc2\\x9fb");
	CU_ASSERT_STRING_EQUAL(text_escape("a\xc2\xa0" "b", buf, sizeof buf), "a\xc2\xa0" "b");
	/* cut at a whole escape, never inside one */
	CU_ASSERT_STRING_EQUAL(text_escape("ab\x1b" "cd", buf, 6), "ab");
	CU_ASSERT_STRING_EQUAL(text_escape("ab\x1b" "cd", buf, 7), "ab\\x1b");
	CU_ASSERT_STRING_EQUAL(text_escape("x", buf, 1), "");
}

static void test_utf8(void)
{
	CU_ASSERT_TRUE(text_utf8_valid("caf\xc3\xa9", 5));
	CU_ASSERT_FALSE(text_utf8_valid("caf\xc3", 4));
	CU_ASSERT_FALSE(text_utf8_valid("\xed\xa0\x80", 3)); /* a surrogate */
	CU_ASSERT_FALSE(text_utf8_valid("\xf4\x90\x80\x80", 4)); /* past U+10FFFF */
	/* three bytes from U+0800: U+07FF in three is overlong, U+0800 is not */
	CU_ASSERT_FALSE(text_utf8_valid("\xe0\x9f\xbf", 3));
	CU_ASSERT_TRUE(text_utf8_valid("\xe0\xa0\x80", 3));
	CU_ASSERT_TRUE(text_utf8_valid("\xf4\x8f\xbf\xbf", 4)); /* U+10FFFF itself */
}

static void vline(FILE *f, const char *prefix, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	text_vline(f, prefix, fmt, ap);
	va_end(ap);
}

static void test_line(void)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	text_line(f, "%s: model.name = '%s'", "--model", "ti\x1bny\n[x]");
	vline(f, "a\x1b.ini:3", "key '%s' in [%s]", "k\x07", "model");
	fclose(f);
	CU_ASSERT_STRING_EQUAL(out, "--model: model.name = 'ti\\x1bny\\n[x]'\n"
				    "a\\x1b.ini:3: key 'k\\x07' in [model]\n");
	free(out);
}

void suite_text(void)
{
	CU_pSuite s = CU_add_suite("text", NULL, NULL);

	CU_add_test(s, "escape: controls, C1, bytes that are not UTF-8; cut whole", test_escape);
	CU_add_test(s, "UTF-8 validity", test_utf8);
	CU_add_test(s, "a message line: place and text escaped, one newline", test_line);
}
