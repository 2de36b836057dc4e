// Comparing results files: A/B reports and the TTFT regression check.
//
// Regression decision rule (README "Regression check" quotes this block)
// ---------------------------------------------------------------------
// A = the baseline's TTFT samples (one per rep; the file's headline TTFT,
// headline.h: the projected gang's for serialized ranks), B = the candidate's.
//   delta   = median(B) / median(A) - 1
//   A'      = A * (1 + max_regression)      the slowest baseline still allowed
// The candidate REGRESSED iff both hold:
//   1. delta > max_regression (default 0.03): the slowdown is big enough to matter;
//   2. B is slower than A' beyond the noise:
//      - enough reps, i.e. the exact one-sided test can reach alpha at all
//        (1 / C(n_a + n_b, n_a) < alpha; at alpha 0.05: 1 + 20, 2 + 5, 3 + 4,
//        4 + 4 reps or more): the one-sided Mann-Whitney U test "B is larger
//        than A'" gives p < alpha (default 0.05). Exact distribution when
//        both have <= 30 samples and no value is tied, otherwise the normal
//        approximation with tie and continuity corrections;
//      - too few reps for the U test (e.g. 1 + 1, 2 + 2, 3 + 3): every
//        candidate rep is slower than every allowed baseline rep,
//        min(B) > max(A'), and the report says "too few reps for the U test".
//   No TTFT samples on either side: not judged, never "regressed".
//
// Why this shape:
// - A bare percentage (condition 1 alone) turns noise into verdicts: one slow
//   rep moves a median across the threshold.
// - Noise alone (nvbench_compare flags |diff| > measured noise) flags tiny
//   real changes whenever the measured noise is small, and it judges single
//   samples. Condition 1 keeps tiny changes out, the fallback keeps single
//   samples honest.
// - Testing B against A' rather than A asks "slower by more than the
//   allowance?", not "slower at all?": a candidate that only grazes the
//   threshold is within the noise of the threshold itself and would flip
//   from run to run.
// - A noisy candidate whose reps overlap the baseline's is not flagged even
//   when its median is past the threshold; the report says to rerun with more
//   reps. Google Benchmark's U test likewise needs repetitions (it warns below
//   9); below what the test can ever resolve we require disjoint ranges.
//
// Modes of run_compare:
//   (a) file_a vs file_b: same-named variants pairwise when the files share
//       names (or variant_a / variant_b when given), else the first of each;
//   (b) file_b empty: variant_a vs variant_b inside file_a;
//   (c) baseline_file set: the regression gate, the candidate file_a against
//       the baseline (below);
//   (d) links set: file_a's projected gang over each link profile (links.h),
//       in any format.
// Each comparison prints, per rank, the time of each kernel family (per
// superstep; per MLA layer for `lane` files, which hold one MLA layer and no
// TTFT) and the same time split into waiting (by peer) and compute,
// TTFT min/median/max, the TTFT verdict and the outputs verdict.
//
// The regression gate (c) judges only what it can, and says so
// -------------------------------------------------------------
// The files cannot be judged against each other (exit 2) when:
//   - they hold different kinds (run, lane, plan, a benchmark);
//   - either is marked incomplete (root attribute complete = 0);
//   - either holds no TTFT samples (a plan, a lane file);
//   - their scenarios differ in identity: name, model shape, cp, context,
//     bucket (read from the recorded scenario_yaml with its overrides).
// The variants to judge are every baseline variant, or the `only` list. A
// variant to judge that is missing from either file, whose cuts differ
// between the files, or whose verdict is "not judged" (no TTFT samples on a
// side) cannot be judged. Candidate variants outside that set are listed as
// not judged, with why, and do not change the exit code.
// Exit code: 1 when any judged variant regressed; else 2 when anything
// above could not be judged; else 0. The report lists each judged variant
// with its verdict and each variant not judged with the reason (one line
// each; `verbose` adds every judged variant's whole comparison). `format`
// markdown, csv or json writes the same verdicts, machines and result for a
// pull request or a dashboard instead.
//
// The gate sees the machine
// -------------------------
// Both files record their bf16 GEMM ceilings (burst and sustained,
// gemm_ceiling.h) and the sustained window's SM clock. The gate prints the two
// machines side by side and says when the sustained ceilings differ by more
// than max_regression: then the machine alone can move TTFT past the allowance.
// It names every library (CUDA driver and runtime, cuBLAS, cuDNN, NCCL) both
// files record at different versions (a library's kernels move their family),
// and the launch lists' form when it differs (plan.h kLaunchListVersion: the
// families a new form moves differ by design). Neither is judged.
// normalize = "sustained" judges the candidate's TTFT samples times
//   S_candidate / S_baseline      (S: gemm_tflops_sustained)
// i.e. the candidate as if it had run on the baseline's machine; the verdict
// line names the factor. A file without a sustained ceiling cannot be
// normalized (exit 2). It corrects compute-bound time only: memory-bound
// families (the HBM clock does not follow the SM clock) and the fabric do
// not scale with the GEMM ceiling, so normalizing over-corrects them.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "results.h"

