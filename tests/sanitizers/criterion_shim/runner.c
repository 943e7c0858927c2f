/* main() of the Criterion stand-in (see criterion/criterion.h): runs each registered test
 * in a forked child; arguments that do not start with '-' select tests by substring. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "criterion/criterion.h"

enum { MAX_TESTS = 256 };
static struct {
  const char *suite, *name;
  void (*fn)(void);
} tests[MAX_TESTS];
static int num_tests, expect_failures;

void shim_register(const char *suite, const char *name, void (*fn)(void)) {
  if (num_tests < MAX_TESTS) {
    tests[num_tests].suite = suite;
    tests[num_tests].name = name;
    tests[num_tests].fn = fn;
    ++num_tests;
  }
}

void shim_fail(const char *file, int line, int fatal, const char *cond, const char *fmt, ...) {
  fprintf(stderr, "  %s:%d: %s failed", file, line, cond);
  if (fmt[0]) {
    va_list ap;
    va_start(ap, fmt);
    fputs(": ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
  }
  fputc('\n', stderr);
  ++expect_failures;
  if (fatal) _exit(1);
}

void shim_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static int selected(int argc, char **argv, const char *suite, const char *name) {
  int any = 0;
  char full[512];
  snprintf(full, sizeof full, "%s::%s", suite, name);
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    any = 1;
    if (strstr(full, argv[i])) return 1;
  }
  return !any;
}

int main(int argc, char **argv) {
  int ran = 0, failed = 0;
  for (int i = 0; i < num_tests; ++i) {
    if (!selected(argc, argv, tests[i].suite, tests[i].name)) continue;
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
      tests[i].fn();
      _exit(expect_failures ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    const int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    fprintf(stderr, "[%s] %s::%s\n", ok ? "PASS" : "FAIL", tests[i].suite, tests[i].name);
    ++ran;
    failed += !ok;
  }
  fprintf(stderr, "Synthesis: Tested: %d | Passing: %d | Failing: %d\n", ran, ran - failed, failed);
  return failed != 0 || ran == 0;
}
