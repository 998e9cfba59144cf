#ifndef CX_DATA_H5_GUARD_OHDR_H
#define CX_DATA_H5_GUARD_OHDR_H

/* The guard driver's object header check (data/h5_guard.c; docs/data.md, "Damaged files").
 * libhdf5 1.10 decodes an attribute message without bounds checks: a name without its NUL is
 * strdup'ed past the message, attribute data is copied by the size its datatype and dataspace
 * state, and a variable-length string's reference (length, heap collection, object index) is
 * trusted: a length of terabytes is allocated and zeroed, an index the collection lacks is an
 * empty slot dereferenced, an object larger than the length overruns the string's buffer.
 * Version 1 object headers (what libhdf5 writes by default, h5py too) carry no checksum, so the
 * driver walks every one it reads and checks each attribute message before libhdf5 decodes it.
 * Version 2 headers are checksummed, which libhdf5 verifies first; they are left to it. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cx_h5_ohdr_file {
  int fd;       /* for reading the global heap collections strings point into */
  uint64_t eof; /* the file's size */
  /* where HDF5's addresses start in the file (after a user block, as in our checkpoints):
   * the addresses inside headers and references are relative to it, the driver's are not */
  uint64_t base;
  /* the continuation chunks the headers read so far point to: a read at one of these
   * addresses is a chunk of messages, any other object header read starts with the prefix
   * (all of them are kept: one missed would be walked as a prefix, and refused) */
  uint64_t *cont;
  size_t n_cont, cap;
} cx_h5_ohdr_file;

/* Frees what the walks kept (the file's descriptor is the driver's). */
void cx_h5_ohdr_free(cx_h5_ohdr_file *f);

/* The object header bytes HDF5 read at addr into buf[0, len): false, with *why set, when an
 * attribute message in it would make libhdf5 overrun or allocate without bound. A message cut
 * by the end of the read (HDF5 reads a header's first 512 bytes, then the whole chunk) is left
 * for the whole read. */
bool cx_h5_ohdr_ok(cx_h5_ohdr_file *f, uint64_t addr, const unsigned char *buf, size_t len,
                   const char **why);

/* The n variable-length references at refs (length, collection, index; 16 bytes each) of
 * `base`-byte elements: each must name an object of its collection that holds exactly its
 * length (libhdf5 allocates and zeroes the length it states, then copies the object's size into
 * it, and looks the index up unchecked). Also for a data set's references (/class_names). */
bool cx_h5_vlen_refs_ok(const cx_h5_ohdr_file *f, const unsigned char *refs, uint64_t n,
                        uint64_t base, const char **why);

/* ---- shared with h5_guard.c ---- */

/* The n-byte little-endian number at p (HDF5's encoding). */
static inline uint64_t cx_h5_le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* Reads n bytes at off (fewer at the end of the file); the count read, or -1. */
long long cx_h5_pread(int fd, void *buf, size_t n, uint64_t off);

/* The largest heap block (a global heap collection, a local heap's data segment) the guard
 * reads whole: no heap of strings or link names is near it. */
#define CX_H5_BLOCK_MAX ((uint64_t)1 << 28)

/* The block of `stated` bytes at off, read whole into a buffer the caller frees (bytes past the
 * end of the file as zeros, as HDF5 gets them); NULL when it cannot be read or is larger than
 * CX_H5_BLOCK_MAX. */
unsigned char *cx_h5_read_block(int fd, uint64_t off, uint64_t stated);

/* Walks the global heap collection buf[0, len) as libhdf5 1.10 does: false when the walk would
 * not end or an object runs past the collection. With idx > 0, *size gets object idx's size
 * (UINT64_MAX when the collection has no such object). */
bool cx_h5_gheap_walk(const unsigned char *buf, size_t len, unsigned idx, uint64_t *size);

#endif
