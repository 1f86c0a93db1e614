/*
 * Adopting a create the caller performed itself (lb_heartbeat_adopt_create)
 * and the lease's instants of a decision (lb_decision_get_instants):
 * refusals for every bad argument, the classification of adopted outcomes
 * without a server, and (with --server URL --server-log FILE, a live
 * `leasebeat serve --log FILE`) a create made here with a small HTTP/1.1
 * client over a 127.0.0.1 socket, handed over, heartbeated once at its due
 * time and cancelled; the server's log must then show exactly that one
 * create and that one extension for the reservation (no priming extension).
 *
 * Nothing asserts on elapsed time; waits are bounded.
 */
#define _POSIX_C_SOURCE 200809L

#include "harness.h"

#include <arpa/inet.h>
#include <cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const char OK_CREATE[] = "{\"decision\":\"ALLOW\",\"reservation_id\":\"r-1\",\"affected_scopes\":[\"tenant:a\"],"
                                "\"expires_at_ms\":1785585661500,\"remaining_ttl_ms\":61500}";

static lb_config *adopt_config(void) {
    lb_config *cfg = NULL;
    EXPECT(lb_config_new(&cfg), LB_STATUS_OK);
    EXPECT(lb_config_set_ttl_ms(cfg, 60000), LB_STATUS_OK);
    EXPECT(lb_config_set_request_timeout_ms(cfg, 10000), LB_STATUS_OK);
    EXPECT(lb_config_set_key_prefix(cfg, "ad-"), LB_STATUS_OK);
    return cfg;
}

static lb_adopted_create ok_create(void) {
    lb_adopted_create c;
    memset(&c, 0, sizeof c);
    c.key = "sdk-create-key";
    c.sent_known = true;
    c.sent_ns = 0;
    c.received_ns = 1500000000ull;
    c.outcome = LB_ADOPTED_RESPONSE;
    c.status = 200;
    c.body = (const uint8_t *)OK_CREATE;
    c.body_len = sizeof OK_CREATE - 1;
    return c;
}

static lb_decision *first_decision(const lb_heartbeat *hb) {
    lb_decision *d = NULL;
    EXPECT(lb_heartbeat_last_decision(hb, &d), LB_STATUS_OK);
    CHECK(d != NULL);
    return d;
}

/* ----- refusals ----- */

static void test_adopt_refusals(void) {
    lb_config *cfg = adopt_config();
    lb_heartbeat *hb = NULL;
    lb_adopted_create c = ok_create();
    EXPECT(lb_heartbeat_adopt_create(NULL, &c, &hb), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_adopt_create(cfg, NULL, &hb), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, NULL), LB_STATUS_NULL_ARGUMENT);
    c.key = NULL;
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_NULL_ARGUMENT);
    c = ok_create();
    c.key = "";
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_INVALID_KEY);
    char long_key[300];
    memset(long_key, 'k', 257);
    long_key[257] = 0;
    c.key = long_key;
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_INVALID_KEY);
    c.key = "\xff\xfe";
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_INVALID_UTF8);
    /* A key that cannot be a header value: refused up front (issue 25). */
    c.key = "k\r\nX-Evil: 1";
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_INVALID_KEY);
    c.key = "k\n";
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_INVALID_KEY);
    c.key = "\rk";
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_INVALID_KEY);
    c = ok_create();
    c.outcome = 7;
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(last_error_text(), "LB_ADOPTED_RESPONSE") != NULL);
    c = ok_create();
    c.outcome = LB_ADOPTED_FAILURE;
    c.failure = 9;
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_INVALID_ARGUMENT);
    c = ok_create();
    c.status = 70000;
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_INVALID_ARGUMENT);
    c.status = 99;
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_INVALID_ARGUMENT);
    c = ok_create();
    c.sent_ns = c.received_ns + 1; /* sent after received */
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_INVALID_ARGUMENT);
    c = ok_create();
    c.body = NULL; /* NULL with a length */
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_NULL_ARGUMENT);
    c = ok_create();
    c.header_count = 1; /* NULL headers with a count */
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_NULL_ARGUMENT);
    lb_header bad_header = {NULL, 3, (const uint8_t *)"v", 1};
    c.headers = &bad_header;
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_NULL_ARGUMENT);
    c = ok_create();
    c.request_body_len = 5; /* NULL request body with a length */
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_NULL_ARGUMENT);
    static const char not_object[] = "[1,2]";
    c.request_body = (const uint8_t *)not_object;
    c.request_body_len = sizeof not_object - 1;
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_INVALID_ARGUMENT);
    static const char other_key[] = "{\"idempotency_key\":\"another\",\"ttl_ms\":60000}";
    c.request_body = (const uint8_t *)other_key;
    c.request_body_len = sizeof other_key - 1;
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_INVALID_ARGUMENT);
    CHECK(hb == NULL); /* out-params are written only on success */
    lb_config *bad = adopt_config();
    EXPECT(lb_config_set_ttl_ms(bad, 10), LB_STATUS_OK);
    c = ok_create();
    EXPECT(lb_heartbeat_adopt_create(bad, &c, &hb), LB_STATUS_INVALID_CONFIG);
    lb_config_free(bad);
    lb_config_free(cfg);

    lb_decision_instants ins;
    EXPECT(lb_decision_get_instants(NULL, &ins), LB_STATUS_NULL_ARGUMENT);
}

