#include "act_dtype.h"

#include <stdlib.h>
#include <string.h>

/* Whether node n's kernel reads and writes bf16 in any of its channels-last arguments. */
static bool takes_bf16(const cx_kernel *k, const cx_node *n, const cx_tensor *t) {
  if (k->act_dtypes & CX_ACT_BF16_ANY) return true;
  if (!(k->act_dtypes & CX_ACT_BF16_FLAT) || n->n_out < 1) return false;
  const cx_shape *s = &t[n->out[0]].shape;
  for (int a = 0; a < n->n_in + n->n_out; a++) {
    int v = cx_node_arg(n, a);
    if (v >= 0 && !cx_shape_equal(&t[v].shape, s)) return false;
  }
  return true;
}

int cx_act_dtype_assign(const cx_graph *g, const cx_kernel *const *kernel, const bool *pinned,
                        cx_tensor *t) {
  int nv = g->n_values, count = 0;
  bool *ok = malloc(sizeof(bool) * ((size_t)nv + 1));
  if (!ok) return 0; /* everything stays f32, which is always correct */
  for (int v = 0; v < nv; v++)
    ok[v] = !pinned[v] && g->values[v].kind == CX_VALUE_ACT && t[v].dtype == CX_F32 &&
            cx_tensor_nhwc(&t[v]);
  for (int i = 0; i < g->n_nodes; i++) {
    const cx_node *n = &g->nodes[i];
    if (takes_bf16(kernel[i], n, t)) continue;
    for (int a = 0; a < n->n_in + n->n_out; a++)
      if (cx_node_arg(n, a) >= 0) ok[cx_node_arg(n, a)] = false;
  }
  for (int v = 0; v < nv; v++) {
    if (!ok[v]) continue;
    cx_tensor b = cx_tensor_view(CX_BF16, &t[v].shape, t[v].data);
    b.device = t[v].device;
    t[v] = cx_tensor_channels_last_view(&b);
    count++;
  }
  free(ok);
  return count;
}

bool cx_act_dtype_enabled(void) {
  const char *e = getenv("CX_ACT_DTYPE");
  return !(e && strcmp(e, "f32") == 0);
}
