/*
 * Tests of the settlement journal through the C ABI (lb_journal_*): a
 * persist / finish / replay round trip with a settlement, a kept record
 * replayed with its key after a "restart" (a fresh journal handle from the
 * directory alone), a 429 floor that survives the restart (no send before
 * the persisted not_before_ms), claims between two handles (J-6: the second
 * replay finds the record busy), quarantine of a truncated and of a
 * hand-edited record (J-4), a legacy record whose id the settlement refuses
 * (quarantined by the replay), ids with '/', NUL (explicit length) and
 * 10,000 characters, a journal directory that is a symbolic link, one that
 * is not writable (chmod 0500: skipped as root, where permissions do not
 * bind; a read-only tmpfs instead when mount(2) works), a full disk (a tiny
 * tmpfs when mount(2) works; always a failing writer through RLIMIT_FSIZE
 * with SIGXFSZ ignored), NULL for every pointer, bad UTF-8.
 *
 * Every test works in its own temporary directory, removed at the end.
 */
#define _GNU_SOURCE

#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define BASE_URL "http://127.0.0.1:9"
#define COMMIT "{\"actual\":{\"unit\":\"TOKENS\",\"amount\":900}}"
#define EVENT "{\"subject\":{\"tenant\":\"acme\"},\"action\":{\"kind\":\"llm.completion\",\"name\":\"model-x\"}}"
#define COMMITTED "{\"status\":\"COMMITTED\",\"charged\":{\"unit\":\"TOKENS\",\"amount\":900}}"
#define WALL0 1785585600000ull
#define MS 1000000ull

/* ----- files ----- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_rf(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static char *tmpdir(void) {
    char *t = dup_str("/tmp/lbj-XXXXXX");
    if (!mkdtemp(t)) {
        perror("mkdtemp");
        exit(2);
    }
    return t;
}

/* The number of files in `dir` whose name starts with `prefix` and ends with `suffix`;
 * the first one's name into `first` (if not NULL). */
static int count_files(const char *dir, const char *prefix, const char *suffix, char *first, size_t first_len) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name), ls = strlen(suffix);
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && l >= ls && strcmp(e->d_name + l - ls, suffix) == 0) {
            if (n == 0 && first) snprintf(first, first_len, "%s/%s", dir, e->d_name);
            n++;
        }
    }
    closedir(d);
    return n;
}

static char *journal_dir(const lb_journal *j) {
    size_t need = 0;
    EXPECT(lb_journal_dir(j, NULL, 0, &need), LB_STATUS_OK);
    char *buf = malloc(need);
    if (!buf) exit(2);
    EXPECT(lb_journal_dir(j, buf, need, &need), LB_STATUS_OK);
    return buf;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    sbuf b = {0};
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) sb_put(&b, chunk, n);
    fclose(f);
    if (!b.data) sb_put(&b, "", 0);
    *len = b.len;
    return b.data;
}

