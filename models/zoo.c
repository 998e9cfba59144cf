/* The model zoo: the table of architectures, the spec parser and cx_model_build. */

#include "zoo.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"

typedef struct arch {
  cx_model_arch pub;
  void (*build)(cx_net *n, const cx_model_cfg *cfg, cx_feat x);
  int variant;
  int64_t size, classes; /* default input side and classes */
  double dropout;
  int64_t stride;        /* the total stride of the network */
} arch;

#define CIFAR_KEYS "classes, input, seed"
#define RESNET_KEYS "classes, input, seed"
#define MBV2_KEYS "classes, input, width, small_input, dropout, seed"
#define MBV3_KEYS "classes, input, width, dropout, seed"
#define EFFNET_KEYS "classes, input, dropout, stochastic_depth, seed"

#define CIFAR(d)                                                                                   \
  {{"resnet" #d, "ResNet-" #d " for 32 px inputs (He et al. 2016), projection shortcuts",        \
    CIFAR_KEYS}, cx_build_resnet, d, 32, 10, 0, 4}
#define RESNET(d, what)                                                                            \
  {{"resnet" #d, "torchvision resnet" #d ", " what, RESNET_KEYS},                                \
   cx_build_resnet, d, 224, 1000, 0, 32}
#define EFFNET(b, size, drop)                                                                      \
  {{"efficientnet_b" #b, "torchvision efficientnet_b" #b ", MBConv + SE, SiLU, stochastic depth", \
    EFFNET_KEYS}, cx_build_efficientnet, b, size, 1000, drop, 32}

static const arch archs[] = {
    CIFAR(20), CIFAR(32), CIFAR(44), CIFAR(56), CIFAR(110),
    RESNET(18, "basic blocks"), RESNET(34, "basic blocks"), RESNET(50, "bottleneck blocks"),
    RESNET(101, "bottleneck blocks"),
    {{"mobilenet_v2", "torchvision mobilenet_v2, inverted residuals, ReLU6", MBV2_KEYS},
     cx_build_mobilenet_v2, 0, 224, 1000, 0.2, 32},
    {{"mobilenet_v3_small", "torchvision mobilenet_v3_small, SE + hardswish", MBV3_KEYS},
     cx_build_mobilenet_v3, 0, 224, 1000, 0.2, 32},
    {{"mobilenet_v3_large", "torchvision mobilenet_v3_large, SE + hardswish", MBV3_KEYS},
     cx_build_mobilenet_v3, 1, 224, 1000, 0.2, 32},
    EFFNET(0, 224, 0.2), EFFNET(1, 240, 0.2), EFFNET(2, 288, 0.3), EFFNET(3, 300, 0.3),
};
enum { N_ARCHS = sizeof archs / sizeof *archs };

const cx_model_arch *const *cx_model_archs(void) {
  static const cx_model_arch *list[N_ARCHS + 1];
  for (int i = 0; i < N_ARCHS; i++) list[i] = &archs[i].pub;
  return list;
}

static const arch *arch_find(const char *name) {
  for (int i = 0; i < N_ARCHS; i++)
    if (strcmp(archs[i].pub.name, name) == 0) return &archs[i];
  return NULL;
}

enum key {
  KEY_CLASSES, KEY_INPUT, KEY_WIDTH, KEY_DEPTH, KEY_SMALL_INPUT, KEY_DROPOUT, KEY_STOCHASTIC_DEPTH,
  KEY_SEED, N_KEYS
};
static const char *const all_keys[N_KEYS + 1] = {
    "classes", "input", "width", "depth", "small_input", "dropout", "stochastic_depth", "seed", NULL};

/* The parsed spec. */
typedef struct spec {
  const char *text;
  const arch *a;
  bool generic_resnet; /* "resnet:depth=N" */
  int depth;
  int64_t c, h, w;
  int small_input; /* -1: decide from the input size */
  uint64_t seed;
  cx_model_cfg cfg;
  bool seen[N_KEYS];
} spec;

static cx_status bad_name(const char *text, const char *name) {
  char list[1024] = "";
  for (int i = 0; i < N_ARCHS; i++) {
    strncat(list, archs[i].pub.name, sizeof list - strlen(list) - 1);
    strncat(list, ", ", sizeof list - strlen(list) - 1);
  }
  return cx_fail(CX_ERR_ARG, "model spec '%s': unknown architecture '%s'; valid: %sresnet:depth=N",
                 text, name, list);
}

static bool arch_takes(const char *keys, const char *key) {
  size_t n = strlen(key);
  for (const char *p = keys; (p = strstr(p, key)); p += n)
    if ((p == keys || p[-1] == ' ') && (p[n] == ',' || p[n] == 0)) return true;
  return false;
}

static cx_status parse_int(const spec *s, const char *key, const char *v, int64_t lo, int64_t hi,
                           int64_t *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi)
    return cx_fail(CX_ERR_ARG, "model spec '%s': %s='%s' must be an integer in [%lld, %lld]",
                   s->text, key, v, (long long)lo, (long long)hi);
  *out = x;
  return CX_OK;
}

