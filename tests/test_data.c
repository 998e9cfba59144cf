/* Data set files: the writer and reader, every importer, the validation split, the `compress data`
 * command, and bad input (each must fail with a message naming the file and the dataset or image,
 * and leave no output and no temporary file behind). Fashion-MNIST (Debian's
 * dataset-fashion-mnist) is imported and read back with h5py, which must see the same pixels and
 * labels as the IDX files; h5py is required (scripts/install-deps.sh installs python3-h5py). */
#include <dirent.h>
#include <hdf5.h>
#include <jpeglib.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "../core/npy.h"
#include "../data/data.h"
#include "check.h"

static char dir[64];

#define FMNIST "/usr/share/datasets/fashion-mnist"

static const char *path_of(const char *name) {
  static char buf[8][512];
  static int k;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

static bool exists(const char *p) { return access(p, F_OK) == 0; }

/* No "*.tmp.*" file anywhere in the test folder. */
static bool no_temporaries(void) {
  DIR *d = opendir(dir);
  bool clean = true;
  for (struct dirent *e; d && (e = readdir(d));)
    if (strstr(e->d_name, ".tmp.")) clean = false;
  if (d) closedir(d);
  return clean;
}

/* A call that must fail: non-OK, a message that names `file` and `what`, no output file. */
static void expect_fail(cx_status s, const char *file, const char *what, const char *out,
                        const char *label) {
  const char *m = cx_last_error();
  CHECK(s != CX_OK, "%s: succeeded but should have failed", label);
  if (s == CX_OK) return;
  CHECK(strstr(m, file) != NULL, "%s: message does not name the file %s: %s", label, file, m);
  CHECK(!what || strstr(m, what) != NULL, "%s: message does not name '%s': %s", label, what, m);
  CHECK(!out || !exists(out), "%s: output %s was written", label, out);
  CHECK(no_temporaries(), "%s: a temporary file was left behind", label);
  printf("  ok (%s): %s\n", label, m);
}

/* ---- writer and reader ---- */

static void test_roundtrip(void) {
  enum { N = 700, H = 5, W = 3, C = 2 };
  const char *out = path_of("rt.h5");
  static const char *const names[] = {"zero", "one", "two"};
  cx_dataset_meta m = {.h = H, .w = W, .c = C, .num_classes = 3, .class_names = names,
                       .source = "unit test", .tool = "test"};
  cx_dataset_writer *w;
  CHECK(cx_dataset_writer_create(out, &m, &w) == CX_OK, "create: %s", cx_last_error());
  uint8_t img[H * W * C];
  for (int64_t i = 0; i < N; i++) {
    int64_t label = i % 3;
    for (int k = 0; k < H * W * C; k++) img[k] = (uint8_t)(i * 7 + k);
    cx_status s = cx_dataset_writer_append(w, i % 5 == 0 ? "val" : "", img, &label, 1);
    CHECK(s == CX_OK, "append: %s", cx_last_error());
  }
  CHECK(!exists(out), "the file exists before finish");
  CHECK(cx_dataset_writer_finish(w) == CX_OK, "finish: %s", cx_last_error());
  CHECK(exists(out) && no_temporaries(), "finish did not rename into place");
  char parts[CX_DATA_MAX_PARTS][CX_DATA_PART_NAME];
  int np = 0;
  CHECK(cx_dataset_parts(out, parts, CX_DATA_MAX_PARTS, &np) == CX_OK && np == 2 &&
        !parts[0][0] && !strcmp(parts[1], "val"), "parts: %d", np);
  const char *pn[2] = {"", "val"};
  for (int p = 0; p < 2; p++) {
    cx_dataset *d;
    CHECK(cx_dataset_open(out, pn[p], &d) == CX_OK, "open %s: %s", pn[p], cx_last_error());
    if (!d) continue;
    const cx_dataset_info *in = cx_dataset_get_info(d);
    CHECK(in->n == (p ? N / 5 : N - N / 5) && in->h == H && in->w == W && in->c == C &&
          in->num_classes == 3, "info of part '%s'", pn[p]);
    CHECK(!strcmp(cx_dataset_class_name(d, 2), "two") && !strcmp(cx_dataset_attr(d, "source"),
          "unit test") && cx_dataset_attr(d, "created"), "names and attributes");
    uint8_t *all = malloc((size_t)(in->n * H * W * C));
    CHECK(cx_dataset_read(d, 0, in->n, all) == CX_OK, "read: %s", cx_last_error());
    for (int64_t j = 0, i = 0; i < N; i++) {
      if ((i % 5 == 0) != (p == 1)) continue;
      CHECK(cx_dataset_labels(d)[j] == i % 3, "label of sample %lld", (long long)i);
      bool same = true;
      for (int k = 0; k < H * W * C; k++)
        same = same && all[j * H * W * C + k] == (uint8_t)(i * 7 + k);
      CHECK(same, "pixels of sample %lld in part '%s'", (long long)i, pn[p]);
      j++;
    }
    free(all);
    cx_dataset_close(d);
  }
}

/* ---- Fashion-MNIST and h5py ---- */

static int run_python(const char *script, const char *arg) {
  /* the tests' venv holds numpy below 2, which Debian's h5py is built for */
  char cmd[8192];
  snprintf(cmd, sizeof cmd, CX_PYTHON " -c \"%s\" '%s' '%s'", script, dir, arg);
  return system(cmd);
}

static void test_fashion_mnist(void) {
  static const char *const names[] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                      "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
  cx_import_opts o = {.class_names = names, .num_class_names = 10, .tool = "test"};
  const char *sets[2] = {"train", "t10k"};
  for (int k = 0; k < 2; k++) {
    char img[256], lab[256], out[64];
    snprintf(img, sizeof img, FMNIST "/%s-images-idx3-ubyte.gz", sets[k]);
    snprintf(lab, sizeof lab, FMNIST "/%s-labels-idx1-ubyte.gz", sets[k]);
    snprintf(out, sizeof out, "fm_%s.h5", sets[k]);
    cx_status s = cx_import_idx(img, lab, path_of(out), &o);
    CHECK(s == CX_OK, "import %s: %s (is dataset-fashion-mnist installed?)", img, cx_last_error());
  }
  static const char script[] =
      "import sys, gzip\n"
      "try:\n"
      "    import numpy as np, h5py\n"
      "except Exception as e:\n"
      "    sys.exit('h5py is required (scripts/install-deps.sh installs python3-h5py): %s' % e)\n"
      "for s, n in (('train', 60000), ('t10k', 10000)):\n"
      "    raw = gzip.open(sys.argv[2] + '/' + s + '-images-idx3-ubyte.gz').read()\n"
      "    img = np.frombuffer(raw, np.uint8, offset=16).reshape(n, 28, 28, 1)\n"
      "    lab = np.frombuffer(gzip.open(sys.argv[2] + '/' + s + '-labels-idx1-ubyte.gz').read(),"
      " np.uint8, offset=8).astype(np.int64)\n"
      "    with h5py.File(sys.argv[1] + '/fm_' + s + '.h5', 'r') as f:\n"
      "        assert f['images'].dtype == np.uint8 and f['labels'].dtype == np.int64\n"
      "        assert np.array_equal(f['images'][()], img), s + ': pixels differ'\n"
      "        assert np.array_equal(f['labels'][()], lab), s + ': labels differ'\n"
      "        names = [x.decode() for x in f['class_names'][()]]\n"
      "        assert names[9] == 'Ankle boot' and f.attrs['num_classes'] == 10, names\n"
      "        assert f.attrs['format'] == 'compress.dataset'\n"
      "    print('h5py read back', s, 'identical')\n";
  int rc = run_python(script, FMNIST);
  CHECK(rc == 0, "h5py did not read back the Fashion-MNIST pixels and labels (exit %d)", rc);
}

/* The split: deterministic in the seed, and main + val is the original set in its order. */
static void test_split(void) {
  cx_import_opts o = {.val_fraction = 0.25, .seed = 5};
  const char *img = FMNIST "/t10k-images-idx3-ubyte.gz", *lab = FMNIST "/t10k-labels-idx1-ubyte.gz";
  CHECK(cx_import_idx(img, lab, path_of("split_a.h5"), &o) == CX_OK, "%s", cx_last_error());
  CHECK(cx_import_idx(img, lab, path_of("split_b.h5"), &o) == CX_OK, "%s", cx_last_error());
  o.seed = 6;
  CHECK(cx_import_idx(img, lab, path_of("split_c.h5"), &o) == CX_OK, "%s", cx_last_error());
  cx_dataset *all, *tr[3], *va[3];
  CHECK(cx_dataset_open(path_of("fm_t10k.h5"), "", &all) == CX_OK, "%s", cx_last_error());
  const char *f[3] = {"split_a.h5", "split_b.h5", "split_c.h5"};
  for (int i = 0; i < 3; i++) {
    CHECK(cx_dataset_open(path_of(f[i]), "", &tr[i]) == CX_OK, "%s", cx_last_error());
    CHECK(cx_dataset_open(path_of(f[i]), "val", &va[i]) == CX_OK, "%s", cx_last_error());
  }
  if (!all || !tr[0] || !va[0] || !tr[1] || !tr[2]) return;
  int64_t n = cx_dataset_get_info(all)->n, nv = cx_dataset_get_info(va[0])->n;
  CHECK(nv == 2500 && cx_dataset_get_info(tr[0])->n == 7500, "split sizes %lld", (long long)nv);
  const int64_t *la = cx_dataset_labels(tr[0]), *lb = cx_dataset_labels(tr[1]),
                *lc = cx_dataset_labels(tr[2]);
  CHECK(!memcmp(la, lb, 7500 * sizeof *la), "the same seed gave a different split");
  CHECK(memcmp(la, lc, 7500 * sizeof *la) != 0, "another seed gave the same split");
  uint8_t *x = malloc((size_t)n * 784), *t = malloc(7500 * 784), *v = malloc(2500 * 784);
  cx_dataset_read(all, 0, n, x);
  cx_dataset_read(tr[0], 0, 7500, t);
  cx_dataset_read(va[0], 0, 2500, v);
  int64_t it = 0, iv = 0;
  const int64_t *l0 = cx_dataset_labels(all), *lv = cx_dataset_labels(va[0]);
  for (int64_t i = 0; i < n; i++) { /* each original is the next of one part or the other */
    if (it < 7500 && la[it] == l0[i] && !memcmp(t + it * 784, x + i * 784, 784)) it++;
    else if (iv < 2500 && lv[iv] == l0[i] && !memcmp(v + iv * 784, x + i * 784, 784)) iv++;
  }
  CHECK(it == 7500 && iv == 2500, "main + val is not the original set in order (%lld, %lld)",
        (long long)it, (long long)iv);
  free(x), free(t), free(v);
  cx_dataset_close(all);
  for (int i = 0; i < 3; i++) cx_dataset_close(tr[i]), cx_dataset_close(va[i]);
}

/* ---- other importers ---- */

static void test_npy(void) {
  enum { N = 37, H = 6, W = 4, C = 3 };
  uint8_t img[N * H * W * C];
  int32_t lab[N];
  for (int i = 0; i < N * H * W * C; i++) img[i] = (uint8_t)(i * 13);
  for (int i = 0; i < N; i++) lab[i] = i % 4;
  cx_shape is = {4, {N, H, W, C}}, ls = {1, {N}};
  cx_npy_write(path_of("x.npy"), CX_U8, &is, img);
  cx_npy_write(path_of("y.npy"), CX_S32, &ls, lab);
  cx_import_opts o = {0};
  CHECK(cx_import_npy(path_of("x.npy"), path_of("y.npy"), path_of("npy.h5"), &o) == CX_OK,
        "npy import: %s", cx_last_error());
  cx_dataset *d;
  if (cx_dataset_open(path_of("npy.h5"), "", &d) != CX_OK) {
    CHECK(0, "open: %s", cx_last_error());
    return;
  }
  uint8_t back[N * H * W * C];
  cx_dataset_read(d, 0, N, back);
  CHECK(!memcmp(back, img, sizeof img), "npy pixels differ");
  CHECK(cx_dataset_get_info(d)->num_classes == 4 && cx_dataset_labels(d)[5] == 1, "npy labels");
  cx_dataset_close(d);
}

static void write_cifar(const char *name, int n, int first) {
  FILE *f = fopen(path_of(name), "wb");
  for (int i = 0; i < n; i++) {
    fputc((first + i) % 10, f);
    for (int p = 0; p < 3072; p++) fputc((first + i + p) & 255, f);
  }
  fclose(f);
}

static void test_cifar(void) {
  write_cifar("data_batch_1.bin", 5, 0);
  write_cifar("data_batch_2.bin", 3, 5);
  FILE *f = fopen(path_of("batches.meta.txt"), "w");
  fputs("airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n", f);
  fclose(f);
  const char *files[2] = {path_of("data_batch_1.bin"), path_of("data_batch_2.bin")};
  cx_import_opts o = {0};
  CHECK(cx_import_cifar(10, files, 2, path_of("cifar.h5"), &o) == CX_OK, "cifar import: %s",
        cx_last_error());
  cx_dataset *d;
  if (cx_dataset_open(path_of("cifar.h5"), "", &d) != CX_OK) {
    CHECK(0, "open: %s", cx_last_error());
    return;
  }
  uint8_t img[8 * 3072];
  cx_dataset_read(d, 0, 8, img);
  bool ok = true;
  for (int i = 0; i < 8; i++)
    for (int p = 0; p < 1024; p++)
      for (int c = 0; c < 3; c++)
        ok = ok && img[i * 3072 + p * 3 + c] == ((i + c * 1024 + p) & 255);
  CHECK(ok, "CIFAR planes were not turned into HWC pixels");
  CHECK(cx_dataset_labels(d)[7] == 7 && !strcmp(cx_dataset_class_name(d, 9), "truck"),
        "CIFAR labels or names");
  cx_dataset_close(d);
}

/* ---- image folders ---- */

static void write_png(const char *path, int h, int w, int seed) {
  png_image img;
  memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = (png_uint_32)w, img.height = (png_uint_32)h, img.format = PNG_FORMAT_RGB;
  uint8_t *px = malloc((size_t)(h * w * 3));
  for (int i = 0; i < h * w * 3; i++) px[i] = (uint8_t)(i * 3 + seed);
  png_image_write_to_file(&img, path, 0, px, 0, NULL);
  free(px);
}

static void write_jpeg(const char *path, int h, int w) {
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr e;
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  FILE *f = fopen(path, "wb");
  jpeg_stdio_dest(&c, f);
  c.image_width = (JDIMENSION)w, c.image_height = (JDIMENSION)h, c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 95, TRUE);
  jpeg_start_compress(&c, TRUE);
  uint8_t *row = malloc((size_t)w * 3);
  for (int y = 0; y < h; y++) {
    for (int x = 0; x < w * 3; x++) row[x] = (uint8_t)(100 + y);
    JSAMPROW r = row;
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  fclose(f);
  free(row);
}

static void make_folder(const char *root) {
  char p[600];
  snprintf(p, sizeof p, "%s", path_of(root));
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/cat", path_of(root)), mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/dog", path_of(root)), mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/cat/a.png", path_of(root)), write_png(p, 12, 10, 0);
  snprintf(p, sizeof p, "%s/cat/b.PNG", path_of(root)), write_png(p, 12, 10, 1);
  snprintf(p, sizeof p, "%s/cat/notes.txt", path_of(root)), fclose(fopen(p, "w"));
  snprintf(p, sizeof p, "%s/dog/c.jpg", path_of(root)), write_jpeg(p, 24, 20);
}

