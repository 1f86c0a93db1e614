/*
 * Tests of the HTTP driver through the C ABI (lb_driver_*, lb_event_*,
 * lb_decision_clone, lb_heartbeat_new_for_reservation): NULL for every
 * pointer parameter, bad URLs, zero workers, unbounded budgets, unknown lease
 * ids, double cancels, calls after shutdown and from inside the callback, a
 * server that refuses connections, and (with --server URL, a live
 * `leasebeat serve`) create, extend, heartbeat of an existing reservation,
 * cancel, release, commit and lb_driver_free() with leases running.
 *
 * Events are recorded by the callback (on the driver's dispatcher thread)
 * under a mutex; only the main thread calls check(). Waits are bounded (no
 * hang) but nothing asserts on elapsed time.
 */
#define _POSIX_C_SOURCE 200809L

#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WAIT_SECONDS 60
#define SECRET_KEY "sekrit-KEY-4242"




/* ----- the event recorder ----- */

typedef struct {
    lb_event_info info;
    char rid[160];
    char json[2048];
    char error[512];
    lb_decision *kept;   /* a clone of the lent decision, owned by the test */
    char problem[256];   /* empty when every accessor behaved */
} rec;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rec *items;
    size_t count;
    size_t cap;
    /* set by the test: the callback calls lb_driver_shutdown/free on it once */
    lb_driver *self;
    int tried_in_callback;
    lb_status shutdown_in_callback;
    char free_in_callback_error[256];
} recorder;

static void recorder_init(recorder *r) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
}