/* A number in (lo, hi] when lo_open, else [lo, hi). */
static cx_status parse_real(const spec *s, const char *key, const char *v, double lo, double hi,
                            bool lo_open, double *out) {
  char *end;
  double x = strtod(v, &end);
  bool ok = *v && !*end && isfinite(x) && (lo_open ? x > lo && x <= hi : x >= lo && x < hi);
  if (!ok)
    return cx_fail(CX_ERR_ARG, "model spec '%s': %s='%s' must be a number in %s%g, %g%s", s->text,
                   key, v, lo_open ? "(" : "[", lo, hi, lo_open ? "]" : ")");
  *out = x;
  return CX_OK;
}

static cx_status parse_bool(const spec *s, const char *key, const char *v, int *out) {
  static const char *const yes[] = {"1", "true", "yes", "on"};
  static const char *const no[] = {"0", "false", "no", "off"};
  for (int i = 0; i < 4; i++) {
    if (strcmp(v, yes[i]) == 0) return *out = 1, CX_OK;
    if (strcmp(v, no[i]) == 0) return *out = 0, CX_OK;
  }
  return cx_fail(CX_ERR_ARG, "model spec '%s': %s='%s' must be 1/0, true/false, yes/no or on/off",
                 s->text, key, v);
}

static cx_status parse_input(spec *s, const char *v) {
  long long c, h, w;
  char tail;
  if (sscanf(v, "%lldx%lldx%lld%c", &c, &h, &w, &tail) != 3 || c < 1 || c > 1024 || h < 1 ||
      h > 8192 || w < 1 || w > 8192)
    return cx_fail(CX_ERR_ARG,
                   "model spec '%s': input='%s' must be CxHxW (e.g. 3x224x224 or 1x28x28) with C "
                   "in [1, 1024] and H, W in [1, 8192]", s->text, v);
  s->c = c, s->h = h, s->w = w;
  return CX_OK;
}

static cx_status apply_key(spec *s, enum key key, const char *v) {
  int64_t i = 0;
  switch (key) {
  case KEY_CLASSES: return parse_int(s, "classes", v, 1, 1000000, &s->cfg.classes);
  case KEY_INPUT: return parse_input(s, v);
  case KEY_WIDTH: return parse_real(s, "width", v, 0, 4, true, &s->cfg.width);
  case KEY_DEPTH:
    CX_TRY(parse_int(s, "depth", v, 1, 1000, &i));
    if (!cx_resnet_depth_valid((int)i))
      return cx_fail(CX_ERR_ARG, "model spec '%s': depth=%s is not a ResNet we build; valid: 20, "
                     "32, 44, 56, 110 (CIFAR) and 18, 34, 50, 101 (ImageNet)", s->text, v);
    s->depth = (int)i;
    return CX_OK;
  case KEY_SMALL_INPUT: return parse_bool(s, "small_input", v, &s->small_input);
  case KEY_DROPOUT: return parse_real(s, "dropout", v, 0, 1, false, &s->cfg.dropout);
  case KEY_STOCHASTIC_DEPTH:
    return parse_real(s, "stochastic_depth", v, 0, 1, false, &s->cfg.stochastic_depth);
  default:
    CX_TRY(parse_int(s, "seed", v, 0, INT64_MAX, &i));
    s->seed = (uint64_t)i;
    return CX_OK;
  }
}

/* One "key=value"; `keys` is what the architecture takes. */
static cx_status parse_pair(spec *s, char *pair, const char *name, const char *keys) {
  char *eq = strchr(pair, '=');
  if (!eq || eq == pair || !eq[1])
    return cx_fail(CX_ERR_ARG, "model spec '%s': '%s' is not key=value; %s takes: %s", s->text,
                   pair, name, keys);
  *eq = 0;
  int k = 0;
  while (all_keys[k] && strcmp(all_keys[k], pair) != 0) k++;
  if (!all_keys[k] || !arch_takes(keys, pair))
    return cx_fail(CX_ERR_ARG, "model spec '%s': unknown key '%s' for %s; it takes: %s", s->text,
                   pair, name, keys);
  if (s->seen[k])
    return cx_fail(CX_ERR_ARG, "model spec '%s': key '%s' is given twice", s->text, pair);
  s->seen[k] = true;
  return apply_key(s, (enum key)k, eq + 1);
}

static cx_status parse_keys(spec *s, char *rest, const char *name, const char *keys) {
  for (char *pair = rest; pair;) {
    char *comma = strchr(pair, ',');
    if (comma) *comma = 0;
    CX_TRY(parse_pair(s, pair, name, keys));
    pair = comma ? comma + 1 : NULL;
  }
  return CX_OK;
}

