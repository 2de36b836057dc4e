// `prefill-bench --version`. PB_VERSION, PB_CUDA_ARCHITECTURES and
// PB_CUDA_VERSION come from CMake (this file's compile definitions);
// PB_HAVE_CUDNN and PB_HAVE_CUTLASS from the kernels library.
#include "commands.h"

namespace pb {

const char* git_sha();
bool git_dirty();

namespace {

#ifdef PB_HAVE_CUDNN
constexpr const char* kCudnn = "on";
#else
constexpr const char* kCudnn = "off";
#endif
#ifdef PB_HAVE_CUTLASS
constexpr const char* kCutlass = "on";
#else
constexpr const char* kCutlass = "off";
#endif

}  // namespace

std::string version_text() {
  std::string text = "prefill-bench " PB_VERSION "\n";
  text += std::string("git ") + git_sha() + (git_dirty() ? " (dirty)" : "") + "\n";
  text += std::string("build: cuDNN FMHA ") + kCudnn + ", CUTLASS MoE GEMM " + kCutlass +
          ", CUDA architectures " PB_CUDA_ARCHITECTURES ", CUDA " PB_CUDA_VERSION;
  return text;
}

}  // namespace pb
