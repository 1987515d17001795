/* util.h - small helpers shared by all processes: clocks and deadlines,
 * parsing sizes, rates and addresses, formatting sizes, random numbers,
 * the presence filter's slot, checksums and test patterns. Callers: every
 * part of the tree. */
#ifndef HPL_UTIL_H
#define HPL_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* `size` zeroed bytes from malloc (free() them), or NULL. For small
 * structures on hot paths: glibc's calloc skips its per-thread cache, which
 * makes it several times slower than malloc and memset. */
void *hpl__zalloc(size_t size);

/* CLOCK_MONOTONIC in nanoseconds / milliseconds. */
uint64_t hpl__now_ns(void);
uint64_t hpl__now_ms(void);

/* Parse a byte size: digits with an optional K/M/G/T suffix (powers of 1024,
 * "KiB"/"KB"/"K" all accepted). Returns 0 and sets *out, or -1. */
int hpl__parse_size(const char *s, uint64_t *out);
/* A link rate as tc writes it ("1gbit", "200mbit", "500kbit", "64000bit")
 * -> bits per second in *out. Returns 0, or -1 for anything else ("none"
 * included) with *out untouched. */
int hpl__parse_rate(const char *s, uint64_t *out);

/* Split "HOST:PORT" (HOST may be empty, meaning `defhost`). Writes the host
 * into host[hostlen]. Returns 0 or -1 on a malformed string or port. */
int hpl__parse_hostport(const char *s, const char *defhost, char *host, size_t hostlen, int *port);

/* True if `host` is a numeric loopback address (127.0.0.0/8, ::1) or
 * "localhost". */
int hpl__is_loopback(const char *host);

/* Format a byte count for humans ("1.5 MiB") into buf; returns buf. */
const char *hpl__fmt_bytes(uint64_t n, char *buf, size_t len);

/* Random 64-bit value from getrandom(2), never 0. */
uint64_t hpl__random_u64(void);
/* Slot of `id` in a presence filter of `slots` (a power of two) one-byte
 * counters: the store counts its objects there, clients read it to tell
 * "certainly not local" (0) from "maybe local". */
uint32_t hpl__filter_slot(const char *id, uint32_t slots);

/* Sleep until CLOCK_MONOTONIC reaches t_ns (absolute; restarts on EINTR). */
void hpl__sleep_until_ns(uint64_t t_ns);

/* Deadline helpers: timeout_ms < 0 means none (UINT64_MAX). */
uint64_t hpl__deadline_ms(int64_t timeout_ms);
/* Milliseconds left until a deadline (0 if past); -1 for no deadline. */
int64_t hpl__ms_left(uint64_t deadline_ms);

/* Format fmt into buf (len bytes; buf NULL or len 0: nothing) and return
 * code: for functions that report an error code with its detail. */
int hpl__errf(char *buf, size_t len, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A fast 64-bit checksum of a buffer (not cryptographic), for verifying
 * transferred bytes in tests, benchmarks and the demo. */
uint64_t hpl__checksum(const void *p, size_t len);

/* Fill buf with a deterministic pseudo-random pattern derived from seed. */
void hpl__fill_pattern(void *buf, size_t len, uint64_t seed);

/* Mark a connected TCP socket as carrying control traffic (requests, their
 * replies, a puller's acknowledgements): SO_PRIORITY 6, TC_PRIO_INTERACTIVE.
 * The kernel's default queueing discipline (pfifo_fast, three bands) then
 * sends its packets ahead of bulk data already queued at the host's link;
 * other disciplines may ignore the mark. Nothing changes on the wire. The
 * sockets that stream object bytes stay unmarked. Off when the environment
 * has HOPLITE_CONTROL_PRIO=0 (read once). Returns 0, or -1 with errno from
 * setsockopt (the socket works either way; callers may ignore it). */
int hpl__sock_control(int fd);

#endif