/* ----- classification without a server ----- */

static void test_adopt_outcomes(void) {
    lb_config *cfg = adopt_config();
    lb_heartbeat *hb = NULL;
    lb_decision *d = NULL;
    lb_decision_info info;
    lb_decision_instants ins;
    lb_action a;

    /* A success: the worked example; no priming extension (HB-15). */
    lb_adopted_create c = ok_create();
    static const char ct_name[] = "Content-Type", ct_value[] = "application/json";
    lb_header h = {(const uint8_t *)ct_name, sizeof ct_name - 1, (const uint8_t *)ct_value, sizeof ct_value - 1};
    c.headers = &h;
    c.header_count = 1;
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_OK);
    d = first_decision(hb);
    if (d) {
        EXPECT(lb_decision_get(d, &info), LB_STATUS_OK);
        CHECK(info.next == LB_NEXT_EXTEND && info.key_use == LB_KEY_USE_NEW && info.key_index == 2);
        CHECK(!info.at.infinite && info.at.ns == 38500000000ull);
        CHECK(info.mode == LB_MODE_PRIMARY && info.has_reservation_id);
        EXPECT(lb_decision_get_instants(d, NULL), LB_STATUS_NULL_ARGUMENT);
        EXPECT(lb_decision_get_instants(d, &ins), LB_STATUS_OK);
        CHECK(ins.has_proven_until && !ins.proven_until.infinite && ins.proven_until.ns == 61500000000ull);
        CHECK(ins.has_expires_at_ms && ins.expires_at_ms == 1785585661500ull);
        CHECK(ins.has_remaining_ttl_ms && ins.remaining_ttl_ms == 61500);
        char json[1024];
        size_t need = 0;
        EXPECT(lb_decision_json(d, json, sizeof json, &need), LB_STATUS_OK);
        CHECK(strstr(json, "\"proven_until\":61500") != NULL);
        CHECK(strstr(json, "\"expires_at_ms\":1785585661500") != NULL);
        CHECK(strstr(json, "\"remaining_ttl_ms\":61500") != NULL);
    }
    lb_decision_free(d);
    EXPECT(lb_heartbeat_poll_action(hb, &a), LB_STATUS_OK);
    CHECK(a.kind == LB_ACTION_KIND_SEND && a.attempt_id == 2 && a.attempt_kind == LB_NEXT_EXTEND);
    char key[64];
    size_t need = 0;
    EXPECT(lb_heartbeat_attempt_key(hb, key, sizeof key, &need), LB_STATUS_OK);
    CHECK(strcmp(key, "ad-1") == 0);
    /* Events before the adopted receipt are refused. */
    EXPECT(lb_heartbeat_handle_sent(hb, a.attempt_id, 1000000000ull), LB_STATUS_TIME_WENT_BACKWARDS);
    /* A cancel keeps proven_until (it is on every primary decision). */
    EXPECT(lb_heartbeat_cancel(hb, 2000000000ull), LB_STATUS_OK);
    d = first_decision(hb);
    if (d) {
        EXPECT(lb_decision_get_instants(d, &ins), LB_STATUS_OK);
        CHECK(ins.has_proven_until && ins.proven_until.ns == 61500000000ull);
        CHECK(!ins.has_expires_at_ms && !ins.has_remaining_ttl_ms && ins.expires_at_ms == 0);
    }
    lb_decision_free(d);
    lb_heartbeat_free(hb);
    hb = NULL;

    /* A timeout with the caller's body: the same-key retry resends it byte for byte. */
    static const char req[] = "{\"ttl_ms\":60000, \"idempotency_key\":\"sdk-k\",\"subject\":{\"tenant\":\"a\"}}";
    c = ok_create();
    c.key = "sdk-k";
    c.request_body = (const uint8_t *)req;
    c.request_body_len = sizeof req - 1;
    c.outcome = LB_ADOPTED_FAILURE;
    c.failure = LB_FAILURE_TIMEOUT;
    c.received_ns = 10000000000ull;
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_OK);
    d = first_decision(hb);
    if (d) {
        EXPECT(lb_decision_get(d, &info), LB_STATUS_OK);
        CHECK(info.next == LB_NEXT_CREATE && info.key_use == LB_KEY_USE_SAME && info.key_index == 1);
        CHECK(info.at.ns == 10000000000ull);
        EXPECT(lb_decision_get_instants(d, &ins), LB_STATUS_OK);
        CHECK(!ins.has_proven_until && !ins.proven_until.infinite && ins.proven_until.ns == 0);
    }
    lb_decision_free(d);
    EXPECT(lb_heartbeat_attempt_key(hb, key, sizeof key, &need), LB_STATUS_OK);
    CHECK(strcmp(key, "sdk-k") == 0);
    char body[256];
    EXPECT(lb_heartbeat_attempt_body(hb, (uint8_t *)body, sizeof body, &need), LB_STATUS_OK);
    CHECK(need == sizeof req - 1 && memcmp(body, req, need) == 0);
    lb_heartbeat_free(hb);
    hb = NULL;

    /* Timing unknown (no send instant): lead floor 0, an immediate beat,
     * proven only until the receipt. */
    c = ok_create();
    c.sent_known = false;
    c.sent_ns = 12345; /* ignored */
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_OK);
    d = first_decision(hb);
    if (d) {
        EXPECT(lb_decision_get(d, &info), LB_STATUS_OK);
        CHECK(info.next == LB_NEXT_EXTEND && info.at.ns == 1500000000ull);
        EXPECT(lb_decision_get_instants(d, &ins), LB_STATUS_OK);
        CHECK(ins.has_proven_until && ins.proven_until.ns == 1500000000ull);
    }
    lb_decision_free(d);
    lb_heartbeat_free(hb);
    hb = NULL;

    /* The response's own timing flag, with a known send instant. */
    c = ok_create();
    c.timing_unknown = true;
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_OK);
    d = first_decision(hb);
    if (d) {
        EXPECT(lb_decision_get(d, &info), LB_STATUS_OK);
        CHECK(info.next == LB_NEXT_EXTEND && info.at.ns == 1500000000ull);
    }
    lb_decision_free(d);
    lb_heartbeat_free(hb);
    hb = NULL;

    /* A 4xx stops create_rejected; a proven_until +infinity is `infinite`. */
    static const char rejected[] = "{\"error\":\"BUDGET_EXCEEDED\",\"message\":\"no\",\"request_id\":\"q\"}";
    c = ok_create();
    c.status = 409;
    c.body = (const uint8_t *)rejected;
    c.body_len = sizeof rejected - 1;
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_OK);
    lb_stop_reason reason = LB_STOP_REASON_NONE;
    EXPECT(lb_heartbeat_stop_reason(hb, &reason), LB_STATUS_OK);
    CHECK(reason == LB_STOP_REASON_CREATE_REJECTED);
    lb_heartbeat_free(hb);
    hb = NULL;

    static const char huge[] = "{\"decision\":\"ALLOW\",\"reservation_id\":\"r-1\",\"affected_scopes\":[\"tenant:a\"],"
                               "\"expires_at_ms\":9223372036854775807,\"remaining_ttl_ms\":9223372036854775807}";
    c = ok_create();
    c.received_ns = UINT64_MAX - 1000;
    c.sent_ns = c.received_ns - 1000000;
    c.body = (const uint8_t *)huge;
    c.body_len = sizeof huge - 1;
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_OK);
    d = first_decision(hb);
    if (d) {
        EXPECT(lb_decision_get_instants(d, &ins), LB_STATUS_OK);
        CHECK(ins.has_proven_until && ins.proven_until.infinite && ins.proven_until.ns == 0);
        CHECK(ins.has_remaining_ttl_ms && ins.remaining_ttl_ms == 9223372036854775807ull);
    }
    lb_decision_free(d);
    lb_heartbeat_free(hb);
    lb_config_free(cfg);
}

