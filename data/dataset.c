/* Reading a data set file: every dataset is checked (dtype, rank, lengths, label range) before
 * anything is used, and every HDF5 call's failure names the file and the dataset. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "h5_guard.h"
#include "internal.h"

enum { N_ATTRS = 3 };
static const char *const attr_names[N_ATTRS] = {"source", "created", "tool"};

struct cx_dataset {
  char *path;
  char images_name[CX_DATA_PART_NAME + 16], labels_name[CX_DATA_PART_NAME + 16];
  hid_t file, images;
  cx_dataset_info info;
  int64_t *labels;
  char **class_names;
  int64_t num_names;
  char *attrs[N_ATTRS];
};

/* ---- strings: attributes and /class_names may be variable- or fixed-length ---- */

static char *dup_n(const char *s, size_t n) {
  char *r = malloc(n + 1);
  if (!r) return NULL;
  memcpy(r, s, n);
  r[n] = '\0';
  return r;
}

/* One element: H5Aread writes every element of the attribute's dataspace into the one value we
 * give it (a hostile [2^40] attribute would overrun it, or make HDF5 fill terabytes). */
static cx_status check_scalar(const cx_dataset *d, hid_t a, const char *name) {
  hid_t sp = H5Aget_space(a);
  hssize_t n = sp < 0 ? -1 : H5Sget_simple_extent_npoints(sp);
  if (sp >= 0) H5Sclose(sp);
  if (n != 1)
    return cx_fail(CX_ERR_FORMAT, "%s: attribute '%s' must hold one value, found %lld", d->path,
                   name, (long long)n);
  return CX_OK;
}

/* A scalar string attribute of the root, or NULL (absent or not a string). */
static cx_status read_str_attr(const cx_dataset *d, const char *name, char **out) {
  *out = NULL;
  htri_t has = H5Aexists(d->file, name);
  if (has < 0) return cx_h5_fail(CX_ERR_FORMAT, d->path, name, "H5Aexists");
  if (!has) return CX_OK;
  hid_t a = H5Aopen(d->file, name, H5P_DEFAULT);
  if (a < 0) return cx_h5_fail(CX_ERR_FORMAT, d->path, name, "H5Aopen");
  hid_t ft = H5Aget_type(a), mt = -1;
  cx_status s = check_scalar(d, a, name);
  if (s != CX_OK) {
  } else if (ft < 0) s = cx_h5_fail(CX_ERR_FORMAT, d->path, name, "H5Aget_type");
  else if (H5Tget_class(ft) == H5T_STRING) {
    mt = H5Tcopy(H5T_C_S1);
    H5Tset_cset(mt, H5Tget_cset(ft)); /* HDF5 converts no strings between ASCII and UTF-8 */
    if (H5Tis_variable_str(ft) > 0) {
      char *v = NULL;
      H5Tset_size(mt, H5T_VARIABLE);
      if (H5Aread(a, mt, &v) < 0) s = cx_h5_fail(CX_ERR_FORMAT, d->path, name, "H5Aread");
      else if (v) {
        *out = dup_n(v, strlen(v));
        H5free_memory(v);
      }
    } else {
      size_t n = H5Tget_size(ft);
      char *buf = calloc(n + 1, 1);
      H5Tset_size(mt, n + 1);
      if (!buf) s = cx_fail(CX_ERR_NOMEM, "%s: out of memory", d->path);
      else if (H5Aread(a, mt, buf) < 0) s = cx_h5_fail(CX_ERR_FORMAT, d->path, name, "H5Aread");
      else *out = buf, buf = NULL;
      free(buf);
    }
  }
  if (mt >= 0) H5Tclose(mt);
  if (ft >= 0) H5Tclose(ft);
  H5Aclose(a);
  return s;
}

