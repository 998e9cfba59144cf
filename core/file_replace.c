#define _POSIX_C_SOURCE 200809L
#include "file_replace.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *cx_file_tmp_name(const char *path) {
  size_t tl = strlen(path) + 32;
  char *tmp = malloc(tl);
  if (tmp) snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
  return tmp;
}

/* Makes the rename itself durable. Best effort: some file systems refuse to sync a folder. */
static void sync_parent(const char *path) {
  char *dir = strdup(path);
  if (!dir) return;
  char *slash = strrchr(dir, '/');
  if (slash == dir) dir[1] = '\0'; /* "/name": the root */
  else if (slash) *slash = '\0';
  int fd = open(slash ? dir : ".", O_RDONLY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  free(dir);
}

/* Test only (docs/training.md, "What a kill leaves"): with CX_TEST_KILL_AT=SUFFIX in the
 * environment, writing a file whose path ends with SUFFIX kills the process with SIGKILL, its
 * temporary file written (cx_file_replace: half written) and not yet renamed, so that a test can
 * crash a run at that exact moment and check what a rerun makes of it. f: flushed first. */
static void test_kill_point(const char *path, FILE *f) {
  const char *want = getenv("CX_TEST_KILL_AT");
  if (!want || !*want) return;
  size_t n = strlen(path), k = strlen(want);
  if (n < k || strcmp(path + n - k, want)) return;
  if (f) fflush(f);
  raise(SIGKILL);
}

/* The last step of every form: the complete, synced temporary file becomes path. */
static cx_status rename_into(const char *tmp, const char *path) {
  test_kill_point(path, NULL);
  if (rename(tmp, path) != 0) {
    cx_status s = cx_fail(CX_ERR_IO, "%s: cannot rename %s to it: %s", path, tmp,
                          strerror(errno));
    unlink(tmp);
    return s;
  }
  sync_parent(path);
  return CX_OK;
}

cx_status cx_file_put_in_place(const char *tmp, const char *path) {
  int fd = open(tmp, O_RDONLY);
  bool ok = fd >= 0 && fsync(fd) == 0;
  int e = errno;
  if (fd >= 0) close(fd);
  if (!ok) {
    unlink(tmp);
    return cx_fail(CX_ERR_IO, "%s: cannot sync the temporary file %s: %s", path, tmp,
                   strerror(e));
  }
  return rename_into(tmp, path);
}

static void file_out_clear(cx_file_out *o) {
  free(o->path);
  free(o->tmp);
  *o = (cx_file_out){0};
}

cx_status cx_file_out_open(const char *path, cx_file_out *o) {
  *o = (cx_file_out){.path = strdup(path), .tmp = cx_file_tmp_name(path)};
  if (!o->path || !o->tmp) {
    file_out_clear(o);
    return cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  }
  o->f = fopen(o->tmp, "wb");
  if (!o->f) {
    cx_status s = cx_fail(CX_ERR_IO, "%s: cannot create the temporary file %s: %s", path, o->tmp,
                          strerror(errno));
    file_out_clear(o);
    return s;
  }
  return CX_OK;
}

cx_status cx_file_out_commit(cx_file_out *o) {
  if (!o->f) return cx_fail(CX_ERR_ARG, "cx_file_out_commit: no file is open");
  /* ferror first: an earlier fwrite or fprintf that failed set it (errno is stale by now) */
  bool earlier = ferror(o->f) != 0, ok = !earlier;
  int e = 0;
  if (ok && (fflush(o->f) != 0 || fsync(fileno(o->f)) != 0)) ok = false, e = errno;
  if (fclose(o->f) != 0 && ok) ok = false, e = errno;
  o->f = NULL;
  cx_status s = CX_OK;
  if (earlier)
    s = cx_fail(CX_ERR_IO, "%s: a write to the temporary file %s failed", o->path, o->tmp);
  else if (!ok)
    s = cx_fail(CX_ERR_IO, "%s: cannot write the temporary file %s: %s", o->path, o->tmp,
                strerror(e));
  if (!ok) unlink(o->tmp);
  else s = rename_into(o->tmp, o->path);
  file_out_clear(o);
  return s;
}

void cx_file_out_abort(cx_file_out *o) {
  if (o->f) {
    fclose(o->f);
    unlink(o->tmp);
  }
  file_out_clear(o);
}

cx_status cx_file_replace(const char *path, const void *bytes, size_t size) {
  cx_file_out o;
  CX_TRY(cx_file_out_open(path, &o));
  size_t half = size / 2; /* in two halves, for test_kill_point's half-written file */
  bool ok = fwrite(bytes, 1, half, o.f) == half;
  if (ok) test_kill_point(path, o.f);
  if (!ok || fwrite((const char *)bytes + half, 1, size - half, o.f) != size - half) {
    cx_status s = cx_fail(CX_ERR_IO, "%s: cannot write the temporary file %s: %s", path, o.tmp,
                          strerror(errno));
    cx_file_out_abort(&o);
    return s;
  }
  return cx_file_out_commit(&o);
}

/* The pid of a name "<name>.tmp.<pid>", or 0. */
static long tmp_pid(const char *name) {
  const char *t = strstr(name, ".tmp.");
  for (const char *next; t && (next = strstr(t + 1, ".tmp.")); t = next) {}
  if (!t || t == name || !t[5]) return 0;
  char *end;
  long pid = strtol(t + 5, &end, 10);
  return *end || pid <= 0 ? 0 : pid;
}

void cx_file_remove_stale_tmp(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  size_t len = strlen(dir);
  for (struct dirent *e; (e = readdir(d));) {
    long pid = tmp_pid(e->d_name);
    /* kill(pid, 0) fails with ESRCH only when no process has that pid */
    if (!pid || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    size_t n = len + strlen(e->d_name) + 2;
    char *path = malloc(n);
    if (!path) break;
    snprintf(path, n, "%s/%s", dir, e->d_name);
    unlink(path);
    free(path);
  }
  closedir(d);
}
