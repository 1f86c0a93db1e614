/*
 * Replays every scenario vector given on the command line through the C API
 * of leasebeat (an `adopt` first step through lb_heartbeat_adopt_create(),
 * the `proven_until`/`expires_at_ms`/`remaining_ttl_ms` expectations through
 * lb_decision_get_instants()), after the negative and arithmetic tests
 * (negative.c), the driver tests (driver.c) and the adopt tests (adopt.c).
 * C11; JSON is parsed with cJSON.
 *
 * Exact numbers: cJSON stores numbers as doubles, which cannot hold every
 * integer above 2^53. Before parsing, each file's text is rewritten so that
 * every number token outside a string becomes a string holding the marker
 * byte 0xFF followed by the token's original text (0xFF never occurs in valid
 * UTF-8, so no real string can start with it). The harness then reads numbers
 * from that exact text: integers as uint64 (sign kept apart), times
 * (milliseconds with up to 3 decimals) as round(ms x 1000) x 1000 ns by exact
 * decimal arithmetic, and `body` objects are re-serialized with each number's
 * original token, members sorted by name as the Rust replay (serde_json) does.
 *
 * Output: one line per failure, then "N passed, M failed" as the last line;
 * the exit status is non-zero when anything failed.
 */
#include "harness.h"

#include <cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int g_passed = 0;
int g_failed = 0;

void check(int ok, const char *fmt, ...) {
    if (ok) {
        g_passed++;
        return;
    }
    g_failed++;
    va_list ap;
    va_start(ap, fmt);
    fputs("FAIL: ", stdout);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
}

const char *last_error_text(void) {
    static char buf[512];
    size_t need = 0;
    if (lb_last_error(buf, sizeof buf, &need) != LB_STATUS_OK) strcpy(buf, "(lb_last_error failed)");
    return buf;
}

void expect_status(lb_status got, lb_status want, const char *what, int line) {
    if (want == LB_STATUS_OK) {
        check(got == LB_STATUS_OK, "line %d: %s: got %s (%s)", line, what, lb_status_str(got),
              last_error_text());
        return;
    }
    const char *msg = last_error_text();
    const char *name = lb_status_str(want);
    check(got == want && strncmp(msg, name, strlen(name)) == 0 && strlen(msg) > strlen(name) + 2,
          "line %d: %s: got %s, want %s; message \"%s\"", line, what, lb_status_str(got), name, msg);
}

/* ----- growable byte buffer ----- */

void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p) {
            fputs("out of memory\n", stderr);
            exit(2);
        }
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* strdup is POSIX, not C11. */
char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (!p) exit(2);
    memcpy(p, s, n);
    return p;
}

/* ----- exact numbers ----- */

#define NUM_MARK '\xff'

/* Rewrites number tokens outside strings into marked strings. */
char *mark_numbers(const char *text) {
    sbuf out = {0};
    const char *p = text;
    while (*p) {
        if (*p == '"') {
            const char *start = p++;
            while (*p && *p != '"') {
                if (*p == '\\' && p[1]) p++;
                p++;
            }
            if (*p) p++;
            sb_put(&out, start, (size_t)(p - start));
        } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
            const char *start = p;
            while (*p && strchr("+-0123456789.eE", *p)) p++;
            sb_puts(&out, "\"\xff");
            sb_put(&out, start, (size_t)(p - start));
            sb_puts(&out, "\"");
        } else {
            sb_put(&out, p, 1);
            p++;
        }
    }
    if (!out.data) sb_puts(&out, "");
    return out.data;
}

int is_num(const cJSON *item) {
    return cJSON_IsString(item) && item->valuestring[0] == NUM_MARK;
}

const char *num_text(const cJSON *item) { return item->valuestring + 1; }

int is_str(const cJSON *item) {
    return cJSON_IsString(item) && item->valuestring[0] != NUM_MARK;
}

