#define _GNU_SOURCE /* memmem */
/* Hostile data sets (issue 16): each must fail at open with a clear message, never hang, and
 * leave no output. The reproducers are in tests/fixtures/bad/ (the num_classes and declared-size
 * files from the bad-input run) or made here (the damaged global heap, the FIFO). */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../data/data.h"
#include "../data/h5_guard.h"
#include "../data/h5_guard_btree.h"
#include "check.h"

static char dir[64];

static const char *path_of(const char *name) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

static const char *fixture(const char *name) {
  static char buf[512];
  snprintf(buf, sizeof buf, "%s/bad/%s", CX_FIXTURES, name);
  return buf;
}

/* The data set at path must be refused by open, the loader and parts listing alike, with a
 * message that names the file and `what`. */
static void expect_refused(const char *path, const char *what, const char *label) {
  cx_dataset *d = NULL;
  cx_status s = cx_dataset_open(path, "", &d);
  const char *m = cx_last_error();
  CHECK(s != CX_OK && !d, "%s: opened", label);
  CHECK(s == CX_OK || (strstr(m, path) && strstr(m, what)), "%s: message lacks '%s': %s", label,
        what, m);
  if (s != CX_OK) printf("  ok (%s): %s\n", label, m);
  if (d) cx_dataset_close(d);
  cx_loader_opts o = cx_loader_defaults();
  cx_loader *l = NULL;
  s = cx_loader_open(path, &o, &l);
  CHECK(s != CX_OK && strstr(cx_last_error(), what), "%s: the loader: %s", label,
        s ? cx_last_error() : "opened");
  if (l) cx_loader_close(l);
}

/* ---- the sane limits ---- */

