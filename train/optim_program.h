#ifndef CX_OPTIM_PROGRAM_H
#define CX_OPTIM_PROGRAM_H

#include "../core/program.h"
#include "optim.h"

/* An optimizer over every parameter of a training program, stepping on the program's own
 * gradients, on its backend and stream: the common case (tests, the demo) without the trainer's
 * accumulation buffers. */
cx_status cx_optimizer_for_program(const cx_optim_config *c, cx_program *p, cx_optimizer **out);
cx_status cx_optimizer_step_program(cx_optimizer *o, cx_program *p, float lr);

#endif
