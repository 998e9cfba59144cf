/* The guard driver's walk of version 1 object headers (h5_guard_ohdr.h). Layouts from the HDF5
 * file format specification (version 1 headers, attribute, datatype, dataspace and
 * continuation messages, global heap collections); sizes of offsets and lengths are 8, as in
 * every file we read (the superblock's; libhdf5 writes 8 by default). */
#include "h5_guard_ohdr.h"

#include <stdlib.h>
#include <string.h>

#define le cx_h5_le

enum {
  PREFIX = 16,   /* version, reserved, message count, reference count, chunk size, padding */
  MSG_HDR = 8,   /* type (2), size (2), flags (1), reserved (3) */
  MSG_DSPACE = 0x0001,
  MSG_DTYPE = 0x0003,
  MSG_FILL_OLD = 0x0004,
  MSG_FILL = 0x0005,
  MSG_EFL = 0x0007,
  MSG_LAYOUT = 0x0008,
  MSG_PLINE = 0x000B,
  MSG_ATTR = 0x000C,
  MSG_CONT = 0x0010,
  MSG_SHARED = 0x02, /* message flag: the data is a reference to a shared message */
  VLEN_REF = 16,     /* a variable-length value on disk: length (4), collection (8), index (4) */
  DT_VLEN = 9,
};

static size_t align8(size_t n) { return (n + 7) & ~(size_t)7; }

static bool fail(const char **why, const char *msg) {
  *why = msg;
  return false;
}

/* ---- datatypes: libhdf5 decodes them with no end in sight (H5O_dtype_decode_helper) ---- */

enum { DT_COMPOUND = 6, DT_ENUM = 8, DT_ARRAY = 10, DT_DEPTH = 16 };

/* A name libhdf5 strdup's at b[0, n), then steps over (padded to 8 before version 3). */
static bool name_step(const unsigned char *b, size_t n, int version, size_t *step) {
  const unsigned char *z = memchr(b, 0, n);
  if (!z) return false;
  size_t len = (size_t)(z - b) + 1;
  *step = version >= 3 ? len : align8(len);
  return *step <= n;
}

/* Bytes libhdf5 uses to encode a member offset of a version 3 compound of this size. */
static size_t offset_bytes(uint64_t size) {
  int log2 = 0;
  while (size >> (log2 + 1)) log2++;
  return (size_t)log2 / 8 + 1;
}

static bool dtype_len(const unsigned char *b, size_t n, int depth, size_t *used,
                      const char **why);

/* The bits of an integer, float or bitfield type lie within its size: libhdf5's conversions
 * (H5T__conv_i_i through H5T__bit_find, the float ones alike) address the value's bytes by the
 * stated bit offset and precision, and a fuzzed checkpoint attribute's precision sent them past
 * the decoded value (a SEGV that depended on the heap next to it). A float's exponent and
 * mantissa lie within it too. */
static bool bits_ok(int cls, const unsigned char *b, size_t n, uint64_t size, const char **why) {
  if (n < (cls == 1 ? 20 : 12)) return true; /* the length check below refuses it */
  uint64_t bits = 8 * size, off = le(b + 8, 2), prec = le(b + 10, 2);
  bool ok = prec > 0 && off + prec <= bits;
  if (ok && cls == 1) ok = (uint64_t)b[12] + b[13] <= bits && (uint64_t)b[14] + b[15] <= bits;
  return ok || fail(why, "a number type whose bits lie outside its size");
}

