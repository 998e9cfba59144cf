#include "program.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "act_dtype.h"
#include "autodiff.h"
#include "fuse.h"
#include "graph_fold_bn.h"
#include "graph_shapes.h"
#include "infer_fuse.h"
#include "infer_patterns.h"
#include "layout.h"
#include "node_timer.h"
#include "op.h"
#include "plan.h"
#include "quant_fuse.h"
#include "recompute.h"

enum { ALIGN = 64 };

struct cx_program {
  cx_graph *g; /* forward nodes, then backward nodes, in schedule order */
  int n_fwd;
  const cx_backend *be;
  cx_stream *stream; /* the backend's, for every kernel and copy of this program; NULL on the CPU */
  bool training;
  cx_precision precision;
  uint64_t seed, step;
  cx_batch_rows rows;
  cx_tensor *t;          /* by value id */
  cx_tensor **node_in;   /* by node: its input tensors */
  const cx_kernel **kernel;
  void **state;
  void *arena, *persist, *scratch;
  cx_memory_plan mem;
  cx_buffer_info *bufs;
  int n_bufs;
  int n_params;
  int n_channels_last; /* values the layout pass made channels-last */
  int n_bf16_acts;     /* values the dtype pass made bf16 */
  int n_bn_folded;     /* BatchNormalization nodes folded into weights (inference) */
  int n_fused;         /* nodes the inference fusions removed */
  int *param_value, *grad_value; /* by parameter index */
  int *grad_ready_at;            /* by parameter: node after which its gradient is final */
  cx_grad_ready_fn hook;
  void *hook_user;
  cx_replicas replicas; /* count 0: none set */
  bool local_only;      /* diagnosing one replica's step: no collective calls */
  cx_node_timer *timer; /* while profiling */
  int *key_node;          /* by node: the node whose RNG key it uses (recomputed clones); or NULL */
};

static size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* Every allocation of compile is checked; what was allocated is freed by cx_program_free. */
static cx_status nomem(const char *what) {
  return cx_fail(CX_ERR_NOMEM, "compile: out of memory (%s)", what);
}

static size_t value_bytes(const cx_value *v) {
  return (size_t)cx_shape_numel(&v->shape) * cx_dtype_size(v->dtype);
}

/* Reorders nodes topologically, keeping the given order where it is already valid. */
static cx_status schedule(cx_graph *g) {
  int n = g->n_nodes;
  int *order = malloc(sizeof(int) * ((size_t)n + 1));
  cx_node *sorted = malloc(sizeof(cx_node) * ((size_t)n + 1));
  cx_status s = order && sorted ? cx_graph_topo_order(g, order) : nomem("schedule");
  if (s == CX_OK) {
    for (int i = 0; i < n; i++) sorted[i] = g->nodes[order[i]];
    memcpy(g->nodes, sorted, sizeof(cx_node) * (size_t)n);
    for (int i = 0; i < n; i++)
      for (int k = 0; k < g->nodes[i].n_out; k++) g->values[g->nodes[i].out[k]].producer = i;
  }
  free(order);
  free(sorted);
  return s;
}

/* Training programs use each op's training form (batch statistics, dropout masks). */
static cx_status use_train_ops(cx_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    cx_node *n = &g->nodes[i];
    if (!n->op->train_op) continue;
    const cx_op_def *t = cx_op_find(n->op->train_op);
    if (!t) return cx_fail(CX_ERR_ARG, "training form '%s' of op %s is not registered",
                           n->op->train_op, n->op->name);
    int want = t->min_out;
    if (n->n_out < want) {
      int *out = realloc(n->out, sizeof(int) * (size_t)want);
      if (!out) return nomem("training form outputs");
      n->out = out;
      for (int k = n->n_out; k < want; k++) {
        char base[600];
        snprintf(base, sizeof base, "%s:saved%d", n->name, k);
        CX_TRY(cx_graph_reserve(g, 0, 1));
        n = &g->nodes[i];
        char *unique = cx_graph_unique_name(g, base);
        int id = g->n_values++;
        g->values[id] = (cx_value){.name = unique, .kind = CX_VALUE_ACT, .dtype = CX_F32,
                                   .producer = i};
        n->out[k] = id;
      }
      n->n_out = want;
    }
    n->op = t;
  }
  return CX_OK;
}

/* The one shape inference (core/graph_shapes.h), into the compiled graph's values: from == 0, the
 * whole (forward) graph for the batch size, whose inputs then hold it; otherwise the nodes from
 * `from` on (the backward pass, appended to an inferred forward one). */
