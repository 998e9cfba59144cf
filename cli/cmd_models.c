#include <stdio.h>
#include <string.h>

#include "../models/zoo.h"
#include "commands.h"

static void print_json(const cx_model_arch *a, const cx_model_info *info, bool first) {
  printf("%s{\"name\":", first ? "" : ",");
  cx_json_string(stdout, a->name);
  printf(",\"summary\":");
  cx_json_string(stdout, a->summary);
  printf(",\"input\":[%lld,%lld,%lld],\"classes\":%lld,\"params\":%lld,\"macs\":%lld,\"keys\":[",
         (long long)info->channels, (long long)info->height, (long long)info->width,
         (long long)info->classes, (long long)info->params, (long long)info->macs);
  /* keys are listed as "classes, input, seed" */
  char keys[256];
  snprintf(keys, sizeof keys, "%s", a->keys);
  int n = 0;
  for (char *k = strtok(keys, ", "); k; k = strtok(NULL, ", "), n++) {
    if (n) printf(",");
    cx_json_string(stdout, k);
  }
  printf("]}");
}

static void print_row(const cx_model_arch *a, const cx_model_info *info) {
  char input[48];
  snprintf(input, sizeof input, "%lldx%lldx%lld", (long long)info->channels,
           (long long)info->height, (long long)info->width);
  printf("%-20s %-11s %7lld %11.3f %9.3f  %s\n", a->name, input, (long long)info->classes,
         (double)info->params / 1e6, (double)info->macs / 1e9, a->keys);
}

static int run(int argc, char **argv) {
  bool json = false;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) json = true;
    else return cx_cli_usage_error(&cx_cmd_models, "unknown option '%s'", argv[i]);
  }
  if (json) printf("[");
  else
    printf("%-20s %-11s %7s %11s %9s  %s\n", "architecture", "input", "classes", "params (M)",
           "GMACs", "keys");
  int n = 0;
  for (const cx_model_arch *const *a = cx_model_archs(); *a; a++, n++) {
    cx_model_info info;
    if (cx_model_describe((*a)->name, &info) != CX_OK) {
      fprintf(stderr, "compress models: %s\n", cx_last_error());
      return 1;
    }
    if (json) print_json(*a, &info, n == 0);
    else print_row(*a, &info);
  }
  if (json) printf("]\n");
  return 0;
}

const cx_command cx_cmd_models = {
    .name = "models",
    .summary = "List the built-in architectures with their parameters and MACs",
    .usage = "usage: compress models [--json]\n\n"
             "Lists the architectures a model spec can name (ResNet, MobileNetV2/V3,\n"
             "EfficientNet B0-B3 as torchvision builds them, and the CIFAR ResNets) with\n"
             "their default input, class count, trainable parameters and multiply-\n"
             "accumulates (conv and linear layers, one image), and the keys each takes.\n"
             "A spec is name[:key=value,...], e.g.\n"
             "mobilenet_v2:width=0.5,classes=10,input=1x28x28; see docs/models.md.\n\n"
             "    --json    print a JSON array instead of a table\n",
    .run = run,
};
