/* compress prune: a model pruned in one shot or with a fine-tune on a data set, and
 * `compress prune scan`, each layer's sensitivity (cli/prune_scan.c). The options are written as
 * a [prune] table (and [data]/[train] tables for the fine-tune) and read by the readers the
 * pipeline uses, so the keys, ranges and messages are the pipeline's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/file_replace.h"
#include "../export/onnx_export.h"
#include "../prune/channel.h"
#include "../prune/mask.h"
#include "commands.h"
#include "device.h"
#include "onnx_common.h"
#include "prune_args.h"
#include "prune_config.h"
#include "../core/graph_cost.h"
#include "report.h"
#include "train_common.h"

/* The model's metadata (preprocessing, class names) travels to the pruned file. */
static cx_status export_model(const cx_graph *g, const cx_onnx_info *info, const char *path) {
  cx_onnx_metadata meta[32];
  for (int k = 0; k < info->n_metadata; k++)
    meta[k] = (cx_onnx_metadata){info->metadata[k][0], info->metadata[k][1]};
  cx_onnx_export_opts eo = {.opset = CX_ONNX_EXPORT_MIN_OPSET, .producer_version = CX_VERSION,
                            .metadata = meta, .n_metadata = info->n_metadata};
  return cx_onnx_export(g, path, &eo);
}

/* One shot: the masks or the channel rewrite from the weights alone (Taylor importance: from the
 * gradients of a scoring pass on o's training data; o is NULL without --data). */
static cx_status prune_once(const cx_cli_prune *p, const char *model, const cx_train_opts *o,
                            cx_graph **g) {
  if (p->c.method != CX_PRUNE_CHANNEL) return cx_prune_mask_graph(*g, &p->c, model);
  cx_graph *out = NULL;
  cx_prune_channel_stats st;
  CX_TRY(cx_cli_prune_channels(*g, p, o, stdout, &out, &st));
  cx_graph_free(*g);
  *g = out;
  return CX_OK;
}

/* Fine-tuning: one-shot channel pruning removes the channels first; masks (magnitude, N:M,
 * gradual channel pruning) are kept while training, and gradual channel pruning's graph is
 * rewritten after. */
static cx_status fine_tune(const cx_prune_args *a, cx_train_config *tc, const cx_cli_prune *p,
                           cx_graph **g) {
  const cx_prune_config *c = &p->c;
  bool once = cx_prune_channel_once(c), gradual = cx_prune_channel_gradual(c);
  if (once) CX_TRY(prune_once(p, a->model, &tc->opts, g));
  char *old = NULL;
  cx_cli_rename_input(*g, &old);
  cx_status st = cx_train_config_check(tc, *g);
  cx_prune_masker *m = NULL;
  cx_prune_bn_l1 bn = {.lambda = tc->bn_l1};
  cx_train_ext ext[2];
  int n = 0;
  if (bn.lambda > 0) ext[n++] = cx_prune_bn_l1_extension(&bn);
  if (st == CX_OK && !once &&
      (st = cx_prune_mask_open(*g, a->model, c, a->quiet ? NULL : stdout, &m)) == CX_OK)
    ext[n++] = cx_prune_mask_extension(m);
  tc->opts.extensions = ext, tc->opts.n_extensions = n;
  tc->opts.quiet = a->quiet;
  cx_train_result r = {0};
  if (st == CX_OK) st = cx_train(*g, &tc->opts, &r);
  if (st == CX_OK && r.val.n)
    printf("fine-tuned %lld steps in %.1f s: validation top-1 %.2f%%\n", (long long)r.steps,
           r.seconds, r.val.top1);
  if (st == CX_OK && gradual) st = cx_prune_mask_cut(m, a->quiet ? NULL : stdout, g);
  cx_prune_mask_close(m);
  cx_cli_train_restore_input(*g, old);
  return st;
}

static void print_cost(const char *what, const cx_graph_cost *k) {
  printf("%s: %lld parameters (%lld non-zero, %.1f%% sparse), %.2fM MACs (%.2fM effective)\n",
         what, (long long)k->params, (long long)k->params_nonzero,
         k->params ? 100.0 * (double)(k->params - k->params_nonzero) / (double)k->params : 0.0,
         k->macs / 1e6, k->macs_effective / 1e6);
}

static void print_cost_of(const char *what, const cx_graph *g) {
  cx_graph_cost k;
  if (cx_graph_measure_cost(g, &k) == CX_OK) print_cost(what, &k);
}

