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

/* ----- shared helpers of replay.c (exact numbers, canonical JSON) ----- */

#include <stdint.h>

typedef struct {
    char *data;
    size_t len;
    size_t cap;
} sbuf;

void sb_put(sbuf *b, const char *s, size_t n);
void sb_puts(sbuf *b, const char *s);
char *dup_str(const char *s);
/** Rewrites number tokens outside strings into marked strings (see replay.c). */
char *mark_numbers(const char *text);
int is_num(const struct cJSON *item);
const char *num_text(const struct cJSON *item);
int is_str(const struct cJSON *item);
int parse_u64(const char *s, uint64_t *out);
/** Scenario milliseconds to nanoseconds, exact. */
int parse_time_ns(const struct cJSON *item, uint64_t *out);
void ns_to_text(lb_time t, char *buf, size_t len);
/** serde_json's compact form of a value: members sorted, numbers verbatim. */
void ser(sbuf *b, const struct cJSON *v);
/** The canonical text of a JSON text, with `id` and `step` added when id is not NULL. */
char *canonical(const char *text, const char *id, int step);

typedef struct {
    char **lines;
    size_t count;
} line_list;

/** Every emitted decision of the replay, canonical, for the Rust comparison. */
extern line_list g_emitted;
void lines_push(line_list *l, char *line);

/** Replays one settlement vector (settle.c); `text` is the file's raw text. */
int settle_replay(const struct cJSON *root, const char *text, const char *id, char *why, size_t why_len);

/** The settlement API's negative tests (settle.c). */
void run_settle_api_tests(void);

/** The journal tests (journal.c): each in its own temporary directory. */
void run_journal_tests(void);

/** The driver's settlement API tests (driver_settle.c); the live ones only
 *  with a server URL. */
void run_driver_settle_tests(const char *server_url);

#endif
