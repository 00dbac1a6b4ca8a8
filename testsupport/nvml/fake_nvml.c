/*
 * A fake libnvidia-ml.so.1 for tests: the NVML entry points that nvidia-ml-py (pynvml) calls
 * for GPU discovery and usage, with NVML's own symbol names, struct layouts, return codes,
 * init reference counting and buffer-size protocols, answering from a text file instead of a
 * driver. testsupport/nvml/__init__.py builds it and writes the file.
 *
 * Configuration: every nvmlInit* call (re)reads the file named by $FAKE_NVML_CONFIG (unset: no
 * GPUs; unreadable: NVML_ERROR_UNKNOWN). One record per line, fields separated by one TAB,
 * unknown or short records ignored:
 *
 *   driver   <version>
 *   gpu      <name> <uuid> <minor> <mem total> <mem used> <mem free> <legacy bus id>
 *            <mig current> <mig pending> <util gpu> <util memory> <pci device id>
 *   process  <pid> <used memory>                  (a compute process of the last gpu line)
 *   sample   <pid> <timestamp us> <sm %> <mem %>  (a process utilisation sample of the last gpu)
 *   error    <function> <code> <device index>     (that function returns code; index -1 = any)
 *
 * Numbers are decimal; a used memory of 18446744073709551615 is NVML's "not available". An
 * "error nvmlInitWithFlags 9 -1" line makes init fail (here: NVML_ERROR_DRIVER_NOT_LOADED) and
 * leaves the library uninitialised.
 *
 * Threads: NVML is thread-safe, and the koordlet's GPU health watcher calls it beside the
 * discovery rounds. A (re)read builds the new state aside and publishes it at once under a
 * lock, so a reader in another thread sees the old state or the new one, never a half-read
 * file (re-reading an unchanged file writes the same bytes over themselves).
 */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef unsigned int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 32
#define MAX_ITEMS 64
#define MAX_ERRORS 32
#define TEXT 96
#define NVML_MEMORY_V2 0x02000028u

/* ---- NVML's public structs, field for field (nvml.h; natural alignment) ---------------- */

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t; /* 24 bytes */

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t; /* 40 bytes */

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t; /* 68 bytes */

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t; /* v2 = v3, 24 bytes */

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
} nvmlProcessUtilizationSample_t; /* 32 bytes */

_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t");
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t");
_Static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32, "nvmlProcessUtilizationSample_t");

/* ---- the fake's state ------------------------------------------------------------------ */

struct process {
    unsigned int pid;
    unsigned long long used;
};

struct sample {
    unsigned int pid;
    unsigned long long timestamp;
    unsigned int sm, mem;
};

/* nvmlDevice_t is an opaque pointer: here, a pointer to one of these */
struct nvmlDevice_st {
    char name[TEXT], uuid[TEXT], bus_id_legacy[16];
    unsigned int minor, mig_current, mig_pending, util_gpu, util_memory, pci_device_id;
    unsigned long long mem_total, mem_used, mem_free;
    unsigned int n_processes, n_samples;
    struct process processes[MAX_ITEMS];
    struct sample samples[MAX_ITEMS];
};
typedef struct nvmlDevice_st *nvmlDevice_t;

struct injected {
    char function[TEXT];
    nvmlReturn_t code;
    int device; /* -1: every device (and functions without one) */
};

static struct nvmlDevice_st gpus[MAX_GPUS];
static unsigned int n_gpus;
static char driver_version[TEXT] = "fake";
static struct injected errors[MAX_ERRORS];
static unsigned int n_errors;
static unsigned int refcount;
/* guards publishing a read configuration and the reference count */
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;

static void copy_text(char *dest, size_t size, const char *src) {
    snprintf(dest, size, "%s", src);
}

/* split a line in place at TABs; returns the number of fields */
static int split(char *line, char **fields, int max) {
    int n = 0;
    line[strcspn(line, "\r\n")] = '\0';
    while (n < max) {
        fields[n++] = line;
        char *tab = strchr(line, '\t');
        if (tab == NULL) {
            break;
        }
        *tab = '\0';
        line = tab + 1;
    }
    return n;
}

static unsigned long long number(const char *text) {
    return strtoull(text, NULL, 10);
}

