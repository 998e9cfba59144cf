#include <stdio.h>
#include <string.h>

#include "../core/status.h"
#include "../dist/dist.h"
#include "commands.h"

static const cx_command *const commands[] = {
    &cx_cmd_demo, &cx_cmd_models, &cx_cmd_export_model, &cx_cmd_inspect, &cx_cmd_infer,
    &cx_cmd_convert, &cx_cmd_train, &cx_cmd_eval, &cx_cmd_profile, &cx_cmd_bench,
    &cx_cmd_lr_find, &cx_cmd_data, &cx_cmd_ops, &cx_cmd_pipeline, &cx_cmd_prune,
    &cx_cmd_quantize, &cx_cmd_tune,
};
enum { N_COMMANDS = sizeof commands / sizeof *commands };

static void print_help(FILE *f) {
  fprintf(f, "usage: compress [--version] [--help] <command> [<args>]\n\n"
             "Distill, prune and quantize neural networks: ONNX in, smaller ONNX out.\n\n"
             "Commands:\n");
  for (int i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
  fprintf(f, "\nSee 'compress <command> --help' for a command's options.\n");
}

static int dispatch(int argc, char **argv);

int main(int argc, char **argv) {
  /* progress of long runs must reach a log file or pipe as it happens, not when the buffer fills */
  setvbuf(stdout, NULL, _IOLBF, 0);
  cx_cli_omp_env(argv);
  /* under mpirun (and only there) the job's ranks meet: docs/distributed.md */
  if (cx_dist_init() != CX_OK) return fprintf(stderr, "compress: %s\n", cx_last_error()), 1;
  return cx_dist_finalize(dispatch(argc, argv));
}

static int dispatch(int argc, char **argv) {
  if (argc < 2) {
    print_help(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    if (argc > 2 && strcmp(cmd, "help") == 0) {
      for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i]->name, argv[2]) == 0) return fputs(commands[i]->usage, stdout), 0;
    }
    print_help(stdout);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
    printf("compress %s\n", CX_VERSION);
    return 0;
  }
  size_t len = strlen(cmd);
  if (len > 5 && strcmp(cmd + len - 5, ".toml") == 0) /* compress pipeline.toml */
    return cx_cmd_pipeline.run(argc - 1, argv + 1);
  for (int i = 0; i < N_COMMANDS; i++) {
    if (strcmp(commands[i]->name, cmd) != 0) continue;
    if (cx_dist_world() > 1 && commands[i] != &cx_cmd_train && commands[i] != &cx_cmd_pipeline) {
      fprintf(stderr, "compress %s: runs as one process, not on %d ranks: under mpirun only "
              "'compress train' and 'compress pipeline' train data-parallel "
              "(docs/distributed.md)\n", cmd, cx_dist_world());
      return 2;
    }
    if (cx_cli_wants_help(argc - 2, argv + 2)) {
      fputs(commands[i]->usage, stdout);
      return 0;
    }
    return commands[i]->run(argc - 2, argv + 2);
  }
  fprintf(stderr, "compress: '%s' is not a compress command. See 'compress --help'.\n", cmd);
  return 2;
}
