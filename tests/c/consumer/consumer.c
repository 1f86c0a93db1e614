/* A minimal program built against an installed leasebeat (pkg-config and
 * CMake consumer test of scripts/test-c.sh). */
#include <leasebeat.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    if (strcmp(lb_version(), LEASEBEAT_VERSION) != 0) {
        fprintf(stderr, "header %s, library %s\n", LEASEBEAT_VERSION, lb_version());
        return 1;
    }
    lb_schedule s;
    if (lb_primary_schedule(61500, true, 1500, 10000, 1500, &s) != LB_STATUS_OK || s.next_delay != 37000) return 1;
    lb_config *cfg = NULL;
    lb_heartbeat *hb = NULL;
    if (lb_config_new(&cfg) != LB_STATUS_OK) return 1;
    lb_status st = lb_heartbeat_new(cfg, &hb);
    lb_config_free(cfg);
    if (st != LB_STATUS_OK) return 1;
    lb_action a;
    st = lb_heartbeat_poll_action(hb, &a);
    lb_heartbeat_free(hb);
    if (st != LB_STATUS_OK || a.kind != LB_ACTION_KIND_SEND) return 1;
    printf("consumer ok: leasebeat %s\n", lb_version());
    return 0;
}