static void test_folder(void) {
  make_folder("folder");
  cx_import_opts o = {.out_h = 12, .out_w = 10, .threads = 3};
  CHECK(cx_import_folder(path_of("folder"), path_of("folder.h5"), &o) == CX_OK, "folder import: %s",
        cx_last_error());
  cx_dataset *d;
  if (cx_dataset_open(path_of("folder.h5"), "", &d) != CX_OK) {
    CHECK(0, "open: %s", cx_last_error());
    return;
  }
  const cx_dataset_info *in = cx_dataset_get_info(d);
  CHECK(in->n == 3 && in->h == 12 && in->w == 10 && in->c == 3, "folder: %lld images",
        (long long)in->n);
  CHECK(!strcmp(cx_dataset_class_name(d, 1), "dog") && cx_dataset_labels(d)[2] == 1, "classes");
  uint8_t img[3 * 12 * 10 * 3];
  cx_dataset_read(d, 0, 3, img);
  bool png_exact = true, jpeg_close = true;
  for (int i = 0; i < 360; i++) png_exact = png_exact && img[i] == (uint8_t)(i * 3);
  for (int y = 0; y < 12; y++) /* rows 2y and 2y+1 of 100+row, averaged */
    jpeg_close = jpeg_close && abs(img[720 + y * 30] - (100 + 2 * y)) <= 3;
  CHECK(png_exact, "PNG pixels changed although the size did not");
  CHECK(jpeg_close, "JPEG downscaled by 2 is not the average of row pairs");
  cx_dataset_close(d);
  o.out_h = o.out_w = 0; /* no size: the 24x20 JPEG does not match the 12x10 PNGs */
  expect_fail(cx_import_folder(path_of("folder"), path_of("nosize.h5"), &o), "c.jpg", "12",
              path_of("nosize.h5"), "folder of mixed sizes");
}

