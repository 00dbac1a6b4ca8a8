/*
 * NVML's event entry points for the fake libnvidia-ml.so.1 (testsupport/nvml/fake_nvml.c),
 * which this file is compiled together with (tests/koordlet/system/devices/nvml_events.py
 * appends it): nvmlEventSetCreate, nvmlDeviceRegisterEvents, nvmlEventSetWait_v2 and
 * nvmlEventSetFree, with NVML's struct layout, return codes and blocking wait.
 *
 * Events come from the file named by $FAKE_NVML_EVENTS, one per line, fields separated by one
 * TAB:
 *
 *   xid  <device index>  <xid>      (device index -1: an event that names no device)
 *
 * Every event set reads the file from its start and delivers each line once, in order, to a
 * waiter registered for nvmlEventTypeXidCriticalError on that device (lines for other devices
 * are passed over); nvmlEventSetWait_v2 polls the file until a line is due or its timeout
 * passes (NVML_ERROR_TIMEOUT). Lines may be appended while a waiter waits. Injected errors
 * ("error <function> <code> <device>") apply as to the other entry points, e.g.
 * "error nvmlDeviceRegisterEvents 3 1" makes GPU 1 answer NOT_SUPPORTED.
 *
 * Each event set is used by one thread (a watcher) while others may query devices.
 */

#include <time.h>

#define NVML_EVENT_TYPE_XID_CRITICAL_ERROR 0x8ull
#define NVML_ERROR_TIMEOUT_ 10
#define NVML_ERROR_MEMORY_ 20

struct nvmlEventSet_st {
    unsigned long long registered[MAX_GPUS];
    long offset; /* how far into the events file this set has read */
};
typedef struct nvmlEventSet_st *nvmlEventSet_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t; /* 32 bytes */

_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t");

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    SYSTEM_CALL();
    if (set == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *set = calloc(1, sizeof **set);
    return *set == NULL ? NVML_ERROR_MEMORY_ : NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
    DEVICE_CALL(device);
    if (set == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    set->registered[index_of(device)] |= types;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    SYSTEM_CALL();
    free(set);
    return NVML_SUCCESS;
}

/* the next due event after set->offset, or 0 when none is due yet */
static int next_event(nvmlEventSet_t set, nvmlEventData_t *data) {
    const char *path = getenv("FAKE_NVML_EVENTS");
    if (path == NULL || *path == '\0') {
        return 0;
    }
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        return 0;
    }
    int found = 0;
    char line[256];
    char *f[8];
    if (fseek(file, set->offset, SEEK_SET) == 0) {
        while (!found && fgets(line, sizeof line, file) != NULL) {
            if (strchr(line, '\n') == NULL) {
                break; /* a line still being written: read it whole later */
            }
            set->offset = ftell(file);
            int n = split(line, f, 8);
            if (n < 3 || strcmp(f[0], "xid") != 0) {
                continue;
            }
            int device = atoi(f[1]);
            if (device >= (int)n_gpus) {
                continue;
            }
            if (device >= 0 && !(set->registered[device] & NVML_EVENT_TYPE_XID_CRITICAL_ERROR)) {
                continue;
            }
            memset(data, 0, sizeof *data);
            data->device = device >= 0 ? &gpus[device] : NULL;
            data->eventType = NVML_EVENT_TYPE_XID_CRITICAL_ERROR;
            data->eventData = number(f[2]);
            data->gpuInstanceId = 0xFFFFFFFFu;
            data->computeInstanceId = 0xFFFFFFFFu;
            found = 1;
        }
    }
    fclose(file);
    return found;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    SYSTEM_CALL();
    if (set == NULL || data == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    double deadline = now_ms() + timeoutms;
    for (;;) {
        if (next_event(set, data)) {
            return NVML_SUCCESS;
        }
        if (now_ms() >= deadline) {
            return NVML_ERROR_TIMEOUT_;
        }
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
}
