#ifndef CX_CLI_DEVICE_H
#define CX_CLI_DEVICE_H

/* The one place that maps a device name — [run] device in a config or pipeline file, --device
 * on the command line — to a backend. Everything below cli/ (train/, distill/, the stages) is
 * handed the backend and never names one. */

#include "../core/backend.h"

/* "cpu", "cuda" or "auto" (a GPU when this build has a CUDA backend and the machine a GPU, else
 * the CPU). "cuda" in a build without a CUDA backend, or on a machine without a GPU, is
 * CX_ERR_UNSUPPORTED with a message that says which; where names the key or option for it. */
cx_status cx_cli_backend(const char *device, const char *where, const cx_backend **out);

#endif
