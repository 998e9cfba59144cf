#ifndef CX_PROGRAM_INPUT_H
#define CX_PROGRAM_INPUT_H

#include <stddef.h>

#include "program.h"

/* The one pad-and-copy into a program input by name (evaluation batches, teacher logits and
 * features, arrays from files; the trainer, whose batches are always whole, writes its inputs
 * with cx_program_write): `bytes` from src at the start of input `name`, zeros after them. With
 * bytes = the input's size it is a plain copy; with the first n samples of a batch
 * (n · bytes per sample) it pads a short last batch, which changes nothing of the first n rows
 * where the program works per sample (inference, or a loss the caller masks). The input is
 * written in one copy of the whole tensor, the padded batch staged in host memory when short.
 * Fails naming the input when the program has none of that name or src does not fit. */
cx_status cx_program_write_input(cx_program *p, const char *name, const void *src, size_t bytes);

#endif
