/* Loader throughput (images/s) against a PyTorch DataLoader with the same transforms, batch size
 * and number of workers, in one run (bench/loader_torch.py is PyTorch's side):
 *
 *   bench_loader [--workers N] [--seconds S] [--no-torch]
 *
 * Both hold the images in memory and output normalised f32 NCHW batches; the data is random bytes
 * written to a temporary HDF5 file first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../data/data.h"

typedef struct config {
  const char *name, *torch;
  int64_t stored, out, n, batch;
  cx_crop crop;
  int pad;
} config;

static const config configs[] = {
    {"32x32 crop (pad 4) + flip + normalise", "pad32", 32, 32, 20000, 256, CX_CROP_PAD, 4},
    {"224x224 crop of 256 + flip + normalise", "crop224", 256, 224, 1000, 64, CX_CROP_PAD, 0},
    {"224x224 resized crop + flip + normalise", "rrc224", 256, 224, 1000, 64, CX_CROP_RESIZED, 0},
};
enum { N_CONFIGS = sizeof configs / sizeof *configs };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static cx_status make_set(const char *path, int64_t side, int64_t n) {
  cx_dataset_meta m = {.h = side, .w = side, .c = 3, .num_classes = 10, .source = "random"};
  cx_dataset_writer *w;
  CX_TRY(cx_dataset_writer_create(path, &m, &w));
  int64_t bytes = side * side * 3;
  uint8_t *img = malloc((size_t)bytes);
  uint64_t x = 88172645463325252ull;
  cx_status s = img ? CX_OK : CX_ERR_NOMEM;
  for (int64_t i = 0; s == CX_OK && i < n; i++) {
    for (int64_t k = 0; k < bytes; k++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      img[k] = (uint8_t)x;
    }
    int64_t label = i % 10;
    s = cx_dataset_writer_append(w, "", img, &label, 1);
  }
  free(img);
  if (s != CX_OK) {
    cx_dataset_writer_abort(w);
    return s;
  }
  return cx_dataset_writer_finish(w);
}

static cx_status run_compress(const char *path, const config *c, int workers, double seconds,
                              double *rate, double *wait) {
  cx_loader_opts o = cx_loader_defaults();
  o.batch_size = c->batch, o.workers = workers, o.mode = CX_LOADER_MEMORY;
  o.aug = (cx_augment){.out_h = c->out, .out_w = c->out, .crop = c->crop, .pad = c->pad,
                       .flip = true, .mean = {0.485f, 0.456f, 0.406f},
                       .std = {0.229f, 0.224f, 0.225f}};
  cx_loader *l;
  CX_TRY(cx_loader_open(path, &o, &l));
  int64_t images = 0;
  double t0 = now();
  cx_status s = CX_OK;
  for (int64_t epoch = 0; s == CX_OK && now() - t0 < seconds; epoch++) {
    cx_loader_epoch_begin(l, epoch);
    cx_batch b;
    while (now() - t0 < seconds && (s = cx_loader_next(l, &b)) == CX_OK && b.size) images += b.size;
  }
  double dt = now() - t0;
  *rate = (double)images / dt;
  *wait = cx_loader_wait_seconds(l) / dt;
  cx_loader_close(l);
  return s;
}

static double run_torch(const char *script, const char *path, const config *c, int workers,
                        double seconds) {
  char cmd[2048], line[512];
  /* Debian's numpy first: pip's numpy 2 (pulled in by onnxruntime) breaks Debian's torch/h5py. */
  snprintf(cmd, sizeof cmd, "PYTHONPATH=/usr/lib/python3/dist-packages /usr/bin/python3 %s %s "
           "--config %s --workers %d --batch %lld --seconds %g", script, path, c->torch, workers,
           (long long)c->batch, seconds);
  FILE *p = popen(cmd, "r");
  double rate = -1;
  while (p && fgets(line, sizeof line, p)) {
    const char *k = strstr(line, "\"images_per_s\": ");
    if (k) rate = strtod(k + 16, NULL);
  }
  if (p) pclose(p);
  return rate;
}

int main(int argc, char **argv) {
  int workers = 2;
  double seconds = 3;
  bool torch = true;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--workers") && i + 1 < argc) workers = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--no-torch")) torch = false;
    else return fprintf(stderr, "usage: bench_loader [--workers N] [--seconds S] [--no-torch]\n"),
                2;
  }
  char script[1024], dir[64] = "/tmp/cx_bench_loader_XXXXXX", path[2][128];
  snprintf(script, sizeof script, "%.*s/loader_torch.py", (int)(strrchr(__FILE__, '/') - __FILE__),
           __FILE__);
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  snprintf(path[0], sizeof path[0], "%s/32.h5", dir);
  snprintf(path[1], sizeof path[1], "%s/256.h5", dir);
  if (make_set(path[0], 32, configs[0].n) != CX_OK || make_set(path[1], 256, configs[1].n) != CX_OK)
    return fprintf(stderr, "bench_loader: %s\n", cx_last_error()), 1;
  printf("loader throughput, %d workers each, images in memory, f32 NCHW out (images/s)\n",
         workers);
  printf("%-42s %5s %10s %10s %7s %9s\n", "transforms", "batch", "compress", "pytorch", "ratio",
         "waiting");
  int rc = 0;
  for (int i = 0; i < N_CONFIGS; i++) {
    const config *c = &configs[i];
    const char *file = path[c->stored == 32 ? 0 : 1];
    double mine, wait, theirs = torch ? run_torch(script, file, c, workers, seconds) : -1;
    if (run_compress(file, c, workers, seconds, &mine, &wait) != CX_OK) {
      fprintf(stderr, "bench_loader: %s\n", cx_last_error());
      rc = 1;
      break;
    }
    char ratio[16] = "-", their[16] = "-";
    if (theirs > 0) snprintf(ratio, sizeof ratio, "%.1fx", mine / theirs);
    if (theirs > 0) snprintf(their, sizeof their, "%.0f", theirs);
    printf("%-42s %5lld %10.0f %10s %7s %8.0f%%\n", c->name, (long long)c->batch, mine, their,
           ratio, 100 * wait);
    fflush(stdout);
  }
  printf("waiting: the share of time the consumer waited for a batch (it does nothing else)\n");
  remove(path[0]), remove(path[1]), rmdir(dir);
  return rc;
}
