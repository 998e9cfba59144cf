#ifndef CX_DATA_H
#define CX_DATA_H

/* Data sets: an HDF5 file format (docs/data.md), importers from the formats users already have,
 * offline augmentation, and a prefetching loader that augments in worker threads.
 *
 * A file holds a main part (/images uint8 [N,H,W,C], /labels int64 [N]) and optionally more parts
 * as groups with the same two datasets (/val/images, /val/labels). Every call that reads a file
 * checks what it reads and fails with a message naming the file and the dataset or image. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/dtype.h"
#include "../core/status.h"

#define CX_DATA_FORMAT "compress.dataset"
#define CX_DATA_FORMAT_VERSION 1
#define CX_DATA_MAX_PARTS 16
#define CX_DATA_PART_NAME 64
/* Sane limits a file is held to (docs/data.md): classes (the classifier head and the soft
 * targets are [batch, classes]) and the height and width of an image. */
#define CX_DATA_MAX_CLASSES (1 << 20)
#define CX_DATA_MAX_SIDE (1 << 16)

/* ---- reading ---- */

typedef struct cx_dataset cx_dataset;

typedef struct cx_dataset_info {
  int64_t n, h, w, c;
  int64_t num_classes;  /* labels lie in [0, num_classes) */
  int64_t chunk_images; /* images per HDF5 chunk of /images (per read block when contiguous) */
  char label_dtype[8];  /* as stored ("int64", "int32" from another writer...); read as int64 */
} cx_dataset_info;

/* part: NULL or "" for the main part, else a group name such as "val". Checks the dtypes, ranks
 * and lengths of both datasets and the range of every label (which it keeps in memory). */
cx_status cx_dataset_open(const char *path, const char *part, cx_dataset **out);
void cx_dataset_close(cx_dataset *d);
const cx_dataset_info *cx_dataset_get_info(const cx_dataset *d);
const int64_t *cx_dataset_labels(const cx_dataset *d);
const char *cx_dataset_path(const cx_dataset *d);
/* The name of class i, or NULL when the file has no /class_names. */
const char *cx_dataset_class_name(const cx_dataset *d, int64_t i);
/* A string attribute of the file's root ("source", "created", "tool"), or NULL. */
const char *cx_dataset_attr(const cx_dataset *d, const char *name);
/* Images [start, start + count) into dst (count*h*w*c bytes, HWC). Safe to call from several
 * threads at once. */
cx_status cx_dataset_read(cx_dataset *d, int64_t start, int64_t count, uint8_t *dst);
/* The parts of a file: "" for the main one first, then the groups that hold a part. */
cx_status cx_dataset_parts(const char *path, char names[][CX_DATA_PART_NAME], int max, int *count);

/* ---- writing ---- */

typedef struct cx_dataset_writer cx_dataset_writer;

typedef struct cx_dataset_meta {
  int64_t h, w, c;
  int64_t num_classes;            /* labels must lie in [0, num_classes) */
  const char *const *class_names; /* num_classes names, or NULL */
  const char *source;             /* where the data came from, free text */
  const char *tool;               /* "compress 0.1.0"; NULL: "compress" */
} cx_dataset_meta;

/* The file is written as "<path>.tmp.<pid>" and renamed over path by _finish, so path never holds
 * a half-written data set. */
cx_status cx_dataset_writer_create(const char *path, const cx_dataset_meta *m,
                                   cx_dataset_writer **out);
/* Appends count HWC images and their labels to a part ("" or NULL: the main part). */
cx_status cx_dataset_writer_append(cx_dataset_writer *w, const char *part, const uint8_t *images,
                                   const int64_t *labels, int64_t count);
/* Flushes, closes and renames into place; frees w whether it succeeds or not (on failure the
 * temporary file is removed). */
cx_status cx_dataset_writer_finish(cx_dataset_writer *w);
/* Removes the temporary file and frees w. */
void cx_dataset_writer_abort(cx_dataset_writer *w);

/* ---- importers: each writes one data set file ---- */

typedef struct cx_import_opts {
  double val_fraction;            /* this share of samples goes to the part "val" (0: none) */
  uint64_t seed;                  /* which samples go to "val": a function of (seed, N) */
  int64_t out_h, out_w;           /* image folders: resize to this (0: keep; all must agree) */
  int channels;                   /* image folders: 1 or 3 (0: 3) */
  int threads;                    /* image folders: decoding threads (0: one per CPU, up to 8) */
  const char *const *class_names; /* names for labels 0..num_class_names-1, or NULL */
  int64_t num_class_names;
  const char *tool;               /* for the "tool" attribute */
} cx_import_opts;

/* IDX files (MNIST, Fashion-MNIST), gzipped or raw: images ubyte [N,H,W], labels ubyte [N]. */
cx_status cx_import_idx(const char *images, const char *labels, const char *out,
                        const cx_import_opts *o);
/* CIFAR-10 (classes 10) or CIFAR-100 (classes 100, fine labels) binary batch files. Class names
 * come from batches.meta.txt / fine_label_names.txt beside the first file when present. */
cx_status cx_import_cifar(int classes, const char *const *files, int nfiles, const char *out,
                          const cx_import_opts *o);
/* .npy pair: images uint8 [N,H,W] or [N,H,W,C], labels of any integer dtype [N]. */
cx_status cx_import_npy(const char *images, const char *labels, const char *out,
                        const cx_import_opts *o);