/* The class-specific properties of the datatype at b (its 8-byte header included). */
static bool dtype_props(const unsigned char *b, size_t n, int depth, size_t *at,
                        const char **why) {
  int cls = b[0] & 0x0f, version = b[0] >> 4;
  unsigned flags = (unsigned)le(b + 1, 3), members = flags & 0xffff;
  uint64_t size = le(b + 4, 4);
  size_t p = 8, k;
  static const unsigned char fixed[] = {4, 12, 2, 0, 4, 0, 0, 0, 0, 0, 0};
  switch (cls) {
  case 0: case 1: case 2: case 3: case 4: case 7:
    if ((cls == 0 || cls == 1 || cls == 4) && !bits_ok(cls, b, n, size, why)) return false;
    p += fixed[cls];
    break;
  case 5: /* opaque: a tag of the length the flags give */
    p += flags & 0xff;
    break;
  case DT_COMPOUND:
    for (unsigned i = 0; i < members; i++) {
      if (p > n || !name_step(b + p, n - p, version, &k)) return false;
      p += k + (version >= 3 ? offset_bytes(size) : 4) + (version == 1 ? 28 : 0);
      if (p > n || !dtype_len(b + p, n - p, depth + 1, &k, why)) return false;
      p += k;
    }
    break;
  case DT_ENUM: {
    if (!dtype_len(b + p, n - p, depth + 1, &k, why)) return false;
    uint64_t base = le(b + p + 4, 4);
    p += k;
    for (unsigned i = 0; i < members; i++) {
      if (p > n || !name_step(b + p, n - p, version, &k)) return false;
      p += k;
    }
    if (p > n || (base && members > (n - p) / base)) return false;
    p += (size_t)base * members;
    break;
  }
  case DT_VLEN:
    /* on disk a value is its reference; libhdf5 sizes the decoded data by this field and
     * copies a reference's 16 bytes out of it */
    if (size != VLEN_REF)
      return fail(why, "a variable-length type whose stored size is not 16 bytes");
    if (!dtype_len(b + p, n - p, depth + 1, &k, why)) return false;
    /* a string's characters are bytes in every HDF5 file; libhdf5 takes their width from here
     * and allocates a string's length times it */
    if ((flags & 0x0f) == 1 && le(b + p + 4, 4) != 1)
      return fail(why, "a variable-length string whose characters are not 1 byte wide");
    p += k;
    break;
  case DT_ARRAY: {
    if (n - p < 4) return false;
    size_t dims = b[p];
    if (dims > 32) return false;
    p += (version >= 3 ? 1 : 4) + 4 * dims * (version >= 3 ? 1 : 2);
    if (p > n || !dtype_len(b + p, n - p, depth + 1, &k, why)) return false;
    p += k;
    break;
  }
  default: /* libhdf5 refuses an unknown class; *at must still be set for a nesting caller */
    *at = p;
    return true;
  }
  *at = p;
  return p <= n;
}

/* Whether the datatype at b[0, n) decodes within n bytes: *used, the bytes it takes. */
static bool dtype_len(const unsigned char *b, size_t n, int depth, size_t *used,
                      const char **why) {
  if (depth > DT_DEPTH || n < 8 || !dtype_props(b, n, depth, used, why)) {
    if (!*why) *why = "a datatype that runs past its message";
    return false;
  }
  return true;
}

static bool dtype_ok(const unsigned char *b, size_t n, const char **why) {
  size_t used;
  *why = NULL;
  return dtype_len(b, n, 0, &used, why);
}

/* A dataspace message: its dimensions and maximum dimensions (when flagged) lie within it. */
static bool dataspace_ok(const unsigned char *m, size_t n, const char **why) {
  if (n < 4 || (m[0] != 1 && m[0] != 2) || m[1] > 32) return true; /* libhdf5 refuses those */
  size_t hdr = m[0] == 1 ? 8 : 4, dims = (size_t)m[1] * 8 * ((m[2] & 1) ? 2 : 1);
  if (hdr > n || dims > n - hdr) return fail(why, "a dataspace whose dimensions lie past its message");
  return true;
}

/* Elements of a dataspace message (versions 1 and 2) at d, with n bytes left in its attribute
 * message: libhdf5 decodes the dimensions whatever size the message states for the dataspace
 * (a fuzzed attribute stated 4 bytes for a scalar's 8), so n bounds them, not that size. 1: the
 * count; 0: a version libhdf5 refuses; -1: dimensions past the message. */
static int dataspace_elements(const unsigned char *d, size_t n, uint64_t *count) {
  if (n < 4) return -1;
  int version = d[0], rank = d[1];
  size_t dims = version == 1 ? 8 : 4;
  if (version == 2 && d[3] == 2) return *count = 0, 1; /* null dataspace */
  if ((version != 1 && version != 2) || rank > 32) return 0;
  const char *why; /* maximum dimensions too: libhdf5 decodes them as well */
  if (!dataspace_ok(d, n, &why)) return -1;
  uint64_t c = 1;
  for (int i = 0; i < rank; i++) {
    uint64_t e = le(d + dims + 8 * (size_t)i, 8);
    if (e && c > UINT64_MAX / e) return -1;
    c *= e;
  }
  *count = c;
  return 1;
}

