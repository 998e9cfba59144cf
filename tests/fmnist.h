#ifndef CX_TESTS_FMNIST_H
#define CX_TESTS_FMNIST_H

#include "../data/data.h"

/* dir/train.h5 and dir/test.h5 (paths into train and test) from the IDX files. */
cx_status fmnist_import(const char *dir, char *train, char *test);
/* Images [start, start + count) of src as a data set of their own. */
cx_status fmnist_subset(const char *src, const char *dst, int64_t start, int64_t count);

#endif
