/*
 * The C driver's recovery tests: the 12 scenarios of the Cycles SDK Recovery
 * Conformance Profile 0.3 (../shared/reference/client-recovery/scenarios.yaml)
 * performed through the C driver ABI (lb_driver_* with the journal) against
 * a real `leasebeat serve` started by each test (127.0.0.1:0, --log FILE, the
 * --fault rules it needs), asserted FROM SERVE'S REQUEST LOG: endpoints in
 * order, the same key in header and body, `applied` at most once, the event
 * body's subject/action/actual/metrics/metadata, no request before a
 * persisted not_before_ms. Each assertion names the catalog's label.
 *
 * Usage: recovery_c [--list] [TEST...]   (no TEST: all of them)
 * Every test runs in its own temporary directory (journal, logs).
 * A restart is a fresh OS process (this program re-executed with --child)
 * started after the first one was killed with SIGKILL, from the journal
 * alone; a concurrent replay is two such processes released at once (both
 * wait for a file to appear).
 *
 * LEASEBEAT_BIN names the `leasebeat` binary (default target/release/leasebeat).
 * Closing line: "recovery_c: N passed, M failed".
 */
#define _GNU_SOURCE

#include <leasebeat.h>

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SUBJECT "{\"tenant\":\"acme\",\"app\":\"cdrv\"}"
#define ACTION "{\"kind\":\"llm.completion\",\"name\":\"model-x\"}"
#define CREATE                                                                                        \
    "{\"subject\":" SUBJECT ",\"action\":" ACTION ",\"estimate\":{\"unit\":\"TOKENS\",\"amount\":1000}}"
#define USAGE                                                                                         \
    "{\"actual\":{\"unit\":\"TOKENS\",\"amount\":420},\"metrics\":{\"tokens_input\":100,\"tokens_output\":" \
    "320,\"model_version\":\"m-1\"},\"metadata\":{\"run\":\"cdrv-42\"}}"

static const char *g_self;       /* argv[0], for re-execution */
static const char *g_leasebeat;  /* the leasebeat binary */
static int g_failed;             /* failures of the current test */
static int g_checks;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("FAIL: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    g_failed++;
}

/* check(cond, label, what...): one assertion, named by its catalog label. */
#define CHECK(cond, label, ...)                                                                       \
    do {                                                                                              \
        g_checks++;                                                                                   \
        if (!(cond)) {                                                                                \
            fprintf(stderr, "[%s] line %d: %s: ", label, __LINE__, #cond);                            \
            fail(__VA_ARGS__);                                                                        \
        }                                                                                             \
    } while (0)

static uint64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(unsigned ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static char *xstrdup(const char *s) {
    char *d = strdup(s);
    if (!d) exit(2);
    return d;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n - 1 == 0) {
            cap *= 2;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                buf = NULL;
            }
            buf = b;
        }
    }
    fclose(f);
    if (!buf) exit(2);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

static int write_file(const char *path, const char *data) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t n = strlen(data);
    int ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int rm_entry(const char *p, const struct stat *st, int fl, struct FTW *ftw) {
    (void)st;
    (void)fl;
    (void)ftw;
    return remove(p);
}

/* ----- the journal directory as files ----- */

/* The partition directory under `base` (the only subdirectory). */
static int partition_dir(const char *base, char *out, size_t out_len) {
    DIR *d = opendir(base);
    if (!d) return -1;
    struct dirent *e;
    int found = -1;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(out, out_len, "%s/%s", base, e->d_name);
        found = 0;
    }
    closedir(d);
    return found;
}

/* How many files of the partition end in `suffix` (and start with `prefix`). */
static int count_files(const char *base, const char *prefix, const char *suffix) {
    char dir[2048];
    if (partition_dir(base, dir, sizeof dir) != 0) return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name), ls = strlen(suffix);
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && l >= ls && strcmp(e->d_name + l - ls, suffix) == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* The text of the first v2 record of the partition (malloc'd), NULL if none. */
static char *first_record(const char *base) {
    char dir[2048];
    if (partition_dir(base, dir, sizeof dir) != 0) return NULL;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    struct dirent *e;
    char *text = NULL;
    while (!text && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, "v2-", 3) == 0 && l > 5 && strcmp(e->d_name + l - 5, ".json") == 0) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            text = read_file(p, NULL);
        }
    }
    closedir(d);
    return text;
}

/* Whether any file under `base` contains `needle`. */
static int any_file_contains(const char *base, const char *needle) {
    char dir[2048];
    if (partition_dir(base, dir, sizeof dir) != 0) return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int hit = strstr(dir, needle) != NULL;
    while (!hit && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (strstr(e->d_name, needle)) hit = 1;
        char *t = read_file(p, NULL);
        if (t && strstr(t, needle)) hit = 1;
        free(t);
    }
    closedir(d);
    return hit;
}

/* sha256 hex of `data` through sha256sum (the test's independent reference). */
static int sha256_hex(const char *tmp, const char *data, size_t len, char out[65]) {
    char p[2048], cmd[4200];
    snprintf(p, sizeof p, "%s/sha-input", tmp);
    FILE *f = fopen(p, "wb");
    if (!f) return -1;
    fwrite(data, 1, len, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", p);
    FILE *pipe = popen(cmd, "r");
    if (!pipe) return -1;
    int ok = fscanf(pipe, "%64s", out) == 1;
    pclose(pipe);
    return ok && strlen(out) == 64 ? 0 : -1;
}

/* ----- the server ----- */

typedef struct {
    pid_t pid;
    char url[512];
    char log[2048];
    uint64_t epoch_ms;    /* --epoch-ms given (wall ms just before exec) */
    uint64_t lag_ms;      /* an upper bound of server clock lag behind wall */
} server;

/* Starts `leasebeat serve` with `faults` (NULL-terminated) and --log in `tmp`. */
static int serve_start(server *s, const char *tmp, const char *const *faults) {
    memset(s, 0, sizeof *s);
    snprintf(s->log, sizeof s->log, "%s/serve.log", tmp);
    int out[2];
    if (pipe(out) != 0) return -1;
    char epoch[32];
    s->epoch_ms = wall_ms();
    snprintf(epoch, sizeof epoch, "%llu", (unsigned long long)s->epoch_ms);
    const char *argv[64];
    int n = 0;
    argv[n++] = g_leasebeat;
    argv[n++] = "serve";
    argv[n++] = "--bind";
    argv[n++] = "127.0.0.1:0";
    argv[n++] = "--max-lead-ms";
    argv[n++] = "4000";
    argv[n++] = "--epoch-ms";
    argv[n++] = epoch;
    argv[n++] = "--log";
    argv[n++] = s->log;
    for (int i = 0; faults && faults[i] && n < 60; i++) {
        argv[n++] = "--fault";
        argv[n++] = faults[i];
    }
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(out[1], 1);
        close(out[0]);
        close(out[1]);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 2);
        execv(g_leasebeat, (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    s->pid = pid;
    FILE *f = fdopen(out[0], "r");
    char line[512];
    if (!f || !fgets(line, sizeof line, f) || strncmp(line, "listening on ", 13) != 0) {
        if (f) fclose(f);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    s->lag_ms = wall_ms() - s->epoch_ms;
    line[strcspn(line, "\r\n")] = '\0';
    snprintf(s->url, sizeof s->url, "%s", line + 13);
    fclose(f);
    return 0;
}

static void serve_stop(server *s) {
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
}

/* The request lines of the server's log for `endpoint` (NULL: all), in order. */
typedef struct {
    cJSON *items[256];
    int n;
    cJSON *all; /* owns */
} reqs;

static void log_read(const server *s, const char *endpoint, reqs *r) {
    memset(r, 0, sizeof *r);
    r->all = cJSON_CreateArray();
    char *text = read_file(s->log, NULL);
    if (!text) return;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        if (!j) continue;
        cJSON_AddItemToArray(r->all, j);
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(j, "event");
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(j, "endpoint");
        if (!cJSON_IsString(ev) || strcmp(ev->valuestring, "request") != 0 || !cJSON_IsString(ep)) continue;
        if (endpoint && strcmp(ep->valuestring, endpoint) != 0) continue;
        if (r->n < 256) r->items[r->n++] = j;
    }
    free(text);
}

static void log_free(reqs *r) { cJSON_Delete(r->all); }

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int japplied(const cJSON *o) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "applied")); }

