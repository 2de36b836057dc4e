// `prefill-bench run`: the measured superstep (harness/superstep/superstep.h) on
// every rank of the gang, each variant of the scenario interleaved rep by
// rep on the same inputs. Every launch is a span (CUDA events, or CUPTI's
// records under timing: cupti) named as in `plan`, whose launch list it must
// equal; TTFT is the host time on the last rank from a gang barrier to the
// first token read back. Before the superstep, rank 0 measures its GPU's
// ceilings: copy, GEMM burst and GEMM sustained. Writes HDF5 and prints a
// per-rank, per-family summary of the last rep with TTFT min / median / max
// per variant. The file is rewritten after every rep, marked
// incomplete until the last: a run cut short (a failed rank, a wait that timed
// out, Ctrl-C) leaves a valid file with the reps it finished.
#include <cuda_runtime.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <sstream>
#include <cstdio>
#include <memory>

#include "check.h"
#include "commands.h"
#include "fabric.h"
#include "efficiency.h"
#include "headline.h"
#include "gang_device.h"
#include "plan.h"
#include "plan_match.h"
#include "profile.h"
#include "projection.h"
#include "rep_loop.h"
#include "rep_record.h"
#include "run_info.h"
#include "stats.h"
#include "superstep.h"
#include "telemetry.h"
#include "turns.h"
#include "timing.h"
#include "wall_split.h"

namespace pb {

namespace {

constexpr double kRunWaitTimeoutS = 300.0;
constexpr int kSampleRows = 4, kSampleCols = 64;  // outputs/hidden_samples per rank

std::string floats_as_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::vector<float> bytes_as_floats(const std::string& b) {
  std::vector<float> v(b.size() / sizeof(float));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(float));
  return v;
}

double peak_device_bytes() {
  size_t free_b = 0, total_b = 0;
  PB_CUDA(cudaMemGetInfo(&free_b, &total_b));
  return double(total_b - free_b);
}

// Rank 0's GPU ceilings: the copy rate, the GEMM burst and, unless the
// scenario's ceiling_sustained_s is 0, the GEMM rate held over that window
// with the window's SM clock and power.
void measure_ceilings(const Scenario& s, cudaStream_t stream, const GpuTelemetry& telemetry, RunResult& result) {
  constexpr int kGemmN = 8192;
  result.numbers["copy_tbps"] = measure_copy_tbps(stream);
  result.numbers["gemm_tflops"] = measure_gemm_tflops(stream, kGemmN);
  result.text["gemm_tflops_source"] = "burst: cuBLAS bf16 GEMM 8192^3, f32 out, median of 20 after 3 warm-ups";
  if (s.ceiling_sustained_s <= 0) {
    result.text["gemm_tflops_sustained_source"] = "not measured: ceiling_sustained_s is 0";
    return;
  }
  const SustainedGemm g = measure_gemm_sustained(stream, s.ceiling_sustained_s, kGemmN);
  const double end_ms = telemetry.now_ms();
  result.numbers["gemm_tflops_sustained"] = g.tflops;
  result.numbers["gemm_sustained_window_s"] = g.window_s;
  result.numbers["gemm_sustained_settled_s"] = g.settled_s;
  result.text["gemm_tflops_sustained_source"] = describe_sustained(g, kGemmN);
  RankRep clocks;  // the settled part's samples, on the host clock that ended with the window
  summarize_clocks(telemetry.between(end_ms - g.settled_s * 1e3, end_ms), clocks);
  std::string clock_note = "no telemetry";
  if (!std::isnan(clocks.sm_mhz)) {
    result.numbers["gemm_sustained_sm_mhz"] = clocks.sm_mhz;
    result.numbers["gemm_sustained_power_w"] = clocks.power_w;
    result.numbers["gemm_sustained_power_capped"] = clocks.power_capped;
    clock_note = fmt::format("SM clock median {:.0f} MHz, power up to {:.0f} W", clocks.sm_mhz, clocks.power_w);
  }
  std::printf("GEMM ceiling: burst %.1f TFLOP/s, sustained %.1f TFLOP/s (%s; %s)\n", result.numbers["gemm_tflops"],
              g.tflops, result.text["gemm_tflops_sustained_source"].c_str(), clock_note.c_str());
}

}  // namespace

