/* etcd.c - the blocking etcd v3 JSON-gateway client (see etcd.h): one curl
 * handle, endpoints tried in turn, requests and answers in cJSON, keys and
 * values base64 (libsodium's codec). */
#include "etcd.h"

#include <curl/curl.h>
#include <cjson/cJSON.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoplite.h"
#include "log.h"

#define MAX_ENDPOINTS 8
#define MAX_ANSWER (1u << 20) /* an answer longer than this is refused */

struct hpl__etcd {
  CURL *curl;
  char *ep[MAX_ENDPOINTS];
  int n, cur; /* endpoints; the one tried first */
  uint32_t timeout_ms;
  char *body; /* the answer being received */
  size_t len, cap;
  int too_long;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static size_t on_body(char *p, size_t sz, size_t nm, void *arg) {
  hpl__etcd *e = arg;
  size_t n = sz * nm;
  if (e->len + n + 1 > MAX_ANSWER) {
    e->too_long = 1;
    return 0; /* curl stops with an error */
  }
  if (e->len + n + 1 > e->cap) {
    size_t cap = e->cap ? e->cap : 4096;
    while (cap < e->len + n + 1) cap *= 2;
    char *b = realloc(e->body, cap);
    if (!b) return 0;
    e->body = b;
    e->cap = cap;
  }
  memcpy(e->body + e->len, p, n);
  e->len += n;
  e->body[e->len] = 0;
  return n;
}

int hpl__etcd_new(const char *endpoints, uint32_t timeout_ms, hpl__etcd **out) {
  *out = NULL;
  if (!endpoints || !*endpoints || !timeout_ms) return HPL_EINVAL;
  pthread_once(&curl_once, curl_init);
  hpl__etcd *e = calloc(1, sizeof *e);
  if (!e) return HPL_ENOMEM;
  e->timeout_ms = timeout_ms;
  const char *p = endpoints;
  while (*p) {
    size_t l = strcspn(p, ",");
    if (l == 0 || l > 200 || e->n == MAX_ENDPOINTS) {
      hpl__etcd_free(e);
      return HPL_EINVAL;
    }
    int scheme = l > 7 && (!strncmp(p, "http://", 7) || !strncmp(p, "https://", 8));
    char *u = malloc(l + 8);
    if (!u) {
      hpl__etcd_free(e);
      return HPL_ENOMEM;
    }
    snprintf(u, l + 8, "%s%.*s", scheme ? "" : "http://", (int)l, p);
    e->ep[e->n++] = u;
    p += l;
    if (*p == ',') p++;
  }
  if (!(e->curl = curl_easy_init())) {
    hpl__etcd_free(e);
    return HPL_ENOMEM;
  }
  *out = e;
  return 0;
}

void hpl__etcd_free(hpl__etcd *e) {
  if (!e) return;
  if (e->curl) curl_easy_cleanup(e->curl);
  for (int i = 0; i < e->n; i++) free(e->ep[i]);
  free(e->body);
  free(e);
}

const char *hpl__etcd_endpoint(const hpl__etcd *e) { return e->ep[e->cur]; }

/* POST `req` (consumed) to path on each endpoint in turn until one
 * answers; its parsed answer in *ans (the caller's). An answer with an
 * "error" field (etcd's gRPC status) is HPL_EPROTO. */
static int call(hpl__etcd *e, const char *path, cJSON *req, cJSON **ans) {
  *ans = NULL;
  char *body = req ? cJSON_PrintUnformatted(req) : NULL;
  cJSON_Delete(req);
  if (!body) return HPL_ENOMEM;
  int rc = HPL_EUNAVAIL;
  for (int k = 0; k < e->n && rc == HPL_EUNAVAIL; k++) {
    int i = (e->cur + k) % e->n;
    char url[256];
    snprintf(url, sizeof url, "%s%s", e->ep[i], path);
    e->len = 0;
    e->too_long = 0;
    if (e->body) e->body[0] = 0;
    curl_easy_reset(e->curl);
    curl_easy_setopt(e->curl, CURLOPT_URL, url);
    curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, e);
    curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
    curl_easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)e->timeout_ms);
    curl_easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e->curl, CURLOPT_PROTOCOLS_STR, "http,https");
    CURLcode cc = curl_easy_perform(e->curl);
    long code = 0;
    curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &code);
    if (cc != CURLE_OK || code >= 500 || code == 0) {
      HPL__LOG_DEBUG("etcd %s: %s", url,
                     e->too_long ? "answer too long" : cc != CURLE_OK ? curl_easy_strerror(cc)
                                                                      : "server error");
      if (e->too_long) rc = HPL_EPROTO;
      continue;
    }
    e->cur = i;
    cJSON *j = e->len ? cJSON_ParseWithLength(e->body, e->len) : NULL;
    cJSON *err = j ? cJSON_GetObjectItemCaseSensitive(j, "error") : NULL;
    if (!j || code != 200 || err) {
      cJSON *msg = j ? cJSON_GetObjectItemCaseSensitive(j, "message") : NULL;
      HPL__LOG_WARN("etcd %s answered HTTP %ld: %s", url, code,
                    cJSON_IsString(msg) ? msg->valuestring : cJSON_IsString(err) ? err->valuestring
                                                                                 : "(no JSON)");
      cJSON_Delete(j);
      rc = HPL_EPROTO;
      break;
    }
    *ans = j;
    rc = 0;
  }
  free(body);
  return rc;
}

