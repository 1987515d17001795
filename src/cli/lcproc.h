/*
 * lcproc.h - the processes of a local cluster (localcluster.h): starting
 * one with its output in a log, waiting for the file it writes once it is
 * up, reaping it by pid, picking free loopback ports, removing the work
 * directory. Nothing here knows what the processes are.
 *
 * Waiting is event-driven (inotify on the directory, a pidfd for the
 * process), bounded by a timeout. Callers: localcluster.c and the
 * modules it and hadirs.c share (lcdir.c, lcetcd.c), hadirs.c.
 */
#ifndef HPL_LCPROC_H
#define HPL_LCPROC_H

#include <stddef.h>
#include <sys/types.h>

/* fork and exec argv[0] (searched in $PATH) with argv; its stdout and
 * stderr go to the file `log` (appended; NULL or "": ours). The child gets
 * SIGTERM when the caller's thread dies and no blocked signals. Returns
 * the pid, or -1 with errno set (no child). */
pid_t hpl__lcp_spawn(char **argv, const char *log);

/* Wait until one of paths[0..n) exists (made in directory `dir`), or
 * process `pid` (> 0; 0: none) exits (it is reaped), or timeout_ms pass.
 * Returns the index of the first path found, or HPL_ECONN (the process
 * exited) or HPL_ETIMEDOUT (both negative). */
int hpl__lcp_wait_files(const char *dir, const char *const *paths, int n, pid_t pid,
                        int timeout_ms);

/* Reap pid, waiting at most timeout_ms. Returns 1 if it has exited (its
 * waitpid status in *st if st is not NULL, -1 when unknown), else 0. */
int hpl__lcp_reap(pid_t pid, int timeout_ms, int *st);

/* Stop *pid: `sig`, then SIGKILL after 5 s; reaped, *pid set to 0. A pid
 * <= 0 is left alone. */
void hpl__lcp_stop(pid_t *pid, int sig);

/* n (at most 16) distinct TCP ports free on `host` (an IPv4 address) now,
 * into ports[]: each bound to port 0 at once, then released. A port can
 * be taken by someone else before it is used: callers that fail to bind
 * try again. Returns 0, or HPL_EINVAL / HPL_ESYS (errno set). */
int hpl__lcp_free_ports(const char *host, int n, int *ports);

/* Append the space-separated words of `words` (NULL or "": none) to
 * argv[0..argc), at most up to argv[max - 1], splitting a copy in buf
 * (blen bytes; the words point into it). Returns the new argc. */
int hpl__lcp_split_args(char **argv, int argc, int max, char *buf, size_t blen,
                        const char *words);

/* With ns (a network namespace's name; NULL: nothing), run argv inside it:
 * shift argv[0..argc] (NULL-terminated, with room for 4 more) right by
 * four and put "ip netns exec NS" in front. Returns the new argc. */
int hpl__lcp_in_netns(char **argv, int argc, const char *ns);

/* Where hoplite-directory and hoplite-store are, into out (len bytes):
 * `given` if not NULL, else $HOPLITE_BIN_DIR if set, else this program's
 * directory, or its parent when `probe` (a program's name) is not in it
 * (programs in a build subdirectory, tests/ or bench/). 0, or HPL_ESYS
 * (this program's path is unknown). */
int hpl__lcp_bin_dir(const char *given, const char *probe, char *out, size_t len);

/* Remove dir and what it holds, `depth` levels of subdirectories deep;
 * symbolic links are removed, never followed. */
void hpl__lcp_rm_tree(const char *dir, int depth);

#endif
