/* A read-only HDF5 file driver (POSIX pread) that guards libhdf5 1.10 against the damage that
 * makes it hang: see h5_guard.h. Everything else is what the default sec2 driver does. */
#define _GNU_SOURCE
#include "h5_guard.h"
#include "h5_guard_btree.h"
#include "h5_guard_ohdr.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct guard_file {
  H5FD_t pub; /* HDF5's part; must come first */
  cx_h5_ohdr_file oh; /* the descriptor, the file's size, what the header check keeps */
  haddr_t eoa;
  dev_t dev;
  ino_t ino;
  /* the superblock's address, version, sizes of offsets and lengths, from the read of its fixed
   * part (version -1 until then) */
  uint64_t sb_addr;
  int sb_version, sb_offsets, sb_lengths;
  cx_h5_btrees bt; /* the version 1 B-tree nodes read so far */
} guard_file;

#define MAXADDR ((haddr_t)INT64_MAX)

static void push(hid_t min, const char *func, const char *msg) {
  H5Epush2(H5E_DEFAULT, __FILE__, func, __LINE__, H5E_ERR_CLS, H5E_VFL, min, "%s", msg);
}

static const char *kind_of(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a plain file";
}

cx_status cx_h5_check_regular(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return cx_fail(CX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return cx_fail(CX_ERR_IO, "%s: is %s, not a regular file (data sets and checkpoints must be "
                   "regular files)", path, kind_of(st.st_mode));
  return CX_OK;
}

/* ---- the global heap check ----
 * A collection: "GCOL", version 1, 3 reserved bytes, its size (8 bytes: the size of lengths of
 * every file we read), then objects: index (2), reference count (2), reserved (4), size (8),
 * data padded to 8 bytes. Index 0 is the free space, whose size counts its header and is not
 * padded. libhdf5 1.10 steps from object to object by that size: a free-space object of size 0
 * never moves it on. */

enum { GH_HDR = 16, GH_OBJHDR = 16 };

#define le cx_h5_le

long long cx_h5_pread(int fd, void *buf, size_t n, uint64_t off) {
  size_t done = 0;
  while (done < n) {
    ssize_t k = pread(fd, (unsigned char *)buf + done, n - done, (off_t)(off + done));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -1;
    if (k == 0) break;
    done += (size_t)k;
  }
  return (long long)done;
}

unsigned char *cx_h5_read_block(int fd, uint64_t off, uint64_t stated) {
  if (stated > CX_H5_BLOCK_MAX) return NULL;
  unsigned char *b = calloc(1, stated ? (size_t)stated : 1);
  if (b && cx_h5_pread(fd, b, (size_t)stated, off) < 0) free(b), b = NULL;
  return b;
}

bool cx_h5_gheap_walk(const unsigned char *buf, size_t len, unsigned want, uint64_t *size) {
  if (size) *size = UINT64_MAX;
  if (len < GH_HDR) return true; /* HDF5 reads no objects from a block this short */
  uint64_t stated = le(buf + 8, 8);
  /* HDF5 first reads 4 KiB of a collection, then the size it states: the walk is made on that
   * whole read, which is what the deserializer gets */
  if (stated > len) return true;
  size_t end = (size_t)stated, p = GH_HDR;
  while (p < end && end - p >= GH_OBJHDR) {
    unsigned idx = (unsigned)le(buf + p, 2);
    uint64_t obj = le(buf + p + 8, 8);
    /* an object that runs past the collection: H5HG_read would copy its stated size out of
     * the heap (past the end of the block, into a buffer sized by the reference) */
    if (idx && obj > end - p - GH_OBJHDR) return false;
    if (idx && idx == want && size) *size = obj;
    uint64_t need = idx ? GH_OBJHDR + ((obj + 7) & ~(uint64_t)7) : obj;
    /* a step of 0 never ends; one past the end makes libhdf5's pointer wrap around (it adds
     * the size to the object's address), which can loop as well */
    if (need == 0 || need > end - p) return false;
    p += (size_t)need;
  }
  return true;
}

bool cx_h5_gheap_ok(const unsigned char *buf, size_t len) {
  return cx_h5_gheap_walk(buf, len, 0, NULL);
}

static bool is_gheap(const unsigned char *buf, size_t len) {
  return len >= GH_HDR && memcmp(buf, "GCOL\001", 5) == 0;
}

/* ---- the local heap check ----
 * A local heap (the link names of an old-style group) is a prefix, "HEAP", version 0, 3
 * reserved bytes, then the data segment's size, the offset of its first free block (1: none)
 * and the segment's address, 8 bytes each in every file we read; each free block starts with
 * the offset of the next one and its own size. libhdf5 1.10 (H5HL__fl_deserialize) follows
 * that list to its end marker, allocating a node per block, and checks each offset against the
 * segment but not for a loop: a block naming itself as the next took 1.3 GB in 40 million
 * nodes (fuzz_checkpoint) and would take all memory. Each free block takes its 16 bytes, so a
 * list longer than the segment has room for is such a loop. */

enum { LH_PREFIX = 32, LH_FREE = 16, LH_FREE_NULL = 1 };

bool cx_h5_lheap_free_list_ok(const unsigned char *seg, uint64_t size, uint64_t head) {
  for (uint64_t fb = head, n = 0; fb != LH_FREE_NULL; n++) {
    if (fb >= size) return true; /* libhdf5 refuses it ("bad heap free list") */
    /* a block too short for its two numbers: libhdf5 reads them past the segment */
    if (size - fb < LH_FREE || n >= size / LH_FREE) return false;
    uint64_t next = le(seg + fb, 8), len = le(seg + fb + 8, 8);
    if (next == 0 || len > size - fb) return true; /* refused by libhdf5 as well */
    fb = next;
  }
  return true;
}

/* Why the local heap whose prefix HDF5 read into p[0, n) is refused, or NULL. libhdf5
 * allocates the segment's stated size before it reads it, so one larger than the file (3 GB
 * in a 9 KB file) took that much memory before the read failed; then its free list, from the
 * segment as the file holds it (HDF5 reads it with the prefix when it follows it, else later). */
static const char *lheap_refusal(guard_file *g, const unsigned char *p, size_t n) {
  if (n < LH_PREFIX || memcmp(p, "HEAP\0", 5) != 0 || g->sb_offsets != 8 || g->sb_lengths != 8)
    return NULL;
  uint64_t size = le(p + 8, 8), head = le(p + 16, 8), at = le(p + 24, 8);
  uint64_t base = g->pub.base_addr;
  if (at > MAXADDR - base || size > g->eoa || at + base > g->eoa - size)
    return "a local heap larger than the file: refused, as libhdf5 1.10 would allocate its "
           "stated size before failing to read it";
  if (head == LH_FREE_NULL) return NULL;
  unsigned char *seg = cx_h5_read_block(g->oh.fd, at + base, size);
  bool ok = seg && cx_h5_lheap_free_list_ok(seg, size, head);
  free(seg);
  return ok ? NULL
            : "damaged local heap (its free list comes back on itself, or a free block runs past "
              "it): refused, as libhdf5 1.10 would allocate without end or overrun on it";
}

/* ---- the driver ---- */

static H5FD_t *guard_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr) {
  (void)fapl;
  if (flags & (H5F_ACC_RDWR | H5F_ACC_TRUNC | H5F_ACC_CREAT | H5F_ACC_EXCL)) {
    push(H5E_CANTOPENFILE, __func__, "the guard driver opens files read-only");
    return NULL;
  }
  if (!name || !*name || maxaddr == 0 || maxaddr == HADDR_UNDEF) return NULL;
  /* non-blocking: opening a FIFO for reading would wait for a writer */
  int fd = open(name, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    push(H5E_CANTOPENFILE, __func__, strerror(errno));
    return NULL;
  }
  struct stat st;
  guard_file *g = NULL;
  if (fstat(fd, &st) != 0) push(H5E_CANTOPENFILE, __func__, strerror(errno));
  else if (!S_ISREG(st.st_mode)) push(H5E_CANTOPENFILE, __func__, "not a regular file");
  else if (!(g = calloc(1, sizeof *g))) push(H5E_CANTALLOC, __func__, "out of memory");
  if (!g) {
    close(fd);
    return NULL;
  }
  g->oh.fd = fd;
  g->oh.eof = (uint64_t)st.st_size;
  g->sb_version = -1;
  g->dev = st.st_dev;
  g->ino = st.st_ino;
  return &g->pub;
}