/* ----- a tiny HTTP/1.1 client over a 127.0.0.1 socket ----- */

typedef struct {
    int status;
    char *raw;         /* the whole response, NUL-terminated */
    size_t raw_len;
    const char *body;  /* into raw */
    size_t body_len;
    lb_header headers[32];
    size_t header_count;
} http_response;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* Parses "http://127.0.0.1:PORT" into a port. */
static int url_port(const char *url, unsigned *port) {
    return sscanf(url, "http://127.0.0.1:%u", port) == 1 && *port > 0 && *port < 65536;
}

static void http_response_free(http_response *r) {
    free(r->raw);
    memset(r, 0, sizeof *r);
}

/* POSTs `body` to 127.0.0.1:port `path`; 1 on a complete response. */
static int http_post(unsigned port, const char *path, const char *idem_key, const char *body,
                     http_response *out) {
    memset(out, 0, sizeof *out);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return 0;
    }
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nContent-Type: application/json\r\n"
                     "X-Cycles-API-Key: c-adopt-key\r\nX-Idempotency-Key: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     path, port, idem_key, strlen(body));
    if (n <= 0 || (size_t)n >= sizeof head || write(fd, head, (size_t)n) != n ||
        write(fd, body, strlen(body)) != (ssize_t)strlen(body)) {
        close(fd);
        return 0;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) exit(2);
    for (;;) {
        if (len + 1024 > cap) {
            cap *= 2;
            char *p = realloc(buf, cap);
            if (!p) exit(2);
            buf = p;
        }
        ssize_t got = read(fd, buf + len, cap - len - 1);
        if (got <= 0) break;
        len += (size_t)got;
        buf[len] = 0;
        /* Stop once the head and Content-Length bytes of body are in. */
        char *end = strstr(buf, "\r\n\r\n");
        if (end) {
            char *cl = strstr(buf, "\r\ncontent-length:");
            if (!cl) cl = strstr(buf, "\r\nContent-Length:");
            if (cl && cl < end) {
                size_t want = strtoul(strchr(cl + 2, ':') + 1, NULL, 10);
                if (len >= (size_t)(end + 4 - buf) + want) break;
            }
        }
    }
    close(fd);
    buf[len] = 0;
    out->raw = buf;
    out->raw_len = len;
    char *end = strstr(buf, "\r\n\r\n");
    if (!end || sscanf(buf, "HTTP/1.%*d %d", &out->status) != 1) return 0;
    out->body = end + 4;
    out->body_len = len - (size_t)(end + 4 - buf);
    /* Headers as name/value pairs pointing into the buffer (not NUL-terminated). */
    char *line = strstr(buf, "\r\n") + 2;
    while (line < end && out->header_count < 32) {
        char *eol = strstr(line, "\r\n");
        char *colon = memchr(line, ':', (size_t)(eol - line));
        if (colon) {
            char *v = colon + 1;
            while (v < eol && (*v == ' ' || *v == '\t')) v++;
            lb_header *h = &out->headers[out->header_count++];
            h->name = (const uint8_t *)line;
            h->name_len = (size_t)(colon - line);
            h->value = (const uint8_t *)v;
            h->value_len = (size_t)(eol - v);
        }
        line = eol + 2;
    }
    return 1;
}

