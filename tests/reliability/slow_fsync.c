/* LD_PRELOAD shim for one test: a slow disk. Valkey's background AOF fsync (the thread it names
 * "bio_aof") takes SLOW_FSYNC_MS longer; every other fsync is untouched, so the server starts
 * as fast as ever. Built by tests/reliability/test_chaos.py with the C compiler cargo needs too. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

static void slow_when_background(void) {
    char name[16] = {0};
    const char *ms = getenv("SLOW_FSYNC_MS");
    prctl(PR_GET_NAME, name);
    if (ms && strncmp(name, "bio_aof", 7) == 0) usleep(atoi(ms) * 1000);
}

int fdatasync(int fd) {
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    slow_when_background();
    return real(fd);
}

int fsync(int fd) {
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    slow_when_background();
    return real(fd);
}