static cx_status infer_values(cx_graph *g, int64_t batch, int from) {
  cx_shape *shape = malloc(sizeof(cx_shape) * ((size_t)g->n_values + 1));
  cx_dtype *dtype = malloc(sizeof(cx_dtype) * ((size_t)g->n_values + 1));
  cx_status s = shape && dtype ? CX_OK : nomem("shapes");
  for (int v = 0; s == CX_OK && v < g->n_values; v++) {
    shape[v] = g->values[v].shape;
    dtype[v] = g->values[v].dtype;
  }
  if (s == CX_OK && from == 0) s = cx_graph_infer_shapes(g, batch, shape, dtype);
  for (int i = from; s == CX_OK && from > 0 && i < g->n_nodes; i++)
    s = cx_graph_infer_node(g, i, shape, dtype);
  for (int v = 0; s == CX_OK && v < g->n_values; v++) {
    g->values[v].shape = shape[v];
    g->values[v].dtype = dtype[v];
  }
  free(shape);
  free(dtype);
  return s;
}

static int add_seed(cx_graph *g, const char *name, const cx_value *like, cx_value_kind kind) {
  cx_shape s = like->shape;
  int id = kind == CX_VALUE_INPUT ? cx_graph_input(g, name, CX_F32, &s)
                                  : cx_graph_init(g, CX_VALUE_CONST, name, CX_F32, &s, NULL);
  if (id >= 0 && kind == CX_VALUE_CONST) {
    float *p = g->values[id].init;
    for (int64_t i = 0; i < cx_shape_numel(&s); i++) p[i] = 1.0f;
  }
  return id;
}

static cx_status build_backward(cx_program *p, const char *loss) {
  cx_graph *g = p->g;
  int n_seeds = 0, n_values0 = g->n_values;
  int *sv = malloc(sizeof(int) * ((size_t)g->n_outputs + 1));
  int *sg = malloc(sizeof(int) * ((size_t)g->n_outputs + 1));
  char name[600];
  if (!sv || !sg) {
    free(sv);
    free(sg);
    return nomem("gradient seeds");
  }
  if (loss) {
    int l = cx_graph_find_value(g, loss);
    if (l < 0) {
      free(sv);
      free(sg);
      return cx_fail(CX_ERR_ARG, "loss value '%s' is not in the graph", loss);
    }
    snprintf(name, sizeof name, "%s@seed", loss);
    sv[0] = l;
    sg[n_seeds++] = add_seed(g, name, &g->values[l], CX_VALUE_CONST);
  } else {
    for (int k = 0; k < g->n_outputs; k++) {
      sv[n_seeds] = g->outputs[k];
      snprintf(name, sizeof name, "%s@grad", g->values[g->outputs[k]].name);
      sg[n_seeds++] = add_seed(g, name, &g->values[g->outputs[k]], CX_VALUE_INPUT);
    }
  }
  int *pg = malloc(sizeof(int) * ((size_t)g->n_values + 1));
  cx_status s = pg ? cx_graph_status(g) : nomem("parameter gradients");
  if (s == CX_OK) s = cx_autodiff(g, p->n_fwd, sv, sg, n_seeds, pg);
  if (s == CX_OK) {
    p->param_value = malloc(sizeof(int) * ((size_t)n_values0 + 1));
    p->grad_value = malloc(sizeof(int) * ((size_t)n_values0 + 1));
    if (!p->param_value || !p->grad_value) s = nomem("parameter table");
  }
  if (s == CX_OK) {
    for (int v = 0; v < n_values0 && s == CX_OK; v++) {
      if (g->values[v].kind != CX_VALUE_PARAM) continue;
      if (pg[v] < 0) { /* nothing reaches it (an unused initializer): its gradient is zero */
        snprintf(name, sizeof name, "%s@grad", g->values[v].name);
        cx_shape shape = g->values[v].shape;
        pg[v] = cx_graph_init(g, CX_VALUE_CONST, name, CX_F32, &shape, NULL);
        s = cx_graph_status(g);
      }
      p->param_value[p->n_params] = v;
      p->grad_value[p->n_params++] = pg[v];
    }
  }
  free(pg);
  free(sv);
  free(sg);
  return s;
}

/* Every node must have a kernel on the backend; one message lists all that do not. */
static cx_status find_kernels(cx_program *p) {
  cx_graph *g = p->g;
  char missing[1500] = "";
  int n_missing = 0;
  p->kernel = calloc((size_t)g->n_nodes + 1, sizeof *p->kernel);
  p->state = calloc((size_t)g->n_nodes + 1, sizeof *p->state);
  if (!p->kernel || !p->state) return nomem("kernel table");
  for (int i = 0; i < g->n_nodes; i++) {
    p->kernel[i] = p->be->find_kernel(p->be, &g->nodes[i], p->node_in[i], g->nodes[i].n_in);
    if (p->kernel[i]) continue;
    if (n_missing++ < 12) {
      size_t at = strlen(missing);
      snprintf(missing + at, sizeof missing - at, "%s%s (node '%s')", at ? ", " : "",
               g->nodes[i].op->name, g->nodes[i].name);
    }
  }
  if (n_missing)
    return cx_fail(CX_ERR_UNSUPPORTED, "backend '%s' has no kernel for %d node(s): %s%s",
                   p->be->name, n_missing, missing, n_missing > 12 ? ", ..." : "");
  return CX_OK;
}

