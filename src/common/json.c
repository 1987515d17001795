/* json.c - bytes as JSON strings, and the helpers that put them into
 * cJSON objects (see json.h). */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence starting at s[0] (1-4), or 0 if the
 * bytes there do not start one (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF, no sequence cut short by n). */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t len;
  unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;      /* overlong */
    else if (c == 0xed) hi = 0x9f; /* surrogates */
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;      /* overlong */
    else if (c == 0xf4) hi = 0x8f; /* above U+10FFFF */
  } else {
    return 0;
  }
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0;
  return len;
}

size_t hpl__json_escape(char *out, size_t cap, const char *s, size_t n, int bad, size_t *used) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *u = (const unsigned char *)s;
  size_t o = 0, i = 0;
  while (i < n) {
    unsigned c = u[i];
    char esc[6];
    const char *piece = esc;
    size_t plen, in = 1;
    if (c == '"' || c == '\\') {
      esc[0] = '\\', esc[1] = (char)c, plen = 2;
    } else if (c < 0x20 || c == 0x7f) {
      const char *named = bad != HPL__JSON_FFFD ? NULL /* ids: \u00XX only */
                        : c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r"
                        : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
      if (named) {
        piece = named, plen = 2;
      } else {
        memcpy(esc, "\\u00", 4);
        esc[4] = hex[c >> 4], esc[5] = hex[c & 15], plen = 6;
      }
    } else if ((in = utf8_len(u + i, n - i)) == 0) {
      in = 1, plen = 6; /* one escape per bad byte */
      if (bad == HPL__JSON_SURROGATE) {
        memcpy(esc, "\\udc", 4);
        esc[4] = hex[c >> 4], esc[5] = hex[c & 15];
      } else {
        piece = "\\ufffd";
      }
    } else {
      piece = s + i, plen = in; /* ASCII or a whole valid UTF-8 sequence */
    }
    if (cap - o < plen) break;
    memcpy(out + o, piece, plen);
    o += plen;
    i += in;
  }
  if (used) *used = i;
  return o;
}

size_t hpl__json_quote(char *out, size_t cap, const char *s, size_t n, int bad, size_t *used) {
  size_t k = hpl__json_escape(out + 1, cap - 2, s, n, bad, used);
  out[0] = '"';
  out[k + 1] = '"';
  return k + 2;
}

/* The member's text is made in place, in memory cJSON frees with the item
 * (cJSON_malloc), rather than made here and copied by cJSON_AddRawToObject. */
cJSON *hpl__json_add_bytes(cJSON *obj, const char *key, const char *s, int bad) {
  if (!s) s = "";
  size_t n = strlen(s);
  char *q = cJSON_malloc(6 * n + 3);
  cJSON *m = q ? cJSON_CreateNull() : NULL;
  if (!m) {
    cJSON_free(q);
    return NULL;
  }
  q[hpl__json_quote(q, 6 * n + 2, s, n, bad, NULL)] = 0;
  m->type = cJSON_Raw;
  m->valuestring = q;
  if (!cJSON_AddItemToObject(obj, key, m)) {
    cJSON_Delete(m);
    return NULL;
  }
  return m;
}

cJSON *hpl__json_add_u64(cJSON *obj, const char *key, uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "%llu", (unsigned long long)v);
  return cJSON_AddRawToObject(obj, key, b);
}

cJSON *hpl__json_add_hex(cJSON *obj, const char *key, uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
  return cJSON_AddStringToObject(obj, key, b);
}

char *hpl__json_line(const cJSON *item) {
  char *s = cJSON_PrintUnformatted(item);
  if (!s) return NULL;
  size_t n = strlen(s);
  char *line = malloc(n + 2);
  if (line) {
    memcpy(line, s, n);
    line[n] = '\n';
    line[n + 1] = 0;
  }
  cJSON_free(s);
  return line;
}