static cx_status read_int_attr(const cx_dataset *d, const char *name, int64_t *v, bool *found) {
  *found = false;
  htri_t has = H5Aexists(d->file, name);
  if (has < 0) return cx_h5_fail(CX_ERR_FORMAT, d->path, name, "H5Aexists");
  if (!has) return CX_OK;
  hid_t a = H5Aopen(d->file, name, H5P_DEFAULT);
  if (a < 0) return cx_h5_fail(CX_ERR_FORMAT, d->path, name, "H5Aopen");
  hid_t ft = H5Aget_type(a);
  cx_status s = check_scalar(d, a, name);
  if (s != CX_OK) {
  } else if (ft < 0 || H5Tget_class(ft) != H5T_INTEGER)
    s = cx_fail(CX_ERR_FORMAT, "%s: attribute '%s' must be an integer", d->path, name);
  else if (H5Aread(a, H5T_NATIVE_INT64, v) < 0)
    s = cx_h5_fail(CX_ERR_FORMAT, d->path, name, "H5Aread");
  else *found = true;
  if (ft >= 0) H5Tclose(ft);
  H5Aclose(a);
  return s;
}

static cx_status read_names(cx_dataset *d, hid_t ds, hid_t ft, int64_t n) {
  d->class_names = calloc((size_t)(n ? n : 1), sizeof *d->class_names);
  if (!d->class_names) return cx_fail(CX_ERR_NOMEM, "%s: out of memory", d->path);
  d->num_names = n;
  hid_t mt = H5Tcopy(H5T_C_S1);
  cx_status s = CX_OK;
  H5Tset_cset(mt, H5Tget_cset(ft));
  if (H5Tis_variable_str(ft) > 0) {
    char **v = calloc((size_t)(n ? n : 1), sizeof *v);
    H5Tset_size(mt, H5T_VARIABLE);
    if (!v) s = cx_fail(CX_ERR_NOMEM, "%s: out of memory", d->path);
    else if ((s = cx_h5_guard_vlen_strings(d->file, ds, n, d->path, "/class_names")) != CX_OK)
      ;
    else if (H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0)
      s = cx_h5_fail(CX_ERR_FORMAT, d->path, "/class_names", "H5Dread");
    for (int64_t i = 0; v && i < n; i++) {
      d->class_names[i] = dup_n(v[i] ? v[i] : "", v[i] ? strlen(v[i]) : 0);
      if (v[i]) H5free_memory(v[i]);
    }
    free(v);
  } else {
    size_t len = H5Tget_size(ft);
    char *buf = calloc((size_t)(n ? n : 1), len + 1);
    H5Tset_size(mt, len + 1);
    if (!buf) s = cx_fail(CX_ERR_NOMEM, "%s: out of memory", d->path);
    else if (H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
      s = cx_h5_fail(CX_ERR_FORMAT, d->path, "/class_names", "H5Dread");
    for (int64_t i = 0; buf && s == CX_OK && i < n; i++)
      d->class_names[i] = dup_n(buf + (size_t)i * (len + 1), strlen(buf + (size_t)i * (len + 1)));
    free(buf);
  }
  H5Tclose(mt);
  for (int64_t i = 0; s == CX_OK && i < n; i++)
    if (!d->class_names[i]) s = cx_fail(CX_ERR_NOMEM, "%s: out of memory", d->path);
  return s;
}

/* Bytes one string takes in the file: a variable-length one is a global heap reference (length,
 * collection address, index: 16 bytes, the only form the guard accepts), a fixed one its size. */
static size_t stored_size(hid_t ft) { return H5Tis_variable_str(ft) > 0 ? 16 : H5Tget_size(ft); }

static cx_status open_class_names(cx_dataset *d) {
  htri_t has = H5Lexists(d->file, "class_names", H5P_DEFAULT);
  if (has < 0) return cx_h5_fail(CX_ERR_FORMAT, d->path, "/class_names", "H5Lexists");
  if (!has) return CX_OK;
  hid_t ds = H5Dopen2(d->file, "class_names", H5P_DEFAULT);
  if (ds < 0) return cx_h5_fail(CX_ERR_FORMAT, d->path, "/class_names", "H5Dopen2");
  hid_t ft = H5Dget_type(ds), sp = H5Dget_space(ds);
  hsize_t n = 0;
  cx_status s = CX_OK;
  if (ft < 0 || sp < 0) s = cx_h5_fail(CX_ERR_FORMAT, d->path, "/class_names", "H5Dget_type");
  else if (H5Tget_class(ft) != H5T_STRING || H5Sget_simple_extent_ndims(sp) != 1)
    s = cx_fail(CX_ERR_FORMAT, "%s: dataset '/class_names' must be a 1-d array of strings",
                d->path);
  else if (H5Sget_simple_extent_dims(sp, &n, NULL), n > CX_DATA_MAX_CLASSES)
    /* one name per class: bounded as num_classes is, before anything is allocated for them */
    s = cx_fail(CX_ERR_FORMAT, "%s: dataset '/class_names' holds %llu names; expected at most "
                "%d", d->path, (unsigned long long)n, CX_DATA_MAX_CLASSES);
  else if ((s = cx_h5_check_stored(d->file, d->path, ds, "/class_names", 1, &n,
                                   stored_size(ft))) == CX_OK)
    s = read_names(d, ds, ft, (int64_t)n);
  if (sp >= 0) H5Sclose(sp);
  if (ft >= 0) H5Tclose(ft);
  H5Dclose(ds);
  return s;
}

/* ---- the two datasets ---- */

/* Opens name (a dataset of integers of rank `rank`), returning its dims. */
static cx_status open_checked(cx_dataset *d, const char *name, int rank, bool u8, hid_t dapl,
                              hid_t *out, hsize_t *dims) {
  const char *expect = u8 ? "uint8 [N,H,W,C]" : "int64 [N]";
  htri_t has = H5Lexists(d->file, name + 1, H5P_DEFAULT);
  /* a failed lookup is damage (the driver's refusal says which), not a missing dataset */
  if (has < 0) return cx_h5_fail(CX_ERR_FORMAT, d->path, name, "H5Lexists");
  if (has == 0) {
    return cx_fail(CX_ERR_FORMAT, "%s: no dataset '%s' (expected %s; see docs/data.md)", d->path,
                   name, expect);
  }
  hid_t ds = H5Dopen2(d->file, name + 1, dapl);
  if (ds < 0) return cx_h5_fail(CX_ERR_FORMAT, d->path, name, "H5Dopen2");
  hid_t ft = H5Dget_type(ds), sp = H5Dget_space(ds);
  cx_status s = CX_OK;
  if (ft < 0 || sp < 0) s = cx_h5_fail(CX_ERR_FORMAT, d->path, name, "H5Dget_type/space");
  else {
    size_t size = H5Tget_size(ft); /* a damaged file can state any width */
    bool ok = H5Tget_class(ft) == H5T_INTEGER &&
              (size == 1 || size == 2 || size == 4 || size == 8);
    if (u8) ok = ok && size == 1 && H5Tget_sign(ft) == H5T_SGN_NONE;
    int nd = H5Sget_simple_extent_ndims(sp);
    if (!ok || nd != rank)
      s = cx_fail(CX_ERR_FORMAT, "%s: dataset '%s' must be %s, found %s%zu-byte %s of rank %d",
                  d->path, name, expect,
                  H5Tget_class(ft) == H5T_INTEGER
                      ? (H5Tget_sign(ft) == H5T_SGN_NONE ? "unsigned " : "signed ")
                      : "",
                  size,
                  H5Tget_class(ft) == H5T_INTEGER ? "integers"
                  : H5Tget_class(ft) == H5T_FLOAT ? "floats"
                                                  : "non-numbers",
                  nd);
    else H5Sget_simple_extent_dims(sp, dims, NULL);
  }
  if (sp >= 0) H5Sclose(sp);
  if (ft >= 0) H5Tclose(ft);
  if (s != CX_OK) H5Dclose(ds);
  else *out = ds;
  return s;
}

static cx_status open_images(cx_dataset *d) {
  /* Streaming reads whole chunks into the loader's own cache: HDF5's would only copy twice. */
  hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
  if (dapl < 0) return cx_h5_fail(CX_ERR_FORMAT, d->path, d->images_name, "H5Pcreate");
  H5Pset_chunk_cache(dapl, 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT);
  hsize_t dims[4];
  cx_status s = open_checked(d, d->images_name, 4, true, dapl, &d->images, dims);
  H5Pclose(dapl);
  if (s != CX_OK) return s;
  cx_dataset_info *in = &d->info;
  in->n = (int64_t)dims[0], in->h = (int64_t)dims[1], in->w = (int64_t)dims[2];
  in->c = (int64_t)dims[3];
  if (in->c < 1 || in->c > 4 || in->h < 1 || in->w < 1 || in->h > CX_DATA_MAX_SIDE ||
      in->w > CX_DATA_MAX_SIDE || in->n < 0)
    return cx_fail(CX_ERR_FORMAT,
                   "%s: dataset '%s' has shape [%lld,%lld,%lld,%lld]; expected [N,H,W,C] with "
                   "H, W from 1 to %d and 1 to 4 channels",
                   d->path, d->images_name, (long long)in->n, (long long)in->h,
                   (long long)in->w, (long long)in->c, CX_DATA_MAX_SIDE);
  CX_TRY(cx_h5_check_stored(d->file, d->path, d->images, d->images_name, 4, dims, 1));
  in->chunk_images = cx_h5_chunk_images(in->h * in->w * in->c);
  hid_t dcpl = H5Dget_create_plist(d->images);
  if (dcpl < 0) return cx_h5_fail(CX_ERR_FORMAT, d->path, d->images_name, "H5Dget_create_plist");
  hsize_t chunk[4];
  if (H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, 4, chunk) == 4)
    in->chunk_images = (int64_t)chunk[0];
  H5Pclose(dcpl);
  return CX_OK;
}

