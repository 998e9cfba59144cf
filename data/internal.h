#ifndef CX_DATA_INTERNAL_H
#define CX_DATA_INTERNAL_H

/* Shared by the files of data/; not part of its public interface (data/data.h). */

#include <hdf5.h>

#include "data.h"

/* ---- HDF5 ---- */

/* Turns off HDF5's printing of its error stack for the calling thread (in a thread-safe HDF5 the
 * setting is per thread); our messages carry HDF5's innermost reason instead. */
void cx_h5_quiet(void);
/* "<path>: dataset '<what>': <call> failed: <HDF5's reason>" (what: a dataset when it starts with
 * '/', else an attribute of the root; NULL: the file); clears HDF5's error stack. */
cx_status cx_h5_fail(cx_status s, const char *path, const char *what, const char *call);
/* Images per chunk for a data set of images of this many bytes: about 256 KiB per chunk, so that
 * streaming reads of shuffled large images do not read much they do not use. */
int64_t cx_h5_chunk_images(int64_t image_bytes);

/* ---- importers ---- */

/* Routes sample i of n to the main part or "val" (chosen by seed) and writes it. */
typedef struct cx_import_sink {
  cx_dataset_writer *w;
  uint8_t *is_val; /* [n], NULL without a split */
  int64_t n;
  int64_t num_classes, image_bytes;
  const char *out;
} cx_import_sink;

cx_status cx_import_sink_open(cx_import_sink *s, const char *out, const cx_dataset_meta *m,
                              int64_t n, const cx_import_opts *o);
/* count consecutive samples starting at sample i. */
cx_status cx_import_sink_add(cx_import_sink *s, int64_t i, const uint8_t *images,
                             const int64_t *labels, int64_t count);
cx_status cx_import_sink_finish(cx_import_sink *s);
void cx_import_sink_abort(cx_import_sink *s);
/* Checks labels against num_classes, naming the file and the first bad index. */
cx_status cx_import_check_labels(const char *path, const int64_t *labels, int64_t n,
                                 int64_t num_classes);
/* num_classes from o->class_names when given, else max label + 1. */
int64_t cx_import_num_classes(const cx_import_opts *o, const int64_t *labels, int64_t n);

/* ---- images ---- */

/* Decodes a PNG or JPEG file (by its content) into 8-bit pixels, HWC with `channels` (1 or 3)
 * channels; *pixels is malloc'ed. */
cx_status cx_image_decode(const char *path, int channels, uint8_t **pixels, int64_t *h, int64_t *w);
/* Resizes an HWC uint8 image: area averaging where it shrinks, bilinear where it grows. */
cx_status cx_image_resize(const uint8_t *src, int64_t sh, int64_t sw, int64_t c, uint8_t *dst,
                          int64_t dh, int64_t dw);

/* ---- augmentation ---- */

/* What the loader and the offline augmenter fix once: sizes and per-channel affine maps. */
typedef struct cx_aug_plan {
  cx_augment a;
  int64_t h, w, c;          /* stored image */
  int64_t oh, ow;           /* output */
  float scale[4], bias[4];  /* pixel byte v -> v * scale + bias */
} cx_aug_plan;

cx_status cx_aug_plan_make(const cx_augment *a, int64_t h, int64_t w, int64_t c, cx_aug_plan *p);
/* Floats of scratch cx_aug_sample needs. */
size_t cx_aug_scratch_floats(const cx_aug_plan *p);
/* One image (HWC bytes) -> out [c, oh, ow], with every random choice drawn from `key`. */
void cx_aug_sample(const cx_aug_plan *p, const uint8_t *src, uint64_t key, float *out,
                   float *scratch);
/* Batch-level mixup / cutmix with soft targets [n, classes]; does nothing to images when the
 * draw from `key` says so, but always writes targets. */
void cx_aug_mix(const cx_aug_plan *p, uint64_t key, float *images, const int64_t *labels,
                int64_t n, int64_t classes, float *targets);
bool cx_aug_mixing(const cx_augment *a);

/* Stream keys: one salt per use, so that no two uses of (seed, epoch, x) share numbers. */
enum { CX_SALT_ORDER = 0x6f72, CX_SALT_SAMPLE = 0x7361, CX_SALT_MIX = 0x6d69,
       CX_SALT_SPLIT = 0x7370 };
uint64_t cx_data_key(uint64_t seed, uint64_t salt, uint64_t a, uint64_t b);
/* Uniform integer in [0, bound) from 64 random bits. */
uint64_t cx_data_rand_below(uint64_t key, uint64_t index, uint64_t bound);

#endif
