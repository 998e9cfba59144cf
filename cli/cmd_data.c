/* compress data import | info | augment: data set files (docs/data.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../data/data.h"
#include "commands.h"

#define TOOL ("compress " CX_VERSION)
enum { MAX_ARGS = 4096, MAX_NAMES = 1024 };

/* ---- option parsing ---- */

static bool parse_size(const char *s, int64_t *h, int64_t *w) {
  long long a, b;
  char x, end;
  if (sscanf(s, "%lld%c%lld%c", &a, &x, &b, &end) != 3 || (x != 'x' && x != 'X') || a < 1 ||
      b < 1)
    return false;
  *h = a, *w = b;
  return true;
}

static bool parse_double(const char *s, double *v) {
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  return *s && !*end && !errno;
}

static bool parse_u64(const char *s, uint64_t *v) {
  char *end;
  errno = 0;
  *v = strtoull(s, &end, 10);
  return *s && *s != '-' && !*end && !errno;
}

static bool parse_int(const char *s, int *v) {
  uint64_t u;
  if (!parse_u64(s, &u) || u > 1u << 30) return false;
  *v = (int)u;
  return true;
}

/* Splits "a,b,c" in place. */
static int split_names(char *s, const char **names) {
  int n = 0;
  for (char *tok = strtok(s, ","); tok && n < MAX_NAMES; tok = strtok(NULL, ",")) names[n++] = tok;
  return n;
}

static int fail(const char *what) {
  fprintf(stderr, "compress data %s: %s\n", what, cx_last_error());
  return 1;
}

/* ---- import ---- */

typedef struct import_args {
  const char *format, *out;
  const char *src[MAX_ARGS];
  int nsrc;
  char *names_arg;
  const char *names[MAX_NAMES];
  cx_import_opts o;
} import_args;

/* Returns 0 when parsed, else the exit code of a usage error. */
static int parse_import(int argc, char **argv, import_args *a) {
  for (int i = 0; i < argc; i++) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    bool takes = !strcmp(k, "-o") || !strcmp(k, "--output") || !strcmp(k, "--val-fraction") ||
                 !strcmp(k, "--seed") || !strcmp(k, "--size") || !strcmp(k, "--channels") ||
                 !strcmp(k, "--threads") || !strcmp(k, "--class-names");
    if (k[0] != '-') {
      if (!a->format) a->format = k;
      else if (a->nsrc < MAX_ARGS) a->src[a->nsrc++] = k;
      continue;
    }
    if (!takes) return cx_cli_usage_error(&cx_cmd_data, "unknown option '%s'", k);
    if (!v) return cx_cli_usage_error(&cx_cmd_data, "option '%s' needs a value", k);
    i++;
    bool ok = true;
    if (!strcmp(k, "-o") || !strcmp(k, "--output")) a->out = v;
    else if (!strcmp(k, "--val-fraction"))
      ok = parse_double(v, &a->o.val_fraction) && a->o.val_fraction >= 0 && a->o.val_fraction < 1;
    else if (!strcmp(k, "--seed")) ok = parse_u64(v, &a->o.seed);
    else if (!strcmp(k, "--size")) ok = parse_size(v, &a->o.out_h, &a->o.out_w);
    else if (!strcmp(k, "--channels"))
      ok = parse_int(v, &a->o.channels) && (a->o.channels == 1 || a->o.channels == 3);
    else if (!strcmp(k, "--threads")) ok = parse_int(v, &a->o.threads) && a->o.threads > 0;
    else {
      a->names_arg = strdup(v);
      a->o.num_class_names = a->names_arg ? split_names(a->names_arg, a->names) : 0;
      a->o.class_names = a->names;
    }
    if (!ok) return cx_cli_usage_error(&cx_cmd_data, "bad value for option '%s'", k);
  }
  if (!a->format) return cx_cli_usage_error(&cx_cmd_data, "%s", "import needs a FORMAT");
  if (!a->out) return cx_cli_usage_error(&cx_cmd_data, "%s", "import needs -o OUT.h5");
  return 0;
}

