#include "dnnl_util.h"

#include <pthread.h>

static dnnl_engine_t engine;
static dnnl_stream_t stream;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Never destroyed: primitives cached by programs refer to the engine until the process ends. */
static void create(void) {
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
    engine = NULL;
    return;
  }
  if (dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) stream = NULL;
}

dnnl_engine_t cx_dnnl_engine(void) {
  pthread_once(&once, create);
  return engine;
}

dnnl_stream_t cx_dnnl_stream(void) {
  pthread_once(&once, create);
  return stream;
}
