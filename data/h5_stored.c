/* Whether a data set's declared elements are all in the file (h5_guard.h). */
#include "h5_guard.h"
#include "internal.h"

/* Whether dcpl's filter pipeline is Fletcher-32 alone (what our checkpoints write): it adds 4
 * bytes to every chunk and changes nothing else, so a chunk's stored size is known. */
static bool fletcher32_only(hid_t dcpl, int nf) {
  unsigned flags, conf;
  size_t nelem = 0;
  return nf == 1 && H5Pget_filter2(dcpl, 0, &flags, &nelem, NULL, 0, NULL, &conf) ==
                        H5Z_FILTER_FLETCHER32;
}

/* Every chunk of a Fletcher-32 data set stores its bytes and the checksum (or, marked as stored
 * without the filter, its bytes alone): libhdf5 1.10 copies the whole chunk out of a shorter
 * one (ASan: a heap overrun, found by fuzz_checkpoint). Chunks are visited by index, which HDF5 finds by a
 * walk of its index each time: fine for checkpoints, whose tensors are few chunks each. */
static cx_status check_chunk_sizes(hid_t ds, const char *path, const char *name,
                                   uint64_t chunk_bytes, hsize_t n, hsize_t file_bytes) {
  hid_t sp = H5Dget_space(ds);
  if (sp < 0) return cx_h5_fail(CX_ERR_FORMAT, path, name, "H5Dget_space");
  cx_status s = CX_OK;
  for (hsize_t i = 0; s == CX_OK && i < n; i++) {
    hsize_t offset[H5S_MAX_RANK], size = 0;
    haddr_t addr = 0;
    unsigned mask = 0;
    if (H5Dget_chunk_info(ds, sp, i, offset, &mask, &addr, &size) < 0)
      s = cx_h5_fail(CX_ERR_FORMAT, path, name, "H5Dget_chunk_info");
    else if (size != chunk_bytes + (mask & 1 ? 0 : 4) || addr > file_bytes ||
             size > file_bytes - addr)
      s = cx_fail(CX_ERR_FORMAT, "%s: dataset '%s': chunk %llu stores %llu bytes at %llu, "
                  "expected %llu inside the file's %llu bytes (a damaged file)",
                  path, name, (unsigned long long)i, (unsigned long long)size,
                  (unsigned long long)addr, (unsigned long long)(chunk_bytes + (mask & 1 ? 0 : 4)),
                  (unsigned long long)file_bytes);
  }
  H5Sclose(sp);
  return s;
}

cx_status cx_h5_check_stored(hid_t file, const char *path, hid_t ds, const char *name, int rank,
                             const hsize_t *dims, size_t elem) {
  uint64_t logical = elem;
  for (int i = 0; i < rank; i++) {
    if (dims[i] && logical > UINT64_MAX / dims[i]) logical = UINT64_MAX;
    else logical *= dims[i];
  }
  if (logical == 0) return CX_OK;
  hid_t dcpl = H5Dget_create_plist(ds);
  if (dcpl < 0) return cx_h5_fail(CX_ERR_FORMAT, path, name, "H5Dget_create_plist");
  H5D_layout_t layout = H5Pget_layout(dcpl);
  hsize_t chunk[H5S_MAX_RANK] = {0};
  int nf = H5Pget_nfilters(dcpl);
  bool chunked = layout == H5D_CHUNKED && rank <= H5S_MAX_RANK &&
                 H5Pget_chunk(dcpl, rank, chunk) == rank;
  bool fletcher = chunked && fletcher32_only(dcpl, nf);
  H5Pclose(dcpl);
  uint64_t stored = H5Dget_storage_size(ds);
  cx_status s = CX_OK;
  hsize_t have_chunks = 0;
  if (chunked) {
    uint64_t want = 1;
    for (int i = 0; i < rank && chunk[i]; i++) {
      uint64_t k = dims[i] / chunk[i] + (dims[i] % chunk[i] != 0);
      want = k && want > UINT64_MAX / k ? UINT64_MAX : want * k;
    }
    hsize_t have = 0;
    hid_t sp = H5Dget_space(ds);
    herr_t e = sp < 0 ? -1 : H5Dget_num_chunks(ds, sp, &have);
    if (sp >= 0) H5Sclose(sp);
    if (e < 0) return cx_h5_fail(CX_ERR_FORMAT, path, name, "H5Dget_num_chunks");
    have_chunks = have;
    if (have != want)
      s = cx_fail(CX_ERR_FORMAT, "%s: dataset '%s' declares %llu elements in %llu chunks, but "
                  "the file holds %llu of those chunks (a truncated or damaged file)", path,
                  name, (unsigned long long)(logical / elem), (unsigned long long)want,
                  (unsigned long long)have);
  }
  hsize_t file_bytes = 0;
  if (H5Fget_filesize(file, &file_bytes) < 0)
    return cx_h5_fail(CX_ERR_FORMAT, path, name, "H5Fget_filesize");
  /* the storage HDF5 reports is what the file's metadata claims: it too must fit in the file */
  if (s == CX_OK && stored > file_bytes)
    s = cx_fail(CX_ERR_FORMAT, "%s: dataset '%s' claims %llu bytes of storage, but the file has "
                "%llu (a truncated or damaged file)", path, name, (unsigned long long)stored,
                (unsigned long long)file_bytes);
  if (s == CX_OK && fletcher) {
    uint64_t chunk_bytes = elem;
    for (int i = 0; i < rank; i++) chunk_bytes *= chunk[i];
    s = check_chunk_sizes(ds, path, name, chunk_bytes, have_chunks, file_bytes);
  }
  if (s == CX_OK && (!chunked || nf == 0) && stored < logical)
    s = cx_fail(CX_ERR_FORMAT, "%s: dataset '%s' declares %llu bytes, but the file holds %llu of "
                "them (a truncated or damaged file)", path, name,
                (unsigned long long)logical, (unsigned long long)stored);
  H5Eclear2(H5E_DEFAULT);
  return s;
}