static bool is_persistent(const cx_program *p, int v) {
  if (p->g->values[v].kind != CX_VALUE_ACT) return true;
  for (int k = 0; k < p->n_params; k++)
    if (p->grad_value[k] == v) return true;
  return false;
}

/* Where a fused node adds into one of its inputs (core/infer_fuse.h: ConvFused's residual) and
 * that input is an arena buffer of the output's size whose last reader is that node, the two
 * values become one request: the output takes the input's buffer (alias[output] = input) and
 * the request lives until the output's last reader. Not where the node reads S as another input
 * too (a conv of x plus x), which it would overwrite while reading. */
static int merge_accumulators(const cx_program *p, cx_plan_request *req, int n_req, int *alias) {
  const cx_graph *g = p->g;
  int *at = malloc(sizeof(int) * ((size_t)g->n_values + 1));
  if (!at) return n_req; /* no merging: every value its own buffer, which is always correct */
  for (int v = 0; v < g->n_values; v++) at[v] = -1;
  for (int r = 0; r < n_req; r++) at[req[r].value] = r;
  for (int i = 0; i < g->n_nodes; i++) {
    int k = cx_infer_fuse_accumulator(&g->nodes[i]);
    if (k < 0) continue;
    int s = g->nodes[i].in[k], y = g->nodes[i].out[0];
    int rs = at[s], ry = at[y];
    bool read_too = false; /* the node also reads S otherwise (as X): it must not write over it */
    for (int j = 0; j < g->nodes[i].n_in; j++)
      read_too = read_too || (j != k && g->nodes[i].in[j] == s);
    if (rs < 0 || ry < 0 || read_too || req[rs].last != i || req[rs].bytes != req[ry].bytes)
      continue;
    req[rs].last = req[ry].last;
    alias[y] = s;
    req[ry] = req[--n_req];
    at[req[ry].value] = ry;
    at[y] = -1;
  }
  free(at);
  return n_req;
}

/* A value's bytes as the passes left it (core/act_dtype.h), or as declared before they ran. */
static size_t planned_bytes(const cx_program *p, int v) {
  return p->t ? cx_tensor_nbytes(&p->t[v]) : value_bytes(&p->g->values[v]);
}

/* The arena's buffers: every value not persistent, live from its producer to its last reader.
 * alias (NULL: no sharing) gets, by value, the value whose buffer it shares, or -1. */
static int arena_requests(const cx_program *p, cx_plan_request *req, int *alias) {
  const cx_graph *g = p->g;
  int nv = g->n_values, nn = g->n_nodes, n_req = 0;
  for (int v = 0; v < nv; v++) {
    if (alias) alias[v] = -1;
    if (is_persistent(p, v)) continue;
    int first = g->values[v].producer, last = first;
    for (int i = first + 1; i < nn; i++)
      for (int k = 0; k < g->nodes[i].n_in; k++)
        if (g->nodes[i].in[k] == v) last = i;
    for (int k = 0; k < g->n_outputs; k++)
      if (g->outputs[k] == v) last = nn; /* readable after the step */
    req[n_req++] = (cx_plan_request){.value = v, .bytes = align_up(planned_bytes(p, v)),
                                     .first = first, .last = last};
  }
  return alias ? merge_accumulators(p, req, n_req, alias) : n_req;
}

/* Every value's tensor as declared, without memory yet: kernels are found and the layout and
 * dtype passes run on these; place_values then gives them their bytes. */
static cx_status value_forms(cx_program *p) {
  const cx_graph *g = p->g;
  p->t = calloc((size_t)g->n_values + 1, sizeof(cx_tensor));
  if (!p->t) return nomem("value table");
  for (int v = 0; v < g->n_values; v++) {
    p->t[v] = cx_tensor_view(g->values[v].dtype, &g->values[v].shape, NULL);
    p->t[v].device.kind = p->be->device;
  }
  return CX_OK;
}

