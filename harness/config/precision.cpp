#include "precision.h"

namespace pb {

const char* format_name(Format f) { return f == Format::fp8 ? "fp8" : "bf16"; }

bool format_from_name(const std::string& name, Format* out) {
  for (Format f : {Format::bf16, Format::fp8})
    if (name == format_name(f)) {
      *out = f;
      return true;
    }
  return false;
}

std::vector<std::string> format_names() { return {"bf16", "fp8"}; }

std::vector<std::string> precision_part_names() { return {"gemm", "experts", "fmha"}; }

std::string Precision::describe() const {
  if (*this == Precision{}) return "bf16";
  if (*this == Precision{Format::fp8, Format::fp8, Format::bf16}) return "fp8";
  return std::string("gemm=") + format_name(gemm) + " experts=" + format_name(experts) + " fmha=" + format_name(fmha);
}

}  // namespace pb
