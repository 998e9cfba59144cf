#include "ref.h"

const cx_ref_entry cx_ref_linear[] = {{NULL, NULL}};
