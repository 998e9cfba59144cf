#include "ref.h"

const cx_ref_entry cx_ref_reduce[] = {{NULL, NULL}};
