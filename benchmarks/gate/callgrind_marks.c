/* Callgrind client requests for the benchmarks (benchmarks/_callgrind.py loads this with ctypes).
 *
 * Python cannot issue a client request itself (it is a special instruction sequence), so the
 * benchmarks compile this file once and call these three functions around a measured region.
 * Outside valgrind each request is a no-op of a few instructions.
 */
#include <valgrind/callgrind.h>

/* Zero the counters and start instrumenting: the region's count begins here. */
void torchplug_region_begin(void) {
    CALLGRIND_START_INSTRUMENTATION;
    CALLGRIND_ZERO_STATS;
}

/* Write the counts since torchplug_region_begin to a dump named `name`, then stop instrumenting. */
void torchplug_region_end(const char *name) {
    CALLGRIND_DUMP_STATS_AT(name);
    CALLGRIND_STOP_INSTRUMENTATION;
}