static herr_t guard_close(H5FD_t *f) {
  guard_file *g = (guard_file *)f;
  int rc = close(g->oh.fd);
  cx_h5_ohdr_free(&g->oh);
  cx_h5_btrees_free(&g->bt);
  free(g);
  return rc == 0 ? 0 : -1;
}

static int guard_cmp(const H5FD_t *a, const H5FD_t *b) {
  const guard_file *x = (const guard_file *)a, *y = (const guard_file *)b;
  if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
  if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
  return 0;
}

static herr_t guard_query(const H5FD_t *f, unsigned long *flags) {
  (void)f;
  /* as sec2, but without metadata accumulation: the accumulator merges neighbouring metadata
   * reads into one, and the object header check must see each header read as HDF5 asked for it
   * (where it starts, and that it is one) */
  *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_DATA_SIEVE | H5FD_FEAT_AGGREGATE_SMALLDATA;
  return 0;
}

static haddr_t guard_get_eoa(const H5FD_t *f, H5FD_mem_t t) {
  (void)t;
  return ((const guard_file *)f)->eoa;
}

static herr_t guard_set_eoa(H5FD_t *f, H5FD_mem_t t, haddr_t a) {
  (void)t;
  ((guard_file *)f)->eoa = a;
  return 0;
}

static haddr_t guard_get_eof(const H5FD_t *f, H5FD_mem_t t) {
  (void)t;
  return ((const guard_file *)f)->oh.eof;
}