/* Places every value: persistent ones end to end, activations by the liveness planner. */
static cx_status place_values(cx_program *p) {
  cx_graph *g = p->g;
  int nv = g->n_values;
  size_t *off = calloc((size_t)nv + 1, sizeof(size_t));
  cx_plan_request *req = calloc((size_t)nv + 1, sizeof *req);
  int *alias = malloc(sizeof(int) * ((size_t)nv + 1));
  if (!off || !req || !alias) {
    free(off);
    free(req);
    free(alias);
    return nomem("memory plan");
  }
  size_t persist = 0;
  for (int v = 0; v < nv; v++)
    if (is_persistent(p, v)) {
      off[v] = persist;
      persist += align_up(value_bytes(&g->values[v]));
    }
  int n_req = arena_requests(p, req, alias);
  p->bufs = calloc((size_t)n_req + 1, sizeof *p->bufs);
  if (!p->bufs) {
    free(off);
    free(req);
    free(alias);
    return nomem("buffer table");
  }
  p->n_bufs = n_req;
  size_t arena = cx_plan_place(req, n_req, ALIGN);
  for (int b = 0; b < n_req; b++) {
    p->bufs[b] = (cx_buffer_info){.value = req[b].value, .offset = req[b].offset,
                                  .bytes = req[b].bytes, .first = req[b].first,
                                  .last = req[b].last};
    p->mem.unplanned_bytes += req[b].bytes;
  }
  p->mem.arena_bytes = arena;
  if (!p->mem.recomputed_nodes) p->mem.arena_no_recompute_bytes = arena;
  p->mem.persistent_bytes = persist;
  p->mem.n_buffers = n_req;
  p->arena = p->be->alloc(arena ? arena : ALIGN);
  p->persist = p->be->alloc(persist ? persist : ALIGN);
  cx_status s = p->arena && p->persist ? CX_OK
                : cx_fail(CX_ERR_NOMEM, "cannot allocate %zu + %zu bytes", arena, persist);
  for (int b = 0; b < n_req; b++) off[req[b].value] = req[b].offset;
  for (int v = 0; v < nv; v++)
    if (alias[v] >= 0) off[v] = off[alias[v]];
  for (int v = 0; v < nv && s == CX_OK; v++) {
    cx_value *x = &g->values[v];
    char *base = is_persistent(p, v) ? p->persist : p->arena;
    p->t[v].data = base + off[v];
    if (x->init)
      s = p->be->copy_async(p->t[v].data, p->be->device, x->init, CX_DEVICE_CPU, value_bytes(x),
                            p->stream);
    else if (is_persistent(p, v))
      p->be->memset_zero(p->t[v].data, value_bytes(x), p->stream);
  }
  if (s == CX_OK) s = p->be->sync(p->stream);
  free(off);
  free(req);
  free(alias);
  return s;
}

static cx_kernel_args node_args(const cx_program *p, int i) {
  const cx_node *n = &p->g->nodes[i];
  return (cx_kernel_args){.node = n, .in = p->node_in[i], .n_in = n->n_in,
                          .out = p->node_in[i] + n->n_in, .n_out = n->n_out,
                          .state = p->state[i], .scratch = p->scratch, .training = p->training,
                          .precision = p->precision,
                          .seed = p->seed, .step = p->step,
                          .node_index = p->key_node ? p->key_node[i] : i, .rows = p->rows,
                          .recompute = p->key_node && p->key_node[i] != i,
                          .stream = p->stream,
                          .sync_stats = p->replicas.count > 1 && p->replicas.sync_batch_stats &&
                                                !p->local_only
                                            ? &p->replicas
                                            : NULL,
                          .graph = p->g};
}

static void fill_node_tensors(cx_program *p) {
  cx_graph *g = p->g;
  for (int i = 0; i < g->n_nodes; i++) {
    const cx_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) p->node_in[i][k] = p->t[n->in[k]];
    for (int k = 0; k < n->n_out; k++) p->node_in[i][n->n_in + k] = p->t[n->out[k]];
  }
}

static cx_status bind_node_tensors(cx_program *p) {
  cx_graph *g = p->g;
  p->node_in = calloc((size_t)g->n_nodes + 1, sizeof *p->node_in);
  if (!p->node_in) return nomem("node tensors");
  for (int i = 0; i < g->n_nodes; i++) {
    p->node_in[i] = calloc((size_t)(g->nodes[i].n_in + g->nodes[i].n_out) + 1, sizeof(cx_tensor));
    if (!p->node_in[i]) return nomem("node tensors");
  }
  fill_node_tensors(p);
  return CX_OK;
}

/* Channels-last activations where every kernel touching them accepts it (core/layout.h), then,
 * in a bf16 program, bf16 ones (core/act_dtype.h); graph outputs and persistent values stay plain
 * f32, so callers only ever see plain f32 tensors. */
static cx_status choose_forms(cx_program *p) {
  const cx_graph *g = p->g;
  bool *pinned = calloc((size_t)g->n_values + 1, sizeof(bool));
  if (!pinned) return nomem("layouts");
  for (int v = 0; v < g->n_values; v++) pinned[v] = is_persistent(p, v);
  for (int k = 0; k < g->n_outputs; k++) pinned[g->outputs[k]] = true;
  if (cx_layout_enabled()) p->n_channels_last = cx_layout_assign(g, p->kernel, pinned, p->t);
  if (p->precision == CX_PRECISION_BF16 && cx_act_dtype_enabled())
    p->n_bf16_acts = cx_act_dtype_assign(g, p->kernel, pinned, p->t);
  free(pinned);
  return CX_OK;
}

/* Gradient checkpointing: plans the arena as it would be without (for the report), then clones
 * the segments' forward nodes into the backward pass. */
