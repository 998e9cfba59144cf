#ifndef CX_CPU_TUNE_H
#define CX_CPU_TUNE_H

#include <stdbool.h>
#include <stddef.h>

#include "../../core/backend.h"

/* Choices a kernel makes by measuring, once per shape and machine (as TensorRT's timing cache and
 * cuDNN's benchmark mode do): which of two convolution algorithms is faster depends on the CPU's
 * FMA width, its caches and the shape, in ways no fixed rule got right on both of the machines
 * measured (docs/ARCHITECTURE.md "Winograd").
 *
 * A choice, once made, is kept in memory and appended to a timing cache file, so that every later
 * program and process on this machine makes the same one (a run resumed from a checkpoint
 * computes what the uninterrupted run did). When two processes measure the same key at once,
 * both adopt the first line written. The file is $CX_TIMING_CACHE, else
 * $XDG_CACHE_HOME/compress/timing-cache.txt, else ~/.cache/compress/timing-cache.txt;
 * CX_TIMING_CACHE=off keeps choices in memory only. A file that cannot be read or written costs
 * only the measurements. Each key starts with the CPU's identity and oneDNN's version. */

/* The choice stored under key (a string without spaces or newlines): true and *choice, or false
 * when none has been made. */
bool cx_tune_lookup(const char *key, int *choice);

/* Records `choice` under key and returns the choice this machine keeps: the first recorded. */
int cx_tune_record(const char *key, int choice);

/* Runs kernel `run` with `state` on zeroed stand-ins for every tensor of `a` (same shapes, strides
 * and types) and a scratch of scratch_bytes: once to warm up, then up to 3 times. *ms: the fastest
 * run's milliseconds. */
cx_status cx_tune_time(const cx_kernel_args *a, cx_status (*run)(const cx_kernel_args *),
                       void *state, size_t scratch_bytes, double *ms);

#endif
