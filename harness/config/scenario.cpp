#include "scenario.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "check.h"
#include "profile.h"
#include "text.h"

namespace pb {

namespace {

const std::vector<std::string> kTopKeys = {
    "name", "model", "cp", "context", "bucket", "split_k", "fabric", "emulate_hosts", "fmha", "moe_gemm",
    "gpu_profile", "serialize_ranks", "share_memory", "turn_settle_ms", "helped_in_place", "wait_timeout_s", "nvtx",
    "timing", "ceiling_sustained_s", "layout", "precision", "cuts",
    "variants", "warmup", "warmup_layers", "reps", "seed", "output", "debug", "sweep"};
const std::vector<std::string> kSweepKeys = {"context", "segment", "cp", "precision"};
const std::vector<std::string> kDebugKeys = {"delay_family", "delay_us", "poison_arena"};
const std::vector<std::string> kVariantKeys = {"name", "cuts"};

// Where an error points: the file position of a node, or the command-line
// override that produced it.
class Locator {
 public:
  Locator(std::string source, std::map<std::string, std::string> overridden)
      : source_(std::move(source)), overridden_(std::move(overridden)) {}

  [[noreturn]] void fail(const YAML::Node& node, const std::string& path,
                         const std::string& problem) const {
    std::string where;
    auto it = overridden_.find(path);
    if (it != overridden_.end()) {
      where = "command line override '" + it->second + "' (" + source_ + ")";
    } else if (node.IsDefined() && node.Mark().line >= 0) {
      where = source_ + ":" + std::to_string(node.Mark().line + 1) + ":" +
              std::to_string(node.Mark().column + 1);
    } else {
      where = source_;
    }
    throw Error(where + ": " + (path.empty() ? "" : path + ": ") + problem);
  }

  // " (cp from command line override 'cp=3')" when a related key was overridden.
  std::string origin(const std::string& path) const {
    auto it = overridden_.find(path);
    return it == overridden_.end() ? "" : " (" + path + " from command line override '" + it->second + "')";
  }

 private:
  std::string source_;
  std::map<std::string, std::string> overridden_;
};

std::string scalar_text(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "nothing";
}

void check_keys(const Locator& at, const YAML::Node& map, const std::string& path,
                const std::vector<std::string>& allowed) {
  if (!map.IsMap()) at.fail(map, path, "expected a map, got " + scalar_text(map));
  for (const auto& kv : map) {
    const std::string key = kv.first.as<std::string>();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string full = path.empty() ? key : path + "." + key;
      at.fail(kv.first, full, "unknown key '" + key + "'; allowed keys " +
                                  (path.empty() ? "at the top level" : "under " + path) + ": " +
                                  join(allowed));
    }
  }
}

int64_t get_int(const Locator& at, const YAML::Node& node, const std::string& path, int64_t min,
                int64_t max) {
  int64_t v = 0;
  if (!node.IsScalar()) at.fail(node, path, "expected an integer, got " + scalar_text(node));
  try {
    v = node.as<int64_t>();
  } catch (const YAML::Exception&) {
    at.fail(node, path, "expected an integer, got " + scalar_text(node));
  }
  if (v < min || v > max)
    at.fail(node, path,
            "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " +
                std::to_string(v));
  return v;
}

double get_double(const Locator& at, const YAML::Node& node, const std::string& path, double min,
                  double max) {
  double v = 0;
  if (!node.IsScalar()) at.fail(node, path, "expected a number, got " + scalar_text(node));
  try {
    v = node.as<double>();
  } catch (const YAML::Exception&) {
    at.fail(node, path, "expected a number, got " + scalar_text(node));
  }
  if (!(v >= min && v <= max))
    at.fail(node, path, "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                            ", got " + node.Scalar());
  return v;
}

bool get_bool(const Locator& at, const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar()) at.fail(node, path, "expected true or false, got " + scalar_text(node));
  try {
    return node.as<bool>();
  } catch (const YAML::Exception&) {
    at.fail(node, path, "expected true or false (or on/off), got " + scalar_text(node));
  }
}

std::string get_string(const Locator& at, const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar()) at.fail(node, path, "expected a string, got " + scalar_text(node));
  return node.Scalar();
}