/* An unsigned decimal integer literal that fits uint64. */
int parse_u64(const char *s, uint64_t *out) {
    if (!*s) return 0;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return 0;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

/* An expected number: an integer literal, "inf" or "-inf". */
static int parse_expected(const cJSON *item, lb_num *out) {
    lb_num n = {LB_NUM_KIND_FINITE, false, 0};
    if (is_str(item) && strcmp(item->valuestring, "inf") == 0) {
        n.kind = LB_NUM_KIND_POS_INF;
    } else if (is_str(item) && strcmp(item->valuestring, "-inf") == 0) {
        n.kind = LB_NUM_KIND_NEG_INF;
    } else if (is_num(item)) {
        const char *t = num_text(item);
        if (*t == '-') {
            n.negative = true;
            t++;
        }
        if (!parse_u64(t, &n.magnitude)) return 0;
        if (n.magnitude == 0) n.negative = false;
    } else {
        return 0;
    }
    *out = n;
    return 1;
}

/* Scenario milliseconds to nanoseconds: round(ms x 1000) x 1000, exact. */
int parse_time_ns(const cJSON *item, uint64_t *out) {
    if (!is_num(item)) return 0;
    const char *t = num_text(item);
    uint64_t ms;
    if (parse_u64(t, &ms)) {
        if (ms > UINT64_MAX / 1000000) return 0;
        *out = ms * 1000000;
        return 1;
    }
    const char *dot = strchr(t, '.');
    if (dot && !strpbrk(t, "eE-+")) {
        char ipart[32];
        size_t il = (size_t)(dot - t);
        if (il == 0 || il >= sizeof ipart) return 0;
        memcpy(ipart, t, il);
        ipart[il] = '\0';
        if (!parse_u64(ipart, &ms)) return 0;
        uint64_t micros = 0;
        const char *f = dot + 1;
        if (!*f) return 0;
        for (int i = 0; i < 3; i++) {
            unsigned d = 0;
            if (*f) {
                if (*f < '0' || *f > '9') return 0;
                d = (unsigned)(*f++ - '0');
            }
            micros = micros * 10 + d;
        }
        int round_up = 0;
        if (*f) {
            if (*f < '0' || *f > '9') return 0;
            round_up = *f >= '5'; /* half away from zero, as f64::round */
            for (; *f; f++)
                if (*f < '0' || *f > '9') return 0;
        }
        micros += (uint64_t)round_up;
        if (ms > (UINT64_MAX / 1000 - micros) / 1000) return 0;
        *out = (ms * 1000 + micros) * 1000;
        return 1;
    }
    /* An exponent form: as the Rust replay, through a double. */
    errno = 0;
    char *end = NULL;
    double d = strtod(t, &end);
    if (errno || *end || !(d >= 0)) return 0;
    double micros = d * 1000.0 + 0.5; /* round half away from zero (d >= 0) */
    if (micros >= (double)(UINT64_MAX / 1000)) return 0;
    *out = (uint64_t)micros * 1000;
    return 1;
}

static void num_to_text(const lb_num *n, char *buf, size_t len) {
    switch (n->kind) {
    case LB_NUM_KIND_ABSENT: snprintf(buf, len, "absent"); break;
    case LB_NUM_KIND_NEG_INF: snprintf(buf, len, "-inf"); break;
    case LB_NUM_KIND_POS_INF: snprintf(buf, len, "inf"); break;
    case LB_NUM_KIND_FINITE:
        snprintf(buf, len, "%s%llu", n->negative ? "-" : "", (unsigned long long)n->magnitude);
        break;
    default: snprintf(buf, len, "?"); break;
    }
}

void ns_to_text(lb_time t, char *buf, size_t len) {
    if (t.infinite) {
        snprintf(buf, len, "inf");
    } else if (t.ns % 1000000 == 0) {
        snprintf(buf, len, "%llu", (unsigned long long)(t.ns / 1000000));
    } else {
        snprintf(buf, len, "%llu.%06llu", (unsigned long long)(t.ns / 1000000),
                 (unsigned long long)(t.ns % 1000000));
    }
}

/* ----- body serialization (serde_json's compact form, sorted members) ----- */

static void ser_string(sbuf *b, const char *s) {
    sb_puts(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        switch (c) {
        case '"': sb_puts(b, "\\\""); break;
        case '\\': sb_puts(b, "\\\\"); break;
        case '\b': sb_puts(b, "\\b"); break;
        case '\f': sb_puts(b, "\\f"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\r': sb_puts(b, "\\r"); break;
        case '\t': sb_puts(b, "\\t"); break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                sb_puts(b, esc);
            } else {
                sb_put(b, (const char *)&c, 1);
            }
        }
    }
    sb_puts(b, "\"");
}

static int cmp_members(const void *a, const void *b) {
    const cJSON *x = *(const cJSON *const *)a;
    const cJSON *y = *(const cJSON *const *)b;
    return strcmp(x->string, y->string);
}

void ser(sbuf *b, const cJSON *v) {
    if (is_num(v)) {
        sb_puts(b, num_text(v));
    } else if (cJSON_IsString(v)) {
        ser_string(b, v->valuestring);
    } else if (cJSON_IsTrue(v)) {
        sb_puts(b, "true");
    } else if (cJSON_IsFalse(v)) {
        sb_puts(b, "false");
    } else if (cJSON_IsNull(v)) {
        sb_puts(b, "null");
    } else if (cJSON_IsArray(v)) {
        sb_puts(b, "[");
        const cJSON *c;
        int first = 1;
        cJSON_ArrayForEach(c, v) {
            if (!first) sb_puts(b, ",");
            first = 0;
            ser(b, c);
        }
        sb_puts(b, "]");
    } else if (cJSON_IsObject(v)) {
        int n = cJSON_GetArraySize(v);
        const cJSON **m = malloc(sizeof *m * (size_t)(n ? n : 1));
        int i = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, v) m[i++] = c;
        qsort(m, (size_t)n, sizeof *m, cmp_members);
        sb_puts(b, "{");
        for (i = 0; i < n; i++) {
            /* serde_json keeps the last of duplicated members */
            if (i + 1 < n && strcmp(m[i]->string, m[i + 1]->string) == 0) continue;
            if (b->data[b->len - 1] != '{') sb_puts(b, ",");
            ser_string(b, m[i]->string);
            sb_puts(b, ":");
            ser(b, m[i]);
        }
        sb_puts(b, "}");
        free(m);
    }
}

