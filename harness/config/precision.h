// The superstep's arithmetic precision, per part (scenario key `precision`;
// docs/design.md §12 holds the recipe):
//
//   precision: bf16                     every part bf16 (the default)
//   precision: fp8                      gemm and experts fp8, fmha bf16
//   precision: {gemm: fp8, experts: fp8, fmha: bf16}
//   precision: fp4                      gemm fp8, experts fp4, fmha bf16: planned only (below)
//
//   gemm     every dense weight GEMM of the blocks: the MLA and KDA projections,
//            the output projections, the dense FFN and the shared experts
//   experts  the routed experts' grouped GEMMs
//   fmha     the MLA attention (bf16 only: cuDNN's FP8 SDPA was tried and does
//            not pay on Hopper, docs/fmha.md)
//
// fp8 is e4m3 with DeepSeek-V3's block scales: weights one f32 scale per
// 128x128 block, activations one per token and 128 columns, f32 accumulation.
// What stays bf16 whatever the key says: the router, the LM head, MLA's kv_b
// expansion and the KDA core.
//
// fp4 (experts only) is NVFP4, as the fleet's GB300 experts run: e2m1 codes,
// two a byte, one e4m3 scale per 16 elements along K (and one f32 scale per
// tensor). It is planned only: `plan` costs it and sizes its weights on a
// profile with an FP4 rate (gb300); run, lane and verify refuse it, since no
// FP4 kernel is built and Hopper has no FP4 tensor cores.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pb {

enum class Format { bf16, fp8, fp4 };
const char* format_name(Format f);
bool format_from_name(const std::string& name, Format* out);
std::vector<std::string> format_names();  // bf16, fp8, fp4: also the scalar form's words
// The formats a part takes: gemm bf16, fp8; experts bf16, fp8, fp4; fmha bf16, fp8
// (the parser refuses fmha fp8 with why, docs/fmha.md).
std::vector<std::string> part_format_names(const std::string& part);

struct Precision {
  Format gemm = Format::bf16;
  Format experts = Format::bf16;
  Format fmha = Format::bf16;

  bool operator==(const Precision& o) const { return gemm == o.gemm && experts == o.experts && fmha == o.fmha; }
  bool operator!=(const Precision& o) const { return !(*this == o); }
  bool any_fp8() const { return gemm == Format::fp8 || experts == Format::fp8 || fmha == Format::fp8; }
  // Some part runs a block-scaled format (fp8 or fp4): the quantization launches exist.
  bool any_scaled() const { return gemm != Format::bf16 || experts != Format::bf16 || fmha != Format::bf16; }
  // "bf16", "fp8" (gemm and experts fp8, fmha bf16), "fp4" (gemm fp8, experts fp4, fmha
  // bf16), else "gemm=fp8 experts=bf16 fmha=bf16".
  std::string describe() const;
};

// An NVFP4 operand [rows, k]: e2m1 codes two a byte, then one e4m3 scale per
// row and 16 columns (the tensor's one f32 scale not counted), in bytes.
inline int64_t nvfp4_bytes(int64_t rows, int64_t k) { return rows * ((k + 1) / 2) + rows * ((k + 15) / 16); }

// The parts of a precision, in the order the map form and describe() spell them.
std::vector<std::string> precision_part_names();  // gemm, experts, fmha

// "" when run, lane and verify can execute `p` on some device; else why, naming
// the key and holding kPlannedOnlyMessage (fp4 is planned only).
constexpr const char* kPlannedOnlyMessage = "is planned only";
std::string precision_planned_only(const Precision& p);

}  // namespace pb
