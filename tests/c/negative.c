/*
 * Tests of the C API itself: NULL for every pointer parameter of every
 * function, too-small and zero-length buffers, invalid UTF-8, out-of-order
 * times, outcomes for no outstanding attempt or a wrong attempt id, the
 * version, the stable strings and the pure arithmetic. Every refusal must
 * come with its status and a last-error message naming it; nothing may crash
 * or leak (the suite runs under ASan+UBSan and valgrind).
 */
#include "harness.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>




static const char CREATE_OK[] =
    "{\"decision\":\"ALLOW\",\"reservation_id\":\"r-1\",\"affected_scopes\":[\"tenant:a\"],"
    "\"expires_at_ms\":1785585660000,\"remaining_ttl_ms\":61500}";

static lb_heartbeat *make(const char *prefix) {
    lb_config *cfg = NULL;
    lb_heartbeat *hb = NULL;
    EXPECT(lb_config_new(&cfg), LB_STATUS_OK);
    EXPECT(lb_config_set_ttl_ms(cfg, 60000), LB_STATUS_OK);
    EXPECT(lb_config_set_request_timeout_ms(cfg, 10000), LB_STATUS_OK);
    EXPECT(lb_config_set_key_prefix(cfg, prefix), LB_STATUS_OK);
    EXPECT(lb_heartbeat_new(cfg, &hb), LB_STATUS_OK);
    lb_config_free(cfg);
    return hb;
}

static void test_version_and_strings(void) {
    CHECK(strcmp(lb_version(), LEASEBEAT_VERSION) == 0);
    char v[64];
    snprintf(v, sizeof v, "%d.%d.%d", LEASEBEAT_VERSION_MAJOR, LEASEBEAT_VERSION_MINOR, LEASEBEAT_VERSION_PATCH);
    CHECK(strcmp(v, LEASEBEAT_VERSION) == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_OK), "ok") == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_INVALID_CONFIG), "invalid_config") == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_TIME_WENT_BACKWARDS), "time_went_backwards") == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_NULL_ARGUMENT), "null_argument") == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_PANIC), "panic") == 0);
    CHECK(strcmp(lb_status_str(-1), "unknown") == 0);
    CHECK(strcmp(lb_status_str(9999), "unknown") == 0);
    CHECK(strcmp(lb_stop_reason_str(LB_STOP_REASON_RETRY_WINDOW_EXHAUSTED), "retry_window_exhausted") == 0);
    CHECK(strcmp(lb_stop_reason_str(LB_STOP_REASON_CANCELLED), "cancelled") == 0);
    CHECK(strcmp(lb_stop_reason_str(LB_STOP_REASON_NONE), "none") == 0);
    CHECK(strcmp(lb_stop_reason_str(77), "unknown") == 0);
    const char *reasons[] = {"lease_too_short", "retry_window_exhausted", "no_progress", "throttled",
                             "expired", "finalized", "max_extensions", "tenant_closed", "not_found",
                             "rejected", "unexpected_status", "create_failed", "create_rejected",
                             "no_reservation", "cancelled"};
    for (int i = 0; i < 15; i++) CHECK(strcmp(lb_stop_reason_str(i + 1), reasons[i]) == 0);
    CHECK(strcmp(lb_next_str(LB_NEXT_EXTEND), "extend") == 0);
    CHECK(strcmp(lb_next_str(LB_NEXT_CREATE), "create") == 0);
    CHECK(strcmp(lb_next_str(LB_NEXT_STOP), "stop") == 0);
    CHECK(strcmp(lb_next_str(42), "unknown") == 0);
    CHECK(strcmp(lb_key_use_str(LB_KEY_USE_SAME), "same") == 0);
    CHECK(strcmp(lb_mode_str(LB_MODE_FALLBACK), "fallback") == 0);
    CHECK(strcmp(lb_outcome_str(LB_OUTCOME_TRANSPORT_FAILURE), "transport_failure") == 0);
    CHECK(strcmp(lb_outcome_str(-3), "unknown") == 0);
    CHECK(strcmp(lb_warning_str(LB_WARNING_EXTENSION_BUDGET_DEPLETING), "extension_budget_depleting") == 0);
    CHECK(strcmp(lb_warning_str(5), "unknown") == 0);
}