static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* The request body's idempotency_key (parsed from the logged body text). */
static char *body_key(const cJSON *req) {
    const char *b = jstr(req, "body");
    cJSON *body = b ? cJSON_Parse(b) : NULL;
    const char *k = body ? jstr(body, "idempotency_key") : NULL;
    char *out = xstrdup(k ? k : "");
    cJSON_Delete(body);
    return out;
}

/* Counts settlement requests (commit, events) that applied. */
static int applied_count(const server *s) {
    reqs r;
    log_read(s, NULL, &r);
    int n = 0;
    for (int i = 0; i < r.n; i++) {
        const char *ep = jstr(r.items[i], "endpoint");
        if ((strcmp(ep, "commit") == 0 || strcmp(ep, "events") == 0) && japplied(r.items[i])) n++;
    }
    log_free(&r);
    return n;
}

/* Every request of `endpoint` carries `key` in its header and in its body (ST-1). */
static int all_same_key(const reqs *r, const char *key) {
    for (int i = 0; i < r->n; i++) {
        char *bk = body_key(r->items[i]);
        const char *hk = jstr(r->items[i], "header_key");
        int ok = hk && strcmp(hk, key) == 0 && strcmp(bk, key) == 0;
        free(bk);
        if (!ok) return 0;
    }
    return 1;
}

/* ----- children (restarts, concurrent replay) ----- */

typedef struct {
    pid_t pid;
    FILE *out; /* the child's stdout */
    char buf[1 << 16];
    size_t len;
} child;

/* Starts this program as `--child ARGS...` with stdout piped. */
static int child_start(child *c, const char *const *args) {
    memset(c, 0, sizeof *c);
    int p[2];
    if (pipe(p) != 0) return -1;
    const char *argv[32];
    int n = 0;
    argv[n++] = g_self;
    argv[n++] = "--child";
    for (int i = 0; args[i] && n < 30; i++) argv[n++] = args[i];
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execv(g_self, (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    c->pid = pid;
    c->out = fdopen(p[0], "r");
    return c->out ? 0 : -1;
}

/* Reads the child's output until a line containing `needle` (returns 0) or
 * `timeout_ms` passes or the child closes its output (-1). Every line read is
 * kept in c->buf (for later assertions) and echoed to stderr. */
static int child_wait_for(child *c, const char *needle, unsigned timeout_ms) {
    uint64_t end = wall_ms() + timeout_ms;
    int fd = fileno(c->out);
    char line[8192];
    size_t ll = 0;
    for (;;) {
        if (strstr(c->buf, needle)) return 0;
        uint64_t now = wall_ms();
        if (now >= end) return -1;
        struct pollfd pfd = {fd, POLLIN, 0};
        int r = poll(&pfd, 1, (int)(end - now));
        if (r <= 0) continue;
        char ch;
        ssize_t got = read(fd, &ch, 1);
        if (got <= 0) return strstr(c->buf, needle) ? 0 : -1;
        if (ll + 1 < sizeof line) line[ll++] = ch;
        if (ch == '\n') {
            line[ll] = '\0';
            fprintf(stderr, "  [child %d] %s", (int)c->pid, line);
            if (c->len + ll + 1 < sizeof c->buf) {
                memcpy(c->buf + c->len, line, ll + 1);
                c->len += ll;
            }
            ll = 0;
        }
    }
}

static int occurrences(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* Reads until `needle` occurs `count` times (0) or the time is up (-1). */
static int child_wait_count(child *c, const char *needle, int count, unsigned timeout_ms) {
    uint64_t end = wall_ms() + timeout_ms;
    while (occurrences(c->buf, needle) < count) {
        uint64_t now = wall_ms();
        if (now >= end) return -1;
        /* one more line (or the time left) */
        size_t before = c->len;
        if (child_wait_for(c, "\x01never\x01", (unsigned)(end - now < 50 ? end - now : 50)) != 0 && c->len == before &&
            wall_ms() >= end)
            return -1;
    }
    return 0;
}

static void child_kill9(child *c) {
    kill(c->pid, SIGKILL);
    waitpid(c->pid, NULL, 0);
    fclose(c->out);
    c->pid = 0;
}

/* Waits for the child's exit (reading its output); its exit status, or -1. */
static int child_finish(child *c, unsigned timeout_ms) {
    child_wait_for(c, "\x01never\x01", timeout_ms);
    int st = 0;
    uint64_t end = wall_ms() + 2000;
    while (waitpid(c->pid, &st, WNOHANG) == 0) {
        if (wall_ms() > end) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &st, 0);
            fclose(c->out);
            return -1;
        }
        sleep_ms(10);
    }
    fclose(c->out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ----- the child's side: a driver with the journal ----- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int have_reservation;
    int settled;
    int journal_reported;
    int hb_failures;
    int stopped;
    char reservation[256];
} watch;

static watch g_watch = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0, {0}};

static void print_event(const lb_event *ev, const lb_event_info *i) {
    char json[1 << 14];
    size_t need = 0;
    json[0] = '\0';
    if (i->kind == LB_EVENT_KIND_DECISION) {
        const lb_decision *d = NULL;
        if (lb_event_decision(ev, &d) == LB_STATUS_OK && d) lb_decision_json(d, json, sizeof json, &need);
    } else if (lb_event_json(ev, json, sizeof json, &need) != LB_STATUS_OK) {
        snprintf(json, sizeof json, "(too long: %zu)", need);
    }
    printf("EV %s lease=%llu %s\n", lb_event_kind_str(i->kind), (unsigned long long)i->lease_id, json);
    fflush(stdout);
}

static void on_event(void *ud, const lb_event *ev) {
    (void)ud;
    lb_event_info i;
    if (lb_event_get(ev, &i) != LB_STATUS_OK) return;
    pthread_mutex_lock(&g_watch.mu);
    print_event(ev, &i);
    if (i.has_reservation_id && !g_watch.have_reservation && i.kind == LB_EVENT_KIND_DECISION &&
        i.http_status == 200) {
        size_t need = 0;
        if (lb_event_reservation_id(ev, g_watch.reservation, sizeof g_watch.reservation, &need) == LB_STATUS_OK)
            g_watch.have_reservation = 1;
    }
    if (i.kind == LB_EVENT_KIND_SETTLED) g_watch.settled++;
    if (i.kind == LB_EVENT_KIND_JOURNAL) g_watch.journal_reported++;
    if (i.kind == LB_EVENT_KIND_HEARTBEAT_FAILURE) g_watch.hb_failures++;
    if (i.kind == LB_EVENT_KIND_STOPPED) g_watch.stopped++;
    pthread_cond_broadcast(&g_watch.cv);
    pthread_mutex_unlock(&g_watch.mu);
}

/* Waits until *field >= want (under the watch lock), at most timeout_ms. */
static int watch_until(int *field, int want, unsigned timeout_ms) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&g_watch.mu);
    int rc = 0;
    while (*field < want && rc == 0) rc = pthread_cond_timedwait(&g_watch.cv, &g_watch.mu, &until);
    int ok = *field >= want;
    pthread_mutex_unlock(&g_watch.mu);
    return ok ? 0 : -1;
}

