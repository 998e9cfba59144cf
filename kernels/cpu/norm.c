#include "cpu.h"

const cx_kernel cx_cpu_norm[] = {{NULL, NULL, NULL, NULL}};
