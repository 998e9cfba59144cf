/* Checkpoints in HDF5: written to a temporary file that is synced and renamed into place, read
 * back only after every name, dtype and shape has been checked against what the caller holds. */
#include "checkpoint.h"

#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/file_replace.h"
#include "../data/h5_guard.h"
#include "crc32c.h"

/* ---- HDF5 errors ---- */

/* HDF5 prints its error stack unless told not to; our messages carry its innermost reason. */
static void h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

typedef struct h5_reason {
  char text[300];
  bool found;
} h5_reason;

/* HDF5's I/O errors read "file write failed: time = ..., filename = ..., errno = 27, error
 * message = 'File too large', ..." over several lines: we keep "file write failed: File too
 * large"; other reasons are kept to their first line. */
static void shorten_reason(const char *desc, char *out, size_t size) {
  const char *msg = strstr(desc, "error message = '"), *colon = strchr(desc, ':');
  if (msg && colon && colon < msg) {
    msg += strlen("error message = '");
    const char *end = strchr(msg, '\'');
    snprintf(out, size, "%.*s: %.*s", (int)(colon - desc), desc,
             (int)(end ? end - msg : (ptrdiff_t)strlen(msg)), msg);
  } else {
    snprintf(out, size, "%.*s", (int)strcspn(desc, "\n"), desc);
  }
}

static herr_t first_reason(unsigned n, const H5E_error2_t *e, void *arg) {
  (void)n;
  h5_reason *r = arg;
  if (!r->found && e->desc && *e->desc) {
    shorten_reason(e->desc, r->text, sizeof r->text);
    r->found = true;
  }
  return 0;
}

/* "<path>: <what>: <call> failed: <HDF5's reason>"; what may be NULL (the file itself). */
static cx_status h5_fail(cx_status s, const char *path, const char *what, const char *call) {
  h5_reason r = {.found = false};
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first_reason, &r);
  H5Eclear2(H5E_DEFAULT);
  const char *guard = cx_h5_guard_refusal();
  const char *why = r.found ? r.text : guard ? guard : "no reason given by HDF5";
  if (what) return cx_fail(s, "%s: %s: %s failed: %s", path, what, call, why);
  return cx_fail(s, "%s: %s failed: %s", path, call, why);
}

/* ---- dtypes and names ---- */

/* f16 and bf16 are stored as their 16-bit patterns; the "dtype" attribute says which. */
static hid_t file_type(cx_dtype t) {
  switch (t) {
  case CX_F32: return H5T_IEEE_F32LE;
  case CX_F64: return H5T_IEEE_F64LE;
  case CX_F16:
  case CX_BF16: return H5T_STD_U16LE;
  case CX_S8: return H5T_STD_I8LE;
  case CX_U8:
  case CX_BOOL: return H5T_STD_U8LE;
  case CX_S32: return H5T_STD_I32LE;
  case CX_S64: return H5T_STD_I64LE;
  default: return -1;
  }
}

static hid_t mem_type(cx_dtype t) {
  switch (t) {
  case CX_F32: return H5T_NATIVE_FLOAT;
  case CX_F64: return H5T_NATIVE_DOUBLE;
  case CX_F16:
  case CX_BF16: return H5T_NATIVE_UINT16;
  case CX_S8: return H5T_NATIVE_INT8;
  case CX_U8:
  case CX_BOOL: return H5T_NATIVE_UINT8;
  case CX_S32: return H5T_NATIVE_INT32;
  case CX_S64: return H5T_NATIVE_INT64;
  default: return -1;
  }
}

/* The link name of a tensor: '%' and '/' percent-encoded, and "." (HDF5's "this group") too. */
static char *link_name(const char *name) {
  char *out = malloc(3 * strlen(name) + 4);
  if (!out) return NULL;
  if (strcmp(name, ".") == 0) return strcpy(out, "%2E");
  char *o = out;
  for (const char *p = name; *p; p++) {
    if (*p == '%') o += sprintf(o, "%%25");
    else if (*p == '/') o += sprintf(o, "%%2F");
    else *o++ = *p;
  }
  *o = '\0';
  return out;
}

/* ---- a group of named tensors, as save and load see it ---- */

typedef struct tensor_set {
  const char *group; /* "params" or "optimizer" */
  const char *kind;  /* "parameter" or "optimizer state", for messages */
  const char *where; /* "model" or "optimizer": what the caller's tensors belong to */
  int n;
  const char *const *names;
  const cx_tensor *const *t;
} tensor_set;