std::string get_choice(const Locator& at, const YAML::Node& node, const std::string& path,
                       const std::vector<std::string>& allowed) {
  std::string v = get_string(at, node, path);
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
    at.fail(node, path, "'" + v + "' is not allowed; allowed values: " + join(allowed));
  return v;
}

// One list of the sweep: its items each read by `item` (a scalar, or a one-item list's).
template <typename T, typename Read>
std::vector<T> sweep_list(const Locator& at, const YAML::Node& node, const std::string& path, Read item) {
  std::vector<T> values;
  if (node.IsScalar()) return {item(node, path)};
  if (!node.IsSequence() || node.size() == 0) at.fail(node, path, "expected a non-empty list, got " + scalar_text(node));
  for (size_t i = 0; i < node.size(); ++i) values.push_back(item(node[i], path + "[" + std::to_string(i) + "]"));
  return values;
}

Sweep parse_sweep(const Locator& at, const YAML::Node& node) {
  check_keys(at, node, "sweep", kSweepKeys);
  Sweep sweep;
  const auto tokens = [&](const YAML::Node& n, const std::string& path) {
    return get_int(at, n, path, 1, int64_t(1) << 24);
  };
  if (node["context"]) sweep.context = sweep_list<int64_t>(at, node["context"], "sweep.context", tokens);
  if (node["segment"]) sweep.segment = sweep_list<int64_t>(at, node["segment"], "sweep.segment", tokens);
  if (node["cp"])
    sweep.cp = sweep_list<int>(at, node["cp"], "sweep.cp",
                               [&](const YAML::Node& n, const std::string& path) { return int(get_int(at, n, path, 1, 64)); });
  if (node["precision"])
    sweep.precision = sweep_list<std::string>(at, node["precision"], "sweep.precision",
                                              [&](const YAML::Node& n, const std::string& path) {
                                                return get_choice(at, n, path, format_names());
                                              });
  if (!sweep.context.empty() && !sweep.segment.empty())
    at.fail(node, "sweep", "give context (tokens in all) or segment (tokens a rank, context = segment x cp), not both");
  if (sweep.empty()) at.fail(node, "sweep", "no list; allowed keys under sweep: " + join(kSweepKeys));
  return sweep;
}

// "1, 2, 4" for cp 4.
std::string divisors_of(int n) {
  std::string out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return out;
}

bool named_cut_set(const std::string& word, const Precision& p, CutSet* out) {
  if (word == "all") *out = CutSet::all(p);
  else if (word == "none") *out = CutSet::none();
  else if (word == "seed") *out = CutSet::seed();
  else return false;
  return true;
}

CutSet parse_cut_spelling(const Locator& at, const YAML::Node& node, const std::string& path, const Precision& p);

// A cut set as the scenario spells it, whose cuts have their prerequisites on
// and apply to the scenario's precision.
CutSet parse_cuts(const Locator& at, const YAML::Node& node, const std::string& path, const Precision& p) {
  const CutSet set = parse_cut_spelling(at, node, path, p);
  std::string problem = set.problem();
  if (problem.empty()) problem = set.precision_problem(p);
  if (!problem.empty()) at.fail(node, path, problem + at.origin("precision"));
  return set;
}