static void recorder_free(recorder *r) {
    for (size_t i = 0; i < r->count; i++) lb_decision_free(r->items[i].kept);
    free(r->items);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

static void on_event(void *user_data, const lb_event *ev) {
    recorder *r = user_data;
    rec x;
    memset(&x, 0, sizeof x);
    size_t need = 0;
    const lb_decision *d = NULL;
    lb_event_info probe;
    if (lb_event_get(ev, &x.info) != LB_STATUS_OK) snprintf(x.problem, sizeof x.problem, "lb_event_get failed");
    else if (lb_event_get(ev, NULL) != LB_STATUS_NULL_ARGUMENT)
        snprintf(x.problem, sizeof x.problem, "lb_event_get(ev, NULL) accepted");
    else if (lb_event_get(NULL, &probe) != LB_STATUS_NULL_ARGUMENT)
        snprintf(x.problem, sizeof x.problem, "lb_event_get(NULL, ..) accepted");
    else if (lb_event_decision(ev, &d) != LB_STATUS_OK)
        snprintf(x.problem, sizeof x.problem, "lb_event_decision failed");
    else if ((d != NULL) != (x.info.kind == LB_EVENT_KIND_DECISION))
        snprintf(x.problem, sizeof x.problem, "decision pointer %p for kind %s", (const void *)d,
                 lb_event_kind_str(x.info.kind));
    else if (lb_event_decision(ev, NULL) != LB_STATUS_NULL_ARGUMENT)
        snprintf(x.problem, sizeof x.problem, "lb_event_decision(ev, NULL) accepted");
    else if (lb_event_reservation_id(ev, x.rid, sizeof x.rid, &need) != LB_STATUS_OK)
        snprintf(x.problem, sizeof x.problem, "lb_event_reservation_id failed");
    else if ((need > 1) != x.info.has_reservation_id)
        snprintf(x.problem, sizeof x.problem, "reservation id size %zu vs has_reservation_id", need);
    else if (lb_event_reservation_id(ev, x.rid, sizeof x.rid, NULL) != LB_STATUS_NULL_ARGUMENT)
        snprintf(x.problem, sizeof x.problem, "lb_event_reservation_id(.., NULL) accepted");
    else if (lb_event_error_message(ev, x.error, sizeof x.error, &need) != LB_STATUS_OK)
        snprintf(x.problem, sizeof x.problem, "lb_event_error_message failed");
    else if ((need > 1) != (x.info.kind == LB_EVENT_KIND_ERROR))
        snprintf(x.problem, sizeof x.problem, "error message size %zu for kind %s", need,
                 lb_event_kind_str(x.info.kind));
    else if (x.info.has_reservation_id && need > 0 &&
             lb_event_reservation_id(ev, x.rid, 1, &need) != LB_STATUS_BUFFER_TOO_SMALL)
        snprintf(x.problem, sizeof x.problem, "a 1-byte buffer was not too small");
    if (!x.problem[0] && d) {
        lb_decision_info di;
        if (lb_decision_get(d, &di) != LB_STATUS_OK)
            snprintf(x.problem, sizeof x.problem, "lb_decision_get failed");
        else if (di.stop_reason != x.info.stop_reason)
            snprintf(x.problem, sizeof x.problem, "stop reasons differ: %s vs %s",
                     lb_stop_reason_str(di.stop_reason), lb_stop_reason_str(x.info.stop_reason));
        else if (lb_decision_json(d, x.json, sizeof x.json, &need) != LB_STATUS_OK)
            snprintf(x.problem, sizeof x.problem, "lb_decision_json failed");
        else if (lb_decision_clone(d, &x.kept) != LB_STATUS_OK || !x.kept)
            snprintf(x.problem, sizeof x.problem, "lb_decision_clone failed");
    }
    pthread_mutex_lock(&r->mu);
    if (r->self && !r->tried_in_callback) {
        /* Both must refuse: they would wait for this very thread. */
        r->tried_in_callback = 1;
        r->shutdown_in_callback = lb_driver_shutdown(r->self);
        lb_driver_free(r->self);
        if (lb_last_error(r->free_in_callback_error, sizeof r->free_in_callback_error, &need) != LB_STATUS_OK)
            r->free_in_callback_error[0] = 0;
    }
    if (r->count == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 16;
        rec *items = realloc(r->items, cap * sizeof *items);
        if (!items) {
            pthread_mutex_unlock(&r->mu);
            lb_decision_free(x.kept);
            return;
        }
        r->items = items;
        r->cap = cap;
    }
    r->items[r->count++] = x;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* What a wait looks for. */
typedef int (*pred)(const rec *x, lb_lease_id lease);

static int is_stopped(const rec *x, lb_lease_id lease) {
    return x->info.lease_id == lease && x->info.kind == LB_EVENT_KIND_STOPPED;
}

static int is_create_ok(const rec *x, lb_lease_id lease) {
    return x->info.lease_id == lease && x->info.kind == LB_EVENT_KIND_DECISION &&
           x->info.outcome == LB_EVENT_OUTCOME_RESPONSE && x->info.has_attempt &&
           x->info.attempt_kind == LB_NEXT_CREATE && x->info.has_reservation_id;
}

static int is_extend_ok(const rec *x, lb_lease_id lease) {
    return x->info.lease_id == lease && x->info.kind == LB_EVENT_KIND_DECISION &&
           x->info.outcome == LB_EVENT_OUTCOME_RESPONSE && x->info.http_status == 200 && x->info.has_attempt &&
           x->info.attempt_kind == LB_NEXT_EXTEND && x->info.stop_reason == LB_STOP_REASON_NONE;
}

static int is_late_beat(const rec *x, lb_lease_id lease) {
    return x->info.lease_id == lease && x->info.kind == LB_EVENT_KIND_JEOPARDY &&
           x->info.jeopardy == LB_JEOPARDY_REASON_LATE_BEAT;
}

static int is_proven_reached(const rec *x, lb_lease_id lease) {
    return x->info.lease_id == lease && x->info.kind == LB_EVENT_KIND_JEOPARDY &&
           x->info.jeopardy == LB_JEOPARDY_REASON_PROVEN_UNTIL_REACHED;
}

/* Waits (bounded) until an event at index `from` or later matches; returns
   its index or -1. */
static long wait_from(recorder *r, pred p, lb_lease_id lease, size_t from) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += WAIT_SECONDS;
    long found = -1;
    size_t seen = from;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        for (; seen < r->count; seen++)
            if (p(&r->items[seen], lease)) {
                found = (long)seen;
                break;
            }
        if (found >= 0) break;
        if (pthread_cond_timedwait(&r->cv, &r->mu, &deadline) != 0) break;
    }
    pthread_mutex_unlock(&r->mu);
    return found;
}

/* Waits (bounded) until an event matches; returns its index or -1. */
static long wait_for(recorder *r, pred p, lb_lease_id lease) {
    return wait_from(r, p, lease, 0);
}

/* Every recorded event passed its accessor checks, and every lease's events
 * end with exactly one stopped event. Call only after the driver is freed
 * (no callback can run any more). Returns the number of stopped events. */
static size_t check_recording(const recorder *r, const char *what) {
    size_t stops = 0;
    for (size_t i = 0; i < r->count; i++) {
        const rec *x = &r->items[i];
        check(x->problem[0] == 0, "%s: event %zu: %s", what, i, x->problem);
        if (x->info.kind != LB_EVENT_KIND_STOPPED) continue;
        stops++;
        int later = 0;
        for (size_t j = i + 1; j < r->count; j++)
            if (r->items[j].info.lease_id == x->info.lease_id) later++;
        check(later == 0, "%s: lease %llu has %d event(s) after its stopped event", what,
              (unsigned long long)x->info.lease_id, later);
        check(x->info.stop_reason != LB_STOP_REASON_NONE, "%s: a stopped event without a reason", what);
    }
    return stops;
}

