// The header must compile as C++17 (scripts/test-c.sh: g++ -std=c++17 -fsyntax-only).
#include <leasebeat.h>

static_assert(LB_STATUS_OK == 0, "LB_STATUS_OK is 0");

int main() {
    lb_schedule s{};
    return lb_primary_schedule(61500, true, 1500, 10000, 1500, &s) == LB_STATUS_OK ? 0 : 1;
}
