#ifndef CX_CLI_ONNX_COMMON_H
#define CX_CLI_ONNX_COMMON_H

#include <stdio.h>

#include "../core/graph.h"
#include "../import/onnx.h"
#include "commands.h"

/* Helpers shared by the ONNX commands (inspect, infer, convert). */

/* Prints "compress <command>: <the last error>" on stderr and returns 1. */
int cx_cli_fail(const cx_command *c);
/* A shape as text "[N,3,224,224]" or JSON ["N",3,224,224]: -1 is the batch N, -2 a dimension
 * that depends on the batch otherwise ("?"). */
void cx_cli_shape(FILE *f, const cx_shape *s, bool json);
/* The text form into buf (CX_SHAPE_STR bytes); returns buf. */
const char *cx_cli_shape_str(const cx_shape *s, char *buf);
/* A model from an ONNX file or, when no such file exists, a built-in architecture spec such as
 * "mobilenet_v2:width=0.5,classes=10,input=1x28x28" (models/zoo.h). */
cx_status cx_cli_load_model(const char *src, cx_graph **g, cx_onnx_info *info);
/* Graph inputs (kind INPUT) in order: fills ids (up to max) and returns the count. */
int cx_cli_graph_inputs(const cx_graph *g, int *ids, int max);

#endif