static size_t count_stops(const recorder *r, lb_lease_id lease) {
    size_t n = 0;
    for (size_t i = 0; i < r->count; i++)
        if (is_stopped(&r->items[i], lease)) n++;
    return n;
}

/* A 127.0.0.1 URL where nothing listens: a port bound, then closed. */
static void refused_url(char *buf, size_t len) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    unsigned port = 1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &alen) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    snprintf(buf, len, "http://127.0.0.1:%u", port);
}

static lb_config *config(uint64_t ttl_ms, uint64_t timeout_ms) {
    lb_config *cfg = NULL;
    EXPECT(lb_config_new(&cfg), LB_STATUS_OK);
    EXPECT(lb_config_set_ttl_ms(cfg, ttl_ms), LB_STATUS_OK);
    EXPECT(lb_config_set_request_timeout_ms(cfg, timeout_ms), LB_STATUS_OK);
    EXPECT(lb_config_set_create_request(
               cfg, "{\"subject\":{\"tenant\":\"c-test\"},\"action\":{\"kind\":\"test\",\"name\":\"driver\"},"
                    "\"estimate\":{\"unit\":\"TOKENS\",\"amount\":1}}"),
           LB_STATUS_OK);
    return cfg;
}

/* ----- lb_heartbeat_new_for_reservation (no network) ----- */