/* ----- emitted decisions, for the comparison with the Rust replay ----- */

line_list g_emitted;

void lines_push(line_list *l, char *line) {
    char **p = realloc(l->lines, sizeof *p * (l->count + 1));
    if (!p) exit(2);
    l->lines = p;
    l->lines[l->count++] = line;
}

static void lines_free(line_list *l) {
    for (size_t i = 0; i < l->count; i++) free(l->lines[i]);
    free(l->lines);
    l->lines = NULL;
    l->count = 0;
}

/* The canonical text of a JSON text: members sorted, numbers verbatim. */
char *canonical(const char *text, const char *id, int step) {
    char *marked = mark_numbers(text);
    cJSON *j = cJSON_Parse(marked);
    free(marked);
    if (!j) return dup_str("(invalid JSON)");
    if (id) {
        char num[32];
        snprintf(num, sizeof num, "\xff%d", step);
        cJSON_AddStringToObject(j, "id", id);
        cJSON_AddStringToObject(j, "step", num);
    }
    sbuf b = {0};
    ser(&b, j);
    cJSON_Delete(j);
    return b.data;
}

/* ----- the replay ----- */

typedef struct {
    char **keys;
    size_t count;
} keyset;

static int keyset_has(const keyset *k, const char *key) {
    for (size_t i = 0; i < k->count; i++)
        if (strcmp(k->keys[i], key) == 0) return 1;
    return 0;
}

static void keyset_add(keyset *k, const char *key) {
    if (keyset_has(k, key)) return;
    char **p = realloc(k->keys, sizeof *p * (k->count + 1));
    if (!p) exit(2);
    k->keys = p;
    k->keys[k->count++] = dup_str(key);
}

static void keyset_free(keyset *k) {
    for (size_t i = 0; i < k->count; i++) free(k->keys[i]);
    free(k->keys);
}

static char *attempt_key(const lb_heartbeat *hb) {
    size_t need = 0;
    if (lb_heartbeat_attempt_key(hb, NULL, 0, &need) != LB_STATUS_OK) return NULL;
    char *buf = malloc(need);
    if (!buf) exit(2);
    if (lb_heartbeat_attempt_key(hb, buf, need, &need) != LB_STATUS_OK) {
        free(buf);
        return NULL;
    }
    return buf;
}

static uint8_t *attempt_body(const lb_heartbeat *hb, size_t *len) {
    size_t need = 0;
    if (lb_heartbeat_attempt_body(hb, NULL, 0, &need) != LB_STATUS_OK) return NULL;
    uint8_t *buf = malloc(need ? need : 1);
    if (!buf) exit(2);
    if (need && lb_heartbeat_attempt_body(hb, buf, need, &need) != LB_STATUS_OK) {
        free(buf);
        return NULL;
    }
    *len = need;
    return buf;
}

static char *last_error(void) {
    static char buf[1024];
    size_t need = 0;
    if (lb_last_error(buf, sizeof buf, &need) != LB_STATUS_OK) snprintf(buf, sizeof buf, "(message longer than %zu)", sizeof buf);
    return buf;
}

#define MISMATCH(...)                                                                              \
    do {                                                                                           \
        snprintf(why, why_len, __VA_ARGS__);                                                       \
        goto out;                                                                                  \
    } while (0)