static cx_status recompute_segments(cx_program *p, const cx_compile_opts *o) {
  cx_plan_request *req = calloc((size_t)p->g->n_values + 1, sizeof *req);
  if (!req) return cx_fail(CX_ERR_NOMEM, "out of memory");
  p->mem.arena_no_recompute_bytes = cx_plan_place(req, arena_requests(p, req, NULL), ALIGN);
  free(req);
  return cx_recompute(p->g, p->n_fwd, o->checkpoint_segments, o->n_checkpoint_segments,
                      &p->mem.recomputed_nodes);
}

/* Recomputed clones draw random numbers with their forward node's key. */
static cx_status find_key_nodes(cx_program *p) {
  const cx_graph *g = p->g;
  for (int i = p->n_fwd; i < g->n_nodes; i++) {
    const char *of = cx_node_string(&g->nodes[i], CX_RECOMPUTE_OF, NULL);
    if (!of) continue;
    if (!p->key_node) {
      p->key_node = malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
      if (!p->key_node) return nomem("random keys");
      for (int j = 0; j < g->n_nodes; j++) p->key_node[j] = j;
    }
    for (int j = 0; j < p->n_fwd; j++)
      if (!strcmp(g->nodes[j].name, of)) p->key_node[i] = j;
  }
  return CX_OK;
}

static cx_status prepare_kernels(cx_program *p) {
  size_t scratch = 0;
  for (int i = 0; i < p->g->n_nodes; i++) {
    if (!p->kernel[i]->prepare) continue;
    cx_kernel_args a = node_args(p, i);
    size_t need = 0;
    cx_status s = p->kernel[i]->prepare(&a, &p->state[i], &need);
    if (s != CX_OK) {
      if (!strstr(cx_last_error(), p->g->nodes[i].name))
        cx_error_prefix("node '%s' (%s)", p->g->nodes[i].name, p->g->nodes[i].op->name);
      return s;
    }
    if (need > scratch) scratch = need;
  }
  p->mem.scratch_bytes = scratch;
  p->scratch = p->be->alloc(scratch ? scratch : ALIGN);
  return p->scratch ? CX_OK : cx_fail(CX_ERR_NOMEM, "cannot allocate %zu scratch bytes", scratch);
}

static cx_status find_grad_ready(cx_program *p) {
  p->grad_ready_at = malloc(sizeof(int) * ((size_t)p->n_params + 1));
  if (!p->grad_ready_at) return nomem("gradient-ready table");
  for (int k = 0; k < p->n_params; k++) {
    int v = p->grad_value[k];
    p->grad_ready_at[k] = v >= 0 ? p->g->values[v].producer : -1; /* -1: a zero constant */
  }
  return CX_OK;
}

/* Inference programs fold BatchNormalization into the weights before them (not where the
 * caller will copy unfolded parameters in later): the program's graph becomes the folded one. */
static cx_status fold_batchnorm(cx_program *p, const cx_compile_opts *o) {
  if (o->training || o->params_copied_in || !cx_fuse_enabled()) return CX_OK;
  cx_graph *folded;
  CX_TRY(cx_graph_fold_bn(p->g, false, &folded, &p->n_bn_folded));
  cx_graph_free(p->g);
  p->g = folded;
  return CX_OK;
}

static cx_status compile(cx_program *p, const cx_compile_opts *o) {
  CX_TRY(schedule(p->g));
  if (o->training) CX_TRY(use_train_ops(p->g));
  if (o->training) CX_TRY(cx_fuse_training(p->g));
  CX_TRY(fold_batchnorm(p, o));
  cx_graph *g = p->g;
  CX_TRY(infer_values(g, o->batch, 0));
  /* INT8 runtime: QDQ patterns become int8 ops (core/quant_fuse.h); they are appended, so the
   * graph is ordered and inferred again */
  if (!o->training && cx_quant_fuse_enabled()) {
    CX_TRY(cx_quant_fuse(g, p->be, !o->params_copied_in));
    CX_TRY(schedule(g));
    CX_TRY(infer_values(g, o->batch, 0));
  }
  /* then the float convolutions and Gemms with what follows them (core/infer_fuse.h); a fused
   * conv reads the residual, which may come later in the order, so it is ordered again */
  if (!o->training) {
    int rewritten = 0; /* exporters' GELU and LayerNorm decompositions (core/infer_patterns.h) */
    CX_TRY(cx_infer_patterns(g, &rewritten));
    CX_TRY(cx_infer_fuse(g, p->be, !o->params_copied_in, &p->n_fused));
    p->n_fused += rewritten;
    if (p->n_fused) CX_TRY(schedule(g));
    if (p->n_fused) CX_TRY(infer_values(g, o->batch, 0));
  }
  p->n_fwd = g->n_nodes;
  if (o->training) {
    CX_TRY(build_backward(p, o->loss));
    CX_TRY(infer_values(g, o->batch, p->n_fwd));
    if (o->n_checkpoint_segments > 0) CX_TRY(recompute_segments(p, o));
  } else {
    p->param_value = malloc(sizeof(int) * ((size_t)g->n_values + 1));
    p->grad_value = malloc(sizeof(int) * ((size_t)g->n_values + 1));
    if (!p->param_value || !p->grad_value) return nomem("parameter table");
    for (int v = 0; v < g->n_values; v++)
      if (g->values[v].kind == CX_VALUE_PARAM) {
        p->param_value[p->n_params] = v;
        p->grad_value[p->n_params++] = -1;
      }
  }
  if (p->be->stream_create) CX_TRY(p->be->stream_create(&p->stream));
  CX_TRY(value_forms(p));
  CX_TRY(bind_node_tensors(p));
  CX_TRY(find_kernels(p));
  CX_TRY(choose_forms(p));
  CX_TRY(place_values(p));
  fill_node_tensors(p);
  CX_TRY(find_key_nodes(p));
  CX_TRY(prepare_kernels(p));
  return find_grad_ready(p);
}

