/*
 * putget.c - a program built against an INSTALLED hoplite (tests/test_install.sh
 * compiles it through pkg-config and through find_package(hoplite)).
 *
 *   putget PUT_SOCKET GET_SOCKET ID BYTES
 *
 * Puts BYTES bytes of a pattern derived from ID as object ID through the
 * store at PUT_SOCKET, gets it through the store at GET_SOCKET (another
 * node: the bytes cross between the stores) and compares every byte.
 * Prints "putget ok ID BYTES" and exits 0, or says what went wrong and
 * exits 1.
 */
#include <hoplite.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(const char *id, uint64_t i) {
  return (unsigned char)(i * 131u + (unsigned char)id[i % strlen(id)]);
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: putget PUT_SOCKET GET_SOCKET ID BYTES\n");
    return 2;
  }
  const char *id = argv[3];
  uint64_t size = strtoull(argv[4], NULL, 10);
  unsigned char *data = malloc(size ? size : 1);
  if (!data) return 1;
  for (uint64_t i = 0; i < size; i++) data[i] = pattern(id, i);

  hpl_client *p = NULL, *c = NULL;
  int rc = hpl_connect(argv[1], 5000, &p);
  if (!rc) rc = hpl_connect(argv[2], 5000, &c);
  if (rc) {
    fprintf(stderr, "putget: connect: %s\n", hpl_strerror(rc));
    return 1;
  }
  rc = hpl_put(p, id, data, size, 10000);
  if (rc) {
    fprintf(stderr, "putget: put: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(p));
    return 1;
  }
  hpl_buf *b;
  rc = hpl_get(c, id, 10000, &b);
  if (rc) {
    fprintf(stderr, "putget: get: %s (%s)\n", hpl_strerror(rc), hpl_errdetail(c));
    return 1;
  }
  int bad = hpl_buf_size(b) != size || memcmp(hpl_buf_data(b), data, size) != 0;
  if (bad) fprintf(stderr, "putget: %s came back as %llu different bytes\n", id,
                   (unsigned long long)hpl_buf_size(b));
  hpl_release(c, b);
  hpl_close(c);
  hpl_close(p);
  free(data);
  if (bad) return 1;
  printf("putget ok %s %llu\n", id, (unsigned long long)size);
  return 0;
}
