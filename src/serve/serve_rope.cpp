// vLLM's rotary tables: RotaryEmbedding registers its cos/sin cache as a buffer
// (register_buffer("cos_sin_cache"), rotary_embedding/base.py), positions x rotary_dim in the
// dtype get_rope is given, else torch's default dtype, the model's while the model is built;
// get_rope (rotary_embedding/__init__.py) keeps one per distinct (head size, rotary dim, max
// position, rope parameters, dtype), so the layers of one setting share it. Rows: the
// max_position the model passes (max_position_embeddings), times the factor for linear
// (linear_scaling_rope.py) and dynamic NTK scaling, original_max_position_embeddings times the
// factor for YaRN and DeepSeek's YaRN; llama3 keeps max_position. Gemma-3 (models/gemma3.py)
// gives its sliding layers a default rope of rope_local_base_freq: a second table. All read in
// vLLM at 494636b2 (the v0.19.0 branch point).
#include <memest/serve.hpp>

#include <nlohmann/json.hpp>

#include <cmath>

namespace memest {

namespace {

using Json = nlohmann::json;
using u64 = std::uint64_t;

const Json& text_of(const Json& root) {
  const auto it = root.find("text_config");
  return it != root.end() && it->is_object() ? *it : root;
}

double number(const Json& o, const char* key, double fallback) {
  const auto it = o.find(key);
  return it != o.end() && it->is_number() ? it->get<double>() : fallback;
}

// One table of a rope setting `r` (rope_scaling, or one layer type's rope_parameters); nullopt
// when its type is not modelled or its numbers are not usable.
std::optional<RopeTable> table_of(const Json& r, u64 max_position, u64 rotary_dim) {
  std::string type = "default";
  if (r.is_object()) type = r.value("rope_type", r.value("type", std::string("default")));
  const double factor = r.is_object() ? number(r, "factor", 0) : 0;
  double rows = static_cast<double>(max_position);
  if (type == "linear" || type == "dynamic") {
    rows *= factor;
  } else if (type == "yarn" || type == "deepseek_yarn") {
    rows = number(r, "original_max_position_embeddings", 0) * factor;
  } else if (type != "default" && type != "llama3") {
    return std::nullopt;  // longrope, mrope and the others: not modelled
  }
  if (!(rows >= 1) || rows > 1e12) return std::nullopt;
  return RopeTable{.positions = static_cast<u64>(std::ceil(rows)),
                   .rotary_dim = rotary_dim,
                   .linear = type == "linear"};
}

}  // namespace

std::vector<RopeTable> read_rope_tables(std::string_view config_text, const Architecture& a,
                                        const AttentionLayers& layers, u64 max_position) {
  const Json root = Json::parse(config_text, nullptr, false, true);
  if (!root.is_object() || a.max_positions > 0) return {};  // learned positions: no rope
  const Json& c = text_of(root);
  const double partial = number(c, "partial_rotary_factor", 1.0);
  if (!(partial > 0.0) || partial > 1.0) return {};  // get_rope raises a ValueError
  const u64 head = a.kv_lora_rank > 0 ? a.qk_rope_head_dim : a.head_dim;
  const u64 rotary_dim = static_cast<u64>(static_cast<double>(head) * partial);
  if (max_position == 0 || rotary_dim == 0) return {};
  const Json none;
  const auto rs = c.find("rope_scaling");
  const auto rp = c.find("rope_parameters");
  const Json& global = rs != c.end() && !rs->is_null() ? *rs : rp != c.end() ? *rp : none;
  std::vector<RopeTable> out;
  const bool per_type = global.is_object() && global.contains("full_attention");
  if (auto t = table_of(per_type ? global["full_attention"] : global, max_position, rotary_dim)) {
    out.push_back(*t);
  }
  const bool local = c.contains("rope_local_base_freq") || per_type ||
                     c.value("model_type", std::string()) == "gemma3_text";
  if (local && layers.sliding > 0) {
    const Json& l =
        per_type && global.contains("sliding_attention") ? global["sliding_attention"] : none;
    if (auto t = table_of(l, max_position, rotary_dim)) {
      t->sliding = true;
      out.push_back(*t);
    }
  }
  return out;
}

}  // namespace memest