/* One subfolder per class (sorted by name), PNG and JPEG files in it; other files are skipped. */
cx_status cx_import_folder(const char *dir, const char *out, const cx_import_opts *o);

/* ---- augmentation ---- */

typedef enum cx_crop {
  CX_CROP_NONE,    /* the whole image, resized when the output size differs */
  CX_CROP_CENTER,  /* the centre out_h x out_w window */
  CX_CROP_PAD,     /* zero-pad by `pad` on each side, then a random out_h x out_w window */
  CX_CROP_RESIZED, /* random area and aspect ratio, resized to out_h x out_w (Inception crop) */
} cx_crop;

typedef struct cx_augment {
  int64_t out_h, out_w; /* 0: the stored size */
  cx_crop crop;
  int pad;
  float scale_min, scale_max; /* CX_CROP_RESIZED: share of the area (0: 0.08 .. 1) */
  float ratio_min, ratio_max; /* CX_CROP_RESIZED: aspect ratio w/h (0: 3/4 .. 4/3) */
  bool flip;                  /* horizontal flip with probability 1/2 */
  float cutout_prob;          /* a cutout_size square set to 0 after normalisation */
  int cutout_size;
  float mixup_alpha, cutmix_alpha; /* Beta(alpha, alpha) mixing of pairs in a batch; 0: off */
  float mix_prob;                  /* chance a batch is mixed (0 with an alpha set: 1) */
  float label_smoothing;           /* soft targets only */
  float mean[4], std[4];           /* per channel, on pixels scaled to [0, 1]; std 0: 1 */
} cx_augment;

/* Writes `copies` augmented copies of every image of part `part` of `in` (copy k drawn as the
 * loader draws epoch k; normalisation, mixup and cutmix do not apply) into the main part of out. */
cx_status cx_data_augment_file(const char *in, const char *part, const char *out,
                               const cx_augment *a, int copies, bool keep_original,
                               uint64_t seed, const char *tool);

/* ---- the loader ---- */

typedef enum cx_loader_mode {
  CX_LOADER_AUTO,   /* memory when the images fit in memory_limit bytes, else stream */
  CX_LOADER_MEMORY, /* read every image once at open */
  CX_LOADER_STREAM, /* read chunks on demand through a cache */
} cx_loader_mode;

typedef struct cx_loader_opts {
  const char *part; /* NULL or "": the main part */
  int64_t batch_size;
  uint64_t seed;
  bool shuffle;
  bool drop_last;
  int rank, world;      /* data-parallel shard: this rank's share of every epoch */
  int workers;          /* threads; 0: a default that leaves most CPUs to compute */
  int prefetch;         /* batches in flight; 0: 2 * workers + 1 */
  cx_loader_mode mode;
  int64_t memory_limit; /* AUTO: 0 means half of physical memory */
  int64_t cache_bytes;  /* STREAM: chunk cache size; 0: 256 MiB */
  cx_dtype out_dtype;   /* CX_F32 or CX_BF16 */
  cx_augment aug;
  /* Batch buffers come from here when set (pinned host memory for a GPU backend). */
  void *(*alloc)(size_t bytes, void *ctx);
  void (*free)(void *p, void *ctx);
  void *alloc_ctx;
} cx_loader_opts;

/* batch 1, shuffle on, rank 0 of 1, no augmentation, mean 0, std 1, f32. */
cx_loader_opts cx_loader_defaults(void);

typedef struct cx_batch {
  int64_t size;        /* samples in this batch; 0 at the end of the epoch */
  int64_t index;       /* batch number within the epoch */
  int64_t epoch;       /* the epoch it belongs to (cx_loader_epoch_begin's) */
  int64_t c, h, w;     /* images are [size, c, h, w] */
  cx_dtype dtype;
  void *images;
  int64_t *labels;     /* [size] */
  float *targets;      /* [size, num_classes] with mixup/cutmix (each row sums to 1), else NULL */
  int64_t num_classes;
  const int64_t *ids;  /* [size] each sample's index in the file */
  /* row i is position order_first + order_stride·i of the epoch's order over all ranks: the
   * same sample sits at the same position whatever the rank count and batch split */
  int64_t order_first, order_stride;
} cx_batch;

typedef struct cx_loader cx_loader;

cx_status cx_loader_open(const char *path, const cx_loader_opts *o, cx_loader **out);
/* Starts (or restarts) epoch `epoch`; batches of an unfinished epoch are dropped. */
cx_status cx_loader_epoch_begin(cx_loader *l, int64_t epoch);
/* The next batch of the epoch, in order (epoch 0 is begun if none was). It stays valid until the
 * next call of _next or _epoch_begin. At the end of the epoch it returns CX_OK with size 0. */
cx_status cx_loader_next(cx_loader *l, cx_batch *b);
void cx_loader_close(cx_loader *l);
int64_t cx_loader_batches(const cx_loader *l); /* per epoch on this rank */
int64_t cx_loader_samples(const cx_loader *l); /* per epoch on this rank */
bool cx_loader_streaming(const cx_loader *l);
int cx_loader_workers(const cx_loader *l);
const cx_dataset_info *cx_loader_info(const cx_loader *l);
/* Seconds _next has spent waiting for a batch: near 0 when the workers keep up. */
double cx_loader_wait_seconds(cx_loader *l);

/* The epoch order: a permutation of 0..n-1 (identity without shuffle), a function of
 * (seed, epoch, n) only. */
void cx_data_epoch_order(uint64_t seed, int64_t epoch, int64_t n, bool shuffle, int64_t *order);

#endif
