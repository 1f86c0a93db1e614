/*
 * A minimal C agent on leasebeat's HTTP driver: it holds one Cycles
 * reservation alive while it "works", then cancels and shuts down.
 *
 *   agent URL [API_KEY [REQUEST_TIMEOUT_MS]]
 *
 * Starts a driver against URL (e.g. the `listening on` URL printed by
 * `leasebeat serve`), creates a lease (ttl 4000 ms, request timeout 400 ms
 * unless given),
 * prints every event as it arrives (decisions as the library's JSON), and
 * cancels the lease after 3 successful extensions or 5 seconds, whichever
 * comes first. Then it shuts the driver down and frees everything.
 *
 * Exit status: 0 when it saw at least 3 successful extensions and then a
 * `cancelled` stop; 1 when the lease stopped otherwise (the stop is printed);
 * 2 on bad arguments or an API error; 3 when no stop arrived in time.
 */
#define _POSIX_C_SOURCE 200809L

#include <leasebeat.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TTL_MS 4000
#define REQUEST_TIMEOUT_MS 400
#define WANTED_EXTENDS 3
#define WORK_SECONDS 5
#define STOP_WAIT_SECONDS 30

/* What the callback shares with main, under `mu`. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int extends_ok;          /* successful extensions seen */
    int extends_before_stop; /* extends_ok when the stop arrived */
    int stopped;
    lb_stop_reason reason;
} agent_state;

static void print_error(const char *what, lb_status status) {
    char msg[512];
    size_t need = 0;
    if (lb_last_error(msg, sizeof msg, &need) != LB_STATUS_OK) snprintf(msg, sizeof msg, "%s", lb_status_str(status));
    fprintf(stderr, "agent: %s failed: %s\n", what, msg);
}

/* Runs on the driver's dispatcher thread, one event at a time. */
static void on_event(void *user_data, const lb_event *event) {
    agent_state *st = user_data;
    lb_event_info info;
    if (lb_event_get(event, &info) != LB_STATUS_OK) return;

    char rid[256] = "";
    size_t need = 0;
    if (info.has_reservation_id && lb_event_reservation_id(event, rid, sizeof rid, &need) != LB_STATUS_OK)
        snprintf(rid, sizeof rid, "(%zu bytes)", need);

    switch (info.kind) {
    case LB_EVENT_KIND_DECISION: {
        const lb_decision *d = NULL;
        char json[4096];
        if (lb_event_decision(event, &d) != LB_STATUS_OK || !d ||
            lb_decision_json(d, json, sizeof json, &need) != LB_STATUS_OK)
            snprintf(json, sizeof json, "(unavailable)");
        char outcome[32];
        if (info.outcome == LB_EVENT_OUTCOME_RESPONSE)
            snprintf(outcome, sizeof outcome, "%u", info.http_status);
        else if (info.outcome == LB_EVENT_OUTCOME_FAILURE)
            snprintf(outcome, sizeof outcome, "%s",
                     info.failure == LB_FAILURE_TIMEOUT   ? "timeout"
                     : info.failure == LB_FAILURE_CONNECT ? "connect"
                                                          : "reset");
        else
            snprintf(outcome, sizeof outcome, "cancelled");
        printf("decision lease=%llu reservation=%s attempt=%s outcome=%s %s\n", (unsigned long long)info.lease_id,
               rid[0] ? rid : "-", info.has_attempt ? lb_next_str(info.attempt_kind) : "-", outcome, json);
        if (info.has_attempt && info.attempt_kind == LB_NEXT_EXTEND && info.outcome == LB_EVENT_OUTCOME_RESPONSE &&
            info.http_status == 200 && info.stop_reason == LB_STOP_REASON_NONE) {
            pthread_mutex_lock(&st->mu);
            st->extends_ok++;
            pthread_cond_broadcast(&st->cv);
            pthread_mutex_unlock(&st->mu);
        }
        break;
    }
    case LB_EVENT_KIND_STOPPED:
        printf("stopped lease=%llu reservation=%s reason=%s\n", (unsigned long long)info.lease_id,
               rid[0] ? rid : "-", lb_stop_reason_str(info.stop_reason));
        pthread_mutex_lock(&st->mu);
        st->stopped = 1;
        st->reason = info.stop_reason;
        st->extends_before_stop = st->extends_ok;
        pthread_cond_broadcast(&st->cv);
        pthread_mutex_unlock(&st->mu);
        break;
    case LB_EVENT_KIND_ERROR: {
        char msg[512] = "";
        if (lb_event_error_message(event, msg, sizeof msg, &need) != LB_STATUS_OK) msg[0] = 0;
        printf("error lease=%llu %s\n", (unsigned long long)info.lease_id, msg);
        break;
    }
    case LB_EVENT_KIND_JEOPARDY:
        /* D-15: the lease may lapse before the driver learns more; it keeps beating. */
        printf("lease_in_jeopardy lease=%llu reservation=%s reason=%s\n", (unsigned long long)info.lease_id,
               rid[0] ? rid : "-", lb_jeopardy_reason_str(info.jeopardy));
        break;
    case LB_EVENT_KIND_HEARTBEAT_FAILURE: /* HP-1: reported under every policy */
    case LB_EVENT_KIND_SETTLEMENT:        /* a settlement decision (lb_driver_commit_lease, ...) */
    case LB_EVENT_KIND_SETTLED:           /* a settlement's end */
    case LB_EVENT_KIND_JOURNAL: {         /* the journal replay's findings (lease 0) */
        char json[4096];
        if (lb_event_json(event, json, sizeof json, &need) != LB_STATUS_OK) snprintf(json, sizeof json, "{}");
        printf("%s lease=%llu %s\n", lb_event_kind_str(info.kind), (unsigned long long)info.lease_id, json);
        break;
    }
    }
    fflush(stdout);
}