static void test_limits(void) {
  expect_refused(fixture("h5_num_classes_50M.h5"), "'num_classes' is 50000000",
                 "num_classes 5e7");
  expect_refused(fixture("h5_num_classes_2e40.h5"), "'num_classes' is 1099511627776",
                 "num_classes 2^40");
  expect_refused(fixture("h5_declared_2e40_images.h5"), "the file holds 0 of those chunks",
                 "2^40 images declared, none stored");
  /* found by fuzz_dataset: a heap object larger than its collection, which H5HG_read copied
   * out whole (an ASan memcpy overlap, a heap overrun in a plain build) */
  expect_refused(fixture("fuzz_dataset_gheap_overrun.h5"), "damaged global heap collection",
                 "a global heap object past the collection's end");
  /* found by fuzz_dataset: a collection larger than HDF5's first 4 KiB read, whose free space
   * steps past its end (libhdf5 reads only the rest of it, so the guard reads it whole) */
  expect_refused(fixture("fuzz_dataset_gheap_4k_loop.h5"), "damaged global heap collection",
                 "a collection over 4 KiB whose walk would loop");
  /* found by fuzz_dataset (CI, 2026-12-06): the root group's local heap stating a 3 GB segment
   * in a 9 KB file (libhdf5 allocated it before its read failed: 2 GB resident, an out-of-memory) */
  expect_refused(fixture("fuzz_dataset_lheap_3G.h5"), "a local heap larger than the file",
                 "a local heap of 3 GB");
  /* found by fuzz_dataset: an attribute's enum datatype stating 508 members whose names run
   * past the header (libhdf5 strdup'ed past its buffer: ASan heap-buffer-overflow) */
  expect_refused(fixture("fuzz_dataset_enum_names.h5"), "a datatype that runs past",
                 "a datatype past its attribute message");
  /* found by fuzz_dataset: a string attribute whose characters are 4 GiB wide (libhdf5
   * allocated and zeroed its length times that: minutes) */
  expect_refused(fixture("fuzz_dataset_vlen_base_size.h5"), "not 1 byte wide",
                 "a string of 4 GiB characters");
  /* found by fuzz_dataset: a string attribute's type stating 5 bytes for its 16-byte reference
   * (H5Aread copied 16 out of the 5 decoded: ASan heap-buffer-overflow) */
  expect_refused(fixture("fuzz_dataset_vlen_stored_size.h5"), "stored size is not 16",
                 "a variable-length type of 5 bytes");
  /* found by fuzz_dataset: a compact /class_names of 3 strings that stores 0 bytes (libhdf5
   * copied the 48 bytes of references from a NULL buffer: SIGSEGV in H5VM_memcpyvv) */
  expect_refused(fixture("fuzz_dataset_compact_empty.h5"), "declares 48 bytes, but the file "
                 "holds 0", "a compact dataset without its data");
  /* found by fuzz_dataset: a continuation message of 0 bytes, whose address and length libhdf5
   * decoded from the messages after it (it then allocated 512 MiB for the chunk) */
  expect_refused(fixture("fuzz_dataset_short_continuation.h5"), "continuation message too "
                 "short", "a continuation message of 0 bytes");
  /* found by fuzz_dataset (CI): /labels whose integer type is 512 MiB wide (the dtype name's
   * bit count overflowed an int: UBSan abort) */
  expect_refused(fixture("h5_labels_512M_integer.h5"), "found signed 536870912-byte integers",
                 "a 512 MiB integer label type");
  /* found by fuzz_dataset (30-minute run): an empty string attribute whose reference still
   * names a heap object, an index the collection lacks (libhdf5 reads the object of any
   * non-zero address whatever the length: SIGSEGV in H5HG_read) */
  expect_refused(fixture("fuzz_dataset_empty_vlen_heap_index.h5"), "names an object its heap "
                 "collection lacks", "an empty string pointing to a missing heap object");
  /* found by fuzz_dataset (30-minute run): a root object header whose reserved prefix byte is
   * 5, which the guard took for no header (so its continuation's attributes went unchecked: a
   * 4-byte string type, ASan heap-buffer-overflow in H5A__read); libhdf5 ignores the byte */
  expect_refused(fixture("fuzz_dataset_prefix_reserved_byte.h5"), "stored size is not 16",
                 "a header prefix with its reserved byte set");
  /* found by fuzz_dataset (30-minute run): a superblock pointing to a driver information block
   * that states 2.4 GB (libhdf5 allocated it, then failed without a reason) */
  expect_refused(fixture("fuzz_dataset_driver_info_2G.h5"), "driver information block",
                 "a driver information block of 2.4 GB");
  /* found by fuzz_dataset (30-minute run, 2026-12-05): a 49-byte superblock of 2-byte
   * addresses, on which libhdf5 grew a buffer to 2 GB (ASan's allocator touches it: out of
   * memory) before failing without a reason */
  expect_refused(fixture("fuzz_dataset_offsets_2.h5"), "other than 8 bytes",
                 "a superblock of 2-byte addresses");
  /* found by fuzz_dataset (30-minute run): a string attribute whose dataspace message states
   * 4 bytes for a scalar's 8, so the guard skipped its reference, which names the free-space
   * object (index 0; H5HG_read copied its size out: ASan heap-buffer-overflow) */
  expect_refused(fixture("fuzz_dataset_short_dataspace.h5"), "names an object its heap "
                 "collection lacks", "a dataspace message shorter than its dimensions");
  /* found by fuzz_dataset (30-minute run): /labels' integer type whose bit offset and precision
   * run past its bytes (libhdf5's conversion addressed bits past the value; it made a label of
   * INT64_MAX here, which then overflowed: test_label_max) */
  expect_refused(fixture("fuzz_dataset_label_bits.h5"), "bits lie outside its size",
                 "an integer type whose bits run past it");
  /* a continuation stating 512 MiB in a 10 KB file (libhdf5 allocates it before the read fails,
   * and then gives no reason) */
  expect_refused(fixture("h5_continuation_512M.h5"), "continuation past the end of the file",
                 "a continuation of 512 MiB");
}

