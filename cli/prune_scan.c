/* compress prune scan: each prunable layer pruned alone at 10% ... 90% and evaluated, the
 * sensitivity table a user reads before choosing per-layer ratios (docs/prune.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/file_replace.h"
#include "../train/trainer.h"
#include "commands.h"
#include "device.h"
#include "onnx_common.h"
#include "prune_args.h"
#include "prune_config.h"
#include "report.h"

enum { STEPS = CX_CLI_SENSITIVITY_STEPS }; /* 10% ... 90% */

typedef struct scan {
  cx_prune_args *a;
  cx_graph *model;
  cx_augment pre;
  const cx_backend *backend;
  cx_prune_config c;
  cx_cli_sensitivity r;
} scan;

static void print_table(const scan *sc) {
  if (sc->a->json) {
    printf("{\"model\":");
    cx_json_string(stdout, sc->a->model);
    printf(",\"top1\":%.4f,\"sparsity\":[0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9],\"layers\":[",
           sc->r.base);
    for (int i = 0; i < sc->r.n; i++) {
      printf("%s{\"name\":", i ? "," : "");
      cx_json_string(stdout, sc->r.names[i]);
      printf(",\"top1\":[");
      for (int k = 0; k < STEPS; k++) printf("%s%.4f", k ? "," : "", sc->r.top1[i * STEPS + k]);
      printf("]}");
    }
    printf("]}\n");
    return;
  }
  printf("top-1 %% with one layer pruned (unpruned: %.2f%%)\n%-40s", sc->r.base, "layer");
  for (int k = 0; k < STEPS; k++) printf(" %6d%%", (k + 1) * 10);
  printf("\n");
  for (int i = 0; i < sc->r.n; i++) {
    printf("%-40s", sc->r.names[i]);
    for (int k = 0; k < STEPS; k++) printf(" %7.2f", sc->r.top1[i * STEPS + k]);
    printf("\n");
  }
}

static cx_status write_svg(const scan *sc) {
  double x[STEPS];
  for (int k = 0; k < STEPS; k++) x[k] = 0.1 * (k + 1);
  cx_report_series *series = calloc((size_t)sc->r.n, sizeof *series);
  if (!series) return cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int i = 0; i < sc->r.n; i++)
    series[i] = (cx_report_series){sc->r.names[i], STEPS, x, sc->r.top1 + i * STEPS};
  cx_svg_chart chart = {.title = "Sensitivity: top-1 with one layer pruned",
                        .x_label = "sparsity of the layer", .y_label = "top-1 (%)",
                        .width = 720, .height = 420, .n_series = sc->r.n,
                        .series = series};
  cx_file_out out;
  cx_status st = cx_file_out_open(sc->a->svg, &out);
  if (st == CX_OK) {
    cx_svg_line_chart(out.f, &chart);
    st = cx_file_out_commit(&out);
  }
  free(series);
  return st;
}

static cx_status preprocessing(const cx_onnx_info *info, cx_augment *aug) {
  const char *keys[32], *values[32];
  for (int k = 0; k < info->n_metadata; k++)
    keys[k] = info->metadata[k][0], values[k] = info->metadata[k][1];
  cx_preprocess pre;
  bool found = false;
  CX_TRY(cx_preprocess_from_metadata(info->n_metadata, keys, values, &pre, &found));
  if (!found)
    return cx_fail(CX_ERR_ARG, "the model has no preprocessing in its metadata (compress train "
                   "and compress pipeline write it): scan evaluates models they trained");
  *aug = (cx_augment){.crop = CX_CROP_NONE};
  cx_preprocess_to_augment(&pre, aug);
  return CX_OK;
}

static cx_status run_scan(scan *sc) {
  cx_onnx_info info = {0};
  cx_cli_prune pc;
  cx_train_config tc;
  char *old = NULL;
  CX_TRY(cx_cli_load_model(sc->a->model, &sc->model, &info));
  cx_cli_rename_input(sc->model, &old);
  free(old);
  sc->a->data = NULL; /* the scan's --data is evaluation data, not a fine-tune */
  cx_status st = cx_prune_args_read(sc->a, NULL, &pc, &tc);
  sc->c = pc.c;
  if (st == CX_OK) st = preprocessing(&info, &sc->pre);
  if (st == CX_OK && (st = cx_cli_backend(sc->a->device ? sc->a->device : "cpu", &sc->backend)))
    cx_error_prefix("--device");
  cx_cli_eval_data ev = {sc->a->val, NULL, &sc->pre, sc->backend};
  if (st == CX_OK) st = cx_cli_sensitivity_scan(sc->model, &sc->c, NULL, sc->a->model, &ev, NULL,
                                                &sc->r);
  if (st == CX_OK) print_table(sc);
  if (st == CX_OK && sc->a->svg) st = write_svg(sc);
  cx_prune_args_free(sc->a, &pc, &tc);
  return st;
}

int cx_prune_scan_run(int argc, char **argv) {
  cx_prune_args a;
  int rc = cx_prune_args_parse(&cx_cmd_prune, argc, argv, true, &a);
  if (rc) return rc;
  a.val = a.data;
  scan sc = {.a = &a};
  cx_status st = run_scan(&sc);
  cx_cli_sensitivity_free(&sc.r);
  cx_graph_free(sc.model);
  return st == CX_OK ? 0 : cx_cli_fail(&cx_cmd_prune);
}
