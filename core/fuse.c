#include "fuse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "op.h"
#include "ops/norm.h"

bool cx_fuse_const_scalar(const cx_graph *g, int v, float *out) {
  if (v < 0) return false;
  const cx_value *x = &g->values[v];
  if (x->kind != CX_VALUE_CONST || x->dtype != CX_F32 || !x->init || cx_shape_numel(&x->shape) != 1)
    return false;
  *out = *(const float *)x->init;
  return true;
}

bool cx_fuse_enabled(void) {
  const char *e = getenv("CX_FUSE");
  return !(e && !strcmp(e, "off"));
}

bool cx_fuse_clamp_of(const cx_graph *g, const cx_node *a, float *lo, float *hi) {
  if (!strcmp(a->op->name, "Relu")) {
    *lo = 0, *hi = INFINITY;
    return true;
  }
  if (strcmp(a->op->name, "Clip") != 0) return false;
  *lo = -INFINITY, *hi = INFINITY;
  if (a->n_in > 1 && a->in[1] >= 0 && !cx_fuse_const_scalar(g, a->in[1], lo)) return false;
  if (a->n_in > 2 && a->in[2] >= 0 && !cx_fuse_const_scalar(g, a->in[2], hi)) return false;
  /* opset-6 Clip keeps its bounds in attributes */
  if (a->n_in == 1) {
    *lo = cx_node_float(a, "min", -INFINITY);
    *hi = cx_node_float(a, "max", INFINITY);
  }
  return *lo <= *hi;
}

void cx_fuse_count_readers(const cx_graph *g, int *readers, int *reader) {
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int v = g->nodes[i].in[k];
      if (v < 0) continue;
      readers[v]++;
      if (reader) reader[v] = i;
    }
  for (int k = 0; k < g->n_outputs; k++) readers[g->outputs[k]]++;
}

static cx_status fuse_norm_activations(cx_graph *g, const int *readers, const int *reader,
                                       bool *dead) {
  for (int i = 0; i < g->n_nodes; i++) {
    cx_node *n = &g->nodes[i];
    float lo, hi;
    if (strcmp(n->op->name, "BatchNormTrain") != 0 || cx_bn_activation(n, &lo, &hi)) continue;
    int y = n->out[0];
    if (readers[y] != 1) continue;
    int j = reader[y];
    const cx_node *a = &g->nodes[j];
    if (a->in[0] != y || !cx_fuse_clamp_of(g, a, &lo, &hi)) continue;
    n->out[0] = a->out[0]; /* the value left behind goes with the node */
    dead[j] = true;
    cx_node_set_float(g, i, CX_BN_ACT_MIN, lo);
    cx_node_set_float(g, i, CX_BN_ACT_MAX, hi);
  }
  return cx_graph_status(g);
}

cx_status cx_fuse_training(cx_graph *g) {
  if (!cx_fuse_enabled()) return CX_OK;
  int *readers = calloc((size_t)g->n_values + 1, sizeof(int));
  int *reader = calloc((size_t)g->n_values + 1, sizeof(int));
  bool *dead = calloc((size_t)g->n_nodes + 1, 1);
  cx_status s = readers && reader && dead ? CX_OK : cx_fail(CX_ERR_NOMEM, "out of memory");
  if (s == CX_OK) {
    cx_fuse_count_readers(g, readers, reader);
    s = fuse_norm_activations(g, readers, reader, dead);
  }
  if (s == CX_OK) s = cx_graph_remove_nodes(g, dead);
  free(readers);
  free(reader);
  free(dead);
  return s;
}