/* found by fuzz_dataset: a /class_names of 587,202,563 names (the part 'val' reads the file's
 * names; 4.7 GB of pointers were allocated before anything was read) */
static void test_class_names_count(void) {
  cx_dataset *d = NULL;
  const char *p = fixture("fuzz_dataset_class_names_587M.h5");
  cx_status s = cx_dataset_open(p, "val", &d);
  CHECK(s != CX_OK && strstr(cx_last_error(), "holds 587202563 names"),
        "587M class names: %s", s ? cx_last_error() : "opened");
  if (s != CX_OK) printf("  ok (587M class names): %s\n", cx_last_error());
  if (d) cx_dataset_close(d);
}

/* A valid small data set whose root attribute `name` is then made a [2] array: H5Aread would
 * write both elements into the one value the reader holds (found by fuzz_dataset). */
/* Two 2x2 images with labels lab[2] and, when nk > 0, a num_classes attribute of nk values. */
static void write_two(const char *p, const int64_t lab[2], const int64_t *k, hsize_t nk) {
  hid_t f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t d4[4] = {2, 2, 2, 1}, d1 = 2;
  uint8_t px[8] = {0};
  hid_t sp = H5Screate_simple(4, d4, NULL);
  hid_t ds = H5Dcreate2(f, "images", H5T_STD_U8LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, px);
  H5Dclose(ds), H5Sclose(sp);
  sp = H5Screate_simple(1, &d1, NULL);
  ds = H5Dcreate2(f, "labels", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, lab);
  H5Dclose(ds), H5Sclose(sp);
  if (nk) {
    sp = H5Screate_simple(1, &nk, NULL);
    hid_t a = H5Acreate2(f, "num_classes", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, k);
    H5Aclose(a), H5Sclose(sp);
  }
  H5Fclose(f);
}

static void test_array_attr(void) {
  const char *p = path_of("arr.h5");
  write_two(p, (const int64_t[]){0, 1}, (const int64_t[]){2, 2}, 2);
  expect_refused(p, "'num_classes' must hold one value, found 2", "an array attribute");
}

/* found by fuzz_dataset (UBSan): a label of INT64_MAX without num_classes, whose class count
 * label + 1 overflowed */
static void test_label_max(void) {
  const char *p = path_of("max.h5");
  write_two(p, (const int64_t[]){0, INT64_MAX}, NULL, 0);
  expect_refused(p, "has label 9223372036854775807", "a label of INT64_MAX");
}

/* ---- non-regular files ---- */

static void test_fifo(void) {
  const char *p = path_of("fifo");
  CHECK(mkfifo(p, 0600) == 0, "mkfifo %s failed", p);
  /* nothing writes to the FIFO: an open that blocked would hang here */
  expect_refused(p, "is a FIFO, not a regular file", "a FIFO as the data set");
  char names[4][CX_DATA_PART_NAME];
  int n = 0;
  CHECK(cx_dataset_parts(p, names, 4, &n) != CX_OK && strstr(cx_last_error(), "FIFO"),
        "parts of a FIFO: %s", cx_last_error());
  expect_refused(dir, "is a directory, not a regular file", "a directory as the data set");
  hid_t fapl = cx_h5_guard_fapl();
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  hid_t f = H5Fopen(p, H5F_ACC_RDONLY, fapl);
  CHECK(f < 0, "the guard driver opened a FIFO");
  if (f >= 0) H5Fclose(f);
  H5Pclose(fapl);
}

/* ---- a damaged global heap ---- */

