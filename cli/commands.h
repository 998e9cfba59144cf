#ifndef CX_COMMANDS_H
#define CX_COMMANDS_H

#include <stdbool.h>
#include <stdio.h>

/* One record per `compress` subcommand. run() gets the arguments after the command name and
 * returns the process exit code (0 ok, 1 failure, 2 usage error). */
typedef struct cx_command {
  const char *name;
  const char *summary; /* one line for `compress --help` */
  const char *usage;   /* the full text of `compress <name> --help` */
  int (*run)(int argc, char **argv);
} cx_command;

extern const cx_command cx_cmd_demo, cx_cmd_ops, cx_cmd_data, cx_cmd_inspect, cx_cmd_infer,
    cx_cmd_convert, cx_cmd_models, cx_cmd_export_model, cx_cmd_bench, cx_cmd_profile,
    cx_cmd_lr_find, cx_cmd_train, cx_cmd_eval, cx_cmd_pipeline, cx_cmd_prune, cx_cmd_quantize,
    cx_cmd_tune;

/* Shared helpers for commands. */
bool cx_cli_wants_help(int argc, char **argv);
void cx_json_string(FILE *f, const char *s); /* a JSON string literal, escaped */
/* Reports an unknown option or missing value the way git does and returns 2. */
int cx_cli_usage_error(const cx_command *c, const char *fmt, const char *arg);
/* Names a model's image input "input", as the trainer and evaluator expect, when its only input
 * has another name; *old receives that name (the caller frees it, or puts it back). Returns the
 * number of graph inputs (0 when one is already called "input"). */
struct cx_graph;
int cx_cli_rename_input(struct cx_graph *g, char **old);
/* The spin counts OpenMP's barriers wait with before they sleep (cli/omp_env.c): short beside
 * other busy processes, long (libgomp's own default) otherwise. */
#define CX_GOMP_SPINCOUNT_SHORT "1000"
#define CX_GOMP_SPINCOUNT_LONG "300000"
/* Sets one, when the user set no OpenMP waiting policy, by re-executing argv once. */
void cx_cli_omp_env(char **argv);

#endif
