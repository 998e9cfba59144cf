#include "device.h"

#include <stdio.h>
#include <string.h>

#include "../kernels/cpu/cpu.h"

/* This build has no CUDA backend yet (kernels/cuda/ comes with the CUDA issue): "auto" is the
 * CPU, and "cuda" is refused before anything is loaded rather than run on the CPU under its
 * name. The CUDA backend joins here, and only here. */
cx_status cx_cli_backend(const char *device, const cx_backend **out) {
  *out = NULL;
  if (!device || !strcmp(device, "cpu") || !strcmp(device, "auto"))
    return *out = cx_backend_cpu(), CX_OK;
  if (!strcmp(device, "cuda"))
    return cx_fail(CX_ERR_UNSUPPORTED, "device \"cuda\": this build of compress has no CUDA "
                   "backend (it runs on the CPU only); use \"cpu\" or \"auto\"");
  return cx_fail(CX_ERR_ARG, "unknown device \"%s\": one of \"cpu\", \"cuda\", \"auto\"",
                 device);
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
