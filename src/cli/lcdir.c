/* lcdir.c - starting one hoplite-directory of a local cluster, plain or
 * standing by under a lease in etcd (see lcdir.h). */
#include "lcdir.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "lcproc.h"

#define LCD_MAX_ARGS 64 /* 4 of them for "ip netns exec NS" */

pid_t hpl__lcd_spawn(const hpl__lcd_opts *o) {
  char exe[PATH_MAX], buf[512], lease[16];
  snprintf(exe, sizeof exe, "%s/hoplite-directory", o->bin_dir);
  char *argv[LCD_MAX_ARGS] = {exe, "--listen", (char *)o->listen, "--log-level",
                              (char *)o->log_level};
  int argc = 5;
  if (o->port_file) {
    argv[argc++] = "--port-file";
    argv[argc++] = (char *)o->port_file;
  }
  if (o->secret && *o->secret) {
    argv[argc++] = "--auth-file";
    argv[argc++] = (char *)o->secret;
  }
  argc = hpl__lcp_split_args(argv, argc, LCD_MAX_ARGS - 11, buf, sizeof buf, o->dir_args);
  if (o->etcd_url) { /* after dir_args, as localcluster always had them */
    snprintf(lease, sizeof lease, "%u", o->lease_ms);
    argv[argc++] = "--etcd";
    argv[argc++] = (char *)o->etcd_url;
    argv[argc++] = "--ha-prefix";
    argv[argc++] = (char *)o->ha_prefix;
    argv[argc++] = "--lease-ms";
    argv[argc++] = lease;
  }
  argv[argc] = NULL;
  hpl__lcp_in_netns(argv, argc, o->netns);
  return hpl__lcp_spawn(argv, o->log);
}