static int write_all(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* ----- settlements ----- */

static lb_settlement_config *config(const char *prefix, uint32_t attempts) {
    lb_settlement_config *cfg = NULL;
    EXPECT(lb_settlement_config_new(&cfg), LB_STATUS_OK);
    EXPECT(lb_settlement_config_set_base_url(cfg, BASE_URL), LB_STATUS_OK);
    EXPECT(lb_settlement_config_set_event(cfg, EVENT), LB_STATUS_OK);
    EXPECT(lb_settlement_config_set_retry(cfg, attempts, 500, 30000), LB_STATUS_OK);
    if (prefix) EXPECT(lb_settlement_config_set_key_prefix(cfg, prefix), LB_STATUS_OK);
    return cfg;
}

static lb_settlement *commit(const lb_settlement_config *cfg, const char *id, size_t id_len, uint64_t now, uint64_t wall) {
    lb_settlement *s = NULL;
    EXPECT(lb_settlement_new_commit(cfg, id, id_len, COMMIT, now, wall, &s), LB_STATUS_OK);
    return s;
}

static lb_settlement_action action(const lb_settlement *s) {
    lb_settlement_action a;
    memset(&a, 0, sizeof a);
    EXPECT(lb_settlement_poll_action(s, &a), LB_STATUS_OK);
    return a;
}

/* Persists through the journal; the decision's info into *info (if not NULL); its
 * detail into detail (if not NULL). */
static lb_status persist(const lb_journal *j, lb_settlement *s, uint64_t now, lb_settlement_decision_info *info,
                         char *detail, size_t detail_len) {
    lb_settlement_decision *d = NULL;
    lb_status st = lb_journal_persist(j, s, now, &d);
    if (st != LB_STATUS_OK) return st;
    CHECK(d != NULL);
    lb_settlement_decision_info i;
    memset(&i, 0, sizeof i);
    EXPECT(lb_settlement_decision_get(d, &i), LB_STATUS_OK);
    if (info) *info = i;
    if (detail) {
        detail[0] = '\0';
        size_t need = 0;
        if (i.has_detail) EXPECT(lb_settlement_decision_detail(d, detail, detail_len, &need), LB_STATUS_OK);
    }
    lb_settlement_decision_free(d);
    return st;
}

/* Sends the due attempt (at its due time or `now`, whichever is later) and reports
 * `status` with `body` (and one header if `hname`). Returns the send time. */
static uint64_t exchange(lb_settlement *s, uint64_t now, uint64_t wall, unsigned status, const char *body,
                         const char *hname, const char *hvalue) {
    lb_settlement_action a = action(s);
    CHECK(a.kind == LB_SETTLEMENT_ACTION_KIND_SEND);
    uint64_t at = a.due_ns > now ? a.due_ns : now;
    EXPECT(lb_settlement_handle_sent(s, a.attempt_id, at), LB_STATUS_OK);
    lb_header h = {0};
    size_t hn = 0;
    if (hname) {
        h.name = (const uint8_t *)hname;
        h.name_len = strlen(hname);
        h.value = (const uint8_t *)hvalue;
        h.value_len = strlen(hvalue);
        hn = 1;
    }
    EXPECT(lb_settlement_handle_response(s, a.attempt_id, status, hn ? &h : NULL, hn, (const uint8_t *)body,
                                         strlen(body), at + MS, wall + (at + MS - now) / MS),
           LB_STATUS_OK);
    return at;
}

static char *settle_key(const lb_settlement *s) {
    size_t need = 0;
    EXPECT(lb_settlement_key(s, NULL, 0, &need), LB_STATUS_OK);
    char *k = malloc(need ? need : 1);
    if (!k) exit(2);
    k[0] = '\0';
    if (need) EXPECT(lb_settlement_key(s, k, need, &need), LB_STATUS_OK);
    return k;
}

static lb_journal *open_at(const char *base) {
    lb_journal *j = NULL;
    EXPECT(lb_journal_open(base, BASE_URL, "api-key-1", NULL, &j), LB_STATUS_OK);
    return j;
}

static lb_journal_counts report_counts(const lb_journal_replay_result *r) {
    const lb_journal_report *rep = NULL;
    lb_journal_counts c;
    memset(&c, 0, sizeof c);
    EXPECT(lb_journal_replay_report(r, &rep), LB_STATUS_OK);
    EXPECT(lb_journal_report_counts(rep, &c), LB_STATUS_OK);
    return c;
}

static lb_journal_replay_result *replay(const lb_journal *j, const lb_settlement_config *cfg, uint64_t now, uint64_t wall) {
    lb_journal_replay_result *r = NULL;
    EXPECT(lb_journal_replay(j, cfg, now, wall, &r), LB_STATUS_OK);
    return r;
}

static size_t replay_count(const lb_journal_replay_result *r) {
    size_t n = 99;
    EXPECT(lb_journal_replay_count(r, &n), LB_STATUS_OK);
    return n;
}

/* ----- the tests ----- */

/* J-1, J-5: persist writes the record before the commit may go; a success removes it. */
static void test_round_trip(void) {
    char *base = tmpdir();
    lb_journal *j = open_at(base);
    char *dir = journal_dir(j);
    CHECK(strncmp(dir, base, strlen(base)) == 0 && strlen(dir) == strlen(base) + 17);
    struct stat st;
    CHECK(stat(dir, &st) == 0 && (st.st_mode & 0777) == 0700);
    lb_settlement_config *cfg = config("rt-", 5);
    const char id[] = "tenant/a/r-1"; /* slashes: the file name is a hash */
    lb_settlement *s = commit(cfg, id, strlen(id), 0, WALL0);
    CHECK(action(s).kind == LB_SETTLEMENT_ACTION_KIND_PERSIST);
    /* lb_journal_finish before the end: refused, nothing touched. */
    EXPECT(lb_journal_finish(j, s), LB_STATUS_JOURNAL_NOT_FINISHED);
    CHECK(count_files(dir, "v2-", ".json", NULL, 0) == 0);
    lb_settlement_decision_info info;
    EXPECT(persist(j, s, MS, &info, NULL, 0), LB_STATUS_OK);
    CHECK(info.next == LB_SETTLE_NEXT_COMMIT && info.warning_count == 0);
    char path[4096];
    CHECK(count_files(dir, "v2-", ".json", path, sizeof path) == 1);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    size_t len = 0;
    char *text = read_all(path, &len);
    CHECK(text && strstr(text, "\"idempotency_key\":\"rt-1\"") && strstr(text, "\"reservation_id\":\"tenant/a/r-1\""));
    CHECK(text && !strstr(text, "api-key-1"));
    free(text);
    /* A persist when none is asked: refused, the settlement unchanged. */
    EXPECT(lb_journal_persist(j, s, MS, NULL), LB_STATUS_NOT_OUTSTANDING);
    CHECK(action(s).kind == LB_SETTLEMENT_ACTION_KIND_SEND);
    /* The scan sees it (operators' view). */
    lb_journal_report *rep = NULL;
    EXPECT(lb_journal_scan(j, &rep), LB_STATUS_OK);
    lb_journal_counts c;
    EXPECT(lb_journal_report_counts(rep, &c), LB_STATUS_OK);
    CHECK(c.records == 1 && c.quarantined == 0 && c.foreign == 0);
    size_t need = 0;
    EXPECT(lb_journal_report_record(rep, 0, NULL, 0, &need), LB_STATUS_OK);
    char *rec = malloc(need);
    EXPECT(lb_journal_report_record(rep, 0, rec, need, &need), LB_STATUS_OK);
    CHECK(strstr(rec, "\"mode\":\"commit\"") != NULL);
    free(rec);
    EXPECT(lb_journal_report_record(rep, 1, NULL, 0, &need), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_journal_report_json(rep, NULL, 0, &need), LB_STATUS_OK);
    char *js = malloc(need);
    char small[4];
    EXPECT(lb_journal_report_json(rep, small, sizeof small, &need), LB_STATUS_BUFFER_TOO_SMALL);
    EXPECT(lb_journal_report_json(rep, js, need, &need), LB_STATUS_OK);
    CHECK(strstr(js, "\"records\":[{") && strstr(js, "\"quarantined\":[]") && strstr(js, "\"reaped_temp_files\":0}"));
    free(js);
    lb_journal_report_free(rep);
    exchange(s, 2 * MS, WALL0 + 2, 200, COMMITTED, NULL, NULL);
    CHECK(action(s).kind == LB_SETTLEMENT_ACTION_KIND_DONE && action(s).outcome == LB_SETTLE_OUTCOME_COMMITTED);
    EXPECT(lb_journal_finish(j, s), LB_STATUS_OK);
    CHECK(count_files(dir, "v2-", ".json", NULL, 0) == 0);
    CHECK(count_files(dir, "v2-", ".lock", NULL, 0) == 0); /* the claim is released */
    lb_settlement_free(s);
    /* A release and a no_actual settlement: nothing journaled, finish is a no-op. */
    lb_settlement *rel = NULL;
    EXPECT(lb_settlement_new_commit(cfg, "r-2", 3, NULL, 0, WALL0, &rel), LB_STATUS_OK);
    CHECK(action(rel).outcome == LB_SETTLE_OUTCOME_NO_ACTUAL);
    EXPECT(lb_journal_persist(j, rel, 0, NULL), LB_STATUS_STOPPED);
    EXPECT(lb_journal_finish(j, rel), LB_STATUS_OK);
    lb_settlement_free(rel);
    lb_settlement_config_free(cfg);
    free(dir);
    lb_journal_free(j);
    rm_rf(base);
    free(base);
}

/* SP-4, J-6: an unresolved record survives a "restart" (a fresh handle, the directory
 * alone) and replays with the original key; two handles never replay the same record. */
static void test_restart_and_claims(void) {
    char *base = tmpdir();
    lb_settlement_config *cfg = config("rs-", 1);
    lb_journal *j = open_at(base);
    lb_settlement *s = commit(cfg, "r-keep", 6, 0, WALL0);
    char *key = settle_key(s);
    EXPECT(persist(j, s, MS, NULL, NULL, 0), LB_STATUS_OK);
    exchange(s, 2 * MS, WALL0, 503, "{}", NULL, NULL);
    CHECK(action(s).outcome == LB_SETTLE_OUTCOME_EXHAUSTED);
    EXPECT(lb_journal_finish(j, s), LB_STATUS_OK);
    char *dir = journal_dir(j);
    CHECK(count_files(dir, "v2-", ".json", NULL, 0) == 1); /* kept for replay */
    lb_settlement_free(s);
    lb_journal_free(j);

    lb_settlement_config *cfg2 = config(NULL, 5);
    lb_journal *a = open_at(base);
    lb_journal *b = open_at(base);
    lb_journal_replay_result *ra = replay(a, cfg2, 10 * MS, WALL0 + 10);
    CHECK(replay_count(ra) == 1);
    lb_journal_replay_result *rb = replay(b, cfg2, 10 * MS, WALL0 + 10);
    size_t busy = 0;
    EXPECT(lb_journal_replay_busy_count(rb, &busy), LB_STATUS_OK);
    CHECK(replay_count(rb) == 0 && busy == 1);
    uint8_t idbuf[16];
    size_t need = 0;
    EXPECT(lb_journal_replay_busy(rb, 0, idbuf, sizeof idbuf, &need), LB_STATUS_OK);
    CHECK(need == 6 && memcmp(idbuf, "r-keep", 6) == 0);
    EXPECT(lb_journal_replay_busy(rb, 1, idbuf, sizeof idbuf, &need), LB_STATUS_INVALID_ARGUMENT);
    lb_journal_replay_free(rb);
    lb_settlement *r = NULL;
    EXPECT(lb_journal_replay_take(ra, 0, &r), LB_STATUS_OK);
    EXPECT(lb_journal_replay_take(ra, 0, &r), LB_STATUS_INVALID_ARGUMENT); /* taken once */
    EXPECT(lb_journal_replay_take(ra, 1, &r), LB_STATUS_INVALID_ARGUMENT);
    char *key2 = settle_key(r);
    CHECK(strcmp(key, key2) == 0); /* ST-1: the original key after the restart */
    lb_settlement_action act = action(r);
    CHECK(act.kind == LB_SETTLEMENT_ACTION_KIND_SEND && act.endpoint == LB_SETTLE_MODE_COMMIT && act.due_ns == 10 * MS);
    exchange(r, 11 * MS, WALL0 + 11, 200, COMMITTED, NULL, NULL);
    EXPECT(lb_journal_finish(a, r), LB_STATUS_OK);
    CHECK(count_files(dir, "v2-", ".json", NULL, 0) == 0);
    /* Released: b can now claim (nothing left to replay). */
    rb = replay(b, cfg2, 20 * MS, WALL0 + 20);
    EXPECT(lb_journal_replay_busy_count(rb, &busy), LB_STATUS_OK);
    CHECK(replay_count(rb) == 0 && busy == 0);
    lb_journal_replay_free(rb);
    lb_settlement_free(r);
    lb_journal_replay_free(ra);
    lb_journal_free(a);
    lb_journal_free(b);
    free(key);
    free(key2);
    free(dir);
    lb_settlement_config_free(cfg);
    lb_settlement_config_free(cfg2);
    rm_rf(base);
    free(base);
}

/* ST-4, SP-3: a 429 with Retry-After persists its wall-clock floor before the wait;
 * a replay before the floor waits for it, one after it sends at once. A replay result
 * freed without taking its settlements keeps the claims until the journal is freed. */
static void test_429_floor_across_restart(void) {
    char *base = tmpdir();
    lb_settlement_config *cfg = config("fl-", 5);
    lb_journal *j = open_at(base);
    lb_settlement *s = commit(cfg, "r-429", 5, 0, WALL0);
    EXPECT(persist(j, s, MS, NULL, NULL, 0), LB_STATUS_OK);
    exchange(s, MS, WALL0, 429, "{\"error\":\"LIMIT_EXCEEDED\",\"message\":\"m\",\"request_id\":\"q\"}", "Retry-After",
             "10");
    CHECK(action(s).kind == LB_SETTLEMENT_ACTION_KIND_PERSIST);
    lb_settlement_decision_info info;
    EXPECT(persist(j, s, 3 * MS, &info, NULL, 0), LB_STATUS_OK);
    CHECK(info.next == LB_SETTLE_NEXT_COMMIT);
    char *dir = journal_dir(j);
    char path[4096];
    size_t len = 0;
    CHECK(count_files(dir, "v2-", ".json", path, sizeof path) == 1);
    char *text = read_all(path, &len);
    /* the failure was reported at wall WALL0 + 1 (exchange's clock): floor = +10 s */
    CHECK(text && strstr(text, "\"not_before_ms\":1785585610001") != NULL);
    free(text);
    /* The process "dies" here: no finish. */
    lb_settlement_free(s);
    lb_journal_free(j);

    j = open_at(base);
    lb_journal_replay_result *r = replay(j, cfg, 1000 * MS, WALL0 + 4001);
    CHECK(replay_count(r) == 1);
    lb_settlement *s2 = NULL;
    EXPECT(lb_journal_replay_take(r, 0, &s2), LB_STATUS_OK);
    lb_settlement_action a = action(s2);
    /* no_retry_before_persisted_not_before: due 6000 ms after the restart's now */
    CHECK(a.kind == LB_SETTLEMENT_ACTION_KIND_SEND && a.due_ns == 1000 * MS + 6000 * MS);
    lb_settlement_free(s2);
    lb_journal_replay_free(r);
    lb_journal_free(j); /* releases the claim */

    j = open_at(base);
    r = replay(j, cfg, 5 * MS, WALL0 + 20000);
    CHECK(replay_count(r) == 1);
    EXPECT(lb_journal_replay_take(r, 0, &s2), LB_STATUS_OK);
    a = action(s2);
    CHECK(a.kind == LB_SETTLEMENT_ACTION_KIND_SEND && a.due_ns == 5 * MS);
    lb_settlement_free(s2);
    lb_journal_replay_free(r);
    /* The claim stays with j after the replay result is freed: release it by id. */
    lb_journal *other = open_at(base);
    lb_journal_replay_result *r2 = replay(other, cfg, 6 * MS, WALL0 + 20001);
    size_t busy = 0;
    EXPECT(lb_journal_replay_busy_count(r2, &busy), LB_STATUS_OK);
    CHECK(busy == 1);
    lb_journal_replay_free(r2);
    EXPECT(lb_journal_release_claim(j, "r-429", 5), LB_STATUS_OK);
    EXPECT(lb_journal_release_claim(j, "r-429", 5), LB_STATUS_OK); /* idempotent */
    r2 = replay(other, cfg, 7 * MS, WALL0 + 20002);
    CHECK(replay_count(r2) == 1);
    lb_journal_replay_free(r2);
    lb_journal_free(other);
    lb_journal_free(j);
    free(dir);
    lb_settlement_config_free(cfg);
    rm_rf(base);
    free(base);
}

/* J-4: a truncated record and a hand-edited one are renamed aside (never deleted),
 * reported, and the other records still replay. */
static void test_quarantine(void) {
    char *base = tmpdir();
    lb_settlement_config *cfg = config("q-", 5);
    lb_journal *j = open_at(base);
    char *dir = journal_dir(j);
    const char *ids[] = {"r-trunc", "r-edit", "r-fine"};
    char paths[3][4096];
    for (int i = 0; i < 3; i++) {
        lb_settlement *s = commit(cfg, ids[i], strlen(ids[i]), 0, WALL0);
        EXPECT(persist(j, s, MS, NULL, NULL, 0), LB_STATUS_OK);
        lb_settlement_free(s);
        /* the newest file: find it by elimination */
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (strncmp(e->d_name, "v2-", 3) || !strstr(e->d_name, ".json")) continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            int known = 0;
            for (int k = 0; k < i; k++) known |= strcmp(paths[k], p) == 0;
            if (!known) snprintf(paths[i], sizeof paths[i], "%s", p);
        }
        if (d) closedir(d);
    }
    EXPECT(lb_journal_release_claim(j, "r-trunc", 7), LB_STATUS_OK);
    EXPECT(lb_journal_release_claim(j, "r-edit", 6), LB_STATUS_OK);
    EXPECT(lb_journal_release_claim(j, "r-fine", 6), LB_STATUS_OK);
    size_t len = 0;
    char *text = read_all(paths[0], &len);
    CHECK(text && len > 20 && write_all(paths[0], text, len / 2) == 0); /* truncated */
    free(text);
    text = read_all(paths[1], &len);
    char *m = text ? strstr(text, "\"mode\":\"commit\"") : NULL;
    CHECK(m != NULL);
    if (m) memcpy(m, "\"mode\":\"cOmmit\"", 15); /* hand-edited */
    CHECK(text && write_all(paths[1], text, len) == 0);
    free(text);
    lb_journal_replay_result *r = replay(j, cfg, 10 * MS, WALL0 + 10);
    lb_journal_counts c = report_counts(r);
    CHECK(replay_count(r) == 1 && c.quarantined == 2 && c.records == 1);
    lb_settlement *s = NULL;
    EXPECT(lb_journal_replay_take(r, 0, &s), LB_STATUS_OK);
    char *key = settle_key(s);
    CHECK(strcmp(key, "q-1") == 0);
    free(key);
    lb_settlement_free(s);
    const lb_journal_report *rep = NULL;
    EXPECT(lb_journal_replay_report(r, &rep), LB_STATUS_OK);
    size_t need = 0;
    EXPECT(lb_journal_report_json(rep, NULL, 0, &need), LB_STATUS_OK);
    char *js = malloc(need);
    EXPECT(lb_journal_report_json(rep, js, need, &need), LB_STATUS_OK);
    CHECK(strstr(js, ".corrupt\"") != NULL && strstr(js, "\"reason\":") != NULL);
    free(js);
    lb_journal_replay_free(r);
    CHECK(count_files(dir, "v2-", ".corrupt", NULL, 0) == 2);
    CHECK(count_files(dir, "v2-", ".json", NULL, 0) == 1);

    /* A record the journal reads but the settlement refuses (a NUL in its id: legacy
     * name "a_b.json", migrated by the scan, then refused): quarantined by the replay. */
    char legacy[4096];
    snprintf(legacy, sizeof legacy, "%s/a_b.json", dir);
    const char *rec =
        "{\"version\":1,\"reservation_id\":\"a\\u0000b\",\"base_url\":\"" BASE_URL
        "\",\"mode\":\"commit\",\"commit_body\":{\"idempotency_key\":\"k-1\",\"actual\":{\"unit\":\"TOKENS\","
        "\"amount\":1}},\"event_fallback_body\":null,\"recorded_at_ms\":1,\"not_before_ms\":null}";
    CHECK(write_all(legacy, rec, strlen(rec)) == 0);
    r = replay(j, cfg, 20 * MS, WALL0 + 20);
    c = report_counts(r);
    CHECK(c.migrated == 1 && c.quarantined == 1);
    size_t busy = 0;
    EXPECT(lb_journal_replay_busy_count(r, &busy), LB_STATUS_OK);
    CHECK(replay_count(r) == 0 && busy == 1); /* r-fine: this journal's settlement holds it */
    lb_journal_replay_free(r);
    CHECK(count_files(dir, "v2-", ".corrupt", NULL, 0) == 3);
    /* An id with NUL through the operators' calls (explicit length): the journal takes it. */
    bool removed = true;
    EXPECT(lb_journal_remove(j, "a\0b", 3, &removed), LB_STATUS_OK);
    CHECK(!removed);
    bool moved = true;
    EXPECT(lb_journal_quarantine(j, "r-fine", 6, &moved), LB_STATUS_OK);
    CHECK(moved && count_files(dir, "v2-", ".json", NULL, 0) == 0);
    EXPECT(lb_journal_quarantine(j, "r-fine", 6, &moved), LB_STATUS_OK);
    CHECK(!moved);
    free(dir);
    lb_journal_free(j);
    lb_settlement_config_free(cfg);
    rm_rf(base);
    free(base);
}

