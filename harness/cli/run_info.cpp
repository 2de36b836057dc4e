#include "run_info.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "check.h"
#include "fmha.h"
#include "nccl_comm.h"
#include "plan.h"

extern char** environ;

namespace pb {

const char* git_sha();
bool git_dirty();

namespace {

std::string join_unique_hosts(const std::vector<std::string>& hosts) {
  std::string out;
  for (size_t r = 0; r < hosts.size(); ++r) out += (r ? "," : "") + hosts[r];
  return out;
}

std::string version_triplet(int v, int major_div, int minor_div) {
  return std::to_string(v / major_div) + "." + std::to_string((v % major_div) / minor_div);
}

std::string nccl_environment() {
  std::string out;
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("NCCL_", 0) == 0) out += (out.empty() ? "" : " ") + std::string(*e);
  return out;
}

}  // namespace

void record_scenario(const Scenario& s, RunResult& result) {
  result.text["scenario_source"] = s.source;
  result.text["scenario_yaml"] = s.text;
  result.text["scenario_overrides"] = s.overrides;
  result.text["precision"] = s.precision.describe();
  result.numbers[kLaunchListVersionKey] = kLaunchListVersion;
  result.cuts = cut_records();
}

void record_devices(const Gang& gang, int device, RunResult& result) {
  cudaDeviceProp prop{};
  PB_CUDA(cudaGetDeviceProperties(&prop, device));
  char bus[32];
  PB_CUDA(cudaDeviceGetPCIBusId(bus, sizeof bus, device));
  std::string uuid = "GPU-";
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    unsigned char b = static_cast<unsigned char>(prop.uuid.bytes[i]);
    uuid += hex[b >> 4];
    uuid += hex[b & 15];
    if (i == 3 || i == 5 || i == 7 || i == 9) uuid += '-';
  }
  const std::string mine = "rank " + std::to_string(gang.rank()) + ": " + prop.name + " " + uuid + " bus " + bus +
                           " on " + gang.host();
  std::vector<std::string> all = gang.gather(mine);
  if (!gang.is_root()) return;
  std::string joined;
  for (const auto& line : all) joined += (joined.empty() ? "" : "\n") + line;
  result.text["gpus"] = joined;
  result.numbers["sm_count"] = prop.multiProcessorCount;
}

void record_run_info(const Gang& gang, const std::string& command_line, RunResult& result) {
  std::vector<std::string> hosts = gang.gather(gang.host());
  if (!gang.is_root()) return;
  result.text["git_sha"] = git_sha();
  result.text["git_dirty"] = git_dirty() ? "true" : "false";
  result.text["command_line"] = command_line;
  result.text["hostnames"] = join_unique_hosts(hosts);
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(mpi_version, &len);
  result.text["mpi_version"] = std::string(mpi_version, len);
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);  // 0 when no driver is installed
  result.text["cuda_runtime"] = version_triplet(runtime, 1000, 10);
  result.text["cuda_driver"] = driver ? version_triplet(driver, 1000, 10) : "none";
  result.text["cublas_version"] = std::to_string(CUBLAS_VER_MAJOR) + "." + std::to_string(CUBLAS_VER_MINOR) +
                                  "." + std::to_string(CUBLAS_VER_PATCH);
  result.text["nccl_version"] = nccl_runtime_version();  // the library loaded at run time, or why none
  result.text["cudnn_version"] = fmha_cudnn_version();   // likewise
  result.text["nccl_env"] = nccl_environment();
  result.numbers["world_size"] = gang.size();
}

