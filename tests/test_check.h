/* Checks for the tests that do not run under cmocka (multi-process drivers,
 * replays): one definition instead of a private macro per file.
 *
 *   EXPECT(cond, fmt, ...)   on failure prints "FAIL file:line: cond: msg"
 *                            and counts it in test_failures; goes on
 *   CHECK(cond, fmt, ...)    the same, then returns from the calling void
 *                            function (later steps depend on this one)
 *   EXPECT_EQ(a, b)          integers, prints both values
 *   CHECK_RC(expr, want)     a crescent status, prints both with cr_strerror
 *
 * main() ends with `return test_failures ? 1 : 0;`. One counter per test
 * program (static: each program is one translation unit of checks).
 */
#ifndef CR_TESTS_TEST_CHECK_H
#define CR_TESTS_TEST_CHECK_H

#include <stdio.h>

#include "crescent/common.h"

static int test_failures;

#define TEST_FAIL_(cond_text, ...)                                                                 \
    do {                                                                                           \
        fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, cond_text);                        \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        test_failures++;                                                                           \
    } while (0)

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            TEST_FAIL_(#cond, __VA_ARGS__);                                                        \
    } while (0)

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            TEST_FAIL_(#cond, __VA_ARGS__);                                                        \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define EXPECT_EQ(a, b)                                                                            \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        EXPECT(a_ == b_, "expected %lld, got %lld", b_, a_);                                       \
    } while (0)

#define CHECK_RC(expr, want)                                                                       \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        CHECK(rc_ == (want), "expected %d (%s), got %d (%s)", (int)(want), cr_strerror(want),      \
              rc_, cr_strerror(rc_));                                                              \
    } while (0)

#endif
