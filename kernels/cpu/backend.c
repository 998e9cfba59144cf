#include <stdlib.h>
#include <string.h>

#include "../../core/op.h"
#include "cpu.h"

static const cx_kernel *const families[] = {
    cx_cpu_eltwise, cx_cpu_activation, cx_cpu_conv, cx_cpu_norm, cx_cpu_layer_norm, cx_cpu_gather, cx_cpu_select, cx_cpu_compare, cx_cpu_pool, cx_cpu_linear, cx_cpu_shape, cx_cpu_reduce, cx_cpu_loss, cx_cpu_optim, cx_cpu_quant,
    cx_cpu_qlinear,
};

static const cx_kernel *find_kernel(const cx_backend *b, const cx_node *n, const cx_tensor *in,
                                    int n_in) {
  (void)b;
  (void)in;
  (void)n_in;
  return cx_kernel_lookup(families, sizeof families / sizeof *families, n);
}

/* 64-byte alignment: AVX-512 loads and oneDNN's preferred alignment. */
static void *cpu_alloc(size_t bytes) {
  void *p = NULL;
  return posix_memalign(&p, 64, bytes ? (bytes + 63) / 64 * 64 : 64) ? NULL : p;
}

static void cpu_memset_zero(void *p, size_t bytes, cx_stream *s) {
  (void)s;
  memset(p, 0, bytes);
}

static cx_status cpu_copy(void *dst, cx_device_kind dk, const void *src, cx_device_kind sk,
                          size_t bytes, cx_stream *s) {
  (void)s;
  if (dk != CX_DEVICE_CPU || sk != CX_DEVICE_CPU)
    return cx_fail(CX_ERR_ARG, "the CPU backend copies only host memory");
  memmove(dst, src, bytes);
  return CX_OK;
}

static cx_status cpu_sync(cx_stream *s) {
  (void)s;
  return CX_OK;
}

/* bf16 autocast needs the AVX512-BF16 instructions: oneDNN would otherwise emulate them (or take
 * its reference loops), slower than f32, so such a run is refused rather than silently slow.
 * CX_CPU_NO_BF16=1 pretends they are missing, to test that refusal. */
static bool cpu_has_bf16(void) {
  const char *off = getenv("CX_CPU_NO_BF16");
  if (off && strcmp(off, "0") != 0) return false;
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

static cx_status cpu_check_precision(const cx_backend *b, cx_precision p) {
  (void)b;
  if (p == CX_PRECISION_F32) return CX_OK;
  if (p == CX_PRECISION_BF16)
    return cpu_has_bf16() ? CX_OK
                          : cx_fail(CX_ERR_UNSUPPORTED, "bf16 on the CPU needs the AVX512-BF16 "
                                    "instructions, which this CPU lacks; use fp32");
  return cx_fail(CX_ERR_UNSUPPORTED, "fp16 needs a CUDA device or a CPU with AVX512-FP16, which "
                 "the CPU backend does not use; on CPUs, bf16 is the reduced precision");
}

static const cx_backend cpu = {
    .name = "cpu",
    .device = CX_DEVICE_CPU,
    .find_kernel = find_kernel,
    .alloc = cpu_alloc,
    .free = free,
    .memset_zero = cpu_memset_zero,
    .copy_async = cpu_copy,
    .sync = cpu_sync,
    .check_precision = cpu_check_precision,
};

const cx_backend *cx_backend_cpu(void) { return &cpu; }
