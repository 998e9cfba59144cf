#ifndef CX_FILE_REPLACE_H
#define CX_FILE_REPLACE_H

#include <stddef.h>

#include "status.h"

/* Replaces the file at path with size bytes, so that path holds either its old contents or the
 * new ones, whole, even across a crash: the bytes go to "<path>.tmp.<pid>", which is synced to
 * disk and renamed over path, and the folder is synced (best effort). On failure path is
 * untouched, the temporary file is removed and the message names path and the temporary file. */
cx_status cx_file_replace(const char *path, const void *bytes, size_t size);

#endif
