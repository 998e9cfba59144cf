#ifndef CX_DNNL_UTIL_H
#define CX_DNNL_UTIL_H

#include <oneapi/dnnl/dnnl.h>

#include "../../core/status.h"

/* The one oneDNN CPU engine and stream every oneDNN kernel shares, created on first use. Returns
 * NULL (with the message set) when oneDNN cannot make them. Not meant for concurrent first calls
 * from several threads: programs are compiled from one thread. */
dnnl_engine_t cx_dnnl_engine(void);
dnnl_stream_t cx_dnnl_stream(void);

/* Checks a oneDNN call inside a function returning cx_status; `node` is the cx_node being run. */
#define CX_DNNL(call, node)                                                                        \
  do {                                                                                             \
    dnnl_status_t cx_dnnl_status_ = (call);                                                        \
    if (cx_dnnl_status_ != dnnl_success)                                                           \
      return cx_fail(CX_ERR_BACKEND, "%s failed (status %d) in node '%s'", #call,                  \
                     (int)cx_dnnl_status_, (node)->name);                                          \
  } while (0)

#endif