/* ---- bad input ---- */

typedef struct h5_spec {
  hid_t itype, ltype;
  int irank;
  hsize_t idims[4], nlabels;
  int64_t label0, num_classes; /* num_classes <= 0: no attribute */
  bool no_labels;
  bool unwritten; /* images declared but never written */
} h5_spec;

static void write_h5(const char *path, const h5_spec *s) {
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t sp = H5Screate_simple(s->irank, s->idims, NULL);
  hid_t d = H5Dcreate2(f, "images", s->itype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  /* written, so that every byte it declares is in the file (an unwritten one is refused) */
  void *px = calloc(H5Sget_simple_extent_npoints(sp), 8);
  if (!s->unwritten) H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, px);
  free(px);
  H5Dclose(d), H5Sclose(sp);
  if (!s->no_labels) {
    int64_t *l = calloc(s->nlabels, sizeof *l);
    for (hsize_t i = 0; i < s->nlabels; i++) l[i] = (int64_t)(i % 3);
    l[0] = s->label0;
    sp = H5Screate_simple(1, &s->nlabels, NULL);
    d = H5Dcreate2(f, "labels", s->ltype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, l);
    H5Dclose(d), H5Sclose(sp), free(l);
  }
  if (s->num_classes > 0) {
    sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "num_classes", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &s->num_classes);
    H5Aclose(a), H5Sclose(sp);
  }
  H5Fclose(f);
}

