/*
 * p2p.c - plain TCP transfer between emulated hosts, for p2p_check.sh.
 *
 *   p2p send IP PORT BYTES             connect to IP:PORT, send BYTES bytes
 *   p2p recv BIND_IP PORT              accept one connection, read to EOF
 *   p2p recv BIND_IP PORT NEXT NPORT   ... and forward every chunk to NEXT:NPORT
 *
 * Times are CLOCK_MONOTONIC seconds, one clock for every namespace on the
 * machine, so the sender's start and the last receiver's end can be
 * subtracted.  Output (stdout, one line):
 *   send: "start <t> bytes <n>"   (t = just before the first byte is written)
 *   recv: "end <t> bytes <n>"     (t = after EOF; a forwarder after its
 *                                   onward socket is shut down)
 * Every socket call blocks; connects are retried with a 20 ms sleep while the
 * peer is not yet listening, for at most 20 s.  Exit status 0 on success.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define P2P_CHUNK (256 * 1024)
#define P2P_IO_TIMEOUT_S 60

static double p2p_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int p2p_addr(const char *ip, const char *port, struct sockaddr_in *sa)
{
    char *end;
    long p = strtol(port, &end, 10);
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    if (*end != '\0' || p <= 0 || p > 65535 || inet_pton(AF_INET, ip, &sa->sin_addr) != 1) {
        fprintf(stderr, "p2p: bad address %s:%s\n", ip, port);
        return -1;
    }
    sa->sin_port = htons((uint16_t)p);
    return 0;
}

/* Bound every blocking read/write so a lost peer ends the program. */
static void p2p_set_timeouts(int fd)
{
    struct timeval tv = { .tv_sec = P2P_IO_TIMEOUT_S, .tv_usec = 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Connect to ip:port, retrying (sleeping 20 ms) while refused.  Returns fd or -1. */
static int p2p_connect(const char *ip, const char *port)
{
    struct sockaddr_in sa;
    if (p2p_addr(ip, port, &sa) < 0)
        return -1;
    const struct timespec pause = { 0, 20 * 1000 * 1000 };
    for (int attempt = 0; attempt < 1000; attempt++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            perror("p2p: socket");
            return -1;
        }
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            p2p_set_timeouts(fd);
            return fd;
        }
        int err = errno;
        close(fd);
        if (err != ECONNREFUSED && err != ENETUNREACH && err != EHOSTUNREACH) {
            fprintf(stderr, "p2p: connect %s:%s: %s\n", ip, port, strerror(err));
            return -1;
        }
        nanosleep(&pause, NULL);
    }
    fprintf(stderr, "p2p: connect %s:%s: gave up after 20 s\n", ip, port);
    return -1;
}

static int p2p_listen(const char *ip, const char *port)
{
    struct sockaddr_in sa;
    int one = 1;
    if (p2p_addr(ip, port, &sa) < 0)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 4) < 0) {
        fprintf(stderr, "p2p: listen %s:%s: %s\n", ip, port, strerror(errno));
        return -1;
    }
    /* Bound the wait for the sender too. */
    p2p_set_timeouts(fd);
    return fd;
}

static int p2p_write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("p2p: write");
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* CPU time this process has used (user + system), in microseconds. */
static unsigned long long p2p_cpu_us(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (unsigned long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000ull +
           (unsigned long long)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static int p2p_send(const char *ip, const char *port, const char *bytes_arg)
{
    char *end;
    unsigned long long total = strtoull(bytes_arg, &end, 10);
    if (*end != '\0' || total == 0) {
        fprintf(stderr, "p2p: bad byte count %s\n", bytes_arg);
        return 1;
    }
    char *buf = malloc(P2P_CHUNK);
    if (buf == NULL)
        return 1;
    for (size_t i = 0; i < P2P_CHUNK; i++)
        buf[i] = (char)(i * 131u + 7u);
    int fd = p2p_connect(ip, port);
    if (fd < 0)
        return 1;
    double start = p2p_now();
    unsigned long long left = total;
    while (left > 0) {
        size_t n = left < P2P_CHUNK ? (size_t)left : P2P_CHUNK;
        if (p2p_write_all(fd, buf, n) < 0)
            return 1;
        left -= n;
    }
    shutdown(fd, SHUT_WR);
    /* Wait for the receiver's close so the kernel has delivered everything. */
    char c;
    while (read(fd, &c, 1) > 0)
        ;
    close(fd);
    printf("start %.9f bytes %llu cpu_us %llu\n", start, total, p2p_cpu_us());
    free(buf);
    return 0;
}

static int p2p_recv(const char *ip, const char *port, const char *next_ip, const char *next_port)
{
    int lfd = p2p_listen(ip, port);
    if (lfd < 0)
        return 1;
    int out = -1;
    if (next_ip != NULL && (out = p2p_connect(next_ip, next_port)) < 0)
        return 1;
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
        perror("p2p: accept");
        return 1;
    }
    close(lfd);
    p2p_set_timeouts(fd);
    char *buf = malloc(P2P_CHUNK);
    if (buf == NULL)
        return 1;
    unsigned long long total = 0;
    for (;;) {
        ssize_t n = read(fd, buf, P2P_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            perror("p2p: read");
            return 1;
        }
        if (n == 0)
            break;
        total += (unsigned long long)n;
        if (out >= 0 && p2p_write_all(out, buf, (size_t)n) < 0)
            return 1;
    }
    if (out >= 0) {
        char c;
        shutdown(out, SHUT_WR);
        while (read(out, &c, 1) > 0)
            ;
        close(out);
    }
    double end = p2p_now();
    close(fd);
    printf("end %.9f bytes %llu cpu_us %llu\n", end, total, p2p_cpu_us());
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 5 && strcmp(argv[1], "send") == 0)
        return p2p_send(argv[2], argv[3], argv[4]);
    if (argc == 4 && strcmp(argv[1], "recv") == 0)
        return p2p_recv(argv[2], argv[3], NULL, NULL);
    if (argc == 6 && strcmp(argv[1], "recv") == 0)
        return p2p_recv(argv[2], argv[3], argv[4], argv[5]);
    fprintf(stderr,
            "usage: p2p send IP PORT BYTES\n"
            "       p2p recv BIND_IP PORT [NEXT_IP NEXT_PORT]\n");
    return 2;
}