static cx_status open_labels(cx_dataset *d) {
  hid_t ds;
  hsize_t n;
  CX_TRY(open_checked(d, d->labels_name, 1, false, H5P_DEFAULT, &ds, &n));
  hid_t t = H5Dget_type(ds);
  size_t elem = t >= 0 ? H5Tget_size(t) : 8;
  if (t >= 0) {
    snprintf(d->info.label_dtype, sizeof d->info.label_dtype, "%sint%d",
             H5Tget_sign(t) == H5T_SGN_NONE ? "u" : "", (int)elem * 8);
    H5Tclose(t);
  }
  cx_status s = CX_OK;
  if ((int64_t)n != d->info.n)
    s = cx_fail(CX_ERR_FORMAT, "%s: dataset '%s' has %lld labels but '%s' has %lld images",
                d->path, d->labels_name, (long long)n, d->images_name, (long long)d->info.n);
  if (s == CX_OK) s = cx_h5_check_stored(d->file, d->path, ds, d->labels_name, 1, &n, elem);
  if (s == CX_OK && !(d->labels = malloc((size_t)(n ? n : 1) * sizeof(int64_t))))
    s = cx_fail(CX_ERR_NOMEM, "%s: out of memory for %lld labels", d->path, (long long)n);
  if (s == CX_OK && n && H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                 d->labels) < 0)
    s = cx_h5_fail(CX_ERR_FORMAT, d->path, d->labels_name, "H5Dread");
  H5Dclose(ds);
  return s;
}

