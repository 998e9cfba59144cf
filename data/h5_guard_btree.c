/* Version 1 B-tree nodes checked as the guard driver reads them (h5_guard_btree.h). */
#include "h5_guard_btree.h"

#include <stdlib.h>
#include <string.h>

#include "h5_guard_ohdr.h"

/* signature, type, level, entries used (2), left and right siblings (8 each) */
enum { NODE_HDR = 24, ADDR = 8, NO_PARENT_LEVEL = -1 };
/* more nodes than any file of ours holds; past it the check stops remembering (and passes) */
enum { MAX_NODES = 1 << 20 };

static bool fail(const char **why, const char *msg) {
  *why = msg;
  return false;
}

static cx_h5_btree_node *find(cx_h5_btrees *t, uint64_t addr) {
  for (size_t i = 0; i < t->n; i++)
    if (t->v[i].addr == addr) return &t->v[i];
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 64;
    cx_h5_btree_node *v = cap <= MAX_NODES ? realloc(t->v, cap * sizeof *v) : NULL;
    if (!v) return NULL;
    t->v = v, t->cap = cap;
  }
  t->v[t->n] = (cx_h5_btree_node){addr, UINT64_MAX, NO_PARENT_LEVEL, NO_PARENT_LEVEL};
  return &t->v[t->n++];
}

/* The size of a key in a node of len bytes with two_k children: the node is the header, 2K
 * child addresses and 2K + 1 keys. 0 when len is not such a size. */
static size_t key_size(size_t len, uint64_t two_k) {
  if (two_k == 0 || len < NODE_HDR + two_k * ADDR) return 0;
  size_t keys = len - NODE_HDR - (size_t)two_k * ADDR;
  return keys % (two_k + 1) == 0 ? keys / (two_k + 1) : 0;
}

bool cx_h5_btree_ok(cx_h5_btrees *t, uint64_t addr, const unsigned char *buf, size_t len,
                    const char **why) {
  if (!t->sizes_8 || len < NODE_HDR || memcmp(buf, "TREE", 4) != 0 || buf[4] > 1) return true;
  int level = buf[5];
  /* a group node's keys are heap offsets (a length: 8 bytes), so its 2K follows from its size;
   * a chunk node's keys depend on the data set's rank, so its 2K comes from the superblock */
  uint64_t two_k = buf[4] == 0 ? (len - NODE_HDR - 8) / (2 * ADDR) : (uint64_t)t->chunk_two_k;
  size_t key = key_size(len, two_k);
  uint64_t used = cx_h5_le(buf + 6, 2);
  if (key == 0 || used > two_k) return true; /* not a layout we know; libhdf5 checks `used` */
  cx_h5_btree_node *self = find(t, addr);
  if (!self) return true;
  if (self->expect != NO_PARENT_LEVEL && self->expect != level)
    return fail(why, "a B-tree node at another level than its parent states");
  self->level = level;
  if (level == 0) return true; /* its children are symbol table nodes or chunks */
  for (uint64_t u = 0; u < used; u++) {
    uint64_t child = cx_h5_le(buf + NODE_HDR + u * (key + ADDR) + key, ADDR);
    for (uint64_t w = 0; w < u; w++)
      if (cx_h5_le(buf + NODE_HDR + w * (key + ADDR) + key, ADDR) == child)
        return fail(why, "a B-tree node naming one child twice");
    cx_h5_btree_node *c = child == addr ? NULL : find(t, child);
    if (child == addr) return fail(why, "a B-tree node naming itself as its child");
    if (!c) return true;
    if (c->level != NO_PARENT_LEVEL && c->level != level - 1)
      return fail(why, "a B-tree node naming a node of another level than the next as its child");
    if (c->parent != UINT64_MAX && c->parent != addr)
      return fail(why, "a B-tree node that two nodes name as their child");
    c->parent = addr, c->expect = level - 1;
  }
  return true;
}

void cx_h5_btrees_free(cx_h5_btrees *t) {
  free(t->v);
  *t = (cx_h5_btrees){0};
}