static herr_t guard_get_handle(H5FD_t *f, hid_t fapl, void **handle) {
  (void)fapl;
  *handle = &((guard_file *)f)->oh; /* its first member is the descriptor, as sec2's handle */
  return 0;
}

/* The collection whose first `size` bytes HDF5 read into p, walked whole: HDF5 reads the first
 * 4 KiB of a collection, then only the rest of it, so a collection larger than the first read
 * is read here in full (bytes past the end of the file as zeros, as HDF5 gets them). One that
 * runs past the file's address space is refused: libhdf5 allocates its stated size before the
 * read of the rest fails. */
static bool whole_gheap_ok(guard_file *g, haddr_t addr, const unsigned char *p, size_t size) {
  uint64_t stated = le(p + 8, 8);
  if (stated <= size) return cx_h5_gheap_ok(p, size);
  if (stated > g->eoa - addr) return false;
  unsigned char *b = cx_h5_read_block(g->oh.fd, addr, stated);
  bool ok = b && cx_h5_gheap_ok(b, (size_t)stated);
  free(b);
  return ok;
}

/* A version 0 or 1 superblock points to no driver information block: such a block belongs to
 * the family and multi drivers' files, which are no data sets of ours, and libhdf5 allocates
 * the size it states before reading it (a fuzzed one stated 2.4 GB in a 4 KB file). Later
 * versions keep it in the superblock extension, a checksummed object header. HDF5 reads the
 * superblock's fixed part (signature, versions, sizes: 16 bytes), then the rest after it, where
 * the block's address is (offset 0x30 of version 0, 0x34 of version 1). */
static const char *superblock_refusal(guard_file *g, haddr_t addr, const unsigned char *p,
                                      size_t n) {
  if (n >= 9 && memcmp(p, "\211HDF\r\n\032\n", 8) == 0) {
    g->sb_addr = addr, g->sb_version = p[8];
    int at = g->sb_version < 2 ? 13 : 9; /* where the sizes of offsets and lengths are */
    g->sb_offsets = (int)n > at + 1 ? p[at] : 0, g->sb_lengths = (int)n > at + 1 ? p[at + 1] : 0;
    g->bt.sizes_8 = g->sb_offsets == 8 && g->sb_lengths == 8;
    /* every writer's default, and all the checks here read; libhdf5 trusts the others further
     * (a fuzzed superblock of 2-byte addresses made it allocate 2 GB) */
    if ((int)n > at + 1 && !g->bt.sizes_8)
      return "a superblock of addresses or lengths other than 8 bytes (every HDF5 writer's "
             "default): refused";
    /* chunk B-tree nodes hold 2K = 64 entries unless a version 1 superblock says otherwise
     * (its "indexed storage internal node K", below); later versions keep K in the superblock
     * extension, not read here: their chunk nodes are not checked */
    g->bt.chunk_two_k = g->sb_version < 2 ? 64 : 0;
    return NULL;
  }
  if (g->sb_version == 1 && addr == g->sb_addr + 16 && n >= 10)
    g->bt.chunk_two_k = 2 * (int)le(p + 8, 2);
  if (g->sb_version < 0 || g->sb_version > 1 || g->sb_offsets != 8 || addr != g->sb_addr + 16)
    return NULL;
  size_t at = (g->sb_version == 0 ? 0x30 : 0x34) - 16;
  if (n < at + 8 || le(p + at, 8) == UINT64_MAX) return NULL;
  return "a superblock pointing to a driver information block (a file of the family or multi "
         "driver): refused";
}

/* The driver's last refusal on this thread: libhdf5 clears its error stack on some paths (a
 * header refused while H5Fopen reads the root group), and the message must still say why. */
static _Thread_local const char *refused;

const char *cx_h5_guard_refusal(void) {
  const char *r = refused;
  refused = NULL;
  return r;
}

/* Why the block HDF5 read at addr into p[0, size) is refused, or NULL: each check looks at the
 * blocks it knows by their signature or by HDF5's type for the read. */