CutSet parse_cut_spelling(const Locator& at, const YAML::Node& node, const std::string& path, const Precision& p) {
  const std::string allowed = "all, none, seed, a list of cut names, or a map cut: on|off; cut names: " +
                              allowed_cut_names();
  CutSet set;
  auto add = [&](const YAML::Node& item, const std::string& item_path) {
    Cut c;
    std::string word = get_string(at, item, item_path);
    if (!cut_from_name(word, &c))
      at.fail(item, item_path, "unknown cut '" + word + "'; allowed: " + allowed_cut_names());
    set.set(c, true);
  };
  if (node.IsScalar()) {
    if (named_cut_set(node.Scalar(), p, &set)) return set;
    Cut c;
    if (cut_from_name(node.Scalar(), &c)) {
      set.set(c, true);
      return set;
    }
    at.fail(node, path, "'" + node.Scalar() + "' is not allowed; allowed: " + allowed);
  }
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) add(node[i], path + "[" + std::to_string(i) + "]");
    return set;
  }
  if (node.IsMap()) {
    for (const auto& kv : node) {
      std::string name = kv.first.as<std::string>();
      Cut c;
      if (!cut_from_name(name, &c))
        at.fail(kv.first, path + "." + name,
                "unknown cut '" + name + "'; allowed: " + allowed_cut_names());
      set.set(c, get_bool(at, kv.second, path + "." + name));
    }
    return set;
  }
  at.fail(node, path, "expected " + allowed);
}

// `precision: bf16 | fp8 | fp4`, or the map {gemm: fp8, experts: fp8, fmha: bf16} (precision.h).
Precision parse_precision(const Locator& at, const YAML::Node& node, const std::string& path) {
  Precision p;
  if (node.IsScalar()) {
    const std::string word = get_choice(at, node, path, format_names());
    if (word == "fp8") p.gemm = p.experts = Format::fp8;
    if (word == "fp4") p = Precision{Format::fp8, Format::fp4, Format::bf16};
  } else if (node.IsMap()) {
    check_keys(at, node, path, precision_part_names());
    const auto part = [&](const char* key, Format* f) {
      if (node[key]) format_from_name(get_choice(at, node[key], path + "." + key, part_format_names(key)), f);
    };
    part("gemm", &p.gemm);
    part("experts", &p.experts);
    part("fmha", &p.fmha);
    if (p.fmha == Format::fp8)
      at.fail(node["fmha"], path + ".fmha",
              "fp8 attention is not built: cuDNN's FP8 SDPA, tried at the MLA shapes on the H200, ran at most "
              "1.15x bf16 before its quantize and dequantize passes, and on Hopper writes an fp8 output "
              "(docs/fmha.md); allowed: bf16");
  } else {
    at.fail(node, path, "expected bf16, fp8, fp4, or a map of gemm (bf16 | fp8), experts (bf16 | fp8 | fp4), "
                        "fmha (bf16)");
  }
  return p;
}

// baseline, all, then each cut that applies to p alone (a refinement on what it refines).
std::vector<VariantSpec> each_cut_variants(const Precision& p) {
  std::vector<VariantSpec> v = {{"baseline", CutSet::none()}, {"all", CutSet::all(p)}};
  for (Cut c : kAllCuts)
    if (cut_applies(c, p)) v.push_back({cut_name(c), CutSet::only(c)});
  return v;
}

// --variants a,b: those of the scenario's variants, in that order.
std::vector<VariantSpec> selected_variants(const std::vector<VariantSpec>& all, const std::vector<std::string>& names,
                                           const std::string& source) {
  std::vector<std::string> known;
  for (const VariantSpec& v : all) known.push_back(v.name);
  std::vector<VariantSpec> out;
  for (const std::string& name : names) {
    const auto it = std::find_if(all.begin(), all.end(), [&](const VariantSpec& v) { return v.name == name; });
    PB_CHECK(it != all.end(), "--variants: '" + name + "' is not a variant of " + source + "; its variants: " +
                                  join(known));
    for (const VariantSpec& v : out)
      PB_CHECK(v.name != name, "--variants: '" + name + "' is named twice");
    out.push_back(*it);
  }
  return out;
}

bool valid_variant_name(const std::string& s) {
  if (s.empty() || s.size() > 40) return false;
  for (char ch : s)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.'))
      return false;
  return true;
}

