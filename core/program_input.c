#include "program_input.h"

#include <stdlib.h>
#include <string.h>

cx_status cx_program_write_input(cx_program *p, const char *name, const void *src, size_t bytes) {
  int v = cx_graph_find_value(cx_program_graph(p), name);
  if (v < 0 || cx_program_graph(p)->values[v].kind != CX_VALUE_INPUT)
    return cx_fail(CX_ERR_ARG, "the program has no input named '%s'", name);
  cx_tensor *t = cx_program_tensor(p, name);
  size_t all = cx_tensor_nbytes(t);
  if (bytes > all)
    return cx_fail(CX_ERR_SHAPE, "input '%s': %zu bytes do not fit its %zu", name, bytes, all);
  if (bytes == all) return cx_program_write(p, t, src);
  /* a short batch: staged padded, so the program's memory is written once */
  char *host = malloc(all);
  if (!host) return cx_fail(CX_ERR_NOMEM, "input '%s': out of memory", name);
  memcpy(host, src, bytes);
  memset(host + bytes, 0, all - bytes);
  cx_status s = cx_program_write(p, t, host);
  free(host);
  return s;
}
