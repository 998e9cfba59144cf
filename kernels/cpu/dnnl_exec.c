#include "dnnl_exec.h"

#include <stdlib.h>
#include <string.h>

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

void cx_dnnl_exec_release(cx_dnnl_exec *e) {
  for (int k = 0; k < e->n; k++) {
    if (e->a[k].user) dnnl_memory_destroy(e->a[k].user);
    if (e->a[k].inner) dnnl_memory_destroy(e->a[k].inner);
    if (e->a[k].reorder) dnnl_primitive_destroy(e->a[k].reorder);
    free(e->a[k].kept);
  }
  if (e->scratchpad) dnnl_memory_destroy(e->scratchpad);
  if (e->prim) dnnl_primitive_destroy(e->prim);
  if (e->acc.user) dnnl_memory_destroy(e->acc.user);
  if (e->acc.reorder) dnnl_primitive_destroy(e->acc.reorder);
  memset(e, 0, sizeof *e);
  e->acc.input = -1;
}

static cx_status make_reorder(dnnl_primitive_t *r, const cx_node *node,
                              const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to) {
  dnnl_engine_t eng = cx_dnnl_engine();
  dnnl_primitive_desc_t rpd;
  CX_DNNL(dnnl_reorder_primitive_desc_create(&rpd, from, eng, to, eng, NULL), node);
  dnnl_status_t s = dnnl_primitive_create(r, rpd);
  dnnl_primitive_desc_destroy(rpd);
  CX_DNNL(s, node);
  return CX_OK;
}

/* Adds argument `arg` of the primitive, backed by kernel input or output `index` of layout user_md. */
cx_status cx_dnnl_exec_arg(cx_dnnl_exec *e, const cx_node *node, const_dnnl_primitive_desc_t pd, int arg,
                          const dnnl_memory_desc_t *user_md, bool output, int index) {
  dnnl_engine_t eng = cx_dnnl_engine();
  cx_dnnl_arg *x = &e->a[e->n++];
  *x = (cx_dnnl_arg){.arg = arg, .output = output, .index = index};
  CX_DNNL(dnnl_memory_create(&x->user, user_md, eng, DNNL_MEMORY_NONE), node);
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
  if (!md || dnnl_memory_desc_equal(md, user_md)) return CX_OK;
  CX_DNNL(dnnl_memory_create(&x->inner, md, eng, DNNL_MEMORY_NONE), node);
  x->offset = e->scratch;
  e->scratch += align64(dnnl_memory_desc_get_size(md));
  return output ? make_reorder(&x->reorder, node, md, user_md)
                : make_reorder(&x->reorder, node, user_md, md);
}

cx_status cx_dnnl_exec_freeze(cx_dnnl_exec *e, const cx_node *node, int arg) {
  for (int k = 0; k < e->n; k++) {
    cx_dnnl_arg *x = &e->a[k];
    if (x->arg != arg || x->output) continue;
    if (!x->inner) return CX_OK; /* read in place: nothing to keep */
    const dnnl_memory_desc_t *md;
    CX_DNNL(dnnl_memory_get_memory_desc(x->inner, &md), node);
    size_t bytes = align64(dnnl_memory_desc_get_size(md));
    x->kept = aligned_alloc(64, bytes);
    if (!x->kept) return cx_fail(CX_ERR_NOMEM, "node '%s': out of memory for its weights", node->name);
    CX_DNNL(dnnl_memory_set_data_handle(x->inner, x->kept), node);
    /* its scratch slot is the last one when arguments are added in order; give it back then */
    if (x->offset + bytes == e->scratch) e->scratch = x->offset;
    return CX_OK;
  }
  return cx_fail(CX_ERR_ARG, "node '%s': no input argument %d to freeze", node->name, arg);
}

static cx_dnnl_arg *input_arg(const cx_dnnl_exec *e, int arg) {
  for (int k = 0; k < e->n; k++)
    if (e->a[k].arg == arg && !e->a[k].output) return (cx_dnnl_arg *)&e->a[k];
  return NULL;
}

cx_status cx_dnnl_exec_reuse(cx_dnnl_exec *e, const cx_node *node, int arg,
                             const cx_dnnl_exec *from, int from_arg) {
  cx_dnnl_arg *x = input_arg(e, arg);
  const cx_dnnl_arg *f = input_arg(from, from_arg);
  if (!x || !f || !x->inner || !f->inner || x->kept || f->kept || f->reused ||
      x->index != f->index)
    return CX_OK;
  const dnnl_memory_desc_t *xm, *fm;
  CX_DNNL(dnnl_memory_get_memory_desc(x->inner, &xm), node);
  CX_DNNL(dnnl_memory_get_memory_desc(f->inner, &fm), node);
  if (!dnnl_memory_desc_equal(xm, fm)) return CX_OK;
  /* its own slot is the last one when arguments are added in order; give it back then */
  if (x->offset + align64(dnnl_memory_desc_get_size(xm)) == e->scratch) e->scratch = x->offset;
  x->reused = true;
  x->offset = from->base + f->offset;
  e->base = from->base + from->scratch;
  return CX_OK;
}

/* Makes the primitive descriptor (scratchpad owned by us) and the primitive; the caller adds the
 * tensor arguments, then destroys *pd. */