std::vector<VariantSpec> parse_variants(const Locator& at, const YAML::Node& node, const std::string& path,
                                        const Precision& p) {
  if (node.IsScalar() && node.Scalar() == "each-cut") return each_cut_variants(p);
  if (!node.IsSequence() || node.size() == 0)
    at.fail(node, path, "expected 'each-cut' or a non-empty list of {name, cuts}");
  std::vector<VariantSpec> out;
  for (size_t i = 0; i < node.size(); ++i) {
    std::string item_path = path + "[" + std::to_string(i) + "]";
    const YAML::Node item = node[i];
    check_keys(at, item, item_path, kVariantKeys);
    if (!item["name"] || !item["cuts"]) at.fail(item, item_path, "needs both 'name' and 'cuts'");
    VariantSpec v;
    v.name = get_string(at, item["name"], item_path + ".name");
    if (!valid_variant_name(v.name))
      at.fail(item["name"], item_path + ".name",
              "'" + v.name + "' must be 1-40 characters of letters, digits, '_', '-', '.'");
    for (const auto& prev : out)
      if (prev.name == v.name) at.fail(item["name"], item_path + ".name", "duplicate variant name '" + v.name + "'");
    v.cuts = parse_cuts(at, item["cuts"], item_path + ".cuts", p);
    out.push_back(v);
  }
  return out;
}

ModelShape parse_model(const Locator& at, const YAML::Node& node) {
  std::vector<std::string> allowed = {"preset", "rms_eps"};
  for (const auto& k : model_keys()) allowed.push_back(k.name);
  check_keys(at, node, "model", allowed);
  std::string preset = "k3";
  if (node["preset"]) preset = get_choice(at, node["preset"], "model.preset", model_preset_names());
  ModelShape m = model_preset(preset);
  for (const auto& k : model_keys())
    if (node[k.name]) m.*k.member = get_int(at, node[k.name], std::string("model.") + k.name, k.min, k.max);
  if (node["rms_eps"]) m.rms_eps = get_double(at, node["rms_eps"], "model.rms_eps", 1e-12, 1e-1);
  std::string bad = model_inconsistency(m);
  if (!bad.empty()) at.fail(node, "model", bad);
  return m;
}

// Applies `key=value` overrides to the document; returns path -> override text.
std::map<std::string, std::string> apply_sets(YAML::Node& root, const std::vector<std::string>& sets) {
  std::map<std::string, std::string> overridden;
  for (const auto& set : sets) {
    auto eq = set.find('=');
    PB_CHECK(eq != std::string::npos && eq > 0,
             "override '" + set + "' must be key=value, e.g. cp=4 or model.layers=8");
    std::string key = set.substr(0, eq);
    YAML::Node value;
    try {
      value = YAML::Load(set.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw Error("override '" + set + "': the value is not valid YAML: " + e.msg);
    }
    auto dot = key.find('.');
    if (dot == std::string::npos) {
      root[key] = value;
    } else {
      std::string parent = key.substr(0, dot), child = key.substr(dot + 1);
      PB_CHECK(child.find('.') == std::string::npos,
               "override '" + set + "': keys nest one level at most (model.layers, debug.delay_us)");
      if (root[parent] && root[parent].IsScalar())
        throw Error("override '" + set + "': " + parent + " is a single value here (" + root[parent].Scalar() +
                    "), not a map; override the whole key: " + parent + "=<value> or " + parent + "={" + child +
                    ": ..., ...}");
      if (!root[parent] || !root[parent].IsMap()) root[parent] = YAML::Node(YAML::NodeType::Map);
      root[parent][child] = value;
    }
    overridden[key] = set;
  }
  return overridden;
}

}  // namespace

