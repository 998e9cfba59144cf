#ifndef CX_CPU_H
#define CX_CPU_H

#include "../../core/backend.h"

/* The CPU backend: the reference backend every other one is checked against. f32 kernels; oneDNN
 * for conv / matmul / batch norm / pooling, hand-vectorised C with OpenMP for the rest. */

const cx_backend *cx_backend_cpu(void);

/* NULL-terminated kernel tables, one per file family in kernels/cpu/. */
extern const cx_kernel cx_cpu_eltwise[], cx_cpu_activation[], cx_cpu_conv[], cx_cpu_norm[], cx_cpu_layer_norm[], cx_cpu_gather[], cx_cpu_select[], cx_cpu_compare[], cx_cpu_pool[], cx_cpu_linear[], cx_cpu_shape[], cx_cpu_reduce[], cx_cpu_loss[], cx_cpu_optim[], cx_cpu_quant[],
    cx_cpu_qlinear[];

/* Contiguous f32 data of a kernel argument. */
static inline float *cx_f32(const cx_tensor *t) { return (float *)t->data; }

#endif