static void bad_h5(const char *name, h5_spec s, const char *what, const char *label) {
  const char *p = path_of(name);
  write_h5(p, &s);
  cx_dataset *d = NULL;
  expect_fail(cx_dataset_open(p, "", &d), p, what, NULL, label);
  CHECK(d == NULL, "%s: a data set was returned", label);
  /* the loader and `info` go through the same checks */
  cx_loader_opts o = cx_loader_defaults();
  cx_loader *l = NULL;
  expect_fail(cx_loader_open(p, &o, &l), p, what, NULL, label);
}

static void test_bad_h5(void) {
  h5_spec good = {.itype = H5T_STD_U8LE, .ltype = H5T_STD_I64LE, .irank = 4,
                  .idims = {6, 4, 4, 1}, .nlabels = 6, .label0 = 0, .num_classes = 3};
  h5_spec s = good;
  s.nlabels = 5;
  bad_h5("len.h5", s, "/labels", "images and labels of different lengths");
  s = good, s.label0 = 3;
  bad_h5("range.h5", s, "label 3 at index 0", "label out of range");
  s = good, s.label0 = -1;
  bad_h5("neg.h5", s, "/labels", "negative label");
  s = good, s.itype = H5T_IEEE_F32LE;
  bad_h5("dtype.h5", s, "/images", "images of the wrong dtype");
  s = good, s.ltype = H5T_IEEE_F64LE;
  bad_h5("ldtype.h5", s, "/labels", "labels of the wrong dtype");
  s = good, s.irank = 3;
  bad_h5("rank.h5", s, "/images", "images of the wrong rank");
  s = good, s.no_labels = true;
  bad_h5("nolabels.h5", s, "/labels", "no labels");
  cx_dataset *d = NULL;
  expect_fail(cx_dataset_open(path_of("fm_t10k.h5"), "val", &d), "fm_t10k.h5", "/val/images",
              NULL, "a part that is not there");
}

