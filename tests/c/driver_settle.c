/*
 * Tests of the C driver's settlement API (issue 27): the driver
 * configuration with the journal, lease options (HP-1: a cancellation flag,
 * a cancel callback, fail_on_finalize), commit and release of a lease or of
 * a reservation through the core's Settlement and journal, lb_settling /
 * lb_settle_result, flush, replay, the settlement events (heartbeat failure,
 * settlement, settled, journal) through the event callback; NULL for every
 * pointer, bad UTF-8, bad bodies (not JSON, an amount beyond 2^63-1), ids
 * with NUL, '/' or 10,000 characters, a journal directory that is a symbolic
 * link or a file. The live part runs against the stage's `leasebeat serve`.
 * The recovery scenarios themselves are tests/c/recovery.c.
 */
#define _GNU_SOURCE

#include "harness.h"

#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CREATE_BODY                                                                                    \
    "{\"subject\":{\"tenant\":\"acme\"},\"action\":{\"kind\":\"llm.completion\",\"name\":\"m\"},"     \
    "\"estimate\":{\"unit\":\"TOKENS\",\"amount\":1000}}"
#define USAGE_OK                                                                                       \
    "{\"actual\":{\"unit\":\"TOKENS\",\"amount\":42},\"metrics\":{\"tokens_input\":1,\"tokens_output\":2}," \
    "\"metadata\":{\"k\":\"v\"}}"

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int kinds[8];
    int settlement_decisions_ok; /* lb_event_settlement_decision gave a decision */
    int settled_results_ok;      /* lb_event_settle_result gave a result */
    int json_ok;                 /* lb_event_json gave a kind member */
    int reservations;            /* decision events with a reservation id and 200 */
    int stopped_not_found;
    int journal_events;
    lb_lease_id last_reserved_lease;
    /* ST-11 for lease `watch`: the sequence number of its final settlement
       decision and of its stopped event (0: not seen) */
    lb_lease_id watch;
    int seq, final_decision_seq, stopped_seq;
} ds_rec;

static void ds_on_event(void *ud, const lb_event *ev) {
    ds_rec *r = ud;
    lb_event_info i;
    if (lb_event_get(ev, &i) != LB_STATUS_OK) return;
    char json[8192];
    size_t need = 0;
    lb_status js = lb_event_json(ev, json, sizeof json, &need);
    const lb_settlement_decision *sd = NULL;
    const lb_settle_result *sr = NULL;
    lb_event_settlement_decision(ev, &sd);
    lb_event_settle_result(ev, &sr);
    pthread_mutex_lock(&r->mu);
    r->seq++;
    if (r->watch && i.lease_id == r->watch) {
        if (i.kind == LB_EVENT_KIND_SETTLEMENT && i.settle_outcome != LB_SETTLE_OUTCOME_NONE && !r->final_decision_seq)
            r->final_decision_seq = r->seq;
        if (i.kind == LB_EVENT_KIND_STOPPED && !r->stopped_seq) r->stopped_seq = r->seq;
    }
    if ((unsigned)i.kind < 8) r->kinds[i.kind]++;
    if (i.kind == LB_EVENT_KIND_SETTLEMENT && sd) {
        lb_settlement_decision_info di;
        if (lb_settlement_decision_get(sd, &di) == LB_STATUS_OK) r->settlement_decisions_ok++;
    }
    if (i.kind == LB_EVENT_KIND_SETTLED && sr) {
        lb_settle_result_info ri;
        if (lb_settle_result_get(sr, &ri) == LB_STATUS_OK && ri.outcome == i.settle_outcome) r->settled_results_ok++;
    }
    if (i.kind >= LB_EVENT_KIND_HEARTBEAT_FAILURE && js == LB_STATUS_OK && strstr(json, "\"kind\":")) r->json_ok++;
    if (i.kind == LB_EVENT_KIND_DECISION && i.has_reservation_id && i.http_status == 200) {
        r->reservations++;
        r->last_reserved_lease = i.lease_id;
    }
    if (i.kind == LB_EVENT_KIND_STOPPED && i.stop_reason == LB_STOP_REASON_NOT_FOUND) r->stopped_not_found++;
    if (i.kind == LB_EVENT_KIND_JOURNAL) r->journal_events++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static int ds_wait(ds_rec *r, int *field, int want) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&r->mu);
    int rc = 0;
    while (*field < want && rc == 0) rc = pthread_cond_timedwait(&r->cv, &r->mu, &until);
    int ok = *field >= want;
    pthread_mutex_unlock(&r->mu);
    return ok;
}