/* base64 of n bytes as a new cJSON string item added to o under name. */
static int add_b64(cJSON *o, const char *name, const void *p, size_t n) {
  char buf[sodium_base64_ENCODED_LEN(HPL__ETCD_MAX_VAL, sodium_base64_VARIANT_ORIGINAL)];
  if (n > HPL__ETCD_MAX_VAL) return HPL_EINVAL;
  sodium_bin2base64(buf, sizeof buf, p, n, sodium_base64_VARIANT_ORIGINAL);
  return cJSON_AddStringToObject(o, name, buf) ? 0 : HPL_ENOMEM;
}

/* The base64 string item o[name] decoded into out (cap bytes, terminated).
 * A missing item is the empty string. */
static int get_b64(const cJSON *o, const char *name, char *out, size_t cap) {
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, name);
  size_t n = 0;
  uint8_t buf[HPL__ETCD_MAX_VAL];
  if (s && (!cJSON_IsString(s) ||
            sodium_base642bin(buf, sizeof buf, s->valuestring, strlen(s->valuestring), NULL, &n,
                              NULL, sodium_base64_VARIANT_ORIGINAL) != 0))
    return HPL_EPROTO;
  if (out && cap) {
    size_t m = n < cap - 1 ? n : cap - 1;
    memcpy(out, buf, m);
    out[m] = 0;
  }
  return 0;
}

/* An int64 field, which the gateway writes as a string (absent: 0). */
static int64_t get_i64(const cJSON *o, const char *name) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  if (cJSON_IsString(v)) return strtoll(v->valuestring, NULL, 10);
  if (cJSON_IsNumber(v)) return (int64_t)v->valuedouble;
  return 0;
}

static cJSON *add_i64(cJSON *o, const char *name, int64_t v) {
  char b[24];
  snprintf(b, sizeof b, "%lld", (long long)v);
  return cJSON_AddStringToObject(o, name, b);
}

int hpl__etcd_lease_grant(hpl__etcd *e, int64_t ttl_s, int64_t *lease, int64_t *granted_s) {
  if (ttl_s <= 0) return HPL_EINVAL;
  cJSON *req = cJSON_CreateObject(), *ans;
  if (!req || !add_i64(req, "TTL", ttl_s)) {
    cJSON_Delete(req);
    return HPL_ENOMEM;
  }
  int rc = call(e, "/v3/lease/grant", req, &ans);
  if (rc) return rc;
  *lease = get_i64(ans, "ID");
  if (granted_s) *granted_s = get_i64(ans, "TTL");
  cJSON_Delete(ans);
  return *lease ? 0 : HPL_EPROTO;
}

int hpl__etcd_lease_keepalive(hpl__etcd *e, int64_t lease, int64_t *ttl_s) {
  cJSON *req = cJSON_CreateObject(), *ans;
  if (!req || !add_i64(req, "ID", lease)) {
    cJSON_Delete(req);
    return HPL_ENOMEM;
  }
  int rc = call(e, "/v3/lease/keepalive", req, &ans);
  if (rc) return rc;
  /* a streaming call: the gateway wraps its one answer in "result" */
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(ans, "result");
  int64_t ttl = r ? get_i64(r, "TTL") : 0;
  cJSON_Delete(ans);
  if (!r) return HPL_EPROTO;
  *ttl_s = ttl;
  return ttl > 0 ? 0 : HPL_ENOTFOUND;
}