/* Ids: '/', NUL (explicit length), 10,000 characters, bad UTF-8. */
static void test_ids(void) {
    char *base = tmpdir();
    lb_settlement_config *cfg = config("id-", 5);
    lb_journal *j = open_at(base);
    char *dir = journal_dir(j);
    /* The settlement refuses NUL and 10,000 characters (typed, nothing written). */
    lb_settlement *s = NULL;
    EXPECT(lb_settlement_new_commit(cfg, "r\0x", 3, COMMIT, 0, WALL0, &s), LB_STATUS_INVALID_CONFIG);
    char *long_id = malloc(10001);
    memset(long_id, 'x', 10000);
    long_id[10000] = '\0';
    EXPECT(lb_settlement_new_commit(cfg, long_id, 10000, COMMIT, 0, WALL0, &s), LB_STATUS_INVALID_CONFIG);
    /* The journal's own calls take any id (the file name is a hash). */
    bool removed = true;
    EXPECT(lb_journal_remove(j, long_id, 10000, &removed), LB_STATUS_OK);
    CHECK(!removed);
    EXPECT(lb_journal_quarantine(j, long_id, 10000, NULL), LB_STATUS_OK);
    EXPECT(lb_journal_release_claim(j, long_id, 10000), LB_STATUS_OK);
    EXPECT(lb_journal_remove(j, "../../etc/passwd", 16, NULL), LB_STATUS_OK);
    EXPECT(lb_journal_remove(j, "\xff\xfe", 2, NULL), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_journal_quarantine(j, "\xc3", 1, NULL), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_journal_release_claim(j, "a\x80", 2), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_journal_remove(j, NULL, 3, NULL), LB_STATUS_NULL_ARGUMENT);
    free(long_id);
    /* Slashes and dots: persisted under a hash, in the partition, nowhere else. */
    const char *odd[] = {"a/b", "../../x", "/abs/path"};
    for (int i = 0; i < 3; i++) {
        s = commit(cfg, odd[i], strlen(odd[i]), 0, WALL0);
        EXPECT(persist(j, s, MS, NULL, NULL, 0), LB_STATUS_OK);
        exchange(s, 2 * MS, WALL0, 200, COMMITTED, NULL, NULL);
        CHECK(count_files(dir, "v2-", ".json", NULL, 0) == 1);
        EXPECT(lb_journal_finish(j, s), LB_STATUS_OK);
        CHECK(count_files(dir, "v2-", ".json", NULL, 0) == 0);
        lb_settlement_free(s);
    }
    CHECK(count_files(base, "", ".json", NULL, 0) == 0 && count_files("/tmp", "x", ".json", NULL, 0) >= 0);
    free(dir);
    lb_journal_free(j);
    lb_settlement_config_free(cfg);
    rm_rf(base);
    free(base);
}

