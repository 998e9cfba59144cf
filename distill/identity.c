/* What a teacher's outputs depend on, hashed into cache keys: the teacher graph, the data set
 * file and the augmentation. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/op.h"
#include "internal.h"

uint64_t cx_kd_fnv(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

static uint64_t fnv_str(uint64_t h, const char *s) { return cx_kd_fnv(h, s ? s : "", s ? strlen(s) + 1 : 1); }

static uint64_t fnv_i64(uint64_t h, int64_t v) { return cx_kd_fnv(h, &v, sizeof v); }

static uint64_t hash_attr(uint64_t h, const cx_attr *a) {
  h = fnv_str(h, a->name);
  h = fnv_i64(h, a->type);
  switch (a->type) {
  case CX_ATTR_INT: return fnv_i64(h, a->i);
  case CX_ATTR_FLOAT: return cx_kd_fnv(h, &a->f, sizeof a->f);
  case CX_ATTR_INTS: return cx_kd_fnv(h, a->ints, sizeof(int64_t) * (size_t)a->n);
  case CX_ATTR_FLOATS: return cx_kd_fnv(h, a->floats, sizeof(float) * (size_t)a->n);
  case CX_ATTR_STRING: return fnv_str(h, a->s);
  }
  return h;
}

static uint64_t hash_value(uint64_t h, const cx_value *v) {
  h = fnv_str(h, v->name);
  h = fnv_i64(h, v->kind);
  h = fnv_i64(h, v->dtype);
  h = fnv_i64(h, v->shape.ndim);
  h = cx_kd_fnv(h, v->shape.d, sizeof(int64_t) * (size_t)v->shape.ndim);
  if (v->init && v->kind != CX_VALUE_INPUT && v->kind != CX_VALUE_ACT) {
    int64_t n = cx_shape_numel(&v->shape);
    h = cx_kd_fnv(h, v->init, (size_t)n * cx_dtype_size(v->dtype));
  }
  return h;
}

uint64_t cx_kd_graph_hash(const cx_graph *g) {
  uint64_t h = CX_FNV_OFFSET;
  for (int i = 0; i < g->n_values; i++) h = hash_value(h, &g->values[i]);
  for (int i = 0; i < g->n_nodes; i++) {
    const cx_node *n = &g->nodes[i];
    h = fnv_str(h, n->op->name);
    h = cx_kd_fnv(h, n->in, sizeof(int) * (size_t)n->n_in);
    h = cx_kd_fnv(h, n->out, sizeof(int) * (size_t)n->n_out);
    for (int k = 0; k < n->n_attrs; k++) h = hash_attr(h, &n->attrs[k]);
  }
  for (int i = 0; i < g->n_outputs; i++) h = fnv_i64(h, g->outputs[i]);
  return h;
}

/* FNV of up to `bytes` bytes of f from offset `at` */
static cx_status hash_range(FILE *f, const char *path, long at, long bytes, uint64_t *h) {
  unsigned char buf[65536];
  if (fseek(f, at, SEEK_SET) != 0)
    return cx_fail(CX_ERR_IO, "%s: cannot seek: %s", path, strerror(errno));
  while (bytes > 0) {
    size_t want = bytes < (long)sizeof buf ? (size_t)bytes : sizeof buf;
    size_t got = fread(buf, 1, want, f);
    if (got == 0) break;
    *h = cx_kd_fnv(*h, buf, got);
    bytes -= (long)got;
  }
  if (ferror(f)) return cx_fail(CX_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
  return CX_OK;
}

cx_status cx_kd_data_identity(const char *path, const char *part, uint64_t *id) {
  struct stat st;
  if (stat(path, &st) != 0)
    return cx_fail(CX_ERR_IO, "%s: cannot read the data set: %s", path, strerror(errno));
  FILE *f = fopen(path, "rb");
  if (!f) return cx_fail(CX_ERR_IO, "%s: cannot read the data set: %s", path, strerror(errno));
  const long mib = 1 << 20, size = (long)st.st_size;
  uint64_t h = fnv_i64(CX_FNV_OFFSET, (int64_t)size);
  h = fnv_str(h, part && *part ? part : "");
  cx_status s = hash_range(f, path, 0, mib, &h);
  if (s == CX_OK && size > mib) s = hash_range(f, path, size - mib, mib, &h);
  fclose(f);
  *id = h;
  return s;
}

bool cx_kd_aug_mixing(const cx_augment *a) { return a->mixup_alpha > 0 || a->cutmix_alpha > 0; }

bool cx_kd_aug_random(const cx_augment *a) {
  return a->crop == CX_CROP_PAD || a->crop == CX_CROP_RESIZED || a->flip || a->cutout_prob > 0 ||
         cx_kd_aug_mixing(a);
}