/* Compares one expectation with the decision; writes the difference to why. */
static int compare(const char *id, int step, const cJSON *expect, const lb_decision *d,
                   char *why, size_t why_len) {
    lb_decision_info info;
    if (lb_decision_get(d, &info) != LB_STATUS_OK) {
        snprintf(why, why_len, "lb_decision_get: %s", last_error());
        return 0;
    }
    const cJSON *f;
    cJSON_ArrayForEach(f, expect) {
        const char *name = f->string;
        char got[128];
        if (strcmp(name, "at") == 0) {
            if (info.next == LB_NEXT_STOP) MISMATCH("at: expected a due time, got absent (a stop)");
            lb_time want = {false, 0};
            if (is_str(f) && strcmp(f->valuestring, "inf") == 0) want.infinite = true;
            else if (!parse_time_ns(f, &want.ns)) MISMATCH("at: unreadable expectation");
            if (want.infinite != info.at.infinite || want.ns != info.at.ns) {
                char w[64];
                ns_to_text(want, w, sizeof w);
                ns_to_text(info.at, got, sizeof got);
                MISMATCH("at: expected %s, got %s", w, got);
            }
        } else if (strcmp(name, "proven_until") == 0) {
            lb_decision_instants ins;
            if (lb_decision_get_instants(d, &ins) != LB_STATUS_OK) MISMATCH("lb_decision_get_instants: %s", last_error());
            lb_time want = {false, 0};
            if (is_str(f) && strcmp(f->valuestring, "inf") == 0) want.infinite = true;
            else if (!parse_time_ns(f, &want.ns)) MISMATCH("proven_until: unreadable expectation");
            if (!ins.has_proven_until) MISMATCH("proven_until: expected a value, got absent");
            if (want.infinite != ins.proven_until.infinite || want.ns != ins.proven_until.ns) {
                char w[64];
                ns_to_text(want, w, sizeof w);
                ns_to_text(ins.proven_until, got, sizeof got);
                MISMATCH("proven_until: expected %s, got %s", w, got);
            }
        } else if (strcmp(name, "expires_at_ms") == 0 || strcmp(name, "remaining_ttl_ms") == 0) {
            lb_decision_instants ins;
            if (lb_decision_get_instants(d, &ins) != LB_STATUS_OK) MISMATCH("lb_decision_get_instants: %s", last_error());
            uint64_t want;
            if (!is_num(f) || !parse_u64(num_text(f), &want)) MISMATCH("%s: unreadable expectation", name);
            int expires = strcmp(name, "expires_at_ms") == 0;
            bool present = expires ? ins.has_expires_at_ms : ins.has_remaining_ttl_ms;
            uint64_t have = expires ? ins.expires_at_ms : ins.remaining_ttl_ms;
            if (!present || want != have)
                MISMATCH("%s: expected %llu, got %s%llu", name, (unsigned long long)want, present ? "" : "absent ",
                         (unsigned long long)have);
        } else if (strcmp(name, "numbers") == 0) {
            const cJSON *n;
            cJSON_ArrayForEach(n, f) {
                lb_num want, have;
                if (!parse_expected(n, &want)) MISMATCH("numbers.%s: unreadable expectation", n->string);
                if (lb_decision_number(d, n->string, &have) != LB_STATUS_OK)
                    MISMATCH("numbers.%s: %s", n->string, last_error());
                if (want.kind != have.kind || want.negative != have.negative || want.magnitude != have.magnitude) {
                    char w[64];
                    num_to_text(&want, w, sizeof w);
                    num_to_text(&have, got, sizeof got);
                    MISMATCH("numbers.%s: expected %s, got %s", n->string, w, got);
                }
            }
        } else if (strcmp(name, "warnings") == 0) {
            if (!cJSON_IsArray(f)) MISMATCH("warnings: not a list");
            size_t count = (size_t)cJSON_GetArraySize(f);
            if (count != info.warning_count)
                MISMATCH("warnings: expected %zu, got %zu warnings", count, info.warning_count);
            for (size_t i = 0; i < count; i++) {
                lb_warning w;
                const cJSON *want = cJSON_GetArrayItem(f, (int)i);
                if (lb_decision_warning(d, i, &w) != LB_STATUS_OK) MISMATCH("warnings: %s", last_error());
                if (!is_str(want) || strcmp(want->valuestring, lb_warning_str(w)) != 0)
                    MISMATCH("warnings[%zu]: got %s", i, lb_warning_str(w));
            }
        } else if (strcmp(name, "key_index") == 0 || strcmp(name, "step") == 0) {
            uint64_t want;
            if (!is_num(f) || !parse_u64(num_text(f), &want)) MISMATCH("%s: unreadable expectation", name);
            int present = strcmp(name, "step") == 0 || info.key_index != 0;
            uint64_t have = strcmp(name, "step") == 0 ? (uint64_t)step : info.key_index;
            if (!present || want != have)
                MISMATCH("%s: expected %llu, got %s%llu", name, (unsigned long long)want,
                         present ? "" : "absent ", (unsigned long long)have);
        } else {
            /* string fields of the emitted decision */
            const char *have = NULL;
            if (strcmp(name, "next") == 0) have = lb_next_str(info.next);
            else if (strcmp(name, "key") == 0) have = info.key_use == LB_KEY_USE_NONE ? NULL : lb_key_use_str(info.key_use);
            else if (strcmp(name, "reason") == 0) have = info.next == LB_NEXT_STOP ? lb_stop_reason_str(info.stop_reason) : NULL;
            else if (strcmp(name, "mode") == 0) have = info.mode == LB_MODE_NONE ? NULL : lb_mode_str(info.mode);
            else if (strcmp(name, "id") == 0) have = id;
            else MISMATCH("%s: unknown expect field", name);
            if (!is_str(f)) MISMATCH("%s: expected a string in the vector", name);
            if (!have || strcmp(have, f->valuestring) != 0)
                MISMATCH("%s: expected \"%s\", got %s", name, f->valuestring, have ? have : "absent");
        }
    }
    return 1;
out:
    return 0;
}

