/* A stand-in for libnvidia-ml with the five entry points kernels/src/energy.rs and
 * kernels/tools/torch_moe_heated.py call, so that their FFI (signatures, UUID lookup, error paths, init and
 * shutdown balance) is tested on machines without a GPU. One device, UUID STUB_UUID; its energy counter
 * starts at 5000 mJ and grows by 1000 mJ per read, so a test knows the joules to expect. Built by
 * tests/support/mod.rs (build_nvml_stub) with the system C compiler, for tests/energy_nvml.rs and tests/torch_heated.rs. */
#include <string.h>

#define STUB_UUID "GPU-12345678-9abc-def0-0123-456789abcdef"
enum { NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_FOUND = 6 };

static int device = 42, inits = 0;
static unsigned long long counter = 5000;

int nvmlInit_v2(void) { inits++; return NVML_SUCCESS; }
int nvmlShutdown(void) { if (inits == 0) return NVML_ERROR_UNINITIALIZED; inits--; return NVML_SUCCESS; }
/* for the tests: how many inits are not yet balanced by a shutdown */
int stub_open_inits(void) { return inits; }

const char *nvmlErrorString(int rc) {
    switch (rc) {
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    default: return "Invalid Argument";
    }
}

int nvmlDeviceGetHandleByUUID(const char *uuid, void **dev) {
    if (inits == 0) return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !dev) return NVML_ERROR_INVALID_ARGUMENT;
    if (strcmp(uuid, STUB_UUID) != 0) return NVML_ERROR_NOT_FOUND;
    *dev = &device;
    return NVML_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned int *n) { if (inits == 0) return NVML_ERROR_UNINITIALIZED; *n = 1; return NVML_SUCCESS; }

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **dev) {
    if (inits == 0) return NVML_ERROR_UNINITIALIZED;
    if (i != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *dev = &device;
    return NVML_SUCCESS;
}

int nvmlDeviceGetTotalEnergyConsumption(void *dev, unsigned long long *mj) {
    if (inits == 0) return NVML_ERROR_UNINITIALIZED;
    if (dev != &device || !mj) return NVML_ERROR_INVALID_ARGUMENT;
    *mj = counter;
    counter += 1000;
    return NVML_SUCCESS;
}