int hpl__etcd_lease_revoke(hpl__etcd *e, int64_t lease) {
  cJSON *req = cJSON_CreateObject(), *ans;
  if (!req || !add_i64(req, "ID", lease)) {
    cJSON_Delete(req);
    return HPL_ENOMEM;
  }
  int rc = call(e, "/v3/lease/revoke", req, &ans);
  cJSON_Delete(ans);
  return rc == HPL_EPROTO ? 0 : rc; /* "requested lease not found": gone already */
}

/* {"key": b64(key), "value": b64(value), "lease": lease} as a new object. */
static cJSON *put_req(const char *key, const char *value, int64_t lease) {
  cJSON *p = cJSON_CreateObject();
  if (!p || add_b64(p, "key", key, strlen(key)) || add_b64(p, "value", value, strlen(value)) ||
      (lease && !add_i64(p, "lease", lease))) {
    cJSON_Delete(p);
    return NULL;
  }
  return p;
}

/* Add item to the array arr (which then owns it) and return it; NULL, with
 * item freed, if either is NULL. */
static cJSON *attach(cJSON *arr, cJSON *item) {
  if (!arr || !item) {
    cJSON_Delete(item);
    return NULL;
  }
  cJSON_AddItemToArray(arr, item);
  return item;
}

static int check_key(const char *key, const char *value) {
  return !key || !*key || strlen(key) > HPL__ETCD_MAX_KEY ||
                 (value && strlen(value) > HPL__ETCD_MAX_VAL)
             ? HPL_EINVAL
             : 0;
}

int hpl__etcd_create(hpl__etcd *e, const char *key, const char *value, int64_t lease,
                     int *created, int64_t *rev, int64_t *mod, char *cur, size_t cap) {
  if (check_key(key, value)) return HPL_EINVAL;
  /* compare: the key's create revision is 0 (absent); then put, else range */
  cJSON *req = cJSON_CreateObject();
  if (!req) return HPL_ENOMEM;
  cJSON *cmp = attach(cJSON_AddArrayToObject(req, "compare"), cJSON_CreateObject());
  cJSON *ok = attach(cJSON_AddArrayToObject(req, "success"), cJSON_CreateObject());
  cJSON *no = attach(cJSON_AddArrayToObject(req, "failure"), cJSON_CreateObject());
  cJSON *put = put_req(key, value, lease), *rng = cJSON_CreateObject();
  if (ok && put) cJSON_AddItemToObject(ok, "request_put", put);
  else cJSON_Delete(put);
  if (no && rng) cJSON_AddItemToObject(no, "request_range", rng);
  else cJSON_Delete(rng);
  if (!cmp || !ok || !no || !put || !rng || add_b64(cmp, "key", key, strlen(key)) ||
      !cJSON_AddStringToObject(cmp, "target", "CREATE") ||
      !cJSON_AddStringToObject(cmp, "result", "EQUAL") || !add_i64(cmp, "create_revision", 0) ||
      add_b64(rng, "key", key, strlen(key))) {
    cJSON_Delete(req); /* (with what was attached to it) */
    return HPL_ENOMEM;
  }
  cJSON *ans;
  int rc = call(e, "/v3/kv/txn", req, &ans);
  if (rc) return rc;
  *created = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ans, "succeeded"));
  const cJSON *hdr = cJSON_GetObjectItemCaseSensitive(ans, "header");
  if (*created) {
    *rev = hdr ? get_i64(hdr, "revision") : 0;
    if (cur && cap) cur[0] = 0;
  } else {
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(ans, "responses");
    const cJSON *r0 = cJSON_IsArray(rs) ? cJSON_GetArrayItem(rs, 0) : NULL;
    const cJSON *rr = r0 ? cJSON_GetObjectItemCaseSensitive(r0, "response_range") : NULL;
    const cJSON *kvs = rr ? cJSON_GetObjectItemCaseSensitive(rr, "kvs") : NULL;
    const cJSON *kv = cJSON_IsArray(kvs) ? cJSON_GetArrayItem(kvs, 0) : NULL;
    /* gone between the compare and the range cannot happen in one txn;
     * an answer without it is not etcd's */
    if (!kv || get_b64(kv, "value", cur, cap)) {
      rc = HPL_EPROTO;
    } else {
      *rev = get_i64(kv, "create_revision");
      if (mod) *mod = get_i64(kv, "mod_revision");
    }
  }
  if (rc == 0 && *rev <= 0) rc = HPL_EPROTO;
  cJSON_Delete(ans);
  return rc;
}