/* J-3: a journal directory (or partition) that is a symbolic link is refused, never followed. */
static void test_symlink(void) {
    char *base = tmpdir();
    char real[4096], link[4096];
    snprintf(real, sizeof real, "%s/real", base);
    snprintf(link, sizeof link, "%s/link", base);
    CHECK(mkdir(real, 0700) == 0 && symlink(real, link) == 0);
    lb_journal *j = NULL;
    EXPECT(lb_journal_open(link, BASE_URL, "k", NULL, &j), LB_STATUS_JOURNAL_SYMLINK);
    CHECK(j == NULL);
    CHECK(count_files(real, "", "", NULL, 0) == 2); /* . and .. only: nothing created there */
    /* The partition itself a symbolic link. */
    lb_journal *probe = open_at(real);
    char *pdir = journal_dir(probe);
    lb_journal_free(probe);
    char moved[4096];
    snprintf(moved, sizeof moved, "%s.elsewhere", pdir);
    CHECK(rename(pdir, moved) == 0 && symlink(moved, pdir) == 0);
    EXPECT(lb_journal_open(real, BASE_URL, "api-key-1", NULL, &j), LB_STATUS_JOURNAL_SYMLINK);
    EXPECT(lb_journal_open_partition(pdir, BASE_URL, &j), LB_STATUS_JOURNAL_SYMLINK);
    CHECK(j == NULL);
    free(pdir);
    /* A journal path that is a file. */
    char file[4096];
    snprintf(file, sizeof file, "%s/file", base);
    CHECK(write_all(file, "x", 1) == 0);
    EXPECT(lb_journal_open(file, BASE_URL, "k", NULL, &j), LB_STATUS_JOURNAL_NOT_A_DIRECTORY);
    rm_rf(base);
    free(base);
}