static cx_status check_labels(cx_dataset *d) {
  int64_t k;
  bool found;
  CX_TRY(read_int_attr(d, "num_classes", &k, &found));
  if (found && (k < 1 || k > CX_DATA_MAX_CLASSES))
    return cx_fail(CX_ERR_FORMAT, "%s: attribute 'num_classes' is %lld; expected 1 to %d",
                   d->path, (long long)k, CX_DATA_MAX_CLASSES);
  if (found && d->num_names && k != d->num_names)
    return cx_fail(CX_ERR_FORMAT,
                   "%s: attribute 'num_classes' is %lld but dataset '/class_names' has %lld names",
                   d->path, (long long)k, (long long)d->num_names);
  if (!found && d->num_names) k = d->num_names, found = true;
  if (!found) {
    k = 0;
    /* each label is bounded before it counts (label + 1 overflowed at INT64_MAX) */
    for (int64_t i = 0; i < d->info.n; i++) {
      if (d->labels[i] >= CX_DATA_MAX_CLASSES)
        return cx_fail(CX_ERR_FORMAT, "%s: dataset '%s' has label %lld, but at most %d classes "
                       "are supported", d->path, d->labels_name, (long long)d->labels[i],
                       CX_DATA_MAX_CLASSES);
      if (d->labels[i] >= k) k = d->labels[i] + 1;
    }
  }
  for (int64_t i = 0; i < d->info.n; i++)
    if (d->labels[i] < 0 || d->labels[i] >= k)
      return cx_fail(CX_ERR_FORMAT, "%s: dataset '%s': label %lld at index %lld is out of range "
                     "[0, %lld)", d->path, d->labels_name, (long long)d->labels[i], (long long)i,
                     (long long)k);
  d->info.num_classes = k;
  return CX_OK;
}