static int need_sources(const import_args *a, int lo, int hi) {
  if (a->nsrc >= lo && a->nsrc <= hi) return 0;
  return cx_cli_usage_error(&cx_cmd_data, "wrong number of source files for format '%s'",
                            a->format);
}

static int run_import(int argc, char **argv) {
  import_args *a = calloc(1, sizeof *a);
  if (!a) return fprintf(stderr, "compress data import: out of memory\n"), 1;
  a->o.tool = TOOL;
  int rc = parse_import(argc, argv, a);
  const char *f = a->format;
  cx_status s = CX_OK;
  if (rc) {
  } else if (!strcmp(f, "idx")) {
    if (!(rc = need_sources(a, 2, 2))) s = cx_import_idx(a->src[0], a->src[1], a->out, &a->o);
  } else if (!strcmp(f, "npy")) {
    if (!(rc = need_sources(a, 2, 2))) s = cx_import_npy(a->src[0], a->src[1], a->out, &a->o);
  } else if (!strcmp(f, "cifar10") || !strcmp(f, "cifar100")) {
    if (!(rc = need_sources(a, 1, MAX_ARGS)))
      s = cx_import_cifar(f[5] == '1' ? 100 : 10, a->src, a->nsrc, a->out, &a->o);
  } else if (!strcmp(f, "folder")) {
    if (!(rc = need_sources(a, 1, 1))) s = cx_import_folder(a->src[0], a->out, &a->o);
  } else {
    rc = cx_cli_usage_error(&cx_cmd_data, "unknown import format '%s'", f);
  }
  if (!rc && s != CX_OK) rc = fail("import");
  if (!rc) printf("wrote %s\n", a->out);
  free(a->names_arg);
  free(a);
  return rc;
}

/* ---- info ---- */

static void print_part_text(const cx_dataset *d, const char *name) {
  const cx_dataset_info *in = cx_dataset_get_info(d);
  printf("part %s: %lld images of %lldx%lldx%lld (H x W x C) uint8, labels %s, %lld classes\n",
         *name ? name : "(main)", (long long)in->n, (long long)in->h, (long long)in->w,
         (long long)in->c, in->label_dtype, (long long)in->num_classes);
  int64_t *count = calloc((size_t)in->num_classes, sizeof *count);
  if (!count) return;
  for (int64_t i = 0; i < in->n; i++) count[cx_dataset_labels(d)[i]]++;
  printf("  %6s %9s  %s\n", "label", "count", "name");
  for (int64_t k = 0; k < in->num_classes; k++) {
    const char *cn = cx_dataset_class_name(d, k);
    printf("  %6lld %9lld  %s\n", (long long)k, (long long)count[k], cn ? cn : "");
  }
  free(count);
}

static void print_part_json(const cx_dataset *d, const char *name) {
  const cx_dataset_info *in = cx_dataset_get_info(d);
  printf("{\"name\":");
  cx_json_string(stdout, name);
  printf(",\"count\":%lld,\"shape\":[%lld,%lld,%lld,%lld],\"dtype\":\"uint8\","
         "\"label_dtype\":\"%s\",\"num_classes\":%lld,\"classes\":[",
         (long long)in->n, (long long)in->n, (long long)in->h, (long long)in->w,
         (long long)in->c, in->label_dtype, (long long)in->num_classes);
  int64_t *count = calloc((size_t)in->num_classes, sizeof *count);
  for (int64_t i = 0; count && i < in->n; i++) count[cx_dataset_labels(d)[i]]++;
  for (int64_t k = 0; count && k < in->num_classes; k++) {
    const char *cn = cx_dataset_class_name(d, k);
    printf("%s{\"label\":%lld,\"count\":%lld,\"name\":", k ? "," : "", (long long)k,
           (long long)count[k]);
    if (cn) cx_json_string(stdout, cn);
    else printf("null");
    printf("}");
  }
  free(count);
  printf("]}");
}

