#include "precision.h"

namespace pb {

const char* format_name(Format f) {
  switch (f) {
    case Format::fp8: return "fp8";
    case Format::fp4: return "fp4";
    default: return "bf16";
  }
}

bool format_from_name(const std::string& name, Format* out) {
  for (Format f : {Format::bf16, Format::fp8, Format::fp4})
    if (name == format_name(f)) {
      *out = f;
      return true;
    }
  return false;
}

std::vector<std::string> format_names() { return {"bf16", "fp8", "fp4"}; }

std::vector<std::string> part_format_names(const std::string& part) {
  if (part == "experts") return {"bf16", "fp8", "fp4"};
  return {"bf16", "fp8"};
}

std::vector<std::string> precision_part_names() { return {"gemm", "experts", "fmha"}; }

std::string Precision::describe() const {
  if (*this == Precision{}) return "bf16";
  if (*this == Precision{Format::fp8, Format::fp8, Format::bf16}) return "fp8";
  if (*this == Precision{Format::fp8, Format::fp4, Format::bf16}) return "fp4";
  return std::string("gemm=") + format_name(gemm) + " experts=" + format_name(experts) + " fmha=" + format_name(fmha);
}

std::string precision_planned_only(const Precision& p) {
  if (p.experts == Format::fp4)
    return std::string("precision.experts fp4 ") + kPlannedOnlyMessage + ": no FP4 expert GEMM is built, and Hopper has no FP4 tensor "
           "cores; `plan` costs it on a profile with an FP4 rate (gb300); allowed here: precision.experts bf16, fp8";
  return "";
}

}  // namespace pb
