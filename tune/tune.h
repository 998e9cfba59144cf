#ifndef CX_TUNE_H
#define CX_TUNE_H

/* Hyperparameter search over pipeline keys (docs/tune.md): the [tune] table read into settings
 * and a search space, the samplers (random, TPE), the TOML writer that makes each trial's
 * pipeline file, and the trial records. Knows nothing of the pipeline itself: which keys exist
 * and what a trial scores is cli/'s business (cli/cmd_tune.c). Uses core/ only. */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/toml.h"

enum { CX_TUNE_MAX_DIMS = 32, CX_TUNE_MAX_RUNGS = 16 };

/* ---- the search space ---- */

typedef enum cx_tune_kind {
  CX_TUNE_FLOAT,  /* [lo, hi] or {float = [lo, hi]}: uniform */
  CX_TUNE_LOG,    /* {log = [lo, hi]}: uniform in log(value), lo > 0 */
  CX_TUNE_INT,    /* {int = [lo, hi]}: integers lo..hi */
  CX_TUNE_CHOICE, /* a list of values (strings, bools, or not exactly two numbers), or
                     {choice = [...]}: one of them */
} cx_tune_kind;

/* One dimension. Samplers work in its internal coordinate: the value (FLOAT, INT), log(value)
 * (LOG) or the choice's index (CHOICE). */
typedef struct cx_tune_dim {
  const char *key;        /* the dotted pipeline key, "distill.lr" (the document's) */
  const cx_toml *node;    /* its value in [tune], for messages */
  cx_tune_kind kind;
  double lo, hi;          /* bounds as written (not in log); CHOICE: 0 and n_choices - 1 */
  const cx_toml *choices; /* CHOICE: the array of scalars */
  int n_choices;
} cx_tune_dim;

typedef struct cx_tune_space {
  int n;
  cx_tune_dim dims[CX_TUNE_MAX_DIMS];
} cx_tune_space;

/* Internal coordinate <-> the value it stands for (CHOICE: the index). */
double cx_tune_dim_internal(const cx_tune_dim *d, double value);
double cx_tune_dim_value(const cx_tune_dim *d, double x);
/* The value of internal coordinate x as TOML (and JSON) text: a number with all its digits or
 * the choice's scalar. */
void cx_tune_dim_write(FILE *f, const cx_tune_dim *d, double x);

/* ---- the [tune] table ---- */

typedef enum cx_tune_sampler_kind { CX_TUNE_TPE, CX_TUNE_RANDOM } cx_tune_sampler_kind;

typedef struct cx_tune_sampler {
  cx_tune_sampler_kind kind;
  uint64_t seed;
  int n_startup;      /* TPE: trials sampled at random before the model is used (10) */
  int n_candidates;   /* TPE: candidates drawn from l(x) per dimension (24) */
  double prior_weight; /* TPE: the weight of the flat prior in each Parzen estimator (1) */
} cx_tune_sampler;

typedef struct cx_tune_config {
  int trials;         /* how many trials in all (a resumed tune counts the ones it has) */
  double budget_s;    /* wall time for all trials; 0: none */
  const char *objective; /* "<stage>.<top1|top5|loss>" as written, or NULL (cli's default) */
  const cx_toml *objective_node;
  const cx_toml *budget_node;
  /* early_stop = "asha": successive halving on the objective stage's per-epoch validation
   * (cx_tune_asha_promote) at rungs of min_epochs * reduction^k epochs */
  bool asha;
  int min_epochs, reduction;
  cx_tune_sampler sampler;
  cx_tune_space space;
} cx_tune_config;

/* Reads [tune] (the table; NULL is an error naming the file): settings and the space (every key
 * with a dot in it), each checked: ranges not empty and not inverted, log bounds above 0, int
 * bounds integers, choices scalars of one type. Unknown settings get the did-you-mean of
 * cx_toml_check_keys. Borrows from the document. */
cx_status cx_tune_config_read(const cx_toml *tune, const char *file, cx_tune_config *c);
/* "90s", "30m", "2h", "1h30m" into seconds. */
cx_status cx_tune_parse_duration(const cx_toml *node, double *seconds);