namespace pb {

struct CompareOptions {
  std::string file_a, file_b;
  std::string variant_a, variant_b;
  std::string baseline_file;       // set: regression mode, file_a is the candidate
  std::vector<std::string> only;   // regression mode: the variants to judge; empty: every baseline variant
  double max_regression = 0.03;    // allowed TTFT slowdown, as a fraction
  double alpha = 0.05;             // significance level of the U test
  std::string reference = "baseline";  // one file, no variant names: savings against this variant
  std::string format = "text";     // text | markdown | csv | json (report.h)
  bool verbose = false;            // the gate: each judged variant's whole report, not one line
  std::string normalize = "none";  // the gate: none | sustained (below)
  bool links = false;              // mode (d): one file's projected TTFT over each link profile
};

// run_compare's exit codes.
constexpr int kComparePass = 0;         // comparisons printed; the gate judged everything, nothing regressed
constexpr int kCompareRegressed = 1;    // the gate: a judged variant regressed
constexpr int kCompareCannotJudge = 2;  // the gate: something it was to judge could not be judged

// Returns one of the codes above (1 and 2 in regression mode only). Throws
// pb::Error on unreadable files, unknown variants or bad options; the caller
// turns that into exit code 2 as well.
int run_compare(const CompareOptions& options, std::ostream& out);

// --max-regression as typed: a percent in [0, 100) ("3%", "2.5%") or a
// fraction in [0, 1) ("0.03"), digits with at most one decimal point. Returns
// the fraction; anything else (3, abc, -1%, 3%%, 1e-2) throws pb::Error
// stating the grammar.
double parse_max_regression(const std::string& text);

// ---- the pieces, pure (no files) ----

struct RegressionVerdict {
  bool regressed = false;
  bool judged = false;             // false: no samples on one side
  double delta = 0;                // median(B) / median(A) - 1
  double p_value = std::numeric_limits<double>::quiet_NaN();  // U test; NaN when it did not run
  std::string method;              // "exact U test", "U test (normal approximation)",
                                   // "too few reps for the U test", "not judged"
  std::string reason;              // one line for the report
  std::string quantity = "TTFT";   // what was judged: "TTFT" or "projected gang TTFT" (headline.h)
};

RegressionVerdict judge_regression(const std::vector<double>& base, const std::vector<double>& cand,
                                   double max_regression, double alpha);

// Time per superstep of each kernel family on one rank, µs. Measured runs:
// each family's spans summed within a rep (0 in a rep without them), then the
// median over reps. Plans (only rep -1 spans): the plan's sum.
std::map<std::string, double> family_times_us(const VariantResult& variant, int32_t rank);
// The deep rank: the one whose family times (rank -> family -> time) sum
// largest; 0 when there is none.
int32_t deepest_rank(const std::map<int32_t, std::map<std::string, double>>& family_times);

// One rank's time per superstep split into waiting and the rest, µs, each the
// median over reps of its per-rep sum (plans: the sum). Waiting: the spans of
// kernels named "fabric.wait*" (doorbells and transfers the rank waited on);
// compute: every other span. By peer: a wait span whose recorded bells
// (VariantResult::bells, op wait) name one peer counts for that peer; one
// naming several peers, or none (plans, files without bells), counts under -1.
struct WaitSplit {
  double wait_us = 0, compute_us = 0;
  std::map<int32_t, double> wait_by_peer_us;
};
WaitSplit wait_split_us(const VariantResult& variant, int32_t rank);

struct RankChecksums {
  int32_t rank = 0;
  int32_t layers_compared = 0;
  int32_t identical = 0;
  int32_t first_differing_layer = -1;  // -1: none
};

struct OutputsVerdict {
  bool recorded = false;           // both sides carry checksums
  bool same_shape = false;         // same [ranks, layers]
  bool bit_identical = false;      // recorded, same shape, every checksum equal
  std::vector<RankChecksums> ranks;            // the ranks both sides have
  double hidden_rel_l2 = std::numeric_limits<double>::quiet_NaN();  // ||B - A|| / ||A||; NaN: sizes differ
  double logits_rel_l2 = std::numeric_limits<double>::quiet_NaN();
  int64_t token_a = -1, token_b = -1;          // first_token, else argmax of last_logits; -1: none
};

OutputsVerdict compare_outputs(const Outputs& a, const Outputs& b);

}  // namespace pb
