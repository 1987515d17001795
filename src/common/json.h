/*
 * json.h - JSON text in hoplite: the one place where bytes become a JSON
 * string, and the few helpers that put such strings, and 64-bit counts,
 * into cJSON objects (the cJSON library writes the rest: objects, arrays,
 * keys, punctuation). Callers: log.c (JSON log lines, escaped here and
 * written without cJSON), ctext.c (hpl_status's JSON, through cJSON), the
 * CLI's --json lines (src/cli/cmd_objects.c, escaped here and printed).
 *
 * Hoplite's strings are bytes (an object id is any bytes but control
 * characters), JSON strings are Unicode. '"' and '\' are escaped with a
 * backslash, valid UTF-8 (RFC 3629) is kept as it is. The rest goes, by
 * the caller's choice of one of two modes (what hoplite always wrote in
 * each place):
 *  - HPL__JSON_FFFD (log lines): control characters (and DEL) as \n, \t,
 *    \r, \b, \f or \u00XX; a byte that is not part of a valid UTF-8
 *    sequence (a stray continuation byte, an overlong form, a surrogate,
 *    above U+10FFFF, a sequence cut short) as \ufffd, the replacement
 *    character, so that the text stays valid UTF-8 for any reader;
 *  - HPL__JSON_SURROGATE (ids and other text in --json and status): every
 *    control character (and DEL) as \u00XX, a byte outside valid UTF-8 as
 *    \udcXX for byte XX, the lone surrogate of Python's "surrogateescape",
 *    so that json.loads(text)["id"].encode("utf-8", "surrogateescape")
 *    gives the bytes back. No JSON library writes these: cJSON would copy
 *    the bytes as they are, jansson refuses them.
 */
#ifndef HPL_JSON_H
#define HPL_JSON_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

/* What a byte outside valid UTF-8 becomes (see above). */
enum { HPL__JSON_FFFD = 0, HPL__JSON_SURROGATE = 1 };

/* Escape the n bytes at s (a NUL byte becomes \u0000) into out[cap],
 * without quotes and without a terminating NUL. Stops before an escape or
 * a character that would not fit whole. Returns the bytes written;
 * *used (if not NULL) gets the input bytes consumed (n unless out was too
 * small). 6 * n bytes always suffice. No allocation. */
size_t hpl__json_escape(char *out, size_t cap, const char *s, size_t n, int bad, size_t *used);

/* hpl__json_escape between two '"': the JSON string of s[n] into
 * out[cap] (cap >= 2), cut as hpl__json_escape cuts it to leave room for
 * the closing quote. Returns the bytes written (no NUL); *used as above.
 * 6 * n + 2 bytes always suffice. No allocation. */
size_t hpl__json_quote(char *out, size_t cap, const char *s, size_t n, int bad, size_t *used);

/* obj[key] = the NUL-terminated bytes s (NULL: "") as a JSON string,
 * escaped as above (a raw cJSON member holding our escaped text, made in
 * place: one allocation for the text). Returns the member, or NULL without
 * memory. */
cJSON *hpl__json_add_bytes(cJSON *obj, const char *key, const char *s, int bad);

/* obj[key] = v as a JSON number, every digit kept (cJSON's numbers are
 * doubles, which lose digits above 2^53, so the decimal text goes in
 * raw). Returns the member, or NULL without memory. */
cJSON *hpl__json_add_u64(cJSON *obj, const char *key, uint64_t v);

/* obj[key] = v (< 2^64) as 16 hex digits in a JSON string (node and
 * instance ids). Returns the member, or NULL without memory. */
cJSON *hpl__json_add_hex(cJSON *obj, const char *key, uint64_t v);

/* `item` printed on one line, without spaces, ended by '\n' and a NUL:
 * malloc'd (free() it), or NULL without memory. */
char *hpl__json_line(const cJSON *item);

#endif
