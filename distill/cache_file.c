/* Teacher-cache files. As with checkpoints (train/checkpoint.c), the HDF5 file is built in
 * memory by HDF5's core driver and written out by us behind a checksummed header: HDF5 1.10
 * crashes on some damaged files and on a file it could not flush, so HDF5 only ever sees an
 * image whose checksum matched, and a full disk is a clean error. Attributes are fixed-length
 * strings and integers (no variable-length heap to damage). */
#include "cache_file.h"

#include <errno.h>
#include <hdf5.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/file_replace.h"
#include "../data/h5_guard.h"
#include "../train/crc32c.h"
#include "distill.h"

/* ---- HDF5 errors ---- */

static herr_t first_reason(unsigned n, const H5E_error2_t *e, void *arg) {
  char *out = arg;
  if (n == 0 && e->desc) snprintf(out, 200, "%.*s", (int)strcspn(e->desc, "\n"), e->desc);
  return 0;
}

static cx_status h5_fail(cx_status s, const char *path, const char *what) {
  char why[200] = "no reason given by HDF5";
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first_reason, why);
  H5Eclear2(H5E_DEFAULT);
  return cx_fail(s, "%s: %s failed: %s", path, what, why);
}

/* ---- the header ----
 *   0 "CXKDCACH"  8 u32 format version  12 u32 header bytes (512)  16 u64 file size
 *   24 u32 CRC-32C of bytes [512, size)  28 u32 CRC-32C of bytes [0, 28); the rest zero. */

enum { HEADER_BYTES = 512 };
static const char magic[8] = {'C', 'X', 'K', 'D', 'C', 'A', 'C', 'H'};

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void seal(uint8_t *img, size_t size) {
  memcpy(img, magic, 8);
  put_le(img + 8, CX_KD_CACHE_FORMAT_VERSION, 4);
  put_le(img + 12, HEADER_BYTES, 4);
  put_le(img + 16, size, 8);
  put_le(img + 24, cx_crc32c(img + HEADER_BYTES, size - HEADER_BYTES), 4);
  put_le(img + 28, cx_crc32c(img, 28), 4);
}

static cx_status check_seal(const char *path, const uint8_t *img, size_t size) {
  if (size < HEADER_BYTES || memcmp(img, magic, 8) != 0)
    return cx_fail(CX_ERR_FORMAT, "%s: not a teacher-cache file (no header)", path);
  if (get_le(img + 28, 4) != cx_crc32c(img, 28) || get_le(img + 12, 4) != HEADER_BYTES)
    return cx_fail(CX_ERR_FORMAT, "%s: the header is damaged", path);
  uint64_t version = get_le(img + 8, 4);
  if (version != CX_KD_CACHE_FORMAT_VERSION)
    return cx_fail(CX_ERR_FORMAT, "%s: format version %llu; this build reads %d", path,
                   (unsigned long long)version, CX_KD_CACHE_FORMAT_VERSION);
  if (get_le(img + 16, 8) != size)
    return cx_fail(CX_ERR_FORMAT, "%s: %zu bytes, written with %llu: truncated or damaged", path,
                   size, (unsigned long long)get_le(img + 16, 8));
  if (get_le(img + 24, 4) != cx_crc32c(img + HEADER_BYTES, size - HEADER_BYTES))
    return cx_fail(CX_ERR_FORMAT, "%s: checksum mismatch: damaged after it was written", path);
  return CX_OK;
}

/* ---- types and attributes ---- */

/* IEEE half precision, little-endian: what h5py and numpy read as float16. */
static hid_t f16_type(void) {
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  if (t < 0) return -1;
  if (H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_size(t, 2) < 0 ||
      H5Tset_ebias(t, 15) < 0 || H5Tset_precision(t, 16) < 0) {
    H5Tclose(t);
    return -1;
  }
  return t;
}

static bool attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v) {
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = sp < 0 ? -1 : H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
  bool ok = a >= 0 && H5Awrite(a, mtype, v) >= 0;
  if (a >= 0) H5Aclose(a);
  if (sp >= 0) H5Sclose(sp);
  return ok;
}

