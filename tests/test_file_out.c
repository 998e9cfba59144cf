/* The one temp-file-and-rename writer (core/file_replace.h): a commit makes the file and leaves no
 * temporary file; an abort leaves nothing; a write that fails (the disk full: /dev/full under the
 * stream) or a rename that fails leaves the old file as it was and no temporary file. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/file_replace.h"
#include "check.h"

static char dir[64];

static void path_in(char *buf, size_t size, const char *name) {
  snprintf(buf, size, "%s/%s", dir, name);
}

/* The whole file, or NULL when it does not exist. */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = calloc(1, 4096);
  if (buf) buf[fread(buf, 1, 4095, f)] = 0;
  fclose(f);
  return buf;
}

static void check_contents(const char *path, const char *want, const char *what) {
  char *got = slurp(path);
  CHECK(got && !strcmp(got, want), "%s: %s holds '%s', expected '%s'", what, path,
        got ? got : "(no file)", want);
  free(got);
}

/* Nothing but the named files in the folder: no temporary file left behind. */
static void check_only(const char *what, int n_expected) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "ls -A %s | wc -l", dir);
  FILE *p = popen(cmd, "r");
  int n = -1;
  if (p) {
    if (fscanf(p, "%d", &n) != 1) n = -1;
    pclose(p);
  }
  CHECK(n == n_expected, "%s: %d entries in %s, expected %d", what, n, dir, n_expected);
}

static void test_commit(void) {
  char path[128];
  path_in(path, sizeof path, "a.txt");
  cx_file_out o;
  CHECK(cx_file_out_open(path, &o) == CX_OK, "open: %s", cx_last_error());
  if (!o.f) return;
  CHECK(access(o.tmp, F_OK) == 0 && access(path, F_OK) != 0,
        "while writing only the temporary file exists");
  fprintf(o.f, "first %d\n", 1);
  CHECK(cx_file_out_commit(&o) == CX_OK, "commit: %s", cx_last_error());
  CHECK(!o.f && !o.tmp && !o.path, "commit leaves the struct empty");
  check_contents(path, "first 1\n", "commit");
  check_only("commit", 1);
  /* a second commit replaces it */
  CHECK(cx_file_out_open(path, &o) == CX_OK, "open: %s", cx_last_error());
  if (o.f) fputs("second\n", o.f);
  CHECK(o.f && cx_file_out_commit(&o) == CX_OK, "commit: %s", cx_last_error());
  check_contents(path, "second\n", "replace");
  CHECK(cx_file_replace(path, "third\n", 6) == CX_OK, "cx_file_replace: %s", cx_last_error());
  check_contents(path, "third\n", "cx_file_replace");
  check_only("replace", 1);
}

static void test_abort(void) {
  char path[128];
  path_in(path, sizeof path, "b.txt");
  cx_file_out o;
  CHECK(cx_file_out_open(path, &o) == CX_OK, "open: %s", cx_last_error());
  if (o.f) fputs("never seen\n", o.f);
  cx_file_out_abort(&o);
  CHECK(!o.f && !o.tmp, "abort leaves the struct empty");
  cx_file_out_abort(&o); /* harmless twice */
  CHECK(access(path, F_OK) != 0, "abort created %s", path);
  check_only("abort", 1);
}

/* The stream's descriptor is swapped for /dev/full: every write fails with ENOSPC, as on a full
 * disk. The old file must stay as it was. */
static void test_failing_write(void) {
  char path[128];
  path_in(path, sizeof path, "a.txt");
  cx_file_out o;
  CHECK(cx_file_out_open(path, &o) == CX_OK, "open: %s", cx_last_error());
  if (!o.f) return;
  int full = open("/dev/full", O_WRONLY);
  CHECK(full >= 0 && dup2(full, fileno(o.f)) >= 0, "cannot put /dev/full under the stream");
  if (full >= 0) close(full);
  for (int i = 0; i < 2000; i++) fprintf(o.f, "line %d of a file that does not fit\n", i);
  char tmp[160];
  snprintf(tmp, sizeof tmp, "%s", o.tmp);
  cx_status s = cx_file_out_commit(&o);
  printf("failing write: %s\n", cx_last_error());
  CHECK(s == CX_ERR_IO && strstr(cx_last_error(), path) && strstr(cx_last_error(), tmp),
        "a failed write must fail the commit naming both files");
  check_contents(path, "third\n", "failing write");
  check_only("failing write", 1);
  /* the buffer form fails alike: here the temporary file cannot even be created */
  char missing[160];
  path_in(missing, sizeof missing, "no/such/folder/c.txt");
  CHECK(cx_file_replace(missing, "x", 1) == CX_ERR_IO, "write into a missing folder succeeded");
}

/* A rename that fails (path is a folder that is not empty) removes the temporary file. */
static void test_failing_rename(void) {
  char path[128], inner[160];
  path_in(path, sizeof path, "d");
  CHECK(mkdir(path, 0777) == 0, "mkdir %s", path);
  snprintf(inner, sizeof inner, "%s/keep", path);
  CHECK(cx_file_replace(inner, "kept\n", 5) == CX_OK, "%s", cx_last_error());
  cx_file_out o;
  CHECK(cx_file_out_open(path, &o) == CX_OK, "open: %s", cx_last_error());
  if (o.f) fputs("not a folder\n", o.f);
  cx_status s = o.f ? cx_file_out_commit(&o) : CX_ERR_IO;
  printf("failing rename: %s\n", cx_last_error());
  CHECK(s == CX_ERR_IO, "renaming over a non-empty folder succeeded");
  check_contents(inner, "kept\n", "failing rename");
  check_only("failing rename", 2);
  remove(inner);
  rmdir(path);
}

/* The path-only form (HDF5 writers): the caller creates the temporary file itself. */
static void test_path_form(void) {
  char path[128];
  path_in(path, sizeof path, "e.h5");
  char *tmp = cx_file_tmp_name(path);
  CHECK(tmp && strncmp(tmp, path, strlen(path)) == 0 && strstr(tmp, ".tmp."),
        "temporary name %s", tmp ? tmp : "(null)");
  if (!tmp) return;
  FILE *f = fopen(tmp, "wb");
  if (f) {
    fputs("made by another library\n", f);
    fclose(f);
  }
  CHECK(cx_file_put_in_place(tmp, path) == CX_OK, "put in place: %s", cx_last_error());
  check_contents(path, "made by another library\n", "path form");
  CHECK(access(tmp, F_OK) != 0, "temporary file left");
  CHECK(cx_file_put_in_place(tmp, path) == CX_ERR_IO, "a missing temporary file was accepted");
  check_contents(path, "made by another library\n", "path form, missing temporary file");
  free(tmp);
  remove(path);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/cx_file_out_XXXXXX");
  if (!mkdtemp(dir)) {
    printf("FAIL: mkdtemp\n");
    return 1;
  }
  test_commit();
  test_abort();
  test_failing_write();
  test_failing_rename();
  test_path_form();
  char path[128];
  path_in(path, sizeof path, "a.txt");
  remove(path);
  rmdir(dir);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
