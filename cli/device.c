#include "device.h"

#include <string.h>

#include "../kernels/cpu/cpu.h"

/* This build has no CUDA backend yet (kernels/cuda/ comes with the CUDA issue): "auto" is the
 * CPU, and "cuda" is refused before anything is loaded rather than run on the CPU under its
 * name. The CUDA backend joins here, and only here. */
cx_status cx_cli_backend(const char *device, const char *where, const cx_backend **out) {
  *out = NULL;
  if (!device || !strcmp(device, "cpu") || !strcmp(device, "auto"))
    return *out = cx_backend_cpu(), CX_OK;
  if (!strcmp(device, "cuda"))
    return cx_fail(CX_ERR_UNSUPPORTED, "%s: device \"cuda\": this build of compress has no CUDA "
                   "backend (it runs on the CPU only); use \"cpu\" or \"auto\"", where);
  return cx_fail(CX_ERR_ARG, "%s: unknown device \"%s\": one of \"cpu\", \"cuda\", \"auto\"",
                 where, device);
}