/* Names given, non-empty and distinct; tensors contiguous CPU memory of a known dtype. */
static cx_status check_set(const char *path, const tensor_set *s) {
  if (s->n < 0 || (s->n > 0 && (!s->names || !s->t)))
    return cx_fail(CX_ERR_ARG, "%s: %d %ss without names or tensors", path, s->n, s->kind);
  for (int i = 0; i < s->n; i++) {
    const char *nm = s->names[i];
    const cx_tensor *t = s->t[i];
    if (!nm || !*nm) return cx_fail(CX_ERR_ARG, "%s: %s %d has no name", path, s->kind, i);
    if (!t) return cx_fail(CX_ERR_ARG, "%s: %s '%s' has no tensor", path, s->kind, nm);
    if (t->device.kind != CX_DEVICE_CPU || !cx_tensor_is_contiguous(t) ||
        file_type(t->dtype) < 0 || (!t->data && cx_tensor_numel(t) > 0))
      return cx_fail(CX_ERR_ARG, "%s: %s '%s' must be a contiguous CPU tensor", path, s->kind,
                     nm);
    for (int j = 0; j < i; j++)
      if (strcmp(nm, s->names[j]) == 0)
        return cx_fail(CX_ERR_ARG, "%s: %s '%s' is given twice", path, s->kind, nm);
  }
  return CX_OK;
}

/* ---- attributes ---- */

static cx_status write_attr(const char *path, hid_t obj, const char *name, hid_t ftype,
                            hid_t mtype, const void *value) {
  hid_t sp = H5Screate(H5S_SCALAR), a = -1;
  cx_status s = CX_OK;
  char what[96];
  snprintf(what, sizeof what, "attribute '%s'", name);
  if (sp < 0) s = h5_fail(CX_ERR_IO, path, what, "H5Screate");
  else if ((a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT)) < 0)
    s = h5_fail(CX_ERR_IO, path, what, "H5Acreate2");
  else if (H5Awrite(a, mtype, value) < 0) s = h5_fail(CX_ERR_IO, path, what, "H5Awrite");
  if (a >= 0) H5Aclose(a);
  if (sp >= 0) H5Sclose(sp);
  return s;
}

static cx_status write_str(const char *path, hid_t obj, const char *name, const char *value) {
  hid_t t = H5Tcopy(H5T_C_S1);
  cx_status s;
  if (t < 0 || H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)
    s = h5_fail(CX_ERR_IO, path, name, "H5Tset_size");
  else s = write_attr(path, obj, name, t, t, &value);
  if (t >= 0) H5Tclose(t);
  return s;
}