static void copy_prefix(const char *from, const char *to, long bytes, long garbage_at) {
  FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
  for (long i = 0; i < bytes; i++) {
    int c = fgetc(a);
    if (c == EOF) break;
    bool garbage = garbage_at >= 0 && i >= garbage_at && i < garbage_at + 2048;
    fputc(garbage ? (int)(i * 7919 & 255) : c, b);
  }
  fclose(a), fclose(b);
}

static void test_corrupt_h5(void) {
  const char *good = path_of("rt.h5");
  struct stat st;
  stat(good, &st);
  cx_dataset *d = NULL;
  copy_prefix(good, path_of("trunc.h5"), (long)st.st_size / 2, -1);
  expect_fail(cx_dataset_open(path_of("trunc.h5"), "", &d), path_of("trunc.h5"), NULL, NULL,
              "truncated HDF5 file");
  copy_prefix(good, path_of("garbage.h5"), (long)st.st_size, 0);
  expect_fail(cx_dataset_open(path_of("garbage.h5"), "", &d), path_of("garbage.h5"), NULL, NULL,
              "HDF5 file with its start overwritten");
  FILE *f = fopen(path_of("text.h5"), "w");
  fputs("this is not HDF5\n", f);
  fclose(f);
  expect_fail(cx_dataset_open(path_of("text.h5"), "", &d), path_of("text.h5"), NULL, NULL,
              "not an HDF5 file");
  expect_fail(cx_dataset_open(path_of("missing.h5"), "", &d), path_of("missing.h5"), NULL, NULL,
              "missing file");
}

