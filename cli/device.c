#include "device.h"

#include <stdio.h>
#include <string.h>

#include "../dist/dist.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/cuda/cuda_backend.h"

/* "cuda" in a build without the CUDA backend, or on a machine without a GPU, is refused before
 * anything is loaded rather than run on the CPU under its name; "auto" falls back to the CPU. */
cx_status cx_cli_backend(const char *device, const cx_backend **out) {
  *out = NULL;
  if (!device || !strcmp(device, "cpu")) return *out = cx_backend_cpu(), CX_OK;
  bool cuda = !strcmp(device, "cuda");
  if (!cuda && strcmp(device, "auto"))
    return cx_fail(CX_ERR_ARG, "unknown device \"%s\": one of \"cpu\", \"cuda\", \"auto\"",
                   device);
#ifdef CX_HAVE_CUDA
  cx_cuda_set_local_rank(cx_dist_local_rank());
  if (cx_cuda_probe() == CX_OK) return *out = cx_backend_cuda(), CX_OK;
  if (cuda) {
    char why[400];
    snprintf(why, sizeof why, "%s", cx_last_error());
    return cx_fail(CX_ERR_UNSUPPORTED, "device \"cuda\": %s; use \"cpu\" or \"auto\"", why);
  }
#else
  if (cuda)
    return cx_fail(CX_ERR_UNSUPPORTED, "device \"cuda\": this build of compress has no CUDA "
                   "backend (the CUDA toolkit was not found when it was built); use \"cpu\" or "
                   "\"auto\"");
#endif
  return *out = cx_backend_cpu(), CX_OK;
}

cx_status cx_cli_backend_of(const cx_toml *run, const cx_backend **out) {
  const cx_toml *key = cx_toml_get(run, "device");
  const char *name = NULL;
  if (key) CX_TRY(cx_toml_as_string(key, &name));
  cx_status s = cx_cli_backend(name, out);
  if (s == CX_OK || !key) return s;
  char why[400];
  snprintf(why, sizeof why, "%s", cx_last_error());
  return cx_toml_fail(key, s, "%s", why);
}
