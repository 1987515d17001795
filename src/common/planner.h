/*
 * planner.h - shape of a reduce tree (pure code, unit-tested).
 *
 * n objects of S bytes are reduced through a d-ary tree whose inner nodes
 * combine their children's streams with their own object and stream the
 * result to their parent; the root streams it to the caller (the sink).
 * Cost model (pipelined trees): T(d) = L * hops(d, n) + d * S / B, where
 * hops is the tree's height plus the hop from the root to the sink (a chain,
 * d = 1, has height n - 1) and d * S / B is the time for a node to take in d
 * streams over one link of bandwidth B. Large objects favour the chain,
 * tiny ones the star (d = n - 1).
 *
 * Slots are numbered in in-order (first child's subtree, the node, the other
 * children's subtrees), so filling slots 0, 1, 2, ... in arrival order makes
 * the tree's in-order traversal the arrival order.
 *
 * Callers: the directory's reduces (directory/reduce_int.h), test_planner.
 */
#ifndef HPL_PLANNER_H
#define HPL_PLANNER_H

typedef struct hpl__plan {
  int n;       /* slots */
  int degree;  /* d */
  int root;    /* slot of the root */
  int *parent; /* [n], -1 for the root */
  int *nchild; /* [n] */
  int *child;  /* [n * degree]: children of slot s at child[s * degree + k] */
  double cost; /* T(d) in seconds */
} hpl__plan;

/* Edges from the root down to the deepest leaf of a complete d-ary tree of
 * n nodes (d = 1: n - 1). */
int hpl__plan_height(int d, int n);

/* T(d) for n objects of S bytes, per-hop latency L seconds, bandwidth B
 * bytes per second. */
double hpl__plan_cost(int d, int n, double S, double L, double B);

/* The degree in 1..max(1, n-1) with the lowest cost (ties: the smaller d). */
int hpl__plan_best_degree(int n, double S, double L, double B);

/* Build the in-order-numbered complete d-ary tree of n slots. Returns 0, or
 * HPL_EINVAL (n < 1, d < 1) / HPL_ENOMEM. Free with hpl__plan_free. */
int hpl__plan_build(int n, int d, hpl__plan *out);

/* best degree + build, with out->cost set. */
int hpl__plan_make(int n, double S, double L, double B, hpl__plan *out);

void hpl__plan_free(hpl__plan *p);

#endif
