/* planner.c - the shape of a reduce tree: its degree and the parent of
 * each slot (see planner.h). */
#include "planner.h"

#include <stdlib.h>
#include <string.h>

#include "hoplite.h"

int hpl__plan_height(int d, int n) {
  if (n <= 1) return 0;
  if (d <= 1) return n - 1;
  /* levels of a complete d-ary tree: 1 + d + d^2 + ... >= n */
  int h = 0;
  long long level = 1, total = 1;
  while (total < n) {
    level *= d;
    total += level;
    h++;
  }
  return h;
}

double hpl__plan_cost(int d, int n, double S, double L, double B) {
  int dd = n <= 1 ? 1 : (d > n - 1 ? n - 1 : d);
  return L * (double)(hpl__plan_height(dd, n) + 1) + (double)dd * S / B;
}

int hpl__plan_best_degree(int n, double S, double L, double B) {
  int best = 1;
  double bc = hpl__plan_cost(1, n, S, L, B);
  for (int d = 2; d <= n - 1; d++) {
    double c = hpl__plan_cost(d, n, S, L, B);
    if (c < bc) {
      bc = c;
      best = d;
    }
  }
  return best;
}

void hpl__plan_free(hpl__plan *p) {
  if (!p) return;
  free(p->parent);
  free(p->nchild);
  free(p->child);
  memset(p, 0, sizeof *p);
}

int hpl__plan_build(int n, int d, hpl__plan *out) {
  memset(out, 0, sizeof *out);
  if (n < 1 || d < 1) return HPL_EINVAL;
  if (n > 1 && d > n - 1) d = n - 1;
  int *inorder = malloc((size_t)n * sizeof *inorder); /* heap index -> slot */
  int *stack = malloc((size_t)n * sizeof *stack);
  int *next = calloc((size_t)n, sizeof *next); /* per heap node: children visited */
  out->parent = malloc((size_t)n * sizeof *out->parent);
  out->nchild = calloc((size_t)n, sizeof *out->nchild);
  out->child = malloc((size_t)n * (size_t)d * sizeof *out->child);
  if (!inorder || !stack || !next || !out->parent || !out->nchild || !out->child) {
    free(inorder);
    free(stack);
    free(next);
    hpl__plan_free(out);
    return HPL_ENOMEM;
  }
  /* Heap layout: the children of heap node h are d*h+1 .. d*h+d. In-order:
   * first child's subtree, the node, then the other children's subtrees.
   * Iterative, so a long chain does not recurse n deep. */
  int sp = 0, slot = 0;
  stack[sp++] = 0;
  while (sp > 0) {
    int h = stack[sp - 1];
    int k = next[h];
    long long c = (long long)d * h + 1 + k;
    if (k == 1 || (k == 0 && c >= n)) {
      /* first child done (or none): the node itself comes now */
      if (k == 0) next[h] = 1, k = 1, c = (long long)d * h + 2;
      inorder[h] = slot++;
    }
    if (k < d && c < n) {
      next[h] = k + 1;
      stack[sp++] = (int)c;
    } else {
      sp--;
    }
  }
  for (int h = 0; h < n; h++) {
    int s = inorder[h];
    out->parent[s] = h == 0 ? -1 : inorder[(h - 1) / d];
    for (int k = 0; k < d; k++) {
      long long c = (long long)d * h + 1 + k;
      if (c >= n) break;
      out->child[s * d + out->nchild[s]++] = inorder[c];
    }
  }
  out->n = n;
  out->degree = d;
  out->root = inorder[0];
  free(inorder);
  free(stack);
  free(next);
  return 0;
}

int hpl__plan_make(int n, double S, double L, double B, hpl__plan *out) {
  int d = hpl__plan_best_degree(n, S, L, B);
  int rc = hpl__plan_build(n, d, out);
  if (rc == 0) out->cost = hpl__plan_cost(d, n, S, L, B);
  return rc;
}
