/* cx_model_load: weights by name, e.g. from a torchvision ONNX export into a built-in graph. */

#include <string.h>

#include "zoo.h"

static bool is_weight(const cx_value *v) {
  return v->kind == CX_VALUE_PARAM || v->kind == CX_VALUE_STATE;
}

/* The value of `from` that fills `v`: same name, an initializer, same dtype and shape. */
static const cx_value *source_of(const cx_graph *from, const cx_value *v, bool *misshapen) {
  int id = cx_graph_find_value(from, v->name);
  const cx_value *s = id >= 0 ? &from->values[id] : NULL;
  *misshapen = s && s->init && (s->dtype != v->dtype || !cx_shape_equal(&s->shape, &v->shape));
  return s && s->init && !*misshapen ? s : NULL;
}

static cx_status unmatched(const cx_graph *model, const cx_graph *from, int first, bool misshapen,
                           int missing, int weights) {
  const cx_value *v = &model->values[first];
  char want[CX_SHAPE_STR], have[CX_SHAPE_STR];
  if (!misshapen)
    return cx_fail(CX_ERR_ARG, "loading weights: '%s' %s is not in the source; %d of %d weights "
                   "unmatched (an ONNX export with BatchNormalization folded has no BN weights "
                   "to load: export with BN kept)", v->name, cx_shape_str(&v->shape, want), missing,
                   weights);
  const cx_value *s = &from->values[cx_graph_find_value(from, v->name)];
  return cx_fail(CX_ERR_ARG, "loading weights: '%s' is %s %s in the source but %s %s in the "
                 "model; %d of %d weights unmatched", v->name, cx_dtype_name(s->dtype),
                 cx_shape_str(&s->shape, have), cx_dtype_name(v->dtype),
                 cx_shape_str(&v->shape, want), missing, weights);
}

cx_status cx_model_load(cx_graph *model, const cx_graph *from) {
  int missing = 0, weights = 0, first = -1;
  bool first_misshapen = false;
  for (int i = 0; i < model->n_values; i++) {
    const cx_value *v = &model->values[i];
    bool misshapen;
    if (!is_weight(v)) continue;
    weights++;
    if (source_of(from, v, &misshapen)) continue;
    if (!missing++) first = i, first_misshapen = misshapen;
  }
  if (missing) return unmatched(model, from, first, first_misshapen, missing, weights);
  for (int i = 0; i < model->n_values; i++) {
    cx_value *v = &model->values[i];
    bool misshapen;
    const cx_value *s = is_weight(v) ? source_of(from, v, &misshapen) : NULL;
    if (s) memcpy(v->init, s->init, (size_t)cx_shape_numel(&v->shape) * cx_dtype_size(v->dtype));
  }
  return CX_OK;
}