/* Counts the server log's request entries of `endpoint` matching `field` == `value`. */
static int count_log(const char *log_path, const char *endpoint, const char *field, const char *value) {
    FILE *f = fopen(log_path, "rb");
    if (!f) return -1;
    int n = 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(j, "event");
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(j, "endpoint");
        const cJSON *fv = cJSON_GetObjectItemCaseSensitive(j, field);
        if (cJSON_IsString(ev) && strcmp(ev->valuestring, "request") == 0 && cJSON_IsString(ep) &&
            strcmp(ep->valuestring, endpoint) == 0 && cJSON_IsString(fv) && strcmp(fv->valuestring, value) == 0)
            n++;
        cJSON_Delete(j);
    }
    free(line);
    fclose(f);
    return n;
}

static char *attempt_text(const lb_heartbeat *hb, int body) {
    size_t need = 0;
    lb_status st = body ? lb_heartbeat_attempt_body(hb, NULL, 0, &need) : lb_heartbeat_attempt_key(hb, NULL, 0, &need);
    if (st != LB_STATUS_OK) return NULL;
    char *buf = malloc(need + 1);
    if (!buf) exit(2);
    st = body ? lb_heartbeat_attempt_body(hb, (uint8_t *)buf, need, &need)
              : lb_heartbeat_attempt_key(hb, buf, need, &need);
    buf[need] = 0;
    return buf;
}