static int ds_rm(const char *p, const struct stat *st, int fl, struct FTW *ftw) {
    (void)st;
    (void)fl;
    (void)ftw;
    return remove(p);
}

typedef struct {
    pthread_mutex_t mu;
    int calls;
    int kind_ok;
} cancel_rec;

static void on_cancel(void *ud, const lb_event *ev) {
    cancel_rec *c = ud;
    lb_event_info i;
    int ok = lb_event_get(ev, &i) == LB_STATUS_OK && i.kind == LB_EVENT_KIND_HEARTBEAT_FAILURE &&
             i.disposition == LB_HB_DISPOSITION_STOP;
    pthread_mutex_lock(&c->mu);
    c->calls++;
    c->kind_ok += ok;
    pthread_mutex_unlock(&c->mu);
}

static void test_offline(const char *tmp) {
    lb_driver_config *dc = NULL;
    EXPECT(lb_driver_config_new(NULL, "k", &dc), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_config_new("http://127.0.0.1:1", NULL, &dc), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_config_new("http://127.0.0.1:1", "k", NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_config_new("\xff", "k", &dc), LB_STATUS_INVALID_UTF8);
    CHECK(dc == NULL);
    lb_driver_config_free(NULL);
    EXPECT(lb_driver_config_set_max_workers(NULL, 1), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_config_set_settle_timeout_ms(NULL, 1), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_config_set_settle_retry(NULL, 1, 1, 1), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_config_set_shutdown_flush_ms(NULL, 1), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_config_set_journal_enabled(NULL, true), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_config_set_journal_dir(NULL, "x"), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_config_set_journal_tenant(NULL, "x"), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_config_set_replay_on_start(NULL, true), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_config_new("http://127.0.0.1:1", "k", &dc), LB_STATUS_OK);
    EXPECT(lb_driver_config_set_settle_retry(dc, 0, 500, 1000), LB_STATUS_INVALID_CONFIG);
    EXPECT(lb_driver_config_set_journal_dir(dc, "\xc3"), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_driver_config_set_journal_tenant(dc, "\xe2\x82"), LB_STATUS_INVALID_UTF8);
    lb_driver *d = NULL;
    EXPECT(lb_driver_new_with(NULL, ds_on_event, NULL, &d), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_new_with(dc, NULL, NULL, &d), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_new_with(dc, ds_on_event, NULL, NULL), LB_STATUS_NULL_ARGUMENT);
    /* the journal directory a symbolic link, a file */
    char real[1024], link[1100], file[1100];
    snprintf(real, sizeof real, "%s/real", tmp);
    snprintf(link, sizeof link, "%s/link", tmp);
    snprintf(file, sizeof file, "%s/file", tmp);
    CHECK(mkdir(real, 0700) == 0 && symlink(real, link) == 0);
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
    EXPECT(lb_driver_config_set_journal_dir(dc, link), LB_STATUS_OK);
    EXPECT(lb_driver_new_with(dc, ds_on_event, NULL, &d), LB_STATUS_JOURNAL_SYMLINK);
    EXPECT(lb_driver_config_set_journal_dir(dc, file), LB_STATUS_OK);
    EXPECT(lb_driver_new_with(dc, ds_on_event, NULL, &d), LB_STATUS_JOURNAL_NOT_A_DIRECTORY);
    CHECK(d == NULL);
    /* the journal off: replay refused, the journal dir empty */
    EXPECT(lb_driver_config_set_journal_enabled(dc, false), LB_STATUS_OK);
    EXPECT(lb_driver_config_set_max_workers(dc, 0), LB_STATUS_OK);
    EXPECT(lb_driver_new_with(dc, ds_on_event, NULL, &d), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_driver_config_set_max_workers(dc, 1), LB_STATUS_OK);
    EXPECT(lb_driver_new_with(dc, ds_on_event, NULL, &d), LB_STATUS_OK);
    lb_driver_config_free(dc);
    EXPECT(lb_driver_replay(d), LB_STATUS_INVALID_CONFIG);
    size_t need = 99;
    EXPECT(lb_driver_journal_dir(d, NULL, 0, &need), LB_STATUS_OK);
    CHECK(need == 1);
    EXPECT(lb_driver_journal_dir(NULL, NULL, 0, &need), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_replay(NULL), LB_STATUS_NULL_ARGUMENT);
    lb_flush_report fr;
    EXPECT(lb_driver_flush(NULL, 0, &fr), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_flush(d, 0, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_flush(d, 10, &fr), LB_STATUS_OK);
    CHECK(fr.settled && fr.pending == 0);
    /* settle calls refused before anything goes */
    lb_settling *s = NULL;
    EXPECT(lb_driver_commit_lease(NULL, 1, USAGE_OK, &s), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_commit_lease(d, 1, USAGE_OK, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_commit_lease(d, 77, USAGE_OK, &s), LB_STATUS_INVALID_ARGUMENT); /* unknown lease */
    EXPECT(lb_driver_commit_lease(d, 1, "\xff", &s), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_driver_release_lease(NULL, 1, NULL, &s), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_release_lease(d, 1, "\xff", &s), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_driver_release_lease(d, 77, NULL, &s), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_driver_commit_reservation(NULL, "r", 1, USAGE_OK, NULL, &s), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_commit_reservation(d, NULL, 1, USAGE_OK, NULL, &s), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_commit_reservation(d, "r", 1, USAGE_OK, NULL, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_commit_reservation(d, "\xff", 1, USAGE_OK, NULL, &s), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_driver_commit_reservation(d, "r", 1, USAGE_OK, "\xff", &s), LB_STATUS_INVALID_UTF8);
    /* bad bodies and ids: typed, nothing sent (the core checks when the settlement is built) */
    EXPECT(lb_driver_commit_reservation(d, "r-1", 3, "not json", NULL, &s), LB_STATUS_INVALID_CONFIG);
    EXPECT(lb_driver_commit_reservation(d, "r-1", 3,
                                        "{\"actual\":{\"unit\":\"TOKENS\",\"amount\":9223372036854775808}}", NULL, &s),
           LB_STATUS_INVALID_CONFIG);
    EXPECT(lb_driver_commit_reservation(d, "r\0x", 3, USAGE_OK, NULL, &s), LB_STATUS_INVALID_CONFIG);
    char *long_id = malloc(10001);
    memset(long_id, 'x', 10000);
    long_id[10000] = 0;
    EXPECT(lb_driver_commit_reservation(d, long_id, 10000, USAGE_OK, NULL, &s), LB_STATUS_INVALID_CONFIG);
    EXPECT(lb_driver_release_reservation(d, long_id, 10000, NULL, &s), LB_STATUS_INVALID_CONFIG);
    free(long_id);
    EXPECT(lb_driver_release_reservation(NULL, "r", 1, NULL, &s), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_driver_release_reservation(d, "r", 1, "\xff", &s), LB_STATUS_INVALID_UTF8);
    CHECK(s == NULL);
    /* settling / result accessors */
    lb_lease_id lid = 0;
    lb_settle_result *res = NULL;
    EXPECT(lb_settling_lease(NULL, &lid), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settling_wait(NULL, 0, &res), LB_STATUS_NULL_ARGUMENT);
    lb_settling_free(NULL);
    lb_settle_result_info ri;
    EXPECT(lb_settle_result_get(NULL, &ri), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settle_result_code(NULL, NULL, 0, &need), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settle_result_key(NULL, NULL, 0, &need), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settle_result_reservation_id(NULL, NULL, 0, &need), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settle_result_json(NULL, NULL, 0, &need), LB_STATUS_NULL_ARGUMENT);
    lb_settlement_decision *dd = NULL;
    EXPECT(lb_settle_result_decision(NULL, 0, &dd), LB_STATUS_NULL_ARGUMENT);
    lb_settle_result_free(NULL);
    EXPECT(lb_event_json(NULL, NULL, 0, &need), LB_STATUS_NULL_ARGUMENT);
    const lb_settlement_decision *sd = NULL;
    const lb_settle_result *sr = NULL;
    EXPECT(lb_event_settlement_decision(NULL, &sd), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_event_settle_result(NULL, &sr), LB_STATUS_NULL_ARGUMENT);
    lb_driver_free(d);
    /* lease options and the cancellation flag */
    lb_lease_options *o = NULL;
    EXPECT(lb_lease_options_new(NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_lease_options_new(&o), LB_STATUS_OK);
    EXPECT(lb_lease_options_set_policy(o, LB_FAILURE_POLICY_CANCEL), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_lease_options_set_policy(o, 7), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_lease_options_set_policy(NULL, LB_FAILURE_POLICY_WARN), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_lease_options_set_policy(o, LB_FAILURE_POLICY_FAIL_ON_FINALIZE), LB_STATUS_OK);
    EXPECT(lb_lease_options_set_event(o, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_lease_options_set_event(o, "\xff"), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_lease_options_set_cancel_callback(o, NULL, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_lease_options_set_cancel_flag(o, NULL), LB_STATUS_NULL_ARGUMENT);
    lb_lease_options_free(o);
    lb_lease_options_free(NULL);
    lb_cancel_flag *fl = NULL;
    bool set = true;
    EXPECT(lb_cancel_flag_new(NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_cancel_flag_new(&fl), LB_STATUS_OK);
    EXPECT(lb_cancel_flag_is_cancelled(fl, &set), LB_STATUS_OK);
    CHECK(!set);
    EXPECT(lb_cancel_flag_wait(fl, 1, &set), LB_STATUS_OK);
    CHECK(!set);
    EXPECT(lb_cancel_flag_cancel(fl), LB_STATUS_OK);
    EXPECT(lb_cancel_flag_wait(fl, 1000, &set), LB_STATUS_OK);
    CHECK(set);
    char buf[64];
    EXPECT(lb_cancel_flag_failure_json(fl, buf, sizeof buf, &need), LB_STATUS_OK);
    CHECK(strcmp(buf, "null") == 0); /* cancelled by the work, not by a failure */
    EXPECT(lb_cancel_flag_is_cancelled(NULL, &set), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_cancel_flag_is_cancelled(fl, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_cancel_flag_wait(NULL, 0, &set), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_cancel_flag_cancel(NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_cancel_flag_failure_json(NULL, buf, sizeof buf, &need), LB_STATUS_NULL_ARGUMENT);
    lb_cancel_flag_free(fl);
    lb_cancel_flag_free(NULL);
    CHECK(strcmp(lb_hb_disposition_str(LB_HB_DISPOSITION_RETRY_SAME_KEY), "retry_same_key") == 0);
    CHECK(strcmp(lb_hb_disposition_str(LB_HB_DISPOSITION_STOP), "stop") == 0);
    CHECK(strcmp(lb_hb_disposition_str(9), "unknown") == 0);
}

static lb_config *lease_cfg(void) {
    lb_config *c = NULL;
    EXPECT(lb_config_new(&c), LB_STATUS_OK);
    EXPECT(lb_config_set_ttl_ms(c, 60000), LB_STATUS_OK);
    EXPECT(lb_config_set_request_timeout_ms(c, 2000), LB_STATUS_OK);
    EXPECT(lb_config_set_create_request(c, CREATE_BODY), LB_STATUS_OK);
    return c;
}

static lb_settle_result *settle_wait(lb_settling *s) {
    lb_settle_result *r = NULL;
    if (!s) return NULL;
    EXPECT(lb_settling_wait(s, 20000, &r), LB_STATUS_OK);
    return r;
}

static void test_live(const char *url, const char *tmp) {
    ds_rec r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    char base[1100];
    snprintf(base, sizeof base, "%s/journal", tmp);
    lb_driver_config *dc = NULL;
    EXPECT(lb_driver_config_new(url, "ds-key", &dc), LB_STATUS_OK);
    EXPECT(lb_driver_config_set_journal_dir(dc, base), LB_STATUS_OK);
    EXPECT(lb_driver_config_set_settle_retry(dc, 3, 100, 400), LB_STATUS_OK);
    lb_driver *d = NULL;
    EXPECT(lb_driver_new_with(dc, ds_on_event, &r, &d), LB_STATUS_OK);
    lb_driver_config_free(dc);
    if (!d) return;
    CHECK(ds_wait(&r, &r.journal_events, 1)); /* the start replay's report */
    size_t need = 0;
    char jdir[2048];
    EXPECT(lb_driver_journal_dir(d, jdir, sizeof jdir, &need), LB_STATUS_OK);
    CHECK(strncmp(jdir, base, strlen(base)) == 0);

    /* a lease committed with metrics and metadata */
    lb_config *cfg = lease_cfg();
    lb_lease_id lease = 0;
    EXPECT(lb_driver_start_with(d, cfg, NULL, &lease), LB_STATUS_OK);
    CHECK(ds_wait(&r, &r.reservations, 1));
    pthread_mutex_lock(&r.mu);
    r.watch = lease;
    pthread_mutex_unlock(&r.mu);
    lb_settling *s = NULL;
    EXPECT(lb_driver_commit_lease(d, lease, USAGE_OK, &s), LB_STATUS_OK);
    lb_settle_result *res = NULL;
    lb_status w0 = s ? lb_settling_wait(s, 0, &res) : LB_STATUS_TIMED_OUT;
    CHECK(w0 == LB_STATUS_TIMED_OUT || w0 == LB_STATUS_OK);
    lb_settle_result_free(res);
    lb_lease_id sl = 0;
    EXPECT(lb_settling_lease(s, &sl), LB_STATUS_OK);
    CHECK(sl == lease);
    lb_settling *again = NULL;
    EXPECT(lb_driver_commit_lease(d, lease, USAGE_OK, &again), LB_STATUS_INVALID_ARGUMENT); /* already settling */
    res = settle_wait(s);
    lb_settle_result_info ri;
    memset(&ri, 0, sizeof ri);
    if (res) EXPECT(lb_settle_result_get(res, &ri), LB_STATUS_OK);
    CHECK(ri.outcome == LB_SETTLE_OUTCOME_COMMITTED && ri.success && ri.journaled && !ri.record_kept && ri.status == 200);
    CHECK(ri.decision_count >= 4 && !ri.replayed && !ri.failed_after_heartbeat && ri.lease_id == lease);
    char key[128] = "", rid[128] = "";
    if (res) {
        EXPECT(lb_settle_result_key(res, key, sizeof key, &need), LB_STATUS_OK);
        EXPECT(lb_settle_result_reservation_id(res, rid, sizeof rid, &need), LB_STATUS_OK);
        lb_settlement_decision *first = NULL;
        EXPECT(lb_settle_result_decision(res, 0, &first), LB_STATUS_OK);
        lb_settlement_decision_info di;
        if (first) EXPECT(lb_settlement_decision_get(first, &di), LB_STATUS_OK);
        CHECK(first && di.next == LB_SETTLE_NEXT_PERSIST); /* J-1: the record first */
        lb_settlement_decision_free(first);
        EXPECT(lb_settle_result_decision(res, 99, &first), LB_STATUS_INVALID_ARGUMENT);
        char json[8192];
        EXPECT(lb_settle_result_json(res, json, sizeof json, &need), LB_STATUS_OK);
        CHECK(strstr(json, "\"outcome\":\"committed\"") != NULL);
    }
    CHECK(strlen(key) == 36 && strncmp(rid, "rsv-", 4) == 0);
    /* ST-11: the heartbeat ran while the commit was in flight and stopped only
       after the final settlement decision (stop_heartbeat) */
    CHECK(ds_wait(&r, &r.stopped_seq, 1));
    pthread_mutex_lock(&r.mu);
    CHECK(r.final_decision_seq > 0 && r.stopped_seq > r.final_decision_seq);
    pthread_mutex_unlock(&r.mu);
    /* a second wait gives the same result */
    lb_settle_result *res2 = NULL;
    EXPECT(lb_settling_wait(s, 0, &res2), LB_STATUS_OK);
    lb_settle_result_free(res2);
    lb_settle_result_free(res);
    lb_settling_free(s);

    /* a lease released (work that used nothing) */
    lb_lease_id lease2 = 0;
    EXPECT(lb_driver_start_with(d, cfg, NULL, &lease2), LB_STATUS_OK);
    CHECK(ds_wait(&r, &r.reservations, 2));
    s = NULL;
    EXPECT(lb_driver_release_lease(d, lease2, "unused", &s), LB_STATUS_OK);
    res = settle_wait(s);
    memset(&ri, 0, sizeof ri);
    if (res) EXPECT(lb_settle_result_get(res, &ri), LB_STATUS_OK);
    CHECK(ri.outcome == LB_SETTLE_OUTCOME_RELEASED && !ri.journaled);
    lb_settle_result_free(res);
    lb_settling_free(s);

    /* lb_driver_forget: a running lease is cancelled and dropped; it can no longer
       be settled (unknown lease); twice is accepted; a settled lease too */
    lb_lease_id lease_f = 0;
    EXPECT(lb_driver_start_with(d, cfg, NULL, &lease_f), LB_STATUS_OK);
    CHECK(ds_wait(&r, &r.reservations, 3));
    EXPECT(lb_driver_forget(d, lease_f), LB_STATUS_OK);
    EXPECT(lb_driver_forget(d, lease_f), LB_STATUS_OK);
    s = NULL;
    EXPECT(lb_driver_commit_lease(d, lease_f, USAGE_OK, &s), LB_STATUS_INVALID_ARGUMENT);
    CHECK(s == NULL);
    EXPECT(lb_driver_release_lease(d, lease_f, NULL, &s), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_driver_forget(d, lease2), LB_STATUS_OK);
    EXPECT(lb_driver_forget(d, lease_f + 1000), LB_STATUS_INVALID_ARGUMENT); /* never started */
    EXPECT(lb_driver_forget(d, 0), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_driver_forget(NULL, lease_f), LB_STATUS_NULL_ARGUMENT);

    /* a reservation held elsewhere, an id with '/' (unknown here: 404, rejected, removed) */
    s = NULL;
    EXPECT(lb_driver_commit_reservation(d, "tenant/a/r-9", 12, USAGE_OK, NULL, &s), LB_STATUS_OK);
    res = settle_wait(s);
    memset(&ri, 0, sizeof ri);
    if (res) EXPECT(lb_settle_result_get(res, &ri), LB_STATUS_OK);
    CHECK(ri.outcome == LB_SETTLE_OUTCOME_REJECTED && ri.status == 404 && ri.has_code && !ri.record_kept);
    char code[64] = "";
    if (res) EXPECT(lb_settle_result_code(res, code, sizeof code, &need), LB_STATUS_OK);
    CHECK(strcmp(code, "NOT_FOUND") == 0);
    lb_settle_result_free(res);
    lb_settling_free(s);

    /* HP-1 cancel through a flag: an adopted reservation the server does not know
       (the first extension: 404 -> the heartbeat stops, not_found) */
    lb_cancel_flag *flag = NULL;
    EXPECT(lb_cancel_flag_new(&flag), LB_STATUS_OK);
    lb_lease_options *o = NULL;
    EXPECT(lb_lease_options_new(&o), LB_STATUS_OK);
    EXPECT(lb_lease_options_set_cancel_flag(o, flag), LB_STATUS_OK);
    EXPECT(lb_lease_options_set_event(o, "{\"subject\":{\"tenant\":\"acme\"},\"action\":{\"kind\":\"k\",\"name\":\"n\"}}"),
           LB_STATUS_OK);
    lb_lease_id lease3 = 0;
    EXPECT(lb_driver_start_for_reservation_with(d, cfg, "rsv-unknown-1", o, &lease3), LB_STATUS_OK);
    lb_lease_options_free(o);
    bool set = false;
    EXPECT(lb_cancel_flag_wait(flag, 20000, &set), LB_STATUS_OK);
    CHECK(set);
    char fj[2048] = "";
    EXPECT(lb_cancel_flag_failure_json(flag, fj, sizeof fj, &need), LB_STATUS_OK);
    CHECK(strstr(fj, "\"disposition\":\"stop\"") && strstr(fj, "not_found") && strstr(fj, "rsv-unknown-1"));
    lb_cancel_flag_free(flag);

    /* HP-1 cancel through a callback */
    cancel_rec cr;
    memset(&cr, 0, sizeof cr);
    pthread_mutex_init(&cr.mu, NULL);
    EXPECT(lb_lease_options_new(&o), LB_STATUS_OK);
    EXPECT(lb_lease_options_set_cancel_callback(o, on_cancel, &cr), LB_STATUS_OK);
    EXPECT(lb_lease_options_set_policy(o, LB_FAILURE_POLICY_CANCEL), LB_STATUS_OK);
    lb_lease_id lease4 = 0;
    EXPECT(lb_driver_start_for_reservation_with(d, cfg, "rsv-unknown-2", o, &lease4), LB_STATUS_OK);
    lb_lease_options_free(o);
    CHECK(ds_wait(&r, &r.stopped_not_found, 2));

    /* HP-1 fail_on_finalize: the settlement still runs, then reports the failure */
    EXPECT(lb_lease_options_new(&o), LB_STATUS_OK);
    EXPECT(lb_lease_options_set_policy(o, LB_FAILURE_POLICY_FAIL_ON_FINALIZE), LB_STATUS_OK);
    lb_lease_id lease5 = 0;
    EXPECT(lb_driver_start_for_reservation_with(d, cfg, "rsv-unknown-3", o, &lease5), LB_STATUS_OK);
    lb_lease_options_free(o);
    CHECK(ds_wait(&r, &r.stopped_not_found, 3));
    s = NULL;
    EXPECT(lb_driver_commit_lease(d, lease5, USAGE_OK, &s), LB_STATUS_OK);
    res = settle_wait(s);
    memset(&ri, 0, sizeof ri);
    if (res) EXPECT(lb_settle_result_get(res, &ri), LB_STATUS_OK);
    CHECK(ri.failed_after_heartbeat && !ri.success && ri.outcome == LB_SETTLE_OUTCOME_REJECTED);
    lb_settle_result_free(res);
    lb_settling_free(s);

    lb_flush_report fr;
    EXPECT(lb_driver_flush(d, 5000, &fr), LB_STATUS_OK);
    CHECK(fr.settled && fr.pending == 0);
    EXPECT(lb_driver_replay(d), LB_STATUS_OK);
    CHECK(ds_wait(&r, &r.journal_events, 2));
    lb_config_free(cfg);
    lb_driver_free(d);
    pthread_mutex_lock(&cr.mu);
    CHECK(cr.calls == 1 && cr.kind_ok == 1); /* once, with the failure event */
    pthread_mutex_unlock(&cr.mu);
    CHECK(r.kinds[LB_EVENT_KIND_HEARTBEAT_FAILURE] >= 3);
    CHECK(r.kinds[LB_EVENT_KIND_SETTLEMENT] >= 10 && r.settlement_decisions_ok == r.kinds[LB_EVENT_KIND_SETTLEMENT]);
    CHECK(r.kinds[LB_EVENT_KIND_SETTLED] == 4 && r.settled_results_ok == 4);
    CHECK(r.json_ok == r.kinds[4] + r.kinds[5] + r.kinds[6] + r.kinds[7]);
    pthread_mutex_destroy(&cr.mu);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
}

void run_driver_settle_tests(const char *server_url) {
    char tmp[] = "/tmp/lbds-XXXXXX";
    if (!mkdtemp(tmp)) return;
    test_offline(tmp);
    if (server_url) {
        test_live(server_url, tmp);
        printf("ok driver settlement tests against %s\n", server_url);
    } else {
        printf("skipped: the live driver settlement tests (no --server URL)\n");
    }
    nftw(tmp, ds_rm, 16, FTW_DEPTH | FTW_PHYS);
}