cx_status cx_dnnl_exec_create(cx_dnnl_exec *e, const cx_node *node, const_dnnl_op_desc_t desc,
                              const_dnnl_primitive_attr_t given, const_dnnl_primitive_desc_t hint,
                              dnnl_primitive_desc_t *pd) {
  dnnl_engine_t eng = cx_dnnl_engine();
  dnnl_primitive_attr_t attr;
  e->acc.input = -1;
  if (!eng) return CX_ERR_BACKEND;
  CX_DNNL(given ? dnnl_primitive_attr_clone(&attr, given) : dnnl_primitive_attr_create(&attr), node);
  dnnl_status_t s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (s == dnnl_success) s = dnnl_primitive_desc_create(pd, desc, attr, eng, hint);
  dnnl_primitive_attr_destroy(attr);
  CX_DNNL(s, node);
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(*pd, dnnl_query_scratchpad_md, 0);
  size_t bytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
  e->scratch = align64(bytes);
  if (bytes) s = dnnl_memory_create(&e->scratchpad, smd, eng, DNNL_MEMORY_NONE);
  if (s == dnnl_success) s = dnnl_primitive_create(&e->prim, *pd);
  if (s != dnnl_success) {
    dnnl_primitive_desc_destroy(*pd);
    *pd = NULL;
    return cx_fail(CX_ERR_BACKEND, "creating the oneDNN primitive failed (status %d) in node '%s'",
                   (int)s, node->name);
  }
  return CX_OK;
}

static const cx_dnnl_arg *dst_arg(const cx_dnnl_exec *e) {
  for (int k = 0; k < e->n; k++)
    if (e->a[k].arg == DNNL_ARG_DST && e->a[k].output && e->a[k].index == 0) return &e->a[k];
  return NULL;
}

cx_status cx_dnnl_exec_accumulate(cx_dnnl_exec *e, const cx_node *node,
                                  const dnnl_memory_desc_t *user_md, int input) {
  const cx_dnnl_arg *d = dst_arg(e);
  if (!d) return cx_fail(CX_ERR_ARG, "node '%s': an accumulating primitive needs its DST first",
                         node->name);
  const dnnl_memory_desc_t *to;
  CX_DNNL(dnnl_memory_get_memory_desc(d->inner ? d->inner : d->user, &to), node);
  e->acc.input = input;
  e->acc.bytes = dnnl_memory_desc_get_size(user_md);
  CX_DNNL(dnnl_memory_create(&e->acc.user, user_md, cx_dnnl_engine(), DNNL_MEMORY_NONE), node);
  if (dnnl_memory_desc_equal(to, user_md)) return CX_OK;
  return make_reorder(&e->acc.reorder, node, user_md, to);
}

/* Fills the destination (whose handles are set) from the accumulated input; own: e's part of the
 * scratch. */
static cx_status run_accumulate(const cx_dnnl_exec *e, const cx_kernel_args *a, char *own,
                                dnnl_stream_t st) {
  const cx_dnnl_arg *d = dst_arg(e);
  const void *src = a->in[e->acc.input].data;
  void *dst = d->inner ? own + d->offset : a->out[0].data;
  if (!e->acc.reorder) {
    if (src != dst) memcpy(dst, src, e->acc.bytes);
    return CX_OK;
  }
  if (src == dst) /* the layout pass gives an accumulated input and its output one layout */
    return cx_fail(CX_ERR_ARG, "node '%s': summed input and output share a buffer in two layouts",
                   a->node->name);
  CX_DNNL(dnnl_memory_set_data_handle(e->acc.user, (void *)src), a->node);
  dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, e->acc.user},
                          {DNNL_ARG_TO, d->inner ? d->inner : d->user}};
  CX_DNNL(dnnl_primitive_execute(e->acc.reorder, st, 2, r), a->node);
  return CX_OK;
}

static cx_status run_reorder(const cx_dnnl_arg *x, dnnl_stream_t st, const cx_node *node) {
  dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, x->output ? x->inner : x->user},
                          {DNNL_ARG_TO, x->output ? x->user : x->inner}};
  CX_DNNL(dnnl_primitive_execute(x->reorder, st, 2, r), node);
  return CX_OK;
}

/* Points every memory at this run's buffers, reorders the inputs in, runs, reorders the outputs out. */
cx_status cx_dnnl_exec_run(cx_dnnl_exec *e, const cx_kernel_args *a) {
  dnnl_stream_t st = cx_dnnl_stream();
  char *scratch = a->scratch, *own = scratch + e->base;
  dnnl_exec_arg_t args[CX_DNNL_MAX_ARGS + 1];
  int n = 0;
  if (!st) return CX_ERR_BACKEND;
  if (e->scratchpad) {
    CX_DNNL(dnnl_memory_set_data_handle(e->scratchpad, own), a->node);
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratchpad};
  }
  for (int k = 0; k < e->n; k++) {
    cx_dnnl_arg *x = &e->a[k];
    CX_DNNL(dnnl_memory_set_data_handle(x->user, (x->output ? a->out : a->in)[x->index].data),
            a->node);
    if (x->inner && !x->kept)
      CX_DNNL(dnnl_memory_set_data_handle(x->inner, (x->reused ? scratch : own) + x->offset),
              a->node);
    if (x->inner && !x->output && !x->reused && !(x->kept && x->filled))
      CX_TRY(run_reorder(x, st, a->node));
    if (x->kept) x->filled = true;
    args[n++] = (dnnl_exec_arg_t){x->arg, x->inner ? x->inner : x->user};
  }
  if (e->acc.input >= 0) CX_TRY(run_accumulate(e, a, own, st));
  CX_DNNL(dnnl_primitive_execute(e->prim, st, n, args), a->node);
  for (int k = 0; k < e->n; k++)
    if (e->a[k].inner && e->a[k].output) CX_TRY(run_reorder(&e->a[k], st, a->node));
  CX_DNNL(dnnl_stream_wait(st), a->node);
  return CX_OK;
}