static void write_small(const char *path) {
  const char *names[] = {"zero", "one"};
  cx_dataset_meta m = {.h = 2, .w = 2, .c = 1, .num_classes = 2, .class_names = names,
                       .source = "test", .tool = "test_data_bad"};
  cx_dataset_writer *w = NULL;
  uint8_t px[3 * 4] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  int64_t labels[3] = {0, 1, 0};
  CHECK(cx_dataset_writer_create(path, &m, &w) == CX_OK, "writer: %s", cx_last_error());
  CHECK(cx_dataset_writer_append(w, "", px, labels, 3) == CX_OK, "append: %s", cx_last_error());
  CHECK(cx_dataset_writer_finish(w) == CX_OK, "finish: %s", cx_last_error());
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  rewind(f);
  unsigned char *b = malloc(*n);
  if (b && fread(b, 1, *n, f) != *n) free(b), b = NULL;
  fclose(f);
  return b;
}

/* Writes b[0, n) over path; false on any failure. */
static bool spit(const char *path, const unsigned char *b, size_t n) {
  FILE *f = fopen(path, "wb");
  bool ok = f && fwrite(b, 1, n, f) == n;
  if (f) ok = fclose(f) == 0 && ok;
  return ok;
}

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* Sets the size of the free-space object of the file's first global heap collection to 0: the
 * shape of the damage in the reproducer (64 bytes duplicated at offset 2012 put a zeroed object
 * header where the free space began), on which libhdf5 1.10 loops forever. Returns false when
 * the file has no such collection. */
static bool damage_heap(const char *path) {
  size_t n = 0;
  unsigned char *b = slurp(path, &n);
  unsigned char *g = b ? memmem(b, n, "GCOL\001", 5) : NULL;
  bool done = false;
  if (g) {
    size_t size = (size_t)le64(g + 8), p = 16;
    while (!done && p + 16 <= size) {
      unsigned idx = g[p] | g[p + 1] << 8;
      uint64_t obj = le64(g + p + 8);
      if (idx == 0) memset(g + p + 8, 0, 8), done = true;
      else p += 16 + (size_t)((obj + 7) & ~(uint64_t)7);
    }
    done = done && spit(path, b, n);
  }
  free(b);
  return done;
}

static void test_heap(void) {
  const char *p = path_of("heap.h5");
  write_small(p);
  cx_dataset *d = NULL;
  CHECK(cx_dataset_open(p, "", &d) == CX_OK, "the undamaged file: %s", cx_last_error());
  if (d) {
    CHECK(cx_dataset_class_name(d, 1) && !strcmp(cx_dataset_class_name(d, 1), "one"),
          "class names read back wrong through the guard driver");
    uint8_t px[12];
    CHECK(cx_dataset_read(d, 0, 3, px) == CX_OK && px[11] == 12, "images read back wrong");
    cx_dataset_close(d);
  }
  CHECK(damage_heap(p), "no global heap collection with free space in %s", p);
  expect_refused(p, "damaged global heap collection", "a free-space object of size 0");
  cx_augment a = {0};
  const char *out = path_of("aug.h5");
  CHECK(cx_data_augment_file(p, "", out, &a, 1, true, 1, "test") != CX_OK &&
            access(out, F_OK) != 0,
        "augment of the damaged file: succeeded or left %s", out);
}

/* ---- a damaged local heap ---- */

/* Makes the first free block of the file's first local heap (the root group's link names) name
 * itself as the next: the shape fuzz_checkpoint found, on which libhdf5 1.10 allocates a list
 * node after another until memory runs out. Returns false when the heap has no free block. */
static bool loop_local_heap(const char *path) {
  size_t n = 0;
  unsigned char *b = slurp(path, &n);
  unsigned char *h = b ? memmem(b, n, "HEAP\0", 5) : NULL;
  bool done = false;
  if (h && (size_t)(h - b) + 32 <= n) {
    uint64_t size = le64(h + 16 - 8), head = le64(h + 16), at = le64(h + 24);
    if (head != 1 && head < size && at + head + 8 <= n) {
      memcpy(b + at + head, h + 16, 8); /* the next block: this one */
      done = spit(path, b, n);
    }
  }
  free(b);
  return done;
}