static void test_nulls(void) {
    lb_config *cfg = NULL;
    EXPECT(lb_config_new(&cfg), LB_STATUS_OK);
    lb_heartbeat *hb = make("n-");
    lb_config *c2 = NULL;
    lb_heartbeat *h2 = NULL;
    lb_action action;
    lb_stop_reason reason;
    lb_decision *d = NULL;
    char buf[64];
    uint8_t bytes[64];
    size_t need = 0;
    uint64_t u = 0;

    /* free(NULL) is a no-op */
    lb_config_free(NULL);
    lb_heartbeat_free(NULL);
    lb_decision_free(NULL);

    /* lb_last_error never replaces the message, not even with its own failure */
    CHECK(lb_last_error(buf, sizeof buf, NULL) == LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_config_new(NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_config_set_ttl_ms(NULL, 60000), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_config_set_request_timeout_ms(NULL, 1000), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_config_set_create_request(NULL, "{}"), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_config_set_create_request(cfg, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_config_set_key_prefix(NULL, "k-"), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_config_set_key_prefix(cfg, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_new(NULL, &h2), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_new(cfg, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_poll_action(NULL, &action), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_poll_action(hb, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_attempt_key(NULL, buf, sizeof buf, &need), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_attempt_key(hb, buf, sizeof buf, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_attempt_body(NULL, bytes, sizeof bytes, &need), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_attempt_body(hb, bytes, sizeof bytes, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_stop_reason(NULL, &reason), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_stop_reason(hb, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_last_decision(NULL, &d), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_last_decision(hb, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_handle_sent(NULL, 1, 0), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_handle_failure(NULL, 1, LB_FAILURE_TIMEOUT, 0), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_cancel(NULL, 0), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_handle_response(NULL, 1, 200, NULL, 0, NULL, 0, false, 0), LB_STATUS_NULL_ARGUMENT);

    /* handle_response: arrays may be NULL only with a length of 0 */
    EXPECT(lb_heartbeat_handle_sent(hb, 1, 1000), LB_STATUS_OK);
    lb_header good = {(const uint8_t *)"a", 1, (const uint8_t *)"b", 1};
    lb_header no_name = {NULL, 3, (const uint8_t *)"b", 1};
    lb_header no_value = {(const uint8_t *)"a", 1, NULL, 2};
    EXPECT(lb_heartbeat_handle_response(hb, 1, 200, NULL, 1, NULL, 0, false, 2000), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_handle_response(hb, 1, 200, &good, 1, NULL, 5, false, 2000), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_handle_response(hb, 1, 200, &no_name, 1, NULL, 0, false, 2000), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_handle_response(hb, 1, 200, &no_value, 1, NULL, 0, false, 2000), LB_STATUS_NULL_ARGUMENT);
    /* ... and the refused calls changed nothing: the attempt is still in flight */
    EXPECT(lb_heartbeat_poll_action(hb, &action), LB_STATUS_OK);
    CHECK(action.kind == LB_ACTION_KIND_AWAIT_OUTCOME && action.attempt_id == 1 && action.sent && action.sent_ns == 1000);
    EXPECT(lb_heartbeat_handle_response(hb, 1, 200, &good, 1, (const uint8_t *)CREATE_OK, strlen(CREATE_OK), false,
                                        1500000000),
           LB_STATUS_OK);
    EXPECT(lb_heartbeat_last_decision(hb, &d), LB_STATUS_OK);
    CHECK(d != NULL);

    lb_decision_info info;
    lb_num num;
    lb_warning w;
    EXPECT(lb_decision_get(NULL, &info), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_decision_get(d, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_decision_number(NULL, "rtt", &num), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_decision_number(d, NULL, &num), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_decision_number(d, "rtt", NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_decision_warning(NULL, 0, &w), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_decision_warning(d, 0, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_decision_reservation_id(NULL, buf, sizeof buf, &need), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_decision_reservation_id(d, buf, sizeof buf, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_decision_detail(NULL, buf, sizeof buf, &need), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_decision_detail(d, buf, sizeof buf, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_decision_json(NULL, buf, sizeof buf, &need), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_decision_json(d, buf, sizeof buf, NULL), LB_STATUS_NULL_ARGUMENT);

    lb_schedule sched;
    lb_window win;
    lb_cadence cad;
    lb_retry_after ra;
    lb_bytes val = {(const uint8_t *)"1", 1};
    lb_bytes null_val = {NULL, 1};
    EXPECT(lb_primary_schedule(1, true, 1, 1, 1, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_retry_window(1, 1, 1, 1, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_parse_retry_after(&val, 1, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_parse_retry_after(NULL, 1, &ra), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_parse_retry_after(&null_val, 1, &ra), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_attempt_budget(1, 1, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_safety_margin(1, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_retry_reserve(1, 1, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_ceil_ms(1, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_hold_cadence(1, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_fallback_cadence(1, 1, 1, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_fallback_skips(1, 1, 1, NULL), LB_STATUS_NULL_ARGUMENT);
    (void)sched;
    (void)win;
    (void)cad;
    (void)u;
    (void)c2;

    lb_decision_free(d);
    lb_heartbeat_free(hb);
    lb_config_free(cfg);
}

static void test_buffers(void) {
    lb_heartbeat *hb = make("buffer-key-");
    char buf[64];
    size_t need = 0;

    /* size query: NULL buffer, or a zero length */
    EXPECT(lb_heartbeat_attempt_key(hb, NULL, 0, &need), LB_STATUS_OK);
    CHECK(need == strlen("buffer-key-1") + 1);
    need = 0;
    EXPECT(lb_heartbeat_attempt_key(hb, buf, 0, &need), LB_STATUS_OK);
    CHECK(need == strlen("buffer-key-1") + 1);
    /* too small: the needed size is reported and the buffer is untouched */
    memset(buf, 'x', sizeof buf);
    need = 0;
    EXPECT(lb_heartbeat_attempt_key(hb, buf, 5, &need), LB_STATUS_BUFFER_TOO_SMALL);
    CHECK(need == 13 && buf[0] == 'x' && buf[4] == 'x');
    /* exactly the needed size (one short of it fails) */
    EXPECT(lb_heartbeat_attempt_key(hb, buf, 12, &need), LB_STATUS_BUFFER_TOO_SMALL);
    EXPECT(lb_heartbeat_attempt_key(hb, buf, 13, &need), LB_STATUS_OK);
    CHECK(strcmp(buf, "buffer-key-1") == 0);

    /* the body is bytes: the exact length, no NUL */
    uint8_t body[256];
    EXPECT(lb_heartbeat_attempt_body(hb, NULL, 0, &need), LB_STATUS_OK);
    size_t body_len = need;
    EXPECT(lb_heartbeat_attempt_body(hb, body, body_len - 1, &need), LB_STATUS_BUFFER_TOO_SMALL);
    CHECK(need == body_len);
    EXPECT(lb_heartbeat_attempt_body(hb, body, sizeof body, &need), LB_STATUS_OK);
    const char *want = "{\"idempotency_key\":\"buffer-key-1\",\"ttl_ms\":60000}";
    CHECK(need == strlen(want) && memcmp(body, want, need) == 0);

    /* the last-error message: query, too small (which keeps the message), copy */
    EXPECT(lb_heartbeat_attempt_key(hb, buf, 1, &need), LB_STATUS_BUFFER_TOO_SMALL);
    size_t msg_need = 0;
    CHECK(lb_last_error(NULL, 0, &msg_need) == LB_STATUS_OK && msg_need > 20);
    char small[4] = {'x', 'x', 'x', 'x'};
    size_t again = 0;
    CHECK(lb_last_error(small, sizeof small, &again) == LB_STATUS_BUFFER_TOO_SMALL && again == msg_need &&
          small[0] == 'x');
    char msg[256];
    CHECK(lb_last_error(msg, sizeof msg, &again) == LB_STATUS_OK && strlen(msg) + 1 == msg_need &&
          strncmp(msg, "buffer_too_small", 16) == 0);

    /* decision strings and JSON through too-small buffers */
    lb_decision *d = NULL;
    EXPECT(lb_heartbeat_cancel(hb, 5), LB_STATUS_OK);
    EXPECT(lb_heartbeat_last_decision(hb, &d), LB_STATUS_OK);
    EXPECT(lb_decision_json(d, NULL, 0, &need), LB_STATUS_OK);
    size_t json_need = need;
    EXPECT(lb_decision_json(d, buf, 3, &need), LB_STATUS_BUFFER_TOO_SMALL);
    CHECK(need == json_need);
    EXPECT(lb_decision_reservation_id(d, NULL, 0, &need), LB_STATUS_OK);
    CHECK(need == 1); /* no reservation: the empty string */
    EXPECT(lb_decision_detail(d, NULL, 0, &need), LB_STATUS_OK);
    size_t detail_need = need;
    EXPECT(lb_decision_detail(d, buf, 1, &need), LB_STATUS_BUFFER_TOO_SMALL);
    EXPECT(lb_decision_detail(d, buf, sizeof buf, &need), LB_STATUS_OK);
    CHECK(need == detail_need && strlen(buf) + 1 == need);
    lb_decision_free(d);
    lb_heartbeat_free(hb);
}

static void test_bad_input(void) {
    lb_config *cfg = NULL;
    lb_heartbeat *hb = (lb_heartbeat *)&cfg; /* a sentinel: must stay unchanged */
    lb_heartbeat *const sentinel = hb;
    EXPECT(lb_config_new(&cfg), LB_STATUS_OK);

    /* invalid UTF-8 */
    EXPECT(lb_config_set_key_prefix(cfg, "key-\xff-"), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_config_set_create_request(cfg, "{\"subject\":\"\xc3\x28\"}"), LB_STATUS_INVALID_UTF8);
    /* not a JSON object */
    EXPECT(lb_config_set_create_request(cfg, "[1,2]"), LB_STATUS_INVALID_CONFIG);
    EXPECT(lb_config_set_create_request(cfg, "{\"subject\":"), LB_STATUS_INVALID_CONFIG);
    /* the core refuses reserved members and bad ranges at creation */
    EXPECT(lb_config_set_create_request(cfg, "{\"ttl_ms\":5}"), LB_STATUS_OK);
    EXPECT(lb_heartbeat_new(cfg, &hb), LB_STATUS_INVALID_CONFIG);
    CHECK(hb == sentinel);
    EXPECT(lb_config_set_create_request(cfg, "{\"subject\":{\"tenant\":\"acme\"},\"action\":{\"kind\":\"llm\"}}"),
           LB_STATUS_OK);
    EXPECT(lb_config_set_ttl_ms(cfg, 999), LB_STATUS_OK);
    EXPECT(lb_heartbeat_new(cfg, &hb), LB_STATUS_INVALID_CONFIG);
    CHECK(hb == sentinel);
    EXPECT(lb_config_set_ttl_ms(cfg, 86400001), LB_STATUS_OK);
    EXPECT(lb_heartbeat_new(cfg, &hb), LB_STATUS_INVALID_CONFIG);
    EXPECT(lb_config_set_ttl_ms(cfg, 30000), LB_STATUS_OK);
    EXPECT(lb_config_set_request_timeout_ms(cfg, LB_INFINITE_MS), LB_STATUS_OK);
    /* a prefix with CR or LF could not be a header value (issue 25) */
    EXPECT(lb_config_set_key_prefix(cfg, "t\r\nX-Evil: 1\r\n"), LB_STATUS_OK);
    EXPECT(lb_heartbeat_new(cfg, &hb), LB_STATUS_INVALID_KEY);
    CHECK(hb == sentinel);
    CHECK(strstr(last_error_text(), "header value") != NULL);
    EXPECT(lb_config_set_key_prefix(cfg, "t\n"), LB_STATUS_OK);
    EXPECT(lb_heartbeat_new(cfg, &hb), LB_STATUS_INVALID_KEY);
    CHECK(hb == sentinel);
    EXPECT(lb_config_set_key_prefix(cfg, "t-"), LB_STATUS_OK);
    EXPECT(lb_heartbeat_new(cfg, &hb), LB_STATUS_OK);
    lb_config_free(cfg);

    /* the create body carries the configured members, sorted */
    uint8_t body[256];
    size_t need = 0;
    EXPECT(lb_heartbeat_attempt_body(hb, body, sizeof body, &need), LB_STATUS_OK);
    const char *want =
        "{\"action\":{\"kind\":\"llm\"},\"idempotency_key\":\"t-1\",\"subject\":{\"tenant\":\"acme\"},\"ttl_ms\":30000}";
    CHECK(need == strlen(want) && memcmp(body, want, need) == 0);

    lb_action a;
    EXPECT(lb_heartbeat_poll_action(hb, &a), LB_STATUS_OK);
    CHECK(a.kind == LB_ACTION_KIND_SEND && a.attempt_kind == LB_NEXT_CREATE && a.attempt_id == 1 && !a.due.infinite &&
          a.due.ns == 0 && a.key_use == LB_KEY_USE_NEW && a.key_index == 1 && !a.sent);

    /* outcomes before the attempt was sent, for a wrong id, twice sent */
    EXPECT(lb_heartbeat_handle_failure(hb, 1, LB_FAILURE_TIMEOUT, 10), LB_STATUS_NOT_SENT);
    EXPECT(lb_heartbeat_handle_sent(hb, 2, 10), LB_STATUS_NOT_OUTSTANDING);
    EXPECT(lb_heartbeat_handle_sent(hb, 1, 1000000), LB_STATUS_OK);
    EXPECT(lb_heartbeat_handle_sent(hb, 1, 1000000), LB_STATUS_ALREADY_SENT);
    EXPECT(lb_heartbeat_handle_response(hb, 99, 200, NULL, 0, NULL, 0, false, 2000000), LB_STATUS_NOT_OUTSTANDING);
    EXPECT(lb_heartbeat_handle_failure(hb, 0, LB_FAILURE_RESET, 2000000), LB_STATUS_NOT_OUTSTANDING);
    /* out-of-order time */
    EXPECT(lb_heartbeat_handle_response(hb, 1, 200, NULL, 0, NULL, 0, false, 999999), LB_STATUS_TIME_WENT_BACKWARDS);
    EXPECT(lb_heartbeat_cancel(hb, 5), LB_STATUS_TIME_WENT_BACKWARDS);
    /* bad status and failure values */
    EXPECT(lb_heartbeat_handle_response(hb, 1, 99, NULL, 0, NULL, 0, false, 2000000), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_heartbeat_handle_response(hb, 1, 1000, NULL, 0, NULL, 0, false, 2000000), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_heartbeat_handle_response(hb, 1, 65536 + 200, NULL, 0, NULL, 0, false, 2000000),
           LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_heartbeat_handle_failure(hb, 1, 7, 2000000), LB_STATUS_INVALID_ARGUMENT);
    /* nothing changed: no decision yet */
    lb_decision *d = (lb_decision *)&a;
    EXPECT(lb_heartbeat_last_decision(hb, &d), LB_STATUS_OK);
    CHECK(d == NULL);

    /* a create timeout: one immediate retry with the same key and body */
    EXPECT(lb_heartbeat_handle_failure(hb, 1, LB_FAILURE_TIMEOUT, 2000000), LB_STATUS_OK);
    EXPECT(lb_heartbeat_poll_action(hb, &a), LB_STATUS_OK);
    CHECK(a.kind == LB_ACTION_KIND_SEND && a.attempt_kind == LB_NEXT_CREATE && a.attempt_id == 2 &&
          a.key_use == LB_KEY_USE_SAME && a.key_index == 1);
    EXPECT(lb_heartbeat_handle_failure(hb, 1, LB_FAILURE_TIMEOUT, 2000000), LB_STATUS_NOT_OUTSTANDING);
    EXPECT(lb_heartbeat_handle_sent(hb, 2, 3000000), LB_STATUS_OK);
    EXPECT(lb_heartbeat_handle_response(hb, 2, 200, NULL, 0, (const uint8_t *)CREATE_OK, strlen(CREATE_OK), true,
                                        4000000),
           LB_STATUS_OK);
    EXPECT(lb_heartbeat_last_decision(hb, &d), LB_STATUS_OK);
    lb_decision_info info;
    EXPECT(lb_decision_get(d, &info), LB_STATUS_OK);
    /* unknown timing: an immediate beat with a new key; unbounded budget */
    CHECK(info.next == LB_NEXT_EXTEND && !info.at.infinite && info.at.ns == 4000000 &&
          info.key_use == LB_KEY_USE_NEW && info.key_index == 2 && info.mode == LB_MODE_PRIMARY &&
          info.outcome == LB_OUTCOME_SUCCESS && info.has_reservation_id &&
          info.numbers.attempt_budget.kind == LB_NUM_KIND_POS_INF &&
          info.numbers.next_delay.kind == LB_NUM_KIND_FINITE && info.numbers.next_delay.magnitude == 0 &&
          info.numbers.grant.kind == LB_NUM_KIND_ABSENT);
    char rid[16];
    size_t need_rid = 0;
    EXPECT(lb_decision_reservation_id(d, rid, sizeof rid, &need_rid), LB_STATUS_OK);
    CHECK(strcmp(rid, "r-1") == 0 && need_rid == 4);
    lb_num n;
    EXPECT(lb_decision_number(d, "attempt_budget", &n), LB_STATUS_OK);
    CHECK(n.kind == LB_NUM_KIND_POS_INF);
    EXPECT(lb_decision_number(d, "no_such_number", &n), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_decision_number(d, "rtt\xff", &n), LB_STATUS_INVALID_UTF8);
    lb_warning w;
    EXPECT(lb_decision_warning(d, 0, &w), LB_STATUS_INVALID_ARGUMENT);
    lb_decision_free(d);

    /* after a stop: every event is refused, the attempt is gone */
    EXPECT(lb_heartbeat_cancel(hb, 5000000), LB_STATUS_OK);
    EXPECT(lb_heartbeat_cancel(hb, 6000000), LB_STATUS_STOPPED);
    EXPECT(lb_heartbeat_handle_sent(hb, 3, 6000000), LB_STATUS_STOPPED);
    EXPECT(lb_heartbeat_handle_failure(hb, 3, LB_FAILURE_CONNECT, 6000000), LB_STATUS_STOPPED);
    size_t need2 = 0;
    EXPECT(lb_heartbeat_attempt_key(hb, NULL, 0, &need2), LB_STATUS_STOPPED);
    EXPECT(lb_heartbeat_attempt_body(hb, NULL, 0, &need2), LB_STATUS_STOPPED);
    lb_stop_reason r = LB_STOP_REASON_NONE;
    EXPECT(lb_heartbeat_stop_reason(hb, &r), LB_STATUS_OK);
    CHECK(r == LB_STOP_REASON_CANCELLED);
    EXPECT(lb_heartbeat_poll_action(hb, &a), LB_STATUS_OK);
    CHECK(a.kind == LB_ACTION_KIND_STOP && a.stop_reason == LB_STOP_REASON_CANCELLED && a.attempt_id == 0);
    lb_heartbeat_free(hb);
}

static void test_arith(void) {
    lb_schedule s;
    EXPECT(lb_primary_schedule(61500, true, 1500, 10000, 1500, &s), LB_STATUS_OK);
    CHECK(s.lead_floor == 60000 && s.attempt_budget == 10000 && s.safety_margin == 3000 && s.retry_reserve == 23000 &&
          s.next_delay == 37000);
    EXPECT(lb_primary_schedule(60000, true, 0, 30000, 0, &s), LB_STATUS_OK);
    CHECK(s.retry_reserve == 61000 && s.next_delay == 0);
    EXPECT(lb_primary_schedule(60000, false, 12345, LB_INFINITE_MS, 0, &s), LB_STATUS_OK);
    CHECK(s.lead_floor == 0 && s.attempt_budget == LB_INFINITE_MS && s.retry_reserve == LB_INFINITE_MS &&
          s.next_delay == 0);

    lb_window w;
    EXPECT(lb_retry_window(60000, 45000, 7000, 1000, &w), LB_STATUS_OK);
    CHECK(w.lead == 15000 && w.window.kind == LB_NUM_KIND_FINITE && !w.window.negative && w.window.magnitude == 7000 &&
          w.has_delay && w.delay == 3750);
    EXPECT(lb_retry_window(60000, 52001, 7000, 1000, &w), LB_STATUS_OK);
    CHECK(w.window.kind == LB_NUM_KIND_FINITE && w.window.negative && w.window.magnitude == 1 && !w.has_delay);
    EXPECT(lb_retry_window(60000, 0, LB_INFINITE_MS, 1000, &w), LB_STATUS_OK);
    CHECK(w.window.kind == LB_NUM_KIND_NEG_INF && !w.has_delay);
    /* a window below INT64_MIN keeps its exact value */
    EXPECT(lb_retry_window(0, 0, LB_INFINITE_MS - 1, 0, &w), LB_STATUS_OK);
    CHECK(w.window.kind == LB_NUM_KIND_FINITE && w.window.negative && w.window.magnitude == LB_INFINITE_MS - 1);

    lb_retry_after ra;
    lb_bytes one[1] = {{(const uint8_t *)" 2 ", 3}};
    EXPECT(lb_parse_retry_after(one, 1, &ra), LB_STATUS_OK);
    CHECK(ra.status == LB_RETRY_AFTER_STATUS_OK && ra.ms == 2000);
    lb_bytes plus[1] = {{(const uint8_t *)"+3", 2}};
    EXPECT(lb_parse_retry_after(plus, 1, &ra), LB_STATUS_OK);
    CHECK(ra.status == LB_RETRY_AFTER_STATUS_INVALID);
    lb_bytes two[2] = {{(const uint8_t *)"1", 1}, {(const uint8_t *)"2", 1}};
    EXPECT(lb_parse_retry_after(two, 2, &ra), LB_STATUS_OK);
    CHECK(ra.status == LB_RETRY_AFTER_STATUS_MULTIPLE);
    lb_bytes big[1] = {{(const uint8_t *)"18446744073709552", 17}};
    EXPECT(lb_parse_retry_after(big, 1, &ra), LB_STATUS_OK);
    CHECK(ra.status == LB_RETRY_AFTER_STATUS_OVERFLOW);
    EXPECT(lb_parse_retry_after(NULL, 0, &ra), LB_STATUS_OK);
    CHECK(ra.status == LB_RETRY_AFTER_STATUS_MISSING);

    uint64_t v = 0;
    EXPECT(lb_attempt_budget(10000, 1500, &v), LB_STATUS_OK);
    CHECK(v == 10000);
    EXPECT(lb_attempt_budget(2000, 1500, &v), LB_STATUS_OK);
    CHECK(v == 3000);
    EXPECT(lb_attempt_budget(LB_INFINITE_MS, 0, &v), LB_STATUS_OK);
    CHECK(v == LB_INFINITE_MS);
    EXPECT(lb_safety_margin(1500, &v), LB_STATUS_OK);
    CHECK(v == 3000);
    EXPECT(lb_retry_reserve(10000, 3000, &v), LB_STATUS_OK);
    CHECK(v == 23000);
    EXPECT(lb_retry_reserve(LB_INFINITE_MS, 3000, &v), LB_STATUS_OK);
    CHECK(v == LB_INFINITE_MS);
    EXPECT(lb_ceil_ms(1500000001, &v), LB_STATUS_OK);
    CHECK(v == 1501);
    EXPECT(lb_hold_cadence(60000, &v), LB_STATUS_OK);
    CHECK(v == 30000);
    EXPECT(lb_hold_cadence(1000, &v), LB_STATUS_OK);
    CHECK(v == 1000);
    lb_cadence c;
    EXPECT(lb_fallback_cadence(60000, 30000, 60000, &c), LB_STATUS_OK);
    CHECK(c.cadence == 30000 && !c.hold);
    EXPECT(lb_fallback_cadence(30000, 30000, 60000, &c), LB_STATUS_OK);
    CHECK(c.hold);
    EXPECT(lb_fallback_cadence(10000, 30000, 60000, &c), LB_STATUS_OK);
    CHECK(c.cadence == 5000 && !c.hold);
    EXPECT(lb_fallback_cadence(INT64_MIN, UINT64_MAX, UINT64_MAX, &c), LB_STATUS_OK);
    CHECK(c.hold);
    EXPECT(lb_fallback_skips(100000, 20000, 10000, &v), LB_STATUS_OK);
    CHECK(v == 7);
    EXPECT(lb_fallback_skips(INT64_MAX, 1, 1000, &v), LB_STATUS_OK);
    EXPECT(lb_fallback_skips(10000, 20000, 0, &v), LB_STATUS_OK);
    CHECK(v == 0);
}

/* A heartbeat with random (UUIDv4) keys: its first attempt's key. */
static void random_key(char *buf, size_t len) {
    lb_config *cfg = NULL;
    lb_heartbeat *hb = NULL;
    size_t need = 0;
    buf[0] = '\0';
    if (lb_config_new(&cfg) != LB_STATUS_OK) return;
    lb_config_set_ttl_ms(cfg, 60000);
    lb_config_set_request_timeout_ms(cfg, 10000);
    if (lb_heartbeat_new(cfg, &hb) == LB_STATUS_OK) {
        lb_heartbeat_attempt_key(hb, buf, len, &need);
        lb_heartbeat_free(hb);
    }
    lb_config_free(cfg);
}

/* A forked child never draws its parent's keys: the library reseeds the
 * per-thread generator in the child (pthread_atfork). Without that, parent and
 * child would make the same key right after the fork. */
static void test_fork_reseeds_random_keys(void) {
    char before[64], parent[64], child[64] = {0};
    random_key(before, sizeof before); /* the generator is in use before the fork */
    CHECK(strlen(before) == 36);
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char mine[64];
        random_key(mine, sizeof mine);
        ssize_t w = write(fds[1], mine, strlen(mine) + 1);
        _exit(w > 0 ? 0 : 1);
    }
    random_key(parent, sizeof parent);
    close(fds[1]);
    ssize_t n = 0, r;
    while (n < (ssize_t)sizeof child - 1 && (r = read(fds[0], child + n, sizeof child - 1 - (size_t)n)) > 0) n += r;
    close(fds[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(strlen(child) == 36 && strlen(parent) == 36);
    check(strcmp(parent, child) != 0, "line %d: the forked child drew its parent's key %s", __LINE__, parent);
    CHECK(strcmp(before, parent) != 0);
}

void run_api_tests(void) {
    test_version_and_strings();
    test_nulls();
    test_buffers();
    test_bad_input();
    test_arith();
    test_fork_reseeds_random_keys();
}
