#ifndef CX_TESTS_FMNIST_H
#define CX_TESTS_FMNIST_H

#include "../core/graph.h"
#include "../data/data.h"

/* dir/train.h5 and dir/test.h5 (paths into train and test) from the IDX files. */
cx_status fmnist_import(const char *dir, char *train, char *test);
/* Images [start, start + count) of src as a data set of their own. */
cx_status fmnist_subset(const char *src, const char *dst, int64_t start, int64_t count);

/* 2 strided conv-BN-ReLU blocks (8, 16 channels), global pooling and a linear layer: ~1.5k
 * parameters, input "input" [N,1,28,28], logits [N,10]. */
cx_graph *fmnist_small_cnn(uint64_t seed);

#endif
