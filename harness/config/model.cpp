#include "model.h"

#include "check.h"

namespace pb {

namespace {

ModelShape k3() {
  ModelShape m;
  m.preset = "k3";
  m.hidden = 7168; m.layers = 93; m.rms_eps = 1e-5;
  m.mla_period = 4; m.heads = 96; m.q_lora = 1536; m.kv_lora = 512;
  m.qk_nope = 128; m.qk_rope = 64; m.v_head = 128;
  m.kda_heads = 96; m.kda_head_dim = 128; m.conv_taps = 4; m.f_rank = 128; m.kda_chunk = 64;
  m.dense_layers = 1; m.dense_inter = 33792;
  m.experts = 224; m.top_k = 16; m.moe_latent = 3584; m.expert_inter = 3072; m.shared_inter = 6144;
  m.vocab = 163840;
  m.attnres_period = 12;
  return m;
}

// Small enough for CPU-speed tests and several ranks on one GPU, with every
// layer kind, a snapshot every 2 layers, and head dims the kernels support.
ModelShape tiny() {
  ModelShape m;
  m.preset = "tiny";
  m.hidden = 512; m.layers = 4; m.rms_eps = 1e-5;
  m.mla_period = 4; m.heads = 2; m.q_lora = 256; m.kv_lora = 128;
  m.qk_nope = 128; m.qk_rope = 64; m.v_head = 128;
  m.kda_heads = 2; m.kda_head_dim = 128; m.conv_taps = 4; m.f_rank = 32; m.kda_chunk = 64;
  m.dense_layers = 1; m.dense_inter = 1024;
  m.experts = 8; m.top_k = 2; m.moe_latent = 256; m.expert_inter = 128; m.shared_inter = 256;
  m.vocab = 4096;
  m.attnres_period = 2;
  return m;
}

}  // namespace

const std::vector<ModelKey>& model_keys() {
  static const std::vector<ModelKey> keys = {
      {"hidden", &ModelShape::hidden, 8, 65536},
      {"layers", &ModelShape::layers, 1, 1024},
      {"mla_period", &ModelShape::mla_period, 1, 1024},
      {"heads", &ModelShape::heads, 1, 1024},
      {"q_lora", &ModelShape::q_lora, 8, 65536},
      {"kv_lora", &ModelShape::kv_lora, 8, 65536},
      {"qk_nope", &ModelShape::qk_nope, 8, 512},
      {"qk_rope", &ModelShape::qk_rope, 0, 512},
      {"v_head", &ModelShape::v_head, 8, 512},
      {"kda_heads", &ModelShape::kda_heads, 1, 1024},
      {"kda_head_dim", &ModelShape::kda_head_dim, 8, 512},
      {"conv_taps", &ModelShape::conv_taps, 4, 4},
      {"f_rank", &ModelShape::f_rank, 1, 65536},
      {"kda_chunk", &ModelShape::kda_chunk, 16, 256},
      {"dense_layers", &ModelShape::dense_layers, 0, 1024},
      {"dense_inter", &ModelShape::dense_inter, 8, 1 << 20},
      {"experts", &ModelShape::experts, 1, 1024},  // moe_route.h: kMoeMaxExperts
      {"top_k", &ModelShape::top_k, 1, 32},  // moe_route.h: k <= min(E, 32)
      {"moe_latent", &ModelShape::moe_latent, 8, 65536},
      {"expert_inter", &ModelShape::expert_inter, 8, 65536},
      {"shared_inter", &ModelShape::shared_inter, 8, 1 << 20},
      {"vocab", &ModelShape::vocab, 2, 1 << 24},
      {"attnres_period", &ModelShape::attnres_period, 1, 1024},
  };
  return keys;
}

std::vector<std::string> model_preset_names() { return {"k3", "tiny"}; }

ModelShape model_preset(const std::string& name) {
  if (name == "k3") return k3();
  if (name == "tiny") return tiny();
  throw_error(__FILE__, __LINE__, "unknown model preset '" + name + "'; allowed: k3, tiny");
}

std::string model_inconsistency(const ModelShape& m) {
  if (m.top_k > m.experts) return "model.top_k must not exceed model.experts";
  if (m.v_head != 128) return "model.v_head must be 128 (the FMHA and merge kernels' value width)";
  if (m.d_qk() != 128 && m.d_qk() != 192)
    return "model.qk_nope + model.qk_rope must be 128 or 192 (the FMHA engines' head dims)";
  if (m.kda_head_dim != 128) return "model.kda_head_dim must be 128 (the KDA and o_norm_gate kernels' head width)";
  if (m.dense_layers > m.layers) return "model.dense_layers must not exceed model.layers";
  if (m.hidden % 8 || m.kda_inner() % 8 || m.moe_latent % 8 || m.expert_inter % 8 ||
      m.shared_inter % 8 || m.dense_inter % 8 || m.q_lora % 8 || m.kv_lora % 8)
    return "model widths (hidden, q_lora, kv_lora, kda inner, moe_latent, expert_inter, "
           "shared_inter, dense_inter) must be multiples of 8 (16-byte rows)";
  // 8 snapshot blocks per token (DESIGN §2.1: snapshots [rows, 8, hidden]).
  if (m.layers > 0 && (m.layers - 1) / m.attnres_period + 1 > 8)
    return "model.layers / model.attnres_period gives more than 8 AttnRes snapshot blocks";
  return "";
}

std::string scaled_width_problem(const ModelShape& m, const Precision& p) {
  struct Width {
    Format format;
    const char* what;
    int64_t value;
  };
  std::vector<Width> widths;
  if (p.gemm != Format::bf16)
    widths = {{p.gemm, "model.hidden (the projections' input)", m.hidden},
              {p.gemm, "model.q_lora (q_b's input)", m.q_lora},
              {p.gemm, "model.f_rank (the KDA forget gate's second projection's input)", m.f_rank},
              {p.gemm, "KDA inner = kda_heads * kda_head_dim (the KDA output projection's input)", m.kda_inner()},
              {p.gemm, "heads * v_head (the MLA output projection's input)", m.heads * m.v_head},
              {p.gemm, "model.moe_latent (lat_up's input)", m.moe_latent},
              {p.gemm, "model.shared_inter (the shared experts' down projection's input)", m.shared_inter},
              {p.gemm, "model.dense_inter (the dense FFN's down projection's input)", m.dense_inter}};
  if (p.experts != Format::bf16) {
    widths.push_back({p.experts, "model.moe_latent (the experts' gate|up input and down output)", m.moe_latent});
    widths.push_back({p.experts, "model.expert_inter (the experts' down input and gate|up bands)", m.expert_inter});
  }
  for (const Width& w : widths)
    if (w.value % 128 != 0)
      return std::string(format_name(w.format)) + " needs whole 128-column groups, and " + w.what + " is " +
             std::to_string(w.value) + ", not a multiple of 128";
  return "";
}

}  // namespace pb