static void print_result(lb_settle_result *r) {
    char json[1 << 15];
    size_t need = 0;
    if (lb_settle_result_json(r, json, sizeof json, &need) == LB_STATUS_OK) printf("RESULT %s\n", json);
    fflush(stdout);
}

/* --child MODE URL KEY TENANT|- JOURNAL_BASE ATTEMPTS [extra]
 *  MODE lease-commit:   create a lease (subject/action in the create), commit USAGE,
 *                       print the result, then (extra "hang") wait to be killed, else exit
 *  MODE lease-nothing:  create a lease, commit with no actual (ST-10), print, exit
 *  MODE lease-warn:     create a short lease under HP-1 warn with a cancel flag that
 *                       must stay unset; wait for a heartbeat failure and a later
 *                       success, then commit; print; exit
 *  MODE replay:         (extra: a barrier file to wait for) a driver that replays on
 *                       start; flush (10 s); print "FLUSH settled=.. pending=.."; exit,
 *                       or (extra "hang") wait to be killed after the replay began */
static int child_main(int argc, char **argv) {
    if (argc < 6) return 64;
    const char *mode = argv[0], *url = argv[1], *key = argv[2], *tenant = argv[3], *base = argv[4];
    unsigned attempts = (unsigned)atoi(argv[5]);
    const char *extra = argc > 6 ? argv[6] : "";
    if (strcmp(mode, "replay") == 0 && extra[0] && strcmp(extra, "hang") != 0) {
        /* the barrier: both workers are released at once */
        struct stat st;
        while (stat(extra, &st) != 0) sleep_ms(1);
    }
    lb_driver_config *dc = NULL;
    if (lb_driver_config_new(url, key, &dc) != LB_STATUS_OK) return 3;
    lb_driver_config_set_max_workers(dc, 4);
    lb_driver_config_set_journal_dir(dc, base);
    if (strcmp(tenant, "-") != 0) lb_driver_config_set_journal_tenant(dc, tenant);
    lb_driver_config_set_settle_retry(dc, attempts, 500, 2000);
    lb_driver_config_set_settle_timeout_ms(dc, 3000);
    lb_driver_config_set_shutdown_flush_ms(dc, 300);
    lb_driver_config_set_replay_on_start(dc, strcmp(mode, "replay") == 0);
    lb_driver *d = NULL;
    lb_status st = lb_driver_new_with(dc, on_event, NULL, &d);
    lb_driver_config_free(dc);
    if (st != LB_STATUS_OK) {
        char e[512];
        size_t need = 0;
        lb_last_error(e, sizeof e, &need);
        printf("ERROR driver: %s\n", e);
        return 4;
    }
    int rc = 0;
    if (strcmp(mode, "replay") == 0) {
        watch_until(&g_watch.journal_reported, 1, 10000);
        printf("REPLAY-STARTED\n");
        fflush(stdout);
        if (strcmp(extra, "hang") == 0) {
            for (;;) sleep_ms(1000);
        }
        lb_flush_report fr;
        if (lb_driver_flush(d, 10000, &fr) == LB_STATUS_OK)
            printf("FLUSH settled=%d pending=%zu\n", fr.settled ? 1 : 0, fr.pending);
        fflush(stdout);
        lb_driver_free(d);
        printf("EXIT\n");
        return 0;
    }
    lb_config *cfg = NULL;
    lb_config_new(&cfg);
    int warn = strcmp(mode, "lease-warn") == 0;
    lb_config_set_ttl_ms(cfg, warn ? 3000 : 60000);
    lb_config_set_request_timeout_ms(cfg, warn ? 1000 : 2000);
    lb_config_set_create_request(cfg, CREATE);
    lb_cancel_flag *flag = NULL;
    lb_lease_options *opts = NULL;
    lb_lease_options_new(&opts);
    if (warn) {
        lb_cancel_flag_new(&flag);
        lb_lease_options_set_policy(opts, LB_FAILURE_POLICY_WARN);
    }
    lb_lease_id lease = 0;
    st = lb_driver_start_with(d, cfg, opts, &lease);
    lb_lease_options_free(opts);
    lb_config_free(cfg);
    if (st != LB_STATUS_OK || watch_until(&g_watch.have_reservation, 1, 10000) != 0) {
        printf("ERROR no reservation\n");
        lb_driver_free(d);
        lb_cancel_flag_free(flag);
        return 5;
    }
    printf("RESERVATION %s\n", g_watch.reservation);
    fflush(stdout);
    if (warn) {
        /* the guarded action goes on while the heartbeat fails (warn) */
        int got = watch_until(&g_watch.hb_failures, 1, 15000) == 0;
        sleep_ms(1500); /* the retry with the same key, and a later beat */
        pthread_mutex_lock(&g_watch.mu);
        int stopped = g_watch.stopped;
        pthread_mutex_unlock(&g_watch.mu);
        bool cancelled = true;
        lb_cancel_flag_is_cancelled(flag, &cancelled);
        printf("WARN hb_failure=%d stopped=%d cancelled=%d work=continues\n", got, stopped, cancelled ? 1 : 0);
        fflush(stdout);
    }
    lb_settling *s = NULL;
    const char *usage = strcmp(mode, "lease-nothing") == 0 ? NULL : USAGE;
    st = lb_driver_commit_lease(d, lease, usage, &s);
    if (st != LB_STATUS_OK) {
        char e[512];
        size_t need = 0;
        lb_last_error(e, sizeof e, &need);
        printf("ERROR commit: %s\n", e);
        rc = 6;
    } else {
        lb_settle_result *r = NULL;
        if (lb_settling_wait(s, 20000, &r) == LB_STATUS_OK) {
            print_result(r);
            lb_settle_result_free(r);
        } else {
            printf("ERROR no result\n");
            rc = 7;
        }
        lb_settling_free(s);
    }
    if (strcmp(extra, "hang") == 0) {
        printf("HANG\n");
        fflush(stdout);
        for (;;) sleep_ms(1000);
    }
    lb_driver_cancel(d, lease);
    lb_driver_free(d);
    lb_cancel_flag_free(flag);
    printf("EXIT\n");
    fflush(stdout);
    return rc;
}