static cx_status prune_model(cx_prune_args *a) {
  cx_graph *g = NULL;
  cx_onnx_info info = {0};
  cx_cli_prune pc;
  cx_train_config tc;
  CX_TRY(cx_cli_load_model(a->model, &g, &info));
  cx_graph_cost before = {0};
  cx_status st = cx_prune_args_read(a, &info, &pc, &tc);
  if (st == CX_OK) st = cx_graph_measure_cost(g, &before);
  if (st == CX_OK) st = a->data ? fine_tune(a, &tc, &pc, &g) : prune_once(&pc, a->model, NULL, &g);
  if (st == CX_OK) st = a->data ? cx_cli_export_trained(&tc, g, a->out, &(cx_cli_export){0})
                                : export_model(g, &info, a->out);
  if (st == CX_OK) print_cost(a->model, &before);
  if (st == CX_OK) print_cost_of(a->out, g);
  cx_graph_free(g);
  cx_prune_args_free(a, &pc, &tc);
  return st;
}

static int run(int argc, char **argv) {
  if (argc > 0 && !strcmp(argv[0], "scan")) return cx_prune_scan_run(argc - 1, argv + 1);
  cx_prune_args a;
  int rc = cx_prune_args_parse(&cx_cmd_prune, argc, argv, false, &a);
  if (rc) return rc;
  if (prune_model(&a) != CX_OK) return cx_cli_fail(&cx_cmd_prune);
  return 0;
}

const cx_command cx_cmd_prune = {
    .name = "prune",
    .summary = "Prune a model: magnitude, N:M (2:4) or channel pruning, optionally fine-tuned",
    .usage =
        "usage: compress prune MODEL -o OUT.onnx [--method M] [--sparsity S] [options]\n"
        "       compress prune MODEL -o OUT.onnx --data TRAIN.h5 [--val VAL.h5] --epochs N ...\n"
        "       compress prune scan MODEL --data VAL.h5 [--method M] [--svg FILE] [--json]\n\n"
        "MODEL is an ONNX file or a built-in spec. Without --data the model is pruned in one\n"
        "shot from its weights; with it, channel pruning removes the channels first and then\n"
        "fine-tunes, and magnitude and N:M pruning follow their schedule while fine-tuning,\n"
        "masks kept after every update. OUT.onnx is written under a temporary name and renamed\n"
        "once complete. docs/prune.md explains each key.\n\n"
        "    --method M          magnitude (default), 2:4 (any N:M), channel\n"
        "    --sparsity S        magnitude: the fraction of prunable weights zeroed; channel: the\n"
        "                        fraction of the model's MACs removed; in [0, 1) (default 0.5)\n"
        "    --scope global|layer  one threshold over all layers (default) or each layer alike\n"
        "    --importance I      channel: l1 (default), l2 (filter norms), bn (BatchNorm gamma),\n"
        "                        taylor (|w dL/dw| from a scoring pass on --data, before the\n"
        "                        channels are chosen; needs --data)\n"
        "    --taylor-batches N  taylor: batches of the scoring pass (default 32)\n"
        "    --round-to K        channel: kept channel counts a multiple of K\n"
        "    --recalibrate-bn N  one-shot channel: batches of --data that re-estimate BatchNorm\n"
        "                        statistics after the cut (default 32 with --data; 0: keep)\n"
        "    --allocate A        channel: importance (default: --scope decides) or sensitivity\n"
        "                        (per-layer fractions from a scan of each layer on --val, the\n"
        "                        layers that lose less giving more; needs --data and --val)\n"
        "    --include GLOB      only nodes whose name matches (repeatable; compress inspect names\n"
        "                        them); default: every Conv, Gemm and MatMul but the first conv\n"
        "                        and the classifier\n"
        "    --exclude GLOB      not these nodes (repeatable)\n"
        "    --start N --end N --every N --initial-sparsity S\n"
        "                        the gradual schedule over fine-tuning steps (default: one shot)\n\n"
        "Fine-tuning (a [data] and [train] table as in compress train, docs/training.md):\n"
        "    --data TRAIN.h5  --val VAL.h5  --epochs N  --lr LR  --batch B\n"
        "    --train KEY=VALUE   any other [train] key as TOML, e.g. --train 'optimizer=\"sgd\"'\n"
        "                        (--train bn_l1=L: network slimming's L1 penalty on BatchNorm\n"
        "                        gamma while fine-tuning, docs/training.md)\n"
        "    --threads T|auto  --device cpu|cuda|auto  --quiet\n\n"
        "scan: prunes each prunable layer alone at 10%, 20%, ... 90% (by --method: magnitude,\n"
        "its weights; channel, that fraction of the channels of each unfrozen channel group)\n"
        "and evaluates it on --data; prints the table (--json: as JSON) and with --svg writes\n"
        "the chart of top-1 against sparsity, one line per layer.\n",
    .run = run,
};
