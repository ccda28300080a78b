// One thread that spins until `ns` nanoseconds of the global timer have passed: work for the
// GPU while the host enqueues what comes after it, so that the events around that work see
// its device time alone (algorithms/cuda/spin.py, CudaRuntime.device_ms).
#include "common.cuh"

__global__ void __launch_bounds__(32) spin(unsigned long long ns) {
    const unsigned long long start = global_timer_ns();
    while (global_timer_ns() - start < ns) {
    }
}
