#ifndef CX_FILE_REPLACE_H
#define CX_FILE_REPLACE_H

#include <stddef.h>
#include <stdio.h>

#include "status.h"

/* Every output file is written to "<path>.tmp.<pid>", synced to disk and renamed over path, and
 * the folder is synced (best effort), so that path holds either its old contents or the new
 * ones, whole, even across a crash. On failure path is untouched, the temporary file is removed
 * and the message names path and the temporary file. Three forms of the one mechanism: */

/* A buffer: the whole file at once. */
cx_status cx_file_replace(const char *path, const void *bytes, size_t size);

/* A stream: write to o->f (fprintf, fwrite, ...), then commit or abort. */
typedef struct cx_file_out {
  FILE *f;
  char *path, *tmp;
} cx_file_out;
/* Opens "<path>.tmp.<pid>" for writing ("wb"). On failure *o is empty (abort is a no-op). */
cx_status cx_file_out_open(const char *path, cx_file_out *o);
/* Checks the stream's error flag, flushes, fsyncs, closes, renames over path and syncs the
 * folder; on failure removes the temporary file. Either way *o is empty afterwards. */
cx_status cx_file_out_commit(cx_file_out *o);
/* Closes and removes the temporary file; *o is empty afterwards (a second call does nothing). */
void cx_file_out_abort(cx_file_out *o);

/* Path only, for writers that create the file themselves (HDF5's H5Fcreate, an exported model
 * that is read back before it replaces path): the temporary name (malloc'd; NULL when out of
 * memory), and, once that file is complete and closed, syncing it and renaming it over path
 * (on failure the temporary file is removed). */
char *cx_file_tmp_name(const char *path);
cx_status cx_file_put_in_place(const char *tmp, const char *path);

/* Removes the temporary files ("<name>.tmp.<pid>") in dir that no running process writes: what
 * a writer killed before its rename left (they are never read). Best effort, and quiet: a
 * folder that is not there, or a file that will not go, is left as it is. */
void cx_file_remove_stale_tmp(const char *dir);

#endif
