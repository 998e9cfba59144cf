#include "cpu.h"

const cx_kernel cx_cpu_pool[] = {{NULL, NULL, NULL, NULL}};
