/* Writing a data set file: extendible chunked datasets filled one chunk at a time, into a
 * temporary file that is renamed into place only when everything is written and closed
 * (cx_file_put_in_place: synced first). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/file_replace.h"
#include "internal.h"

typedef struct part_writer {
  char name[CX_DATA_PART_NAME];
  char images_name[CX_DATA_PART_NAME + 16], labels_name[CX_DATA_PART_NAME + 16];
  hid_t images, labels;
  int64_t written, buffered;
  uint8_t *buf;
  int64_t *lbuf;
} part_writer;

struct cx_dataset_writer {
  char *path, *tmp;
  hid_t file;
  int64_t h, w, c, num_classes, chunk, image_bytes;
  part_writer parts[CX_DATA_MAX_PARTS];
  int nparts;
};

/* ---- attributes ---- */

static cx_status write_str_attr(cx_dataset_writer *w, const char *name, const char *value) {
  hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR), a = -1;
  cx_status s = CX_OK;
  if (t < 0 || sp < 0 || H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)
    s = cx_h5_fail(CX_ERR_IO, w->path, name, "H5Tcopy");
  else if ((a = H5Acreate2(w->file, name, t, sp, H5P_DEFAULT, H5P_DEFAULT)) < 0)
    s = cx_h5_fail(CX_ERR_IO, w->path, name, "H5Acreate2");
  else if (H5Awrite(a, t, &value) < 0) s = cx_h5_fail(CX_ERR_IO, w->path, name, "H5Awrite");
  if (a >= 0) H5Aclose(a);
  if (sp >= 0) H5Sclose(sp);
  if (t >= 0) H5Tclose(t);
  return s;
}

static cx_status write_int_attr(cx_dataset_writer *w, const char *name, int64_t value) {
  hid_t sp = H5Screate(H5S_SCALAR), a = -1;
  cx_status s = CX_OK;
  if (sp < 0) s = cx_h5_fail(CX_ERR_IO, w->path, name, "H5Screate");
  else if ((a = H5Acreate2(w->file, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT)) < 0)
    s = cx_h5_fail(CX_ERR_IO, w->path, name, "H5Acreate2");
  else if (H5Awrite(a, H5T_NATIVE_INT64, &value) < 0)
    s = cx_h5_fail(CX_ERR_IO, w->path, name, "H5Awrite");
  if (a >= 0) H5Aclose(a);
  if (sp >= 0) H5Sclose(sp);
  return s;
}

static cx_status write_class_names(cx_dataset_writer *w, const char *const *names, int64_t n) {
  hsize_t dims[1] = {(hsize_t)n};
  hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate_simple(1, dims, NULL), ds = -1;
  cx_status s = CX_OK;
  if (t < 0 || sp < 0 || H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)
    s = cx_h5_fail(CX_ERR_IO, w->path, "/class_names", "H5Tcopy");
  else if ((ds = H5Dcreate2(w->file, "class_names", t, sp, H5P_DEFAULT, H5P_DEFAULT,
                            H5P_DEFAULT)) < 0)
    s = cx_h5_fail(CX_ERR_IO, w->path, "/class_names", "H5Dcreate2");
  else if (H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, names) < 0)
    s = cx_h5_fail(CX_ERR_IO, w->path, "/class_names", "H5Dwrite");
  if (ds >= 0) H5Dclose(ds);
  if (sp >= 0) H5Sclose(sp);
  if (t >= 0) H5Tclose(t);
  return s;
}

static cx_status write_header(cx_dataset_writer *w, const cx_dataset_meta *m) {
  char created[32];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
  CX_TRY(write_str_attr(w, "format", CX_DATA_FORMAT));
  CX_TRY(write_int_attr(w, "format_version", CX_DATA_FORMAT_VERSION));
  CX_TRY(write_int_attr(w, "num_classes", m->num_classes));
  CX_TRY(write_str_attr(w, "source", m->source ? m->source : ""));
  CX_TRY(write_str_attr(w, "created", created));
  CX_TRY(write_str_attr(w, "tool", m->tool ? m->tool : "compress"));
  if (m->class_names) CX_TRY(write_class_names(w, m->class_names, m->num_classes));
  return CX_OK;
}

/* ---- parts ---- */