static const char *refusal(guard_file *g, H5FD_mem_t type, haddr_t addr, const unsigned char *p,
                           size_t size) {
  /* global heaps are read as raw data (H5F_block_read maps GHEAP to DRAW), so every block is
   * looked at; only one that starts like a collection is walked */
  if (is_gheap(p, size) && !whole_gheap_ok(g, addr, p, size))
    return "damaged global heap collection (a free-space object of size 0, an object past its "
           "end, or larger than the file): refused, as libhdf5 1.10 would loop, overrun or "
           "allocate its stated size on it";
  const char *why = lheap_refusal(g, p, size);
  if (why) return why;
  why = type == H5FD_MEM_SUPER ? superblock_refusal(g, addr, p, size) : NULL;
  if (why) return why;
  g->oh.base = g->pub.base_addr; /* known once HDF5 has read the superblock */
  if (!cx_h5_btree_ok(&g->bt, addr - g->oh.base, p, size, &why)) return why;
  if (type == H5FD_MEM_OHDR && !cx_h5_ohdr_ok(&g->oh, addr, p, size, &why)) return why;
  return NULL;
}

/* Reads past the end of the file give zeros, as in sec2; past the end of the address space
 * HDF5 allocated (eoa) is an error. */
static herr_t guard_read(H5FD_t *f, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                         void *buf) {
  (void)dxpl;
  guard_file *g = (guard_file *)f;
  if (addr == HADDR_UNDEF || addr > MAXADDR || size > MAXADDR - addr || addr + size > g->eoa) {
    push(H5E_OVERFLOW, __func__, "read past the end of the file's address space");
    return -1;
  }
  unsigned char *p = buf;
  long long done = cx_h5_pread(g->oh.fd, p, size, addr);
  if (done < 0) {
    push(H5E_READERROR, __func__, strerror(errno));
    return -1;
  }
  memset(p + done, 0, size - (size_t)done);
  const char *why = refusal(g, type, addr, p, size);
  if (why) {
    refused = why;
    push(H5E_BADVALUE, __func__, why);
    return -1;
  }
  return 0;
}

static herr_t guard_write(H5FD_t *f, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                          const void *buf) {
  (void)f, (void)type, (void)dxpl, (void)addr, (void)size, (void)buf;
  push(H5E_WRITEERROR, __func__, "the guard driver is read-only");
  return -1;
}

static herr_t guard_truncate(H5FD_t *f, hid_t dxpl, hbool_t closing) {
  (void)f, (void)dxpl, (void)closing;
  return 0;
}

static const H5FD_class_t guard_class = {
    .name = "cx_guard",
    .maxaddr = MAXADDR,
    .fc_degree = H5F_CLOSE_WEAK,
    .open = guard_open,
    .close = guard_close,
    .cmp = guard_cmp,
    .query = guard_query,
    .get_eoa = guard_get_eoa,
    .set_eoa = guard_set_eoa,
    .get_eof = guard_get_eof,
    .get_handle = guard_get_handle,
    .read = guard_read,
    .write = guard_write,
    .truncate = guard_truncate,
    .fl_map = H5FD_FLMAP_DICHOTOMY,
};

static hid_t driver_id = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void register_driver(void) { driver_id = H5FDregister(&guard_class); }

hid_t cx_h5_guard_fapl(void) {
  pthread_once(&once, register_driver);
  if (driver_id < 0) return -1;
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl >= 0 && H5Pset_driver(fapl, driver_id, NULL) < 0) {
    H5Pclose(fapl);
    return -1;
  }
  return fapl;
}

cx_status cx_h5_guard_vlen_strings(hid_t file, hid_t ds, int64_t n, const char *path,
                                   const char *what) {
  hid_t fapl = H5Fget_access_plist(file);
  void *h = NULL;
  bool ours = fapl >= 0 && H5Pget_driver(fapl) == driver_id &&
              H5Fget_vfd_handle(file, fapl, &h) >= 0 && h;
  if (fapl >= 0) H5Pclose(fapl);
  haddr_t at = H5Dget_offset(ds);
  if (!ours || at == HADDR_UNDEF || n <= 0) return CX_OK; /* not stored contiguously: above */
  const cx_h5_ohdr_file *f = h;
  size_t bytes = (size_t)n * 16;
  unsigned char *refs = malloc(bytes);
  if (!refs) return cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  const char *why = NULL;
  bool ok = cx_h5_pread(f->fd, refs, bytes, at + f->base) == (long long)bytes;
  if (!ok) why = "its strings' references run past the end of the file";
  else ok = cx_h5_vlen_refs_ok(f, refs, (uint64_t)n, 1, &why);
  free(refs);
  return why ? cx_fail(CX_ERR_FORMAT, "%s: dataset '%s': %s", path, what, why) : CX_OK;
}
