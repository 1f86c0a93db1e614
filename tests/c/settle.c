/*
 * The settlement part of the C test program: a replay of every settlement
 * vector (every file in tests/vectors/settlement, format: settlement.md "Vectors"
 * and docs/settlement-vectors.md) through the public lb_settlement_* API,
 * with the same rule checks as the Rust harness (core/src/scenario/settlement.rs:
 * one key in header and body across restarts, ST-1; no send before its due
 * time, before the acknowledged record's not_before_ms, ST-4, or while a
 * persist is unacknowledged, SP-3; at most one terminal success), and the
 * settlement API's negative tests (NULLs, bad UTF-8, bad JSON, calls out of
 * turn, buffers).
 *
 * Every emitted decision goes to g_emitted, so that replay.c compares them
 * with `leasebeat replay --emit` of the same files.
 */
#include "harness.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----- small helpers ----- */

static const char *err_text(void) {
    static char buf[1024];
    size_t need = 0;
    if (lb_last_error(buf, sizeof buf, &need) != LB_STATUS_OK) snprintf(buf, sizeof buf, "(long message)");
    return buf;
}

/* A copy-out text function's whole result, malloc'd (NULL on failure). */
static char *settle_text(lb_status (*fn)(const lb_settlement *, char *, size_t, size_t *), const lb_settlement *s) {
    size_t need = 0;
    if (fn(s, NULL, 0, &need) != LB_STATUS_OK) return NULL;
    char *buf = malloc(need);
    if (!buf) exit(2);
    if (fn(s, buf, need, &need) != LB_STATUS_OK) {
        free(buf);
        return NULL;
    }
    return buf;
}

static char *decision_text(lb_status (*fn)(const lb_settlement_decision *, char *, size_t, size_t *),
                           const lb_settlement_decision *d) {
    size_t need = 0;
    if (fn(d, NULL, 0, &need) != LB_STATUS_OK) return NULL;
    char *buf = malloc(need);
    if (!buf) exit(2);
    if (fn(d, buf, need, &need) != LB_STATUS_OK) {
        free(buf);
        return NULL;
    }
    return buf;
}

static char *attempt_body_text(const lb_settlement *s) {
    size_t need = 0;
    if (lb_settlement_attempt_body(s, NULL, 0, &need) != LB_STATUS_OK) return NULL;
    char *buf = malloc(need + 1);
    if (!buf) exit(2);
    if (need && lb_settlement_attempt_body(s, (uint8_t *)buf, need, &need) != LB_STATUS_OK) {
        free(buf);
        return NULL;
    }
    buf[need] = '\0';
    return buf;
}

/* A parsed JSON text with marked numbers (see replay.c). */
static cJSON *parse_marked(const char *text) {
    char *m = mark_numbers(text);
    cJSON *j = cJSON_Parse(m);
    free(m);
    return j;
}

static char *ser_text(const cJSON *v) {
    sbuf b = {0};
    if (v) ser(&b, v);
    else sb_puts(&b, "absent");
    return b.data;
}

/* A body given in a vector: an object (serialized, numbers verbatim) or a
 * string of raw text. */
static char *given_bytes(const cJSON *v) {
    if (is_str(v)) return dup_str(v->valuestring);
    if (cJSON_IsObject(v)) return ser_text(v);
    return NULL;
}

/* Decodes the first JSON string member named `name` of the raw text into
 * bytes (it may hold \u0000, which cJSON's C strings cannot carry). */