static void test_for_reservation(void) {
    lb_config *cfg = config(60000, 10000);
    EXPECT(lb_config_set_key_prefix(cfg, "fr-"), LB_STATUS_OK);
    lb_heartbeat *hb = NULL;
    EXPECT(lb_heartbeat_new_for_reservation(NULL, "r-1", &hb), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_new_for_reservation(cfg, NULL, &hb), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_new_for_reservation(cfg, "r-1", NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_new_for_reservation(cfg, "", &hb), LB_STATUS_INVALID_ARGUMENT);
    char long_id[130];
    memset(long_id, 'x', 129);
    long_id[129] = 0;
    EXPECT(lb_heartbeat_new_for_reservation(cfg, long_id, &hb), LB_STATUS_INVALID_ARGUMENT);
    long_id[128] = 0; /* exactly 128 characters is fine */
    EXPECT(lb_heartbeat_new_for_reservation(cfg, long_id, &hb), LB_STATUS_OK);
    lb_heartbeat_free(hb);
    hb = NULL;
    EXPECT(lb_heartbeat_new_for_reservation(cfg, "\xff\xfe", &hb), LB_STATUS_INVALID_UTF8);
    CHECK(hb == NULL);
    lb_config *bad = config(10, 10000); /* ttl below 1000 */
    EXPECT(lb_heartbeat_new_for_reservation(bad, "r-1", &hb), LB_STATUS_INVALID_CONFIG);
    lb_config_free(bad);

    EXPECT(lb_heartbeat_new_for_reservation(cfg, "rsv/1 a", &hb), LB_STATUS_OK);
    lb_config_free(cfg);
    /* The first action: an immediate extension with a new key, attempt 1. */
    lb_action a;
    EXPECT(lb_heartbeat_poll_action(hb, &a), LB_STATUS_OK);
    CHECK(a.kind == LB_ACTION_KIND_SEND);
    CHECK(a.attempt_id == 1);
    CHECK(a.attempt_kind == LB_NEXT_EXTEND);
    CHECK(!a.due.infinite && a.due.ns == 0);
    CHECK(a.key_use == LB_KEY_USE_NEW && a.key_index == 1);
    char key[64];
    size_t need = 0;
    EXPECT(lb_heartbeat_attempt_key(hb, key, sizeof key, &need), LB_STATUS_OK);
    CHECK(strcmp(key, "fr-1") == 0);
    char body[256];
    EXPECT(lb_heartbeat_attempt_body(hb, (uint8_t *)body, sizeof body - 1, &need), LB_STATUS_OK);
    body[need < sizeof body ? need : sizeof body - 1] = 0;
    CHECK(strstr(body, "\"extend_by_ms\":60000") != NULL);
    CHECK(strstr(body, "\"idempotency_key\":\"fr-1\"") != NULL);
    /* Its success anchors the schedule: the next beat is an extension. */
    static const char ok[] = "{\"status\":\"ACTIVE\",\"expires_at_ms\":1785585660000,\"remaining_ttl_ms\":61500}";
    EXPECT(lb_heartbeat_handle_sent(hb, 1, 1000000000ull), LB_STATUS_OK);
    EXPECT(lb_heartbeat_handle_response(hb, 1, 200, NULL, 0, (const uint8_t *)ok, sizeof ok - 1, false,
                                        1100000000ull),
           LB_STATUS_OK);
    lb_decision *d = NULL;
    lb_decision_info info;
    EXPECT(lb_heartbeat_last_decision(hb, &d), LB_STATUS_OK);
    CHECK(d != NULL);
    if (d) {
        EXPECT(lb_decision_get(d, &info), LB_STATUS_OK);
        CHECK(info.next == LB_NEXT_EXTEND);
        CHECK(info.has_reservation_id);
        char rid[32];
        EXPECT(lb_decision_reservation_id(d, rid, sizeof rid, &need), LB_STATUS_OK);
        CHECK(strcmp(rid, "rsv/1 a") == 0);
        lb_decision *copy = NULL;
        EXPECT(lb_decision_clone(NULL, &copy), LB_STATUS_NULL_ARGUMENT);
        EXPECT(lb_decision_clone(d, NULL), LB_STATUS_NULL_ARGUMENT);
        EXPECT(lb_decision_clone(d, &copy), LB_STATUS_OK);
        lb_decision_free(d);
        lb_decision_info info2;
        EXPECT(lb_decision_get(copy, &info2), LB_STATUS_OK);
        CHECK(info2.next == info.next && info2.at.ns == info.at.ns && info2.key_index == info.key_index &&
              info2.mode == info.mode && info2.numbers.next_delay.magnitude == info.numbers.next_delay.magnitude);
        lb_decision_free(copy);
    }
    lb_heartbeat_free(hb);
}

/* ----- refusals that need no server ----- */

static void test_driver_refusals(void) {
    recorder r;
    recorder_init(&r);
    lb_driver *d = NULL;
    lb_lease_id lease = 0;
    lb_finalize_result fin;
    char url[64];
    refused_url(url, sizeof url);

    lb_driver_free(NULL); /* a no-op */
    EXPECT(lb_driver_new(NULL, "k", 2, on_event, &r, &d), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_new(url, NULL, 2, on_event, &r, &d), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_new(url, "k", 2, NULL, &r, &d), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_new(url, "k", 2, on_event, &r, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_new(url, "k", 0, on_event, &r, &d), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_driver_new("\xff", "k", 2, on_event, &r, &d), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_driver_new(url, "\xc3", 2, on_event, &r, &d), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_driver_new("ftp://127.0.0.1:1", SECRET_KEY, 2, on_event, &r, &d), LB_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(last_error_text(), "ftp://127.0.0.1:1") != NULL);
    CHECK(strstr(last_error_text(), SECRET_KEY) == NULL);
    /* An API key that cannot be a header value is refused up front, unechoed. */
    {
        static const char *bad_keys[] = {"sec\r\nret-key", "secret-key\n", "", " secret-key"};
        for (size_t k = 0; k < sizeof bad_keys / sizeof bad_keys[0]; k++) {
            lb_driver *bad = NULL;
            EXPECT(lb_driver_new(url, bad_keys[k], 2, on_event, &r, &bad), LB_STATUS_INVALID_ARGUMENT);
            CHECK(bad == NULL);
            char msg[512] = "";
            size_t need = 0;
            EXPECT(lb_last_error(msg, sizeof msg, &need), LB_STATUS_OK);
            CHECK(strstr(msg, "ret-key") == NULL && strstr(msg, "API key") != NULL);
        }
    }
    CHECK(strcmp(lb_event_kind_str(LB_EVENT_KIND_JEOPARDY), "lease_in_jeopardy") == 0);
    CHECK(strcmp(lb_jeopardy_reason_str(LB_JEOPARDY_REASON_PROVEN_UNTIL_REACHED), "proven_until_reached") == 0);
    CHECK(strcmp(lb_jeopardy_reason_str(LB_JEOPARDY_REASON_LATE_BEAT), "late_beat") == 0);
    CHECK(strcmp(lb_jeopardy_reason_str(LB_JEOPARDY_REASON_CREATE_UNRESOLVED), "create_unresolved") == 0);
    CHECK(strcmp(lb_jeopardy_reason_str(LB_JEOPARDY_REASON_NONE), "none") == 0);
    CHECK(strcmp(lb_jeopardy_reason_str(99), "unknown") == 0);
    EXPECT(lb_driver_hold_sends_for_testing(NULL, true), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_new("127.0.0.1:8080", SECRET_KEY, 2, on_event, &r, &d), LB_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(last_error_text(), SECRET_KEY) == NULL);
    EXPECT(lb_driver_new("", SECRET_KEY, 2, on_event, &r, &d), LB_STATUS_INVALID_ARGUMENT);
    CHECK(d == NULL); /* outputs only on success */

    /* NULL user_data is fine: it is only passed back. A driver that is
       freed without ever starting a lease delivers nothing (journal off
       here: with it, the start replay reports the partition, lease id 0). */
    lb_driver_config *quiet = NULL;
    EXPECT(lb_driver_config_new(url, SECRET_KEY, &quiet), LB_STATUS_OK);
    EXPECT(lb_driver_config_set_max_workers(quiet, 1), LB_STATUS_OK);
    EXPECT(lb_driver_config_set_journal_enabled(quiet, false), LB_STATUS_OK);
    EXPECT(lb_driver_new_with(quiet, on_event, NULL, &d), LB_STATUS_OK);
    lb_driver_config_free(quiet);
    lb_driver_free(d);
    d = NULL;

    EXPECT(lb_driver_new(url, SECRET_KEY, 2, on_event, &r, &d), LB_STATUS_OK);
    lb_config *cfg = config(60000, 2000);
    lb_config *unbounded = config(60000, LB_INFINITE_MS);
    lb_config *bad_ttl = config(999, 2000);

    EXPECT(lb_driver_start(NULL, cfg, &lease), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_start(d, NULL, &lease), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_start(d, cfg, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_start(d, unbounded, &lease), LB_STATUS_INVALID_CONFIG);
    EXPECT(lb_driver_start(d, bad_ttl, &lease), LB_STATUS_INVALID_CONFIG);
    EXPECT(lb_driver_start_for_reservation(NULL, cfg, "r-1", &lease), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_start_for_reservation(d, NULL, "r-1", &lease), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_start_for_reservation(d, cfg, NULL, &lease), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_start_for_reservation(d, cfg, "r-1", NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_start_for_reservation(d, cfg, "", &lease), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_driver_start_for_reservation(d, cfg, "\xff", &lease), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_driver_start_for_reservation(d, unbounded, "r-1", &lease), LB_STATUS_INVALID_CONFIG);
    CHECK(lease == 0);
    EXPECT(lb_driver_cancel(NULL, 1), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_cancel(d, 0), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_driver_cancel(d, 1), LB_STATUS_INVALID_ARGUMENT); /* none started yet */
    EXPECT(lb_driver_release(NULL, "r-1", NULL, &fin), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_release(d, NULL, NULL, &fin), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_release(d, "r-1", NULL, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_release(d, "r-1", "\xff", &fin), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_driver_commit(NULL, "r-1", "{}", &fin), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_commit(d, NULL, "{}", &fin), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_commit(d, "r-1", NULL, &fin), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_commit(d, "r-1", "{}", NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_commit(d, "r-1", "[1]", &fin), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_driver_commit(d, "r-1", "{", &fin), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_driver_shutdown(NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_event_get(NULL, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_event_decision(NULL, NULL), LB_STATUS_NULL_ARGUMENT);
    size_t need = 0;
    char buf[16];
    EXPECT(lb_event_reservation_id(NULL, buf, sizeof buf, &need), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_event_error_message(NULL, buf, sizeof buf, &need), LB_STATUS_NULL_ARGUMENT);
    CHECK(strcmp(lb_event_kind_str(LB_EVENT_KIND_DECISION), "decision") == 0);
    CHECK(strcmp(lb_event_kind_str(LB_EVENT_KIND_STOPPED), "stopped") == 0);
    CHECK(strcmp(lb_event_kind_str(LB_EVENT_KIND_ERROR), "error") == 0);
    CHECK(strcmp(lb_event_kind_str(LB_EVENT_KIND_HEARTBEAT_FAILURE), "heartbeat_failure") == 0);
    CHECK(strcmp(lb_event_kind_str(LB_EVENT_KIND_SETTLEMENT), "settlement") == 0);
    CHECK(strcmp(lb_event_kind_str(LB_EVENT_KIND_SETTLED), "settled") == 0);
    CHECK(strcmp(lb_event_kind_str(LB_EVENT_KIND_JOURNAL), "journal") == 0);
    CHECK(strcmp(lb_event_kind_str(8), "unknown") == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_TIMED_OUT), "timed_out") == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_SHUT_DOWN), "shut_down") == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_IN_CALLBACK), "in_callback") == 0);

    /* Release/commit against a port where nothing listens: a transport
       failure is an outcome, not a refusal. */
    memset(&fin, 0xAB, sizeof fin);
    EXPECT(lb_driver_release(d, "r-1", "done", &fin), LB_STATUS_OK);
    CHECK(!fin.responded && fin.http_status == 0 && fin.failure == LB_FAILURE_CONNECT);
    EXPECT(lb_driver_commit(d, "r-1", "{\"unit\":\"TOKENS\",\"amount\":3}", &fin), LB_STATUS_OK);
    CHECK(!fin.responded && fin.failure == LB_FAILURE_CONNECT);

    /* A lease against it: two connect failures (create, same-key retry),
       then create_failed. The first event's callback tries to shut the
       driver down and to free it from inside: both refuse. */
    pthread_mutex_lock(&r.mu);
    r.self = d;
    pthread_mutex_unlock(&r.mu);
    EXPECT(lb_driver_start(d, cfg, &lease), LB_STATUS_OK);
    /* The release and the commit above are settlements: each took a lease id (1, 2) for its
       events, as a settlement of a reservation the driver does not heartbeat does. */
    CHECK(lease == 3);
    long stop = wait_for(&r, is_stopped, lease);
    CHECK(stop >= 0);
    /* Cancels after the stop, twice: accepted, nothing more happens. */
    EXPECT(lb_driver_cancel(d, lease), LB_STATUS_OK);
    EXPECT(lb_driver_cancel(d, lease), LB_STATUS_OK);
    EXPECT(lb_driver_cancel(d, lease + 1), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_driver_shutdown(d), LB_STATUS_OK);
    EXPECT(lb_driver_shutdown(d), LB_STATUS_SHUT_DOWN); /* a second shutdown does nothing */
    EXPECT(lb_driver_start(d, cfg, &lease), LB_STATUS_SHUT_DOWN);
    EXPECT(lb_driver_start_for_reservation(d, cfg, "r-1", &lease), LB_STATUS_SHUT_DOWN);
    EXPECT(lb_driver_cancel(d, 1), LB_STATUS_SHUT_DOWN);
    EXPECT(lb_driver_release(d, "r-1", NULL, &fin), LB_STATUS_SHUT_DOWN);
    EXPECT(lb_driver_commit(d, "r-1", "{}", &fin), LB_STATUS_SHUT_DOWN);
    lb_driver_free(d);

    CHECK(r.tried_in_callback == 1);
    CHECK(r.shutdown_in_callback == LB_STATUS_IN_CALLBACK);
    CHECK(strncmp(r.free_in_callback_error, "in_callback: ", 13) == 0);
    CHECK(check_recording(&r, "refused") == 1);
    CHECK(count_stops(&r, lease) == 1);
    if (stop >= 0) {
        const rec *s = &r.items[stop];
        CHECK(s->info.stop_reason == LB_STOP_REASON_CREATE_FAILED);
        CHECK(!s->info.has_reservation_id);
    }
    int failures = 0;
    for (size_t i = 0; i < r.count; i++) {
        const rec *x = &r.items[i];
        if (x->info.kind != LB_EVENT_KIND_DECISION) continue;
        failures++;
        CHECK(x->info.outcome == LB_EVENT_OUTCOME_FAILURE && x->info.failure == LB_FAILURE_CONNECT);
        CHECK(x->info.has_attempt && x->info.attempt_kind == LB_NEXT_CREATE);
        CHECK(strstr(x->json, "\"next\"") != NULL);
        CHECK(x->kept != NULL);
    }
    CHECK(failures == 2);
    lb_config_free(cfg);
    lb_config_free(unbounded);
    lb_config_free(bad_ttl);
    recorder_free(&r);
}

/* ----- against a live `leasebeat serve` ----- */

static void test_driver_live(const char *url) {
    recorder r;
    recorder_init(&r);
    lb_driver *d = NULL;
    EXPECT(lb_driver_new(url, "c-test-key", 4, on_event, &r, &d), LB_STATUS_OK);
    if (!d) {
        recorder_free(&r);
        return;
    }
    lb_config *cfg = config(4000, 1000);
    lb_lease_id a = 0, b = 0, c = 0;

    /* Lease a creates a reservation. */
    EXPECT(lb_driver_start(d, cfg, &a), LB_STATUS_OK);
    long i = wait_for(&r, is_create_ok, a);
    CHECK(i >= 0);
    char rid[160] = "";
    if (i >= 0) {
        pthread_mutex_lock(&r.mu);
        memcpy(rid, r.items[i].rid, sizeof rid);
        lb_event_info info = r.items[i].info;
        pthread_mutex_unlock(&r.mu);
        CHECK(info.http_status == 200 || info.http_status == 201);
        CHECK(info.attempt_key_use == LB_KEY_USE_NEW && info.attempt_key_index == 1);
        CHECK(info.time_ns >= info.attempt_sent_ns);
    }
    /* Lease b heartbeats the same reservation, first beat an extension. */
    if (rid[0]) {
        EXPECT(lb_driver_start_for_reservation(d, cfg, rid, &b), LB_STATUS_OK);
        CHECK(wait_for(&r, is_extend_ok, b) >= 0);
    }
    /* Lease a extends on its own, then is cancelled (twice). */
    CHECK(wait_for(&r, is_extend_ok, a) >= 0);
    EXPECT(lb_driver_cancel(d, a), LB_STATUS_OK);
    EXPECT(lb_driver_cancel(d, a), LB_STATUS_OK);
    long s = wait_for(&r, is_stopped, a);
    CHECK(s >= 0);
    if (s >= 0) {
        pthread_mutex_lock(&r.mu);
        lb_event_info info = r.items[s].info;
        pthread_mutex_unlock(&r.mu);
        CHECK(info.stop_reason == LB_STOP_REASON_CANCELLED);
        CHECK(info.has_reservation_id);
    }
    /* Lease c starts; then the driver is freed with b and c running. */
    EXPECT(lb_driver_start(d, cfg, &c), LB_STATUS_OK);
    CHECK(a == 1 && b == 2 && c == 3);
    lb_driver_free(d);

    check_recording(&r, "live");
    CHECK(count_stops(&r, a) == 1);
    CHECK(count_stops(&r, b) == 1);
    CHECK(count_stops(&r, c) == 1);
    int cancelled_decisions = 0;
    for (size_t k = 0; k < r.count; k++) {
        const rec *x = &r.items[k];
        if (x->info.kind == LB_EVENT_KIND_DECISION && x->info.outcome == LB_EVENT_OUTCOME_CANCELLED) {
            cancelled_decisions++;
            CHECK(!x->info.has_attempt && x->info.stop_reason == LB_STOP_REASON_CANCELLED);
            CHECK(strstr(x->json, "\"cancelled\"") != NULL);
        }
        CHECK(x->info.kind != LB_EVENT_KIND_ERROR);
    }
    CHECK(cancelled_decisions >= 2); /* a's, and b's unless it stopped by itself */
    /* b adopted an existing reservation: its first extension is due at once
       and went out on time, so no jeopardy (issue 25: every adoption used to
       report late_beat). */
    for (size_t k = 0; k < r.count; k++) {
        const rec *x = &r.items[k];
        CHECK(!(x->info.lease_id == b && x->info.kind == LB_EVENT_KIND_JEOPARDY));
    }
    recorder_free(&r);

    /* Release and commit on a fresh driver and reservation. */
    recorder_init(&r);
    d = NULL;
    EXPECT(lb_driver_new(url, "c-test-key", 1, on_event, &r, &d), LB_STATUS_OK);
    if (d) {
        EXPECT(lb_driver_start(d, cfg, &a), LB_STATUS_OK);
        i = wait_for(&r, is_create_ok, a);
        CHECK(i >= 0);
        rid[0] = 0;
        if (i >= 0) {
            pthread_mutex_lock(&r.mu);
            memcpy(rid, r.items[i].rid, sizeof rid);
            pthread_mutex_unlock(&r.mu);
        }
        EXPECT(lb_driver_cancel(d, a), LB_STATUS_OK);
        CHECK(wait_for(&r, is_stopped, a) >= 0);
        lb_finalize_result fin;
        if (rid[0]) {
            EXPECT(lb_driver_commit(d, rid, "{\"unit\":\"TOKENS\",\"amount\":1}", &fin), LB_STATUS_OK);
            CHECK(fin.responded && fin.http_status == 200);
            EXPECT(lb_driver_release(d, rid, "test", &fin), LB_STATUS_OK);
            CHECK(fin.responded && fin.http_status >= 400 && fin.http_status < 500); /* already committed */
        }
        EXPECT(lb_driver_release(d, "no-such-reservation", NULL, &fin), LB_STATUS_OK);
        CHECK(fin.responded && fin.http_status == 404);
        EXPECT(lb_driver_shutdown(d), LB_STATUS_OK);
        lb_driver_free(d);
        check_recording(&r, "finalize");
    }
    lb_config_free(cfg);
    recorder_free(&r);
}

/* D-15 through the C ABI: with every send held (the test hook), a lease
   reports LATE_BEAT jeopardy, then PROVEN_UNTIL_REACHED, and keeps going. */
static void test_driver_jeopardy(const char *url) {
    recorder r;
    recorder_init(&r);
    lb_driver *d = NULL;
    EXPECT(lb_driver_new(url, "c-test-key", 2, on_event, &r, &d), LB_STATUS_OK);
    if (!d) {
        recorder_free(&r);
        return;
    }
    lb_config *cfg = config(4000, 1000);
    lb_lease_id a = 0;
    EXPECT(lb_driver_start(d, cfg, &a), LB_STATUS_OK);
    CHECK(wait_for(&r, is_create_ok, a) >= 0);
    EXPECT(lb_driver_hold_sends_for_testing(d, true), LB_STATUS_OK);
    long late = wait_for(&r, is_late_beat, a);
    long proven = wait_for(&r, is_proven_reached, a);
    CHECK(late >= 0 && proven > late);
    if (late >= 0 && proven >= 0) {
        pthread_mutex_lock(&r.mu);
        lb_event_info li = r.items[late].info, pi = r.items[proven].info;
        pthread_mutex_unlock(&r.mu);
        CHECK(li.has_reservation_id && li.due_ns > 0 && li.time_ns > li.due_ns);
        CHECK(pi.proven_until_ns > 0 && pi.time_ns >= pi.proven_until_ns);
        CHECK(li.stop_reason == LB_STOP_REASON_NONE && pi.outcome == LB_EVENT_OUTCOME_NONE);
    }
    /* Released: the held beat goes out (the lease keeps heartbeating). */
    EXPECT(lb_driver_hold_sends_for_testing(d, false), LB_STATUS_OK);
    lb_driver_free(d);
    check_recording(&r, "jeopardy");
    CHECK(count_stops(&r, a) == 1);
    lb_config_free(cfg);
    recorder_free(&r);
}

/* D-15 on the fallback path (a server run with --omit-remaining: an older
   server, nothing proven): PROVEN_UNTIL_REACHED right after the first
   success (with proven_until_ns 0: none), and only once while the lease goes
   on extending on the fallback path. */
static void test_driver_fallback_jeopardy(const char *url) {
    recorder r;
    recorder_init(&r);
    lb_driver *d = NULL;
    EXPECT(lb_driver_new(url, "c-test-key", 2, on_event, &r, &d), LB_STATUS_OK);
    if (!d) {
        recorder_free(&r);
        return;
    }
    lb_config *cfg = config(4000, 1000);
    lb_lease_id a = 0;
    EXPECT(lb_driver_start(d, cfg, &a), LB_STATUS_OK);
    long created = wait_for(&r, is_create_ok, a);
    long proven = wait_for(&r, is_proven_reached, a);
    CHECK(created >= 0 && proven == created + 1);
    /* Two fallback extensions: neither re-arms the report. */
    long e1 = wait_for(&r, is_extend_ok, a);
    CHECK(e1 > proven);
    long e2 = e1 >= 0 ? wait_from(&r, is_extend_ok, a, (size_t)e1 + 1) : -1;
    CHECK(e2 > e1);
    EXPECT(lb_driver_cancel(d, a), LB_STATUS_OK);
    CHECK(wait_for(&r, is_stopped, a) >= 0);
    lb_driver_free(d);
    check_recording(&r, "fallback jeopardy");
    size_t jeopardies = 0;
    for (size_t i = 0; i < r.count; i++) {
        if (r.items[i].info.kind != LB_EVENT_KIND_JEOPARDY) continue;
        jeopardies++;
        CHECK(r.items[i].info.jeopardy == LB_JEOPARDY_REASON_PROVEN_UNTIL_REACHED);
        CHECK(r.items[i].info.proven_until_ns == 0 && r.items[i].info.has_reservation_id);
    }
    CHECK(jeopardies == 1);
    CHECK(count_stops(&r, a) == 1);
    lb_config_free(cfg);
    recorder_free(&r);
}

void run_driver_tests(const char *server_url, const char *fallback_url) {
    test_for_reservation();
    test_driver_refusals();
    if (server_url) {
        test_driver_live(server_url);
        test_driver_jeopardy(server_url);
        printf("ok driver tests against %s\n", server_url);
    } else {
        printf("skipped: the live driver tests (no --server URL)\n");
    }
    if (fallback_url) {
        test_driver_fallback_jeopardy(fallback_url);
        printf("ok driver fallback test against %s\n", fallback_url);
    } else {
        printf("skipped: the driver fallback test (no --fallback-server URL)\n");
    }
}