static void print_attrs(const cx_dataset *d, const char *path, bool json) {
  static const char *const keys[] = {"source", "created", "tool"};
  if (json) {
    printf("{\"file\":");
    cx_json_string(stdout, path);
  } else {
    printf("%s\n", path);
  }
  for (int i = 0; i < 3; i++) {
    const char *v = cx_dataset_attr(d, keys[i]);
    if (json) {
      printf(",\"%s\":", keys[i]);
      if (v) cx_json_string(stdout, v);
      else printf("null");
    } else if (v) {
      printf("  %-8s %s\n", keys[i], v);
    }
  }
}

static int run_info(int argc, char **argv) {
  const char *path = NULL;
  bool json = false;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = true;
    else if (argv[i][0] == '-')
      return cx_cli_usage_error(&cx_cmd_data, "unknown option '%s'", argv[i]);
    else if (!path) path = argv[i];
    else return cx_cli_usage_error(&cx_cmd_data, "unexpected argument '%s'", argv[i]);
  }
  if (!path) return cx_cli_usage_error(&cx_cmd_data, "%s", "info needs FILE.h5");
  char names[CX_DATA_MAX_PARTS][CX_DATA_PART_NAME];
  int nparts = 0;
  cx_dataset *parts[CX_DATA_MAX_PARTS] = {0};
  if (cx_dataset_parts(path, names, CX_DATA_MAX_PARTS, &nparts) != CX_OK) return fail("info");
  if (!nparts || names[0][0])
    return fprintf(stderr, "compress data info: %s: no dataset '/images' (see docs/data.md)\n",
                   path), 1;
  for (int i = 0; i < nparts; i++) /* check every part before printing anything */
    if (cx_dataset_open(path, names[i], &parts[i]) != CX_OK) {
      for (int j = 0; j < i; j++) cx_dataset_close(parts[j]);
      return fail("info");
    }
  print_attrs(parts[0], path, json);
  if (json) printf(",\"parts\":[");
  for (int i = 0; i < nparts; i++) {
    if (json) printf(i ? "," : "");
    if (json) print_part_json(parts[i], names[i]);
    else print_part_text(parts[i], names[i]);
    cx_dataset_close(parts[i]);
  }
  if (json) printf("]}\n");
  return 0;
}

/* ---- augment ---- */

static bool parse_crop(const char *v, cx_crop *c) {
  static const char *const names[] = {"none", "center", "pad", "resized"};
  for (int i = 0; i < 4; i++)
    if (!strcmp(v, names[i])) return *c = (cx_crop)i, true;
  return false;
}

static bool parse_cutout(const char *v, cx_augment *a) {
  float p = 1;
  int size;
  char end;
  int n = sscanf(v, "%d:%f%c", &size, &p, &end);
  if (n < 1 || n > 2 || size < 1 || p < 0 || p > 1) return false;
  a->cutout_size = size, a->cutout_prob = p;
  return true;
}

typedef struct augment_args {
  const char *in, *out, *part;
  int copies;
  bool keep;
  uint64_t seed;
  cx_augment a;
} augment_args;

static int parse_augment_opt(augment_args *g, const char *k, const char *v) {
  bool ok = true;
  if (!strcmp(k, "-o") || !strcmp(k, "--output")) g->out = v;
  else if (!strcmp(k, "--part")) g->part = v;
  else if (!strcmp(k, "--copies")) ok = parse_int(v, &g->copies) && g->copies > 0;
  else if (!strcmp(k, "--seed")) ok = parse_u64(v, &g->seed);
  else if (!strcmp(k, "--size")) ok = parse_size(v, &g->a.out_h, &g->a.out_w);
  else if (!strcmp(k, "--crop")) ok = parse_crop(v, &g->a.crop);
  else if (!strcmp(k, "--pad")) ok = parse_int(v, &g->a.pad);
  else if (!strcmp(k, "--cutout")) ok = parse_cutout(v, &g->a);
  else return cx_cli_usage_error(&cx_cmd_data, "unknown option '%s'", k);
  return ok ? 0 : cx_cli_usage_error(&cx_cmd_data, "bad value for option '%s'", k);
}

