/* `compress prune` options: which are [prune] keys (cli/stage_args.c does the rest). */
#include <string.h>

#include "prune_args.h"

static const cx_stage_flag prune_flags[] = {
    {"--method", "method", true, NULL},     {"--sparsity", "sparsity", false, NULL},
    {"--scope", "scope", true, NULL},       {"--importance", "importance", true, NULL},
    {"--round-to", "round_to", false, NULL}, {"--start", "start", false, NULL},
    {"--end", "end", false, NULL},           {"--every", "every", false, NULL},
    {"--initial-sparsity", "initial_sparsity", false, NULL},
    {"--taylor-batches", "taylor_batches", false, NULL},
    {"--allocate", "allocate", true, NULL},
    {"--recalibrate-bn", "recalibrate_bn", false, NULL},
    {NULL, NULL, false, NULL}};
static const cx_stage_flag prune_lists[] = {{"--include", "include", true, NULL},
                                            {"--exclude", "exclude", true, NULL},
                                            {NULL, NULL, false, NULL}};
static const cx_stage_args_spec spec = {.table = "prune", .flags = prune_flags,
                                        .lists = prune_lists};

int cx_prune_args_parse(const cx_command *c, int argc, char **argv, bool scan, cx_prune_args *a) {
  return cx_stage_args_parse(c, &spec, argc, argv, !scan, scan ? "VAL.h5" : NULL, a);
}

cx_status cx_prune_args_read(cx_prune_args *a, const cx_onnx_info *info, cx_cli_prune *p,
                             cx_train_config *tc) {
  memset(p, 0, sizeof *p);
  CX_TRY(cx_stage_args_read(a, info, true, tc));
  return cx_cli_prune_read(cx_toml_get(a->doc, "prune"), p);
}

void cx_prune_args_free(cx_prune_args *a, cx_cli_prune *p, cx_train_config *tc) {
  if (p) cx_cli_prune_free(p);
  cx_stage_args_free(a, tc);
}
