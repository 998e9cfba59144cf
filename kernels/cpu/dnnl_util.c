#include "dnnl_util.h"

static dnnl_engine_t engine;
static dnnl_stream_t stream;

dnnl_engine_t cx_dnnl_engine(void) {
  if (engine) return engine;
  dnnl_status_t s = dnnl_engine_create(&engine, dnnl_cpu, 0);
  if (s != dnnl_success) {
    engine = NULL;
    cx_fail(CX_ERR_BACKEND, "dnnl_engine_create(dnnl_cpu) failed (status %d)", (int)s);
  }
  return engine;
}

dnnl_stream_t cx_dnnl_stream(void) {
  if (stream) return stream;
  dnnl_engine_t e = cx_dnnl_engine();
  if (!e) return NULL;
  dnnl_status_t s = dnnl_stream_create(&stream, e, dnnl_stream_default_flags);
  if (s != dnnl_success) {
    stream = NULL;
    cx_fail(CX_ERR_BACKEND, "dnnl_stream_create failed (status %d)", (int)s);
  }
  return stream;
}
