#ifndef CX_TESTS_MODEL_COMPARE_H
#define CX_TESTS_MODEL_COMPARE_H

/* Whole-model checks of a compile-time pass (layout, fusion): a zoo model compiled with the pass
 * and without it (an environment variable set while compiling) must give the same loss and
 * parameter gradients after one training step, and the same logits in inference. */

#include <stdbool.h>
#include <stdint.h>

#include "../core/program.h"

/* The model with labels and a cross-entropy loss (train) or alone, compiled with env=value set
 * (env NULL: nothing set), a fixed input fed, one step run. NULL after printing a failure. */
cx_program *mc_run(const char *spec, bool train, const char *env, const char *value,
                   int64_t batch);
/* The same in another precision. */
cx_program *mc_run_as(const char *spec, bool train, const char *env, const char *value,
                      int64_t batch, cx_precision precision);

/* Compares loss and every parameter gradient of two training programs (b the reference),
 * printing the errors; gradients relative to max(the tensor's largest, 1e-3 of the model's
 * largest gradient). Returns the number of failures (error above tol). */
int mc_compare_training(const char *spec, cx_program *a, cx_program *b, double tol);

/* The same for the logits of two inference programs. */
int mc_compare_inference(const char *spec, cx_program *a, cx_program *b, double tol);

#endif