static bool attr_str(hid_t obj, const char *name, const char *v) {
  hid_t t = H5Tcopy(H5T_C_S1);
  bool ok = t >= 0 && H5Tset_size(t, strlen(v) + 1) >= 0 && attr_write(obj, name, t, t, v);
  if (t >= 0) H5Tclose(t);
  return ok;
}

static bool attr_i64(hid_t obj, const char *name, int64_t v) {
  return attr_write(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

static bool read_i64(hid_t obj, const char *name, int64_t *v) {
  hid_t a = H5Aexists(obj, name) > 0 ? H5Aopen(obj, name, H5P_DEFAULT) : -1;
  bool ok = a >= 0 && H5Aread(a, H5T_NATIVE_INT64, v) >= 0;
  if (a >= 0) H5Aclose(a);
  return ok;
}

static bool read_str(hid_t obj, const char *name, char *buf, size_t size) {
  hid_t a = H5Aexists(obj, name) > 0 ? H5Aopen(obj, name, H5P_DEFAULT) : -1;
  hid_t ft = a >= 0 ? H5Aget_type(a) : -1, mt = H5Tcopy(H5T_C_S1);
  bool ok = ft >= 0 && mt >= 0 && H5Tget_class(ft) == H5T_STRING && H5Tis_variable_str(ft) == 0;
  size_t n = ok ? H5Tget_size(ft) : 0;
  char *tmp = ok ? calloc(n + 1, 1) : NULL;
  ok = tmp && H5Tset_size(mt, n + 1) >= 0 && H5Aread(a, mt, tmp) >= 0;
  if (ok) snprintf(buf, size, "%s", tmp);
  free(tmp);
  if (mt >= 0) H5Tclose(mt);
  if (ft >= 0) H5Tclose(ft);
  if (a >= 0) H5Aclose(a);
  return ok;
}

/* ---- writing ---- */

static bool write_dataset(hid_t f, const char *name, hid_t type, int rank, int64_t m, int64_t k,
                          const void *data) {
  hsize_t dims[2] = {(hsize_t)m, (hsize_t)k};
  hid_t sp = H5Screate_simple(rank, dims, NULL);
  hid_t ds = sp < 0 ? -1 : H5Dcreate2(f, name, type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  bool ok = ds >= 0 && (m == 0 || H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
  if (ds >= 0) H5Dclose(ds);
  if (sp >= 0) H5Sclose(sp);
  return ok;
}

static bool write_meta(hid_t f, const cx_kd_cache_meta *m) {
  char created[32];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return attr_str(f, "format", CX_KD_CACHE_FORMAT) &&
         attr_i64(f, "format_version", CX_KD_CACHE_FORMAT_VERSION) && attr_str(f, "key", m->key) &&
         attr_str(f, "description", m->description ? m->description : "") &&
         attr_i64(f, "epoch", m->epoch) && attr_i64(f, "classes", m->classes) &&
         attr_i64(f, "k", m->k) && attr_i64(f, "samples", m->samples) &&
         attr_str(f, "created", created) && attr_str(f, "tool", "compress");
}

static bool write_rows(hid_t f, const cx_kd_cache_meta *m, const cx_kd_cache_rows *r) {
  hid_t h = f16_type();
  bool ok = h >= 0 && write_dataset(f, "ids", H5T_STD_I64LE, 1, r->m, 1, r->ids) &&
            write_dataset(f, "top_class", H5T_STD_U16LE, 2, r->m, m->k, r->cls) &&
            write_dataset(f, "top_logit", h, 2, r->m, m->k, r->val) &&
            write_dataset(f, "fill", h, 1, r->m, 1, r->fill);
  if (h >= 0) H5Tclose(h);
  return ok;
}

/* The file, header included, in *img (malloc'ed). */
static cx_status build_image(const char *path, const cx_kd_cache_meta *m,
                             const cx_kd_cache_rows *r, uint8_t **img, size_t *size) {
  size_t guess = (size_t)r->m * (size_t)(8 + 4 * m->k + 2) + (1 << 16);
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), f = -1;
  if (fapl >= 0 && H5Pset_fapl_core(fapl, guess, 0) >= 0)
    f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (fapl >= 0) H5Pclose(fapl);
  if (f < 0) return h5_fail(CX_ERR_IO, path, "H5Fcreate (in memory)");
  cx_status s = CX_OK;
  if (!write_meta(f, m) || !write_rows(f, m, r) || H5Fflush(f, H5F_SCOPE_LOCAL) < 0)
    s = h5_fail(CX_ERR_IO, path, "writing the cache");
  ssize_t n = s == CX_OK ? H5Fget_file_image(f, NULL, 0) : 0;
  if (s == CX_OK && n <= 0) s = h5_fail(CX_ERR_IO, path, "H5Fget_file_image");
  if (s == CX_OK && !(*img = calloc((size_t)n + HEADER_BYTES, 1)))
    s = cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  if (s == CX_OK && H5Fget_file_image(f, *img + HEADER_BYTES, (size_t)n) != n)
    s = h5_fail(CX_ERR_IO, path, "H5Fget_file_image");
  if (H5Fclose(f) < 0 && s == CX_OK) s = h5_fail(CX_ERR_IO, path, "H5Fclose");
  if (s != CX_OK) {
    free(*img);
    *img = NULL;
    return s;
  }
  *size = (size_t)n + HEADER_BYTES;
  seal(*img, *size);
  return CX_OK;
}

cx_status cx_kd_cache_file_write(const char *path, const cx_kd_cache_meta *meta,
                                 const cx_kd_cache_rows *rows) {
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  uint8_t *img = NULL;
  size_t size = 0;
  cx_status s = build_image(path, meta, rows, &img, &size);
  if (s == CX_OK) s = cx_file_replace(path, img, size);
  free(img);
  return s;
}

/* ---- reading ---- */

static cx_status slurp(const char *path, uint8_t **img, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return cx_fail(CX_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  cx_status s = CX_OK;
  if (n < 0 || fseek(f, 0, SEEK_SET) != 0) s = cx_fail(CX_ERR_IO, "%s: cannot seek", path);
  else if (!(*img = malloc((size_t)n + 1))) s = cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  else if (fread(*img, 1, (size_t)n, f) != (size_t)n)
    s = cx_fail(CX_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
  fclose(f);
  *size = (size_t)(n > 0 ? n : 0);
  return s;
}

static cx_status check_meta(const char *path, hid_t f, const cx_kd_cache_meta *want) {
  char format[64] = "", key[64] = "";
  int64_t version = 0, v[4] = {0};
  const char *names[4] = {"epoch", "classes", "k", "samples"};
  const int64_t wants[4] = {want->epoch, want->classes, want->k, want->samples};
  if (!read_str(f, "format", format, sizeof format) || strcmp(format, CX_KD_CACHE_FORMAT) ||
      !read_i64(f, "format_version", &version) || version != CX_KD_CACHE_FORMAT_VERSION)
    return cx_fail(CX_ERR_FORMAT, "%s: not a teacher-cache file of format version %d", path,
                   CX_KD_CACHE_FORMAT_VERSION);
  if (!read_str(f, "key", key, sizeof key) || strcmp(key, want->key) != 0)
    return cx_fail(CX_ERR_FORMAT, "%s: written for key %s, not %s", path, key, want->key);
  for (int i = 0; i < 4; i++)
    if (!read_i64(f, names[i], &v[i]) || v[i] != wants[i])
      return cx_fail(CX_ERR_FORMAT, "%s: %s is %lld, expected %lld", path, names[i],
                     (long long)v[i], (long long)wants[i]);
  return CX_OK;
}

/* Dataset `name` must have dims {m, k} (rank 1 when k < 0); *m < 0 takes its length. */
static cx_status read_dataset(const char *path, hid_t f, const char *name, hid_t type, int64_t *m,
                              int64_t k, void **out) {
  hid_t ds = H5Dopen2(f, name, H5P_DEFAULT), sp = ds >= 0 ? H5Dget_space(ds) : -1;
  hsize_t dims[2] = {0, 0};
  int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
  bool ok = rank == (k < 0 ? 1 : 2) && H5Sget_simple_extent_dims(sp, dims, NULL) == rank;
  if (ok && *m < 0) *m = (int64_t)dims[0];
  ok = ok && (int64_t)dims[0] == *m && (k < 0 || (int64_t)dims[1] == k);
  size_t bytes = (size_t)*m * (size_t)(k < 0 ? 1 : k) * H5Tget_size(type);
  cx_status s = CX_OK;
  if (!ok) s = cx_fail(CX_ERR_FORMAT, "%s: dataset '%s' is missing or of the wrong shape", path, name);
  else if ((s = cx_h5_check_stored(f, path, ds, name, rank, dims, H5Tget_size(type))) != CX_OK)
    ;
  else if (!(*out = malloc(bytes + 8))) s = cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  else if (bytes && H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) < 0)
    s = h5_fail(CX_ERR_FORMAT, path, name);
  if (sp >= 0) H5Sclose(sp);
  if (ds >= 0) H5Dclose(ds);
  H5Eclear2(H5E_DEFAULT);
  return s;
}

static cx_status read_rows(const char *path, hid_t f, int64_t k, cx_kd_cache_rows *r) {
  hid_t h = f16_type();
  if (h < 0) return h5_fail(CX_ERR_IO, path, "making a float16 type");
  r->m = -1;
  cx_status s = read_dataset(path, f, "ids", H5T_NATIVE_INT64, &r->m, -1, (void **)&r->ids);
  if (s == CX_OK)
    s = read_dataset(path, f, "top_class", H5T_NATIVE_UINT16, &r->m, k, (void **)&r->cls);
  if (s == CX_OK) s = read_dataset(path, f, "top_logit", h, &r->m, k, (void **)&r->val);
  if (s == CX_OK) s = read_dataset(path, f, "fill", h, &r->m, -1, (void **)&r->fill);
  H5Tclose(h);
  return s;
}

static cx_status open_image(const char *path, const uint8_t *img, size_t size, hid_t *f) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  *f = -1;
  /* the name must not be an existing file, or the core driver opens that file instead */
  char name[64];
  snprintf(name, sizeof name, "teacher-cache-image-%p", (const void *)img);
  if (fapl >= 0 && H5Pset_fapl_core(fapl, 1 << 16, 0) >= 0 &&
      H5Pset_file_image(fapl, (void *)(img + HEADER_BYTES), size - HEADER_BYTES) >= 0)
    *f = H5Fopen(name, H5F_ACC_RDONLY, fapl);
  if (fapl >= 0) H5Pclose(fapl);
  return *f < 0 ? h5_fail(CX_ERR_FORMAT, path, "H5Fopen") : CX_OK;
}

cx_status cx_kd_cache_file_read(const char *path, const cx_kd_cache_meta *want,
                                cx_kd_cache_rows *rows) {
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  memset(rows, 0, sizeof *rows);
  uint8_t *img = NULL;
  size_t size = 0;
  hid_t f = -1;
  cx_status s = slurp(path, &img, &size);
  if (s == CX_OK) s = check_seal(path, img, size);
  if (s == CX_OK) s = open_image(path, img, size, &f);
  if (s == CX_OK) s = check_meta(path, f, want);
  if (s == CX_OK) s = read_rows(path, f, want->k, rows);
  for (int64_t i = 0; s == CX_OK && i < rows->m; i++)
    if (rows->ids[i] < 0 || rows->ids[i] >= want->samples)
      s = cx_fail(CX_ERR_FORMAT, "%s: sample id %lld out of range", path, (long long)rows->ids[i]);
  for (int64_t i = 0; s == CX_OK && i < rows->m * want->k; i++)
    if (rows->cls[i] >= want->classes)
      s = cx_fail(CX_ERR_FORMAT, "%s: class %u out of range", path, rows->cls[i]);
  if (f >= 0) H5Fclose(f);
  free(img);
  if (s != CX_OK) cx_kd_cache_rows_free(rows);
  return s;
}

void cx_kd_cache_rows_free(cx_kd_cache_rows *r) {
  free(r->ids);
  free(r->cls);
  free(r->val);
  free(r->fill);
  memset(r, 0, sizeof *r);
}