cx_status cx_program_compile(const cx_graph *g, const cx_compile_opts *o, cx_program **out) {
  *out = NULL;
  if (!o->backend) return cx_fail(CX_ERR_ARG, "cx_program_compile: no backend given");
  /* A precision the backend cannot compute in is refused, never run as f32 under its label. */
  if (o->precision != CX_PRECISION_F32 && !o->backend->check_precision)
    return cx_fail(CX_ERR_UNSUPPORTED, "the %s backend computes only in fp32", o->backend->name);
  if (o->precision != CX_PRECISION_F32)
    CX_TRY(o->backend->check_precision(o->backend, o->precision));
  CX_TRY(cx_graph_validate(g));
  cx_program *p = calloc(1, sizeof *p);
  if (!p) return nomem("program");
  p->g = cx_graph_clone(g);
  p->be = o->backend;
  p->training = o->training;
  p->precision = o->precision;
  p->seed = o->seed;
  p->rows = (cx_batch_rows){0, 1};
  cx_status s = p->g ? compile(p, o) : cx_fail(CX_ERR_NOMEM, "out of memory");
  if (s != CX_OK) {
    cx_program_free(p);
    return s;
  }
  *out = p;
  return CX_OK;
}

void cx_program_free(cx_program *p) {
  if (!p) return;
  for (int i = 0; p->g && i < p->g->n_nodes; i++) {
    if (p->kernel && p->state && p->kernel[i] && p->kernel[i]->release && p->state[i])
      p->kernel[i]->release(p->state[i]);
    if (p->node_in) free(p->node_in[i]);
  }
  if (p->be) {
    p->be->free(p->arena);
    p->be->free(p->persist);
    p->be->free(p->scratch);
    if (p->stream && p->be->stream_free) p->be->stream_free(p->stream);
  }
  free(p->node_in);
  free(p->kernel);
  free(p->state);
  free(p->t);
  free(p->bufs);
  free(p->param_value);
  free(p->grad_value);
  free(p->grad_ready_at);
  cx_node_timer_free(p->timer);
  free(p->key_node);
  cx_graph_free(p->g);
  free(p);
}

static cx_status run_node(cx_program *p, int i) {
  cx_kernel_args a = node_args(p, i);
  cx_status s = p->timer ? cx_node_timer_begin(p->timer, i) : CX_OK;
  if (s == CX_OK) s = p->kernel[i]->run(&a);
  if (p->timer) {
    cx_status e = cx_node_timer_end(p->timer, i, s == CX_OK);
    if (s == CX_OK) s = e;
  }
  if (s != CX_OK && !strstr(cx_last_error(), p->g->nodes[i].name))
    cx_error_prefix("node '%s' (%s)", p->g->nodes[i].name, p->g->nodes[i].op->name);
  return s;
}

/* While profiling on a stream: the step's node times are read once, at its end (an inference
 * program's forward pass, a training program's backward pass). */
static cx_status step_done(cx_program *p) {
  return p->timer ? cx_node_timer_resolve(p->timer) : CX_OK;
}

cx_status cx_program_forward(cx_program *p) {
  for (int i = 0; i < p->n_fwd; i++) CX_TRY(run_node(p, i));
  if (p->training) return CX_OK;
  p->step++;
  return step_done(p);
}

cx_status cx_program_backward(cx_program *p) {
  if (!p->training) return cx_fail(CX_ERR_ARG, "backward on a program compiled for inference");
  for (int i = p->n_fwd; i < p->g->n_nodes; i++) {
    CX_TRY(run_node(p, i));
    for (int k = 0; p->hook && k < p->n_params; k++)
      if (p->grad_ready_at[k] == i)
        p->hook(p->hook_user, k, &p->t[p->param_value[k]], &p->t[p->grad_value[k]]);
  }
  for (int k = 0; p->hook && k < p->n_params; k++) /* zero gradients: final from the start */
    if (p->grad_ready_at[k] < 0)
      p->hook(p->hook_user, k, &p->t[p->param_value[k]], &p->t[p->grad_value[k]]);
  p->step++;
  return step_done(p);
}

uint64_t cx_program_step(const cx_program *p) { return p->step; }

