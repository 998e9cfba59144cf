#define _POSIX_C_SOURCE 200809L
#include "file_replace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static cx_status write_synced(const char *path, const char *tmp, const uint8_t *bytes,
                              size_t size) {
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
  if (fd < 0)
    return cx_fail(CX_ERR_IO, "%s: cannot create the temporary file %s: %s", path, tmp,
                   strerror(errno));
  size_t done = 0;
  while (done < size) {
    ssize_t w = write(fd, bytes + done, size - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += (size_t)w;
  }
  int e = errno;
  bool ok = done == size && (fsync(fd) == 0 || (e = errno, false));
  if (close(fd) != 0 && ok) ok = false, e = errno;
  if (!ok)
    return cx_fail(CX_ERR_IO, "%s: cannot write the temporary file %s: %s", path, tmp,
                   strerror(e));
  return CX_OK;
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

cx_status cx_file_replace(const char *path, const void *bytes, size_t size) {
  size_t tl = strlen(path) + 32;
  char *tmp = malloc(tl);
  if (!tmp) return cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
  cx_status s = write_synced(path, tmp, bytes, size);
  if (s == CX_OK && rename(tmp, path) != 0)
    s = cx_fail(CX_ERR_IO, "%s: cannot rename %s to it: %s", path, tmp, strerror(errno));
  if (s == CX_OK) sync_parent(path);
  else unlink(tmp);
  free(tmp);
  return s;
}