/* Checks the decision's JSON text parses and agrees on `next`. */
static int check_json(const lb_decision *d, const lb_decision_info *info, char *why, size_t why_len) {
    size_t need = 0;
    if (lb_decision_json(d, NULL, 0, &need) != LB_STATUS_OK) MISMATCH("lb_decision_json: %s", last_error());
    char *text = malloc(need);
    if (!text) exit(2);
    int ok = lb_decision_json(d, text, need, &need) == LB_STATUS_OK;
    cJSON *j = ok ? cJSON_Parse(text) : NULL;
    const cJSON *next = cJSON_GetObjectItemCaseSensitive(j, "next");
    ok = ok && cJSON_IsString(next) && strcmp(next->valuestring, lb_next_str(info->next)) == 0 &&
         strlen(text) + 1 == need;
    cJSON_Delete(j);
    free(text);
    if (!ok) MISMATCH("lb_decision_json: unexpected text");
    return 1;
out:
    return 0;
}

static int replay(const cJSON *root, const char *id, char *why, size_t why_len) {
    int ok = 0;
    lb_config *cfg = NULL;
    lb_heartbeat *hb = NULL;
    lb_decision *d = NULL;
    keyset used = {0};
    char *cur_key = NULL;
    uint8_t *cur_body = NULL;
    size_t cur_body_len = 0;
    header_list headers = {0};
    sbuf body = {0};

    const cJSON *config = cJSON_GetObjectItemCaseSensitive(root, "config");
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(root, "steps");
    if (!cJSON_IsObject(config) || !cJSON_IsArray(steps)) MISMATCH("format: config or steps missing");
    if (lb_config_new(&cfg) != LB_STATUS_OK) MISMATCH("lb_config_new: %s", last_error());
    const cJSON *ttl = cJSON_GetObjectItemCaseSensitive(config, "ttl_ms");
    if (ttl && !cJSON_IsNull(ttl)) {
        uint64_t v;
        if (!is_num(ttl) || !parse_u64(num_text(ttl), &v)) MISMATCH("format: config.ttl_ms");
        lb_config_set_ttl_ms(cfg, v);
    }
    const cJSON *timeout = cJSON_GetObjectItemCaseSensitive(config, "request_timeout_ms");
    if (timeout && !cJSON_IsNull(timeout)) {
        uint64_t v;
        if (!is_num(timeout) || !parse_u64(num_text(timeout), &v)) MISMATCH("format: config.request_timeout_ms");
        lb_config_set_request_timeout_ms(cfg, v);
    }
    if (lb_config_set_key_prefix(cfg, "key-") != LB_STATUS_OK) MISMATCH("set_key_prefix: %s", last_error());
    const cJSON *first_step = cJSON_GetArrayItem(steps, 0);
    const cJSON *adopt = first_step ? cJSON_GetObjectItemCaseSensitive(first_step, "adopt") : NULL;
    if (!adopt && lb_heartbeat_new(cfg, &hb) != LB_STATUS_OK)
        MISMATCH("step 0: config: expected a valid configuration, got %s", last_error());

    int i = 0;
    const cJSON *step;
    cJSON_ArrayForEach(step, steps) {
        uint64_t at;
        if (!parse_time_ns(cJSON_GetObjectItemCaseSensitive(step, "at"), &at)) MISMATCH("step %d: format: at", i);
        const cJSON *send = cJSON_GetObjectItemCaseSensitive(step, "send");
        const cJSON *recv = cJSON_GetObjectItemCaseSensitive(step, "recv");
        const cJSON *fail = cJSON_GetObjectItemCaseSensitive(step, "fail");
        const cJSON *cancel = cJSON_GetObjectItemCaseSensitive(step, "cancel");
        const cJSON *adopt_here = cJSON_GetObjectItemCaseSensitive(step, "adopt");
        const cJSON *expect = cJSON_GetObjectItemCaseSensitive(step, "expect");
        if ((send != NULL) + (recv != NULL) + (fail != NULL) + (cancel != NULL) + (adopt_here != NULL) != 1)
            MISMATCH("step %d: format: exactly one of send, recv, fail, cancel, adopt", i);
        if (adopt_here && i != 0) MISMATCH("step %d: format: adopt is only allowed as the first step", i);
        lb_action action;
        memset(&action, 0, sizeof action);
        lb_status st;
        if (adopt_here) {
            /* The caller performed the create itself: hand it over. */
            const cJSON *key = cJSON_GetObjectItemCaseSensitive(adopt_here, "key");
            const cJSON *sent = cJSON_GetObjectItemCaseSensitive(adopt_here, "sent");
            const cJSON *request = cJSON_GetObjectItemCaseSensitive(adopt_here, "request");
            const cJSON *arecv = cJSON_GetObjectItemCaseSensitive(adopt_here, "recv");
            const cJSON *afail = cJSON_GetObjectItemCaseSensitive(adopt_here, "fail");
            if (!is_str(key)) MISMATCH("step 0: format: adopt.key");
            if ((arecv != NULL) + (afail != NULL) != 1) MISMATCH("step 0: format: adopt has exactly one of recv, fail");
            lb_adopted_create c;
            memset(&c, 0, sizeof c);
            c.key = key->valuestring;
            c.received_ns = at;
            if (sent) {
                if (!parse_time_ns(sent, &c.sent_ns)) MISMATCH("step 0: format: adopt.sent");
                c.sent_known = true;
            }
            sbuf req = {0};
            if (request) {
                if (!cJSON_IsObject(request)) MISMATCH("step 0: format: adopt.request");
                ser(&req, request);
                c.request_body = (const uint8_t *)req.data;
                c.request_body_len = req.len;
            }
            if (arecv) {
                uint64_t status;
                const cJSON *s = cJSON_GetObjectItemCaseSensitive(arecv, "status");
                const cJSON *h = cJSON_GetObjectItemCaseSensitive(arecv, "headers");
                const cJSON *b = cJSON_GetObjectItemCaseSensitive(arecv, "body");
                const cJSON *raw = cJSON_GetObjectItemCaseSensitive(arecv, "raw");
                const cJSON *timing = cJSON_GetObjectItemCaseSensitive(arecv, "timing");
                int bad = !is_num(s) || !parse_u64(num_text(s), &status) || status > 65535 || (b && raw) ||
                          (raw && !is_str(raw)) ||
                          (timing && (!is_str(timing) || strcmp(timing->valuestring, "unknown") != 0));
                headers_clear(&headers);
                if (!bad && h && !headers_from_json(&headers, h)) bad = 1;
                if (bad) {
                    free(req.data);
                    MISMATCH("step 0: format: adopt.recv");
                }
                body.len = 0;
                if (b) ser(&body, b);
                if (raw) sb_puts(&body, raw->valuestring);
                c.outcome = LB_ADOPTED_RESPONSE;
                c.status = (uint32_t)status;
                c.headers = headers.items;
                c.header_count = headers.count;
                c.body = (const uint8_t *)body.data;
                c.body_len = body.len;
                c.timing_unknown = timing != NULL;
            } else {
                c.outcome = LB_ADOPTED_FAILURE;
                if (is_str(afail) && strcmp(afail->valuestring, "timeout") == 0) c.failure = LB_FAILURE_TIMEOUT;
                else if (is_str(afail) && strcmp(afail->valuestring, "connect") == 0) c.failure = LB_FAILURE_CONNECT;
                else if (is_str(afail) && strcmp(afail->valuestring, "reset") == 0) c.failure = LB_FAILURE_RESET;
                else {
                    free(req.data);
                    MISMATCH("step 0: format: adopt.fail");
                }
            }
            st = lb_heartbeat_adopt_create(cfg, &c, &hb);
            if (st != LB_STATUS_OK) {
                free(req.data);
                MISMATCH("step 0: adopt: expected accepted, got %s", last_error());
            }
            /* What the caller sent: its key and body (or, without a request,
             * the body the core would resend, read from a retry if any). */
            keyset_add(&used, key->valuestring);
            free(cur_key);
            free(cur_body);
            cur_key = dup_str(key->valuestring);
            cur_body = NULL;
            cur_body_len = 0;
            if (request) {
                cur_body = (uint8_t *)req.data;
                cur_body_len = req.len;
                req.data = NULL;
            } else {
                lb_action now;
                if (lb_heartbeat_poll_action(hb, &now) == LB_STATUS_OK && now.kind == LB_ACTION_KIND_SEND &&
                    now.attempt_kind == LB_NEXT_CREATE)
                    cur_body = attempt_body(hb, &cur_body_len);
            }
            free(req.data);
        } else if (lb_heartbeat_poll_action(hb, &action) != LB_STATUS_OK) {
            MISMATCH("step %d: poll: %s", i, last_error());
        }
        if (adopt_here) {
            /* decision checks below */
        } else if (send) {
            if (!is_str(send)) MISMATCH("step %d: format: send", i);
            if (action.kind != LB_ACTION_KIND_SEND)
                MISMATCH("step %d: send: expected send %s, got %s", i, send->valuestring,
                         action.kind == LB_ACTION_KIND_STOP ? "stopped" : "attempt still in flight");
            if (strcmp(send->valuestring, lb_next_str(action.attempt_kind)) != 0)
                MISMATCH("step %d: send: expected %s, got %s", i, send->valuestring, lb_next_str(action.attempt_kind));
            if (lb_heartbeat_handle_sent(hb, action.attempt_id, at) != LB_STATUS_OK)
                MISMATCH("step %d: send: expected accepted, got %s", i, last_error());
            free(cur_key);
            free(cur_body);
            cur_key = attempt_key(hb);
            cur_body = attempt_body(hb, &cur_body_len);
            if (!cur_key || !cur_body) MISMATCH("step %d: reading the attempt: %s", i, last_error());
            keyset_add(&used, cur_key);
            i++;
            continue;
        }
        if (!adopt_here && (recv || fail)) {
            if (action.kind != LB_ACTION_KIND_AWAIT_OUTCOME)
                MISMATCH("step %d: outcome: expected an attempt in flight, got %s", i,
                         action.kind == LB_ACTION_KIND_STOP ? "stopped" : "attempt not yet sent");
        }
        if (adopt_here) {
            /* handed over above */
        } else if (recv) {
            uint64_t status;
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(recv, "status");
            if (!is_num(s) || !parse_u64(num_text(s), &status) || status > 65535) MISMATCH("step %d: format: recv.status", i);
            headers_clear(&headers);
            const cJSON *h = cJSON_GetObjectItemCaseSensitive(recv, "headers");
            if (h && !headers_from_json(&headers, h)) MISMATCH("step %d: format: recv.headers", i);
            body.len = 0;
            const cJSON *b = cJSON_GetObjectItemCaseSensitive(recv, "body");
            const cJSON *raw = cJSON_GetObjectItemCaseSensitive(recv, "raw");
            if (b && raw) MISMATCH("step %d: format: both body and raw", i);
            if (b) ser(&body, b);
            if (raw) {
                if (!is_str(raw)) MISMATCH("step %d: format: raw", i);
                sb_puts(&body, raw->valuestring);
            }
            const cJSON *timing = cJSON_GetObjectItemCaseSensitive(recv, "timing");
            bool unknown = false;
            if (timing) {
                if (!is_str(timing) || strcmp(timing->valuestring, "unknown") != 0) MISMATCH("step %d: format: timing", i);
                unknown = true;
            }
            st = lb_heartbeat_handle_response(hb, action.attempt_id, (uint32_t)status, headers.items, headers.count,
                                              (const uint8_t *)body.data, body.len, unknown, at);
            if (st != LB_STATUS_OK) MISMATCH("step %d: recv: expected accepted, got %s", i, last_error());
        } else if (fail) {
            lb_failure kind;
            if (!is_str(fail)) MISMATCH("step %d: format: fail", i);
            if (strcmp(fail->valuestring, "timeout") == 0) kind = LB_FAILURE_TIMEOUT;
            else if (strcmp(fail->valuestring, "connect") == 0) kind = LB_FAILURE_CONNECT;
            else if (strcmp(fail->valuestring, "reset") == 0) kind = LB_FAILURE_RESET;
            else MISMATCH("step %d: format: fail %s", i, fail->valuestring);
            st = lb_heartbeat_handle_failure(hb, action.attempt_id, kind, at);
            if (st != LB_STATUS_OK) MISMATCH("step %d: fail: expected accepted, got %s", i, last_error());
        } else {
            if (!cJSON_IsTrue(cancel)) MISMATCH("step %d: format: cancel must be true", i);
            st = lb_heartbeat_cancel(hb, at);
            if (st != LB_STATUS_OK) MISMATCH("step %d: cancel: expected accepted, got %s", i, last_error());
        }
        lb_decision_free(d);
        d = NULL;
        if (lb_heartbeat_last_decision(hb, &d) != LB_STATUS_OK || !d) MISMATCH("step %d: no decision", i);
        lb_decision_info info;
        if (lb_decision_get(d, &info) != LB_STATUS_OK) MISMATCH("step %d: %s", i, last_error());
        /* The harness's own check of S-4: what the key claim means in bytes. */
        if (info.key_use != LB_KEY_USE_NONE) {
            lb_action now;
            lb_heartbeat_poll_action(hb, &now);
            if (now.kind != LB_ACTION_KIND_STOP) {
                char *key = attempt_key(hb);
                size_t blen = 0;
                uint8_t *bb = attempt_body(hb, &blen);
                int good;
                if (info.key_use == LB_KEY_USE_NEW) good = key && !keyset_has(&used, key);
                else good = key && bb && cur_key && strcmp(key, cur_key) == 0 && blen == cur_body_len &&
                            memcmp(bb, cur_body, blen) == 0;
                if (!good) {
                    snprintf(why, why_len, "step %d: key: expected a %s key really %s, got \"%s\"", i,
                             lb_key_use_str(info.key_use), lb_key_use_str(info.key_use), key ? key : "?");
                    free(key);
                    free(bb);
                    goto out;
                }
                free(key);
                free(bb);
            }
        }
        char sub[400];
        if (!check_json(d, &info, sub, sizeof sub)) MISMATCH("step %d: %s", i, sub);
        {
            size_t need = 0;
            lb_decision_json(d, NULL, 0, &need);
            char *text = malloc(need);
            if (!text) exit(2);
            lb_decision_json(d, text, need, &need);
            lines_push(&g_emitted, canonical(text, id, i));
            free(text);
        }
        if (expect && !compare(id, i, expect, d, sub, sizeof sub)) MISMATCH("step %d: %s", i, sub);
        i++;
    }
    ok = 1;
out:
    lb_decision_free(d);
    lb_heartbeat_free(hb);
    lb_config_free(cfg);
    keyset_free(&used);
    free(cur_key);
    free(cur_body);
    headers_clear(&headers);
    free(headers.items);
    free(body.data);
    return ok;
}