static cx_status check_format(cx_dataset *d) {
  char *fmt = NULL;
  CX_TRY(read_str_attr(d, "format", &fmt));
  bool foreign = fmt && strcmp(fmt, CX_DATA_FORMAT) != 0;
  free(fmt);
  if (foreign)
    return cx_fail(CX_ERR_FORMAT, "%s: attribute 'format' is not '%s'", d->path, CX_DATA_FORMAT);
  int64_t v;
  bool found;
  CX_TRY(read_int_attr(d, "format_version", &v, &found));
  if (found && v > CX_DATA_FORMAT_VERSION)
    return cx_fail(CX_ERR_UNSUPPORTED, "%s: format version %lld is newer than this build reads "
                   "(%d)", d->path, (long long)v, CX_DATA_FORMAT_VERSION);
  return CX_OK;
}

/* Regular files only (a FIFO would block the open), through the guard driver (h5_guard.h). */
static cx_status open_h5(const char *path, hid_t *f) {
  if (access(path, R_OK) != 0)
    return cx_fail(CX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  CX_TRY(cx_h5_check_regular(path));
  htri_t is = H5Fis_hdf5(path);
  if (is == 0) return cx_fail(CX_ERR_FORMAT, "%s: not an HDF5 file", path);
  if (is < 0) return cx_h5_fail(CX_ERR_FORMAT, path, NULL, "H5Fis_hdf5");
  hid_t fapl = cx_h5_guard_fapl();
  if (fapl < 0) return cx_h5_fail(CX_ERR_FORMAT, path, NULL, "H5FDregister");
  *f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  if (*f < 0) return cx_h5_fail(CX_ERR_FORMAT, path, NULL, "H5Fopen");
  return CX_OK;
}

static cx_status open_file(cx_dataset *d) { return open_h5(d->path, &d->file); }

static cx_status open_all(cx_dataset *d) {
  CX_TRY(open_file(d));
  CX_TRY(check_format(d));
  CX_TRY(open_images(d));
  CX_TRY(open_labels(d));
  CX_TRY(open_class_names(d));
  CX_TRY(check_labels(d));
  for (int i = 0; i < N_ATTRS; i++) CX_TRY(read_str_attr(d, attr_names[i], &d->attrs[i]));
  return CX_OK;
}

cx_status cx_dataset_open(const char *path, const char *part, cx_dataset **out) {
  *out = NULL;
  cx_h5_quiet();
  if (part && strlen(part) >= CX_DATA_PART_NAME)
    return cx_fail(CX_ERR_ARG, "%s: part name '%s' is too long", path, part);
  cx_dataset *d = calloc(1, sizeof *d);
  if (!d || !(d->path = dup_n(path, strlen(path)))) {
    free(d);
    return cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  }
  d->file = d->images = -1;
  bool sub = part && *part;
  snprintf(d->images_name, sizeof d->images_name, "/%s%simages", sub ? part : "", sub ? "/" : "");
  snprintf(d->labels_name, sizeof d->labels_name, "/%s%slabels", sub ? part : "", sub ? "/" : "");
  cx_status s = open_all(d);
  if (s != CX_OK) {
    cx_dataset_close(d);
    return s;
  }
  *out = d;
  return CX_OK;
}

void cx_dataset_close(cx_dataset *d) {
  if (!d) return;
  if (d->images >= 0) H5Dclose(d->images);
  if (d->file >= 0) H5Fclose(d->file);
  for (int64_t i = 0; i < d->num_names; i++) free(d->class_names[i]);
  for (int i = 0; i < N_ATTRS; i++) free(d->attrs[i]);
  free(d->class_names);
  free(d->labels);
  free(d->path);
  free(d);
}

const cx_dataset_info *cx_dataset_get_info(const cx_dataset *d) { return &d->info; }
const int64_t *cx_dataset_labels(const cx_dataset *d) { return d->labels; }
const char *cx_dataset_path(const cx_dataset *d) { return d->path; }

const char *cx_dataset_class_name(const cx_dataset *d, int64_t i) {
  return i >= 0 && i < d->num_names ? d->class_names[i] : NULL;
}

const char *cx_dataset_attr(const cx_dataset *d, const char *name) {
  for (int i = 0; i < N_ATTRS; i++)
    if (strcmp(attr_names[i], name) == 0) return d->attrs[i];
  return NULL;
}

cx_status cx_dataset_read(cx_dataset *d, int64_t start, int64_t count, uint8_t *dst) {
  cx_h5_quiet();
  if (start < 0 || count < 0 || start + count > d->info.n)
    return cx_fail(CX_ERR_ARG, "%s: dataset '%s': images [%lld, %lld) are outside [0, %lld)",
                   d->path, d->images_name, (long long)start, (long long)(start + count),
                   (long long)d->info.n);
  if (count == 0) return CX_OK;
  hsize_t off[4] = {(hsize_t)start, 0, 0, 0};
  hsize_t cnt[4] = {(hsize_t)count, (hsize_t)d->info.h, (hsize_t)d->info.w, (hsize_t)d->info.c};
  hid_t fs = H5Dget_space(d->images);
  if (fs < 0) return cx_h5_fail(CX_ERR_IO, d->path, d->images_name, "H5Dget_space");
  hid_t ms = H5Screate_simple(4, cnt, NULL);
  cx_status s = CX_OK;
  if (ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, off, NULL, cnt, NULL) < 0)
    s = cx_h5_fail(CX_ERR_IO, d->path, d->images_name, "H5Sselect_hyperslab");
  else if (H5Dread(d->images, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, dst) < 0)
    s = cx_h5_fail(CX_ERR_IO, d->path, d->images_name, "H5Dread");
  if (ms >= 0) H5Sclose(ms);
  H5Sclose(fs);
  return s;
}

