// llama.cpp's buffer of each weight, read in ggml-org/llama.cpp src/llama-model.cpp at commit
// 00342301d01add50835550e8a916f12097d94517 (llama_model::load_tensors, create_tensor): the
// tensor_buft_overrides are tried in order and the first whose std::regex is found in the
// tensor's name (std::regex_search) gives the buffer type; otherwise the buffer list of the
// tensor's layer (dev_input for token_embd: the CPU; dev_layer[il]; dev_output), whose first
// type that supports the weight's op wins. Under --split-mode row that is the CUDA split buffer
// for a matrix multiplied with GGML_OP_MUL_MAT, unless the device would hold none of its rows
// (ggml_backend_cuda_device_supports_op); experts (GGML_OP_MUL_MAT_ID), norms and biases take
// the device's own buffer. A tied output is token_embd created again with TENSOR_DUPLICATED in
// the output's buffer, reused when that is token_embd's own buffer. --override-tensor's buffer
// names are the devices' buffer types (common/arg.cpp, parse_tensor_buffer_overrides): CPU,
// CUDA0, CUDA1, ...
#include "serve/llama_cpp_tensors.hpp"

#include <memest/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <regex>
#include <set>

namespace memest {
namespace {

// std::regex backtracks (libstdc++ and libc++ alike, as in llama.cpp itself), so a repeated
// group that itself holds a repeat takes exponential time on a name, and a chain of repeats a
// high power of its length; such patterns are refused rather than left to run.
constexpr int kMostRepeats = 2;

void check_pattern_cost(const std::string& p, std::string_view flag) {
  std::vector<char> group_repeats;  // per open group: whether it holds a repeat
  int repeats = 0;
  bool after_repeating_group = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    bool closed_repeating = false;
    if (c == '\\') {
      ++i;
    } else if (c == '[') {  // a class: its ( ) * + { are characters
      i += i + 1 < p.size() && p[i + 1] == '^' ? 2U : 1U;
      if (i < p.size() && p[i] == ']') ++i;
      while (i < p.size() && p[i] != ']') i += p[i] == '\\' ? 2U : 1U;
    } else if (c == '(') {
      group_repeats.push_back(0);
    } else if (c == ')' && !group_repeats.empty()) {
      closed_repeating = group_repeats.back() != 0;
      group_repeats.pop_back();
    } else if (c == '*' || c == '+' || c == '{') {
      if (after_repeating_group) {
        throw Error(fmt::format(
            "{}: \"{}\" repeats a group that repeats (std::regex would take exponential time)",
            flag, p));
      }
      ++repeats;
      std::fill(group_repeats.begin(), group_repeats.end(), 1);
      if (c == '{') i = std::min(p.find('}', i), p.size());
    }
    after_repeating_group = closed_repeating;
  }
  if (repeats > kMostRepeats) {
    throw Error(
        fmt::format("{}: \"{}\" has {} repeats (*, + or {{}}); at most {} are taken "
                    "(std::regex backtracks)",
                    flag, p, repeats, kMostRepeats));
  }
}

// --override-tensor's rules: each pattern's device (kLlamaHost for CPU).
TensorRules<int> compile_overrides(const LlamaCppSettings& s, const LlamaCppPlacement& p) {
  TensorRules<int> out;
  for (const auto& [pattern, buft] : s.overrides) {
    int device = kLlamaHost;
    if (buft != "CPU") {
      const auto it = std::find(p.names.begin(), p.names.end(), buft);
      if (it == p.names.end()) {
        throw Error(fmt::format(
            "--override-tensor: unknown buffer type \"{}\" (expected CPU or a device: {})", buft,
            fmt::join(p.names, ", ")));
      }
      device = static_cast<int>(it - p.names.begin());
    }
    out.add(tensor_pattern(pattern, "--override-tensor"), device);
  }
  return out;
}

// The tensor's device before any override: the input layer on the CPU, then its layer's.
int default_device(const LlamaTensor& t, const LlamaCppPlacement& p) {
  if (t.input) return kLlamaHost;
  if (t.layer) return *t.layer < p.layer_device.size() ? p.layer_device[*t.layer] : kLlamaHost;
  return p.output_device;
}

// Where the bytes go: `device` of the placement, split by rows when `split`.
struct Buffer {
  int device = kLlamaHost;
  bool split = false;
  bool operator==(const Buffer&) const = default;
};

Buffer buffer_of(const LlamaTensor& t, const LlamaCppPlacement& p, TensorRules<int>& overrides,
                 bool* overridden) {
  const std::optional<int> o = overrides.find(t.name);
  *overridden = o.has_value();
  if (o) return {*o, false};
  const int d = default_device(t, p);
  if (d == kLlamaHost || !p.row || !t.matrix) return {d, false};
  const auto [low, high] = llama_cpp_row_range(p, t.rows, static_cast<std::size_t>(d));
  return {d, high > low};
}

}  // namespace

LlamaWeightBytes place_llama_cpp_weights(const std::vector<LlamaTensor>& tensors,
                                         const LlamaCppPlacement& p, const LlamaCppSettings& s) {
  TensorRules<int> overrides = compile_overrides(s, p);
  LlamaWeightBytes w;
  w.device.assign(p.names.size(), 0);
  std::optional<Buffer> embd;  // token_embd's buffer, for a tied copy
  std::set<std::string> moved;
  for (const LlamaTensor& t : tensors) {
    bool overridden = false;
    const Buffer b = buffer_of(t, p, overrides, &overridden);
    if (t.input && !t.tied_copy) embd = b;
    if (t.tied_copy && embd && *embd == b) continue;  // the same buffer: token_embd reused
    if (overridden) moved.insert(t.name);
    if (b.device == kLlamaHost) {
      w.host = checked_add(w.host, t.bytes);
    } else if (b.split) {
      const auto parts = llama_cpp_row_split_bytes(p, t.rows, t.ne0, t.bytes / t.rows, t.pad_bytes);
      for (std::size_t d = 0; d < parts.size(); ++d)
        w.device[d] = checked_add(w.device[d], parts[d]);
    } else {
      auto& slot = w.device[static_cast<std::size_t>(b.device)];
      slot = checked_add(slot, t.bytes);
    }
  }
  w.overridden = moved.size();
  return w;
}

std::vector<int> llama_cpp_devices(const std::vector<LlamaTensor>& tensors,
                                   const LlamaCppPlacement& p, const LlamaCppSettings& s) {
  TensorRules<int> overrides = compile_overrides(s, p);
  std::vector<int> out;
  out.reserve(tensors.size());
  for (const LlamaTensor& t : tensors) {
    bool overridden = false;
    out.push_back(buffer_of(t, p, overrides, &overridden).device);
  }
  return out;
}

std::vector<bool> llama_cpp_on_host(const std::vector<LlamaTensor>& tensors,
                                    const LlamaCppPlacement& p, const LlamaCppSettings& s) {
  const std::vector<int> devices = llama_cpp_devices(tensors, p, s);
  std::vector<bool> out(devices.size());
  for (std::size_t i = 0; i < devices.size(); ++i) out[i] = devices[i] == kLlamaHost;
  return out;
}

std::regex tensor_pattern(const std::string& pattern, std::string_view flag) {
  check_pattern_cost(pattern, flag);
  try {
    return std::regex(pattern);
  } catch (const std::regex_error& e) {
    throw Error(
        fmt::format("{}: \"{}\" is not a regular expression ({})", flag, pattern, e.what()));
  }
}

}  // namespace memest
