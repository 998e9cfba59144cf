#ifndef CX_TRAIN_CONFIG_H
#define CX_TRAIN_CONFIG_H

/* `compress train` configs: a TOML file (core/toml.h) with the tables [model], [data], [train]
 * and [run], read into cx_train_opts (docs/training.md, "Configs", lists every key). Every
 * message about a key starts with the config's "file:line:col: ". Relative paths in the file are
 * relative to the file's folder. */

#include "../core/graph.h"
#include "../core/toml.h"
#include "trainer.h"

#define CX_TRAIN_HASH_MAX 40

typedef struct cx_train_config {
  cx_toml *doc;
  char *path;                   /* the file as given */
  const char *model_spec;       /* [model] spec, or NULL */
  char *model_onnx;             /* [model] onnx, resolved; or NULL */
  char *train_path, *val_path;  /* resolved; val_path NULL without [data] val */
  char *out_dir;                /* [run] out_dir resolved, or NULL */
  int threads;                  /* [run] threads ("auto" counted); 0: the OpenMP default */
  int n_mean, n_std;            /* values given in [data] mean and std */
  cx_train_opts opts;           /* paths point into this struct */
  const char **segments;        /* [train] checkpoint_segments (into doc); owned array */
  /* [train] bn_l1: network slimming's penalty lambda * sum |gamma| on the BatchNorm scales
   * (0: off). The trainer does not know it: the commands add prune/'s extension
   * (cx_prune_bn_l1_extension) to the run when it is set. */
  float bn_l1;
  /* [train] sync_bn: synchronised BatchNorm across the ranks of a data-parallel run
   * (docs/distributed.md); the commands hand it to the ddp extension (cx_ddp_config). Nothing
   * in a run of one process. */
  bool sync_bn;
  /* A hash of the config minus the keys that do not change what a step computes ([run],
   * train.epochs, train.log_every, train.checkpoint_every, train.diagnostics, data.workers), so
   * that a run resumes after an edit of those, and refuses one of anything else. */
  char hash[CX_TRAIN_HASH_MAX + 1];
  /* nodes for messages: the model key, the data keys, mean and std (NULL when absent) */
  const cx_toml *model_node, *train_node, *val_node, *mean_node, *std_node;
  const cx_toml *precision_node; /* the precision key in force, or NULL */
} cx_train_config;

/* Parses and checks the file: unknown keys (with a suggestion), types, ranges, and keys that the
 * chosen optimizer or schedule does not use. Nothing is opened but the file itself. On failure
 * c holds nothing to free. */
cx_status cx_train_config_load(const char *path, cx_train_config *c);
/* Checks what the config names before training: the data files open, mean and std have one
 * value per channel, and the model fits the data (input [N,C,H,W] = the images, as many logits
 * as classes). Messages point at the config key. */
cx_status cx_train_config_check(const cx_train_config *c, const cx_graph *model);
/* The position of a config node as "file:line:col: 'key'" for messages about it. */
void cx_train_config_where(const cx_toml *node, char *buf, size_t size);
void cx_train_config_free(cx_train_config *c);

/* The keys of a [train] table, NULL-terminated (a stage table that does not train refuses them). */
extern const char *const cx_train_config_train_keys[];

/* ---- the same tables inside another document (compress pipeline) ----
 * c->doc and c->path must be set (the document and its file; relative paths resolve against
 * it), c->opts start as cx_train_defaults(). A [data] table as in a train config: */
cx_status cx_train_config_read_data(cx_train_config *c, const cx_toml *data);
/* A table with the keys of [train] (after read_data: accum_steps checks the batch), plus the
 * keys in extra (NULL-terminated, may be NULL) that the caller reads itself. */
cx_status cx_train_config_read_train(cx_train_config *c, const cx_toml *train,
                                     const char *const *extra);
/* The key "precision" of table t ("fp32", "bf16" or "fp16"; absent: fallback), refused at the key
 * when the CPU backend cannot compute in it on this machine. */
/* [run] device of table run (NULL: the default "cpu") as one of "cpu", "cuda", "auto"; the
 * message of another value names them. */
cx_status cx_train_config_read_device(const cx_toml *run, const char **device);
/* [run] threads: a count (0 to 1024; absent: 0, OpenMP's default) or "auto", the CPUs not busy
 * with other work (train/cpu_free.h), counted once here and printed on stderr. */
cx_status cx_train_config_read_threads(const cx_toml *run, int *threads);
/* Whether backend b computes in the config's precision; the message points at its key. Part of
 * cx_train_config_check (with opts.backend), which callers run once they chose the backend. */
cx_status cx_train_config_check_precision(const cx_train_config *c, const cx_backend *b);
cx_status cx_train_config_read_precision(const cx_toml *t, cx_precision fallback,
                                         cx_precision *p);
/* A hash of n nodes (NULL ones skipped), each hashed as if it stood in a train config under the
 * name names[i] ("data", "train": so the keys that change no step are left out as there), and
 * of salt (may be NULL), into out (CX_TRAIN_HASH_MAX + 1 bytes). */
void cx_train_config_hash(int n, const cx_toml *const *nodes, const char *const *names,
                          const char *salt, char *out);

/* ---- input preprocessing in ONNX metadata ----
 * What compress writes into a trained model's metadata_props, and `compress eval` reads back:
 *
 *   compress.input_layout   "NCHW"
 *   compress.input_scale    "1/255": pixels (0..255) are multiplied by this first
 *   compress.input_mean     per channel, comma-separated: then (x - mean) / std
 *   compress.input_std
 *   compress.class_names    a JSON array of strings (when the data set names its classes)
 *   compress.train_config   the config file, and compress.train_config_hash its hash */

#define CX_META_LAYOUT "compress.input_layout"
#define CX_META_SCALE "compress.input_scale"
#define CX_META_MEAN "compress.input_mean"
#define CX_META_STD "compress.input_std"
#define CX_META_CLASSES "compress.class_names"
#define CX_META_CONFIG "compress.train_config"
#define CX_META_HASH "compress.train_config_hash"

typedef struct cx_preprocess {
  int channels;           /* values in mean and std */
  double scale;           /* applied to the byte values first */
  float mean[4], std[4];  /* then (x - mean) / std */
} cx_preprocess;

/* "1/255", "1/N" or a decimal number. */
bool cx_preprocess_parse_scale(const char *s, double *scale);
/* Up to 4 comma-separated numbers; std values must be positive. */
bool cx_preprocess_parse_values(const char *s, float *v, int *n, bool positive);
/* The loader's form of p: out = (byte/255 - mean') / std'. */
void cx_preprocess_to_augment(const cx_preprocess *p, cx_augment *a);
/* Reads the keys above from metadata pairs; *found is false when none is there. Malformed
 * values are CX_ERR_FORMAT naming the key. */
cx_status cx_preprocess_from_metadata(int n, const char *const *keys, const char *const *values,
                                      cx_preprocess *p, bool *found);

#endif