std::vector<std::string> fabric_names() { return {"ipc", "nccl", "auto"}; }
std::vector<std::string> fmha_engine_names() { return {"native", "cudnn", "auto"}; }
std::vector<std::string> moe_gemm_engine_names() { return {"auto", "grouped", "loop", "cutlass"}; }
std::vector<std::string> share_memory_names() { return {"vmm", "ipc"}; }
std::vector<std::string> timing_names() { return {"events", "cupti"}; }

CutSet parse_cut_list(const std::string& list, const std::string& where, const Precision& p) {
  CutSet set;
  if (named_cut_set(list, p, &set)) return set;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    Cut c;
    if (!cut_from_name(item, &c))
      throw Error(where + ": unknown cut '" + item + "'; allowed: all, none, seed, or a comma list of " +
                  allowed_cut_names());
    set.set(c, true);
  }
  std::string problem = set.problem();
  if (problem.empty()) problem = set.precision_problem(p);
  if (!problem.empty()) throw Error(where + ": " + problem);
  return set;
}

Scenario parse_scenario(const std::string& text, const std::string& source,
                        const ScenarioOverrides& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw Error(source + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                ": not valid YAML: " + e.msg);
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  std::map<std::string, std::string> overridden = apply_sets(root, overrides.sets);
  Locator at(source, overridden);
  check_keys(at, root, "", kTopKeys);

  Scenario s;
  s.source = source;
  s.text = text;
  for (const auto& set : overrides.sets) s.overrides += (s.overrides.empty() ? "--set " : " --set ") + set;
  if (!overrides.cuts.empty()) s.overrides += (s.overrides.empty() ? "" : " ") + std::string("--cuts ") + overrides.cuts;
  if (!overrides.variants.empty()) {
    std::string names;
    for (const std::string& v : overrides.variants) names += (names.empty() ? "" : ",") + v;
    s.overrides += (s.overrides.empty() ? "" : " ") + std::string("--variants ") + names;
  }

  if (!root["name"]) at.fail(root, "name", "missing; every scenario has a name");
  s.name = get_string(at, root["name"], "name");
  if (!valid_variant_name(s.name))
    at.fail(root["name"], "name", "'" + s.name + "' must be 1-40 characters of letters, digits, '_', '-', '.'");
  s.model = parse_model(at, root["model"] ? root["model"] : YAML::Node(YAML::NodeType::Map));

  if (!root["cp"]) at.fail(root, "cp", "missing; the number of CP ranks (1..64)");
  s.cp = int(get_int(at, root["cp"], "cp", 1, 64));
  if (!root["context"]) at.fail(root, "context", "missing; the context length in tokens");
  s.context = get_int(at, root["context"], "context", 1, int64_t(1) << 24);
  if (s.context % s.cp != 0)
    at.fail(root["context"], "context",
            "context " + std::to_string(s.context) + " is not divisible by cp " + std::to_string(s.cp) +
                "; allowed: a multiple of cp" + at.origin("cp"));
  const int64_t segment = s.context / s.cp;
  if (root["bucket"]) {
    s.bucket = get_int(at, root["bucket"], "bucket", kBucketTile, int64_t(1) << 24);
    if (s.bucket % kBucketTile != 0)
      at.fail(root["bucket"], "bucket",
              "bucket " + std::to_string(s.bucket) + " is not a multiple of the kernel tile " +
                  std::to_string(kBucketTile) + " (FMHA query tile; KDA chunk 64; conv and merge row runs 16)");
    if (segment > s.bucket)
      at.fail(root["bucket"], "bucket",
              "the segment context/cp = " + std::to_string(segment) + " tokens is larger than the bucket " +
                  std::to_string(s.bucket) + "; allowed: bucket >= segment" + at.origin("cp") +
                  at.origin("context"));
  } else {
    s.bucket = (segment + kBucketTile - 1) / kBucketTile * kBucketTile;
  }
  if (root["split_k"]) s.split_k = int(get_int(at, root["split_k"], "split_k", 1, 16));
  if (root["fabric"]) s.fabric = get_choice(at, root["fabric"], "fabric", fabric_names());
  if (root["emulate_hosts"]) {
    s.emulate_hosts = int(get_int(at, root["emulate_hosts"], "emulate_hosts", 0, s.cp));
    if (s.emulate_hosts > 0 && s.cp % s.emulate_hosts != 0)
      at.fail(root["emulate_hosts"], "emulate_hosts",
              std::to_string(s.emulate_hosts) + " does not divide cp " + std::to_string(s.cp) +
                  "; allowed: 0 (the real hosts) or a divisor of cp: " + divisors_of(s.cp) + at.origin("cp"));
    if (s.emulate_hosts > 1 && s.fabric == "ipc")
      at.fail(root["emulate_hosts"], "emulate_hosts",
              std::to_string(s.emulate_hosts) + " emulated hosts with fabric ipc: CUDA IPC does not cross hosts; "
              "allowed with emulated hosts: fabric nccl or auto" + at.origin("fabric"));
  }
  if (root["layout"]) {
    const std::string name = get_choice(at, root["layout"], "layout", layout_names());
    layout_from_name(name, &s.layout);
  }
  if (s.layout == Layout::zigzag && s.context % (2 * s.cp) != 0)
    at.fail(root["layout"], "layout",
            "zigzag cuts the context in 2*cp = " + std::to_string(2 * s.cp) + " equal chunks, but context " +
                std::to_string(s.context) + " is not divisible by it; allowed: a context divisible by 2*cp, or "
                "layout contiguous" + at.origin("cp") + at.origin("context"));
  if (root["fmha"]) s.fmha = get_choice(at, root["fmha"], "fmha", fmha_engine_names());
  if (root["moe_gemm"]) s.moe_gemm = get_choice(at, root["moe_gemm"], "moe_gemm", moe_gemm_engine_names());
  if (root["gpu_profile"]) s.gpu_profile = get_choice(at, root["gpu_profile"], "gpu_profile", gpu_profile_names());
  if (root["serialize_ranks"]) s.serialize_ranks = get_bool(at, root["serialize_ranks"], "serialize_ranks");
  if (root["share_memory"])
    s.share_memory = get_choice(at, root["share_memory"], "share_memory", share_memory_names());
  if (root["turn_settle_ms"])
    s.turn_settle_ms = int(get_int(at, root["turn_settle_ms"], "turn_settle_ms", 0, 10000));
  if (root["nvtx"]) s.nvtx = get_bool(at, root["nvtx"], "nvtx");
  if (root["timing"]) s.timing = get_choice(at, root["timing"], "timing", timing_names());
  if (root["ceiling_sustained_s"])
    s.ceiling_sustained_s = get_double(at, root["ceiling_sustained_s"], "ceiling_sustained_s", 0, kMaxCeilingSustainedS);
  if (root["helped_in_place"]) s.helped_in_place = get_bool(at, root["helped_in_place"], "helped_in_place");
  if (root["wait_timeout_s"])
    s.wait_timeout_s = get_double(at, root["wait_timeout_s"], "wait_timeout_s", 0.1, 86400);
  if (root["warmup"]) s.warmup = int(get_int(at, root["warmup"], "warmup", 0, 1000));
  if (root["warmup_layers"])
    s.warmup_layers = get_int(at, root["warmup_layers"], "warmup_layers", 0, s.model.layers);
  if (root["reps"]) s.reps = int(get_int(at, root["reps"], "reps", 1, 100000));
  if (root["seed"]) s.seed = uint64_t(get_int(at, root["seed"], "seed", 0, INT64_MAX));
  if (root["output"]) s.output = get_string(at, root["output"], "output");

  if (root["debug"]) {
    check_keys(at, root["debug"], "debug", kDebugKeys);
    if (root["debug"]["delay_family"])
      s.debug.delay_family = get_string(at, root["debug"]["delay_family"], "debug.delay_family");
    if (root["debug"]["delay_us"])
      s.debug.delay_us = get_double(at, root["debug"]["delay_us"], "debug.delay_us", 0, 1e6);
    if (root["debug"]["poison_arena"])
      s.debug.poison_arena = get_bool(at, root["debug"]["poison_arena"], "debug.poison_arena");
  }

  if (root["sweep"]) s.sweep = parse_sweep(at, root["sweep"]);

  if (root["precision"]) {
    s.precision = parse_precision(at, root["precision"], "precision");
    const std::string bad = scaled_width_problem(s.model, s.precision);
    if (!bad.empty()) at.fail(root["precision"], "precision", bad + "; allowed: precision bf16, or such widths");
  }
  if (!overrides.cuts.empty()) {
    s.variants = {{"cli", parse_cut_list(overrides.cuts, "--cuts " + overrides.cuts, s.precision)}};
  } else if (root["variants"]) {
    s.variants = parse_variants(at, root["variants"], "variants", s.precision);
  } else {
    CutSet cuts = root["cuts"] ? parse_cuts(at, root["cuts"], "cuts", s.precision) : CutSet::none();
    const std::string name = cuts.short_name(s.precision);
    s.variants = {{name == "none" ? "baseline" : name, cuts}};
  }
  if (root["variants"] && root["cuts"] && overrides.cuts.empty())
    at.fail(root["cuts"], "cuts", "give either 'cuts' (one cut set) or 'variants' (several), not both");
  if (!overrides.variants.empty()) {
    PB_CHECK(overrides.cuts.empty(), "give --cuts (one cut set) or --variants (some of the scenario's), not both");
    s.variants = selected_variants(s.variants, overrides.variants, source);
  }
  return s;
}