void cx_program_set_step(cx_program *p, uint64_t step) { p->step = step; }

void cx_program_set_rows(cx_program *p, cx_batch_rows rows) { p->rows = rows; }

void cx_program_set_grad_hook(cx_program *p, cx_grad_ready_fn fn, void *user) {
  p->hook = fn;
  p->hook_user = user;
}

void cx_program_set_replicas(cx_program *p, const cx_replicas *r) {
  p->replicas = r ? *r : (cx_replicas){0};
}

const cx_replicas *cx_program_replicas(const cx_program *p) {
  return p->replicas.count > 1 ? &p->replicas : NULL;
}

cx_tensor *cx_program_tensor(cx_program *p, const char *name) {
  int v = cx_graph_find_value(p->g, name);
  if (v >= 0) return &p->t[v];
  size_t n = strlen(name);
  if (n > 5 && strcmp(name + n - 5, "@grad") == 0)
    for (int k = 0; k < p->n_params; k++) {
      const char *pn = p->g->values[p->param_value[k]].name;
      if (strlen(pn) == n - 5 && strncmp(pn, name, n - 5) == 0) return cx_program_param_grad(p, k);
    }
  return NULL;
}

int cx_program_param_count(const cx_program *p) { return p->n_params; }

const char *cx_program_param_name(const cx_program *p, int i) {
  return p->g->values[p->param_value[i]].name;
}

cx_tensor *cx_program_param(cx_program *p, int i) { return &p->t[p->param_value[i]]; }

cx_tensor *cx_program_param_grad(cx_program *p, int i) {
  return p->grad_value[i] >= 0 ? &p->t[p->grad_value[i]] : NULL;
}

/* A program that folded BatchNormalization holds weights that are not the model's. */
static cx_status refuse_folded(const cx_program *p, const char *what) {
  if (!p->n_bn_folded) return CX_OK;
  return cx_fail(CX_ERR_ARG, "%s: the program folded %d BatchNormalization node(s) into its "
                 "weights; compile it with params_copied_in to exchange parameters", what,
                 p->n_bn_folded);
}

cx_status cx_program_store(const cx_program *p, cx_graph *g) {
  CX_TRY(refuse_folded(p, "cx_program_store"));
  for (int v = 0; v < p->g->n_values; v++) {
    const cx_value *x = &p->g->values[v];
    if (x->kind != CX_VALUE_PARAM && x->kind != CX_VALUE_STATE) continue;
    int d = cx_graph_find_value(g, x->name);
    if (d < 0 || !g->values[d].init || value_bytes(&g->values[d]) != value_bytes(x))
      return cx_fail(CX_ERR_ARG, "parameter '%s' has no counterpart of the same size", x->name);
    CX_TRY(p->be->copy_async(g->values[d].init, CX_DEVICE_CPU, p->t[v].data, p->be->device,
                             value_bytes(x), p->stream));
  }
  return p->be->sync(p->stream);
}

cx_status cx_program_copy_params(cx_program *dst, const cx_program *src) {
  CX_TRY(refuse_folded(dst, "cx_program_copy_params"));
  CX_TRY(refuse_folded(src, "cx_program_copy_params"));
  /* the copies are queued on dst's stream, which does not wait for work src has queued on its
   * own (an optimizer update still running on a GPU) */
  CX_TRY(src->be->sync(src->stream));
  for (int v = 0; v < dst->g->n_values; v++) {
    const cx_value *x = &dst->g->values[v];
    if (x->kind != CX_VALUE_PARAM && x->kind != CX_VALUE_STATE) continue;
    int w = cx_graph_find_value(src->g, x->name);
    if (w < 0 || value_bytes(&src->g->values[w]) != value_bytes(x))
      return cx_fail(CX_ERR_ARG, "parameter '%s' has no counterpart of the same size", x->name);
    CX_TRY(dst->be->copy_async(dst->t[v].data, dst->be->device, src->t[w].data, src->be->device,
                               value_bytes(x), dst->stream));
  }
  return dst->be->sync(dst->stream);
}

cx_memory_plan cx_program_memory(const cx_program *p) { return p->mem; }

size_t cx_program_device_bytes(const cx_program *p) {
  return p->mem.arena_bytes + p->mem.persistent_bytes + p->mem.scratch_bytes;
}

int cx_program_buffers(const cx_program *p, const cx_buffer_info **out) {
  *out = p->bufs;
  return p->n_bufs;
}

const cx_graph *cx_program_graph(const cx_program *p) { return p->g; }

int cx_program_forward_nodes(const cx_program *p) { return p->n_fwd; }

const cx_tensor *cx_program_value_tensor(const cx_program *p, int value) { return &p->t[value]; }

int cx_program_channels_last_count(const cx_program *p) { return p->n_channels_last; }

int cx_program_bf16_act_count(const cx_program *p) { return p->n_bf16_acts; }