static char *raw_string_member(const char *text, const char *name, size_t *len) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", name);
    const char *p = strstr(text, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ':') p++;
    if (*p != '"') return NULL;
    p++;
    sbuf b = {0};
    sb_puts(&b, "");
    while (*p && *p != '"') {
        if (*p != '\\') {
            sb_put(&b, p++, 1);
            continue;
        }
        p++;
        char c = *p++;
        char out[4];
        switch (c) {
        case 'n': sb_put(&b, "\n", 1); break;
        case 't': sb_put(&b, "\t", 1); break;
        case 'r': sb_put(&b, "\r", 1); break;
        case 'b': sb_put(&b, "\b", 1); break;
        case 'f': sb_put(&b, "\f", 1); break;
        case 'u': {
            unsigned cp = 0;
            for (int i = 0; i < 4; i++) {
                char h = *p++;
                cp = cp * 16 + (unsigned)(h >= 'a' ? h - 'a' + 10 : h >= 'A' ? h - 'A' + 10 : h - '0');
            }
            if (cp >= 0xD800 && cp < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
                unsigned lo = 0;
                p += 2;
                for (int i = 0; i < 4; i++) {
                    char h = *p++;
                    lo = lo * 16 + (unsigned)(h >= 'a' ? h - 'a' + 10 : h >= 'A' ? h - 'A' + 10 : h - '0');
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            size_t n;
            if (cp < 0x80) {
                out[0] = (char)cp;
                n = 1;
            } else if (cp < 0x800) {
                out[0] = (char)(0xC0 | (cp >> 6));
                out[1] = (char)(0x80 | (cp & 0x3F));
                n = 2;
            } else if (cp < 0x10000) {
                out[0] = (char)(0xE0 | (cp >> 12));
                out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[2] = (char)(0x80 | (cp & 0x3F));
                n = 3;
            } else {
                out[0] = (char)(0xF0 | (cp >> 18));
                out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
                out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[3] = (char)(0x80 | (cp & 0x3F));
                n = 4;
            }
            sb_put(&b, out, n);
            break;
        }
        default: sb_put(&b, &c, 1); break;
        }
    }
    *len = b.len;
    return b.data;
}

static const char *failure_name(lb_failure f) {
    return f == LB_FAILURE_TIMEOUT ? "timeout" : f == LB_FAILURE_CONNECT ? "connect" : "reset";
}

/* ----- the replay ----- */

typedef struct {
    lb_settlement_config *cfg;
    lb_settlement *s;
    char *store;   /* the durable record's text: the last acknowledged, until removed */
    char *writing; /* the record of the outstanding persist */
    char *first_key;
    int successes;
    long long wall_offset;
} world;

static void set_text(char **slot, char *value) {
    free(*slot);
    *slot = value;
}

/* The not_before_ms of a record text, or -1. */
static long long record_floor(const char *record) {
    if (!record) return -1;
    cJSON *j = parse_marked(record);
    const cJSON *nb = cJSON_GetObjectItemCaseSensitive(j, "not_before_ms");
    uint64_t v;
    long long out = -1;
    if (nb && is_num(nb) && parse_u64(num_text(nb), &v)) out = (long long)v;
    cJSON_Delete(j);
    return out;
}

#define MISMATCH(...)                                                                              \
    do {                                                                                           \
        snprintf(why, why_len, __VA_ARGS__);                                                       \
        goto out;                                                                                  \
    } while (0)

/* Compares the expectations of one step. `emitted` is the emitted line (the
 * decision's JSON, or the refusal); `d` the decision (NULL on a refusal). */
static int compare(int i, const cJSON *expect, const cJSON *emitted, const lb_settlement_decision *d,
                   const world *w, char *why, size_t why_len) {
    lb_settlement_decision_info info;
    memset(&info, 0, sizeof info);
    if (d && lb_settlement_decision_get(d, &info) != LB_STATUS_OK) MISMATCH("step %d: get: %s", i, err_text());
    if (!d && !cJSON_GetObjectItemCaseSensitive(expect, "error"))
        MISMATCH("step %d: error: expected no error, got %s", i,
                 cJSON_GetObjectItemCaseSensitive(emitted, "detail")->valuestring);
    const cJSON *f;
    cJSON_ArrayForEach(f, expect) {
        const char *name = f->string;
        const cJSON *got = cJSON_GetObjectItemCaseSensitive(emitted, name);
        if (strcmp(name, "at") == 0) {
            uint64_t want;
            if (!parse_time_ns(f, &want)) MISMATCH("step %d: at: unreadable", i);
            if (!d || !info.has_due || info.due_ns != want) {
                char a[64], b[64];
                ns_to_text((lb_time){false, want}, a, sizeof a);
                ns_to_text((lb_time){false, info.due_ns}, b, sizeof b);
                MISMATCH("step %d: at: expected %s, got %s%s", i, a, info.has_due ? "" : "absent ", b);
            }
        } else if (strcmp(name, "record") == 0 && cJSON_IsObject(f)) {
            if (!d || info.record != LB_RECORD_UPDATE_WRITE)
                MISMATCH("step %d: record: expected a write, got %s", i, d ? lb_record_update_str(info.record) : "an error");
            char *text = settle_text(lb_settlement_record_json, w->s);
            cJSON *full = text ? parse_marked(text) : NULL;
            free(text);
            const cJSON *m;
            int bad = 0;
            char *a = NULL, *b = NULL;
            cJSON_ArrayForEach(m, f) {
                const cJSON *g = cJSON_GetObjectItemCaseSensitive(full, m->string);
                a = ser_text(m);
                b = g ? ser_text(g) : dup_str("null");
                if (strcmp(a, b) != 0) {
                    snprintf(why, why_len, "step %d: record.%s: expected %s, got %s", i, m->string, a, b);
                    bad = 1;
                }
                free(a);
                free(b);
                if (bad) break;
            }
            /* The typed accessors agree with the record text. */
            const cJSON *nb = cJSON_GetObjectItemCaseSensitive(full, "not_before_ms");
            const cJSON *mode = cJSON_GetObjectItemCaseSensitive(full, "mode");
            if (!bad && (!is_str(mode) || strcmp(mode->valuestring, lb_settle_mode_str(info.record_mode)) != 0 ||
                         info.record_has_not_before != (nb && !cJSON_IsNull(nb)))) {
                snprintf(why, why_len, "step %d: record: the typed fields disagree with the record text", i);
                bad = 1;
            }
            cJSON_Delete(full);
            if (bad) return 0;
        } else if (strcmp(name, "body") == 0) {
            if (!d || (info.next != LB_SETTLE_NEXT_COMMIT && info.next != LB_SETTLE_NEXT_EVENT &&
                       info.next != LB_SETTLE_NEXT_RELEASE && info.next != LB_SETTLE_NEXT_WAIT))
                MISMATCH("step %d: body: no attempt", i);
            char *body = attempt_body_text(w->s);
            cJSON *j = body ? parse_marked(body) : NULL;
            char *a = ser_text(f), *b = ser_text(j);
            int same = j && strcmp(a, b) == 0;
            if (!same) snprintf(why, why_len, "step %d: body: expected %s, got %s", i, a, b);
            free(a);
            free(b);
            free(body);
            cJSON_Delete(j);
            if (!same) return 0;
        } else if (strcmp(name, "warnings") == 0) {
            size_t n = (size_t)cJSON_GetArraySize(f);
            if (n != info.warning_count) MISMATCH("step %d: warnings: expected %zu, got %zu", i, n, info.warning_count);
            for (size_t k = 0; k < n; k++) {
                lb_settle_warning wv;
                const cJSON *want = cJSON_GetArrayItem(f, (int)k);
                if (lb_settlement_decision_warning(d, k, &wv) != LB_STATUS_OK) MISMATCH("step %d: warnings: %s", i, err_text());
                if (!is_str(want) || strcmp(want->valuestring, lb_settle_warning_str(wv)) != 0)
                    MISMATCH("step %d: warnings[%zu]: got %s", i, k, lb_settle_warning_str(wv));
            }
        } else {
            /* Typed accessors first, where there is one. */
            const char *typed = NULL;
            if (d && strcmp(name, "next") == 0) typed = lb_settle_next_str(info.next);
            else if (d && strcmp(name, "outcome") == 0)
                typed = info.outcome == LB_SETTLE_OUTCOME_NONE ? NULL : lb_settle_outcome_str(info.outcome);
            else if (d && strcmp(name, "mode") == 0) typed = lb_settle_mode_str(info.mode);
            else if (d && strcmp(name, "class") == 0) typed = lb_settle_class_str(info.event_class);
            else if (d && strcmp(name, "record") == 0)
                typed = info.record == LB_RECORD_UPDATE_NONE ? NULL : lb_record_update_str(info.record);
            if (typed && (!is_str(f) || strcmp(typed, f->valuestring) != 0))
                MISMATCH("step %d: %s: expected %s, got %s", i, name, is_str(f) ? f->valuestring : "?", typed);
            if (d && strcmp(name, "key") == 0) {
                uint64_t want;
                if (!is_num(f) || !parse_u64(num_text(f), &want) || want != info.key_index)
                    MISMATCH("step %d: key: expected %s, got %u", i, is_num(f) ? num_text(f) : "?", info.key_index);
            }
            /* Then the emitted text (the JSON of the decision); null
             * expects the member absent, as in the Rust harness. */
            char *a = ser_text(f), *b = ser_text(got);
            int same = strcmp(a, b) == 0 || (cJSON_IsNull(f) && !got);
            if (!same) snprintf(why, why_len, "step %d: %s: expected %s, got %s", i, name, a, b);
            free(a);
            free(b);
            if (!same) return 0;
        }
    }
    return 1;
out:
    return 0;
}

int settle_replay(const cJSON *root, const char *text, const char *id, char *why, size_t why_len) {
    int ok = 0;
    world w = {0};
    header_list headers = {0};
    sbuf body = {0};
    char *commit = NULL, *rid = NULL;
    size_t rid_len = 0;
    lb_settlement_decision *d = NULL;
    cJSON *emitted = NULL;

    const cJSON *config = cJSON_GetObjectItemCaseSensitive(root, "config");
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(root, "steps");
    if (!cJSON_IsObject(config) || !cJSON_IsArray(steps)) MISMATCH("format: config or steps");
    rid = raw_string_member(text, "reservation_id", &rid_len);
    if (!rid) MISMATCH("format: config.reservation_id");
    if (lb_settlement_config_new(&w.cfg) != LB_STATUS_OK) MISMATCH("config: %s", err_text());
    lb_settlement_config_set_key_prefix(w.cfg, "key-");
    const cJSON *retry = cJSON_GetObjectItemCaseSensitive(config, "retry");
    if (retry) {
        uint64_t v[3] = {5, 500, 30000};
        const char *names[3] = {"max_attempts", "initial_ms", "max_ms"};
        for (int k = 0; k < 3; k++) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(retry, names[k]);
            if (x && (!is_num(x) || !parse_u64(num_text(x), &v[k]))) MISMATCH("format: retry.%s", names[k]);
        }
        if (v[0] > UINT32_MAX) MISMATCH("format: retry.max_attempts");
        lb_settlement_config_set_retry(w.cfg, (uint32_t)v[0], v[1], v[2]);
    }
    const cJSON *base_url = cJSON_GetObjectItemCaseSensitive(config, "base_url");
    if (base_url && lb_settlement_config_set_base_url(w.cfg, base_url->valuestring) != LB_STATUS_OK)
        MISMATCH("config.base_url: %s", err_text());
    const cJSON *event = cJSON_GetObjectItemCaseSensitive(config, "event");
    if (event && !cJSON_IsNull(event)) {
        char *e = given_bytes(event);
        if (!e) MISMATCH("format: config.event");
        lb_status st = lb_settlement_config_set_event(w.cfg, e);
        free(e);
        if (st != LB_STATUS_OK) MISMATCH("config.event: %s", err_text());
    }
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(config, "release_reason");
    if (reason && is_str(reason) && lb_settlement_config_set_release_reason(w.cfg, reason->valuestring) != LB_STATUS_OK)
        MISMATCH("config.release_reason: %s", err_text());
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(config, "commit");
    if (c && !cJSON_IsNull(c) && !(commit = given_bytes(c))) MISMATCH("format: config.commit");
    int release = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(config, "release"));

    w.wall_offset = 1785585600000LL;
    int i = 0;
    const cJSON *step;
    cJSON_ArrayForEach(step, steps) {
        uint64_t at;
        if (!parse_time_ns(cJSON_GetObjectItemCaseSensitive(step, "at"), &at)) MISMATCH("step %d: format: at", i);
        long long at_ms = (long long)(at / 1000000);
        const cJSON *wall = cJSON_GetObjectItemCaseSensitive(step, "wall");
        if (wall) {
            uint64_t v;
            if (!is_num(wall) || !parse_u64(num_text(wall), &v)) MISMATCH("step %d: format: wall", i);
            w.wall_offset = (long long)v - at_ms;
        }
        long long wl = w.wall_offset + at_ms;
        uint64_t wall_ms = wl < 0 ? 0 : (uint64_t)wl;
        const cJSON *start = cJSON_GetObjectItemCaseSensitive(step, "start");
        const cJSON *persisted = cJSON_GetObjectItemCaseSensitive(step, "persisted");
        const cJSON *pfail = cJSON_GetObjectItemCaseSensitive(step, "persist_failed");
        const cJSON *send = cJSON_GetObjectItemCaseSensitive(step, "send");
        const cJSON *recv = cJSON_GetObjectItemCaseSensitive(step, "recv");
        const cJSON *fail = cJSON_GetObjectItemCaseSensitive(step, "fail");
        const cJSON *restart = cJSON_GetObjectItemCaseSensitive(step, "restart");
        const cJSON *expect = cJSON_GetObjectItemCaseSensitive(step, "expect");
        lb_status st = LB_STATUS_OK;
        if (!start && !restart && !w.s) MISMATCH("step %d: no settlement (refused or never built)", i);
        lb_settlement_action action;
        memset(&action, 0, sizeof action);
        if (w.s && lb_settlement_poll_action(w.s, &action) != LB_STATUS_OK) MISMATCH("step %d: poll: %s", i, err_text());
        if (start) {
            int want_release = is_str(start) && strcmp(start->valuestring, "release") == 0;
            if (want_release != release) MISMATCH("step %d: start: the config says otherwise", i);
            st = release ? lb_settlement_new_release(w.cfg, rid, rid_len, at, wall_ms, &w.s)
                         : lb_settlement_new_commit(w.cfg, rid, rid_len, commit, at, wall_ms, &w.s);
        } else if (restart) {
            lb_settlement_free(w.s);
            w.s = NULL;
            set_text(&w.writing, NULL);
            const cJSON *verbatim = cJSON_GetObjectItemCaseSensitive(step, "record");
            char *bytes = verbatim ? given_bytes(verbatim) : w.store ? dup_str(w.store) : NULL;
            if (!bytes) MISMATCH("step %d: restart: no acknowledged record to replay", i);
            st = lb_settlement_from_record(w.cfg, (const uint8_t *)bytes, strlen(bytes), at, wall_ms, &w.s);
            free(bytes);
            if (st == LB_STATUS_OK) set_text(&w.store, settle_text(lb_settlement_record_json, w.s));
        } else if (persisted) {
            st = lb_settlement_handle_persisted(w.s, at);
            if (st == LB_STATUS_OK) {
                set_text(&w.store, w.writing);
                w.writing = NULL;
            }
        } else if (pfail) {
            if (!is_str(pfail)) MISMATCH("step %d: format: persist_failed", i);
            st = lb_settlement_handle_persist_failed(w.s, pfail->valuestring, at);
            if (st == LB_STATUS_OK) set_text(&w.writing, NULL);
        } else if (send) {
            if (action.kind != LB_SETTLEMENT_ACTION_KIND_SEND)
                MISMATCH("step %d: send: expected send %s, got action kind %d", i, send->valuestring, (int)action.kind);
            if (!is_str(send) || strcmp(send->valuestring, lb_settle_mode_str(action.endpoint)) != 0)
                MISMATCH("step %d: send: expected %s, got %s", i, send->valuestring, lb_settle_mode_str(action.endpoint));
            if (at < action.due_ns) MISMATCH("step %d: send: before its due time", i);
            long long floor = record_floor(w.store);
            if (floor >= 0 && action.endpoint != LB_SETTLE_MODE_RELEASE && (long long)wall_ms < floor)
                MISMATCH("step %d: send: before not_before_ms %lld (wall %llu)", i, floor, (unsigned long long)wall_ms);
            /* ST-1 in bytes: the header key is the body's key and the first key. */
            char *key = settle_text(lb_settlement_attempt_key, w.s);
            char *b = attempt_body_text(w.s);
            cJSON *bj = b ? cJSON_Parse(b) : NULL;
            const cJSON *bk = cJSON_GetObjectItemCaseSensitive(bj, "idempotency_key");
            int good = key && bk && cJSON_IsString(bk) && strcmp(bk->valuestring, key) == 0 &&
                       (!w.first_key || strcmp(w.first_key, key) == 0);
            if (good && !w.first_key) w.first_key = dup_str(key);
            cJSON_Delete(bj);
            free(b);
            if (!good) {
                snprintf(why, why_len, "step %d: key: \"%s\" is not the body's key and the first key (ST-1)", i,
                         key ? key : "?");
                free(key);
                goto out;
            }
            free(key);
            st = lb_settlement_handle_sent(w.s, action.attempt_id, at);
        } else if (recv || fail) {
            if (action.kind != LB_SETTLEMENT_ACTION_KIND_WAIT) MISMATCH("step %d: outcome: no attempt in flight", i);
            if (recv) {
                uint64_t status;
                const cJSON *sv = cJSON_GetObjectItemCaseSensitive(recv, "status");
                if (!is_num(sv) || !parse_u64(num_text(sv), &status) || status > 65535) MISMATCH("step %d: format: status", i);
                headers_clear(&headers);
                const cJSON *h = cJSON_GetObjectItemCaseSensitive(recv, "headers");
                if (h && !headers_from_json(&headers, h)) MISMATCH("step %d: format: headers", i);
                body.len = 0;
                sb_puts(&body, "");
                const cJSON *bv = cJSON_GetObjectItemCaseSensitive(recv, "body");
                const cJSON *raw = cJSON_GetObjectItemCaseSensitive(recv, "raw");
                if (bv) ser(&body, bv);
                if (raw) sb_puts(&body, raw->valuestring);
                st = lb_settlement_handle_response(w.s, action.attempt_id, (uint32_t)status, headers.items,
                                                   headers.count, (const uint8_t *)body.data, body.len, at, wall_ms);
            } else {
                lb_failure kind = 99;
                for (lb_failure k = LB_FAILURE_TIMEOUT; k <= LB_FAILURE_RESET; k++)
                    if (is_str(fail) && strcmp(fail->valuestring, failure_name(k)) == 0) kind = k;
                if (kind == 99) MISMATCH("step %d: format: fail", i);
                st = lb_settlement_handle_failure(w.s, action.attempt_id, kind, at);
            }
        } else {
            MISMATCH("step %d: format: no event", i);
        }
        /* The emitted line. */
        cJSON_Delete(emitted);
        emitted = NULL;
        lb_settlement_decision_free(d);
        d = NULL;
        if (st == LB_STATUS_OK) {
            if (lb_settlement_last_decision(w.s, &d) != LB_STATUS_OK) MISMATCH("step %d: no decision: %s", i, err_text());
            char *json = decision_text(lb_settlement_decision_json, d);
            if (!json) MISMATCH("step %d: decision json: %s", i, err_text());
            emitted = parse_marked(json);
            lines_push(&g_emitted, canonical(json, id, i));
            free(json);
            lb_settlement_decision_info info;
            if (lb_settlement_decision_get(d, &info) != LB_STATUS_OK) MISMATCH("step %d: get: %s", i, err_text());
            if (info.next == LB_SETTLE_NEXT_PERSIST) set_text(&w.writing, settle_text(lb_settlement_record_json, w.s));
            if (info.record == LB_RECORD_UPDATE_REMOVE) set_text(&w.store, NULL);
            if (info.outcome == LB_SETTLE_OUTCOME_COMMITTED || info.outcome == LB_SETTLE_OUTCOME_APPLIED ||
                info.outcome == LB_SETTLE_OUTCOME_RELEASED) {
                if (++w.successes > 1) MISMATCH("step %d: a second terminal success", i);
            }
        } else {
            /* A refusal: the status's code and the message without its "<code>: " prefix. */
            const char *code = lb_status_str(st);
            const char *msg = err_text();
            size_t cl = strlen(code);
            if (strncmp(msg, code, cl) == 0 && msg[cl] == ':' && msg[cl + 1] == ' ') msg += cl + 2;
            emitted = cJSON_CreateObject();
            if (restart) {
                cJSON_AddStringToObject(emitted, "next", "done");
                cJSON_AddStringToObject(emitted, "record", "quarantine");
            }
            cJSON_AddStringToObject(emitted, "error", code);
            cJSON_AddStringToObject(emitted, "detail", msg);
            char *line = cJSON_PrintUnformatted(emitted);
            lines_push(&g_emitted, canonical(line, id, i));
            free(line);
            if (restart) {
                lb_settlement_free(w.s);
                w.s = NULL;
            }
        }
        if (expect && !compare(i, expect, emitted, d, &w, why, why_len)) goto out;
        if (!expect && !d) MISMATCH("step %d: unexpected error: %s", i, err_text());
        i++;
    }
    ok = 1;