static void test_local_heap(void) {
  const char *p = path_of("lheap.h5");
  write_small(p);
  CHECK(loop_local_heap(p), "no local heap with a free block in %s", p);
  expect_refused(p, "damaged local heap", "a local heap's free list that loops");
}

/* Makes the file's first B-tree node (the root group's) a level-1 node whose first child is
 * itself: libhdf5 1.10 recursed into it until the stack overflowed. */
static bool loop_btree(const char *path) {
  size_t n = 0;
  unsigned char *b = slurp(path, &n);
  unsigned char *t = b ? memmem(b, n, "TREE\0", 5) : NULL;
  bool done = false;
  if (t && (size_t)(t - b) + 40 <= n) {
    uint64_t self = (uint64_t)(t - b); /* a data set has no user block: addresses are offsets */
    t[5] = 1;
    for (int i = 0; i < 8; i++) t[32 + i] = (unsigned char)(self >> (8 * i));
    done = spit(path, b, n);
  }
  free(b);
  return done;
}

static void test_btree_loop(void) {
  const char *p = path_of("btree.h5");
  write_small(p);
  CHECK(loop_btree(p), "no B-tree node in %s", p);
  expect_refused(p, "B-tree node naming itself", "a B-tree node that is its own child");
}

/* The B-tree rules on hand-made group nodes (2K = 4: 24 + 4 * 8 + 5 * 8 = 96 bytes). */
static void set_child(unsigned char *node, int u, uint64_t addr) {
  for (int i = 0; i < 8; i++) node[24 + u * 16 + 8 + i] = (unsigned char)(addr >> (8 * i));
}

static void test_btree_rules(void) {
  cx_h5_btrees t = {.sizes_8 = true, .chunk_two_k = 64};
  unsigned char root[96] = {'T', 'R', 'E', 'E', 0, 2, 2}, mid[96] = {'T', 'R', 'E', 'E', 0, 1, 1};
  const char *why = NULL;
  set_child(root, 0, 1000), set_child(root, 1, 2000), set_child(mid, 0, 3000);
  CHECK(cx_h5_btree_ok(&t, 100, root, 96, &why), "a valid root refused: %s", why);
  CHECK(cx_h5_btree_ok(&t, 1000, mid, 96, &why), "its valid child refused: %s", why);
  CHECK(!cx_h5_btree_ok(&t, 2000, root, 96, &why), "a child at its parent's level accepted");
  set_child(mid, 0, 100);
  CHECK(!cx_h5_btree_ok(&t, 1000, mid, 96, &why), "a child naming its parent accepted");
  set_child(mid, 0, 1000);
  CHECK(!cx_h5_btree_ok(&t, 1000, mid, 96, &why), "a node naming itself accepted");
  cx_h5_btrees_free(&t);
  t = (cx_h5_btrees){.sizes_8 = true, .chunk_two_k = 64};
  set_child(root, 1, 1000);
  CHECK(!cx_h5_btree_ok(&t, 100, root, 96, &why), "a node naming one child twice accepted");
  set_child(root, 1, 2000);
  CHECK(cx_h5_btree_ok(&t, 100, root, 96, &why) && !cx_h5_btree_ok(&t, 200, root, 96, &why),
        "two nodes naming the same children accepted");
  cx_h5_btrees_free(&t);
}

/* The free-list walk itself, on hand-made data segments of 64 bytes. */
static void test_lheap_walk(void) {
  unsigned char s[64] = {0};
  s[16] = 1, s[24] = 16; /* one free block at 16 of 16 bytes, the last (next: 1) */
  CHECK(cx_h5_lheap_free_list_ok(s, 64, 16), "a valid free list refused");
  CHECK(cx_h5_lheap_free_list_ok(s, 64, 1), "an empty free list refused");
  s[16] = 16; /* the block names itself */
  CHECK(!cx_h5_lheap_free_list_ok(s, 64, 16), "a free block naming itself accepted");
  s[16] = 32, s[32] = 16, s[40] = 16; /* 16 -> 32 -> 16 */
  CHECK(!cx_h5_lheap_free_list_ok(s, 64, 16), "a loop of two free blocks accepted");
  s[32] = 1;
  CHECK(cx_h5_lheap_free_list_ok(s, 64, 16), "two free blocks refused");
  CHECK(!cx_h5_lheap_free_list_ok(s, 64, 56), "a free block past the segment accepted");
}