void cx_program_print(const cx_program *p, FILE *f) {
  const cx_memory_plan *m = &p->mem;
  fprintf(f, "program: %d forward + %d backward nodes, %d parameters\n", p->n_fwd,
          p->g->n_nodes - p->n_fwd, p->n_params);
  fprintf(f, "memory: arena %.2f MiB (%.2f MiB without reuse, %d buffers), persistent %.2f MiB, "
             "scratch %.2f MiB\n", m->arena_bytes / 1048576.0, m->unplanned_bytes / 1048576.0,
          m->n_buffers, m->persistent_bytes / 1048576.0, m->scratch_bytes / 1048576.0);
  if (p->n_channels_last)
    fprintf(f, "layout: %d activations channels-last\n", p->n_channels_last);
  if (p->n_bf16_acts) fprintf(f, "dtype: %d activations stored in bf16\n", p->n_bf16_acts);
  if (p->n_bn_folded || p->n_fused)
    fprintf(f, "fusion: %d BatchNormalization folded, %d nodes fused into convolutions and "
               "Gemms\n", p->n_bn_folded, p->n_fused);
  if (m->recomputed_nodes)
    fprintf(f, "gradient checkpointing: %d forward nodes recomputed in backward; arena %.2f MiB "
               "instead of %.2f MiB\n", m->recomputed_nodes, m->arena_bytes / 1048576.0,
            m->arena_no_recompute_bytes / 1048576.0);
}

cx_status cx_program_set_profiling(cx_program *p, bool on) {
  cx_node_timer_free(p->timer);
  p->timer = NULL;
  return on ? cx_node_timer_create(p->be, p->stream, p->g->n_nodes, &p->timer) : CX_OK;
}

const cx_node_timing *cx_program_timings(const cx_program *p) {
  return p->timer ? cx_node_timer_table(p->timer) : NULL;
}

cx_status cx_program_wait(cx_program *p) { return p->stream ? p->be->sync(p->stream) : CX_OK; }

cx_status cx_program_profile_wait(cx_program *p) { return p->timer ? cx_program_wait(p) : CX_OK; }

/* Whether an f32 tensor of the program is finite, read back through the backend (its memory
 * may be a device's); a tensor that cannot be read counts as finite. */
static bool tensor_finite(const cx_program *p, const cx_tensor *t) {
  bool floats = t->dtype == CX_F32 || t->dtype == CX_BF16 || t->dtype == CX_F16;
  if (!floats || !t->data) return true;
  void *x = malloc(cx_tensor_nbytes(t) + 1);
  bool finite = true;
  if (x && cx_program_read(p, t, x) == CX_OK)
    for (int64_t i = 0; i < cx_tensor_numel(t) && finite; i++)
      finite = isfinite(cx_dtype_load(t->dtype, x, (size_t)i));
  free(x);
  return finite;
}

/* Re-runs the step node by node and names the first node whose output is not finite while all its
 * inputs are (or the first non-finite parameter). BN statistics are updated once more and random
 * ops draw the same numbers as the failed step (same step counter). */
cx_status cx_program_locate_nonfinite(cx_program *p, char *msg, size_t len) {
  const cx_graph *g = p->g;
  for (int k = 0; k < p->n_params; k++)
    if (!tensor_finite(p, &p->t[p->param_value[k]])) {
      snprintf(msg, len, "parameter '%s' holds NaN or Inf", g->values[p->param_value[k]].name);
      return CX_OK;
    }
  int end = p->training ? g->n_nodes : p->n_fwd;
  /* a diagnosis may run on one replica alone (its loss went bad): it pools nothing, which
   * would wait for replicas that never come */
  p->local_only = true;
  cx_status s = CX_OK;
  bool found = false;
  for (int i = 0; i < end && s == CX_OK && !found; i++) {
    s = run_node(p, i);
    const cx_node *n = &g->nodes[i];
    for (int k = 0; s == CX_OK && k < n->n_out && !found; k++) {
      if (tensor_finite(p, &p->t[n->out[k]])) continue;
      char sh[CX_SHAPE_STR];
      snprintf(msg, len, "node '%s' (%s, %s pass) produced NaN or Inf in '%s' %s from finite inputs",
               n->name, n->op->name, i < p->n_fwd ? "forward" : "backward",
               g->values[n->out[k]].name, cx_shape_str(&p->t[n->out[k]].shape, sh));
      found = true;
    }
  }
  p->local_only = false;
  if (s == CX_OK && !found) snprintf(msg, len, "every node's outputs are finite on a re-run");
  return s;
}

const cx_backend *cx_program_backend(const cx_program *p) { return p->be; }

cx_stream *cx_program_stream(const cx_program *p) { return p->stream; }

cx_status cx_program_read(const cx_program *p, const cx_tensor *t, void *host) {
  return cx_backend_download(p->be, host, t, p->stream);
}

cx_status cx_program_write(cx_program *p, const cx_tensor *t, const void *host) {
  return cx_backend_upload(p->be, t, host, p->stream);
}
