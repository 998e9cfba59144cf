#ifndef CX_DATA_H5_GUARD_BTREE_H
#define CX_DATA_H5_GUARD_BTREE_H

/* The guard driver's version 1 B-tree check (data/h5_guard.c; docs/data.md, "Damaged files").
 * A "TREE" node indexes an old-style group's links (type 0) or a chunked data set's chunks
 * (type 1); a node of level L > 0 names its children, nodes of level L - 1. libhdf5 1.10 walks
 * from a node into its children without comparing their levels with the parent's, so a node
 * that names itself or an ancestor as a child recurses until the stack overflows (SIGSEGV),
 * and children shared between parents multiply the walk without bound. The driver sees each
 * node as HDF5 reads it and remembers, per file, each node's level and each child's parent:
 * a node must sit one level below the parent that names it, a node has one parent, and a node
 * names each child once. Levels then fall along every path and the walk is a tree. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cx_h5_btree_node {
  uint64_t addr, parent; /* parent: UINT64_MAX until a node names this one */
  int level, expect;     /* as read, and as its parent states (-1: not known yet) */
} cx_h5_btree_node;

typedef struct cx_h5_btrees {
  /* entries of a chunk B-tree node (2K, from a version 1 superblock; 64 by default), and
   * whether addresses and lengths are 8 bytes, the only size the check reads */
  int chunk_two_k;
  bool sizes_8;
  cx_h5_btree_node *v;
  size_t n, cap;
} cx_h5_btrees;

/* The node HDF5 read at addr (relative to the file's base, as the addresses inside nodes are)
 * into buf[0, len): false, with *why set, when its level or children break the rules above. A
 * read that is no B-tree node, or whose layout the sizes known do not explain, passes. */
bool cx_h5_btree_ok(cx_h5_btrees *t, uint64_t addr, const unsigned char *buf, size_t len,
                    const char **why);

void cx_h5_btrees_free(cx_h5_btrees *t);

#endif
