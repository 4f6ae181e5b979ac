/* A clock that a test can move for real processes (tests/test_clock_jumps.py).
 *
 * LD_PRELOADed, it adds a shift to the wall clock (CLOCK_REALTIME: clock_gettime,
 * gettimeofday, time) and leaves CLOCK_MONOTONIC alone, as an NTP step or an operator's
 * `date -s` does. The shift, in milliseconds, is the int64 at the start of the file named by
 * TINYQ_CLOCK_SHIFT_FILE, mapped shared: the test rewrites it and every process sees the new
 * time at once. (libfaketime fakes the monotonic clock too, or, told not to, makes Python's
 * time.sleep fail with EINVAL.)
 *
 *   gcc -shared -fPIC -O2 -o clockshift.so tests/support/clockshift.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile const int64_t *shift_ms;
static int (*real_clock_gettime)(clockid_t, struct timespec *);

static void setup(void) {
    if (!real_clock_gettime) real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    if (!shift_ms) {
        const char *path = getenv("TINYQ_CLOCK_SHIFT_FILE");
        int fd = path ? open(path, O_RDONLY) : -1;
        if (fd >= 0) {
            void *map = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
            close(fd);
            if (map != MAP_FAILED) shift_ms = map;
        }
    }
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    setup();
    int r = real_clock_gettime(id, ts);
    if (r == 0 && shift_ms && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + *shift_ms * 1000000;
        ts->tv_sec = ns / 1000000000;
        ts->tv_nsec = ns % 1000000000;
    }
    return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    int r = clock_gettime(CLOCK_REALTIME, &ts);
    if (r == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return r;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