/* ---- samplers ---- */

/* A finished trial as a sampler sees it: its internal coordinates (one per dimension) and the
 * value to maximise (a loss negated); failed trials are not observations. A trial stopped early
 * (pruned) is always among TPE's bad ones, whatever its value at the rung it stopped at. */
typedef struct cx_tune_obs {
  const double *x;
  double value;
  bool pruned;
} cx_tune_obs;

/* The point of trial number `trial` (from 0) given the observations so far, into x (one per
 * dimension). A pure function of (space, sampler, observations, trial): a resumed tune draws
 * the same points. TPE draws at random for its first n_startup observations. */
cx_status cx_tune_sample(const cx_tune_space *sp, const cx_tune_sampler *s,
                         const cx_tune_obs *obs, int n_obs, int trial, double *x);

/* ---- early stopping (successive halving, the rule of Optuna's SuccessiveHalvingPruner) ---- */

/* The epochs of rung k: min_epochs * reduction^k (INT_MAX past what an int holds). */
int cx_tune_rung_epochs(const cx_tune_config *c, int k);
/* Whether a trial whose score (to maximise) at a rung is v goes on, among the scores at that
 * rung of the trials before it (others[0..n)): v must be at least the (n + 1) / reduction-th
 * best of all n + 1 (the best, when fewer than reduction of them). */
bool cx_tune_asha_promote(const double *others, int n, double v, int reduction);

/* ---- the TOML writer ---- */

/* A key to set when writing a document: table (dotted, "" for the root), key, value as TOML
 * text. */
typedef struct cx_tune_set {
  const char *table, *key;
  char value[4400];
} cx_tune_set;

/* Writes the document as TOML with the sets applied (a key set that the table lacks is added;
 * a table that is missing is written at the end), leaving out the root's table `skip` (NULL:
 * none). The text parses back to the same values: tables under [headers], arrays of tables as
 * inline tables, floats with all their digits. */
cx_status cx_tune_toml_write(FILE *f, const cx_toml *root, const cx_tune_set *sets, int n_sets,
                             const char *skip);
/* One value as TOML text (a string quoted and escaped, which is also JSON for scalars). */
void cx_tune_toml_value(FILE *f, const cx_toml *node);
void cx_tune_toml_string(FILE *f, const char *s);
/* A float in the fewest digits that read back exactly, always with a point or an exponent. */
void cx_tune_toml_float(FILE *f, double d);

/* ---- trial records ---- */

typedef enum cx_tune_status {
  CX_TUNE_RUNNING,  /* started; an interrupted tune runs it again (its pipeline resumes) */
  CX_TUNE_COMPLETE,
  CX_TUNE_FAILED,
  CX_TUNE_PRUNED,   /* stopped early at a rung (its value: the one there) */
} cx_tune_status;

typedef struct cx_tune_trial {
  int number;              /* from 1; its folder is trials/NNNN */
  cx_tune_status status;
  double x[CX_TUNE_MAX_DIMS]; /* internal coordinates */
  double value;            /* the objective (NAN: none) */
  double top1, top5, loss; /* the objective stage's validation results (NAN: none) */
  double seconds;          /* wall time of its pipeline run(s) */
  char shared[128];        /* the stages it took from an earlier trial, "teacher distill" */
  double rung[CX_TUNE_MAX_RUNGS]; /* the objective at each rung it reached (early stopping) */
  int n_rungs;
} cx_tune_trial;

const char *cx_tune_status_name(cx_tune_status s);
/* dir/trial.toml: the record (temporary name, renamed). */
cx_status cx_tune_trial_write(const char *dir, const cx_tune_space *sp, const cx_tune_trial *t);
/* Reads dir/trial.toml; its x must have one value per dimension of sp. */
cx_status cx_tune_trial_read(const char *dir, const cx_tune_space *sp, cx_tune_trial *t);
/* One JSON line for trials.jsonl: number, status, params, objective, value, results, time. */
void cx_tune_trial_json(FILE *f, const cx_tune_space *sp, const cx_tune_trial *t,
                        const char *objective);

#endif