/* The global heap collection the references being checked point into, read once for all of
 * them (a data set's names share a few collections). */
typedef struct heap_view {
  uint64_t addr, size;
  unsigned char *buf;
} heap_view;

static bool heap_at(const cx_h5_ohdr_file *f, uint64_t addr, heap_view *h, const char **why) {
  if (h->buf && h->addr == addr) return true;
  free(h->buf);
  h->buf = NULL;
  unsigned char hdr[16];
  if (addr >= f->eof || f->eof - addr < sizeof hdr ||
      cx_h5_pread(f->fd, hdr, sizeof hdr, addr) != (long long)sizeof hdr)
    return fail(why, "a variable-length value points past the end of the file");
  if (memcmp(hdr, "GCOL\001", 5) != 0)
    return fail(why, "a variable-length value points to no global heap collection");
  uint64_t stated = le(hdr + 8, 8);
  if (stated < sizeof hdr || stated > f->eof - addr || stated > CX_H5_BLOCK_MAX)
    return fail(why, "a global heap collection larger than the file");
  if (!(h->buf = cx_h5_read_block(f->fd, addr, stated))) return fail(why, "out of memory");
  h->addr = addr, h->size = stated;
  return true;
}

/* One reference of a `base`-byte-element value: see cx_h5_vlen_refs_ok. */
static bool vlen_ref_ok(const cx_h5_ohdr_file *f, const unsigned char *r, uint64_t base,
                        heap_view *h, const char **why) {
  uint64_t len = le(r, 4), addr = le(r + 4, 8) + f->base, size;
  unsigned idx = (unsigned)le(r + 12, 4);
  /* an empty value is written without a heap object (address 0); libhdf5 reads the object of
   * any other address whatever the length, so an empty value's object is checked too */
  if (!len && !le(r + 4, 8)) return true;
  if (base > f->eof || len > f->eof / (base ? base : 1))
    return fail(why, "a variable-length value longer than the file");
  if (!heap_at(f, addr, h, why)) return false;
  if (!cx_h5_gheap_walk(h->buf, (size_t)h->size, idx, &size))
    return fail(why, "damaged global heap collection");
  if (size == UINT64_MAX)
    return fail(why, "a variable-length value names an object its heap collection lacks");
  if (size != len * base)
    return fail(why, "a variable-length value's length differs from its heap object's");
  return true;
}

bool cx_h5_vlen_refs_ok(const cx_h5_ohdr_file *f, const unsigned char *refs, uint64_t n,
                        uint64_t base, const char **why) {
  heap_view h = {0};
  bool ok = true;
  for (uint64_t i = 0; ok && i < n; i++) ok = vlen_ref_ok(f, refs + i * VLEN_REF, base, &h, why);
  free(h.buf);
  return ok;
}

/* The size of one element of a variable-length datatype: its base type's (a string's base is
 * its character type, whose size libhdf5 takes from the file as well). */
static uint64_t vlen_base(const unsigned char *dt, size_t n) {
  return n >= 16 ? le(dt + 12, 4) : UINT64_MAX;
}

/* One attribute message (versions 1 to 3): the name ends within it, the datatype, dataspace and
 * data fit in it, and variable-length values point to what they claim. */
