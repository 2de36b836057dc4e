// `prefill-bench run`: the measured superstep (harness/blocks/superstep.h) on
// every rank of the gang, each variant of the scenario interleaved rep by
// rep on the same inputs. Every launch is a span (CUDA events) named as in
// `plan`, whose launch list it must equal; TTFT is the host time on the last
// rank from a gang barrier to the first token read back. Writes HDF5 and
// prints a per-rank, per-family summary of the last rep with TTFT min /
// median / max per variant.
#include <cuda_runtime.h>  // the typed cudaMalloc overloads device_buffer.h uses

#include <chrono>
#include <cstdio>
#include <memory>

#include "check.h"
#include "commands.h"
#include "fabric.h"
#include "plan.h"
#include "plan_match.h"
#include "profile.h"
#include "run_info.h"
#include "stats.h"
#include "superstep.h"
#include "timing.h"

namespace pb {

namespace {

constexpr double kRunWaitTimeoutS = 300.0;

int visible_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

// With `serial`, rank by rank (the others wait at a barrier), each turn drained
// and synchronized; else the phase runs at once on every rank.
Turn make_turn(const Gang& gang, bool serial, IpcFabric* fab, cudaStream_t stream) {
  if (!serial) return [](const std::function<void()>& phase) { phase(); };
  return [&gang, fab, stream](const std::function<void()>& phase) {
    for (int r = 0; r < gang.size(); ++r) {
      if (r == gang.rank()) {
        phase();
        if (fab) fab->drain();
        PB_CUDA(cudaStreamSynchronize(stream));
      }
      gang.barrier();
    }
  };
}

double peak_device_bytes() {
  size_t free_b = 0, total_b = 0;
  PB_CUDA(cudaMemGetInfo(&free_b, &total_b));
  return double(total_b - free_b);
}

}  // namespace

int cmd_run(const Gang& gang, const ScenarioArgs& args) {
  const Scenario s = load_scenario_on_gang(gang, args);
  const std::string problem = world_size_problem(s, gang.size(), /*plan=*/false);
  PB_CHECK(problem.empty(), problem);
  const int devices = visible_devices();
  if (devices == 0) {
    if (gang.is_root())
      std::fprintf(stderr,
                   "prefill-bench run: no CUDA device is visible on %s, so the superstep cannot run here.\n"
                   "  `prefill-bench plan %s` computes the superstep's analytic plan (launches, bytes, FLOPs,\n"
                   "  roofline per rank) without a GPU.\n",
                   gang.host().c_str(), args.path.c_str());
    return 3;
  }
  const int device = gang.local_rank() % devices, me = gang.rank(), cp = s.cp;
  PB_CUDA(cudaSetDevice(device));
  PB_CHECK(s.fabric != "nccl", s.source + ": key 'fabric': nccl is not built yet (cross-node ranks need it); "
                                         "allowed here: ipc, auto (all ranks on one node)");
  PB_CHECK(cp == 1 || gang.local_size() == gang.size(),
           "prefill-bench run: the IPC fabric needs every rank on one node");

  RunResult result;
  result.kind = "run";
  record_run_info(gang, args.command_line, result);
  record_scenario(s, result);
  record_devices(gang, device, result);
  cudaStream_t stream;
  PB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (me == 0) {
    result.numbers["copy_tbps"] = measure_copy_tbps(stream);
    result.numbers["gemm_tflops"] = measure_gemm_tflops(stream);
  }
  gang.barrier();

  const Blas blas;
  std::unique_ptr<IpcFabric> fab;
  if (cp > 1) fab = std::make_unique<IpcFabric>(gang, model_slab_layout(s.model, cp, s.bucket), kRunWaitTimeoutS);
  Superstep step(s, me, fab.get(), blas, stream);
  const double peak_bytes = peak_device_bytes();
  Timeline tl(stream, true);
  const Turn turn = make_turn(gang, s.serialize_ranks, fab.get(), stream);

  const size_t nv = s.variants.size();
  std::vector<std::vector<Span>> spans(nv);
  std::vector<std::vector<RankRep>> reps(nv);
  std::vector<std::vector<double>> ttft(nv);
  std::vector<std::vector<uint64_t>> checksums(nv);
  std::vector<int64_t> token(nv, -1);
  for (int rep = -s.warmup; rep < s.reps; ++rep) {
    for (size_t vi = 0; vi < nv; ++vi) {
      const CutSet& cuts = s.variants[vi].cuts;
      const bool last_rep = rep == s.reps - 1;
      const FabricStats before = fab ? fab->stats() : FabricStats{};
      gang.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      step.run(cuts, tl, turn, last_rep);
      if (fab) fab->drain();
      const std::vector<TimedLaunch> launches = tl.collect();
      const int64_t first = step.first_token();  // reads the device: the end of TTFT
      const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const RankPlan plan = plan_rank(s, cuts, me);
      const std::string diff = launch_list_difference(launches, plan.launches);
      if (!diff.empty()) gang.fail("run: the superstep's launches differ from plan's: " + diff);
      if (last_rep) {
        checksums[vi] = step.layer_checksums();
        token[vi] = first;
      }
      // Per-rep line on rank 0: every rank's wall and the last rank's TTFT.
      const std::vector<std::string> walls = gang.gather(std::to_string(wall_ms));
      if (gang.is_root()) {
        const double t = std::stod(walls.back());
        std::printf("rep %d/%d %-12s TTFT %.1f ms (rank %d), first token %lld\n", rep + 1, s.reps,
                    s.variants[vi].name.c_str(), t, cp - 1, (long long)(cp == 1 ? first : -1));
        std::fflush(stdout);
        if (rep >= 0) ttft[vi].push_back(t);
      }
      if (rep < 0) continue;
      RankRep rr;
      rr.rep = rep;
      rr.rank = me;
      rr.wall_us = wall_ms * 1e3;
      rr.peak_mem_bytes = peak_bytes;
      for (size_t i = 0; i < launches.size(); ++i) {
        const TimedLaunch& l = launches[i];
        const Launch& p = plan.launches[i];
        spans[vi].push_back({rep, me, l.layer, l.family, l.kernel, l.ms * 1e3, p.cost.bytes, p.cost.flops});
        if (l.kernel.rfind("fabric.wait", 0) == 0) rr.wait_us += l.ms * 1e3;
      }
      const FabricStats after = fab ? fab->stats() : FabricStats{};
      rr.fabric_bytes = double(after.bytes_written - before.bytes_written + after.bytes_read - before.bytes_read);
      reps[vi].push_back(rr);
    }
  }

  // Gather to rank 0, print, write.
  const GpuProfile profile = gpu_profile(s.gpu_profile);
  for (size_t vi = 0; vi < nv; ++vi) {
    const std::vector<std::string> span_parts = gang.gather(pack_spans(spans[vi]));
    const std::vector<std::string> rep_parts = gang.gather(pack_rank_reps(reps[vi]));
    std::string sums;
    for (uint64_t c : checksums[vi]) sums += std::to_string(c) + " ";
    const std::vector<std::string> sum_parts = gang.gather(sums);
    const std::vector<std::string> token_parts = gang.gather(std::to_string(token[vi]));
    if (!gang.is_root()) continue;
    VariantResult v;
    v.name = s.variants[vi].name;
    v.cuts = s.variants[vi].cuts.describe();
    std::vector<Span> last;
    for (const auto& part : span_parts)
      for (Span& sp : unpack_spans(part)) {
        if (sp.rep == s.reps - 1) last.push_back(sp);
        v.spans.push_back(std::move(sp));
      }
    for (const auto& part : rep_parts)
      for (RankRep& r : unpack_rank_reps(part)) v.rank_reps.push_back(r);
    v.ttft_ms = ttft[vi];
    v.outputs.ranks = cp;
    v.outputs.layers = int32_t(s.model.layers);
    for (const auto& part : sum_parts) {
      size_t pos = 0;
      const std::string& txt = part;
      while (pos < txt.size()) {
        size_t next = txt.find(' ', pos);
        if (next == std::string::npos) break;
        v.outputs.checksums.push_back(std::stoull(txt.substr(pos, next - pos)));
        pos = next + 1;
      }
    }
    v.outputs.first_token = std::stoll(token_parts.back());
    std::vector<double> pairs;
    const Schedule sched = s.variants[vi].cuts[Cut::stripe] ? Schedule::stripe : Schedule::prefix;
    for (int r = 0; r < cp; ++r) pairs.push_back(rank_attention(sched, cp, r).load_pairs);
    const Summary t = summarize(v.ttft_ms);
    std::printf("\n%s\n", format_plan_table(last, cp, pairs, profile,
                                            "run " + s.name + ", variant " + v.name + " (" + v.cuts +
                                                "), last rep, measured ms")
                              .c_str());
    std::printf("variant %s: TTFT min %.1f / median %.1f / max %.1f ms over %zu reps, first token %lld, "
                "peak device memory %.1f GB (rank 0)\n",
                v.name.c_str(), t.min, t.median, t.max, v.ttft_ms.size(), (long long)v.outputs.first_token,
                peak_bytes / 1e9);
    result.variants.push_back(std::move(v));
  }
  if (gang.is_root()) {
    const std::string path = output_path(args.output, s.name, "run");
    write_results(path, result, args.overwrite);
    std::printf("wrote %s\n", path.c_str());
  }
  gang.barrier();
  fab.reset();
  PB_CUDA(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace pb