/* ----- test helpers ----- */

typedef struct {
    char tmp[1024];
    char base[1100]; /* journal base dir */
    server srv;
} ctx;

static int ctx_open(ctx *c, const char *const *faults) {
    memset(c, 0, sizeof *c);
    snprintf(c->tmp, sizeof c->tmp, "/tmp/lbrec-XXXXXX");
    if (!mkdtemp(c->tmp)) return -1;
    snprintf(c->base, sizeof c->base, "%s/journal", c->tmp);
    if (serve_start(&c->srv, c->tmp, faults) != 0) {
        fail("cannot start leasebeat serve (%s)", g_leasebeat);
        return -1;
    }
    return 0;
}

static void ctx_close(ctx *c) {
    serve_stop(&c->srv);
    if (!getenv("RECOVERY_KEEP")) nftw(c->tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int run_child(ctx *c, child *ch, const char *mode, const char *key, const char *tenant, const char *attempts,
                     const char *extra) {
    const char *args[] = {mode, c->srv.url, key, tenant, c->base, attempts, extra, NULL};
    return child_start(ch, args);
}

/* The key of the commit settlement in a RESULT line of the child (malloc'd). */
static char *result_field(const child *ch, const char *field) {
    const char *r = strstr(ch->buf, "RESULT ");
    if (!r) return xstrdup("");
    const char *end = strchr(r, '\n');
    char *line = strndup(r + 7, end ? (size_t)(end - r - 7) : strlen(r + 7));
    cJSON *j = cJSON_Parse(line);
    free(line);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
    char *out = NULL;
    if (cJSON_IsString(v))
        out = xstrdup(v->valuestring);
    else if (v)
        out = cJSON_PrintUnformatted(v);
    cJSON_Delete(j);
    return out ? out : xstrdup("");
}

/* The key stored in the journal's first record (malloc'd, "" if none). */
static char *record_key(const char *base, char *mode_out, size_t mode_len, uint64_t *not_before) {
    char *t = first_record(base);
    cJSON *j = t ? cJSON_Parse(t) : NULL;
    free(t);
    char *key = xstrdup("");
    if (j) {
        const char *mode = jstr(j, "mode");
        if (mode_out) snprintf(mode_out, mode_len, "%s", mode ? mode : "");
        const cJSON *body = cJSON_GetObjectItemCaseSensitive(
            j, mode && strcmp(mode, "event") == 0 ? "event_fallback_body" : "commit_body");
        const char *k = jstr(body, "idempotency_key");
        if (k) {
            free(key);
            key = xstrdup(k);
        }
        const cJSON *nb = cJSON_GetObjectItemCaseSensitive(j, "not_before_ms");
        if (not_before) *not_before = cJSON_IsNumber(nb) ? (uint64_t)nb->valuedouble : 0;
    }
    cJSON_Delete(j);
    return key;
}

/* Puts a record in the journal through a restart: a first process creates a
 * lease and commits; its only commit attempt fails (a 503 from the fault
 * `commit:1=503`, retry budget 1: `exhausted`, the record kept), then it is
 * killed with SIGKILL. Returns the settlement's key (malloc'd) or NULL. */
static char *journal_contains_commit(ctx *c, const char *key, const char *tenant) {
    child a;
    if (run_child(c, &a, "lease-commit", key, tenant, "1", "hang") != 0) return NULL;
    int ok = child_wait_for(&a, "HANG", 20000) == 0;
    char *k = result_field(&a, "key");
    char *outcome = result_field(&a, "outcome");
    child_kill9(&a);
    CHECK(ok && strcmp(outcome, "exhausted") == 0, "journal_contains_commit",
          "the first process did not end exhausted with its record kept (%s)", outcome);
    CHECK(count_files(c->base, "v2-", ".json") == 1, "journal_contains_commit", "no record after the first process");
    free(outcome);
    return k;
}

/* ----- the tests ----- */

/* CR-CORE-001: lost commit response reuses the same key. */
static void test_lost_commit_response_same_key(void) {
    const char *faults[] = {"commit:1=drop", NULL};
    ctx c;
    if (ctx_open(&c, faults) != 0) return;
    child ch;
    run_child(&c, &ch, "lease-commit", "key-core-1", "-", "5", "");
    int rc = child_finish(&ch, 30000);
    char *outcome = result_field(&ch, "outcome"), *key = result_field(&ch, "key");
    CHECK(rc == 0 && strcmp(outcome, "committed") == 0, "settlement_occurs_at_most_once", "outcome %s (exit %d)",
          outcome, rc);
    reqs r;
    log_read(&c.srv, "commit", &r);
    CHECK(r.n == 2, "expected_requests", "commit, commit_same_key: %d commits", r.n);
    CHECK(r.n >= 1 && strcmp(jstr(r.items[0], "outcome"), "dropped") == 0, "commit_response_lost",
          "the first commit's response was not dropped");
    CHECK(all_same_key(&r, key), "retry_uses_original_idempotency_key", "header/body keys differ from %s", key);
    log_free(&r);
    CHECK(applied_count(&c.srv) == 1, "settlement_occurs_at_most_once", "applied %d times", applied_count(&c.srv));
    CHECK(count_files(c.base, "v2-", ".json") == 0, "successful_settlement_removes_record", "record left");
    free(outcome);
    free(key);
    ctx_close(&c);
}

/* CR-CORE-002: expired commit falls back to an event. */
static void test_expired_commit_event_fallback(void) {
    const char *faults[] = {"commit:1=410:RESERVATION_EXPIRED", NULL};
    ctx c;
    if (ctx_open(&c, faults) != 0) return;
    child ch;
    run_child(&c, &ch, "lease-commit", "key-core-2", "-", "5", "");
    int rc = child_finish(&ch, 30000);
    char *outcome = result_field(&ch, "outcome"), *key = result_field(&ch, "key");
    CHECK(rc == 0 && strcmp(outcome, "applied") == 0, "settlement_occurs_at_most_once", "outcome %s", outcome);
    reqs commits, events;
    log_read(&c.srv, "commit", &commits);
    log_read(&c.srv, "events", &events);
    CHECK(commits.n == 1 && events.n == 1, "expected_requests", "commit then event_same_key: %d commits %d events",
          commits.n, events.n);
    double ci = commits.n ? jnum(commits.items[0], "seq") : -1, ei = events.n ? jnum(events.items[0], "seq") : -1;
    CHECK(ci >= 0 && ei > ci, "expected_requests", "the event did not follow the commit");
    CHECK(all_same_key(&commits, key) && all_same_key(&events, key), "event_same_key", "keys differ from %s", key);
    if (events.n) {
        cJSON *b = cJSON_Parse(jstr(events.items[0], "body"));
        cJSON *want_subject = cJSON_Parse(SUBJECT), *want_action = cJSON_Parse(ACTION), *usage = cJSON_Parse(USAGE);
        CHECK(cJSON_Compare(cJSON_GetObjectItemCaseSensitive(b, "subject"), want_subject, 1),
              "event_carries_original_subject_action_actual", "subject differs");
        CHECK(cJSON_Compare(cJSON_GetObjectItemCaseSensitive(b, "action"), want_action, 1),
              "event_carries_original_subject_action_actual", "action differs");
        CHECK(cJSON_Compare(cJSON_GetObjectItemCaseSensitive(b, "actual"),
                            cJSON_GetObjectItemCaseSensitive(usage, "actual"), 1),
              "event_carries_original_subject_action_actual", "actual differs");
        CHECK(cJSON_Compare(cJSON_GetObjectItemCaseSensitive(b, "metrics"),
                            cJSON_GetObjectItemCaseSensitive(usage, "metrics"), 1),
              "event_carries_original_subject_action_actual", "metrics differ");
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(b, "metadata");
        const char *run = jstr(md, "run");
        CHECK(run && strcmp(run, "cdrv-42") == 0, "event_carries_original_subject_action_actual",
              "metadata.run missing");
        CHECK(japplied(events.items[0]), "settlement_occurs_at_most_once", "the event did not apply");
        cJSON_Delete(b);
        cJSON_Delete(want_subject);
        cJSON_Delete(want_action);
        cJSON_Delete(usage);
    }
    CHECK(applied_count(&c.srv) == 1, "settlement_occurs_at_most_once", "applied %d times", applied_count(&c.srv));
    log_free(&commits);
    log_free(&events);
    free(outcome);
    free(key);
    ctx_close(&c);
}

/* CR-CORE-003: heartbeat transport failure is observable and non-fatal. */
static void test_heartbeat_failure_warn(void) {
    const char *faults[] = {"extend:1=drop-before", NULL};
    ctx c;
    if (ctx_open(&c, faults) != 0) return;
    child ch;
    run_child(&c, &ch, "lease-warn", "key-core-3", "-", "5", "");
    int rc = child_finish(&ch, 40000);
    char *outcome = result_field(&ch, "outcome");
    const char *hb = strstr(ch.buf, "EV heartbeat_failure");
    CHECK(hb != NULL, "heartbeat_failure_reports_reservation_and_disposition", "no heartbeat failure event");
    if (hb) {
        const char *eol = strchr(hb, '\n');
        char *line = strndup(hb, eol ? (size_t)(eol - hb) : strlen(hb));
        CHECK(strstr(line, "\"reservation_id\":\"rsv-") != NULL, "heartbeat_failure_reports_reservation_and_disposition",
              "no reservation id: %s", line);
        CHECK(strstr(line, "\"disposition\":\"retry_same_key\"") != NULL,
              "heartbeat_failure_reports_reservation_and_disposition", "no disposition: %s", line);
        free(line);
    }
    CHECK(strstr(ch.buf, "WARN hb_failure=1 stopped=0 cancelled=0 work=continues") != NULL,
          "guarded_action_continues_under_warn_policy", "the lease stopped or the work was cancelled");
    CHECK(rc == 0 && strcmp(outcome, "committed") == 0, "final_settlement_is_attempted", "outcome %s", outcome);
    reqs ext, all;
    log_read(&c.srv, "extend", &ext);
    log_read(&c.srv, NULL, &all);
    CHECK(ext.n >= 2, "expected_requests", "extend, extend_same_key: %d extends", ext.n);
    if (ext.n >= 2) {
        CHECK(strcmp(jstr(ext.items[0], "outcome"), "dropped") == 0, "extend_transport_error", "first extend answered");
        CHECK(strcmp(jstr(ext.items[0], "header_key"), jstr(ext.items[1], "header_key")) == 0, "extend_same_key",
              "the retry used another key");
    }
    const char *last_settle = NULL;
    for (int i = 0; i < all.n; i++) {
        const char *ep = jstr(all.items[i], "endpoint");
        if (strcmp(ep, "commit") == 0) last_settle = ep;
    }
    CHECK(last_settle != NULL, "final_settlement_is_attempted", "no commit");
    CHECK(applied_count(&c.srv) == 1, "settlement_occurs_at_most_once", "applied %d", applied_count(&c.srv));
    log_free(&ext);
    log_free(&all);
    free(outcome);
    ctx_close(&c);
}

/* CR-CORE-004: protocol-invalid settlement success remains ambiguous. */
static void test_nonconformant_2xx_ambiguous(void) {
    const char *faults[] = {"commit:1=malformed", NULL};
    ctx c;
    if (ctx_open(&c, faults) != 0) return;
    child ch;
    run_child(&c, &ch, "lease-commit", "key-core-4", "-", "5", "");
    int rc = child_finish(&ch, 30000);
    char *outcome = result_field(&ch, "outcome"), *key = result_field(&ch, "key");
    CHECK(rc == 0 && strcmp(outcome, "committed") == 0, "only_schema_valid_expected_status_is_terminal_success",
          "outcome %s", outcome);
    CHECK(strstr(ch.buf, "\"class\":\"ambiguous\"") != NULL, "only_schema_valid_expected_status_is_terminal_success",
          "the malformed 2xx was not classed ambiguous");
    reqs r;
    log_read(&c.srv, "commit", &r);
    CHECK(r.n == 2, "expected_requests", "commit, commit_same_key: %d", r.n);
    CHECK(all_same_key(&r, key), "ambiguous_success_retains_original_idempotency_key", "keys differ");
    CHECK(r.n == 2 && jnum(r.items[0], "status") >= 200 && jnum(r.items[0], "status") < 300 &&
              jnum(r.items[1], "status") == 200,
          "only_schema_valid_expected_status_is_terminal_success", "statuses");
    log_free(&r);
    CHECK(applied_count(&c.srv) == 1, "settlement_occurs_at_most_once", "applied %d", applied_count(&c.srv));
    free(outcome);
    free(key);
    ctx_close(&c);
}

/* CR-DURABLE-001: first commit is journaled before it leaves the process. */
static void test_first_commit_journaled_restart(void) {
    const char *faults[] = {"commit:1=hold=30000", NULL};
    ctx c;
    if (ctx_open(&c, faults) != 0) return;
    child a;
    run_child(&c, &a, "lease-commit", "key-dur-1", "-", "5", "hang");
    /* the attempt marked sent: the settlement event of the first commit in flight */
    int sent = child_wait_for(&a, "\"next\":\"wait\"", 20000) == 0;
    /* journal_write_precedes_first_settlement_request: the decisions' order */
    const char *persist = strstr(a.buf, "\"next\":\"persist\"");
    const char *commit = strstr(a.buf, "\"next\":\"commit\"");
    CHECK(sent && persist && commit && persist < commit, "journal_write_precedes_first_settlement_request",
          "persist did not come first");
    const char *persisted = strstr(a.buf, "\"class\":\"persisted\"");
    CHECK(persisted && persisted < strstr(a.buf, "\"next\":\"wait\""), "journal_write_precedes_first_settlement_request",
          "the send was not after the acknowledged write");
    sleep_ms(300); /* the request reaches the server, which holds it */
    CHECK(count_files(c.base, "v2-", ".json") == 1, "journal_write_precedes_first_settlement_request",
          "no record while the commit is in flight");
    child_kill9(&a); /* process_terminated_while_first_commit_is_in_flight */
    char *key = record_key(c.base, NULL, 0, NULL);
    CHECK(key[0] != '\0', "unresolved_record_survives_restart", "no record after SIGKILL");
    child b;
    run_child(&c, &b, "replay", "key-dur-1", "-", "5", "");
    int rc = child_finish(&b, 30000);
    CHECK(rc == 0 && strstr(b.buf, "\"outcome\":\"committed\"") && strstr(b.buf, "\"replayed\":true"),
          "successful_replay_removes_record", "the replay did not commit");
    CHECK(strstr(b.buf, "FLUSH settled=1 pending=0") != NULL, "successful_replay_removes_record", "flush");
    CHECK(count_files(c.base, "v2-", ".json") == 0, "successful_replay_removes_record", "record left");
    reqs r;
    log_read(&c.srv, "commit", &r);
    /* the held first commit may be logged later (or never): the replay's is there */
    CHECK(r.n >= 1, "expected_requests", "commit_same_key_after_restart missing");
    CHECK(all_same_key(&r, key), "commit_same_key_after_restart", "keys differ from %s", key);
    log_free(&r);
    CHECK(applied_count(&c.srv) <= 1 && applied_count(&c.srv) == 1, "settlement_occurs_at_most_once", "applied %d",
          applied_count(&c.srv));
    free(key);
    ctx_close(&c);
}

/* CR-DURABLE-002: replayed expired commit switches durably to event mode. */
static void test_replay_expired_switches_to_event(void) {
    const char *faults[] = {"commit:1=503", "commit:2=410:RESERVATION_EXPIRED", "events:1=hold=30000", NULL};
    ctx c;
    if (ctx_open(&c, faults) != 0) return;
    char *key = journal_contains_commit(&c, "key-dur-2", "-");
    if (!key) key = xstrdup("?");
    /* process_restarted, commit_reservation_expired */
    child b;
    run_child(&c, &b, "replay", "key-dur-2", "-", "5", "hang");
    int sent = child_wait_for(&b, "\"endpoint\":\"event\"", 20000) == 0;
    sleep_ms(300);
    char mode[32] = "";
    char *k2 = record_key(c.base, mode, sizeof mode, NULL);
    CHECK(sent && strcmp(mode, "event") == 0, "event_mode_is_persisted_before_event_attempt",
          "the record is in mode '%s' while the event is in flight", mode);
    const char *ev_persist = strstr(b.buf, "\"mode\":\"event\"");
    CHECK(ev_persist && strstr(ev_persist, "\"next\":\"persist\"") && strstr(b.buf, "\"class\":\"persisted\""),
          "event_mode_is_persisted_before_event_attempt", "no persist of the event mode");
    child_kill9(&b); /* process_terminated_after_mode_switch */
    child c3;
    run_child(&c, &c3, "replay", "key-dur-2", "-", "5", "");
    int rc = child_finish(&c3, 30000);
    CHECK(rc == 0 && strstr(c3.buf, "\"outcome\":\"applied\""), "successful_event_removes_record", "no event success");
    CHECK(count_files(c.base, "v2-", ".json") == 0, "successful_event_removes_record", "record left");
    reqs commits, events;
    log_read(&c.srv, "commit", &commits);
    log_read(&c.srv, "events", &events);
    CHECK(commits.n == 2 && events.n >= 1, "expected_requests",
          "commit_same_key_after_restart, event_same_key_after_restart: %d commits, %d events", commits.n, events.n);
    CHECK(all_same_key(&commits, key) && all_same_key(&events, key) && strcmp(k2, key) == 0,
          "event_same_key_after_restart", "keys differ from %s", key);
    CHECK(applied_count(&c.srv) == 1, "settlement_occurs_at_most_once", "applied %d", applied_count(&c.srv));
    log_free(&commits);
    log_free(&events);
    free(k2);
    free(key);
    ctx_close(&c);
}

/* CR-DURABLE-003: rate-limit floor survives restart. */
static void test_rate_limit_floor_restart(void) {
    const char *faults[] = {"commit:1=429,retry-after=2", NULL};
    ctx c;
    if (ctx_open(&c, faults) != 0) return;
    child a;
    run_child(&c, &a, "lease-commit", "key-dur-3", "-", "5", "hang");
    /* process_terminated_after_journal_write: the floor's write acknowledged */
    int ok = child_wait_for(&a, "\"class\":\"throttled\"", 20000) == 0 &&
             child_wait_count(&a, "\"class\":\"persisted\"", 2, 20000) == 0;
    const char *floor_written = strstr(a.buf, "\"class\":\"throttled\"");
    ok = ok && floor_written && strstr(floor_written, "\"class\":\"persisted\"");
    child_kill9(&a);
    uint64_t nb = 0;
    char *key = record_key(c.base, NULL, 0, &nb);
    CHECK(ok && nb > 0, "no_retry_before_persisted_not_before", "no persisted not_before_ms");
    /* process_restarted_before_retry_after */
    uint64_t restart = wall_ms();
    CHECK(restart < nb, "process_restarted_before_retry_after", "restarted after the floor (%llu >= %llu)",
          (unsigned long long)restart, (unsigned long long)nb);
    child b;
    run_child(&c, &b, "replay", "key-dur-3", "-", "5", "");
    int rc = child_finish(&b, 30000);
    CHECK(rc == 0 && strstr(b.buf, "\"outcome\":\"committed\""), "successful_replay_removes_record", "no commit");
    CHECK(count_files(c.base, "v2-", ".json") == 0, "successful_replay_removes_record", "record left");
    reqs r;
    log_read(&c.srv, "commit", &r);
    CHECK(r.n == 2, "expected_requests", "commit, commit_same_key_after_retry_after: %d", r.n);
    CHECK(all_same_key(&r, key), "commit_same_key_after_retry_after", "keys differ");
    if (r.n == 2) {
        /* serve's clock is mapped onto the wall clock at its start (--epoch-ms, lag at
           most lag_ms behind): arrived + lag >= floor proves no early request */
        uint64_t arrived = (uint64_t)jnum(r.items[1], "arrived_ms");
        CHECK(arrived + c.srv.lag_ms >= nb, "no_retry_before_persisted_not_before",
              "the retry arrived at %llu (+%llu lag), before the floor %llu", (unsigned long long)arrived,
              (unsigned long long)c.srv.lag_ms, (unsigned long long)nb);
    }
    log_free(&r);
    CHECK(applied_count(&c.srv) == 1, "settlement_occurs_at_most_once", "applied %d", applied_count(&c.srv));
    free(key);
    ctx_close(&c);
}

/* CR-DURABLE-004: tenant journal survives API-key rotation. */
static void test_tenant_key_rotation(void) {
    const char *faults[] = {"commit:1=503", NULL};
    ctx c;
    if (ctx_open(&c, faults) != 0) return;
    const char *old_key = "old-api-key-5b1e9", *new_key = "new-api-key-77c02";
    char *key = journal_contains_commit(&c, old_key, "acme-tenant");
    if (!key) key = xstrdup("?");
    CHECK(!any_file_contains(c.base, old_key), "old_api_key_is_not_stored", "the old API key is in a journal file");
    child b; /* api_key_rotated, process_restarted */
    run_child(&c, &b, "replay", new_key, "acme-tenant", "5", "");
    int rc = child_finish(&b, 30000);
    CHECK(rc == 0 && strstr(b.buf, "\"outcome\":\"committed\""), "new_tenant_credential_finds_record",
          "the new key's driver did not settle the record");
    CHECK(count_files(c.base, "v2-", ".json") == 0, "new_tenant_credential_finds_record", "record left");
    reqs r;
    log_read(&c.srv, "commit", &r);
    CHECK(r.n == 2 && all_same_key(&r, key), "commit_same_key_after_restart", "%d commits, keys", r.n);
    log_free(&r);
    CHECK(!any_file_contains(c.base, old_key) && !any_file_contains(c.base, new_key), "old_api_key_is_not_stored",
          "an API key is in the journal");
    CHECK(applied_count(&c.srv) == 1, "settlement_occurs_at_most_once", "applied %d", applied_count(&c.srv));
    free(key);
    ctx_close(&c);
}

/* CR-DURABLE-005: corrupt or unsupported journal record is quarantined. */
static void test_corrupt_record_quarantined(void) {
    const char *faults[] = {"commit:1=503", NULL};
    ctx c;
    if (ctx_open(&c, faults) != 0) return;
    char *key = journal_contains_commit(&c, "key-dur-5", "-");
    free(key);
    char dir[2048], p[4096];
    CHECK(partition_dir(c.base, dir, sizeof dir) == 0, "journal_contains_corrupt_or_unsupported_record", "no partition");
    snprintf(p, sizeof p, "%s/v2-%064d.json", dir, 1);
    write_file(p, "{\"version\":1,\"reservation_id\":\"rsv-x\",\"mode\":\"comm"); /* truncated */
    snprintf(p, sizeof p, "%s/v2-%064d.json", dir, 2);
    char rec[1024];
    snprintf(rec, sizeof rec,
             "{\"version\":2,\"reservation_id\":\"rsv-y\",\"base_url\":\"%s\",\"mode\":\"commit\",\"commit_body\":"
             "{\"idempotency_key\":\"k\",\"actual\":{\"unit\":\"TOKENS\",\"amount\":1}},\"recorded_at_ms\":1}",
             c.srv.url);
    write_file(p, rec); /* unsupported version */
    child b; /* process_restarted */
    run_child(&c, &b, "replay", "key-dur-5", "-", "5", "");
    int rc = child_finish(&b, 30000);
    const char *report = strstr(b.buf, "EV journal");
    CHECK(report && strstr(report, "\"quarantined\":[{") && strstr(report, "0001.json") &&
              strstr(report, "0002.json"),
          "corruption_is_reported", "the journal report does not list both");
    CHECK(count_files(c.base, "v2-", ".corrupt") == 2, "corrupt_record_is_quarantined", "%d quarantined files",
          count_files(c.base, "v2-", ".corrupt"));
    snprintf(p, sizeof p, "%s/v2-%064d.corrupt", dir, 2);
    struct stat st;
    CHECK(stat(p, &st) == 0, "unsupported_record_version_is_quarantined", "version 2 not quarantined");
    CHECK(rc == 0 && strstr(b.buf, "\"outcome\":\"committed\""), "other_valid_records_still_replay",
          "the valid record did not replay");
    CHECK(count_files(c.base, "v2-", ".json") == 0, "other_valid_records_still_replay", "records left");
    reqs r;
    log_read(&c.srv, NULL, &r);
    int other = 0;
    for (int i = 0; i < r.n; i++) {
        const char *rid = jstr(r.items[i], "reservation_id");
        if (rid && (strcmp(rid, "rsv-x") == 0 || strcmp(rid, "rsv-y") == 0)) other++;
    }
    CHECK(other == 0, "expected_requests", "a quarantined record was sent");
    log_free(&r);
    ctx_close(&c);
}

/* CR-DURABLE-006: concurrent replay remains exactly once. */
static void test_concurrent_replay_once(void) {
    const char *faults[] = {"commit:1=503", "commit:2-=delay=300", NULL};
    ctx c;
    if (ctx_open(&c, faults) != 0) return;
    char *key = journal_contains_commit(&c, "key-dur-6", "-");
    if (!key) key = xstrdup("?");
    char barrier[2048];
    snprintf(barrier, sizeof barrier, "%s/go", c.tmp);
    child w1, w2; /* two_independent_workers_replay_same_record */
    run_child(&c, &w1, "replay", "key-dur-6", "-", "5", barrier);
    run_child(&c, &w2, "replay", "key-dur-6", "-", "5", barrier);
    sleep_ms(200);
    write_file(barrier, "go");
    int rc1 = child_finish(&w1, 30000), rc2 = child_finish(&w2, 30000);
    CHECK(rc1 == 0 && rc2 == 0, "two_independent_workers_replay_same_record", "exits %d %d", rc1, rc2);
    int committed = (strstr(w1.buf, "\"outcome\":\"committed\"") != NULL) + (strstr(w2.buf, "\"outcome\":\"committed\"") != NULL);
    int busy = (strstr(w1.buf, "\"busy\":[\"") != NULL) + (strstr(w2.buf, "\"busy\":[\"") != NULL);
    CHECK(committed >= 1, "settlement_occurs_at_most_once", "nobody committed");
    fprintf(stderr, "  concurrent replay: %d worker(s) settled, %d found the record busy\n", committed, busy);
    reqs r;
    log_read(&c.srv, "commit", &r);
    CHECK(r.n >= 2 && all_same_key(&r, key), "concurrent_commit_same_key", "%d commits, keys", r.n);
    log_free(&r);
    CHECK(applied_count(&c.srv) == 1, "settlement_occurs_at_most_once", "applied %d", applied_count(&c.srv));
    CHECK(count_files(c.base, "v2-", ".json") == 0 && count_files(c.base, "v2-", ".lock") == 0,
          "terminal_record_is_removed", "record or claim left");
    free(key);
    ctx_close(&c);
}

/* CR-DURABLE-007: journal filenames preserve distinct arbitrary reservation ids. */
static void test_filenames_distinct_ids(void) {
    ctx c;
    if (ctx_open(&c, NULL) != 0) return;
    /* journal_contains_records_with_colliding_legacy_identifiers: "a/b" and "a_b"
       written through the C journal API (both have the legacy name a_b.json), each
       with a 429 floor an hour ahead (so the replay sends nothing: expected_requests
       is empty); and a legacy file a_b.json (an older SDK's) holding "a:b". */
    lb_journal *j = NULL;
    CHECK(lb_journal_open(c.base, c.srv.url, "key-dur-7", NULL, &j) == LB_STATUS_OK, "setup", "journal open");
    lb_settlement_config *cfg = NULL;
    lb_settlement_config_new(&cfg);
    lb_settlement_config_set_base_url(cfg, c.srv.url);
    const char *ids[] = {"a/b", "a_b"};
    uint64_t w = wall_ms();
    for (int i = 0; i < 2; i++) {
        lb_settlement *s = NULL;
        lb_settlement_new_commit(cfg, ids[i], strlen(ids[i]), USAGE, 0, w, &s);
        lb_journal_persist(j, s, 1, NULL);
        lb_settlement_action a;
        lb_settlement_poll_action(s, &a);
        lb_settlement_handle_sent(s, a.attempt_id, 2);
        lb_header h = {(const uint8_t *)"Retry-After", 11, (const uint8_t *)"3600", 4};
        const char *body = "{\"error\":\"LIMIT_EXCEEDED\",\"message\":\"m\",\"request_id\":\"q\"}";
        lb_settlement_handle_response(s, a.attempt_id, 429, &h, 1, (const uint8_t *)body, strlen(body), 3, w);
        lb_journal_persist(j, s, 4, NULL);
        lb_settlement_free(s);
    }
    char dir[2048];
    lb_journal_free(j); /* releases the claims */
    lb_settlement_config_free(cfg);
    partition_dir(c.base, dir, sizeof dir);
    char legacy[4096], rec[2048];
    snprintf(legacy, sizeof legacy, "%s/a_b.json", dir);
    snprintf(rec, sizeof rec,
             "{\"version\":1,\"reservation_id\":\"a:b\",\"base_url\":\"%s\",\"mode\":\"commit\",\"commit_body\":{"
             "\"idempotency_key\":\"legacy-key-1\",\"actual\":{\"unit\":\"TOKENS\",\"amount\":7}},"
             "\"event_fallback_body\":null,\"recorded_at_ms\":1,\"not_before_ms\":%llu}",
             c.srv.url, (unsigned long long)(w + 3600000));
    write_file(legacy, rec);
    child b; /* legacy_record_encountered: the driver's replay on start */
    run_child(&c, &b, "replay", "key-dur-7", "-", "5", "");
    child_wait_for(&b, "REPLAY-STARTED", 20000);
    child_kill9(&b); /* the records wait for their floor: stop here */
    const char *report = strstr(b.buf, "EV journal");
    CHECK(report && strstr(report, "\"migrated\":1"), "matching_legacy_record_migrates_without_deleting_collision",
          "the legacy record was not migrated");
    const char *all_ids[] = {"a/b", "a_b", "a:b"};
    for (int i = 0; i < 3; i++) {
        char hex[65], p[4096];
        CHECK(sha256_hex(c.tmp, all_ids[i], strlen(all_ids[i]), hex) == 0, "setup", "sha256sum");
        snprintf(p, sizeof p, "%s/v2-%s.json", dir, hex);
        char *t = read_file(p, NULL);
        char want[64];
        snprintf(want, sizeof want, "\"reservation_id\":\"%s\"", all_ids[i]);
        CHECK(t && strstr(t, want), "standard_filename_is_sha256_of_exact_utf8_identifier",
              "v2-sha256(%s).json missing or holds another id", all_ids[i]);
        free(t);
    }
    CHECK(count_files(c.base, "v2-", ".json") == 3, "distinct_identifiers_never_share_a_journal_file", "%d records",
          count_files(c.base, "v2-", ".json"));
    struct stat st;
    CHECK(stat(legacy, &st) != 0, "matching_legacy_record_migrates_without_deleting_collision",
          "the legacy file is still there");
    reqs r;
    log_read(&c.srv, NULL, &r);
    CHECK(r.n == 0, "expected_requests", "%d requests, want none", r.n);
    log_free(&r);
    ctx_close(&c);
}

/* CR-BOUNDARY-001: missing actual is surfaced without settlement. */
static void test_missing_actual_surfaced(void) {
    ctx c;
    if (ctx_open(&c, NULL) != 0) return;
    child ch; /* guarded_action_does_not_return_actual */
    run_child(&c, &ch, "lease-nothing", "key-bnd-1", "-", "5", "");
    int rc = child_finish(&ch, 30000);
    char *outcome = result_field(&ch, "outcome");
    CHECK(rc == 0 && strcmp(outcome, "no_actual") == 0, "missing_actual_or_guarded_action_failure_is_surfaced",
          "outcome %s", outcome);
    CHECK(strstr(ch.buf, "EV settled") && strstr(ch.buf, "\"outcome\":\"no_actual\""),
          "missing_actual_or_guarded_action_failure_is_surfaced", "no settled event with no_actual");
    reqs commits, events;
    log_read(&c.srv, "commit", &commits);
    log_read(&c.srv, "events", &events);
    CHECK(commits.n == 0 && events.n == 0, "no_commit_or_event_without_known_actual", "%d commits, %d events",
          commits.n, events.n);
    CHECK(count_files(c.base, "v2-", ".json") == 0, "no_commit_or_event_without_known_actual", "a record was written");
    log_free(&commits);
    log_free(&events);
    free(outcome);
    ctx_close(&c);
}

typedef struct {
    const char *name;
    void (*fn)(void);
} test;

static const test TESTS[] = {
    {"lost_commit_response_same_key", test_lost_commit_response_same_key},
    {"expired_commit_event_fallback", test_expired_commit_event_fallback},
    {"heartbeat_failure_warn", test_heartbeat_failure_warn},
    {"nonconformant_2xx_ambiguous", test_nonconformant_2xx_ambiguous},
    {"first_commit_journaled_restart", test_first_commit_journaled_restart},
    {"replay_expired_switches_to_event", test_replay_expired_switches_to_event},
    {"rate_limit_floor_restart", test_rate_limit_floor_restart},
    {"tenant_key_rotation", test_tenant_key_rotation},
    {"corrupt_record_quarantined", test_corrupt_record_quarantined},
    {"concurrent_replay_once", test_concurrent_replay_once},
    {"filenames_distinct_ids", test_filenames_distinct_ids},
    {"missing_actual_surfaced", test_missing_actual_surfaced},
};

int main(int argc, char **argv) {
    g_self = argv[0];
    if (argc >= 2 && strcmp(argv[1], "--child") == 0) return child_main(argc - 2, argv + 2);
    signal(SIGPIPE, SIG_IGN);
    g_leasebeat = getenv("LEASEBEAT_BIN");
    if (!g_leasebeat) g_leasebeat = "target/release/leasebeat";
    size_t n = sizeof TESTS / sizeof TESTS[0];
    if (argc >= 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < n; i++) printf("%s\n", TESTS[i].name);
        return 0;
    }
    int passed = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        int selected = argc < 2;
        for (int a = 1; a < argc; a++) selected |= strcmp(argv[a], TESTS[i].name) == 0;
        if (!selected) continue;
        g_failed = 0;
        uint64_t t0 = wall_ms();
        TESTS[i].fn();
        fprintf(stderr, "%s %s (%llu ms)\n", g_failed ? "FAILED" : "passed", TESTS[i].name,
                (unsigned long long)(wall_ms() - t0));
        printf("%s %s\n", g_failed ? "not ok" : "ok", TESTS[i].name);
        if (g_failed)
            failed++;
        else
            passed++;
    }
    for (int a = 1; a < argc; a++) {
        int known = 0;
        for (size_t i = 0; i < n; i++) known |= strcmp(argv[a], TESTS[i].name) == 0;
        if (!known) {
            fprintf(stderr, "unknown test: %s\n", argv[a]);
            failed++;
        }
    }
    printf("recovery_c: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