/* Waits until `done(st)` or the deadline; call with st->mu held. */
static void wait_until(agent_state *st, int (*done)(const agent_state *), int seconds) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += seconds;
    while (!done(st))
        if (pthread_cond_timedwait(&st->cv, &st->mu, &deadline) != 0) break;
}

static int worked_enough(const agent_state *st) { return st->stopped || st->extends_ok >= WANTED_EXTENDS; }
static int has_stopped(const agent_state *st) { return st->stopped; }

int main(int argc, char **argv) {
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: %s URL [API_KEY [REQUEST_TIMEOUT_MS]]\n", argv[0]);
        return 2;
    }
    const char *url = argv[1];
    const char *api_key = argc >= 3 ? argv[2] : "agent-demo-key";
    unsigned long long timeout_ms = REQUEST_TIMEOUT_MS;
    if (argc == 4) {
        char *end = NULL;
        timeout_ms = strtoull(argv[3], &end, 10);
        if (!end || *end || timeout_ms == 0) {
            fprintf(stderr, "agent: REQUEST_TIMEOUT_MS must be a positive integer\n");
            return 2;
        }
    }
    printf("leasebeat %s (header %s), server %s\n", lb_version(), LEASEBEAT_VERSION, url);

    agent_state st;
    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.mu, NULL);
    pthread_cond_init(&st.cv, NULL);
    int code = 2;
    lb_config *cfg = NULL;
    lb_driver *driver = NULL;
    lb_status s;

    if ((s = lb_config_new(&cfg)) != LB_STATUS_OK) {
        print_error("lb_config_new", s);
        goto out;
    }
    if ((s = lb_config_set_ttl_ms(cfg, TTL_MS)) != LB_STATUS_OK ||
        (s = lb_config_set_request_timeout_ms(cfg, timeout_ms)) != LB_STATUS_OK ||
        (s = lb_config_set_create_request(cfg, "{\"subject\":{\"tenant\":\"demo\"},"
                                               "\"action\":{\"kind\":\"llm.completion\",\"name\":\"c-agent\"},"
                                               "\"estimate\":{\"unit\":\"TOKENS\",\"amount\":1000}}")) != LB_STATUS_OK) {
        print_error("configuration", s);
        goto out;
    }
    if ((s = lb_driver_new(url, api_key, 4, on_event, &st, &driver)) != LB_STATUS_OK) {
        print_error("lb_driver_new", s);
        goto out;
    }
    lb_lease_id lease = 0;
    if ((s = lb_driver_start(driver, cfg, &lease)) != LB_STATUS_OK) {
        print_error("lb_driver_start", s);
        goto out;
    }
    printf("started lease %llu\n", (unsigned long long)lease);
    fflush(stdout);

    /* "Work" until enough beats, a stop, or the time is up; then cancel. */
    pthread_mutex_lock(&st.mu);
    wait_until(&st, worked_enough, WORK_SECONDS);
    int stopped_early = st.stopped;
    pthread_mutex_unlock(&st.mu);
    if (!stopped_early) {
        printf("work done: cancelling lease %llu\n", (unsigned long long)lease);
        fflush(stdout);
        if ((s = lb_driver_cancel(driver, lease)) != LB_STATUS_OK) {
            print_error("lb_driver_cancel", s);
            goto out;
        }
    }
    pthread_mutex_lock(&st.mu);
    wait_until(&st, has_stopped, STOP_WAIT_SECONDS);
    pthread_mutex_unlock(&st.mu);

    /* Every thread joined; the callback never runs after this. */
    if ((s = lb_driver_shutdown(driver)) != LB_STATUS_OK) print_error("lb_driver_shutdown", s);

    if (!st.stopped) {
        fprintf(stderr, "agent: no stop event arrived\n");
        code = 3;
    } else if (st.reason == LB_STOP_REASON_CANCELLED && st.extends_before_stop >= WANTED_EXTENDS) {
        printf("ok: %d successful extensions, then cancelled\n", st.extends_before_stop);
        code = 0;
    } else {
        printf("lease stopped: %s after %d successful extensions\n", lb_stop_reason_str(st.reason),
               st.extends_before_stop);
        code = 1;
    }
out:
    lb_driver_free(driver);
    lb_config_free(cfg);
    pthread_cond_destroy(&st.cv);
    pthread_mutex_destroy(&st.mu);
    return code;
}
