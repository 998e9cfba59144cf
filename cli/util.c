#include <string.h>

#include "commands.h"

bool cx_cli_wants_help(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return true;
  return false;
}

void cx_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c == '\n') fputs("\\n", f);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

int cx_cli_usage_error(const cx_command *c, const char *fmt, const char *arg) {
  fprintf(stderr, "compress %s: ", c->name);
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n\n%s", c->usage);
  return 2;
}