void record_memory(const Gang& gang, const GangMemory& memory, RunResult& result) {
  const std::vector<std::string> own = gang.gather(std::to_string(memory.memory().needs().rank));
  if (!gang.is_root()) return;
  const GpuBudget& b = memory.budget();
  const Placement& p = memory.placement();
  result.numbers["memory_weights_bytes"] = double(b.weights);
  result.numbers["memory_arena_bytes"] = double(b.arena);
  result.numbers["memory_rank_bytes"] = double(b.ranks);
  result.numbers["memory_ranks_per_gpu"] = p.ranks_per_gpu;
  result.numbers["memory_weights_shared"] = p.shares_weights() ? 1 : 0;
  result.numbers["memory_arena_shared"] = p.shares_arena() ? 1 : 0;
  result.numbers["memory_share_granularity_bytes"] = double(memory.share_granularity());
  result.text["memory_share"] = share_mode_name(memory.share_mode());
  std::string per_rank;
  for (size_t r = 0; r < own.size(); ++r) per_rank += (r ? ", " : "") + std::to_string(r) + ": " + own[r];
  result.text["memory_rank_bytes_each"] = per_rank;
  result.text["memory"] = memory.describe();
}

void record_unplanned_memory(const Gang& gang, RunResult& result) {
  size_t stack = 0;
  PB_CUDA(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
  const FmhaPlanMemory fmha = fmha_cudnn_plan_memory();
  const std::vector<std::string> parts =
      gang.gather(std::to_string(stack) + " " + std::to_string(fmha.plans) + " " + std::to_string(fmha.bytes));
  if (!gang.is_root()) return;
  double stack_max = 0, fmha_max = 0;
  std::string each;
  for (size_t r = 0; r < parts.size(); ++r) {
    std::istringstream in(parts[r]);
    double rank_stack = 0, plans = 0, bytes = 0;
    in >> rank_stack >> plans >> bytes;
    stack_max = std::max(stack_max, rank_stack);
    fmha_max = std::max(fmha_max, bytes);
    each += (r ? ", " : "") + std::to_string(r) + ": " + std::to_string(int64_t(plans)) + " plans " +
            std::to_string(int64_t(bytes)) + " B";
  }
  result.numbers["device_stack_bytes_per_thread"] = stack_max;
  result.numbers["memory_fmha_plans_bytes"] = fmha_max;
  result.text["memory_fmha_plans_each"] = each;
}

void record_telemetry(const Gang& gang, int device, const GpuTelemetry& telemetry, RunResult& result) {
  // The first rank of each GPU (local rank == device) speaks for it.
  std::vector<TelemetrySample> mine;
  if (gang.local_rank() == device) {
    mine = telemetry.all();
    for (TelemetrySample& s : mine) s.rank = gang.rank();
  }
  const std::vector<std::string> parts = gang.gather(std::string(
      reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(TelemetrySample)));
  const std::vector<std::string> why = gang.gather(telemetry.available() ? "" : telemetry.why_not());
  if (!gang.is_root()) return;
  for (const std::string& part : parts) {
    const size_t n = part.size() / sizeof(TelemetrySample);
    const auto* first = reinterpret_cast<const TelemetrySample*>(part.data());
    result.telemetry.insert(result.telemetry.end(), first, first + n);
  }
  std::string notes;
  for (size_t r = 0; r < why.size(); ++r)
    if (!why[r].empty()) notes += (notes.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " + why[r];
  result.text["telemetry"] = notes.empty() ? "NVML, every 20 ms, the first rank of each GPU" : "none: " + notes;
}

void check_span_timing(const Scenario& s) {
  if (s.timing != "cupti") return;
  const std::string why = KernelActivity::unavailable_reason();
  PB_CHECK(why.empty(), s.source + ": " + why);
}

std::unique_ptr<KernelActivity> start_span_timing(const Scenario& s, Timeline& tl, RunResult& result) {
  result.text["timing"] = s.timing;
  if (s.timing != "cupti") return nullptr;
  auto activity = std::make_unique<KernelActivity>();
  tl.set_activity(activity.get());
  return activity;
}

std::string output_path(const std::string& requested, const std::string& name, const std::string& kind) {
  if (!requested.empty()) return requested;
  std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::gmtime(&now));
  std::filesystem::create_directories("runs");
  return "runs/" + name + "-" + kind + "-" + stamp + ".h5";
}

}  // namespace pb