/* /class_names' second reference (length 3, "one") given index `idx` and length `len` in place:
 * the references are the data set's contiguous raw data (H5Dget_offset). */
static bool damage_name_ref(const char *path, uint32_t len, uint32_t idx) {
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t ds = f >= 0 ? H5Dopen2(f, "class_names", H5P_DEFAULT) : -1;
  haddr_t at = ds >= 0 ? H5Dget_offset(ds) : HADDR_UNDEF;
  if (ds >= 0) H5Dclose(ds);
  if (f >= 0) H5Fclose(f);
  FILE *w = at != HADDR_UNDEF ? fopen(path, "r+b") : NULL;
  unsigned char ref[4] = {(unsigned char)len, (unsigned char)(len >> 8), 0, 0};
  unsigned char ix[4] = {(unsigned char)idx, (unsigned char)(idx >> 8), 0, 0};
  bool ok = w && fseek(w, (long)at + 16, SEEK_SET) == 0 && fwrite(ref, 1, 4, w) == 4 &&
            fseek(w, (long)at + 16 + 12, SEEK_SET) == 0 && fwrite(ix, 1, 4, w) == 4;
  if (w) ok = fclose(w) == 0 && ok;
  return ok;
}

/* A class name whose reference names an object its heap lacks (libhdf5 1.10.8 dereferences the
 * empty slot: SIGSEGV), or states another length than its object's (a copy past the buffer). */
static void test_name_refs(void) {
  const char *p = path_of("refs.h5");
  write_small(p);
  CHECK(damage_name_ref(p, 3, 40), "could not edit /class_names in %s", p);
  expect_refused(p, "its heap collection lacks", "a class name's missing heap object");
  write_small(p);
  CHECK(damage_name_ref(p, 2, 2), "could not edit /class_names in %s", p);
  expect_refused(p, "length differs", "a class name shorter than its heap object");
}

/* The walk itself, on hand-made collections. */
static void test_gheap_walk(void) {
  unsigned char c[64] = {'G', 'C', 'O', 'L', 1};
  c[8] = 64; /* collection size */
  /* object 1 of 5 bytes (padded to 8), then the free space: 64 - 16 - 24 = 24 bytes */
  c[16] = 1, c[24] = 5;
  c[40] = 0, c[48] = 24;
  CHECK(cx_h5_gheap_ok(c, sizeof c), "a valid collection refused");
  c[48] = 0;
  CHECK(!cx_h5_gheap_ok(c, sizeof c), "a free space of size 0 accepted");
  c[48] = 24, c[24] = 0xff, c[31] = 0x80; /* an object of 2^63 bytes: H5HG_read copies it */
  CHECK(!cx_h5_gheap_ok(c, sizeof c), "an object past the end accepted");
  c[24] = 32, c[31] = 0; /* exactly to the end: no free space left */
  CHECK(cx_h5_gheap_ok(c, sizeof c), "an object filling the collection refused");
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/cx_test_data_bad_XXXXXX");
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  test_limits();
  test_array_attr();
  test_label_max();
  test_fifo();
  test_heap();
  test_name_refs();
  test_class_names_count();
  test_gheap_walk();
  test_local_heap();
  test_lheap_walk();
  test_btree_loop();
  test_btree_rules();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("could not remove %s\n", dir);
  printf("%s: %d failure(s)\n", fails ? "FAILED" : "passed", fails);
  return fails != 0;
}
