// A device allocation that does not fit (kernels/common/device_buffer.h,
// harness/platform/device_memory.h): an error naming the buffer, the bytes asked
// and the bytes free of the total, never a bare CUDA error code; the device
// stays usable after it. Skips (exit 77) without a device.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "check.h"
#include "device_buffer.h"
#include "device_memory.h"
#include "error_of.h"

namespace {

using pb::test::contains;
using pb::test::error_of;

// More bytes than the device has in all.
size_t more_than_the_device() {
  size_t free_bytes = 0, total_bytes = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  return 2 * total_bytes;
}

// A small allocation, a kernel-free round trip and a synchronize still work.
void check_device_usable() {
  pb::DeviceBuffer<float> small(1024, "the after-check");
  std::vector<float> host(1024, 2.5f);
  small.upload(host);
  CHECK(small.download() == host);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);
}

void check_named(const std::string& message, const std::string& buffer, size_t bytes) {
  INFO(message);
  CHECK(contains(message, "out of device memory: " + buffer + " asks " + std::to_string(bytes) + " bytes"));
  CHECK(contains(message, " free of "));
  CHECK(contains(message, "GPU "));
  CHECK_FALSE(contains(message, "cudaErrorMemoryAllocation"));
}

}  // namespace

TEST_CASE("out of memory: a DeviceBuffer names itself, the bytes asked and free") {
  const size_t bytes = more_than_the_device();
  const std::string message = error_of([&] { pb::DeviceBuffer<char> huge(bytes, "the test's huge buffer"); });
  check_named(message, "the test's huge buffer", bytes);
  check_device_usable();
}

TEST_CASE("out of memory: DeviceMemory::take names <block>.<buffer>, a weight by its name and home") {
  const size_t bytes = more_than_the_device();
  pb::DeviceMemory memory = pb::DeviceMemory::owning();
  memory.begin_block("moe");
  const std::string message =
      error_of([&] { memory.take<float>("w_up", int64_t(bytes / sizeof(float)), pb::Home::rank); });
  check_named(message, "moe.w_up", bytes);
  const std::string weight = error_of([&] {
    memory.take<float>("moe.expert_down", int64_t(bytes / sizeof(float)), pb::Home::weights);
  });
  check_named(weight, "moe.expert_down (weights)", bytes);
  check_device_usable();
}

TEST_CASE("out of memory: an unnamed DeviceBuffer still gives the numbers") {
  const size_t bytes = more_than_the_device();
  const std::string message = error_of([&] { pb::DeviceBuffer<char> huge(bytes); });
  check_named(message, "a buffer", bytes);
  check_device_usable();
}
