#ifndef CX_DNNL_UTIL_H
#define CX_DNNL_UTIL_H

#include <oneapi/dnnl/dnnl.h>

#include "../../core/status.h"

/* One CPU engine and one stream for every oneDNN primitive of the process, created on first use
 * (at compile time, from a kernel's prepare). NULL if oneDNN could not create them. */
dnnl_engine_t cx_dnnl_engine(void);
dnnl_stream_t cx_dnnl_stream(void);

/* Checks a oneDNN call; on failure returns CX_ERR_BACKEND naming the call and the node. */
#define CX_DNNL(call, node)                                                                        \
  do {                                                                                             \
    dnnl_status_t cx_dnnl_status_ = (call);                                                        \
    if (cx_dnnl_status_ != dnnl_success)                                                           \
      return cx_fail(CX_ERR_BACKEND, "%s failed (status %d) in node '%s'", #call,                  \
                     (int)cx_dnnl_status_, (node)->name);                                          \
  } while (0)

#endif
