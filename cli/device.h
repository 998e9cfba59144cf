#ifndef CX_CLI_DEVICE_H
#define CX_CLI_DEVICE_H

/* The one place that maps a device name — [run] device in a config or pipeline file, --device
 * on the command line — to a backend. Everything below cli/ (train/, distill/, the stages) is
 * handed the backend and never names one. */

#include "../core/backend.h"
#include "../core/toml.h"

/* "cpu", "cuda" or "auto" (a GPU when this build has a CUDA backend and the machine a GPU, else
 * the CPU; NULL: "cpu"). "cuda" in a build without a CUDA backend, or on a machine without a
 * GPU, is CX_ERR_UNSUPPORTED with a message that says which. */
cx_status cx_cli_backend(const char *device, const cx_backend **out);
/* The same for the device key of a config's [run] table (NULL: "cpu"); the message points at
 * the key. */
cx_status cx_cli_backend_of(const cx_toml *run, const cx_backend **out);

#endif