static bool attribute_ok(const cx_h5_ohdr_file *f, const unsigned char *m, size_t n,
                         const char **why) {
  if (n < 8) return fail(why, "an attribute message too short for its header");
  int version = m[0];
  if (version < 1 || version > 3) return true; /* libhdf5 refuses the version itself */
  size_t hdr = version == 3 ? 9 : 8;
  size_t name = le(m + 2, 2), dt = le(m + 4, 2), ds = le(m + 6, 2);
  size_t step_name = version == 1 ? align8(name) : name;
  size_t step_dt = version == 1 ? align8(dt) : dt, step_ds = version == 1 ? align8(ds) : ds;
  if (n < hdr || !name || step_name > n - hdr || !memchr(m + hdr, 0, name))
    return fail(why, "an attribute name without its terminating NUL");
  size_t at = hdr + step_name;
  bool shared = version > 1 && (m[1] & 3);
  if (step_dt > n - at || dt < 8) return fail(why, "an attribute datatype cut short");
  const unsigned char *dtp = m + at;
  if (!shared && !dtype_ok(dtp, dt, why)) return false;
  at += step_dt;
  if (step_ds > n - at) return fail(why, "an attribute dataspace past its message");
  const unsigned char *dsp = m + at;
  uint64_t count;
  int known = shared ? 0 : dataspace_elements(dsp, n - at, &count);
  at += step_ds;
  if (known < 0) return fail(why, "an attribute dataspace past its message");
  if (!known) return true; /* libhdf5 refuses the version, or decodes a shared type itself */
  bool vlen = (dtp[0] & 0x0f) == DT_VLEN;
  uint64_t elem = vlen ? VLEN_REF : le(dtp + 4, 4);
  if (elem && count > (n - at) / elem) return fail(why, "attribute data past its message");
  return !vlen || cx_h5_vlen_refs_ok(f, m + at, count, vlen_base(dtp, dt), why);
}

/* A data layout message (versions 1 to 3): a chunked layout has at least two dimensions (the
 * data set's rank, at least 1, and the element size), they lie within the message, and none is
 * 0 (libhdf5 divides the data set's extent by them when it opens it, and a fuzzed layout of
 * none gave SIGFPE in H5D__chunk_set_info). Version 4 comes with checksummed version 2
 * headers. */
static bool layout_ok(const unsigned char *m, size_t n, const char **why) {
  if (n < 3 || m[0] < 1 || m[0] > 3) return true; /* libhdf5 refuses those itself */
  bool v3 = m[0] == 3;
  if ((v3 ? m[1] : m[2]) != 2) return true; /* compact or contiguous */
  size_t rank = v3 ? m[2] : m[1], at = v3 ? 3 + 8 : 8 + 8; /* then the B-tree's address */
  if (rank < 2) return fail(why, "a chunked layout without the data set's dimensions");
  if (at > n || rank > (n - at) / 4) return fail(why, "a chunked layout past its message");
  for (size_t i = 0; i < rank; i++)
    if (!le(m + at + 4 * i, 4)) return fail(why, "a chunked layout with a chunk dimension of 0");
  return true;
}

/* ---- a data set's other messages: libhdf5 1.10 decodes each with no regard to its size ---- */

/* A fill value message, old (size, value) or new (versions 1 and 2: allocation and fill times,
 * defined, then size and value; version 3: flags, then size and value when flagged): libhdf5
 * copies `size` bytes from the message whatever its length. */
static bool fill_ok(int type, const unsigned char *m, size_t n, const char **why) {
  size_t at = 0;
  if (type == MSG_FILL) {
    if (n < 1 || m[0] < 1 || m[0] > 3) return true; /* libhdf5 refuses the version */
    bool value = m[0] < 3 ? n >= 4 && m[3] : n >= 2 && (m[1] & 0x20) && !(m[1] & 0x10);
    if (!value) return true;
    at = m[0] < 3 ? 4 : 2;
  }
  if (at > n || n - at < 4 || le(m + at, 4) > n - at - 4)
    return fail(why, "a fill value past its message");
  return true;
}

/* A filter pipeline message (versions 1 and 2): each filter's name (NUL-terminated: libhdf5
 * takes its strlen) and client data lie within the message. A fuzzed checkpoint's pipeline
 * sent H5O_pline_decode past the object header's buffer. */