static cx_status create_dataset(cx_dataset_writer *w, const char *name, int rank,
                                const hsize_t *dims, const hsize_t *chunk, hid_t type,
                                hid_t *out) {
  hsize_t zero[4], maxd[4];
  for (int i = 0; i < rank; i++) zero[i] = i ? dims[i] : 0, maxd[i] = i ? dims[i] : H5S_UNLIMITED;
  hid_t sp = H5Screate_simple(rank, zero, maxd), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  cx_status s = CX_OK;
  if (sp < 0 || dcpl < 0 || H5Pset_chunk(dcpl, rank, chunk) < 0)
    s = cx_h5_fail(CX_ERR_IO, w->path, name, "H5Pset_chunk");
  else if ((*out = H5Dcreate2(w->file, name + 1, type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0)
    s = cx_h5_fail(CX_ERR_IO, w->path, name, "H5Dcreate2");
  if (dcpl >= 0) H5Pclose(dcpl);
  if (sp >= 0) H5Sclose(sp);
  return s;
}

static cx_status create_part(cx_dataset_writer *w, const char *name, part_writer **out) {
  if (w->nparts == CX_DATA_MAX_PARTS || strlen(name) >= CX_DATA_PART_NAME || strchr(name, '/'))
    return cx_fail(CX_ERR_ARG, "%s: cannot add part '%s'", w->path, name);
  part_writer *p = &w->parts[w->nparts++];
  memset(p, 0, sizeof *p);
  p->images = p->labels = -1;
  snprintf(p->name, sizeof p->name, "%s", name);
  snprintf(p->images_name, sizeof p->images_name, "/%s%simages", name, *name ? "/" : "");
  snprintf(p->labels_name, sizeof p->labels_name, "/%s%slabels", name, *name ? "/" : "");
  p->buf = malloc((size_t)(w->chunk * w->image_bytes));
  p->lbuf = malloc((size_t)w->chunk * sizeof(int64_t));
  if (!p->buf || !p->lbuf) return cx_fail(CX_ERR_NOMEM, "%s: out of memory", w->path);
  if (*name) {
    hid_t g = H5Gcreate2(w->file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return cx_h5_fail(CX_ERR_IO, w->path, p->images_name, "H5Gcreate2");
    H5Gclose(g);
  }
  hsize_t dims[4] = {0, (hsize_t)w->h, (hsize_t)w->w, (hsize_t)w->c};
  hsize_t chunk[4] = {(hsize_t)w->chunk, (hsize_t)w->h, (hsize_t)w->w, (hsize_t)w->c};
  CX_TRY(create_dataset(w, p->images_name, 4, dims, chunk, H5T_STD_U8LE, &p->images));
  hsize_t lchunk[1] = {(hsize_t)(w->chunk < 4096 ? 4096 : w->chunk)};
  CX_TRY(create_dataset(w, p->labels_name, 1, dims, lchunk, H5T_STD_I64LE, &p->labels));
  *out = p;
  return CX_OK;
}

static cx_status find_part(cx_dataset_writer *w, const char *name, part_writer **out) {
  for (int i = 0; i < w->nparts; i++)
    if (strcmp(w->parts[i].name, name) == 0) return *out = &w->parts[i], CX_OK;
  return create_part(w, name, out);
}

/* Extends ds by count rows of `row` elements and writes them at the end. */
static cx_status append_rows(cx_dataset_writer *w, const char *name, hid_t ds, int rank,
                             int64_t at, int64_t count, hid_t mtype, const void *data) {
  hsize_t size[4] = {(hsize_t)(at + count), (hsize_t)w->h, (hsize_t)w->w, (hsize_t)w->c};
  hsize_t off[4] = {(hsize_t)at, 0, 0, 0};
  hsize_t cnt[4] = {(hsize_t)count, (hsize_t)w->h, (hsize_t)w->w, (hsize_t)w->c};
  if (H5Dset_extent(ds, size) < 0) return cx_h5_fail(CX_ERR_IO, w->path, name, "H5Dset_extent");
  hid_t fs = H5Dget_space(ds), ms = H5Screate_simple(rank, cnt, NULL);
  cx_status s = CX_OK;
  if (fs < 0 || ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, off, NULL, cnt, NULL) < 0)
    s = cx_h5_fail(CX_ERR_IO, w->path, name, "H5Sselect_hyperslab");
  else if (H5Dwrite(ds, mtype, ms, fs, H5P_DEFAULT, data) < 0)
    s = cx_h5_fail(CX_ERR_IO, w->path, name, "H5Dwrite");
  if (ms >= 0) H5Sclose(ms);
  if (fs >= 0) H5Sclose(fs);
  return s;
}

static cx_status flush_part(cx_dataset_writer *w, part_writer *p) {
  if (!p->buffered) return CX_OK;
  CX_TRY(append_rows(w, p->images_name, p->images, 4, p->written, p->buffered, H5T_NATIVE_UINT8,
                     p->buf));
  CX_TRY(append_rows(w, p->labels_name, p->labels, 1, p->written, p->buffered, H5T_NATIVE_INT64,
                     p->lbuf));
  p->written += p->buffered;
  p->buffered = 0;
  return CX_OK;
}

/* ---- the writer ---- */

/* Datasets first: with HDF5's default close degree the file stays open while they are. */
static void close_handles(cx_dataset_writer *w) {
  for (int i = 0; i < w->nparts; i++) {
    part_writer *p = &w->parts[i];
    if (p->images >= 0) H5Dclose(p->images);
    if (p->labels >= 0) H5Dclose(p->labels);
    p->images = p->labels = -1;
  }
  if (w->file >= 0) H5Fclose(w->file);
  w->file = -1;
  H5Eclear2(H5E_DEFAULT);
}

static void writer_free(cx_dataset_writer *w) {
  close_handles(w);
  for (int i = 0; i < w->nparts; i++) {
    free(w->parts[i].buf);
    free(w->parts[i].lbuf);
  }
  free(w->path);
  free(w->tmp);
  free(w);
}

cx_status cx_dataset_writer_create(const char *path, const cx_dataset_meta *m,
                                   cx_dataset_writer **out) {
  *out = NULL;
  cx_h5_quiet();
  if (m->h < 1 || m->w < 1 || m->c < 1 || m->c > 4 || m->num_classes < 1 ||
      m->h > CX_DATA_MAX_SIDE || m->w > CX_DATA_MAX_SIDE || m->num_classes > CX_DATA_MAX_CLASSES)
    return cx_fail(CX_ERR_ARG, "%s: images must be H x W x C with H, W from 1 to %d, 1 to 4 "
                   "channels and 1 to %d classes (got %lld x %lld x %lld, %lld classes)", path,
                   CX_DATA_MAX_SIDE, CX_DATA_MAX_CLASSES, (long long)m->h, (long long)m->w,
                   (long long)m->c, (long long)m->num_classes);
  cx_dataset_writer *w = calloc(1, sizeof *w);
  if (!w || !(w->path = strdup(path)) || !(w->tmp = cx_file_tmp_name(path))) {
    if (w) free(w->path);
    free(w);
    return cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  }
  w->h = m->h, w->w = m->w, w->c = m->c, w->num_classes = m->num_classes;
  w->image_bytes = m->h * m->w * m->c;
  w->chunk = cx_h5_chunk_images(w->image_bytes);
  w->file = H5Fcreate(w->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  cx_status s = w->file < 0 ? cx_h5_fail(CX_ERR_IO, path, NULL, "H5Fcreate (temporary file)")
                            : write_header(w, m);
  if (s != CX_OK) {
    cx_dataset_writer_abort(w);
    return s;
  }
  *out = w;
  return CX_OK;
}

cx_status cx_dataset_writer_append(cx_dataset_writer *w, const char *part, const uint8_t *images,
                                   const int64_t *labels, int64_t count) {
  cx_h5_quiet();
  part_writer *p;
  CX_TRY(find_part(w, part ? part : "", &p));
  for (int64_t i = 0; i < count; i++) {
    if (labels[i] < 0 || labels[i] >= w->num_classes)
      return cx_fail(CX_ERR_ARG, "%s: dataset '%s': label %lld of sample %lld is out of range "
                     "[0, %lld)", w->path, p->labels_name, (long long)labels[i],
                     (long long)(p->written + p->buffered), (long long)w->num_classes);
    memcpy(p->buf + p->buffered * w->image_bytes, images + i * w->image_bytes,
           (size_t)w->image_bytes);
    p->lbuf[p->buffered++] = labels[i];
    if (p->buffered == w->chunk) CX_TRY(flush_part(w, p));
  }
  return CX_OK;
}

static cx_status close_all(cx_dataset_writer *w) {
  part_writer *main_part;
  CX_TRY(find_part(w, "", &main_part)); /* every file has /images and /labels, even if empty */
  for (int i = 0; i < w->nparts; i++) {
    part_writer *p = &w->parts[i];
    CX_TRY(flush_part(w, p));
    herr_t a = H5Dclose(p->images), b = H5Dclose(p->labels);
    p->images = p->labels = -1;
    if (a < 0 || b < 0) return cx_h5_fail(CX_ERR_IO, w->path, p->images_name, "H5Dclose");
  }
  herr_t e = H5Fclose(w->file);
  w->file = -1;
  if (e < 0) return cx_h5_fail(CX_ERR_IO, w->path, NULL, "H5Fclose");
  return cx_file_put_in_place(w->tmp, w->path);
}

cx_status cx_dataset_writer_finish(cx_dataset_writer *w) {
  cx_h5_quiet();
  cx_status s = close_all(w);
  if (s != CX_OK) {
    cx_dataset_writer_abort(w);
    return s;
  }
  writer_free(w);
  return CX_OK;
}

void cx_dataset_writer_abort(cx_dataset_writer *w) {
  if (!w) return;
  close_handles(w);
  remove(w->tmp);
  writer_free(w);
}
