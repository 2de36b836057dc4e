#include "telemetry.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>

#include "runtime_library.h"

namespace pb {

namespace {

// The few NVML entry points used, by their C ABI (nvml.h; the values below
// are NVML's): loaded from the driver's library at run time.
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1, kNvmlClockMem = 2, kNvmlTemperatureGpu = 0;

struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*by_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*clock)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*power_mw)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*temperature)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*reasons)(NvmlDevice, unsigned long long*) = nullptr;
  std::string error;  // empty when every entry point loaded and nvmlInit succeeded
};

// Loaded and initialized once per process.
const Nvml& nvml() {
  static const Nvml n = [] {
    Nvml x;
    std::string tried;
    void* lib = open_first({"libnvidia-ml.so.1"}, RTLD_NOW | RTLD_LOCAL, tried);
    if (!lib) {
      x.error = "libnvidia-ml.so.1 not found (no NVIDIA driver's NVML on this machine)";
      return x;
    }
    std::string& e = x.error;
    resolve(lib, "nvmlInit_v2", x.init, e, "NVML");
    resolve(lib, "nvmlDeviceGetHandleByPciBusId_v2", x.by_bus_id, e, "NVML");
    resolve(lib, "nvmlDeviceGetClockInfo", x.clock, e, "NVML");
    resolve(lib, "nvmlDeviceGetPowerUsage", x.power_mw, e, "NVML");
    resolve(lib, "nvmlDeviceGetTemperature", x.temperature, e, "NVML");
    resolve(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", x.reasons, e, "NVML");
    if (e.empty() && x.init() != kNvmlSuccess) e = "nvmlInit failed";
    return x;
  }();
  return n;
}

}  // namespace

GpuTelemetry::GpuTelemetry(int device, int period_ms) : epoch_(std::chrono::steady_clock::now()) {
  const Nvml& n = nvml();
  if (!n.error.empty()) {
    why_not_ = n.error;
    return;
  }
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device) != cudaSuccess) {
    why_not_ = "cudaDeviceGetPCIBusId failed for device " + std::to_string(device);
    return;
  }
  NvmlDevice handle = nullptr;
  if (n.by_bus_id(bus_id, &handle) != kNvmlSuccess) {
    why_not_ = std::string("NVML has no device at bus id ") + bus_id;
    return;
  }
  device_ = handle;
  available_ = true;
  thread_ = std::thread([this, period_ms] { sample_loop(period_ms); });
}

GpuTelemetry::~GpuTelemetry() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

double GpuTelemetry::now_ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - epoch_).count();
}

void GpuTelemetry::sample_loop(int period_ms) {
  const Nvml& n = nvml();
  auto next = std::chrono::steady_clock::now();
  while (!stop_) {
    TelemetrySample s;
    unsigned sm = 0, mem = 0, mw = 0, temp = 0;
    unsigned long long reasons = 0;
    s.t_ms = now_ms();
    n.clock(device_, kNvmlClockSm, &sm);
    n.clock(device_, kNvmlClockMem, &mem);
    n.power_mw(device_, &mw);
    n.temperature(device_, kNvmlTemperatureGpu, &temp);
    n.reasons(device_, &reasons);
    s.sm_mhz = sm;
    s.mem_mhz = mem;
    s.power_w = mw / 1000.0;
    s.temp_c = temp;
    s.reasons = reasons;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      samples_.push_back(s);
    }
    next += std::chrono::milliseconds(period_ms);
    std::this_thread::sleep_until(next);
  }
}

std::vector<TelemetrySample> GpuTelemetry::between(double t0_ms, double t1_ms) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TelemetrySample> out;
  for (const TelemetrySample& s : samples_)
    if (s.t_ms >= t0_ms && s.t_ms <= t1_ms) out.push_back(s);
  return out;
}

std::vector<TelemetrySample> GpuTelemetry::all() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return samples_;
}

void summarize_clocks(const std::vector<TelemetrySample>& samples, RankRep& into) {
  if (samples.empty()) {
    into.sm_mhz = into.power_w = into.power_capped = kNoValue;
    return;
  }
  std::vector<double> sm;
  double power = 0, capped = 0;
  for (const TelemetrySample& s : samples) {
    sm.push_back(s.sm_mhz);
    power = std::max(power, s.power_w);
    if (s.reasons & kClockEventSwPowerCap) capped += 1;
  }
  std::sort(sm.begin(), sm.end());
  into.sm_mhz = sm[sm.size() / 2];
  into.power_w = power;
  into.power_capped = capped / double(samples.size());
}

}  // namespace pb
