#ifndef CX_CLI_TUNE_TRIAL_H
#define CX_CLI_TUNE_TRIAL_H

/* compress tune's trials (docs/tune.md): the pipeline file of a trial (the tune file without
 * [tune], the sampled keys set, its paths absolute, its out_dir the trial's folder), the checks
 * of the space against the pipeline before anything runs, the stages a trial takes from an
 * earlier one, and the run itself: `compress pipeline` as a child process. */

#include <stdbool.h>

#include "../tune/tune.h"
#include "train_common.h"

enum { CX_TUNE_METRIC_TOP1, CX_TUNE_METRIC_TOP5, CX_TUNE_METRIC_LOSS };

typedef struct cx_tune_run {
  const char *file;  /* the tune file, as given */
  cx_toml *doc;      /* its document */
  cx_tune_config cfg;
  char root[CX_CLI_PATH_MAX]; /* the tune's output folder, absolute */
  cx_tune_set paths[4];       /* [data] train, val, [teacher]/[student] onnx made absolute */
  int n_paths;
  char objective[96]; /* "<stage>.<metric>", or the cost's name, or "pareto" */
  char stage[32];     /* the objective's stage (MIN, PARETO: the final one, top-1) */
  int metric;         /* CX_TUNE_METRIC_* */
  const char *final_model; /* the final stage's model, its name in report.json ("student (INT8)") */
  char reference[32];  /* with max_drop: the stage whose top-1 it counts from */
  char exe[CX_CLI_PATH_MAX]; /* this program, which runs each trial */
} cx_tune_run;

/* The trial's folder, root/trials/NNNN. */
void cx_tune_trial_dir(const cx_tune_run *t, int number, char *buf, size_t size);
/* The final model's costs (cost[CX_TUNE_COSTS]) from dir/report.json: the numbers the
 * pipeline's report measured, in its models[] entry named `model` (NAN: null or missing). Fails
 * when the file or the entry is missing. */
cx_status cx_tune_report_costs(const char *dir, const char *model, double *cost);
/* root/report.md and root/report.html (temporary names, renamed): the trials table (keys, top-1,
 * MACs, latency, size, status, time) and an SVG of top-1 against the front's cost (objective
 * "pareto": its cost; a minimised cost: that one; else latency), its front highlighted. best:
 * the index of the best trial (-1: none). */
cx_status cx_tune_report_write(const cx_tune_run *t, const cx_tune_trial *trials, int n,
                               int best);

/* Writes the pipeline file of point x, its out_dir `out`, to path (temporary name, renamed). */
cx_status cx_tune_write_pipeline(const cx_tune_run *t, const double *x, const char *out,
                                 const char *path, const char *comment);
/* The paths made absolute, then every key of the space checked against the pipeline at both
 * ends of its range (each choice): the pipeline's own reader and checks (cx_pipeline_load,
 * cx_pipeline_check: models and data) refuse an unknown key (with its did-you-mean), a wrong
 * type, a value out of range or a model that does not fit the data, reported at the key in
 * [tune]; then the objective (default: top-1 of the last stage). Writes nothing but temporary
 * files. */
cx_status cx_tune_check(cx_tune_run *t);
/* Before trial `number` (folder dir) runs: every stage of its pipeline whose hash a complete
 * stage of an earlier trial has (those[0..n)) is taken from there, its output linked and its
 * manifest copied, and the teacher's output cache with the teacher; their names into shared. */
cx_status cx_tune_share(const cx_tune_run *t, const cx_tune_trial *those, int n, const char *dir,
                        char *shared, size_t size);
/* Runs the trial's pipeline (dir/pipeline.toml) as `compress pipeline`, its output into
 * dir/log.txt; fills the trial's status, time and results. With early stopping it reads the
 * trial's metrics.jsonl as it runs and stops it at a rung where it is not promoted among the
 * trials before it (those[0..n)): "pruned". *interrupted: the run was stopped by a signal (the
 * trial stays "running"; run again, it continues). */
cx_status cx_tune_trial_exec(const cx_tune_run *t, const cx_tune_trial *those, int n,
                             const char *dir, cx_tune_trial *tr, bool *interrupted);

#endif
