#ifndef CX_TESTS_TINY_TASK_H
#define CX_TESTS_TINY_TASK_H

/* A small learnable task for trainer tests: a model and a data set of 1-channel side x side
 * images, in tests/tiny_task.c. */

#include <stdint.h>

#include "../core/graph.h"

/* conv 3x3 (6 channels, no bias) - relu - global pool - linear (`classes` outputs), without
 * normalisation: parameters conv.weight, fc.weight and fc.bias. */
cx_graph *tiny_cnn(int64_t side, int64_t classes);

/* n images in an HDF5 data set at path, labelled i % classes; a label brightens its first
 * 2 * label columns, so the model can learn it. */
cx_status tiny_dataset_write(const char *path, int64_t n, int64_t side, int64_t classes);

#endif