int cmd_run(const Gang& gang, const ScenarioArgs& args) {
  const GangScenario loaded = load_gang_scenario(gang, args, "run");  // before CUDA starts
  const Scenario& s = loaded.scenario;
  const FabricPlan& fabric = loaded.fabric;
  const std::string path = output_path(args.output, s.name, "run");
  if (gang.is_root()) check_results_path(path, args.overwrite);  // before the device and the long part
  const int device = select_gang_device(
      gang, "run",
      ", so the superstep cannot run here.\n  `prefill-bench plan " + args.path +
          "` computes the superstep's analytic plan (launches, bytes, FLOPs,\n  roofline per rank) without a GPU.");
  if (device < 0) return 3;
  check_span_timing(s);
  const int me = gang.rank(), cp = s.cp;

  RunResult result;
  result.kind = "run";
  record_run_info(gang, args.command_line, result);
  record_scenario(s, result);
  record_devices(gang, device, result);
  record_fabric(fabric, result);
  cudaStream_t stream;
  PB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  GpuTelemetry telemetry(device);
  if (me == 0) measure_ceilings(s, stream, telemetry, result);
  gang.barrier();

  GangMemory memory = superstep_memory(gang, device, s);
  if (gang.is_root()) std::printf("memory: %s\n", memory.describe().c_str());
  const Blas blas;
  std::unique_ptr<Fabric> fab;
  if (cp > 1)
    fab = std::make_unique<Fabric>(gang, model_slab_layout(s.model, cp, s.bucket, s.layout),
                                   s.wait_timeout_or(kRunWaitTimeoutS),
                                   fabric);
  Superstep step(s, me, fab.get(), blas, stream, memory.memory());
  record_memory(gang, memory, result);  // after the blocks took their buffers: each rank's own bytes
  memory.after_weights_filled(stream);
  for (const auto& [what, engine] : step.engines()) result.text["engine_" + what] = engine;
  double peak_bytes = peak_device_bytes();  // and again after every rep: modules load and stacks grow at launch
  Timeline tl(stream, true);
  tl.set_nvtx(s.nvtx);
  const std::unique_ptr<KernelActivity> activity = start_span_timing(s, tl, result);
  const Turn turn = make_turn(gang, s.serialize_ranks, fab.get(), stream, s.turn_settle_ms,
                              s.debug.poison_arena ? &memory.memory() : nullptr);

  if (!s.debug.delay_family.empty()) tl.set_delay(s.debug.delay_family, s.debug.delay_us);

  // The rep loop (rep_loop.h) rewrites the file after every variant of every
  // measured rep; a variant's outputs and projections follow its last rep.
  std::vector<RankPlan> plans;  // this rank's launch list per variant, the spans' names and costs
  for (const VariantSpec& spec : s.variants) plans.push_back(plan_rank(s, spec.cuts, me));
  for (const VariantSpec& spec : s.variants) {
    VariantResult v;
    v.name = spec.name;
    v.cuts = spec.cuts.describe();
    v.complete = false;
    result.variants.push_back(std::move(v));
  }
  const TtftForm headline = ttft_form_of_run(s.serialize_ranks, cp);
  result.text["ttft_headline"] = ttft_form_name(headline);
  const char* wall_label = headline == TtftForm::projected ? "serialized wall" : "TTFT";
  const GpuProfile profile = gpu_profile(s.gpu_profile);
  std::map<std::string, std::string> cold_starts;  // headline.h
  // The outputs of the variant's last rep to rank 0, its tables, its projected gang and whether it ran cold.
  const auto finish_variant = [&](size_t vi) {
    std::string sums;
    for (uint64_t c : step.layer_checksums()) sums += std::to_string(c) + " ";
    const std::vector<std::string> sum_parts = gang.gather(sums);
    const std::vector<std::string> token_parts = gang.gather(std::to_string(step.first_token()));
    const std::vector<std::string> sample_parts = gang.gather(floats_as_bytes(step.hidden_samples(kSampleRows, kSampleCols)));
    const std::vector<std::string> logit_parts = gang.gather(floats_as_bytes(step.last_logits()));
    record_unplanned_memory(gang, result);  // after the rep: stacks grown, cuDNN plans built
    if (!gang.is_root()) return;
    VariantResult& v = result.variants[vi];
    v.outputs.ranks = cp;
    v.outputs.layers = int32_t(s.model.layers);
    for (const auto& part : sum_parts) {
      std::istringstream in(part);
      uint64_t c;
      while (in >> c) v.outputs.checksums.push_back(c);
    }
    v.outputs.first_token = std::stoll(token_parts.at(size_t(last_token_rank(s.layout, cp))));
    v.outputs.sample_rows = kSampleRows;
    v.outputs.sample_cols = kSampleCols;
    for (const auto& part : sample_parts) {
      const std::vector<float> f = bytes_as_floats(part);
      v.outputs.hidden_samples.insert(v.outputs.hidden_samples.end(), f.begin(), f.end());
    }
    v.outputs.last_logits = bytes_as_floats(logit_parts.at(size_t(last_token_rank(s.layout, cp))));
    std::vector<Span> last;
    for (const Span& sp : v.spans)
      if (sp.rep == s.reps - 1) last.push_back(sp);
    std::vector<double> pairs;
    const Schedule sched = attention_schedule(s.variants[vi].cuts, s.layout, s.cp);
    for (int r = 0; r < cp; ++r) pairs.push_back(rank_attention(sched, cp, r).load_pairs);
    const Summary t = summarize(v.ttft_ms);
    PlanTableNotes timed;
    timed.timing = s.timing;
    std::printf("\n%s\n", format_plan_table(last, cp, pairs, profile,
                                            "run " + s.name + ", variant " + v.name + " (" + v.cuts +
                                                "), last rep, measured ms",
                                            timed)
                              .c_str());
    if (fabric.any_nccl()) std::printf("%s", format_fabric_by_transport(v.rank_reps, s.reps - 1, cp).c_str());
    std::printf("variant %s: %s min %.1f / median %.1f / max %.1f ms over %zu reps, first token %lld, "
                "device memory in use %.1f GB (rank 0's GPU)\n",
                v.name.c_str(), wall_label, t.min, t.median, t.max, v.ttft_ms.size(),
                (long long)v.outputs.first_token, peak_bytes / 1e9);
    std::printf("%s", format_wall_split(v, headline == TtftForm::projected).c_str());
    // Each rank's spans were timed alone (serialized, or one rank): replay the gang as if each had its GPU.
    if ((s.serialize_ranks || cp == 1) && can_project(v)) {
      try {
        for (const char* link : {kMeasuredLink, "nvlink4"}) v.projections.push_back(project_variant(v, link));
        std::printf("%s", format_projections(v.name, v.projections).c_str());
      } catch (const Error& e) {
        std::printf("variant %s: no projected gang: %s\n", v.name.c_str(), e.what());
      }
    }
    if (headline == TtftForm::projected) {
      const Summary g = summarize(headline_ttft(result, v).ms);
      std::printf("variant %s: TTFT (the projected gang's, link measured) min %.1f / median %.1f / max %.1f ms\n",
                  v.name.c_str(), g.min, g.median, g.max);
    }
    const Efficiency efficiency = efficiency_of(result, v);
    record_efficiency(efficiency, v.name, result);
    std::printf("variant %s: %s\n", v.name.c_str(), describe_efficiency(efficiency).c_str());
    const std::string cold = cold_start_reason(vi == 0, s.warmup, headline_ttft(result, v).ms);
    if (!cold.empty()) {
      cold_starts[v.name] = cold;
      result.text["cold_start"] = format_cold_starts(cold_starts);
      std::printf("variant %s may hold a cold start: it %s\n", v.name.c_str(), cold.c_str());
    }
  };
  const auto measure = [&](int rep, size_t vi) {
    const CutSet& cuts = s.variants[vi].cuts;
    const bool last_rep = rep == s.reps - 1;
    const FabricStats before = fab ? fab->stats() : FabricStats{};
    tl.set_nvtx_label("rank " + std::to_string(me) + " " + s.variants[vi].name + " rep " + std::to_string(rep));
    gang.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    const double gpu_t0 = telemetry.now_ms();
    const bool short_warmup = rep < 0 && s.warmup_layers > 0 && s.warmup_layers < s.model.layers;
    step.run(cuts, tl, turn, last_rep, short_warmup ? s.warmup_layers : -1);
    if (fab) fab->drain();
    std::vector<TimedLaunch> launches = tl.collect();
    step.first_token();  // reads the device: the end of TTFT
    const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (fab) fab->settle_transfers();  // sends still in flight, for the NCCL time
    peak_bytes = std::max(peak_bytes, peak_device_bytes());
    const std::vector<TelemetrySample> clocks = telemetry.between(gpu_t0, telemetry.now_ms());
    const RankPlan& plan = plans[vi];
    if (short_warmup) {
      launches.clear();  // a warm-up of the first layers: nothing of it is kept, nor is it plan's list
    } else if (const std::string diff = launch_list_difference(launches, plan.launches); !diff.empty()) {
      gang.fail("run: the superstep's launches differ from plan's: " + diff);
    }
    const RankRecord record = record_launches(launches, plan.launches, rep, me, cp);
    RankRep rr;
    rr.rep = rep;
    rr.rank = me;
    rr.wall_us = wall_ms * 1e3;
    rr.peak_mem_bytes = peak_bytes;
    rr.wait_us = record.wait_us;
    summarize_clocks(clocks, rr);
    if (WallSplit split; split_wall(record.spans, rr.wall_us, split)) {
      rr.launch_gap_us = split.launch_gap_us;
      rr.host_us = split.host_us;
    }
    if (fab) add_fabric_stats(rr, before, fab->stats());
    // Every rank's spans and wall to rank 0; TTFT is the last rank's wall.
    VariantResult& v = result.variants[vi];
    const std::vector<RankRep> ranks = gather_rep(gang, rep, record, rr, v);
    if (gang.is_root()) {
      const double ttft = ranks.back().wall_us / 1e3;
      const std::string which = rep_label(rep, s.warmup, s.reps);
      const std::string note =
          short_warmup ? " (layers 0-" + std::to_string(s.warmup_layers - 1) + ")" : std::string();
      std::printf("%-18s %-12s %s %.1f ms%s\n", which.c_str(), s.variants[vi].name.c_str(), wall_label, ttft,
                  note.c_str());
      std::fflush(stdout);
      if (rep >= 0) v.ttft_ms.push_back(ttft);
    }
  };

  const RepLoop loop{gang, s.warmup, s.reps, path, args.overwrite};
  const int code = loop.run(result, measure, finish_variant,
                            [&] { record_telemetry(gang, device, telemetry, result); });
  gang.barrier();
  fab.reset();
  PB_CUDA(cudaStreamDestroy(stream));
  return code;
}

}  // namespace pb
