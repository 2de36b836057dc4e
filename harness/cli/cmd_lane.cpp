// `prefill-bench lane`: one MLA layer's attention across the CP gang.
// Every rank runs the MLA block (harness/superstep/mla_block.h) on its segment
// over the IPC fabric, for each variant of the scenario, reps interleaved.
// With serialize_ranks the ranks of one GPU take turns phase by phase, so each
// rank's kernels run alone and its spans show its true work. Per rank it
// reports the FMHA time against the schedule's prediction (pairs x the time
// of one dense segment pair, measured first on rank 0 alone), the doorbell
// wait and the fabric bytes, and exits 1 when a rank's FMHA is off the
// prediction by more than --fmha-tolerance. Every launch becomes a span with
// plan's name and cost and its doorbells (rep_record.h), so `trace`, `compare`
// and the projection read a lane file as they read a run; the launch list is
// checked against plan's MLA layer, and the file is rewritten after every
// variant of every rep (rep_loop.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include "check.h"
#include "commands.h"
#include "fabric.h"
#include "gang_device.h"
#include "mla_block.h"
#include "plan_match.h"
#include "projection.h"
#include "random_fill.h"
#include "rep_loop.h"
#include "rep_record.h"
#include "run_info.h"
#include "stats.h"
#include "timing.h"
#include "telemetry.h"
#include "turns.h"

