#include "cuts.h"

#include "check.h"
#include "text.h"

namespace pb {

namespace {

// The table. A row's facts are documented in docs/cuts.md's section of that
// name; its kernels' contracts in their headers (kernels/cuts/, kernels/fp8/).
constexpr std::array<CutInfo, kCutCount> kCutTable = {{
    {Cut::land, "land", "land", true, false, Cut::land, Exactness::bit_identical, 0, false, PlanEffect::bytes, "land",
     "land.*: f32 GEMM partials to bf16, 8 columns a thread"},
    {Cut::conv, "conv", "conv", true, false, Cut::conv, Exactness::bit_identical, 0, false, PlanEffect::bytes, "conv",
     "conv.*: KDA's causal conv + SiLU in row chunks with the carry in registers"},
    {Cut::stripe, "stripe", "fmha", true, false, Cut::stripe, Exactness::floor, 1e-1, false, PlanEffect::fmha_flops,
     "", "fmha.*, fabric.*: the striped triangle, off-diagonal pairs alternate owner and key holder"},
    {Cut::lse_merge, "lse_merge", "lse_merge", true, false, Cut::lse_merge, Exactness::bit_identical, 0, false,
     PlanEffect::bytes, "lse_merge", "lse_merge: 16 lanes a row, vector loads, the lse pair once a row"},
    {Cut::elementwise, "elementwise", "elementwise", true, false, Cut::elementwise, Exactness::bit_identical, 0, false,
     PlanEffect::bytes, "elementwise", "add2, mul_sigmoid, situ, o_norm_gate: 16 bytes a thread"},
    {Cut::attnres, "attnres", "attnres", false, false, Cut::attnres, Exactness::bit_identical, 0, false,
     PlanEffect::bytes, "attnres", "attn_res.*: AttnRes scores and mix over the snapshots, vectorized"},
    {Cut::balance, "balance", "fmha", false, true, Cut::stripe, Exactness::summation_order, 1e-3, false,
     PlanEffect::fmha_flops, "", "fmha.*, fabric.*: half a kept window to the key holder, every rank cp/2 pairs"},
    {Cut::overlap, "overlap", "fabric", false, false, Cut::overlap, Exactness::bit_identical, 0, false,
     PlanEffect::launch_order, "", "the mixers launch the work that waits on no peer before their waits"},
    {Cut::quant_fuse, "quant_fuse", "quant", false, false, Cut::quant_fuse, Exactness::bit_identical, 0, true,
     PlanEffect::bytes, "quant", "quant.*: the producer writes e4m3 and its scales, no bf16 round trip"},
}};

constexpr bool table_in_enum_order() {
  for (int i = 0; i < kCutCount; ++i)
    if (int(kCutTable[size_t(i)].id) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "kCutTable: one row per Cut, in the enum's order");

constexpr std::array<Cut, kCutCount> all_ids() {
  std::array<Cut, kCutCount> ids{};
  for (int i = 0; i < kCutCount; ++i) ids[size_t(i)] = kCutTable[size_t(i)].id;
  return ids;
}

}  // namespace

const std::array<Cut, kCutCount> kAllCuts = all_ids();

const std::array<CutInfo, kCutCount>& cut_table() { return kCutTable; }
const CutInfo& cut_info(Cut c) { return kCutTable[size_t(c)]; }

const char* exactness_name(Exactness e) {
  switch (e) {
    case Exactness::bit_identical: return "bit_identical";
    case Exactness::summation_order: return "summation_order";
    case Exactness::floor: return "floor";
  }
  return "?";
}

const char* cut_name(Cut c) { return cut_info(c).name; }

std::vector<CutRecord> cut_records() {
  std::vector<CutRecord> records;
  for (const CutInfo& info : kCutTable) {
    CutRecord r;
    r.name = info.name;
    r.family = info.family;
    r.prerequisite = info.has_prerequisite ? cut_name(info.prerequisite) : "";
    r.exactness = exactness_name(info.exactness);
    r.floor = info.floor;
    r.seed = info.seed ? 1 : 0;
    r.needs_fp8 = info.needs_fp8 ? 1 : 0;
    r.bench_family = info.bench_family;
    records.push_back(r);
  }
  return records;
}

bool cut_from_name(const std::string& name, Cut* out) {
  for (const CutInfo& info : kCutTable)
    if (name == info.name) {
      *out = info.id;
      return true;
    }
  return false;
}

std::string allowed_cut_names() {
  std::string s;
  for (const CutInfo& info : kCutTable) s += std::string(s.empty() ? "" : ", ") + info.name;
  return s;
}

bool cut_requires(Cut c, Cut* prerequisite) {
  const CutInfo& info = cut_info(c);
  if (info.has_prerequisite) *prerequisite = info.prerequisite;
  return info.has_prerequisite;
}

bool seed_cut(Cut c) { return cut_info(c).seed; }

bool cut_applies(Cut c, const Precision& p) {
  return !cut_info(c).needs_fp8 || p.any_scaled();
}

CutSet CutSet::all() {
  CutSet s;
  s.on.fill(true);
  return s;
}

CutSet CutSet::all(const Precision& p) {
  CutSet s;
  for (Cut c : kAllCuts) s.set(c, cut_applies(c, p));
  return s;
}

CutSet CutSet::seed() {
  CutSet s;
  for (Cut c : kAllCuts) s.set(c, seed_cut(c));
  return s;
}

CutSet CutSet::only(Cut c) {
  CutSet s;
  s.set(c, true);
  Cut needs;
  for (Cut d = c; cut_requires(d, &needs); d = needs) s.set(needs, true);
  return s;
}

CutSet CutSet::without(Cut c) const {
  CutSet s = *this;
  s.set(c, false);
  for (Cut d : kAllCuts) {
    Cut needs;
    if (cut_requires(d, &needs) && needs == c) s = s.without(d);
  }
  return s;
}

std::string CutSet::problem() const {
  for (Cut c : kAllCuts) {
    Cut needs;
    if ((*this)[c] && cut_requires(c, &needs) && !(*this)[needs])
      return std::string("cut ") + cut_name(c) + " refines cut " + cut_name(needs) + " and needs it on; turn " +
             cut_name(needs) + " on too, or " + cut_name(c) + " off";
  }
  return "";
}

std::string CutSet::precision_problem(const Precision& p) const {
  for (Cut c : kAllCuts)
    if ((*this)[c] && !cut_applies(c, p))
      return std::string("cut ") + cut_name(c) + " applies only where a part is fp8 or fp4, and this scenario's precision is " +
             p.describe() + "; set precision: fp8 (or precision.gemm / precision.experts), or leave " + cut_name(c) +
             " off";
  return "";
}

std::string CutSet::describe() const {
  std::string s;
  for (Cut c : kAllCuts) s += std::string(s.empty() ? "" : " ") + cut_name(c) + ((*this)[c] ? "=on" : "=off");
  return s;
}

std::set<std::string> cut_names_on(const std::string& described) {
  std::set<std::string> on;
  for (const std::string& item : split(described, ' ')) {
    const size_t equals = item.find('=');
    if (equals != std::string::npos && item.substr(equals + 1) == "on") on.insert(item.substr(0, equals));
  }
  return on;
}

CutSet CutSet::from_description(const std::string& described) {
  CutSet cuts;
  for (const std::string& name : cut_names_on(described)) {
    Cut cut;
    PB_CHECK(cut_from_name(name, &cut), "recorded cut '" + name + "' is unknown to this build; it knows " +
                                            allowed_cut_names());
    cuts.set(cut, true);
  }
  return cuts;
}

std::string CutSet::short_name(const Precision& p) const {
  if (*this == none()) return "none";
  if (*this == all(p)) return "all";
  std::string s;
  for (Cut c : kAllCuts)
    if ((*this)[c]) s += std::string(s.empty() ? "" : "+") + cut_name(c);
  return s;
}

}  // namespace pb
