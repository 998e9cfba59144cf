#include "npy.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file_replace.h"

/* Data bytes are copied as they are, so the host must be little-endian like the files we accept. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "core/npy.c assumes a little-endian host"
#endif

static const char MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
/* A header this long is not a .npy file we wrote or numpy would write for a plain array. */
enum { MAX_HEADER = 1 << 20, MAX_DESCR = 64 };

static const struct {
  cx_dtype dtype;
  const char *descr;
} npy_types[] = {
    {CX_F32, "<f4"}, {CX_F16, "<f2"}, {CX_S8, "|i1"},  {CX_U8, "|u1"},
    {CX_S32, "<i4"}, {CX_S64, "<i8"}, {CX_BOOL, "|b1"}, {CX_F64, "<f8"},
};
#define N_TYPES (sizeof npy_types / sizeof *npy_types)
#define SUPPORTED "'<f4' (f32), '<f2' (f16), '|i1' (s8), '|u1' (u8), '<i4' (s32), '<i8' (s64), " \
                  "'|b1' (bool), '<f8' (f64)"

/* ---- header parsing: the header is a Python dict literal such as
 *      {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }                              */

typedef struct npy_header {
  char descr[MAX_DESCR];
  bool fortran_order;
  cx_shape shape;
  unsigned seen; /* bit per key */
} npy_header;

typedef struct scanner {
  const char *p;
  const char *path;
} scanner;

