/*
 * ops.h - element-wise reduction kernels: dst[i] = op(dst[i], src[i]).
 * Plain loops over restrict pointers, compiled with -O3 so the compiler
 * vectorises them. Pure code: used by the stores' reduce trees and rings
 * (store/rdtask.c, store/ring.c) and by the directory for small (inline)
 * reduces (directory/reduce*.c).
 */
#ifndef HPL_OPS_H
#define HPL_OPS_H

#include <stddef.h>

/* Apply `op` (hpl_op) over `nbytes` bytes of `dtype` (hpl_dtype) elements.
 * nbytes must be a multiple of the element size; dst and src must not
 * overlap. Returns 0, or HPL_EINVAL for an unknown op/dtype or a length
 * that is not a whole number of elements. */
int hpl__reduce_apply(int op, int dtype, void *dst, const void *src, size_t nbytes);

/* Name of an op / dtype ("sum", "f32"), or NULL if unknown. */
const char *hpl__op_name(int op);
const char *hpl__dtype_name(int dtype);

#endif