static cx_status write_i64(const char *path, hid_t obj, const char *name, int64_t v) {
  return write_attr(path, obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

static cx_status write_u64(const char *path, hid_t obj, const char *name, uint64_t v) {
  return write_attr(path, obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v);
}

/* Opens attribute `name` of obj, failing with a message when it is absent. */
static cx_status open_attr(const char *path, hid_t obj, const char *name, hid_t *out) {
  char what[96];
  snprintf(what, sizeof what, "attribute '%s'", name);
  htri_t has = H5Aexists(obj, name);
  if (has < 0) return h5_fail(CX_ERR_FORMAT, path, what, "H5Aexists");
  if (!has) return cx_fail(CX_ERR_FORMAT, "%s: no %s (not a complete checkpoint)", path, what);
  if ((*out = H5Aopen(obj, name, H5P_DEFAULT)) < 0)
    return h5_fail(CX_ERR_FORMAT, path, what, "H5Aopen");
  return CX_OK;
}

/* A scalar integer attribute, read as int64 or uint64 (mtype). */
static cx_status read_int(const char *path, hid_t obj, const char *name, hid_t mtype, void *v) {
  hid_t a = -1;
  CX_TRY(open_attr(path, obj, name, &a));
  hid_t ft = H5Aget_type(a), sp = H5Aget_space(a);
  cx_status s = CX_OK;
  if (ft < 0 || sp < 0 || H5Tget_class(ft) != H5T_INTEGER ||
      H5Sget_simple_extent_type(sp) != H5S_SCALAR)
    s = cx_fail(CX_ERR_FORMAT, "%s: attribute '%s' must be a scalar integer", path, name);
  else if (H5Aread(a, mtype, v) < 0)
    s = h5_fail(CX_ERR_FORMAT, path, name, "H5Aread");
  if (sp >= 0) H5Sclose(sp);
  if (ft >= 0) H5Tclose(ft);
  H5Aclose(a);
  H5Eclear2(H5E_DEFAULT);
  return s;
}

/* A count (step, epoch, batch, rng_counter): an integer attribute of either sign, read with its
 * own sign (HDF5 would clamp -1 read as unsigned to 0, and 2^64-1 read as signed to 2^63-1), in
 * [0, CX_CHECKPOINT_COUNT_MAX]. */
static cx_status read_count(const char *path, hid_t f, const char *name, uint64_t *v) {
  hid_t a = -1;
  CX_TRY(open_attr(path, f, name, &a));
  hid_t ft = H5Aget_type(a);
  bool is_signed = ft >= 0 && H5Tget_class(ft) == H5T_INTEGER && H5Tget_sign(ft) != H5T_SGN_NONE;
  if (ft >= 0) H5Tclose(ft);
  H5Aclose(a);
  int64_t sv = 0;
  CX_TRY(read_int(path, f, name, is_signed ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64,
                  is_signed ? (void *)&sv : (void *)v));
  if (is_signed && sv < 0)
    return cx_fail(CX_ERR_FORMAT, "%s: attribute '%s' is %lld; a count is never negative", path,
                   name, (long long)sv);
  if (is_signed) *v = (uint64_t)sv;
  if (*v > CX_CHECKPOINT_COUNT_MAX)
    return cx_fail(CX_ERR_FORMAT, "%s: attribute '%s' is %llu, beyond any training run (at most "
                   "2^53)", path, name, (unsigned long long)*v);
  return CX_OK;
}

/* A scalar string attribute (variable or fixed length) into buf[size], cut to fit. */
static cx_status read_attr_str(const char *path, hid_t a, const char *name, char *buf,
                               size_t size) {
  hid_t ft = H5Aget_type(a), mt = H5Tcopy(H5T_C_S1), sp = H5Aget_space(a);
  /* one element: H5Aread writes all of them into the one string */
  hssize_t n = sp < 0 ? -1 : H5Sget_simple_extent_npoints(sp);
  if (sp >= 0) H5Sclose(sp);
  cx_status s = CX_OK;
  if (n != 1) {
    s = cx_fail(CX_ERR_FORMAT, "%s: attribute '%s' must hold one string, found %lld", path, name,
                (long long)n);
  } else if (ft < 0 || mt < 0 || H5Tget_class(ft) != H5T_STRING) {
    s = cx_fail(CX_ERR_FORMAT, "%s: attribute '%s' must be a string", path, name);
  } else if (H5Tset_cset(mt, H5Tget_cset(ft)) < 0) {
    s = h5_fail(CX_ERR_FORMAT, path, name, "H5Tset_cset");
  } else if (H5Tis_variable_str(ft) > 0) {
    char *v = NULL;
    H5Tset_size(mt, H5T_VARIABLE);
    if (H5Aread(a, mt, &v) < 0) s = h5_fail(CX_ERR_FORMAT, path, name, "H5Aread");
    snprintf(buf, size, "%s", v ? v : "");
    if (v) H5free_memory(v);
  } else {
    size_t n = H5Tget_size(ft);
    char *tmp = calloc(n + 1, 1);
    H5Tset_size(mt, n + 1);
    if (!tmp) s = cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
    else if (H5Aread(a, mt, tmp) < 0) s = h5_fail(CX_ERR_FORMAT, path, name, "H5Aread");
    else snprintf(buf, size, "%s", tmp);
    free(tmp);
  }
  if (mt >= 0) H5Tclose(mt);
  if (ft >= 0) H5Tclose(ft);
  H5Eclear2(H5E_DEFAULT);
  return s;
}

static cx_status read_str(const char *path, hid_t obj, const char *name, char *buf, size_t size) {
  hid_t a = -1;
  CX_TRY(open_attr(path, obj, name, &a));
  cx_status s = read_attr_str(path, a, name, buf, size);
  H5Aclose(a);
  return s;
}

/* ---- the header in HDF5's user block ----
 * HDF5 checks little of what it reads (a damaged heap of variable-length strings crashes HDF5
 * 1.10), so the whole file is checked before HDF5 sees it: the first 512 bytes, which HDF5
 * leaves to the user, hold
 *   0  "CXCKPT\r\n"   8  u32 format version   12  u32 header bytes (512)
 *   16 u64 file size  24 u32 CRC-32C of bytes [512, size)   28 u32 CRC-32C of bytes [0, 28)
 * all little-endian; the rest is zero, and must be. */

enum { HEADER_BYTES = 512, HEADER_USED = 32 };
static const char header_magic[8] = {'C', 'X', 'C', 'K', 'P', 'T', '\r', '\n'};

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* CRC-32C of f from its position to the end, and how many bytes that was. */
static bool crc_rest(FILE *f, uint32_t *crc, uint64_t *bytes) {
  enum { BUF = 1 << 20 };
  uint8_t *buf = malloc(BUF);
  if (!buf) return false;
  *crc = 0, *bytes = 0;
  for (size_t n; (n = fread(buf, 1, BUF, f)) > 0; *bytes += n)
    *crc = cx_crc32c_extend(*crc, buf, n);
  free(buf);
  return !ferror(f);
}

/* Fills the header in front of the HDF5 image at img + HEADER_BYTES. */
static void seal_image(uint8_t *img, size_t size) {
  memcpy(img, header_magic, 8);
  put_u32(img + 8, CX_CHECKPOINT_FORMAT_VERSION);
  put_u32(img + 12, HEADER_BYTES);
  put_u32(img + 16, (uint32_t)size);
  put_u32(img + 20, (uint32_t)((uint64_t)size >> 32));
  put_u32(img + 24, cx_crc32c(img + HEADER_BYTES, size - HEADER_BYTES));
  put_u32(img + 28, cx_crc32c(img, 28));
}

static cx_status check_header(const char *path, FILE *f, uint64_t *size, uint32_t *crc) {
  uint8_t h[HEADER_BYTES];
  if (fread(h, 1, HEADER_BYTES, f) != HEADER_BYTES || memcmp(h, header_magic, 8) != 0)
    return cx_fail(CX_ERR_FORMAT, "%s: not a compress checkpoint (no checkpoint header; the "
                   "file is empty, truncated or of another kind)", path);
  if (get_le(h + 28, 4) != cx_crc32c(h, 28))
    return cx_fail(CX_ERR_FORMAT, "%s: the checkpoint header is damaged (checksum mismatch)",
                   path);
  uint64_t version = get_le(h + 8, 4);
  if (version < 1 || version > CX_CHECKPOINT_FORMAT_VERSION)
    return cx_fail(CX_ERR_FORMAT, "%s: checkpoint format version %llu; this build reads "
                   "version %d", path, (unsigned long long)version, CX_CHECKPOINT_FORMAT_VERSION);
  bool zero = true;
  for (int i = HEADER_USED; i < HEADER_BYTES; i++) zero = zero && !h[i];
  if (get_le(h + 12, 4) != HEADER_BYTES || !zero)
    return cx_fail(CX_ERR_FORMAT, "%s: the checkpoint header is damaged (its size field or its "
                   "unused bytes changed)", path);
  *size = get_le(h + 16, 8);
  *crc = (uint32_t)get_le(h + 24, 4);
  return CX_OK;
}

/* The header, the file's size and its checksum: a file that passes is the one that was written. */
static cx_status verify_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return cx_fail(CX_ERR_IO, "%s: cannot read the checkpoint: %s", path, strerror(errno));
  uint64_t size = 0, rest = 0;
  uint32_t want = 0, got = 0;
  cx_status s = check_header(path, f, &size, &want);
  if (s == CX_OK && (fseek(f, HEADER_BYTES, SEEK_SET) != 0 || !crc_rest(f, &got, &rest)))
    s = cx_fail(CX_ERR_IO, "%s: cannot read the checkpoint: %s", path, strerror(errno));
  fclose(f);
  if (s != CX_OK) return s;
  if (rest + HEADER_BYTES != size)
    return cx_fail(CX_ERR_FORMAT, "%s: the checkpoint has %llu bytes but was written with %llu: "
                   "truncated or damaged", path, (unsigned long long)(rest + HEADER_BYTES),
                   (unsigned long long)size);
  if (got != want)
    return cx_fail(CX_ERR_FORMAT, "%s: checksum mismatch (written %08x, now %08x): the "
                   "checkpoint was damaged or changed after it was written", path, want, got);
  return CX_OK;
}

/* ---- saving ---- */

static cx_status write_meta(const char *path, hid_t f, const cx_checkpoint_meta *m) {
  char created[32];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
  CX_TRY(write_str(path, f, "format", CX_CHECKPOINT_FORMAT));
  CX_TRY(write_i64(path, f, "format_version", CX_CHECKPOINT_FORMAT_VERSION));
  CX_TRY(write_i64(path, f, "step", m->step));
  CX_TRY(write_i64(path, f, "epoch", m->epoch));
  CX_TRY(write_i64(path, f, "batch", m->batch));
  CX_TRY(write_u64(path, f, "seed", m->seed));
  CX_TRY(write_u64(path, f, "data_seed", m->data_seed));
  CX_TRY(write_u64(path, f, "rng_counter", m->rng_counter));
  CX_TRY(write_i64(path, f, "train_milliseconds", (int64_t)llround(m->seconds * 1000)));
  CX_TRY(write_str(path, f, "config_hash", m->config_hash));
  CX_TRY(write_str(path, f, "created", created));
  return write_str(path, f, "tool", m->tool[0] ? m->tool : "compress");
}

/* Chunked with a Fletcher-32 checksum, chunks of up to 16 MiB along the first dimension. Scalars
 * and empty tensors cannot be chunked: they are stored contiguous, without a checksum. */
static hid_t dataset_plist(const cx_tensor *t) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  int nd = t->shape.ndim;
  size_t bytes = cx_tensor_nbytes(t);
  if (dcpl < 0 || nd == 0 || bytes == 0) return dcpl;
  hsize_t chunk[CX_MAX_DIMS];
  for (int i = 0; i < nd; i++) chunk[i] = (hsize_t)t->shape.d[i];
  size_t row = bytes / (size_t)t->shape.d[0], limit = (size_t)16 << 20;
  chunk[0] = row >= limit ? 1 : (limit / row < chunk[0] ? limit / row : chunk[0]);
  if (H5Pset_chunk(dcpl, nd, chunk) < 0 || H5Pset_fletcher32(dcpl) < 0) {
    H5Pclose(dcpl);
    return -1;
  }
  return dcpl;
}

