// The superstep's arithmetic precision, per part (scenario key `precision`;
// docs/design.md §12 holds the recipe):
//
//   precision: bf16                     every part bf16 (the default)
//   precision: fp8                      gemm and experts fp8, fmha bf16
//   precision: {gemm: fp8, experts: fp8, fmha: bf16}
//
//   gemm     every dense weight GEMM of the blocks: the MLA and KDA projections,
//            the output projections, the dense FFN and the shared experts
//   experts  the routed experts' grouped GEMMs
//   fmha     the MLA attention (bf16 only: the FP8 SDPA of cuDNN on Hopper writes
//            an fp8 output, docs/fmha.md)
//
// fp8 is e4m3 with DeepSeek-V3's block scales: weights one f32 scale per
// 128x128 block, activations one per token and 128 columns, f32 accumulation.
// What stays bf16 whatever the key says: the router, the LM head, MLA's kv_b
// expansion and the KDA core.
#pragma once

#include <string>
#include <vector>

namespace pb {

enum class Format { bf16, fp8 };
const char* format_name(Format f);
bool format_from_name(const std::string& name, Format* out);
std::vector<std::string> format_names();  // bf16, fp8

struct Precision {
  Format gemm = Format::bf16;
  Format experts = Format::bf16;
  Format fmha = Format::bf16;

  bool operator==(const Precision& o) const { return gemm == o.gemm && experts == o.experts && fmha == o.fmha; }
  bool operator!=(const Precision& o) const { return !(*this == o); }
  bool any_fp8() const { return gemm == Format::fp8 || experts == Format::fp8 || fmha == Format::fp8; }
  // "bf16", "fp8" (gemm and experts fp8, fmha bf16), else "gemm=fp8 experts=bf16 fmha=bf16".
  std::string describe() const;
};

// The parts of a precision, in the order the map form and describe() spell them.
std::vector<std::string> precision_part_names();  // gemm, experts, fmha

}  // namespace pb
