/* Fashion-MNIST (Debian's dataset-fashion-mnist) as HDF5 data sets for the tests that train,
 * and a small model for it. */
#include "fmnist.h"

#include <stdio.h>
#include <stdlib.h>

#include "../models/layers.h"

#define FMNIST "/usr/share/datasets/fashion-mnist"

cx_status fmnist_import(const char *dir, char *train, char *test) {
  cx_import_opts io = {.seed = 1};
  sprintf(train, "%s/train.h5", dir);
  sprintf(test, "%s/test.h5", dir);
  CX_TRY(cx_import_idx(FMNIST "/train-images-idx3-ubyte.gz", FMNIST "/train-labels-idx1-ubyte.gz",
                       train, &io));
  return cx_import_idx(FMNIST "/t10k-images-idx3-ubyte.gz", FMNIST "/t10k-labels-idx1-ubyte.gz",
                       test, &io);
}

/* Images [start, start + count) of src as a data set of their own. */
cx_status fmnist_subset(const char *src, const char *dst, int64_t start, int64_t count) {
  cx_dataset *d = NULL;
  CX_TRY(cx_dataset_open(src, NULL, &d));
  const cx_dataset_info *in = cx_dataset_get_info(d);
  cx_dataset_meta m = {.h = in->h, .w = in->w, .c = in->c, .num_classes = in->num_classes,
                       .source = "test subset"};
  size_t bytes = (size_t)(count * in->h * in->w * in->c);
  uint8_t *img = malloc(bytes);
  cx_dataset_writer *w = NULL;
  cx_status s = img ? cx_dataset_read(d, start, count, img) : CX_ERR_NOMEM;
  if (s == CX_OK) s = cx_dataset_writer_create(dst, &m, &w);
  if (s == CX_OK) s = cx_dataset_writer_append(w, NULL, img, cx_dataset_labels(d) + start, count);
  if (s == CX_OK) s = cx_dataset_writer_finish(w);
  else if (w) cx_dataset_writer_abort(w);
  free(img);
  cx_dataset_close(d);
  return s;
}

cx_graph *fmnist_small_cnn(uint64_t seed) {
  cx_graph *g = cx_graph_new();
  cx_net n;
  cx_feat x;
  cx_net_begin(&n, g, seed, true, 1, 28, 28, &x);
  x = cx_net_conv_bn_act(&n, "block1", x, 8, 3, 2, 1, CX_NL_RELU);
  x = cx_net_conv_bn_act(&n, "block2", x, 16, 3, 2, 1, CX_NL_RELU);
  x = cx_net_pool_flatten(&n, "pool", x);
  x = cx_net_linear(&n, "fc", "logits", x, 10, CX_LINEAR_TORCH_DEFAULT);
  cx_graph_mark_output(g, x.v);
  return g;
}