static int run_augment(int argc, char **argv) {
  augment_args g = {.copies = 1};
  for (int i = 0; i < argc; i++) {
    const char *k = argv[i];
    if (!strcmp(k, "--flip")) g.a.flip = true;
    else if (!strcmp(k, "--keep-original")) g.keep = true;
    else if (k[0] != '-') {
      if (g.in) return cx_cli_usage_error(&cx_cmd_data, "unexpected argument '%s'", k);
      g.in = k;
    } else if (i + 1 >= argc) {
      return cx_cli_usage_error(&cx_cmd_data, "option '%s' needs a value", k);
    } else {
      int rc = parse_augment_opt(&g, k, argv[++i]);
      if (rc) return rc;
    }
  }
  if (!g.in || !g.out)
    return cx_cli_usage_error(&cx_cmd_data, "%s", "augment needs IN.h5 and -o OUT.h5");
  if (cx_data_augment_file(g.in, g.part, g.out, &g.a, g.copies, g.keep, g.seed, TOOL) != CX_OK)
    return fail("augment");
  printf("wrote %s\n", g.out);
  return 0;
}

static int run(int argc, char **argv) {
  if (argc < 1) return cx_cli_usage_error(&cx_cmd_data, "%s", "missing subcommand");
  if (!strcmp(argv[0], "import")) return run_import(argc - 1, argv + 1);
  if (!strcmp(argv[0], "info")) return run_info(argc - 1, argv + 1);
  if (!strcmp(argv[0], "augment")) return run_augment(argc - 1, argv + 1);
  return cx_cli_usage_error(&cx_cmd_data, "unknown subcommand '%s'", argv[0]);
}

const cx_command cx_cmd_data = {
    .name = "data",
    .summary = "Import data sets into HDF5, describe them, augment them offline",
    .usage =
        "usage: compress data import FORMAT SRC... -o OUT.h5 [options]\n"
        "       compress data info FILE.h5 [--json]\n"
        "       compress data augment IN.h5 -o OUT.h5 [--copies K] [options]\n\n"
        "A data set is an HDF5 file: /images uint8 [N,H,W,C], /labels int64 [N], optional\n"
        "/class_names, and optional parts such as /val/images and /val/labels (docs/data.md).\n"
        "Files are written under a temporary name and renamed when complete.\n\n"
        "import formats:\n"
        "    idx IMAGES LABELS          MNIST / Fashion-MNIST IDX files, gzipped or raw\n"
        "    cifar10 BATCH.bin...       CIFAR-10 binary batches\n"
        "    cifar100 BATCH.bin...      CIFAR-100 binary batches (fine labels)\n"
        "    npy IMAGES.npy LABELS.npy  uint8 [N,H,W] or [N,H,W,C] images, integer [N] labels\n"
        "    folder DIR                 DIR/<class>/<image>.png|.jpg|.jpeg\n\n"
        "import options:\n"
        "    -o, --output OUT.h5        the file to write\n"
        "    --val-fraction F           put this share of the samples in the part 'val'\n"
        "    --seed S                   which samples go to 'val' (default 0)\n"
        "    --size HxW                 folder: resize every image to H x W\n"
        "    --channels 1|3             folder: grey or RGB (default 3)\n"
        "    --threads N                folder: decoding threads (default: CPUs, up to 8)\n"
        "    --class-names A,B,...      names of labels 0, 1, ...\n\n"
        "info options:\n"
        "    --json                     print one JSON object\n\n"
        "augment options (copy k of each image is what the loader draws in epoch k):\n"
        "    --copies K                 augmented copies of each image (default 1)\n"
        "    --keep-original            write the originals first\n"
        "    --part NAME                read this part of IN.h5 (default: the main one)\n"
        "    --seed S                   the augmentation seed (default 0)\n"
        "    --size HxW                 output size (default: the input size)\n"
        "    --crop none|center|pad|resized\n"
        "    --pad P                    padding for --crop pad\n"
        "    --flip                     random horizontal flips\n"
        "    --cutout SIZE[:PROB]       a SIZE x SIZE black square, with probability PROB\n",
    .run = run,
};
