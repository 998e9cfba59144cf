#include <stdio.h>
#include <string.h>

#include "../core/op.h"
#include "../kernels/cuda/cuda_backend.h"
#include "commands.h"
#include "device.h"
#include "onnx_common.h"

static int run(int argc, char **argv) {
  bool json = false;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) json = true;
    else return cx_cli_usage_error(&cx_cmd_ops, "unknown option '%s'", argv[i]);
  }
  const cx_backend *cpu;
  if (cx_cli_backend("cpu", &cpu) != CX_OK) return cx_cli_fail(&cx_cmd_ops);
  /* the CUDA kernel table answers without a GPU; a build without the backend has none */
#ifdef CX_HAVE_CUDA
  const cx_backend *cuda = cx_backend_cuda();
#else
  const cx_backend *cuda = NULL;
#endif
  int n = 0;
  if (json) printf("[");
  else printf("%-30s %-14s %-6s %-5s %s\n", "op", "domain", "grad", "cpu", "cuda");
  for (const cx_op_def *const *d = cx_op_all(); *d; d++, n++) {
    cx_node probe = {.name = "", .op = *d};
    bool has_cpu = cx_backend_supports_op(cpu, &probe, NULL, 0);
    bool has_cuda = cuda && cx_backend_supports_op(cuda, &probe, NULL, 0);
    const char *domain = *(*d)->domain ? (*d)->domain : "ai.onnx";
    if (json) {
      printf("%s{\"op\":", n ? "," : "");
      cx_json_string(stdout, (*d)->name);
      printf(",\"domain\":");
      cx_json_string(stdout, domain);
      printf(",\"gradient\":%s,\"cpu\":%s,\"cuda\":%s}", (*d)->grad ? "true" : "false",
             has_cpu ? "true" : "false", has_cuda ? "true" : "false");
    } else {
      printf("%-30s %-14s %-6s %-5s %s\n", (*d)->name, domain, (*d)->grad ? "yes" : "-",
             has_cpu ? "yes" : "-", has_cuda ? "yes" : "-");
    }
  }
  if (json) printf("]\n");
  return 0;
}

const cx_command cx_cmd_ops = {
    .name = "ops",
    .summary = "List the operators the engine knows, with gradient and backend support",
    .usage = "usage: compress ops [--json]\n\n"
             "Lists every operator in the op table: its ONNX domain, whether it has a gradient\n"
             "rule (so it can be trained) and whether the CPU and CUDA backends have a kernel\n"
             "for it (cuda: '-' for every op in a build without the CUDA backend; the column\n"
             "reads the kernel table, so it needs no GPU).\n\n"
             "    --json    print a JSON array instead of a table\n",
    .run = run,
};
