/* MAP_ANONYMOUS is not in POSIX 2008; glibc gives it under _DEFAULT_SOURCE. */
#define _DEFAULT_SOURCE

#include "guard.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../core/op.h"
#include "../cpu/cpu.h"

enum { ALIGN = 64 }; /* what the CPU backend gives: AVX-512 loads, oneDNN's preference */

/* Regions this large are mapped in transparent huge pages (2 MiB on x86-64): mprotect then
 * changes one entry per 2 MiB instead of 512, and a window on ResNet-20's 48 MiB arena costs
 * about 10 us instead of 8 ms. */
#define HUGE_BYTES ((size_t)2 << 20)

/* One mapping: `open_bytes` of pages the window opens, then one page that stays PROT_NONE. The
 * caller's `bytes` (rounded up to ALIGN) end where the open pages end. */
typedef struct region {
  char *base;
  size_t open_bytes;
  char *data;
  size_t bytes;
} region;

/* Every live region, the window's depth and an error memset_zero or free could not return. One
 * lock: kernels run one at a time per program, so it is never contended for long. */
static struct {
  pthread_mutex_t lock;
  region *r;
  int n, cap;
  int depth;
  cx_status pending;
  char pending_msg[512];
} G = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* Keeps the first error of a call that cannot return one, for the next sync. Lock held. */
static void set_pending(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_pending(const char *fmt, ...) {
  if (G.pending != CX_OK) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(G.pending_msg, sizeof G.pending_msg, fmt, ap);
  va_end(ap);
  G.pending = CX_ERR_ARG;
}

/* Lock held. mprotect of a whole mapping we made fails only on a broken mapping: reported. */
static cx_status protect_all(int prot) {
  for (int i = 0; i < G.n; i++)
    if (mprotect(G.r[i].base, G.r[i].open_bytes, prot) != 0)
      return cx_fail(CX_ERR_BACKEND, "guard backend: mprotect of a %zu-byte region failed",
                     G.r[i].bytes);
  return CX_OK;
}

/* The window: every live region readable and writable until the matching close. Counted, so a
 * copy inside a kernel's window, or kernels of programs on two threads, nest: the memory closes
 * when the last one leaves. All regions open, not only those the kernel's arguments lie in:
 * kernels also use the shared scratch and what their state points at. */
static cx_status window_open(void) {
  pthread_mutex_lock(&G.lock);
  cx_status s = G.depth++ == 0 ? protect_all(PROT_READ | PROT_WRITE) : CX_OK;
  pthread_mutex_unlock(&G.lock);
  return s;
}

static cx_status window_close(void) {
  pthread_mutex_lock(&G.lock);
  cx_status s = --G.depth == 0 ? protect_all(PROT_NONE) : CX_OK;
  pthread_mutex_unlock(&G.lock);
  return s;
}

/* -1: [p, p + bytes) is host memory; else the region it lies in. Lock held. A range that starts
 * in a region and leaves it, or that covers a region's start, is refused (-2, message set). */
static int find_region(const void *p, size_t bytes, const char *what) {
  const char *c = p;
  for (int i = 0; i < G.n; i++) {
    const region *r = &G.r[i];
    bool starts_in = c >= r->data && c < r->data + r->bytes;
    if (starts_in && bytes <= (size_t)(r->data + r->bytes - c)) return i;
    if (starts_in || (c < r->data && bytes > (size_t)(r->data - c))) {
      cx_fail(CX_ERR_ARG, "guard backend: %s of %zu bytes at %p overruns the %zu-byte region at "
              "%p", what, bytes, p, r->bytes, (void *)r->data);
      return -2;
    }
  }
  return -1;
}

/* open + one page, PROT_NONE; when huge (open a multiple of HUGE_BYTES), the open pages start
 * on a huge-page boundary (the excess mapped to find one is given back). */
static char *map_region(size_t open, bool huge) {
  size_t page = page_size(), slack = huge ? HUGE_BYTES : 0;
  char *m = mmap(NULL, open + page + slack, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
  if (!slack) return m;
  char *base = (char *)round_up((uintptr_t)m, HUGE_BYTES);
  if (base > m) munmap(m, (size_t)(base - m));
  if (m + slack > base) munmap(base + open + page, (size_t)(m + slack - base));
  madvise(base, open, MADV_HUGEPAGE); /* a hint: without it, windows are only slower */
  return base;
}

static void *guard_alloc(size_t bytes) {
  size_t want = round_up(bytes ? bytes : ALIGN, ALIGN);
  bool huge = want >= HUGE_BYTES;
  size_t open = round_up(want, huge ? HUGE_BYTES : page_size());
  char *base = map_region(open, huge);
  if (!base) return NULL;
  pthread_mutex_lock(&G.lock);
  bool ok = G.n < G.cap;
  if (!ok) {
    int cap = G.cap ? 2 * G.cap : 16;
    region *r = realloc(G.r, sizeof *r * (size_t)cap);
    if (r) G.r = r, G.cap = cap, ok = true;
  }
  /* allocated while a window is open (by a kernel, or beside another thread's): open too */
  if (ok && G.depth > 0) ok = mprotect(base, open, PROT_READ | PROT_WRITE) == 0;
  if (ok) G.r[G.n++] = (region){.base = base, .open_bytes = open, .data = base + open - want,
                                .bytes = want};
  pthread_mutex_unlock(&G.lock);
  if (!ok) munmap(base, open + page_size());
  return ok ? base + open - want : NULL;
}

static void guard_free(void *p) {
  if (!p) return;
  pthread_mutex_lock(&G.lock);
  int i = 0;
  while (i < G.n && G.r[i].data != p) i++;
  if (i < G.n) {
    munmap(G.r[i].base, G.r[i].open_bytes + page_size());
    G.r[i] = G.r[--G.n];
  } else {
    set_pending("guard backend: free of %p, which is not a live region", p);
  }
  pthread_mutex_unlock(&G.lock);
}

int cx_guard_live_regions(void) {
  pthread_mutex_lock(&G.lock);
  int n = G.n;
  pthread_mutex_unlock(&G.lock);
  return n;
}

/* Both ends checked against the regions before the window opens. */
static cx_status check_ranges(void *dst, const void *src, size_t bytes, const char *what) {
  pthread_mutex_lock(&G.lock);
  bool ok = find_region(dst, bytes, what) != -2 && (!src || find_region(src, bytes, what) != -2);
  pthread_mutex_unlock(&G.lock);
  return ok ? CX_OK : CX_ERR_ARG;
}

static cx_status guard_copy(void *dst, cx_device_kind dk, const void *src, cx_device_kind sk,
                            size_t bytes, cx_stream *s) {
  (void)dk, (void)sk, (void)s; /* every kind is host-addressable here; regions tell by address */
  if (bytes == 0) return CX_OK;
  CX_TRY(check_ranges(dst, src, bytes, "copy"));
  CX_TRY(window_open());
  memmove(dst, src, bytes);
  return window_close();
}

static void guard_memset_zero(void *p, size_t bytes, cx_stream *s) {
  (void)s;
  if (bytes == 0) return;
  cx_status st = check_ranges(p, NULL, bytes, "memset");
  if (st == CX_OK) st = window_open();
  if (st == CX_OK) {
    memset(p, 0, bytes);
    st = window_close();
  }
  if (st != CX_OK) {
    pthread_mutex_lock(&G.lock);
    set_pending("%s", cx_last_error());
    pthread_mutex_unlock(&G.lock);
  }
}

/* Copies are done when they return; sync reports what memset_zero and free could not. */
static cx_status guard_sync(cx_stream *s) {
  (void)s;
  pthread_mutex_lock(&G.lock);
  cx_status st = G.pending;
  char msg[sizeof G.pending_msg];
  memcpy(msg, G.pending_msg, sizeof msg);
  G.pending = CX_OK;
  pthread_mutex_unlock(&G.lock);
  return st == CX_OK ? CX_OK : cx_fail(st, "%s", msg);
}

/* ---- kernels: the CPU's, run inside the window ---------------------------------------------- */

/* A wrapper's state: the CPU kernel it runs and that kernel's own state. prepare finds the CPU
 * kernel again by the node (the CPU's lookup depends on the node alone), since a kernel's
 * functions are not told which table entry they belong to. */
typedef struct wrap_state {
  const cx_kernel *cpu;
  void *state;
} wrap_state;

static const cx_kernel *cpu_kernel(const cx_node *n, const cx_tensor *in, int n_in) {
  const cx_backend *cpu = cx_backend_cpu();
  return cpu->find_kernel(cpu, n, in, n_in);
}

/* The result of f unless it failed, then the window's close (whose failure wins only if f's
 * did not). */
static cx_status closed(cx_status f) {
  cx_status c = window_close();
  return f != CX_OK ? f : c;
}

/* Not windowed: core/backend.h gives prepare shapes only (data not yet valid), and on a device
 * prepare is host code, so a prepare that read a tensor would fail there; here it dies. No CPU
 * prepare reads one (they build oneDNN primitives from shapes). */
static cx_status wrap_prepare(const cx_kernel_args *a, void **state, size_t *scratch_bytes) {
  wrap_state *w = calloc(1, sizeof *w);
  if (!w) return cx_fail(CX_ERR_NOMEM, "out of memory");
  w->cpu = cpu_kernel(a->node, a->in, a->n_in);
  cx_status s = w->cpu ? CX_OK
                : cx_fail(CX_ERR_UNSUPPORTED, "guard backend: no CPU kernel for %s",
                          a->node->op->name);
  if (s == CX_OK && w->cpu->prepare) s = w->cpu->prepare(a, &w->state, scratch_bytes);
  if (s != CX_OK) {
    if (w->state && w->cpu->release) w->cpu->release(w->state);
    free(w);
    return s;
  }
  *state = w;
  return CX_OK;
}

static cx_status wrap_run(const cx_kernel_args *a) {
  const wrap_state *w = a->state;
  cx_kernel_args b = *a;
  b.state = w->state;
  CX_TRY(window_open());
  return closed(w->cpu->run(&b));
}

static void wrap_release(void *state) {
  wrap_state *w = state;
  if (w->state && w->cpu->release) w->cpu->release(w->state);
  free(w);
}

/* One wrapper per CPU kernel met, made on first use and kept for the process: the layout pass
 * reads a kernel's layouts flags and messages its op name, so they are the CPU kernel's. */
typedef struct wrapper {
  cx_kernel k;
  const cx_kernel *cpu;
  struct wrapper *next;
} wrapper;

static struct {
  pthread_mutex_t lock;
  wrapper *head;
} W = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const cx_kernel *find_kernel(const cx_backend *b, const cx_node *n, const cx_tensor *in,
                                    int n_in) {
  (void)b;
  const cx_kernel *cpu = cpu_kernel(n, in, n_in);
  if (!cpu) return NULL;
  pthread_mutex_lock(&W.lock);
  wrapper *w = W.head;
  while (w && w->cpu != cpu) w = w->next;
  if (!w && (w = malloc(sizeof *w))) {
    *w = (wrapper){.k = {.op = cpu->op, .prepare = wrap_prepare, .run = wrap_run,
                         .release = wrap_release, .layouts = cpu->layouts,
                         .act_dtypes = cpu->act_dtypes},
                   .cpu = cpu, .next = W.head};
    W.head = w;
  }
  pthread_mutex_unlock(&W.lock);
  return w ? &w->k : NULL;
}

static cx_status guard_check_precision(const cx_backend *b, cx_precision p) {
  (void)b;
  const cx_backend *cpu = cx_backend_cpu();
  return cpu->check_precision(cpu, p);
}

static const cx_backend guard = {
    .name = "guard",
    .device = CX_DEVICE_CPU,
    .find_kernel = find_kernel,
    .alloc = guard_alloc,
    .free = guard_free,
    .memset_zero = guard_memset_zero,
    .copy_async = guard_copy,
    .sync = guard_sync,
    .check_precision = guard_check_precision,
};

const cx_backend *cx_backend_guard(void) { return &guard; }
