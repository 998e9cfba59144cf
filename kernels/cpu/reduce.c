#include "cpu.h"

const cx_kernel cx_cpu_reduce[] = {{NULL, NULL, NULL, NULL}};
