/* A minimal stand-in for Criterion's <criterion/criterion.h>: Test(), cr_assert*,
 * cr_expect*, cr_log_info. scripts/tsan.sh builds the concurrency tests against it,
 * because libcriterion itself crashes under ThreadSanitizer. runner.c holds main(): it
 * runs every registered test in a forked child, like Criterion. Only what the tests
 * built that way use is here. */
#ifndef BSPA_CRITERION_SHIM_H
#define BSPA_CRITERION_SHIM_H

#include <stdio.h>

void shim_register(const char *suite, const char *name, void (*fn)(void));
void shim_fail(const char *file, int line, int fatal, const char *cond, const char *fmt, ...);
void shim_log(const char *fmt, ...);

#define Test(suite, name, ...)                                               \
  static void suite##_##name##_impl(void);                                   \
  __attribute__((constructor)) static void suite##_##name##_register(void) { \
    shim_register(#suite, #name, suite##_##name##_impl);                     \
  }                                                                          \
  static void suite##_##name##_impl(void)

#define SHIM_CHECK(fatal, cond, ...) ((cond) ? (void)0 : shim_fail(__FILE__, __LINE__, (fatal), #cond, "" __VA_ARGS__))

#define cr_assert(cond, ...) SHIM_CHECK(1, cond, __VA_ARGS__)
#define cr_expect(cond, ...) SHIM_CHECK(0, cond, __VA_ARGS__)
#define cr_assert_fail(...) shim_fail(__FILE__, __LINE__, 1, "cr_assert_fail", "" __VA_ARGS__)
#define cr_assert_eq(a, b, ...) SHIM_CHECK(1, (a) == (b), __VA_ARGS__)
#define cr_assert_neq(a, b, ...) SHIM_CHECK(1, (a) != (b), __VA_ARGS__)
#define cr_assert_lt(a, b, ...) SHIM_CHECK(1, (a) < (b), __VA_ARGS__)
#define cr_assert_leq(a, b, ...) SHIM_CHECK(1, (a) <= (b), __VA_ARGS__)
#define cr_assert_gt(a, b, ...) SHIM_CHECK(1, (a) > (b), __VA_ARGS__)
#define cr_assert_geq(a, b, ...) SHIM_CHECK(1, (a) >= (b), __VA_ARGS__)
#define cr_assert_null(p, ...) SHIM_CHECK(1, (p) == NULL, __VA_ARGS__)
#define cr_assert_not_null(p, ...) SHIM_CHECK(1, (p) != NULL, __VA_ARGS__)
#define cr_expect_eq(a, b, ...) SHIM_CHECK(0, (a) == (b), __VA_ARGS__)
#define cr_expect_neq(a, b, ...) SHIM_CHECK(0, (a) != (b), __VA_ARGS__)
#define cr_expect_lt(a, b, ...) SHIM_CHECK(0, (a) < (b), __VA_ARGS__)
#define cr_expect_leq(a, b, ...) SHIM_CHECK(0, (a) <= (b), __VA_ARGS__)
#define cr_expect_gt(a, b, ...) SHIM_CHECK(0, (a) > (b), __VA_ARGS__)
#define cr_expect_geq(a, b, ...) SHIM_CHECK(0, (a) >= (b), __VA_ARGS__)
#define cr_expect_null(p, ...) SHIM_CHECK(0, (p) == NULL, __VA_ARGS__)
#define cr_log_info(...) shim_log(__VA_ARGS__)

#endif