static int try_mount_tmpfs(const char *dir, const char *opts) {
    return mount("tmpfs", dir, "tmpfs", 0, opts);
}

/* J-3 / bad input: a journal directory that is not writable. */
static void test_not_writable(void) {
    char *base = tmpdir();
    char ro[4096];
    snprintf(ro, sizeof ro, "%s/ro", base);
    CHECK(mkdir(ro, 0700) == 0 && chmod(ro, 0500) == 0);
    lb_journal *j = NULL;
    if (geteuid() != 0) {
        EXPECT(lb_journal_open(ro, BASE_URL, "k", NULL, &j), LB_STATUS_JOURNAL_NOT_WRITABLE);
        CHECK(j == NULL);
    } else {
        printf("note: journal not-writable via chmod 0500 skipped: running as root, permissions do not bind\n");
    }
    /* A read-only file system binds root too (when mount(2) works here). */
    char mnt[1024];
    snprintf(mnt, sizeof mnt, "%s/mnt", base);
    CHECK(mkdir(mnt, 0700) == 0);
    if (try_mount_tmpfs(mnt, "size=256k,mode=0700") == 0) {
        lb_journal *w = open_at(mnt); /* the partition exists, then the fs turns read-only */
        lb_settlement_config *cfg = config("ro-", 5);
        lb_settlement *s = commit(cfg, "r-ro", 4, 0, WALL0);
        if (mount("tmpfs", mnt, "tmpfs", MS_REMOUNT | MS_RDONLY, "size=256k") == 0) {
            lb_settlement_decision_info info;
            char detail[1024];
            /* SP-3: the persist fails, the decision says so, the commit still goes */
            EXPECT(persist(w, s, MS, &info, detail, sizeof detail), LB_STATUS_OK);
            CHECK(info.next == LB_SETTLE_NEXT_COMMIT && info.warning_count == 1 && info.has_detail);
            CHECK(strstr(detail, "not_writable") != NULL);
            lb_settlement_decision *d = NULL;
            lb_settle_warning wv = LB_SETTLE_WARNING_PERSIST_FAILED;
            EXPECT(lb_settlement_last_decision(s, &d), LB_STATUS_OK);
            EXPECT(lb_settlement_decision_warning(d, 0, &wv), LB_STATUS_OK);
            CHECK(wv == LB_SETTLE_WARNING_PERSIST_FAILED);
            lb_settlement_decision_free(d);
            char sub[4096];
            snprintf(sub, sizeof sub, "%s/other", mnt);
            EXPECT(lb_journal_open(mnt, BASE_URL, "another-key", NULL, &j), LB_STATUS_JOURNAL_NOT_WRITABLE);
            EXPECT(lb_journal_open(sub, BASE_URL, "k", NULL, &j), LB_STATUS_JOURNAL_NOT_WRITABLE);
        } else {
            printf("note: journal read-only remount failed (%s): not checked\n", strerror(errno));
        }
        lb_settlement_free(s);
        lb_settlement_config_free(cfg);
        lb_journal_free(w);
        CHECK(umount(mnt) == 0);
    } else {
        printf("note: journal read-only tmpfs skipped: mount(2) failed (%s)\n", strerror(errno));
    }
    chmod(ro, 0700);
    rm_rf(base);
    free(base);
}