static bool pline_ok(const unsigned char *m, size_t n, const char **why) {
  if (n < 2 || (m[0] != 1 && m[0] != 2) || m[1] > 32) return true; /* libhdf5 refuses those */
  bool v1 = m[0] == 1;
  size_t p = v1 ? 8 : 2;
  for (int i = 0; i < m[1]; i++) {
    if (p > n || n - p < 2) return fail(why, "a filter pipeline past its message");
    bool named = v1 || le(m + p, 2) >= 256;
    size_t head = named ? 8 : 6;
    if (n - p < head) return fail(why, "a filter pipeline past its message");
    size_t name = named ? le(m + p + 2, 2) : 0, values = le(m + p + head - 2, 2);
    p += head;
    if (name > n - p || (name && !memchr(m + p, 0, name)))
      return fail(why, "a filter name past its message");
    p += name;
    size_t data = 4 * (values + (v1 && (values & 1)));
    if (data > n - p) return fail(why, "filter parameters past their message");
    p += data;
  }
  return true;
}

static bool remember_continuation(cx_h5_ohdr_file *f, const unsigned char *m, size_t n,
                                  const char **why) {
  if (n < 16) /* libhdf5 decodes the 16 bytes anyway, from the messages after it */
    return fail(why, "an object header continuation message too short for its address");
  uint64_t addr = le(m, 8) + f->base, len = le(m + 8, 8);
  /* libhdf5 allocates the length stated before it reads the chunk (a mutated one stated
   * 512 MiB in a 10 KB file) */
  if (addr > f->eof || len > f->eof - addr)
    return fail(why, "an object header continuation past the end of the file");
  for (size_t i = 0; i < f->n_cont; i++)
    if (f->cont[i] == addr) return true;
  if (f->n_cont == f->cap) {
    size_t cap = f->cap ? 2 * f->cap : 64;
    uint64_t *c = realloc(f->cont, cap * sizeof *c);
    if (!c) return fail(why, "out of memory");
    f->cont = c, f->cap = cap;
  }
  f->cont[f->n_cont++] = addr;
  return true;
}

void cx_h5_ohdr_free(cx_h5_ohdr_file *f) {
  free(f->cont);
  f->cont = NULL, f->n_cont = f->cap = 0;
}

/* The messages of one chunk in b[0, n) (n: the chunk's end, or where the read cut it). */
static bool messages_ok(cx_h5_ohdr_file *f, const unsigned char *b, size_t n, const char **why) {
  size_t p = 0;
  while (n - p >= MSG_HDR) {
    unsigned type = (unsigned)le(b + p, 2), flags = b[p + 4];
    size_t size = le(b + p + 2, 2);
    if (size > n - p - MSG_HDR) break; /* cut by the read, or corrupt: libhdf5 checks this */
    const unsigned char *m = b + p + MSG_HDR;
    if (type == MSG_CONT && !remember_continuation(f, m, size, why)) return false;
    /* external storage: our files never use it, and a hostile file would read the files it
     * names */
    if (type == MSG_EFL) return fail(why, "a data set stored in external files");
    if (!(flags & MSG_SHARED) && ((type == MSG_ATTR && !attribute_ok(f, m, size, why)) ||
                                  (type == MSG_DTYPE && !dtype_ok(m, size, why)) ||
                                  (type == MSG_DSPACE && !dataspace_ok(m, size, why)) ||
                                  ((type == MSG_FILL || type == MSG_FILL_OLD) &&
                                   !fill_ok(type, m, size, why)) ||
                                  (type == MSG_PLINE && !pline_ok(m, size, why)) ||
                                  (type == MSG_LAYOUT && !layout_ok(m, size, why))))
      return false;
    p += MSG_HDR + size;
  }
  return true;
}

static bool is_continuation(const cx_h5_ohdr_file *f, uint64_t addr) {
  for (size_t i = 0; i < f->n_cont; i++)
    if (f->cont[i] == addr) return true;
  return false;
}

bool cx_h5_ohdr_ok(cx_h5_ohdr_file *f, uint64_t addr, const unsigned char *buf, size_t len,
                   const char **why) {
  if (is_continuation(f, addr)) return messages_ok(f, buf, len, why);
  /* a version 1 prefix (a version 2 header starts with "OHDR" and is checksummed); its
   * reserved byte is not looked at, as libhdf5 does not look at it (a fuzzed file set it, and
   * its attributes went unchecked) */
  if (len < PREFIX || buf[0] != 1) return true;
  size_t chunk = le(buf + 8, 4);
  size_t n = len - PREFIX < chunk ? len - PREFIX : chunk;
  return messages_ok(f, buf + PREFIX, n, why);
}
