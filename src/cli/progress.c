/* progress.c - the progress bar `hoplite put` and `get` draw on stderr
 * when it is a terminal (cli.h). */
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

void hpl__cli_progress_init(hpl__cli_progress *p, const char *what, const char *id,
                            uint64_t total) {
  *p = (hpl__cli_progress){.on = isatty(STDERR_FILENO), .what = what, .id = id, .total = total,
                           .t0_ns = hpl__now_ns()};
}

void hpl__cli_fmt_secs(double s, char *buf, size_t len) {
  if (s < 60) snprintf(buf, len, "%.0fs", s);
  else if (s < 3600) snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)s % 60);
  else snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

/* Show `done` bytes (of p->total): at most every HPL__PROGRESS_EVERY_NS, or
 * now and for the last time with `final`. Small objects show nothing. */
void hpl__cli_progress_show(hpl__cli_progress *p, uint64_t done, int final) {
  if (!p->on || (p->total ? p->total : done) < HPL__PROGRESS_MIN) return;
  uint64_t now = hpl__now_ns();
  if (!final && p->drawn && now - p->last_ns < HPL__PROGRESS_EVERY_NS) return;
  p->last_ns = now;
  p->drawn = 1;
  double secs = (double)(now - p->t0_ns) / 1e9;
  double rate = secs > 0 ? (double)done / secs : 0;
  char d[32], t[32], eta[32] = "", tail[128];
  hpl__fmt_bytes(done, d, sizeof d);
  double f = 0;
  if (p->total) {
    f = done >= p->total ? 1.0 : (double)done / (double)p->total;
    hpl__fmt_bytes(p->total, t, sizeof t);
    if (final) {
      strcpy(eta, "in ");
      hpl__cli_fmt_secs(secs, eta + 3, sizeof eta - 3);
    } else if (rate > 0) {
      strcpy(eta, "ETA ");
      hpl__cli_fmt_secs((double)(p->total - (done < p->total ? done : p->total)) / rate, eta + 4,
                        sizeof eta - 4);
    }
    snprintf(tail, sizeof tail, "%3d%%  %s / %s  %.1f MB/s  %s", (int)(f * 100), d, t,
             rate / 1e6, eta);
  } else {
    snprintf(tail, sizeof tail, "%s  %.1f MB/s", d, rate / 1e6);
  }
  /* one line of the terminal: the id and the bar share what the rest leaves */
  struct winsize ws;
  int cols = ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col ? ws.ws_col : 80;
  int avail = cols - 1 - (int)strlen(p->what) - 1 - (int)strlen(tail) - 4;
  int idw = (int)strlen(p->id), barw = 30;
  if (idw > avail - 10) idw = avail - 10 > 8 ? avail - 10 : 8;
  if (barw > avail - idw) barw = avail - idw > 5 ? avail - idw : 5;
  char bar[32];
  if (!p->total) barw = 0;
  int k = (int)(f * barw);
  memset(bar, '#', (size_t)k);
  memset(bar + k, '.', (size_t)(barw - k));
  bar[barw] = 0;
  fprintf(stderr, "\r%s %.*s%s%s%s %s\033[K", p->what, idw, p->id, barw ? " [" : "", bar,
          barw ? "]" : "", tail);
  if (final) fputc('\n', stderr);
  fflush(stderr);
}