/* Bad input: a full disk. A tiny tmpfs (when mount(2) works), and always a failing
 * writer through RLIMIT_FSIZE (SIGXFSZ ignored: write(2) fails with EFBIG). Either way
 * the persist fails typed, the commit still goes (SP-3) and the previous record stays. */
static void test_full_disk(void) {
    char *base = tmpdir();
    lb_settlement_config *cfg = config("fd-", 5);
    char mnt[1024];
    snprintf(mnt, sizeof mnt, "%s/mnt", base);
    CHECK(mkdir(mnt, 0700) == 0);
    if (try_mount_tmpfs(mnt, "size=48k,mode=0700") == 0) {
        lb_journal *j = open_at(mnt);
        char *dir = journal_dir(j);
        /* a first record, settled into a 429 floor later: the previous version must stay */
        lb_settlement *s = commit(cfg, "r-full", 6, 0, WALL0);
        EXPECT(persist(j, s, MS, NULL, NULL, 0), LB_STATUS_OK);
        char path[4096];
        CHECK(count_files(dir, "v2-", ".json", path, sizeof path) == 1);
        size_t before_len = 0;
        char *before = read_all(path, &before_len);
        /* fill the file system */
        char filler[4096];
        snprintf(filler, sizeof filler, "%s/filler", mnt);
        int fd = open(filler, O_WRONLY | O_CREAT, 0600);
        char block[4096];
        memset(block, 'f', sizeof block);
        while (fd >= 0 && write(fd, block, sizeof block) > 0) {
        }
        while (fd >= 0 && write(fd, block, 1) > 0) {
        }
        if (fd >= 0) close(fd);
        exchange(s, 2 * MS, WALL0, 429, "{\"error\":\"LIMIT_EXCEEDED\",\"message\":\"m\",\"request_id\":\"q\"}",
                 "Retry-After", "1");
        lb_settlement_decision_info info;
        char detail[1024];
        EXPECT(persist(j, s, 4 * MS, &info, detail, sizeof detail), LB_STATUS_OK);
        CHECK(info.next == LB_SETTLE_NEXT_COMMIT && info.warning_count >= 1);
        CHECK(strstr(detail, "no_space") != NULL);
        size_t after_len = 0;
        char *after = read_all(path, &after_len);
        CHECK(before && after && before_len == after_len && memcmp(before, after, before_len) == 0);
        CHECK(count_files(dir, "", ".tmp", NULL, 0) == 0);
        free(before);
        free(after);
        /* a new partition cannot be made either: typed */
        lb_journal *j2 = NULL;
        lb_status st = lb_journal_open(mnt, BASE_URL, "another-key", NULL, &j2);
        CHECK(st == LB_STATUS_JOURNAL_NO_SPACE || st == LB_STATUS_OK);
        lb_journal_free(j2);
        lb_settlement_free(s);
        free(dir);
        lb_journal_free(j);
        CHECK(umount(mnt) == 0);
    } else {
        printf("note: journal full-disk tmpfs skipped: mount(2) failed (%s); the RLIMIT_FSIZE writer below\n",
               strerror(errno));
    }
    /* The failing writer: a file-size limit below the record's size. */
    lb_journal *j = open_at(base);
    char *dir = journal_dir(j);
    lb_settlement *s = commit(cfg, "r-fsize", 7, 0, WALL0);
    struct rlimit old;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    fflush(stdout);
    fflush(stderr);
    struct rlimit lim = old;
    lim.rlim_cur = 64;
    lb_settlement_decision *d = NULL;
    lb_status st = LB_STATUS_PANIC;
    if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
        st = lb_journal_persist(j, s, MS, &d); /* no output while the limit holds */
        setrlimit(RLIMIT_FSIZE, &old);
    }
    signal(SIGXFSZ, old_handler);
    EXPECT(st, LB_STATUS_OK);
    lb_settlement_decision_info info;
    memset(&info, 0, sizeof info);
    if (d) EXPECT(lb_settlement_decision_get(d, &info), LB_STATUS_OK);
    CHECK(info.next == LB_SETTLE_NEXT_COMMIT && info.warning_count == 1 && info.has_detail);
    char detail[1024] = "";
    size_t need = 0;
    if (d && info.has_detail) EXPECT(lb_settlement_decision_detail(d, detail, sizeof detail, &need), LB_STATUS_OK);
    /* EFBIG is classified `io` by the journal (not `no_space`: the disk is not full) */
    CHECK(strstr(detail, "the record could not be persisted: journal ") != NULL);
    lb_settlement_decision_free(d);
    CHECK(count_files(dir, "v2-", ".json", NULL, 0) == 0 && count_files(dir, "", ".tmp", NULL, 0) == 0);
    lb_settlement_free(s);
    free(dir);
    lb_journal_free(j);
    lb_settlement_config_free(cfg);
    rm_rf(base);
    free(base);
}