static void skip_ws(scanner *s) {
  while (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r') s->p++;
}

static cx_status malformed(const scanner *s, const char *what) {
  char near[24];
  size_t n = 0;
  while (n < sizeof near - 1 && s->p[n] && s->p[n] != '\n') {
    near[n] = isprint((unsigned char)s->p[n]) ? s->p[n] : '?';
    n++;
  }
  near[n] = '\0';
  return cx_fail(CX_ERR_FORMAT, "%s: malformed .npy header: expected %s near \"%s\"", s->path, what,
                 near);
}

static cx_status expect(scanner *s, char c) {
  skip_ws(s);
  if (*s->p != c) {
    char what[8] = {'\'', c, '\'', '\0'};
    return malformed(s, what);
  }
  s->p++;
  return CX_OK;
}

/* A quoted Python string without escapes (keys and dtype strings never need them). */
static cx_status parse_string(scanner *s, char *out, size_t cap) {
  skip_ws(s);
  char q = *s->p;
  if (q != '\'' && q != '"') return malformed(s, "a quoted string");
  const char *start = ++s->p, *end = strchr(start, q);
  if (!end) return malformed(s, "a closing quote");
  size_t n = (size_t)(end - start);
  if (n >= cap) n = cap - 1; /* a long string is still reported, shortened */
  memcpy(out, start, n);
  out[n] = '\0';
  s->p = end + 1;
  return CX_OK;
}

static cx_status parse_bool(scanner *s, bool *v) {
  skip_ws(s);
  if (strncmp(s->p, "True", 4) == 0) *v = true;
  else if (strncmp(s->p, "False", 5) == 0) *v = false;
  else return malformed(s, "True or False");
  s->p += *v ? 4 : 5;
  return CX_OK;
}

/* A non-negative decimal (Python 2 files may end it with 'L'). */
static cx_status parse_dim(scanner *s, int64_t *v) {
  skip_ws(s);
  if (!isdigit((unsigned char)*s->p)) return malformed(s, "a non-negative integer dimension");
  int64_t x = 0;
  while (isdigit((unsigned char)*s->p)) {
    if (x > (INT64_C(1) << 50)) return malformed(s, "a dimension of reasonable size");
    x = x * 10 + (*s->p++ - '0');
  }
  if (*s->p == 'L') s->p++;
  *v = x;
  return CX_OK;
}

/* (), (3,), (2, 3) or (2, 3,) */
static cx_status parse_shape(scanner *s, cx_shape *shape) {
  CX_TRY(expect(s, '('));
  shape->ndim = 0;
  skip_ws(s);
  while (*s->p != ')') {
    int64_t d = 0;
    CX_TRY(parse_dim(s, &d));
    if (shape->ndim == CX_MAX_DIMS)
      return cx_fail(CX_ERR_FORMAT, "%s: the array has more than %d dimensions, the most we support",
                     s->path, CX_MAX_DIMS);
    shape->d[shape->ndim++] = d;
    skip_ws(s);
    if (*s->p == ',') s->p++;
    else if (*s->p != ')') return malformed(s, "',' or ')' in the shape tuple");
    skip_ws(s);
  }
  s->p++;
  return CX_OK;
}

static cx_status parse_descr(scanner *s, char *descr) {
  skip_ws(s);
  if (*s->p == '\'' || *s->p == '"') return parse_string(s, descr, MAX_DESCR);
  /* a structured dtype is a list of fields: report its text, up to the closing bracket */
  size_t n = 0;
  int depth = 0;
  do {
    if (s->p[n] == '[' || s->p[n] == '(') depth++;
    if (s->p[n] == ']' || s->p[n] == ')') depth--;
    n++;
  } while (s->p[n - 1] && depth > 0 && n < MAX_DESCR - 1);
  if (!s->p[n - 1]) n--;
  memcpy(descr, s->p, n);
  descr[n] = '\0';
  return cx_fail(CX_ERR_FORMAT, "%s: unsupported dtype %s (structured); supported: " SUPPORTED,
                 s->path, descr);
}

static cx_status parse_entry(scanner *s, npy_header *h) {
  char key[32];
  CX_TRY(parse_string(s, key, sizeof key));
  CX_TRY(expect(s, ':'));
  static const char *keys[] = {"descr", "fortran_order", "shape"};
  int k = 0;
  while (k < 3 && strcmp(key, keys[k]) != 0) k++;
  if (k == 3)
    return cx_fail(CX_ERR_FORMAT, "%s: malformed .npy header: unknown key '%s' (expected descr, "
                   "fortran_order and shape)", s->path, key);
  if (h->seen & (1u << k))
    return cx_fail(CX_ERR_FORMAT, "%s: malformed .npy header: key '%s' appears twice", s->path, key);
  h->seen |= 1u << k;
  if (k == 0) return parse_descr(s, h->descr);
  if (k == 1) return parse_bool(s, &h->fortran_order);
  return parse_shape(s, &h->shape);
}

static cx_status parse_header(const char *path, const char *text, npy_header *h) {
  scanner s = {text, path};
  *h = (npy_header){0};
  CX_TRY(expect(&s, '{'));
  skip_ws(&s);
  while (*s.p != '}') {
    CX_TRY(parse_entry(&s, h));
    skip_ws(&s);
    if (*s.p == ',') s.p++;
    else if (*s.p != '}') return malformed(&s, "',' or '}' after a value");
    skip_ws(&s);
  }
  s.p++;
  skip_ws(&s);
  if (*s.p) return malformed(&s, "only padding after the closing '}'");
  if (h->seen != 7)
    return cx_fail(CX_ERR_FORMAT, "%s: malformed .npy header: missing key '%s'", path,
                   !(h->seen & 1) ? "descr" : !(h->seen & 2) ? "fortran_order" : "shape");
  return CX_OK;
}

static cx_status decode_descr(const char *path, const char *descr, cx_dtype *dtype) {
  for (size_t i = 0; i < N_TYPES; i++)
    if (strcmp(descr, npy_types[i].descr) == 0) {
      *dtype = npy_types[i].dtype;
      return CX_OK;
    }
  /* numpy also accepts '<i1' or '=u1' for one-byte types, where byte order means nothing */
  if (strlen(descr) == 3 && strchr("<>=", descr[0]) && descr[2] == '1') {
    char alt[4] = {'|', descr[1], '1', '\0'};
    return decode_descr(path, alt, dtype);
  }
  if (descr[0] == '>') {
    char little[MAX_DESCR];
    snprintf(little, sizeof little, "<%s", descr + 1);
    for (size_t i = 0; i < N_TYPES; i++)
      if (strcmp(little, npy_types[i].descr) == 0)
        return cx_fail(CX_ERR_FORMAT, "%s: big-endian dtype '%s' is not supported; save it as "
                       "'%s' (numpy: a.astype('%s'))", path, descr, little, little);
  }
  return cx_fail(CX_ERR_FORMAT, "%s: unsupported dtype '%s'; supported: " SUPPORTED, path, descr);
}

/* ---- reading ---- */

static uint32_t le_u32(const unsigned char *b, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | b[i];
  return v;
}

/* Reads magic, version and header; *text is the NUL-terminated header dict (malloc'ed). */
static cx_status read_header(FILE *f, const char *path, char **text) {
  unsigned char pre[12];
  size_t got = fread(pre, 1, 8, f);
  if (got < 8 || memcmp(pre, MAGIC, 6) != 0)
    return cx_fail(CX_ERR_FORMAT, "%s: not a .npy file (it does not start with \\x93NUMPY)", path);
  int major = pre[6], minor = pre[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    return cx_fail(CX_ERR_FORMAT, "%s: .npy format version %d.%d is not supported (1.0, 2.0, 3.0)",
                   path, major, minor);
  int len_bytes = major == 1 ? 2 : 4;
  if (fread(pre + 8, 1, (size_t)len_bytes, f) != (size_t)len_bytes)
    return cx_fail(CX_ERR_FORMAT, "%s: truncated .npy header", path);
  uint32_t len = le_u32(pre + 8, len_bytes);
  if (len > MAX_HEADER)
    return cx_fail(CX_ERR_FORMAT, "%s: .npy header of %u bytes is too long (at most %d)", path,
                   len, MAX_HEADER);
  char *t = malloc((size_t)len + 1);
  if (!t) return cx_fail(CX_ERR_NOMEM, "%s: out of memory for the .npy header", path);
  if (fread(t, 1, len, f) != len) {
    free(t);
    return cx_fail(CX_ERR_FORMAT, "%s: truncated .npy header (%u bytes announced)", path, len);
  }
  t[len] = '\0';
  if (strlen(t) != len) {
    free(t);
    return cx_fail(CX_ERR_FORMAT, "%s: malformed .npy header: it contains a NUL byte", path);
  }
  *text = t;
  return CX_OK;
}

static cx_status data_bytes(const char *path, cx_dtype dtype, const cx_shape *shape, size_t *out) {
  size_t n = cx_dtype_size(dtype);
  for (int i = 0; i < shape->ndim; i++) {
    size_t d = (size_t)shape->d[i];
    if (d && n > SIZE_MAX / d) {
      char sb[CX_SHAPE_STR];
      return cx_fail(CX_ERR_FORMAT, "%s: shape %s is too large", path, cx_shape_str(shape, sb));
    }
    n *= d;
  }
  *out = n;
  return CX_OK;
}

/* Bytes from the current position to the end; SIZE_MAX when the stream cannot seek. */
static size_t file_remaining(FILE *f) {
  off_t at = ftello(f);
  if (at < 0 || fseeko(f, 0, SEEK_END) != 0) return SIZE_MAX;
  off_t end = ftello(f);
  if (end < at || fseeko(f, at, SEEK_SET) != 0) return SIZE_MAX;
  return (size_t)(end - at);
}

static cx_status read_payload(FILE *f, const char *path, cx_dtype dtype, const cx_shape *shape,
                              void **data) {
  size_t bytes = 0;
  CX_TRY(data_bytes(path, dtype, shape, &bytes));
  /* a header announcing more than the file holds must not make us allocate it */
  size_t avail = file_remaining(f);
  unsigned char *p = NULL;
  if (avail >= bytes) {
    p = malloc(bytes ? bytes : 1);
    if (!p) return cx_fail(CX_ERR_NOMEM, "%s: out of memory for %zu data bytes", path, bytes);
    avail = fread(p, 1, bytes, f);
  }
  if (avail < bytes) {
    char sb[CX_SHAPE_STR];
    free(p);
    return cx_fail(CX_ERR_FORMAT, "%s: truncated data: shape %s of %s needs %zu bytes, the file "
                   "holds %zu", path, cx_shape_str(shape, sb), cx_dtype_name(dtype), bytes, avail);
  }
  /* the data must end the file: bytes after it mean the header or the shape is wrong (a v2/v3
   * header length shorter than the header leaves the rest of the header in front of the data) */
  size_t extra = file_remaining(f);
  if (extra == SIZE_MAX) extra = fgetc(f) != EOF;
  if (extra) {
    char sb[CX_SHAPE_STR];
    free(p);
    return cx_fail(CX_ERR_FORMAT, "%s: %zu byte(s) after the data (shape %s of %s is %zu bytes): "
                   "the header's length or shape does not match the file", path, extra,
                   cx_shape_str(shape, sb), cx_dtype_name(dtype), bytes);
  }
  if (dtype == CX_BOOL)
    for (size_t i = 0; i < bytes; i++) p[i] = p[i] != 0;
  *data = p;
  return CX_OK;
}

cx_status cx_npy_read_stream(FILE *f, const char *path, cx_dtype *dtype, cx_shape *shape,
                             void **data) {
  *data = NULL;
  char *text = NULL;
  CX_TRY(read_header(f, path, &text));
  npy_header h;
  cx_status s = parse_header(path, text, &h);
  free(text);
  CX_TRY(s);
  cx_dtype t;
  CX_TRY(decode_descr(path, h.descr, &t));
  if (h.fortran_order)
    return cx_fail(CX_ERR_FORMAT, "%s: Fortran-order arrays are not supported; save a C-order "
                   "array (numpy: np.ascontiguousarray(a))", path);
  CX_TRY(read_payload(f, path, t, &h.shape, data));
  *dtype = t;
  *shape = h.shape;
  return CX_OK;
}

cx_status cx_npy_read(const char *path, cx_dtype *dtype, cx_shape *shape, void **data) {
  *data = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return cx_fail(CX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  cx_status s = cx_npy_read_stream(f, path, dtype, shape, data);
  fclose(f);
  return s;
}

/* ---- writing ---- */

/* Magic, version, length and dict, padded with spaces to a multiple of 64 bytes and ending in
 * '\n' as numpy does. Returns the total length. */
static size_t make_header(char *buf, size_t cap, const char *descr, const cx_shape *shape) {
  char dims[CX_MAX_DIMS * 24 + 8];
  size_t at = 0;
  dims[at++] = '(';
  for (int i = 0; i < shape->ndim; i++)
    at += (size_t)snprintf(dims + at, sizeof dims - at, i ? ", %lld" : "%lld",
                           (long long)shape->d[i]);
  snprintf(dims + at, sizeof dims - at, shape->ndim == 1 ? ",)" : ")");
  char dict[sizeof dims + 96];
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                   descr, dims);
  int major = n + 11 > 65535 ? 2 : 1;
  size_t pre = major == 1 ? 10 : 12, total = (pre + (size_t)n + 1 + 63) / 64 * 64;
  if (total > cap) return 0;
  size_t len = total - pre;
  memcpy(buf, MAGIC, 6);
  buf[6] = (char)major;
  buf[7] = 0;
  for (size_t i = 0; i < pre - 8; i++) buf[8 + i] = (char)(len >> (8 * i));
  memcpy(buf + pre, dict, (size_t)n);
  memset(buf + pre + n, ' ', total - pre - (size_t)n - 1);
  buf[total - 1] = '\n';
  return total;
}

static bool write_data(FILE *f, cx_dtype dtype, const void *data, size_t bytes) {
  if (dtype != CX_BOOL) return fwrite(data, 1, bytes, f) == bytes;
  const unsigned char *p = data;
  for (size_t i = 0; i < bytes; i++)
    if (fputc(p[i] != 0, f) == EOF) return false;
  return true;
}

cx_status cx_npy_write(const char *path, cx_dtype dtype, const cx_shape *shape, const void *data) {
  const char *descr = NULL;
  for (size_t i = 0; i < N_TYPES; i++)
    if (npy_types[i].dtype == dtype) descr = npy_types[i].descr;
  if (!descr)
    return cx_fail(CX_ERR_UNSUPPORTED, "%s: dtype %s has no .npy equivalent; supported: " SUPPORTED,
                   path, cx_dtype_name(dtype));
  if (shape->ndim < 0 || shape->ndim > CX_MAX_DIMS)
    return cx_fail(CX_ERR_ARG, "%s: rank %d is out of range 0..%d", path, shape->ndim, CX_MAX_DIMS);
  for (int i = 0; i < shape->ndim; i++)
    if (shape->d[i] < 0) {
      char sb[CX_SHAPE_STR];
      return cx_fail(CX_ERR_ARG, "%s: shape %s has a negative dimension", path,
                     cx_shape_str(shape, sb));
    }
  size_t bytes = 0;
  CX_TRY(data_bytes(path, dtype, shape, &bytes));
  if (bytes && !data) return cx_fail(CX_ERR_ARG, "%s: no data to write", path);
  char header[512];
  size_t hlen = make_header(header, sizeof header, descr, shape);
  cx_file_out o;
  CX_TRY(cx_file_out_open(path, &o));
  /* a failed write sets the stream's error flag, which the commit checks */
  if (fwrite(header, 1, hlen, o.f) == hlen) write_data(o.f, dtype, data, bytes);
  return cx_file_out_commit(&o);
}