static int load_config(void) {
    /* the new state, built aside and published at once */
    struct nvmlDevice_st *new_gpus = calloc(MAX_GPUS, sizeof *new_gpus);
    struct injected new_errors[MAX_ERRORS];
    unsigned int new_n_gpus = 0, new_n_errors = 0;
    char new_driver[TEXT];
    if (new_gpus == NULL) {
        return -1;
    }
    copy_text(new_driver, sizeof new_driver, "fake");
    const char *path = getenv("FAKE_NVML_CONFIG");
    if (path != NULL && *path != '\0') {
        FILE *file = fopen(path, "r");
        if (file == NULL) {
            free(new_gpus);
            return -1;
        }
        char line[1024];
        char *f[16];
        struct nvmlDevice_st *gpu = NULL;
        while (fgets(line, sizeof line, file) != NULL) {
            int n = split(line, f, 16);
            if (strcmp(f[0], "driver") == 0 && n >= 2) {
                copy_text(new_driver, sizeof new_driver, f[1]);
            } else if (strcmp(f[0], "gpu") == 0 && n >= 13 && new_n_gpus < MAX_GPUS) {
                gpu = &new_gpus[new_n_gpus++];
                copy_text(gpu->name, sizeof gpu->name, f[1]);
                copy_text(gpu->uuid, sizeof gpu->uuid, f[2]);
                gpu->minor = (unsigned int)number(f[3]);
                gpu->mem_total = number(f[4]);
                gpu->mem_used = number(f[5]);
                gpu->mem_free = number(f[6]);
                copy_text(gpu->bus_id_legacy, sizeof gpu->bus_id_legacy, f[7]);
                gpu->mig_current = (unsigned int)number(f[8]);
                gpu->mig_pending = (unsigned int)number(f[9]);
                gpu->util_gpu = (unsigned int)number(f[10]);
                gpu->util_memory = (unsigned int)number(f[11]);
                gpu->pci_device_id = (unsigned int)number(f[12]);
            } else if (strcmp(f[0], "process") == 0 && n >= 3 && gpu != NULL && gpu->n_processes < MAX_ITEMS) {
                struct process *p = &gpu->processes[gpu->n_processes++];
                p->pid = (unsigned int)number(f[1]);
                p->used = number(f[2]);
            } else if (strcmp(f[0], "sample") == 0 && n >= 5 && gpu != NULL && gpu->n_samples < MAX_ITEMS) {
                struct sample *smp = &gpu->samples[gpu->n_samples++];
                smp->pid = (unsigned int)number(f[1]);
                smp->timestamp = number(f[2]);
                smp->sm = (unsigned int)number(f[3]);
                smp->mem = (unsigned int)number(f[4]);
            } else if (strcmp(f[0], "error") == 0 && n >= 4 && new_n_errors < MAX_ERRORS) {
                struct injected *e = &new_errors[new_n_errors++];
                copy_text(e->function, sizeof e->function, f[1]);
                e->code = (nvmlReturn_t)number(f[2]);
                e->device = atoi(f[3]);
            }
        }
        fclose(file);
    }
    pthread_mutex_lock(&state_lock);
    memcpy(gpus, new_gpus, sizeof gpus);
    n_gpus = new_n_gpus;
    memcpy(errors, new_errors, new_n_errors * sizeof *new_errors);
    n_errors = new_n_errors;
    copy_text(driver_version, sizeof driver_version, new_driver);
    pthread_mutex_unlock(&state_lock);
    free(new_gpus);
    return 0;
}

static int index_of(nvmlDevice_t device) {
    if (device < gpus || device >= gpus + n_gpus) {
        return -2;
    }
    return (int)(device - gpus);
}

static nvmlReturn_t injected_error(const char *function, int device) {
    for (unsigned int i = 0; i < n_errors; i++) {
        if (strcmp(errors[i].function, function) == 0 && (errors[i].device == -1 || errors[i].device == device)) {
            return errors[i].code;
        }
    }
    return NVML_SUCCESS;
}

/* the common prologue: initialised, a valid handle, no injected error for this function */
#define SYSTEM_CALL()                                        \
    do {                                                     \
        if (refcount == 0)                                   \
            return NVML_ERROR_UNINITIALIZED;                 \
        nvmlReturn_t injected_ = injected_error(__func__, -1); \
        if (injected_ != NVML_SUCCESS)                       \
            return injected_;                                \
    } while (0)

#define DEVICE_CALL(device)                                       \
    do {                                                          \
        if (refcount == 0)                                        \
            return NVML_ERROR_UNINITIALIZED;                      \
        if (index_of(device) < 0)                                 \
            return NVML_ERROR_INVALID_ARGUMENT;                   \
        nvmlReturn_t injected_ = injected_error(__func__, index_of(device)); \
        if (injected_ != NVML_SUCCESS)                            \
            return injected_;                                     \
    } while (0)

