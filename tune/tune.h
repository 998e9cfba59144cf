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

/* ---- objectives (tune/objective.c) ---- */

/* What a tune optimises. METRIC: a stage's validation top-1, top-5 (maximised) or loss
 * (minimised). MIN: a cost of the final stage's model, minimised, subject to max_drop. PARETO:
 * the front of the final model's top-1 against a cost. */
typedef enum cx_tune_goal { CX_TUNE_GOAL_METRIC, CX_TUNE_GOAL_MIN, CX_TUNE_GOAL_PARETO }
    cx_tune_goal;

/* The costs of a model, each a number of the pipeline's report.json (its models[] entries). */
typedef enum cx_tune_cost {
  CX_TUNE_COST_MACS,           /* "macs": report.json macs */
  CX_TUNE_COST_MACS_EFFECTIVE, /* "macs_effective": macs_effective (weights not exactly zero) */
  CX_TUNE_COST_SIZE,           /* "size": onnx_bytes */
  CX_TUNE_COST_SIZE_GZIP,      /* "size_gzip": onnx_gzip_bytes */
  CX_TUNE_COST_LATENCY,        /* "latency": cpu_ms_batch1 (compress's runtime, batch 1) */
  CX_TUNE_COST_LATENCY_ORT,    /* "latency_ort": ort_ms_batch1 (ONNX Runtime, batch 1) */
  CX_TUNE_COSTS
} cx_tune_cost;

const char *cx_tune_cost_name(cx_tune_cost c);  /* the objective's name, "macs" */
const char *cx_tune_cost_field(cx_tune_cost c); /* its report.json key, "onnx_bytes" */
/* The cost of that name, or -1. */
int cx_tune_cost_find(const char *name);

typedef struct cx_tune_config {
  int trials;         /* how many trials in all (a resumed tune counts the ones it has) */
  double budget_s;    /* wall time for all trials; 0: none */
  /* objective = "<stage>.<top1|top5|loss>" or "top1" (METRIC; "top1" and no objective: NULL,
   * cli's default, the last stage's top-1), a cost name (MIN) or "pareto" (PARETO) */
  const char *objective;
  const cx_toml *objective_node;
  cx_tune_goal goal;
  cx_tune_cost cost;  /* MIN: the cost; PARETO: the front's other axis (front = ..., latency) */
  /* max_drop: the final model's top-1 may be at most this many points below the reference
   * stage's (NAN: no constraint); reference: that stage's name (default "distill") */
  double max_drop;
  const char *reference;
  const cx_toml *reference_node;
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
  bool infeasible; /* breaks the max_drop constraint: always among TPE's bad ones, like pruned */
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
  double cost[CX_TUNE_COSTS]; /* the final model's, from its report.json (NAN: none) */
  double ref_top1;         /* the reference stage's top-1 (NAN: no max_drop, or none) */
  bool feasible;           /* complete and within max_drop (cli sets it; not in trial.toml) */
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
/* ---- selection (tune/objective.c) ---- */

/* A complete trial as selection sees it: the final model's top-1, the cost, and whether it
 * keeps max_drop. */
typedef struct cx_tune_point {
  double top1, cost;
  bool feasible;
} cx_tune_point;

/* top1 >= ref_top1 - max_drop (always, with max_drop NAN; never, with top1 or ref NAN). */
bool cx_tune_feasible(double top1, double ref_top1, double max_drop);
/* The feasible point of smallest cost, ties to the higher top-1, then the earlier; -1: none. */
int cx_tune_best_min(const cx_tune_point *p, int n);
/* Non-domination ranks (0: the front) of top-1 (higher better) against cost (lower better): a
 * point is dominated when another is at least as good in both and better in one. Points with a
 * non-finite top-1 or cost get rank n (behind all). */
void cx_tune_pareto_ranks(const cx_tune_point *p, int n, int *rank);
/* The front member best.toml names (rank[i] == 0): with a constraint (constrained), the
 * feasible one of smallest cost (ties: higher top-1) — the answer of the constrained MIN
 * objective, on the front by construction; without, the one of highest top-1 (ties: smaller
 * cost). -1: none. */
int cx_tune_best_pareto(const cx_tune_point *p, int n, const int *rank, bool constrained);
/* What TPE maximises for a PARETO tune: top1 - 1000 * rank, so the split into good and bad is
 * by non-domination rank first (as Optuna's multi-objective TPE), then by top-1. */
double cx_tune_pareto_score(double top1, int rank);

/* One JSON line for trials.jsonl: number, status, params, objective, value, results, time. */
void cx_tune_trial_json(FILE *f, const cx_tune_space *sp, const cx_tune_trial *t,
                        const char *objective);

#endif
