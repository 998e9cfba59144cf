#include "tiny_task.h"

#include <stdlib.h>

#include "../data/data.h"
#include "op_check.h"

cx_graph *tiny_cnn(int64_t side, int64_t classes) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "input", CX_F32, &S(-1, 1, side, side));
  int w = oc_param(g, "conv.weight", &S(6, 1, 3, 3), -0.3f, 0.3f, 1);
  int fw = oc_param(g, "fc.weight", &S(classes, 6), -0.4f, 0.4f, 2);
  int fb = oc_param(g, "fc.bias", &S(classes), -0.1f, 0.1f, 3);
  int y = cx_graph_op(g, "Conv", "conv", (int[]){x, w}, 2);
  cx_node_set_ints(g, g->n_nodes - 1, "pads", (int64_t[]){1, 1, 1, 1}, 4);
  y = cx_graph_op(g, "Relu", "relu", &y, 1);
  y = cx_graph_op(g, "GlobalAveragePool", "pool", &y, 1);
  y = cx_graph_op(g, "Flatten", "flatten", &y, 1);
  y = cx_graph_op(g, "Gemm", "fc", (int[]){y, fw, fb}, 3);
  cx_node_set_int(g, g->n_nodes - 1, "transB", 1);
  cx_graph_mark_output(g, y);
  return g;
}

cx_status tiny_dataset_write(const char *path, int64_t n, int64_t side, int64_t classes) {
  cx_dataset_meta m = {.h = side, .w = side, .c = 1, .num_classes = classes, .source = "test"};
  cx_dataset_writer *w;
  CX_TRY(cx_dataset_writer_create(path, &m, &w));
  uint8_t *img = malloc((size_t)(side * side));
  if (!img) {
    cx_dataset_writer_abort(w);
    return cx_fail(CX_ERR_NOMEM, "out of memory");
  }
  cx_status s = CX_OK;
  for (int64_t i = 0; i < n && s == CX_OK; i++) {
    int64_t label = i % classes;
    for (int64_t k = 0; k < side * side; k++)
      img[k] = (uint8_t)((k * 37 + i * 11 + (k % side < 2 * label ? 90 : 0)) % 256);
    s = cx_dataset_writer_append(w, "", img, &label, 1);
  }
  free(img);
  if (s != CX_OK) {
    cx_dataset_writer_abort(w);
    return s;
  }
  return cx_dataset_writer_finish(w);
}
