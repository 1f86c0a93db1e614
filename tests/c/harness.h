/* Shared declarations of the C test program (replay.c, negative.c, driver.c, adopt.c). */
#ifndef LEASEBEAT_TEST_HARNESS_H
#define LEASEBEAT_TEST_HARNESS_H

#include <leasebeat.h>

struct cJSON;

/** Counts a passed check, or prints a failure line and counts it. */
void check(int ok, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/** The thread's last error message (lb_last_error), in a static buffer. */
const char *last_error_text(void);

/** A call's status: OK, or the expected refusal whose message starts with
 *  the status name and says more. */
void expect_status(lb_status got, lb_status want, const char *what, int line);

#define EXPECT(call, want) expect_status((call), (want), #call, __LINE__)
#define CHECK(cond) check((cond), "line %d: %s", __LINE__, #cond)

/** Response headers built from a vector. */
typedef struct {
    lb_header *items;
    size_t count;
} header_list;

void headers_clear(header_list *h);
int headers_from_json(header_list *h, const struct cJSON *obj);

/** The negative, buffer, version and arithmetic tests (negative.c). */
void run_api_tests(void);

/** The driver tests (driver.c); the live ones only with a server URL. */
void run_driver_tests(const char *server_url, const char *fallback_url);

/** The adopt and decision-instants tests (adopt.c); the live one only with a
 *  server URL and the server's --log file. */
void run_adopt_tests(const char *server_url, const char *server_log);

#endif