int hpl__etcd_swap(hpl__etcd *e, const char *key, int64_t mod, const char *value, int64_t lease,
                   int *done, int64_t *rev) {
  if (check_key(key, value) || mod <= 0) return HPL_EINVAL;
  cJSON *req = cJSON_CreateObject();
  if (!req) return HPL_ENOMEM;
  cJSON *cmp = attach(cJSON_AddArrayToObject(req, "compare"), cJSON_CreateObject());
  cJSON *ok = attach(cJSON_AddArrayToObject(req, "success"), cJSON_CreateObject());
  cJSON *op = value ? put_req(key, value, lease) : cJSON_CreateObject();
  if (ok && op) cJSON_AddItemToObject(ok, value ? "request_put" : "request_delete_range", op);
  else cJSON_Delete(op);
  if (!cmp || !ok || !op || add_b64(cmp, "key", key, strlen(key)) ||
      !cJSON_AddStringToObject(cmp, "target", "MOD") ||
      !cJSON_AddStringToObject(cmp, "result", "EQUAL") || !add_i64(cmp, "mod_revision", mod) ||
      (!value && add_b64(op, "key", key, strlen(key)))) {
    cJSON_Delete(req);
    return HPL_ENOMEM;
  }
  cJSON *ans;
  int rc = call(e, "/v3/kv/txn", req, &ans);
  if (rc) return rc;
  *done = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ans, "succeeded"));
  const cJSON *hdr = cJSON_GetObjectItemCaseSensitive(ans, "header");
  if (rev) *rev = hdr ? get_i64(hdr, "revision") : 0;
  cJSON_Delete(ans);
  return 0;
}

int hpl__etcd_put(hpl__etcd *e, const char *key, const char *value, int64_t lease) {
  if (check_key(key, value)) return HPL_EINVAL;
  cJSON *req = put_req(key, value, lease), *ans;
  if (!req) return HPL_ENOMEM;
  int rc = call(e, "/v3/kv/put", req, &ans);
  cJSON_Delete(ans);
  return rc;
}

/* A range request for key, or for every key under it (prefix). */
static int range(hpl__etcd *e, const char *key, int prefix, cJSON **ans) {
  cJSON *req = cJSON_CreateObject();
  int bad = !req || add_b64(req, "key", key, strlen(key));
  if (!bad && prefix) { /* range_end: the prefix with its last byte + 1 */
    char end[HPL__ETCD_MAX_KEY + 1];
    size_t n = strlen(key);
    memcpy(end, key, n);
    while (n && (unsigned char)end[n - 1] == 0xff) n--;
    if (n) end[n - 1]++;
    bad =
        n ? add_b64(req, "range_end", end, n) : !cJSON_AddStringToObject(req, "range_end", "AA==");
    bad = bad || !add_i64(req, "limit", 1000);
  }
  if (bad) {
    cJSON_Delete(req);
    return HPL_ENOMEM;
  }
  return call(e, "/v3/kv/range", req, ans);
}

int hpl__etcd_get(hpl__etcd *e, const char *key, char *val, size_t cap, int64_t *create_rev) {
  if (check_key(key, NULL)) return HPL_EINVAL;
  cJSON *ans;
  int rc = range(e, key, 0, &ans);
  if (rc) return rc;
  const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(ans, "kvs");
  const cJSON *kv = cJSON_IsArray(kvs) ? cJSON_GetArrayItem(kvs, 0) : NULL;
  if (!kv) rc = HPL_ENOTFOUND;
  else if (get_b64(kv, "value", val, cap)) rc = HPL_EPROTO;
  else if (create_rev) *create_rev = get_i64(kv, "create_revision");
  cJSON_Delete(ans);
  return rc;
}

int hpl__etcd_list(hpl__etcd *e, const char *prefix,
                   void (*fn)(void *arg, const char *key, const char *value), void *arg) {
  if (check_key(prefix, NULL)) return HPL_EINVAL;
  cJSON *ans;
  int rc = range(e, prefix, 1, &ans);
  if (rc) return rc;
  const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(ans, "kvs"), *kv;
  char k[HPL__ETCD_MAX_KEY + 1], v[HPL__ETCD_MAX_VAL + 1];
  cJSON_ArrayForEach(kv, kvs) {
    if (get_b64(kv, "key", k, sizeof k) || get_b64(kv, "value", v, sizeof v)) {
      rc = HPL_EPROTO;
      break;
    }
    fn(arg, k, v);
  }
  cJSON_Delete(ans);
  return rc;
}
