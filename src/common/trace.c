/* trace.c - per-hop trace lines of the small-object path to
 * $HOPLITE_TRACE (see trace.h). */
#include "trace.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

static pthread_once_t trace_once = PTHREAD_ONCE_INIT;
static int trace_fd = -1;

static void trace_open(void) {
  const char *path = getenv("HOPLITE_TRACE");
  if (path && *path) trace_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

void hpl__trace(const char *event, const char *id) {
  pthread_once(&trace_once, trace_open);
  if (trace_fd < 0) return;
  char line[320];
  int n = snprintf(line, sizeof line, "%llu %d %s ", (unsigned long long)hpl__now_ns(),
                   (int)getpid(), event);
  if (n < 0 || (size_t)n >= sizeof line - 210) return;
  size_t k = (size_t)n;
  if (!id || !*id) id = "-";
  for (size_t i = 0; id[i] && i < 200; i++)
    line[k++] = (unsigned char)id[i] <= ' ' ? '_' : id[i];
  line[k++] = '\n';
  ssize_t w = write(trace_fd, line, k);
  (void)w; /* a lost trace line is no reason to fail anything */
}
