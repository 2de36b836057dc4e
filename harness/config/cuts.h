// The switchable cuts, one table (kCutTable in cuts.cpp) that every consumer
// reads: scenario parsing and the CLI (names, `seed`, `all`, `each-cut`,
// prerequisites, errors), `plan` (how a cut shows on the roofline), `plan
// --calibrate` (which benchmark family measures it), `verify` (what it promises
// about the outputs), the results file (a /cuts table the plot scripts read),
// and docs/cuts.md (a section per cut). test/config/test_cut_table.cpp walks the
// table and fails when a consumer lacks a cut. docs/adding-a-cut.md walks a new
// cut through.
//
// A scenario spells a cut set as `all`, `none`, `seed`, a list of names, or a
// map name -> on/off. `all` means every cut that applies to the scenario's
// precision (precision.h): a cut that needs fp8 is off in a bf16 run.
#pragma once

#include <array>
#include <set>
#include <string>
#include <vector>

#include "precision.h"
#include "results.h"

namespace pb {

enum class Cut { land, conv, stripe, lse_merge, elementwise, attnres, balance, overlap, quant_fuse };
constexpr int kCutCount = 9;

// What a cut promises about the outputs, and so how `verify` judges it against
// the variant without it (its prerequisites on):
//   bit_identical    every layer of every rank bit for bit, the first token equal;
//   summation_order  bit for bit under an FMHA engine whose per-row arithmetic does
//                    not depend on a window's query count (native); within the
//                    cut's floor (rel-L2 of the final hidden rows) under cuDNN;
//   floor            within the cut's floor, the first token equal (judged up to the
//                    seed gate's depth; `verify` notes deeper stacks unjudged).
enum class Exactness { bit_identical, summation_order, floor };
const char* exactness_name(Exactness e);  // "bit_identical" | "summation_order" | "floor"

// How `plan` shows the cut on its roofline table:
//   bytes         the bytes its family moves (a memory-bound rewrite);
//   fmha_flops    the deep rank's FMHA FLOPs (it moves attention between ranks);
//   launch_order  nothing: it reorders launches, its gain is in the projection.
enum class PlanEffect { bytes, fmha_flops, launch_order };

struct CutInfo {
  Cut id;
  const char* name;
  const char* family;        // the span family whose launches it changes (plan.h's families)
  bool seed;                 // one of the seed PR's five cuts
  bool has_prerequisite;     // it refines another cut and needs it on
  Cut prerequisite;          // meaningful when has_prerequisite
  Exactness exactness;
  double floor;              // rel-L2 floor for summation_order / floor; 0 for bit_identical
  bool needs_fp8;            // applies only where some part runs block-scaled, fp8 or fp4 (precision.h)
  PlanEffect plan_effect;
  const char* bench_family;  // the `prefill-bench kernels` family that measures its kernels; "" none
  const char* kernels;       // which kernels and launches it changes, one line (help, docs)
};

// Every cut, in the table's order (the order of names, columns and each-cut).
const std::array<CutInfo, kCutCount>& cut_table();
const CutInfo& cut_info(Cut c);
extern const std::array<Cut, kCutCount> kAllCuts;

const char* cut_name(Cut c);
// Returns false for an unknown name.
bool cut_from_name(const std::string& name, Cut* out);
std::string allowed_cut_names();  // "land, conv, stripe, ..." in table order
// The cut that `c` refines and needs on (balance: the stripe); false when none.
bool cut_requires(Cut c, Cut* prerequisite);
// Whether the cut is one of the seed's five.
bool seed_cut(Cut c);
// Whether the cut applies to a run of this precision (needs_fp8 cuts need an fp8 or fp4 part).
bool cut_applies(Cut c, const Precision& p);

// The names a describe() text turns on ("<name>=on"), in any order, names this
// build does not know included (a file of another build): the text form the
// reports and the gate compare; CutSet::from_description is the checked one.
std::set<std::string> cut_names_on(const std::string& described);

// The table as the results file records it (/cuts).
std::vector<CutRecord> cut_records();

struct CutSet {
  std::array<bool, kCutCount> on{};

  bool operator[](Cut c) const { return on[int(c)]; }
  void set(Cut c, bool value) { on[int(c)] = value; }
  bool operator==(const CutSet& o) const { return on == o.on; }
  bool operator!=(const CutSet& o) const { return !(*this == o); }

  static CutSet none() { return {}; }
  static CutSet all();                       // every cut of the table
  static CutSet all(const Precision& p);     // every cut that applies to p
  static CutSet seed();                      // the five cuts of the seed PR
  static CutSet only(Cut c);                 // c and what it requires
  // This set with `c` off, and every cut that requires c off too.
  CutSet without(Cut c) const;
  // "" when every cut that is on has its prerequisite on; else the sentence.
  std::string problem() const;
  // "" when every cut that is on applies to p; else the sentence naming the cut.
  std::string precision_problem(const Precision& p) const;
  // "land=on conv=off ..." in table order (a reader takes a cut the text does
  // not name as off: files written before the cut existed).
  std::string describe() const;
  // The inverse of describe(): the cuts "<name>=on" names, in any order; the
  // others off. Throws pb::Error naming a cut this build does not know.
  static CutSet from_description(const std::string& described);
  // "none", "all" (every cut that applies to p), or the names of the cuts on, joined by '+'.
  std::string short_name(const Precision& p) const;
};

}  // namespace pb
