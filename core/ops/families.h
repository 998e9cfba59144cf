#ifndef CX_OPS_FAMILIES_H
#define CX_OPS_FAMILIES_H

#include "../op.h"

/* NULL-terminated op lists, one per file in core/ops/. */
extern const cx_op_def *const cx_ops_eltwise[];
extern const cx_op_def *const cx_ops_activation[];
extern const cx_op_def *const cx_ops_conv[];
extern const cx_op_def *const cx_ops_norm[];
extern const cx_op_def *const cx_ops_layer_norm[];
extern const cx_op_def *const cx_ops_gather[];
extern const cx_op_def *const cx_ops_select[];
extern const cx_op_def *const cx_ops_compare[];
extern const cx_op_def *const cx_ops_pool[];
extern const cx_op_def *const cx_ops_linear[];
extern const cx_op_def *const cx_ops_shape[];
extern const cx_op_def *const cx_ops_reduce[];
extern const cx_op_def *const cx_ops_loss[];
extern const cx_op_def *const cx_ops_optim[];
extern const cx_op_def *const cx_ops_quant[];
extern const cx_op_def *const cx_ops_qlinear[];
extern const cx_op_def *const cx_ops_fused[];

#endif