static void write_gz(const char *name, const uint8_t *b, size_t n) {
  gzFile f = gzopen(path_of(name), "wb");
  gzwrite(f, b, (unsigned)n);
  gzclose(f);
}

static void test_bad_importers(void) {
  char out[512];
  snprintf(out, sizeof out, "%s", path_of("bad_out.h5"));
  cx_import_opts o = {0};
  uint8_t lab[12] = {0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 0, 0};
  uint8_t img[16 + 3 * 4] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2};
  write_gz("lab.gz", lab, 11);
  write_gz("img.gz", img, sizeof img);
  CHECK(cx_import_idx(path_of("img.gz"), path_of("lab.gz"), out, &o) == CX_OK, "tiny IDX: %s",
        cx_last_error());
  remove(out);
  write_gz("img_short.gz", img, sizeof img - 1);
  expect_fail(cx_import_idx(path_of("img_short.gz"), path_of("lab.gz"), out, &o),
              "img_short.gz", "truncated", out, "truncated IDX");
  lab[7] = 2;
  write_gz("lab2.gz", lab, 10);
  expect_fail(cx_import_idx(path_of("img.gz"), path_of("lab2.gz"), out, &o), "lab2.gz", "labels",
              out, "IDX images and labels of different lengths");
  lab[7] = 3, lab[10] = 200;
  static const char *const two[] = {"a", "b"};
  cx_import_opts named = {.class_names = two, .num_class_names = 2};
  write_gz("lab3.gz", lab, 11);
  expect_fail(cx_import_idx(path_of("img.gz"), path_of("lab3.gz"), out, &named), "lab3.gz",
              "label 2", out, "IDX label out of range of the class names");
  write_gz("notidx.gz", (const uint8_t *)"hello world", 11);
  expect_fail(cx_import_idx(path_of("notidx.gz"), path_of("lab.gz"), out, &o), "notidx.gz",
              "not an IDX", out, "not an IDX file");
  float fx[2 * 2 * 2] = {0};
  int64_t l3[3] = {0, 1, 2};
  cx_shape fs = {3, {2, 2, 2}}, ls = {1, {3}}, us = {3, {2, 2, 2}};
  cx_npy_write(path_of("f.npy"), CX_F32, &fs, fx);
  cx_npy_write(path_of("u.npy"), CX_U8, &us, fx);
  cx_npy_write(path_of("l3.npy"), CX_S64, &ls, l3);
  expect_fail(cx_import_npy(path_of("f.npy"), path_of("l3.npy"), out, &o), "f.npy", "uint8", out,
              "npy images of the wrong dtype");
  expect_fail(cx_import_npy(path_of("u.npy"), path_of("l3.npy"), out, &o), "u.npy", "l3.npy", out,
              "npy images and labels of different lengths");
  FILE *f = fopen(path_of("short.bin"), "wb");
  for (int i = 0; i < 100; i++) fputc(i, f);
  fclose(f);
  const char *cf[1] = {path_of("short.bin")};
  expect_fail(cx_import_cifar(10, cf, 1, out, &o), "short.bin", "3073", out,
              "CIFAR file of the wrong size");
  f = fopen(path_of("badlabel.bin"), "wb");
  for (int i = 0; i < 3073; i++) fputc(i ? 0 : 10, f);
  fclose(f);
  cf[0] = path_of("badlabel.bin");
  expect_fail(cx_import_cifar(10, cf, 1, out, &o), "badlabel.bin", "label 10", out,
              "CIFAR label out of range");
}

