#ifndef CX_REF_INDEX_H
#define CX_REF_INDEX_H

/* Index arithmetic for the references of the element-wise, reduction and loss families. */

#include "../../core/tensor.h"

/* idx = the multi-index of flat element i of shape s */
void cx_ref_unravel(const cx_shape *s, int64_t i, int64_t *idx);
/* The flat offset in an operand of shape s (right-aligned, size-1 dimensions broadcast) of the
 * element that output index idx (of shape ys) reads. */
int64_t cx_ref_broadcast_offset(const cx_shape *ys, const int64_t *idx, const cx_shape *s);

#endif