static cx_status write_tensor(const char *path, hid_t g, const tensor_set *set, int i) {
  const cx_tensor *t = set->t[i];
  char what[300], *ln = link_name(set->names[i]);
  snprintf(what, sizeof what, "%s '%s'", set->kind, set->names[i]);
  if (!ln) return cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  hsize_t dims[CX_MAX_DIMS];
  for (int k = 0; k < t->shape.ndim; k++) dims[k] = (hsize_t)t->shape.d[k];
  hid_t sp = t->shape.ndim ? H5Screate_simple(t->shape.ndim, dims, NULL) : H5Screate(H5S_SCALAR);
  hid_t dcpl = dataset_plist(t), ds = -1;
  cx_status s = CX_OK;
  if (sp < 0 || dcpl < 0) s = h5_fail(CX_ERR_IO, path, what, "H5Screate/H5Pset_chunk");
  else if ((ds = H5Dcreate2(g, ln, file_type(t->dtype), sp, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0)
    s = h5_fail(CX_ERR_IO, path, what, "H5Dcreate2");
  else if (cx_tensor_numel(t) > 0 &&
           H5Dwrite(ds, mem_type(t->dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, t->data) < 0)
    s = h5_fail(CX_ERR_IO, path, what, "H5Dwrite");
  if (s == CX_OK) s = write_str(path, ds, "name", set->names[i]);
  if (s == CX_OK) s = write_str(path, ds, "dtype", cx_dtype_name(t->dtype));
  if (ds >= 0) H5Dclose(ds);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (sp >= 0) H5Sclose(sp);
  free(ln);
  return s;
}

static cx_status write_set(const char *path, hid_t f, const tensor_set *set) {
  hid_t g = H5Gcreate2(f, set->group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (g < 0) return h5_fail(CX_ERR_IO, path, set->group, "H5Gcreate2");
  cx_status s = CX_OK;
  for (int i = 0; s == CX_OK && i < set->n; i++) s = write_tensor(path, g, set, i);
  H5Gclose(g);
  return s;
}

/* The file is built in memory (HDF5's core driver, no backing file) and written out by us: a
 * write that fails (a full disk) then fails cleanly, where HDF5 1.10 keeps a file it could not
 * flush open and crashes when the library shuts down. The image is a plain HDF5 file; written
 * after our 512-byte header, it is found there by HDF5's search for its signature at 0, 512,
 * 1024... (the way HDF5 reads any file with a user block). The default (oldest) file format is
 * kept: HDF5 1.10's file images of the 1.8+ formats carry a stale superblock checksum. */
static cx_status create_image(const char *path, size_t bytes, hid_t *f) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  cx_status s = CX_OK;
  if (fapl < 0 || H5Pset_fapl_core(fapl, bytes, 0) < 0)
    s = h5_fail(CX_ERR_IO, path, NULL, "H5Pset_fapl_core");
  else if ((*f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl)) < 0)
    s = h5_fail(CX_ERR_IO, path, NULL, "H5Fcreate (in memory)");
  if (fapl >= 0) H5Pclose(fapl);
  return s;
}

static size_t set_bytes(const tensor_set *set) {
  size_t n = 0;
  for (int i = 0; i < set->n; i++) n += cx_tensor_nbytes(set->t[i]) + 1024;
  return n;
}

/* The whole checkpoint file, header included, into *img (malloc'ed) of *size bytes. */
static cx_status build_image(const char *path, const cx_checkpoint_meta *m,
                             const tensor_set *params, const tensor_set *state, uint8_t **img,
                             size_t *size) {
  hid_t f = -1;
  CX_TRY(create_image(path, set_bytes(params) + set_bytes(state) + (1 << 16), &f));
  cx_status s = write_meta(path, f, m);
  if (s == CX_OK) s = write_set(path, f, params);
  if (s == CX_OK) s = write_set(path, f, state);
  if (s == CX_OK && H5Fflush(f, H5F_SCOPE_LOCAL) < 0)
    s = h5_fail(CX_ERR_IO, path, NULL, "H5Fflush");
  ssize_t n = s == CX_OK ? H5Fget_file_image(f, NULL, 0) : 0;
  if (s == CX_OK && n <= 0) s = h5_fail(CX_ERR_IO, path, NULL, "H5Fget_file_image");
  if (s == CX_OK && !(*img = calloc((size_t)n + HEADER_BYTES, 1)))
    s = cx_fail(CX_ERR_NOMEM, "%s: out of memory for a %lld-byte checkpoint", path,
                (long long)n);
  if (s == CX_OK && H5Fget_file_image(f, *img + HEADER_BYTES, (size_t)n) != n)
    s = h5_fail(CX_ERR_IO, path, NULL, "H5Fget_file_image");
  if (H5Fclose(f) < 0 && s == CX_OK) s = h5_fail(CX_ERR_IO, path, NULL, "H5Fclose");
  if (s != CX_OK) {
    free(*img);
    *img = NULL;
    return s;
  }
  *size = (size_t)n + HEADER_BYTES;
  seal_image(*img, *size);
  return CX_OK;
}

cx_status cx_checkpoint_save(const char *path, const cx_checkpoint_meta *meta, int n_params,
                             const char *const *names, const cx_tensor *const *params,
                             int n_state, const char *const *state_names,
                             const cx_tensor *const *state) {
  h5_quiet();
  tensor_set ps = {"params", "parameter", "model", n_params, names, params};
  tensor_set ss = {"optimizer", "optimizer state", "optimizer", n_state, state_names, state};
  CX_TRY(check_set(path, &ps));
  CX_TRY(check_set(path, &ss));
  if (strnlen(meta->config_hash, sizeof meta->config_hash) > CX_CHECKPOINT_HASH_MAX ||
      strnlen(meta->tool, sizeof meta->tool) >= sizeof meta->tool)
    return cx_fail(CX_ERR_ARG, "%s: the config hash or tool name is not a terminated string",
                   path);
  uint8_t *img = NULL;
  size_t size = 0;
  cx_status s = build_image(path, meta, &ps, &ss, &img, &size);
  if (s == CX_OK) s = cx_file_replace(path, img, size);
  free(img);
  return s;
}

/* ---- loading ---- */

/* Optional: checkpoints written before it was recorded have none. */
static cx_status read_seconds(const char *path, hid_t f, cx_checkpoint_meta *m) {
  int64_t ms = 0;
  if (H5Aexists(f, "train_milliseconds") > 0)
    CX_TRY(read_int(path, f, "train_milliseconds", H5T_NATIVE_INT64, &ms));
  H5Eclear2(H5E_DEFAULT);
  m->seconds = (double)ms / 1000;
  return CX_OK;
}

static cx_status read_meta(const char *path, hid_t f, cx_checkpoint_meta *m) {
  char format[64];
  memset(m, 0, sizeof *m);
  CX_TRY(read_str(path, f, "format", format, sizeof format));
  if (strcmp(format, CX_CHECKPOINT_FORMAT) != 0)
    return cx_fail(CX_ERR_FORMAT, "%s: not a checkpoint (format '%s', expected '%s')", path,
                   format, CX_CHECKPOINT_FORMAT);
  CX_TRY(read_int(path, f, "format_version", H5T_NATIVE_INT64, &m->format_version));
  if (m->format_version < 1 || m->format_version > CX_CHECKPOINT_FORMAT_VERSION)
    return cx_fail(CX_ERR_FORMAT, "%s: checkpoint format version %lld; this build reads "
                   "version %d", path, (long long)m->format_version,
                   CX_CHECKPOINT_FORMAT_VERSION);
  uint64_t step, epoch, batch;
  CX_TRY(read_count(path, f, "step", &step));
  CX_TRY(read_count(path, f, "epoch", &epoch));
  CX_TRY(read_count(path, f, "batch", &batch));
  m->step = (int64_t)step, m->epoch = (int64_t)epoch, m->batch = (int64_t)batch;
  CX_TRY(read_int(path, f, "seed", H5T_NATIVE_UINT64, &m->seed));
  CX_TRY(read_int(path, f, "data_seed", H5T_NATIVE_UINT64, &m->data_seed));
  CX_TRY(read_count(path, f, "rng_counter", &m->rng_counter));
  CX_TRY(read_seconds(path, f, m));
  CX_TRY(read_str(path, f, "config_hash", m->config_hash, sizeof m->config_hash));
  return read_str(path, f, "tool", m->tool, sizeof m->tool);
}

/* Regular files only (a FIFO would block), checksummed, then opened through the guard driver
 * (data/h5_guard.h): a file whose checksum was made to match still cannot hang libhdf5. */
static cx_status open_file(const char *path, hid_t *f) {
  h5_quiet();
  if (access(path, F_OK) == 0) CX_TRY(cx_h5_check_regular(path));
  CX_TRY(verify_file(path));
  hid_t fapl = cx_h5_guard_fapl();
  if (fapl < 0) return h5_fail(CX_ERR_FORMAT, path, NULL, "H5FDregister");
  *f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  if (*f < 0) return h5_fail(CX_ERR_FORMAT, path, "not a readable HDF5 checkpoint", "H5Fopen");
  return CX_OK;
}

cx_status cx_checkpoint_peek(const char *path, cx_checkpoint_meta *meta) {
  hid_t f = -1;
  CX_TRY(open_file(path, &f));
  cx_status s = read_meta(path, f, meta);
  H5Fclose(f);
  H5Eclear2(H5E_DEFAULT);
  return s;
}

/* The dataset's "dtype" attribute and shape must match t's. */
static cx_status check_dataset(const char *path, hid_t ds, const tensor_set *set, int i) {
  const cx_tensor *t = set->t[i];
  const char *nm = set->names[i];
  char dtype[32], want[CX_SHAPE_STR], have[CX_SHAPE_STR];
  CX_TRY(read_str(path, ds, "dtype", dtype, sizeof dtype));
  if (strcmp(dtype, cx_dtype_name(t->dtype)) != 0)
    return cx_fail(CX_ERR_SHAPE, "%s: %s '%s' is %s in the checkpoint but %s in the %s", path,
                   set->kind, nm, dtype, cx_dtype_name(t->dtype), set->where);
  /* the stored type too: HDF5 would convert an f64 or int dataset labelled "f32" silently */
  hid_t ft = H5Dget_type(ds), want_t = file_type(t->dtype);
  size_t elem = H5Tget_size(want_t);
  bool same = ft >= 0 && H5Tget_class(ft) == H5Tget_class(want_t) &&
              H5Tget_size(ft) == H5Tget_size(want_t) &&
              (H5Tget_class(ft) != H5T_INTEGER || H5Tget_sign(ft) == H5Tget_sign(want_t));
  if (ft >= 0) H5Tclose(ft);
  if (!same)
    return cx_fail(CX_ERR_SHAPE, "%s: %s '%s' is labelled %s but stored as another type in the "
                   "checkpoint", path, set->kind, nm, dtype);
  hid_t sp = H5Dget_space(ds);
  int nd = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
  hsize_t dims[CX_MAX_DIMS];
  cx_status s = CX_OK;
  if (nd < 0 || nd > CX_MAX_DIMS || H5Sget_simple_extent_dims(sp, dims, NULL) < 0)
    s = h5_fail(CX_ERR_FORMAT, path, nm, "H5Sget_simple_extent_dims");
  if (sp >= 0) H5Sclose(sp);
  CX_TRY(s);
  cx_shape file = {.ndim = nd};
  for (int k = 0; k < nd; k++) file.d[k] = (int64_t)dims[k];
  if (!cx_shape_equal(&file, &t->shape))
    return cx_fail(CX_ERR_SHAPE, "%s: %s '%s' has shape %s in the checkpoint but %s in the %s",
                   path, set->kind, nm, cx_shape_str(&file, have), cx_shape_str(&t->shape, want),
                   set->where);
  hid_t f = H5Iget_file_id(ds);
  s = f < 0 ? h5_fail(CX_ERR_FORMAT, path, nm, "H5Iget_file_id")
            : cx_h5_check_stored(f, path, ds, nm, nd, dims, elem);
  if (f >= 0) H5Fclose(f);
  return s;
}

static cx_status open_dataset(const char *path, hid_t g, const tensor_set *set, int i,
                              hid_t *out) {
  char *ln = link_name(set->names[i]);
  if (!ln) return cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  htri_t has = H5Lexists(g, ln, H5P_DEFAULT);
  cx_status s = CX_OK;
  /* a failed lookup is damage (the driver's refusal says which), not a missing tensor */
  if (has < 0) {
    s = h5_fail(CX_ERR_FORMAT, path, set->names[i], "H5Lexists");
  } else if (has == 0) {
    s = cx_fail(CX_ERR_SHAPE, "%s: %s '%s' of the %s is not in the checkpoint (/%s/%s)", path,
                set->kind, set->names[i], set->where, set->group, ln);
  } else if ((*out = H5Dopen2(g, ln, H5P_DEFAULT)) < 0) {
    s = h5_fail(CX_ERR_FORMAT, path, set->names[i], "H5Dopen2");
  } else if ((s = check_dataset(path, *out, set, i)) != CX_OK) {
    H5Dclose(*out);
    *out = -1;
  }
  free(ln);
  return s;
}

typedef struct extra_search {
  const tensor_set *set;
  char found[256];
} extra_search;

static herr_t find_unlisted(hid_t g, const char *name, const H5L_info_t *info, void *arg) {
  (void)g, (void)info;
  extra_search *e = arg;
  for (int i = 0; i < e->set->n; i++) {
    char *ln = link_name(e->set->names[i]);
    bool same = ln && strcmp(ln, name) == 0;
    free(ln);
    if (same) return 0;
  }
  snprintf(e->found, sizeof e->found, "%s", name);
  return 1;
}

/* Every link of the group is one of the listed names (each of which was found). */
static cx_status check_no_extra(const char *path, hid_t g, const tensor_set *set) {
  H5G_info_t gi;
  if (H5Gget_info(g, &gi) < 0) return h5_fail(CX_ERR_FORMAT, path, set->group, "H5Gget_info");
  if (gi.nlinks == (hsize_t)set->n) return CX_OK;
  extra_search e = {.set = set, .found = "?"};
  H5Literate(g, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, find_unlisted, &e);
  H5Eclear2(H5E_DEFAULT);
  return cx_fail(CX_ERR_SHAPE, "%s: the checkpoint has %s '%s' that the %s does not (%llu in "
                 "the checkpoint, %d in the %s)", path, set->kind, e.found, set->where,
                 (unsigned long long)gi.nlinks, set->n, set->where);
}

/* Opens and checks every dataset of set into ds[0..n); fills nothing. */
static cx_status open_set(const char *path, hid_t f, const tensor_set *set, hid_t *ds) {
  htri_t has = H5Lexists(f, set->group, H5P_DEFAULT);
  if (has < 0) return h5_fail(CX_ERR_FORMAT, path, set->group, "H5Lexists");
  if (has == 0) {
    return cx_fail(CX_ERR_FORMAT, "%s: no group '/%s' (not a complete checkpoint)", path,
                   set->group);
  }
  hid_t g = H5Gopen2(f, set->group, H5P_DEFAULT);
  if (g < 0) return h5_fail(CX_ERR_FORMAT, path, set->group, "H5Gopen2");
  cx_status s = CX_OK;
  for (int i = 0; s == CX_OK && i < set->n; i++) s = open_dataset(path, g, set, i, &ds[i]);
  if (s == CX_OK) s = check_no_extra(path, g, set);
  H5Gclose(g);
  return s;
}

static cx_status read_one(const char *path, const tensor_set *set, int i, hid_t ds, void *dst) {
  if (H5Dread(ds, mem_type(set->t[i]->dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) >= 0)
    return CX_OK;
  char what[300];
  snprintf(what, sizeof what, "%s '%s'", set->kind, set->names[i]);
  return h5_fail(CX_ERR_FORMAT, path, what, "H5Dread");
}

/* Index of the first NaN or infinity among n values of a float dtype, or -1. */
static int64_t first_nonfinite(cx_dtype t, const void *p, int64_t n) {
  for (int64_t k = 0; k < n; k++) {
    bool bad = false;
    if (t == CX_F32) bad = !isfinite(((const float *)p)[k]);
    else if (t == CX_F64) bad = !isfinite(((const double *)p)[k]);
    else if (t == CX_F16) bad = (((const uint16_t *)p)[k] & 0x7c00) == 0x7c00;
    else if (t == CX_BF16) bad = (((const uint16_t *)p)[k] & 0x7f80) == 0x7f80;
    if (bad) return k;
  }
  return -1;
}

static bool is_float(cx_dtype t) {
  return t == CX_F32 || t == CX_F64 || t == CX_F16 || t == CX_BF16;
}

/* Every float tensor of the set is read into scratch (of the largest one's size) and must hold
 * finite values only: a trained model and its optimizer state never hold NaN or infinity
 * (training stops on a non-finite loss), so one there is damage, found before any tensor is
 * written. */
static cx_status check_finite(const char *path, const tensor_set *set, const hid_t *ds,
                              void *scratch) {
  for (int i = 0; i < set->n; i++) {
    const cx_tensor *t = set->t[i];
    int64_t n = cx_tensor_numel(t);
    if (!is_float(t->dtype) || n == 0) continue;
    CX_TRY(read_one(path, set, i, ds[i], scratch));
    int64_t k = first_nonfinite(t->dtype, scratch, n);
    if (k >= 0)
      return cx_fail(CX_ERR_NUMERIC, "%s: %s '%s' holds a NaN or an infinity (element %lld): a "
                     "damaged checkpoint", path, set->kind, set->names[i], (long long)k);
  }
  return CX_OK;
}

static size_t largest_float(const tensor_set *set) {
  size_t m = 0;
  for (int i = 0; i < set->n; i++)
    if (is_float(set->t[i]->dtype) && cx_tensor_nbytes(set->t[i]) > m)
      m = cx_tensor_nbytes(set->t[i]);
  return m;
}

static cx_status read_set(const char *path, const tensor_set *set, cx_tensor *const *t,
                          const hid_t *ds) {
  for (int i = 0; i < set->n; i++)
    if (cx_tensor_numel(t[i]) > 0) CX_TRY(read_one(path, set, i, ds[i], t[i]->data));
  return CX_OK;
}

static cx_status load_sets(const char *path, hid_t f, const tensor_set *ps, cx_tensor *const *p,
                           const tensor_set *ss, cx_tensor *const *st) {
  int n = ps->n + ss->n;
  hid_t *ds = malloc((size_t)(n ? n : 1) * sizeof *ds);
  if (!ds) return cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  for (int i = 0; i < n; i++) ds[i] = -1;
  cx_status s = open_set(path, f, ps, ds);
  if (s == CX_OK && ss->n > 0) s = open_set(path, f, ss, ds + ps->n);
  size_t big = largest_float(ps) > largest_float(ss) ? largest_float(ps) : largest_float(ss);
  void *scratch = s == CX_OK ? malloc(big ? big : 1) : NULL;
  if (s == CX_OK && !scratch) s = cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  if (s == CX_OK) s = check_finite(path, ps, ds, scratch);
  if (s == CX_OK) s = check_finite(path, ss, ds + ps->n, scratch);
  free(scratch);
  if (s == CX_OK) s = read_set(path, ps, p, ds);
  if (s == CX_OK) s = read_set(path, ss, st, ds + ps->n);
  for (int i = 0; i < n; i++)
    if (ds[i] >= 0) H5Dclose(ds[i]);
  free(ds);
  return s;
}

static cx_status check_hash(const char *path, const char *want, const char *have) {
  if (!want || strcmp(want, have) == 0) return CX_OK;
  return cx_fail(CX_ERR_ARG, "%s: the checkpoint was written for config hash %s, but this run's "
                 "config hash is %s: refusing to resume from a different configuration", path,
                 have, want);
}

cx_status cx_checkpoint_load(const char *path, const char *config_hash, cx_checkpoint_meta *meta,
                             int n_params, const char *const *names, cx_tensor *const *params,
                             int n_state, const char *const *state_names,
                             cx_tensor *const *state) {
  tensor_set ps = {"params", "parameter", "model", n_params, names,
                   (const cx_tensor *const *)params};
  tensor_set ss = {"optimizer", "optimizer state", "optimizer", n_state, state_names,
                   (const cx_tensor *const *)state};
  CX_TRY(check_set(path, &ps));
  CX_TRY(check_set(path, &ss));
  hid_t f = -1;
  CX_TRY(open_file(path, &f));
  cx_checkpoint_meta m;
  cx_status s = read_meta(path, f, &m);
  if (s == CX_OK) s = check_hash(path, config_hash, m.config_hash);
  if (s == CX_OK) s = load_sets(path, f, &ps, params, &ss, state);
  H5Fclose(f);
  H5Eclear2(H5E_DEFAULT);
  if (s == CX_OK && meta) *meta = m;
  return s;
}