out:
    cJSON_Delete(emitted);
    lb_settlement_decision_free(d);
    lb_settlement_free(w.s);
    lb_settlement_config_free(w.cfg);
    free(w.store);
    free(w.writing);
    free(w.first_key);
    free(commit);
    free(rid);
    headers_clear(&headers);
    free(headers.items);
    free(body.data);
    return ok;
}

/* ----- the API's negative tests ----- */

#define RID "r-1", 3
#define COMMIT "{\"actual\":{\"unit\":\"TOKENS\",\"amount\":900}}"
#define T0 1785585600000ULL

void run_settle_api_tests(void) {
    lb_settlement_config *cfg = NULL;
    lb_settlement *s = NULL;
    lb_settlement_decision *d = NULL;
    lb_settlement_action a;
    lb_settlement_decision_info info;
    size_t need = 0;
    char small[4];

    /* NULLs */
    EXPECT(lb_settlement_config_new(NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_config_new(&cfg), LB_STATUS_OK);
    EXPECT(lb_settlement_config_set_retry(NULL, 5, 500, 30000), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_config_set_event(cfg, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_config_set_base_url(cfg, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_config_set_release_reason(cfg, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_config_set_key_prefix(cfg, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_new_commit(NULL, RID, COMMIT, 0, T0, &s), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_new_commit(cfg, NULL, 3, COMMIT, 0, T0, &s), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_new_commit(cfg, RID, COMMIT, 0, T0, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_new_release(cfg, RID, 0, T0, NULL), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_from_record(cfg, NULL, 5, 0, T0, &s), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_poll_action(NULL, &a), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_handle_persisted(NULL, 0), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_handle_sent(NULL, 1, 0), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_handle_failure(NULL, 1, LB_FAILURE_RESET, 0), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_handle_response(NULL, 1, 200, NULL, 0, NULL, 0, 0, T0), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_last_decision(NULL, &d), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_decision_get(NULL, &info), LB_STATUS_NULL_ARGUMENT);
    EXPECT(lb_settlement_decision_json(NULL, NULL, 0, &need), LB_STATUS_NULL_ARGUMENT);
    CHECK(s == NULL && d == NULL);
    lb_settlement_free(NULL);
    lb_settlement_config_free(NULL);
    lb_settlement_decision_free(NULL);

    /* bad UTF-8, bad JSON, bad values: typed refusals, nothing written */
    EXPECT(lb_settlement_new_commit(cfg, "r\xff", 2, COMMIT, 0, T0, &s), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_settlement_new_commit(cfg, RID, "{\"actual\":\xff}", 0, T0, &s), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_settlement_new_commit(cfg, RID, "not json", 0, T0, &s), LB_STATUS_INVALID_CONFIG);
    EXPECT(lb_settlement_new_commit(cfg, RID, "{\"actual\":{\"unit\":\"TOKENS\",\"amount\":9223372036854775808}}", 0,
                                   T0, &s),
           LB_STATUS_INVALID_CONFIG);
    EXPECT(lb_settlement_new_commit(cfg, "r\0001", 3, COMMIT, 0, T0, &s), LB_STATUS_INVALID_CONFIG);
    EXPECT(lb_settlement_new_commit(cfg, "", 0, COMMIT, 0, T0, &s), LB_STATUS_INVALID_CONFIG);
    {
        char *long_id = malloc(10001);
        if (!long_id) exit(2);
        memset(long_id, 'x', 10000);
        long_id[10000] = '\0';
        EXPECT(lb_settlement_new_commit(cfg, long_id, 10000, COMMIT, 0, T0, &s), LB_STATUS_INVALID_CONFIG);
        free(long_id);
    }
    EXPECT(lb_settlement_config_set_event(cfg, "\xfe"), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_settlement_config_set_event(cfg, "[1]"), LB_STATUS_OK);
    EXPECT(lb_settlement_new_commit(cfg, RID, COMMIT, 0, T0, &s), LB_STATUS_INVALID_CONFIG);
    EXPECT(lb_settlement_config_set_event(cfg, "{\"subject\":{\"tenant\":\"acme\"},\"action\":{\"kind\":\"k\",\"name\":\"n\"}}"),
           LB_STATUS_OK);
    EXPECT(lb_settlement_config_set_retry(cfg, 0, 500, 30000), LB_STATUS_OK);
    EXPECT(lb_settlement_new_commit(cfg, RID, COMMIT, 0, T0, &s), LB_STATUS_INVALID_CONFIG);
    EXPECT(lb_settlement_config_set_retry(cfg, 2, 500, 30000), LB_STATUS_OK);
    EXPECT(lb_settlement_from_record(cfg, (const uint8_t *)"{\"version\":", 11, 0, T0, &s), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_settlement_from_record(cfg, (const uint8_t *)"\xff\xfe", 2, 0, T0, &s), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_settlement_new_release(cfg, RID, 0, T0, &s), LB_STATUS_INVALID_CONFIG); /* an event body on a release */
    CHECK(s == NULL);

    /* a commit, with calls out of turn */
    EXPECT(lb_settlement_config_set_key_prefix(cfg, "k-"), LB_STATUS_OK);
    EXPECT(lb_settlement_new_commit(cfg, RID, COMMIT, 1000, T0, &s), LB_STATUS_OK);
    EXPECT(lb_settlement_poll_action(s, &a), LB_STATUS_OK);
    CHECK(a.kind == LB_SETTLEMENT_ACTION_KIND_PERSIST && a.attempt_id == 0);
    EXPECT(lb_settlement_attempt_key(s, NULL, 0, &need), LB_STATUS_NOT_OUTSTANDING);
    EXPECT(lb_settlement_handle_sent(s, 1, 1000), LB_STATUS_NOT_OUTSTANDING);
    EXPECT(lb_settlement_handle_persisted(s, 999), LB_STATUS_TIME_WENT_BACKWARDS);
    EXPECT(lb_settlement_handle_persist_failed(s, "\xff", 1000), LB_STATUS_INVALID_UTF8);
    EXPECT(lb_settlement_record_json(s, small, sizeof small, &need), LB_STATUS_BUFFER_TOO_SMALL);
    CHECK(need > sizeof small);
    char *record = settle_text(lb_settlement_record_json, s);
    CHECK(record && strstr(record, "\"mode\":\"commit\"") && strstr(record, "\"idempotency_key\":\"k-1\""));
    EXPECT(lb_settlement_handle_persisted(s, 1000), LB_STATUS_OK);
    EXPECT(lb_settlement_handle_persisted(s, 1000), LB_STATUS_NOT_OUTSTANDING);
    EXPECT(lb_settlement_poll_action(s, &a), LB_STATUS_OK);
    CHECK(a.kind == LB_SETTLEMENT_ACTION_KIND_SEND && a.endpoint == LB_SETTLE_MODE_COMMIT && a.attempt_id == 1 &&
          a.due_ns == 1000 && a.attempt_number == 1 && !a.sent);
    char *key = settle_text(lb_settlement_attempt_key, s);
    CHECK(key && strcmp(key, "k-1") == 0);
    free(key);
    EXPECT(lb_settlement_handle_response(s, 1, 200, NULL, 0, NULL, 0, 1000, T0), LB_STATUS_NOT_SENT);
    EXPECT(lb_settlement_handle_sent(s, 2, 1000), LB_STATUS_NOT_OUTSTANDING);
    EXPECT(lb_settlement_handle_sent(s, 1, 1000), LB_STATUS_OK);
    EXPECT(lb_settlement_handle_sent(s, 1, 1000), LB_STATUS_ALREADY_SENT);
    EXPECT(lb_settlement_handle_failure(s, 1, 7, 2000), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_settlement_handle_response(s, 1, 1000, NULL, 0, NULL, 0, 2000, T0), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_settlement_handle_response(s, 1, 70000, NULL, 0, NULL, 0, 2000, T0), LB_STATUS_INVALID_ARGUMENT);
    EXPECT(lb_settlement_handle_response(s, 1, 200, NULL, 0, NULL, 4, 2000, T0), LB_STATUS_NULL_ARGUMENT);
    {
        lb_header h = {NULL, 3, NULL, 0};
        EXPECT(lb_settlement_handle_response(s, 1, 200, &h, 1, NULL, 0, 2000, T0), LB_STATUS_NULL_ARGUMENT);
    }
    /* a 429 with Retry-After: 2 persists a floor first (ST-4) */
    {
        lb_header h = {(const uint8_t *)"Retry-After", 11, (const uint8_t *)"2", 1};
        EXPECT(lb_settlement_handle_response(s, 1, 429, &h, 1, NULL, 0, 2000000, T0 + 2), LB_STATUS_OK);
    }
    EXPECT(lb_settlement_last_decision(s, &d), LB_STATUS_OK);
    EXPECT(lb_settlement_decision_get(d, &info), LB_STATUS_OK);
    CHECK(info.next == LB_SETTLE_NEXT_PERSIST && info.record == LB_RECORD_UPDATE_WRITE &&
          info.record_has_not_before && info.record_not_before_ms == T0 + 2002 && info.has_not_before &&
          info.status == 429 && info.event_class == LB_SETTLE_CLASS_THROTTLED && info.has_delay &&
          info.delay_ms == 2000 && !info.stop_heartbeat);
    EXPECT(lb_settlement_decision_warning(d, 0, NULL), LB_STATUS_NULL_ARGUMENT);
    {
        lb_settle_warning wv;
        EXPECT(lb_settlement_decision_warning(d, 0, &wv), LB_STATUS_INVALID_ARGUMENT);
    }
    {
        lb_settlement_decision *copy = NULL;
        EXPECT(lb_settlement_decision_clone(d, &copy), LB_STATUS_OK);
        char *j1 = decision_text(lb_settlement_decision_json, d);
        char *j2 = decision_text(lb_settlement_decision_json, copy);
        CHECK(j1 && j2 && strcmp(j1, j2) == 0 && strstr(j1, "\"next\":\"persist\""));
        free(j1);
        free(j2);
        lb_settlement_decision_free(copy);
    }
    lb_settlement_decision_free(d);
    d = NULL;
    EXPECT(lb_settlement_handle_persist_failed(s, "disk full", 2000000), LB_STATUS_OK);
    EXPECT(lb_settlement_last_decision(s, &d), LB_STATUS_OK);
    EXPECT(lb_settlement_decision_get(d, &info), LB_STATUS_OK);
    {
        lb_settle_warning wv = LB_SETTLE_WARNING_RETRY_AFTER_CAPPED;
        CHECK(info.next == LB_SETTLE_NEXT_COMMIT && info.has_due && info.due_ns == 2002000000ULL && info.key_index == 1 &&
              info.attempt == 2 && info.warning_count == 1 && info.has_detail);
        EXPECT(lb_settlement_decision_warning(d, 0, &wv), LB_STATUS_OK);
        CHECK(wv == LB_SETTLE_WARNING_PERSIST_FAILED);
        char *detail = decision_text(lb_settlement_decision_detail, d);
        CHECK(detail && strstr(detail, "disk full"));
        free(detail);
    }
    lb_settlement_decision_free(d);
    d = NULL;
    EXPECT(lb_settlement_handle_sent(s, 2, 2002000000ULL), LB_STATUS_OK);
    {
        const char *ok = "{\"status\":\"COMMITTED\",\"charged\":{\"unit\":\"TOKENS\",\"amount\":900}}";
        EXPECT(lb_settlement_handle_response(s, 2, 200, NULL, 0, (const uint8_t *)ok, strlen(ok), 2100000000ULL, T0 + 2100),
               LB_STATUS_OK);
    }
    EXPECT(lb_settlement_poll_action(s, &a), LB_STATUS_OK);
    CHECK(a.kind == LB_SETTLEMENT_ACTION_KIND_DONE && a.outcome == LB_SETTLE_OUTCOME_COMMITTED);
    {
        lb_settle_outcome o = LB_SETTLE_OUTCOME_NONE;
        EXPECT(lb_settlement_outcome(s, &o), LB_STATUS_OK);
        CHECK(o == LB_SETTLE_OUTCOME_COMMITTED);
    }
    EXPECT(lb_settlement_last_decision(s, &d), LB_STATUS_OK);
    EXPECT(lb_settlement_decision_get(d, &info), LB_STATUS_OK);
    CHECK(info.next == LB_SETTLE_NEXT_DONE && info.record == LB_RECORD_UPDATE_REMOVE && info.stop_heartbeat &&
          !info.has_due && info.key_index == 0);
    lb_settlement_decision_free(d);
    d = NULL;
    EXPECT(lb_settlement_handle_sent(s, 3, 3000000000ULL), LB_STATUS_STOPPED);
    EXPECT(lb_settlement_handle_persisted(s, 3000000000ULL), LB_STATUS_STOPPED);
    lb_settlement_free(s);
    s = NULL;

    /* a restart from the first record: the same key, nothing persisted first (SP-4) */
    EXPECT(lb_settlement_from_record(cfg, (const uint8_t *)record, strlen(record), 5, T0 + 10000, &s), LB_STATUS_OK);
    EXPECT(lb_settlement_poll_action(s, &a), LB_STATUS_OK);
    CHECK(a.kind == LB_SETTLEMENT_ACTION_KIND_SEND && a.endpoint == LB_SETTLE_MODE_COMMIT && a.due_ns == 5);
    key = settle_text(lb_settlement_key, s);
    CHECK(key && strcmp(key, "k-1") == 0);
    free(key);
    lb_settlement_free(s);
    s = NULL;
    free(record);

    /* no actual (ST-10): done at once, no record, no attempt */
    EXPECT(lb_settlement_new_commit(cfg, RID, NULL, 0, T0, &s), LB_STATUS_OK);
    EXPECT(lb_settlement_poll_action(s, &a), LB_STATUS_OK);
    CHECK(a.kind == LB_SETTLEMENT_ACTION_KIND_DONE && a.outcome == LB_SETTLE_OUTCOME_NO_ACTUAL);
    EXPECT(lb_settlement_record_json(s, NULL, 0, &need), LB_STATUS_NOT_OUTSTANDING);
    EXPECT(lb_settlement_handle_persisted(s, 1), LB_STATUS_STOPPED);
    lb_settlement_free(s);
    s = NULL;

    /* a release: due at once, no record */
    lb_settlement_config_free(cfg);
    cfg = NULL;
    EXPECT(lb_settlement_config_new(&cfg), LB_STATUS_OK);
    EXPECT(lb_settlement_config_set_release_reason(cfg, "unused"), LB_STATUS_OK);
    EXPECT(lb_settlement_new_commit(cfg, RID, COMMIT, 0, T0, &s), LB_STATUS_INVALID_CONFIG);
    EXPECT(lb_settlement_new_release(cfg, RID, 7, T0, &s), LB_STATUS_OK);
    EXPECT(lb_settlement_poll_action(s, &a), LB_STATUS_OK);
    CHECK(a.kind == LB_SETTLEMENT_ACTION_KIND_SEND && a.endpoint == LB_SETTLE_MODE_RELEASE && a.due_ns == 7);
    EXPECT(lb_settlement_record_json(s, NULL, 0, &need), LB_STATUS_NOT_OUTSTANDING);
    {
        char *body = attempt_body_text(s);
        char *k = settle_text(lb_settlement_key, s);
        CHECK(body && k && strlen(k) == 36 && strstr(body, k) && strstr(body, "\"reason\":\"unused\""));
        free(body);
        free(k);
    }
    lb_settlement_free(s);
    lb_settlement_config_free(cfg);

    /* stable strings */
    CHECK(strcmp(lb_settle_outcome_str(LB_SETTLE_OUTCOME_EXPIRED_UNRECORDED), "expired_unrecorded") == 0);
    CHECK(strcmp(lb_settle_next_str(LB_SETTLE_NEXT_PERSIST), "persist") == 0);
    CHECK(strcmp(lb_record_update_str(LB_RECORD_UPDATE_KEEP), "keep") == 0);
    CHECK(strcmp(lb_settle_class_str(LB_SETTLE_CLASS_SERVER_ERROR), "server_error") == 0);
    CHECK(strcmp(lb_settle_outcome_str(-1), "unknown") == 0 && strcmp(lb_settle_mode_str(3), "unknown") == 0 &&
          strcmp(lb_settle_warning_str(99), "unknown") == 0);
}