namespace pb {

namespace {

constexpr double kLaneWaitTimeoutS = 120.0;

int64_t first_mla_layer(const ModelShape& m) {
  for (int64_t l = 0; l < m.layers; ++l)
    if (m.is_mla(l)) return l;
  throw_error(__FILE__, __LINE__, "the scenario's model has no MLA layer");
}

// One dense FMHA pair (q and k of one segment), timed alone: the unit of the
// schedule's prediction.
double measure_pair_ms(const ModelShape& m, int64_t t, FmhaEngine engine, int settle_ms, cudaStream_t stream) {
  const int64_t heads = m.heads, dq = m.d_qk(), dv = m.v_head;
  DeviceBuffer<__nv_bfloat16> q(size_t(t * heads * dq)), k(size_t(t * heads * dq)), v(size_t(t * heads * dv)),
      o(size_t(t * heads * dv));
  DeviceBuffer<float> lse(size_t(heads * t));
  fill_uniform_bf16(q.get(), t * heads * dq, 1, 1.0f, stream);
  fill_uniform_bf16(k.get(), t * heads * dq, 2, 1.0f, stream);
  fill_uniform_bf16(v.get(), t * heads * dv, 3, 1.0f, stream);
  FmhaTensors x{q.get(), heads * dq, dq, k.get(), heads * dq, dq, v.get(), heads * dv, dv, o.get(), lse.get()};
  FmhaShape s;
  s.tq = s.tk = t;
  s.heads = int(heads);
  s.d_qk = int(dq);
  s.d_v = int(dv);
  s.scale = float(1.0 / std::sqrt(double(dq)));
  const Timing tm = time_launches([&](int, cudaStream_t st) { fmha(engine, x, s, st); }, 1, 2, 5, stream, settle_ms);
  return tm.median_us / 1e3;
}

double median_of(std::vector<double> v) { return v.empty() ? 0.0 : median(v); }

}  // namespace

int cmd_lane(const Gang& gang, const ScenarioArgs& args) {
  const GangScenario loaded = load_gang_scenario(gang, args, "lane");  // before CUDA starts
  const Scenario& s = loaded.scenario;
  const FabricPlan& fabric = loaded.fabric;
  const std::string path = output_path(args.output, s.name, "lane");
  if (gang.is_root()) check_results_path(path, args.overwrite);  // before the device and the long part
  const int device = select_gang_device(gang, "lane");
  if (device < 0) return 3;
  check_span_timing(s);
  const int me = gang.rank(), cp = s.cp;
  const ModelShape& m = s.model;
  const int64_t layer = first_mla_layer(m), rows = s.bucket;
  const std::vector<Segment> segs = lane_segments(s.layout, s.context, cp);
  const FmhaEngine engine = fmha_engine_from_name(s.fmha);
  const bool serial = s.serialize_ranks;

  RunResult result;
  result.kind = "lane";
  record_run_info(gang, args.command_line, result);
  record_scenario(s, result);
  record_devices(gang, device, result);
  GpuTelemetry telemetry(device);
  record_fabric(fabric, result);
  result.text["engine_fmha"] = fmha_engine_name(engine);

  cudaStream_t stream;
  PB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  double pair_ms = 0;
  if (me == 0) pair_ms = measure_pair_ms(m, segs[0].len, engine, serial ? s.turn_settle_ms : 0, stream);
  pair_ms = std::stod(gang.broadcast(std::to_string(pair_ms)));
  result.numbers["pair_ms"] = pair_ms;

  const Blas blas;
  const MlaWeights weights(m, s.seed, stream);
  DeviceBuffer<__nv_bfloat16> mixed(size_t(rows * m.hidden));
  fill_uniform_bf16(mixed.get(), rows * m.hidden, s.seed + 100 + uint64_t(me), 1.0f, stream);
  std::unique_ptr<Fabric> fab;
  if (cp > 1)
    fab = std::make_unique<Fabric>(
        gang,
        slab_layout(cp, rows, int(m.heads), int(m.kv_lora), int(m.qk_rope), int(m.d_qk()), int(m.v_head), s.layout),
        s.wait_timeout_or(kLaneWaitTimeoutS), fabric);
  MlaLane lane{me, cp, segs, rows, fab.get(), s.helped_in_place, s.layout};
  lane.overlap = any_variant_has(s, Cut::overlap);  // overlap's held window
  MlaBlock block(m, weights, lane, engine);
  Timeline tl(stream, true);
  tl.set_nvtx(s.nvtx);
  const std::unique_ptr<KernelActivity> activity = start_span_timing(s, tl, result);
  tl.set_layer(int32_t(layer));
  const Turn turn = make_turn(gang, serial, fab.get(), stream, s.turn_settle_ms);
  size_t free_b = 0, total_b = 0;
  PB_CUDA(cudaMemGetInfo(&free_b, &total_b));

  if (!s.debug.delay_family.empty()) tl.set_delay(s.debug.delay_family, s.debug.delay_us);

  // The rep loop (rep_loop.h) rewrites the file after every variant of every
  // measured rep; a variant's table and projected gang follow its last rep.
  std::vector<RankPlan> plans;  // this rank's launch list per variant, the spans' names and costs
  for (const VariantSpec& spec : s.variants) {
    plans.push_back(plan_rank(s, spec.cuts, me));
    VariantResult v;
    v.name = spec.name;
    v.cuts = spec.cuts.describe();
    result.variants.push_back(std::move(v));
  }
  int64_t seq = 0;
  const auto measure = [&](int rep, size_t vi) {
    const CutSet& cuts = s.variants[vi].cuts;
    const FabricStats before = fab ? fab->stats() : FabricStats{};
    tl.set_nvtx_label("rank " + std::to_string(me) + " " + s.variants[vi].name + " rep " + std::to_string(rep));
    gang.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    const double gpu_t0 = telemetry.now_ms();
    turn([&] { block.project(mixed.get(), seq, cuts, tl, blas); });
    turn([&] { block.attend(tl, blas); });
    turn([&] { block.finish(tl, blas); });
    if (fab) fab->drain();
    const std::vector<TimedLaunch> launches = tl.collect();
    const double wall_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (fab) fab->settle_transfers();  // sends still in flight, for the NCCL time
    const std::vector<TelemetrySample> clocks = telemetry.between(gpu_t0, telemetry.now_ms());
    ++seq;
    const std::vector<Launch> want = plan_slice(plans[vi], int32_t(layer), "rmsnorm.mla_in", launches.size());
    const std::string diff = launch_list_difference(launches, want);
    if (!diff.empty()) gang.fail("lane: the MLA block's launches differ from plan's: " + diff);
    const RankRecord record = record_launches(launches, want, rep, me, cp);
    double span_us = 0;
    for (const Span& sp : record.spans) span_us += sp.time_us;
    RankRep rr;
    rr.rep = rep;
    rr.rank = me;
    rr.wait_us = record.wait_us;
    if (fab) add_fabric_stats(rr, before, fab->stats());
    rr.wall_us = serial ? span_us : wall_us;       // serialized: the rank's own work
    rr.peak_mem_bytes = double(total_b - free_b);  // device-wide when ranks share a GPU
    summarize_clocks(clocks, rr);
    gather_rep(gang, rep, record, rr, result.variants[vi]);
    if (gang.is_root()) std::fprintf(stderr, "lane: %s, variant %s done\n", rep_label(rep, s.warmup, s.reps).c_str(),
                                     s.variants[vi].name.c_str());
  };

  // Rank 0, after a variant's last rep: per rank the FMHA time (median over
  // reps) against pairs x pair_ms, the wait and the fabric's bytes; the
  // projected gang of the layer.
  bool all_within = true;
  const auto finish = [&](size_t vi) {
    if (!gang.is_root()) return;
    VariantResult& v = result.variants[vi];
    const Schedule sched = attention_schedule(s.variants[vi].cuts, s.layout, s.cp);
    const std::string ranks = !serial ? "concurrent"
                              : s.turn_settle_ms > 0 ? "serialized (turns and pair after " +
                                                           std::to_string(s.turn_settle_ms) + " ms idle)"
                                                     : "serialized";
    std::printf("\nlane %s, variant %s (%s schedule), one MLA layer, %s ranks, pair = %.3f ms (%lld x %lld dense)\n",
                s.name.c_str(), v.name.c_str(), schedule_name(sched), ranks.c_str(), pair_ms,
                (long long)segs[0].len, (long long)segs[0].len);
    std::printf("%5s %7s %12s %12s %7s %10s %11s\n", "rank", "pairs", "predicted_ms", "fmha_ms", "ratio", "wait_ms",
                "fabric_MB");
    double deep = 0;
    int deep_rank = 0;
    for (int r = 0; r < cp; ++r) {
      std::map<int32_t, double> fmha_us;  // per rep
      for (const Span& sp : v.spans)
        if (sp.rank == r && sp.family == "fmha") fmha_us[sp.rep] += sp.time_us;
      std::vector<double> fmha_ms, wait_ms, fabric_mb;
      for (const auto& [rep, us] : fmha_us) fmha_ms.push_back(us / 1e3);
      for (const RankRep& rr : v.rank_reps)
        if (rr.rank == r) wait_ms.push_back(rr.wait_us / 1e3), fabric_mb.push_back(rr.fabric_bytes / 1e6);
      const double fm = median_of(fmha_ms), wm = median_of(wait_ms), mb = median_of(fabric_mb);
      const double pairs = rank_attention(sched, cp, r).load_pairs, predicted = pairs * pair_ms;
      const double ratio = fm / predicted;
      all_within &= std::fabs(ratio - 1.0) <= args.fmha_tolerance;
      if (fm > deep) deep = fm, deep_rank = r;
      std::printf("%5d %7.1f %12.3f %12.3f %7.3f %10.3f %11.1f\n", r, pairs, predicted, fm, ratio, wm, mb);
      result.numbers["fmha_ms." + v.name + ".rank" + std::to_string(r)] = fm;
    }
    std::printf("deep rank %d: FMHA %.3f ms\n", deep_rank, deep);
    if (can_project(v)) {
      try {
        v.projections.push_back(project_variant(v, kMeasuredLink));
        std::printf("%s", format_projections(v.name, v.projections).c_str());
      } catch (const Error& e) {
        std::printf("variant %s: no projected gang: %s\n", v.name.c_str(), e.what());
      }
    }
  };

  const RepLoop loop{gang, s.warmup, s.reps, path, args.overwrite, "prefill-bench lane"};
  int code = loop.run(result, measure, finish, [&] { record_telemetry(gang, device, telemetry, result); });
  if (code == 0 && gang.is_root()) {
    std::printf("every rank's FMHA time within %.0f%% of pairs x pair time: %s\n", 100 * args.fmha_tolerance,
                all_within ? "yes" : "NO (exit 1)");
    if (!all_within) code = 1;
  }
  gang.barrier();  // no peer stores into a slab being freed
  fab.reset();
  PB_CUDA(cudaStreamDestroy(stream));
  return code;
}

}  // namespace pb