static void test_bad_images(void) {
  cx_import_opts o = {.out_h = 8, .out_w = 8};
  char out[512];
  snprintf(out, sizeof out, "%s", path_of("bad_folder.h5"));
  char p[600];
  make_folder("bad1");
  snprintf(p, sizeof p, "%s/dog/broken.png", path_of("bad1"));
  FILE *f = fopen(p, "wb");
  fputs("\x89PNG\r\n\x1a\n this is no PNG", f);
  fclose(f);
  expect_fail(cx_import_folder(path_of("bad1"), out, &o), "broken.png", NULL, out,
              "unreadable PNG in a folder");
  make_folder("bad2");
  snprintf(p, sizeof p, "%s/dog/c.jpg", path_of("bad2"));
  struct stat st;
  stat(p, &st);
  CHECK(truncate(p, st.st_size / 2) == 0, "truncate %s", p);
  expect_fail(cx_import_folder(path_of("bad2"), out, &o), "c.jpg", "JPEG", out,
              "truncated JPEG in a folder");
  make_folder("bad3");
  snprintf(p, sizeof p, "%s/cat/z.jpg", path_of("bad3"));
  f = fopen(p, "wb");
  fputs("not an image", f);
  fclose(f);
  expect_fail(cx_import_folder(path_of("bad3"), out, &o), "z.jpg", NULL, out,
              "a text file named .jpg in a folder");
}

/* ---- the command ---- */

static int run_cli(const char *args, const char *stderr_file) {
  char exe[512], cmd[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return -1;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  *slash = '\0';
  snprintf(cmd, sizeof cmd, "%s/../compress %s >/dev/null 2>%s", exe, args, stderr_file);
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static bool file_contains(const char *path, const char *s) {
  char buf[4096] = {0};
  FILE *f = fopen(path, "r");
  if (!f) return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return strstr(buf, s) != NULL;
}

static void test_cli(void) {
  char args[2048], err[512];
  snprintf(err, sizeof err, "%s", path_of("stderr.txt"));
  snprintf(args, sizeof args, "data import npy %s %s -o %s --val-fraction 0.2", path_of("x.npy"),
           path_of("y.npy"), path_of("cli.h5"));
  CHECK(run_cli(args, err) == 0, "compress data import npy failed");
  snprintf(args, sizeof args, "data info --json %s", path_of("cli.h5"));
  CHECK(run_cli(args, err) == 0, "compress data info failed");
  snprintf(args, sizeof args, "data augment %s -o %s --copies 2 --crop pad --pad 2 --flip",
           path_of("cli.h5"), path_of("aug.h5"));
  CHECK(run_cli(args, err) == 0, "compress data augment failed");
  snprintf(args, sizeof args, "data info %s", path_of("len.h5"));
  CHECK(run_cli(args, err) == 1 && file_contains(err, "len.h5") && file_contains(err, "/labels"),
        "compress data info on a bad file: wrong exit or message");
  snprintf(args, sizeof args, "data import folder %s -o %s --size 8x8", path_of("bad1"),
           path_of("cli_bad.h5"));
  CHECK(run_cli(args, err) == 1 && file_contains(err, "broken.png") &&
            !exists(path_of("cli_bad.h5")),
        "compress data import of a bad folder: wrong exit, message or output");
  CHECK(run_cli("data import idx a b", err) == 2, "a missing -o is not a usage error");
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/cx_test_data_XXXXXX");
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  test_roundtrip();
  test_fashion_mnist();
  test_split();
  test_npy();
  test_cifar();
  test_folder();
  test_bad_h5();
  test_corrupt_h5();
  test_bad_importers();
  test_bad_images();
  test_cli();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("could not remove %s\n", dir);
  printf("%s: %d failure(s)\n", fails ? "FAILED" : "passed", fails);
  return fails != 0;
}