static void test_adopt_live(const char *url, const char *log_path) {
    unsigned port = 0;
    if (!url_port(url, &port)) {
        check(0, "adopt live: cannot read a 127.0.0.1 port from %s", url);
        return;
    }
    /* The create, performed here as an SDK would, with its own key. */
    char create_key[64];
    snprintf(create_key, sizeof create_key, "c-adopt-%ld-%llu", (long)getpid(), (unsigned long long)now_ns());
    char create_body[512];
    snprintf(create_body, sizeof create_body,
             "{\"idempotency_key\":\"%s\",\"ttl_ms\":6000,\"subject\":{\"tenant\":\"c-test\"},"
             "\"action\":{\"kind\":\"test\",\"name\":\"adopt\"},\"estimate\":{\"unit\":\"TOKENS\",\"amount\":1}}",
             create_key);
    http_response r;
    uint64_t sent = now_ns();
    int got = http_post(port, "/v1/reservations", create_key, create_body, &r);
    uint64_t received = now_ns();
    check(got && r.status == 200, "adopt live: create: got %s status %d: %.200s", got ? "a response" : "no response",
          r.status, r.raw ? r.raw : "");
    if (!got || r.status != 200) {
        http_response_free(&r);
        return;
    }

    lb_config *cfg = NULL;
    EXPECT(lb_config_new(&cfg), LB_STATUS_OK);
    EXPECT(lb_config_set_ttl_ms(cfg, 6000), LB_STATUS_OK);
    EXPECT(lb_config_set_request_timeout_ms(cfg, 1000), LB_STATUS_OK);
    lb_adopted_create c;
    memset(&c, 0, sizeof c);
    c.key = create_key;
    c.request_body = (const uint8_t *)create_body;
    c.request_body_len = strlen(create_body);
    c.sent_known = true;
    c.sent_ns = sent;
    c.received_ns = received;
    c.outcome = LB_ADOPTED_RESPONSE;
    c.status = (uint32_t)r.status;
    c.headers = r.headers;
    c.header_count = r.header_count;
    c.body = (const uint8_t *)r.body;
    c.body_len = r.body_len;
    lb_heartbeat *hb = NULL;
    EXPECT(lb_heartbeat_adopt_create(cfg, &c, &hb), LB_STATUS_OK);
    http_response_free(&r);
    lb_config_free(cfg);
    if (!hb) return;

    char rid[160] = "";
    size_t need = 0;
    lb_decision *d = first_decision(hb);
    lb_decision_info info;
    lb_decision_instants ins;
    memset(&info, 0, sizeof info);
    if (d) {
        EXPECT(lb_decision_get(d, &info), LB_STATUS_OK);
        EXPECT(lb_decision_reservation_id(d, rid, sizeof rid, &need), LB_STATUS_OK);
        /* The first beat is scheduled from the create (HB-15), not sent at once. */
        check(info.next == LB_NEXT_EXTEND && info.key_use == LB_KEY_USE_NEW && info.key_index == 2 &&
                  info.mode == LB_MODE_PRIMARY && info.numbers.next_delay.kind == LB_NUM_KIND_FINITE &&
                  info.numbers.next_delay.magnitude > 0 && !info.at.infinite && info.at.ns > received,
              "adopt live: the first decision is not a later extension (next %s, key_index %u, next_delay %llu)",
              lb_next_str(info.next), info.key_index, (unsigned long long)info.numbers.next_delay.magnitude);
        EXPECT(lb_decision_get_instants(d, &ins), LB_STATUS_OK);
        CHECK(ins.has_proven_until && !ins.proven_until.infinite && ins.proven_until.ns > info.at.ns);
        CHECK(ins.has_expires_at_ms && ins.has_remaining_ttl_ms && ins.remaining_ttl_ms <= 6000);
    }
    lb_decision_free(d);

    /* One beat at its due time, then a cancel. */
    lb_action a;
    EXPECT(lb_heartbeat_poll_action(hb, &a), LB_STATUS_OK);
    int extensions_sent = 0;
    if (a.kind == LB_ACTION_KIND_SEND && a.attempt_kind == LB_NEXT_EXTEND && !a.due.infinite) {
        sleep_until(a.due.ns);
        char *key = attempt_text(hb, 0);
        char *body = attempt_text(hb, 1);
        char path[256];
        snprintf(path, sizeof path, "/v1/reservations/%s/extend", rid);
        uint64_t s = now_ns();
        EXPECT(lb_heartbeat_handle_sent(hb, a.attempt_id, s), LB_STATUS_OK);
        got = key && body && http_post(port, path, key, body, &r);
        uint64_t rcv = now_ns();
        extensions_sent++;
        if (got) {
            EXPECT(lb_heartbeat_handle_response(hb, a.attempt_id, (uint32_t)r.status, r.headers, r.header_count,
                                                (const uint8_t *)r.body, r.body_len, false, rcv),
                   LB_STATUS_OK);
            d = first_decision(hb);
            if (d) {
                EXPECT(lb_decision_get(d, &info), LB_STATUS_OK);
                check(info.outcome == LB_OUTCOME_SUCCESS && info.next == LB_NEXT_EXTEND && info.key_index == 3,
                      "adopt live: the extension did not succeed (status %d)", r.status);
                EXPECT(lb_decision_get_instants(d, &ins), LB_STATUS_OK);
                CHECK(ins.has_proven_until && !ins.proven_until.infinite && ins.proven_until.ns >= rcv);
                CHECK(ins.has_expires_at_ms);
            }
            lb_decision_free(d);
        } else {
            check(0, "adopt live: the extension got no response");
        }
        http_response_free(&r);
        free(key);
        free(body);
    } else {
        check(0, "adopt live: expected an extension to send");
    }
    EXPECT(lb_heartbeat_cancel(hb, now_ns()), LB_STATUS_OK);
    lb_heartbeat_free(hb);

    /* The server's log: this create once, and exactly the extensions sent. */
    if (!log_path) {
        check(0, "adopt live: no --server-log FILE");
        return;
    }
    int creates = -1, extends = -1;
    for (int tries = 0; tries < 100; tries++) {
        creates = count_log(log_path, "create", "header_key", create_key);
        extends = count_log(log_path, "extend", "reservation_id", rid);
        if (creates >= 1 && extends >= extensions_sent) break;
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    check(creates == 1 && extends == extensions_sent,
          "adopt live: the server logged %d create(s) and %d extension(s) for %s, want 1 and %d", creates, extends,
          rid, extensions_sent);
    if (creates == 1 && extends == extensions_sent)
        printf("ok adopt live: server log for %s: 1 create, %d extension (no priming extension)\n", rid, extends);
}

void run_adopt_tests(const char *server_url, const char *server_log) {
    test_adopt_refusals();
    test_adopt_outcomes();
    if (server_url) test_adopt_live(server_url, server_log);
    else printf("skipped: the live adopt test (no --server URL)\n");
}
