#ifndef CX_MODELS_ZOO_H
#define CX_MODELS_ZOO_H

/* Built-in architectures by name: the torchvision ResNets, MobileNetV2/V3 and EfficientNet B0-B3,
 * and the CIFAR ResNets, built with the graph-builder API. A spec is
 *
 *     name[:key=value,...]      e.g. "mobilenet_v2:width=0.5,classes=10,input=1x28x28"
 *
 * with keys (each architecture takes the subset cx_model_arch.keys lists):
 *     classes=N        output classes (default 1000, CIFAR ResNets 10)
 *     input=CxHxW      input channels and size (default 3x224x224, CIFAR ResNets 3x32x32,
 *                      EfficientNet B1-B3 at torchvision's crop: 240, 288, 300)
 *     width=F          channel multiplier, F > 0 (MobileNets)
 *     depth=N          ResNet depth with the name "resnet": 20, 32, 44, 56, 110, 18, 34, 50, 101
 *     small_input=B    MobileNetV2 stem with stride 1 (default: on when the input is 32 px or less)
 *     dropout=F        classifier dropout in [0, 1) (default torchvision's)
 *     stochastic_depth=F  EfficientNet's largest drop-path probability in [0, 1) (default 0.2)
 *     seed=N           initialisation seed (default 0)
 *
 * The graph has the input "input" [-1, C, H, W] f32 and the output "logits" [-1, classes].
 * Parameters carry torchvision's state_dict names ("features.0.0.weight", "layer1.0.bn1.bias");
 * BatchNorm weight and bias are PARAMs, running_mean and running_var STATE values (torchvision's
 * num_batches_tracked counters have no counterpart). Initialisation follows torchvision. */

#include <stdint.h>

#include "../core/graph.h"
#include "../core/status.h"

typedef struct cx_model_info {
  char arch[32];                   /* canonical name: "resnet56", "mobilenet_v2" */
  int64_t channels, height, width; /* the input */
  int64_t classes;
  int64_t params;                  /* trainable values (what torchvision's parameters() holds) */
  int64_t macs;                    /* Conv and Gemm multiply-accumulates for one image */
  int64_t stride;                  /* input pixels per pixel of the last feature map */
} cx_model_info;

/* Builds the architecture `spec` names. On error nothing is returned in *out and the message lists
 * what is valid (names, keys, ranges). info may be NULL. */
cx_status cx_model_build(const char *spec, cx_graph **out, cx_model_info *info);
/* The same graph with the conv and linear weights left at zero, drawing no random numbers: a
 * container to load trained weights into by name, or a quick way to count and check shapes. */
cx_status cx_model_build_skeleton(const char *spec, cx_graph **out, cx_model_info *info);
/* Fills info without keeping a graph (listings). */
cx_status cx_model_describe(const char *spec, cx_model_info *info);

/* Copies into every PARAM and STATE value of `model` the initializer of the same name and shape in
 * `from` (a torchvision model imported from ONNX with BatchNormalization kept, or another build),
 * whatever its kind there. Values of `from` that `model` lacks are ignored; a value of `model`
 * missing from `from`, or of another shape or dtype, is an error naming it (and how many more). */
cx_status cx_model_load(cx_graph *model, const cx_graph *from);

typedef struct cx_model_arch {
  const char *name;
  const char *summary;
  const char *keys; /* the keys it takes: "classes, input, seed" */
} cx_model_arch;

/* The architectures, in listing order; NULL-terminated. */
const cx_model_arch *const *cx_model_archs(void);

#endif