/* NULL for every pointer, bad UTF-8, the default directory, the stable strings. */
static void test_api(void) {
    char *base = tmpdir();
    lb_journal *j = NULL;
    lb_settlement_config *cfg = config("api-", 5);
    EXPECT(lb_journal_open(base, NULL, "k", NULL, &j), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_open(base, BASE_URL, NULL, NULL, &j), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_open(base, BASE_URL, "k", NULL, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_open("\xff", BASE_URL, "k", NULL, &j), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_journal_open(base, "\xc3(", "k", NULL, &j), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_journal_open(base, BASE_URL, "\xa0", NULL, &j), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_journal_open(base, BASE_URL, "k", "\xe2\x82", &j), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_journal_open_partition(NULL, BASE_URL, &j), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_open_partition(base, NULL, &j), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_open_partition(base, BASE_URL, NULL), LB_STATUS_NULL_ARGUMENT);
    CHECK(j == NULL);
    lb_journal_free(NULL);
    lb_journal_replay_free(NULL);
    lb_journal_report_free(NULL);
    /* NULL base_dir: $CYCLES_JOURNAL_DIR */
    char env_dir[4096];
    snprintf(env_dir, sizeof env_dir, "%s/from-env", base);
    setenv("CYCLES_JOURNAL_DIR", env_dir, 1);
    EXPECT(lb_journal_open(NULL, BASE_URL, "k", NULL, &j), LB_STATUS_OK);
    char *dir = journal_dir(j);
    CHECK(strncmp(dir, env_dir, strlen(env_dir)) == 0);
    free(dir);
    lb_journal_free(j);
    /* tenant: the partition does not depend on the key */
    lb_journal *t1 = NULL, *t2 = NULL;
    EXPECT(lb_journal_open(NULL, BASE_URL, "old-key", "acme", &t1), LB_STATUS_OK);
    EXPECT(lb_journal_open(NULL, BASE_URL, "new-key", "acme", &t2), LB_STATUS_OK);
    char *d1 = journal_dir(t1), *d2 = journal_dir(t2);
    CHECK(strcmp(d1, d2) == 0);
    free(d1);
    free(d2);
    lb_journal_free(t1);
    lb_journal_free(t2);
    unsetenv("CYCLES_JOURNAL_DIR");
    j = open_at(base);
    lb_settlement *s = commit(cfg, "r-api", 5, 0, WALL0);
    size_t need = 0, n = 0;
    EXPECT(lb_journal_dir(NULL, NULL, 0, &need), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_dir(j, NULL, 0, NULL), LB_STATUS_NULL_ARGUMENT);
    char tiny[2];
    EXPECT(lb_journal_dir(j, tiny, sizeof tiny, &need), LB_STATUS_BUFFER_TOO_SMALL);
    EXPECT(lb_journal_persist(NULL, s, MS, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_persist(j, NULL, MS, NULL), LB_STATUS_NULL_ARGUMENT);
    CHECK(action(s).kind == LB_SETTLEMENT_ACTION_KIND_PERSIST); /* unchanged */
    EXPECT(lb_journal_finish(NULL, s), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_finish(j, NULL), LB_STATUS_NULL_ARGUMENT);
    lb_journal_replay_result *r = NULL;
    EXPECT(lb_journal_replay(NULL, cfg, 0, WALL0, &r), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_replay(j, NULL, 0, WALL0, &r), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_replay(j, cfg, 0, WALL0, NULL), LB_STATUS_NULL_ARGUMENT);
    lb_settlement_config *bad = config(NULL, 0);
    EXPECT(lb_journal_replay(j, bad, 0, WALL0, &r), LB_STATUS_INVALID_CONFIG);
    lb_settlement_config_free(bad);
    CHECK(r == NULL);
    r = replay(j, cfg, 0, WALL0);
    EXPECT(lb_journal_replay_count(NULL, &n), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_replay_count(r, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_replay_busy_count(NULL, &n), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_replay_busy_count(r, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_replay_busy(NULL, 0, NULL, 0, &need), LB_STATUS_NULL_ARGUMENT);
    lb_settlement *taken = NULL;
    EXPECT(lb_journal_replay_take(NULL, 0, &taken), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_replay_take(r, 0, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_replay_take(r, 0, &taken), LB_STATUS_INVALID_ARGUMENT);
    const lb_journal_report *rep = NULL;
    EXPECT(lb_journal_replay_report(NULL, &rep), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_replay_report(r, NULL), LB_STATUS_NULL_ARGUMENT);
    lb_journal_replay_free(r);
    lb_journal_counts c;
    EXPECT(lb_journal_report_counts(NULL, &c), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_report_json(NULL, NULL, 0, &need), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_report_record(NULL, 0, NULL, 0, &need), LB_STATUS_NULL_ARGUMENT);
    lb_journal_report *own = NULL;
    EXPECT(lb_journal_scan(NULL, &own), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_scan(j, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_scan(j, &own), LB_STATUS_OK);
    EXPECT(lb_journal_report_counts(own, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_report_json(own, NULL, 0, NULL), LB_STATUS_NULL_ARGUMENT);
    lb_journal_report_free(own);
    EXPECT(lb_journal_remove(NULL, "r", 1, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_quarantine(NULL, "r", 1, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_quarantine(j, NULL, 1, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_release_claim(NULL, "r", 1), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_journal_release_claim(j, NULL, 1), LB_STATUS_NULL_ARGUMENT);
    bool removed = true;
    EXPECT(lb_journal_remove(j, "", 0, &removed), LB_STATUS_OK); /* no such record */
    CHECK(!removed);
    /* stable strings */
    CHECK(strcmp(lb_status_str(LB_STATUS_JOURNAL_NOT_WRITABLE), "journal_not_writable") == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_JOURNAL_SYMLINK), "journal_symlink") == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_JOURNAL_NO_SPACE), "journal_no_space") == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_JOURNAL_NOT_A_DIRECTORY), "journal_not_a_directory") == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_JOURNAL_NO_DIRECTORY), "journal_no_directory") == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_JOURNAL_INVALID_RECORD), "journal_invalid_record") == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_JOURNAL_CORRUPT), "journal_corrupt") == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_JOURNAL_MISPLACED), "journal_misplaced") == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_JOURNAL_IO), "journal_io") == 0);
    CHECK(strcmp(lb_status_str(LB_STATUS_JOURNAL_NOT_FINISHED), "journal_not_finished") == 0);
    CHECK(LB_STATUS_JOURNAL_NOT_WRITABLE == 110 && LB_STATUS_JOURNAL_IO == 118 && LB_STATUS_JOURNAL_NOT_FINISHED == 119);
    lb_settlement_free(s);
    lb_journal_free(j);
    lb_settlement_config_free(cfg);
    rm_rf(base);
    free(base);
}

void run_journal_tests(void) {
    test_api();
    test_round_trip();
    test_restart_and_claims();
    test_429_floor_across_restart();
    test_quarantine();
    test_ids();
    test_symlink();
    test_not_writable();
    test_full_disk();
}
