#ifndef CX_GUARD_H
#define CX_GUARD_H

#include "../../core/backend.h"

/* The guard backend: a test backend whose memory host code cannot touch, so that a machine
 * without a GPU proves code above kernels/ reaches backend memory only through the backend
 * (cx_program_read/write, cx_backend_download/upload/copy), as it must for device memory.
 *
 * Its memory is mmap'd and kept PROT_NONE: a host dereference of a tensor's data dies with
 * SIGSEGV. It runs the CPU backend's kernels, opening a window (every live region readable and
 * writable) around each kernel's run and around its own copies and memsets, so its results are
 * bit for bit the CPU's. A kernel's prepare gets no window: it is given shapes only. It is always
 * on; it has no switch.
 *
 * Its tensors say CX_DEVICE_CPU (core/tensor.h knows CPU and CUDA only): both sides of a copy
 * then say CPU, so copy_async accepts any kinds and tells its own regions by address. A copy or
 * memset that starts inside a region and runs past its end is refused (memset_zero, which returns
 * nothing, reports it at the next sync). Each region ends at a page that stays PROT_NONE even in
 * the window, so a kernel running off the end of one (the arena, the scratch) dies too. */
const cx_backend *cx_backend_guard(void);

/* How many regions are allocated and not freed: tests check that a freed program leaves none. */
int cx_guard_live_regions(void);

#endif
