// The few CUDA driver calls the fabric makes (fabric.h), resolved at run time
// (driver_entry_point, launch.h): nothing links libcuda, so every binary
// starts on a machine without a driver.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pb {

// Throws pb::Error unless `device` supports 64-bit stream memory operations
// (the doorbells: cuStreamWriteValue64, cuStreamWaitValue64).
void require_stream_mem_ops(int device);
// Stores `value` at device address `addr` on `stream`, after its earlier work.
void stream_write_u64(cudaStream_t stream, void* addr, uint64_t value);
// `stream` waits until the u64 at `addr` >= value.
void stream_wait_u64_geq(cudaStream_t stream, const void* addr, uint64_t value);

}  // namespace pb