static nvmlReturn_t put_text(char *dest, unsigned int length, const char *text) {
    if (dest == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (strlen(text) + 1 > length) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(dest, text, strlen(text) + 1);
    return NVML_SUCCESS;
}

/* ---- init and shutdown ----------------------------------------------------------------- */

static nvmlReturn_t init(const char *function) {
    if (load_config() != 0) {
        return NVML_ERROR_UNKNOWN;
    }
    nvmlReturn_t injected = injected_error(function, -1);
    if (injected != NVML_SUCCESS) {
        return injected;
    }
    pthread_mutex_lock(&state_lock);
    refcount++;
    pthread_mutex_unlock(&state_lock);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return init(__func__);
}

EXPORT nvmlReturn_t nvmlInit_v2(void) {
    return init(__func__);
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
    if (refcount == 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    nvmlReturn_t injected = injected_error(__func__, -1);
    if (injected != NVML_SUCCESS) {
        return injected;
    }
    pthread_mutex_lock(&state_lock);
    nvmlReturn_t result = NVML_SUCCESS;
    if (refcount == 0) {
        result = NVML_ERROR_UNINITIALIZED;
    } else {
        refcount--;
    }
    pthread_mutex_unlock(&state_lock);
    return result;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 25: return "Argument version mismatch";
    case 27: return "Not Ready";
    case 28: return "GPU not found";
    case 29: return "Invalid state";
    default: return "Unknown Error";
    }
}

/* test hook, not NVML: forget every init (a test that failed half-way leaves none behind) */
EXPORT void fakeNvmlReset(void) {
    refcount = 0;
}

/* test hook, not NVML: how many nvmlInit* calls are not yet shut down */
EXPORT unsigned int fakeNvmlRefcount(void) {
    return refcount;
}

/* ---- system and handles ---------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    SYSTEM_CALL();
    return put_text(version, length, driver_version);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    SYSTEM_CALL();
    if (count == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *count = n_gpus;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    SYSTEM_CALL();
    if (device == NULL || index >= n_gpus) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *device = &gpus[index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    SYSTEM_CALL();
    if (uuid == NULL || device == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned int i = 0; i < n_gpus; i++) {
        if (strcmp(gpus[i].uuid, uuid) == 0) {
            *device = &gpus[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* ---- per-device queries ---------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    DEVICE_CALL(device);
    return put_text(name, length, device->name);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    DEVICE_CALL(device);
    return put_text(uuid, length, device->uuid);
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor) {
    DEVICE_CALL(device);
    if (minor == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *minor = device->minor;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    DEVICE_CALL(device);
    if (memory == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    memory->total = device->mem_total;
    memory->free = device->mem_free;
    memory->used = device->mem_used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    DEVICE_CALL(device);
    if (memory == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (memory->version != NVML_MEMORY_V2) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    memory->total = device->mem_total;
    memory->reserved = 0;
    memory->free = device->mem_free;
    memory->used = device->mem_used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEVICE_CALL(device);
    if (pci == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    memset(pci, 0, sizeof *pci);
    copy_text(pci->busIdLegacy, sizeof pci->busIdLegacy, device->bus_id_legacy);
    unsigned int domain = 0, bus = 0, dev = 0;
    if (sscanf(device->bus_id_legacy, "%x:%x:%x", &domain, &bus, &dev) == 3) {
        pci->domain = domain;
        pci->bus = bus;
        pci->device = dev;
    }
    pci->pciDeviceId = device->pci_device_id;
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", domain, bus, dev);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    DEVICE_CALL(device);
    if (current == NULL || pending == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *current = device->mig_current;
    *pending = device->mig_pending;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    DEVICE_CALL(device);
    if (utilization == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    utilization->gpu = device->util_gpu;
    utilization->memory = device->util_memory;
    return NVML_SUCCESS;
}

/* NVML's list protocol: *count too small (or infos NULL) -> INSUFFICIENT_SIZE with the size
 * needed in *count; no processes -> SUCCESS with *count 0 */
static nvmlReturn_t running_processes(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_t *infos) {
    if (count == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    unsigned int n = device->n_processes;
    if (n > 0 && (infos == NULL || *count < n)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        infos[i].pid = device->processes[i].pid;
        infos[i].usedGpuMemory = device->processes[i].used;
        infos[i].gpuInstanceId = 0xFFFFFFFFu; /* not a MIG instance */
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    DEVICE_CALL(device);
    return running_processes(device, count, infos);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    DEVICE_CALL(device);
    return running_processes(device, count, infos);
}

/* samples newer than lastSeen; none -> NOT_FOUND (as the driver answers for an idle GPU);
 * samples NULL or *count too small -> INSUFFICIENT_SIZE with the number available */
EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *samples,
                                                    unsigned int *count, unsigned long long lastSeen) {
    DEVICE_CALL(device);
    if (count == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    unsigned int n = 0;
    for (unsigned int i = 0; i < device->n_samples; i++) {
        n += device->samples[i].timestamp > lastSeen;
    }
    if (n == 0) {
        *count = 0;
        return NVML_ERROR_NOT_FOUND;
    }
    if (samples == NULL || *count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned int out = 0;
    for (unsigned int i = 0; i < device->n_samples; i++) {
        const struct sample *s = &device->samples[i];
        if (s->timestamp > lastSeen) {
            samples[out].pid = s->pid;
            samples[out].timeStamp = s->timestamp;
            samples[out].smUtil = s->sm;
            samples[out].memUtil = s->mem;
            samples[out].encUtil = 0;
            samples[out].decUtil = 0;
            out++;
        }
    }
    *count = out;
    return NVML_SUCCESS;
}
