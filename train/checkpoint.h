#ifndef CX_CHECKPOINT_H
#define CX_CHECKPOINT_H

/* Training checkpoints: one HDF5 file that h5py reads (docs/train_files.md).
 *
 *   /params/<name>           every parameter, its dtype and shape (f32 for trained weights)
 *   /optimizer/<name>        optimizer state: momenta, Adam moments, EMA weights, and scalars
 *                            such as a loss scale, each a tensor (shape [] for a scalar)
 *   root attributes          format "compress.checkpoint", format_version, step, epoch, batch,
 *                            seed, data_seed, rng_counter, config_hash, created, tool
 *
 * Names are stored as given, except that '%' and '/' become "%25" and "%2F" (HDF5 would read a
 * '/' as a group); each dataset also carries its name and dtype as attributes.
 *
 * The first 512 bytes (HDF5's user block, which HDF5 and h5py skip) hold a header with the
 * format version, the file's size and a CRC-32C of the rest: a truncated, damaged or edited file
 * is refused with a message before HDF5 reads any of it. Datasets also carry HDF5's Fletcher-32
 * checksums, for readers of the file other than ours.
 *
 * The file is written as "<path>.tmp.<pid>", synced to disk and renamed over path, so path
 * always holds either the previous checkpoint or the new one, whole. */

#include <stdint.h>

#include "../core/tensor.h"

#define CX_CHECKPOINT_FORMAT "compress.checkpoint"
#define CX_CHECKPOINT_FORMAT_VERSION 1
#define CX_CHECKPOINT_HASH_MAX 128
/* step, epoch, batch and rng_counter beyond this are refused: no run takes 2^53 steps, and a
 * count up to it is exact in the double of a JSON metrics line. */
#define CX_CHECKPOINT_COUNT_MAX (UINT64_C(1) << 53)

typedef struct cx_checkpoint_meta {
  int64_t step;         /* optimizer steps done */
  /* Data position: the next batch to train on is batch `batch` of epoch `epoch` (batches of an
   * epoch are numbered from 0 as cx_batch.index numbers them). */
  int64_t epoch, batch;
  /* RNG state. Every random number comes from a counter-based stream (core/rng.h), so the state
   * is the keys and how far a sequential stream has been drawn. */
  uint64_t seed;        /* the run's seed (initialisation, dropout) */
  uint64_t data_seed;   /* the loader's seed (order, augmentation) */
  uint64_t rng_counter; /* draws taken from any sequential stream of the trainer */
  /* Wall-clock seconds of training up to this checkpoint, over every run that led to it, so a
   * resumed run reports how long the whole training took (stored in milliseconds; files
   * without it read as 0). */
  double seconds;
  char config_hash[CX_CHECKPOINT_HASH_MAX + 1]; /* identifies the training configuration */
  char tool[64];        /* save: "" writes "compress"; load: what wrote the file */
  int64_t format_version; /* load and peek: the file's; save ignores it */
} cx_checkpoint_meta;

/* Writes params (the trained values) and state (optimizer state) under their names. Any dtype is
 * accepted; tensors must be contiguous and on the CPU, and names non-empty and distinct. On
 * failure path is untouched and no temporary file remains. */
cx_status cx_checkpoint_save(const char *path, const cx_checkpoint_meta *meta, int n_params,
                             const char *const *names, const cx_tensor *const *params,
                             int n_state, const char *const *state_names,
                             const cx_tensor *const *state);

/* Reads the meta of path (the whole file's checksum and the format checked; no tensor read). */
cx_status cx_checkpoint_peek(const char *path, cx_checkpoint_meta *meta);

/* Fills the given tensors from path. Refused, with a message naming the file:
 *   - a file that is not a checkpoint, is truncated or damaged (its checksum differs);
 *   - a format_version this build does not read;
 *   - config_hash (NULL: not checked) differing from the file's: both hashes are named;
 *   - a listed parameter or state missing from the file, or with another dtype or shape: the
 *     message names it and both shapes;
 *   - a dataset stored as another type than its "dtype" attribute says;
 *   - /params holding a parameter that is not listed (a different model); the same for
 *     /optimizer, unless n_state is 0 (the caller does not restore optimizer state);
 *   - a NaN or an infinity in any float tensor;
 *   - step, epoch, batch or rng_counter negative or beyond CX_CHECKPOINT_COUNT_MAX;
 *   - a path that is not a regular file (a FIFO is refused before it is opened).
 * Every check is made before any tensor is written, so a refused checkpoint leaves the tensors
 * as they were; only a read error in the data itself (damage) can leave them partly filled.
 * meta (NULL: not wanted) receives the file's meta. */
cx_status cx_checkpoint_load(const char *path, const char *config_hash, cx_checkpoint_meta *meta,
                             int n_params, const char *const *names, cx_tensor *const *params,
                             int n_state, const char *const *state_names, cx_tensor *const *state);

#endif