ScenarioOverrides overrides_from_text(const std::string& text) {
  ScenarioOverrides overrides;
  std::vector<std::pair<size_t, std::string>> marks;  // where each flag starts
  for (const std::string flag : {"--set ", "--cuts ", "--variants "})
    for (size_t at = text.find(flag); at != std::string::npos; at = text.find(flag, at + 1))
      if (at == 0 || text[at - 1] == ' ') marks.emplace_back(at, flag);
  std::sort(marks.begin(), marks.end());
  PB_CHECK(text.empty() || (!marks.empty() && marks[0].first == 0),
           "scenario_overrides: '" + text + "' does not start with --set, --cuts or --variants");
  for (size_t i = 0; i < marks.size(); ++i) {
    const size_t begin = marks[i].first + marks[i].second.size();
    const size_t end = i + 1 < marks.size() ? marks[i + 1].first - 1 : text.size();
    const std::string value = text.substr(begin, end > begin ? end - begin : 0);
    if (marks[i].second == "--set ") {
      overrides.sets.push_back(value);
    } else if (marks[i].second == "--cuts ") {
      overrides.cuts = value;
    } else {
      std::stringstream names(value);
      for (std::string name; std::getline(names, name, ',');) overrides.variants.push_back(name);
    }
  }
  return overrides;
}

Scenario load_scenario(const std::string& path, const ScenarioOverrides& overrides) {
  std::ifstream in(path);
  PB_CHECK(in.good(), "cannot read scenario file '" + path + "'");
  std::stringstream buf;
  buf << in.rdbuf();
  return parse_scenario(buf.str(), path, overrides);
}

bool any_variant_has(const Scenario& s, Cut c) {
  for (const VariantSpec& v : s.variants)
    if (v.cuts[c]) return true;
  return false;
}

std::string world_size_problem(const Scenario& s, int world_size, bool plan) {
  if (world_size == s.cp) return "";
  if (plan && world_size == 1) return "";
  return s.source + ": cp: the scenario has cp " + std::to_string(s.cp) + " but the MPI world has " +
         std::to_string(world_size) + " ranks; allowed: launch with mpirun -np " + std::to_string(s.cp) +
         (plan ? " (or a single process for plan)" : "") + ", or override with --set cp=" +
         std::to_string(world_size);
}

}  // namespace pb