/* ---- parts ---- */

typedef struct part_list {
  char (*names)[CX_DATA_PART_NAME];
  int max, count;
} part_list;

static herr_t add_part(hid_t g, const char *name, const H5L_info_t *info, void *arg) {
  (void)info;
  part_list *p = arg;
  char sub[CX_DATA_PART_NAME + 16];
  if (strlen(name) >= CX_DATA_PART_NAME || p->count >= p->max) return 0;
  snprintf(sub, sizeof sub, "%s/images", name);
  H5O_info_t oi;
  if (H5Oget_info_by_name(g, name, &oi, H5P_DEFAULT) < 0 || oi.type != H5O_TYPE_GROUP) return 0;
  if (H5Lexists(g, sub, H5P_DEFAULT) > 0)
    snprintf(p->names[p->count++], CX_DATA_PART_NAME, "%s", name);
  return 0;
}

cx_status cx_dataset_parts(const char *path, char names[][CX_DATA_PART_NAME], int max, int *count) {
  cx_h5_quiet();
  *count = 0;
  hid_t f = -1;
  CX_TRY(open_h5(path, &f));
  part_list p = {names, max, 0};
  if (H5Lexists(f, "images", H5P_DEFAULT) > 0 && p.count < max) names[p.count++][0] = '\0';
  cx_status s = CX_OK;
  if (H5Literate(f, H5_INDEX_NAME, H5_ITER_INC, NULL, add_part, &p) < 0)
    s = cx_h5_fail(CX_ERR_FORMAT, path, "/", "H5Literate");
  H5Eclear2(H5E_DEFAULT);
  H5Fclose(f);
  *count = p.count;
  return s;
}