static void set_defaults(spec *s) {
  const arch *a = s->a;
  s->cfg.variant = a->variant;
  if (!s->seen[KEY_CLASSES]) s->cfg.classes = a->classes;
  if (!s->seen[KEY_INPUT]) s->c = 3, s->h = s->w = a->size;
  if (!s->seen[KEY_DROPOUT]) s->cfg.dropout = a->dropout;
  if (!s->seen[KEY_STOCHASTIC_DEPTH]) s->cfg.stochastic_depth = 0.2;
  if (s->small_input < 0) s->small_input = (s->h < s->w ? s->h : s->w) <= 32;
  s->cfg.small_input = s->small_input;
}

static int64_t total_stride(const spec *s) {
  return s->a->build == cx_build_mobilenet_v2 && s->small_input ? 16 : s->a->stride;
}

static cx_status check_size(const spec *s) {
  int64_t st = total_stride(s);
  if (s->h >= st && s->w >= st) return CX_OK;
  const char *hint = "";
  if (s->a->build == cx_build_mobilenet_v2 && !s->small_input)
    hint = ", or small_input=1 (stride 16)";
  else if (s->a->build == cx_build_resnet && st == 32)
    hint = ", or a CIFAR ResNet (resnet20, resnet32, resnet44, resnet56, resnet110: stride 4)";
  return cx_fail(CX_ERR_ARG,
                 "model spec '%s': input %lldx%lld is smaller than %s's total stride %lld; use an "
                 "input of at least %lldx%lld%s",
                 s->text, (long long)s->h, (long long)s->w, s->a->pub.name, (long long)st,
                 (long long)st, (long long)st, hint);
}

static cx_status parse_spec(const char *text, spec *s) {
  *s = (spec){.text = text, .small_input = -1, .cfg.width = 1.0};
  if (!text || !*text) return bad_name("", "");
  char buf[512];
  if (strlen(text) >= sizeof buf)
    return cx_fail(CX_ERR_ARG, "model spec '%.40s...' is longer than %zu characters", text,
                   sizeof buf - 1);
  strcpy(buf, text);
  char *rest = strchr(buf, ':');
  if (rest) *rest++ = 0;
  s->generic_resnet = strcmp(buf, "resnet") == 0;
  s->a = arch_find(buf);
  if (!s->a && !s->generic_resnet) return bad_name(text, buf);
  const char *keys = s->a ? s->a->pub.keys : "depth, " RESNET_KEYS;
  if (rest && *rest) CX_TRY(parse_keys(s, rest, buf, keys));
  if (s->generic_resnet) {
    if (!s->depth)
      return cx_fail(CX_ERR_ARG, "model spec '%s': resnet needs depth=N (20, 32, 44, 56, 110, 18, "
                     "34, 50 or 101), or use the name resnetN", text);
    char name[32];
    snprintf(name, sizeof name, "resnet%d", s->depth);
    s->a = arch_find(name);
  }
  set_defaults(s);
  return check_size(s);
}

static cx_status build(const char *text, bool init, cx_graph **out, cx_model_info *info) {
  spec s;
  CX_TRY(parse_spec(text, &s));
  cx_graph *g = cx_graph_new();
  if (!g) return cx_fail(CX_ERR_NOMEM, "out of memory building model '%s'", text);
  cx_net n;
  cx_feat x;
  cx_net_begin(&n, g, s.seed, init, s.c, s.h, s.w, &x);
  s.a->build(&n, &s.cfg, x);
  cx_status st = cx_graph_status(g);
  if (st != CX_OK) {
    cx_error_prefix("model '%s'", text);
    cx_graph_free(g);
    return st;
  }
  if (info) {
    *info = (cx_model_info){.channels = s.c, .height = s.h, .width = s.w,
                            .classes = s.cfg.classes, .params = cx_graph_param_count(g),
                            .macs = n.macs, .stride = total_stride(&s)};
    snprintf(info->arch, sizeof info->arch, "%s", s.a->pub.name);
  }
  if (out) *out = g;
  else cx_graph_free(g);
  return CX_OK;
}

cx_status cx_model_build(const char *spec, cx_graph **out, cx_model_info *info) {
  if (!out) return cx_fail(CX_ERR_ARG, "cx_model_build: out is NULL");
  *out = NULL;
  return build(spec, true, out, info);
}

cx_status cx_model_build_skeleton(const char *spec, cx_graph **out, cx_model_info *info) {
  if (!out) return cx_fail(CX_ERR_ARG, "cx_model_build_skeleton: out is NULL");
  *out = NULL;
  return build(spec, false, out, info);
}

cx_status cx_model_describe(const char *spec, cx_model_info *info) {
  return build(spec, false, NULL, info);
}
