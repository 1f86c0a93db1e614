/* c.primary: the primary decision of scripts/bench-rust.sh's rust.primary,
 * through the C ABI: lb_heartbeat_handle_response() of the 200 extend body,
 * then lb_heartbeat_poll_action(), sequential keys, in a lease that keeps
 * extending (each operation also marks the attempt sent, as the Rust figure
 * does). Median over rounds of ns per operation; prints one BENCH line.
 * Built and run by scripts/bench-c.sh. Not a test. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "leasebeat.h"

#define MS 1000000ULL

static const char CREATE[] =
    "{\"decision\":\"ALLOW\",\"reservation_id\":\"r-1\",\"affected_scopes\":[\"tenant:acme\"],"
    "\"expires_at_ms\":1785585660000,\"remaining_ttl_ms\":61500}";
static const char EXTEND[] =
    "{\"status\":\"ACTIVE\",\"expires_at_ms\":1785585720000,\"remaining_ttl_ms\":60000}";

static void check(enum lb_status s, const char *what) {
    if (s != LB_STATUS_OK) {
        char buf[512];
        size_t needed = 0;
        if (lb_last_error(buf, sizeof buf, &needed) != LB_STATUS_OK) buf[0] = 0;
        fprintf(stderr, "%s failed: %d %s\n", what, (int)s, buf);
        exit(1);
    }
}

static lb_heartbeat *lease(void) {
    lb_config *cfg = NULL;
    lb_heartbeat *hb = NULL;
    lb_action a;
    check(lb_config_new(&cfg), "lb_config_new");
    check(lb_config_set_ttl_ms(cfg, 60000), "ttl");
    check(lb_config_set_request_timeout_ms(cfg, 10000), "timeout");
    check(lb_config_set_key_prefix(cfg, "k"), "prefix");
    check(lb_heartbeat_new(cfg, &hb), "lb_heartbeat_new");
    lb_config_free(cfg);
    check(lb_heartbeat_poll_action(hb, &a), "poll");
    check(lb_heartbeat_handle_sent(hb, a.attempt_id, 0), "sent");
    check(lb_heartbeat_handle_response(hb, a.attempt_id, 200, NULL, 0, (const uint8_t *)CREATE,
                                       strlen(CREATE), false, 1500 * MS),
          "create response");
    return hb;
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 41;
    const int n = 20000;
    size_t body_len = strlen(EXTEND);
    lb_heartbeat *hb = lease();
    lb_action a;
    double *per = calloc((size_t)rounds, sizeof *per);
    check(lb_heartbeat_poll_action(hb, &a), "poll");
    for (int r = -1; r < rounds; r++) { /* round -1 warms up */
        double t0 = now_ns();
        for (int i = 0; i < n; i++) {
            uint64_t due = a.due.ns;
            if (a.kind != LB_ACTION_KIND_SEND || a.due.infinite) {
                fprintf(stderr, "unexpected action %d\n", (int)a.kind);
                return 1;
            }
            if (due > UINT64_MAX / 4) { /* restart long before the clock overflows */
                lb_heartbeat_free(hb);
                hb = lease();
                check(lb_heartbeat_poll_action(hb, &a), "poll");
                continue;
            }
            check(lb_heartbeat_handle_sent(hb, a.attempt_id, due), "sent");
            check(lb_heartbeat_handle_response(hb, a.attempt_id, 200, NULL, 0,
                                               (const uint8_t *)EXTEND, body_len, false,
                                               due + 100 * MS),
                  "response");
            check(lb_heartbeat_poll_action(hb, &a), "poll");
        }
        if (r >= 0) per[r] = (now_ns() - t0) / n;
    }
    qsort(per, (size_t)rounds, sizeof *per, cmp);
    printf("c.primary: median %.1f ns per decision over %d rounds of %d\n", per[rounds / 2], rounds, n);
    printf("BENCH {\"id\": \"c.primary\", \"what\": \"lb_heartbeat_handle_response(200 extend body) + "
           "lb_heartbeat_poll_action, sequential keys, from C\", \"value\": %.1f, \"unit\": \"ns\"}\n",
           per[rounds / 2]);
    lb_heartbeat_free(hb);
    free(per);
    return 0;
}