/* ----- headers ----- */

void headers_clear(header_list *h) {
    for (size_t i = 0; i < h->count; i++) {
        free((void *)h->items[i].name);
        free((void *)h->items[i].value);
    }
    h->count = 0;
}

static void headers_push(header_list *h, const char *name, const char *value) {
    lb_header *p = realloc(h->items, sizeof *p * (h->count + 1));
    if (!p) exit(2);
    h->items = p;
    lb_header *e = &h->items[h->count++];
    e->name = (const uint8_t *)dup_str(name);
    e->name_len = strlen(name);
    e->value = (const uint8_t *)dup_str(value);
    e->value_len = strlen(value);
}

/* Header names in sorted order, as the Rust replay iterates them. */
int headers_from_json(header_list *h, const cJSON *obj) {
    if (!cJSON_IsObject(obj)) return 0;
    int n = cJSON_GetArraySize(obj);
    const cJSON **m = malloc(sizeof *m * (size_t)(n ? n : 1));
    int i = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, obj) m[i++] = c;
    qsort(m, (size_t)n, sizeof *m, cmp_members);
    int ok = 1;
    for (i = 0; i < n && ok; i++) {
        if (i + 1 < n && strcmp(m[i]->string, m[i + 1]->string) == 0) continue;
        if (is_str(m[i])) {
            headers_push(h, m[i]->string, m[i]->valuestring);
        } else if (cJSON_IsArray(m[i])) {
            const cJSON *v;
            cJSON_ArrayForEach(v, m[i]) {
                if (!is_str(v)) {
                    ok = 0;
                    break;
                }
                headers_push(h, m[i]->string, v->valuestring);
            }
        } else {
            ok = 0;
        }
    }
    free(m);
    return ok;
}

/* ----- files ----- */

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    sbuf b = {0};
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) sb_put(&b, chunk, n);
    fclose(f);
    if (!b.data) sb_puts(&b, "");
    return b.data;
}

static void replay_file(const char *path) {
    char why[600] = "";
    char *text = read_file(path);
    if (!text) {
        check(0, "%s: cannot read", path);
        return;
    }
    char *marked = mark_numbers(text);
    cJSON *root = cJSON_Parse(marked);
    if (!root) {
        check(0, "%s: invalid JSON", path);
    } else {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
        const char *name = is_str(id) ? id->valuestring : path;
        const cJSON *config = cJSON_GetObjectItemCaseSensitive(root, "config");
        int ok = cJSON_GetObjectItemCaseSensitive(config, "reservation_id")
                     ? settle_replay(root, text, name, why, sizeof why)
                     : replay(root, name, why, sizeof why);
        check(ok, "%s (%s): %s", path, name, why);
        if (ok) printf("ok %s\n", name);
    }
    cJSON_Delete(root);
    free(marked);
    free(text);
}

/* Compares every decision of this replay with the Rust replay's output
 * (`leasebeat replay --emit FILES`, one JSON object per line). */
static void compare_with_rust(const char *path) {
    char *text = read_file(path);
    if (!text) {
        check(0, "%s: cannot read the Rust replay's decisions", path);
        return;
    }
    line_list rust = {0};
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        if (*line) lines_push(&rust, canonical(line, NULL, 0));
    size_t n = rust.count < g_emitted.count ? rust.count : g_emitted.count;
    size_t first = n;
    for (size_t i = 0; i < n && first == n; i++)
        if (strcmp(rust.lines[i], g_emitted.lines[i]) != 0) first = i;
    if (first < n)
        check(0, "decision %zu differs from the Rust replay:\n  rust: %s\n  c:    %s", first, rust.lines[first],
              g_emitted.lines[first]);
    else
        check(rust.count == g_emitted.count, "the Rust replay made %zu decisions, the C replay %zu", rust.count,
              g_emitted.count);
    if (first == n && rust.count == g_emitted.count)
        printf("ok all %zu decisions equal the Rust replay's\n", rust.count);
    lines_free(&rust);
    free(text);
}

int main(int argc, char **argv) {
    const char *rust_emit = NULL;
    const char *server = NULL;
    const char *server_log = NULL;
    const char *fallback_server = NULL;
    int first = 1;
    for (;;) {
        if (argc >= first + 2 && strcmp(argv[first], "--compare-emitted") == 0) {
            rust_emit = argv[first + 1];
            first += 2;
        } else if (argc >= first + 2 && strcmp(argv[first], "--server") == 0) {
            server = argv[first + 1];
            first += 2;
        } else if (argc >= first + 2 && strcmp(argv[first], "--fallback-server") == 0) {
            fallback_server = argv[first + 1];
            first += 2;
        } else if (argc >= first + 2 && strcmp(argv[first], "--server-log") == 0) {
            server_log = argv[first + 1];
            first += 2;
        } else {
            break;
        }
    }
    run_api_tests();
    run_driver_tests(server, fallback_server);
    run_adopt_tests(server, server_log);
    run_settle_api_tests();
    run_journal_tests();
    run_driver_settle_tests(server);
    for (int i = first; i < argc; i++) replay_file(argv[i]);
    if (rust_emit) compare_with_rust(rust_emit);
    lines_free(&g_emitted);
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
