#pragma once
// Serving memory (docs/serving.md): what an inference engine allocates on each device for a
// model: the weights in their stored format, the KV cache, and the engine's other reserves.

#include <memest/dtype.hpp>
#include <memest/model.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memest {

/// The inference engine whose allocation is modelled; hf is Hugging Face transformers'
/// model.generate() on one GPU.
enum class ServeEngine { vllm, llama_cpp, sglang, hf };

/// How a model's attention layers keep keys and values, as its config.json states it.
struct AttentionLayers {
  std::uint64_t full = 0;     ///< layers that attend to the whole context
  std::uint64_t sliding = 0;  ///< layers that attend to the last `window` tokens only
  std::uint64_t window = 0;   ///< sliding_window in tokens; 0 when no layer slides
};

/// The attention layers of a config.json text (the top level, or `text_config` of a multimodal
/// one) with `num_layers` layers: `layer_types` when given ("sliding_attention" /
/// "full_attention"), else Gemma-3's sliding_window_pattern (every pattern-th layer full),
/// Gemma-2's alternation (even layers slide), a use_sliding_window of false (Qwen2: none), or a
/// sliding_window on every layer (Mistral). Throws Error `<source>: /key: ...` on a bad value.
AttentionLayers read_attention_layers(std::string_view config_text, const std::string& source,
                                      std::uint64_t num_layers);

/// One rotary cos/sin table vLLM's get_rope builds as a buffer of the model (one per distinct
/// setting, shared by the layers that use it): positions x rotary_dim in the model dtype.
struct RopeTable {
  std::uint64_t positions = 0;   ///< max_position_embeddings, x the factor of a scaled rope
  std::uint64_t rotary_dim = 0;  ///< head_dim x partial_rotary_factor (MLA: qk_rope_head_dim)
  bool sliding = false;          ///< made by the first sliding layer (Gemma-3's local rope)
  bool linear = false;           ///< linear scaling: t / factor and one more concatenation
};

/// The rotary tables a config's layers make in vLLM v0.19 (rotary_embedding/__init__.py get_rope):
/// default, llama3, linear, dynamic, yarn and deepseek_yarn ropes; Gemma-3's sliding layers
/// add their local rope. `max_position` is the config's max_position_embeddings. Empty for
/// learned positions and for rope types not modelled.
std::vector<RopeTable> read_rope_tables(std::string_view config_text, const Architecture& arch,
                                        const AttentionLayers& layers, std::uint64_t max_position);

/// A model as the serving estimate reads it.
struct ServeModel {
  ModelSpec spec;
  AttentionLayers attention;
  Dtype dtype = Dtype::bf16;        ///< torch_dtype of the config (fp32 configs serve in bf16)
  bool config_fp32 = false;         ///< the config's torch_dtype is float32 (hf loads it so)
  std::uint64_t max_positions = 0;  ///< max_position_embeddings; 0 when the config has none
  std::vector<RopeTable> rope;      ///< vLLM's rotary tables (read_rope_tables)
};

/// The model `--model NAME` or `--config PATH` names (as for training: preset, Hub id, local
/// cache or folder), with its attention layers read from the same config.json.
ServeModel load_serve_model(const std::string& name, const std::string& config_path);

/// Bytes a quantised KV-cache type stores per `block` elements (ggml's type traits).
struct GgmlType {
  std::string_view name;  ///< "f16", "q8_0", ...
  std::uint64_t block;    ///< elements per block
  std::uint64_t bytes;    ///< bytes per block, scales included
};

/// The ggml types llama.cpp's --cache-type-k/-v accept, with their block sizes.
std::span<const GgmlType> ggml_cache_types();
/// Their names, in the same order ("f32", "f16", ...).
std::span<const std::string_view> ggml_cache_type_names();

/// vLLM's --kv-cache-dtype values modelled: auto (the model's dtype) and the fp8 ones
/// (CacheDType in vllm/config/cache.py).
std::span<const std::string_view> vllm_kv_cache_dtypes();
/// vLLM's --quantization methods modelled (names of vllm/model_executor/layers/quantization).
std::span<const std::string_view> vllm_quantization_methods();
/// vLLM's --dtype values: auto (the config's), bfloat16 and float16 with their short spellings.
std::span<const std::string_view> vllm_dtype_names();

/// vLLM's settings, named as its flags (defaults of vLLM v0.19.0's OpenAI server on a GPU).
struct VllmSettings {
  std::uint64_t total_memory = 0;  ///< torch.cuda.mem_get_info()'s total, bytes
  double gpu_memory_utilization = 0.9;
  std::uint64_t max_model_len = 0;  ///< 0: the model's max_position_embeddings
  std::uint64_t max_num_seqs = 1024;
  std::uint64_t max_num_batched_tokens = 0;  ///< 0: 8192 with chunked prefill
  std::uint64_t tensor_parallel_size = 1;
  std::uint64_t block_size = 16;
  std::string kv_cache_dtype = "auto";  ///< auto, fp8, fp8_e4m3, fp8_e5m2
  std::string quantization;             ///< empty, fp8, compressed-tensors (fp8 checkpoints)
  std::optional<Dtype> dtype;           ///< --dtype; else the config's
  bool enforce_eager = false;
  std::optional<std::uint64_t> kv_cache_memory;   ///< --kv-cache-memory: skips the profile
  std::optional<std::uint64_t> non_torch_memory;  ///< stated non-torch increase, bytes
  /// The --gpu preset's multiprocessors and compute capability x 10 (default h100-80gb's):
  /// the sampler's Triton buffer and PyTorch's cuBLAS workspace are sized by them.
  std::uint64_t compute_units = 132;
  std::uint32_t sm = 90;
};

/// SGLang's --kv-cache-dtype values modelled: auto (the model's dtype), fp8_e5m2 and fp8_e4m3
/// (server_args.py).
std::span<const std::string_view> sglang_kv_cache_dtypes();
/// SGLang's --dtype values modelled: auto (the config's), half, float16 and bfloat16.
std::span<const std::string_view> sglang_dtype_names();

/// SGLang's settings, named as its flags (server_args.py's ServerArgs); absent: SGLang's default.
struct SglangSettings {
  std::uint64_t total_memory =
      0;  ///< the GPU's memory, bytes (free at start: the CUDA context out)
  std::optional<double> mem_fraction_static;
  std::uint64_t context_length = 0;  ///< 0: the model's max_position_embeddings
  std::optional<std::uint64_t> max_running_requests;
  std::optional<std::uint64_t> max_total_tokens;
  std::optional<std::uint64_t> chunked_prefill_size;
  std::optional<std::uint64_t> cuda_graph_max_bs;
  std::uint64_t page_size = 1;
  std::uint64_t tp_size = 1;
  std::string kv_cache_dtype = "auto";  ///< auto, fp8_e5m2, fp8_e4m3
  std::string quantization;             ///< vLLM's method names (fp8, gptq, awq, ...)
  std::optional<Dtype> dtype;           ///< --dtype; else the config's
  bool disable_cuda_graph = false;
};

/// SGLang's memory defaults on a GPU (server_args.py, _handle_gpu_memory_settings): the chunked
/// prefill and the largest CUDA-graph batch by GPU memory and TP, the memory reserved for
/// activations and graphs, and mem_fraction_static = (total - reserved) / total, rounded to 3
/// decimals.
struct SglangMemoryDefaults {
  std::uint64_t chunked_prefill_size = 0;
  std::uint64_t cuda_graph_max_bs = 0;
  double reserved_mib = 0;
  double mem_fraction_static = 0;
};
SglangMemoryDefaults sglang_memory_defaults(const SglangSettings& settings);

/// SGLang's budget for the weights and the KV pool: mem_fraction_static (given, else the
/// default) x the total, rounded down to a byte. Throws Error when the default is not positive.
std::uint64_t sglang_budget(const SglangSettings& settings);

/// llama.cpp's settings, named as its flags.
struct LlamaCppSettings {
  std::uint64_t ctx_size = 0;       ///< 0: the model's max_position_embeddings
  std::uint64_t parallel = 1;       ///< --parallel: sequences sharing the context
  std::uint64_t batch_size = 2048;  ///< --batch-size: tokens per llama_decode call
  std::uint64_t ubatch_size = 512;  ///< --ubatch-size: tokens per graph evaluation
  std::string cache_type_k = "f16";
  std::string cache_type_v = "f16";
  std::uint64_t n_gpu_layers = 999;  ///< layers (weights and KV cache) on the GPU
  bool flash_attn = false;
  bool mla = false;  ///< MLA models: cache the latent (ik_llama.cpp -mla 2/3), K only
  /// ik_llama.cpp's -fmoe: a MoE layer's up and gate experts in one op (ggml_moe_up_gate).
  bool fused_moe = false;
  /// ik_llama.cpp's -amb: the MiB an MLA layer's f32 keys and values of one group of heads may
  /// take on its prompt path (the heads halved until they fit); 0: all heads at once.
  std::uint64_t attn_max_batch = 0;
  std::string quantization;  ///< GGUF file type ("Q4_K_M", ...); empty: weights not sized
  /// The quantizer whose type rules made the file: "current" (src/llama-quant.cpp at 007dbbf3)
  /// or "2023-12" (llama.cpp at caf5f9e6, where Mixtral's first GGUF files come from).
  std::string quantizer = "current";
  /// --custom-q REGEX=TYPE pairs, in order (ik_llama.cpp's llama-quantize --custom-q): the first
  /// pattern found in a quantised tensor's name gives its ggml type over the file type's rules.
  std::vector<std::pair<std::string, std::string>> custom_q;
  /// --device: the GPUs llama.cpp uses, by name (empty: one, CUDA0); --split-mode none, layer
  /// or row; --tensor-split: each device's share (empty: by free memory, equal devices here);
  /// --main-gpu: the one device of --split-mode none.
  std::vector<std::string> device_names;
  std::string split_mode = "layer";
  std::vector<double> tensor_split;
  std::uint64_t main_gpu = 0;
  /// --override-tensor PATTERN=BUFT pairs, in order: the first pattern found in a tensor's
  /// name (std::regex_search) puts it in that buffer ("CPU", "CUDA0", ...).
  std::vector<std::pair<std::string, std::string>> overrides;
  /// --sched-copies: the build's GGML_SCHED_MAX_COPIES, the copies of each split's inputs
  /// pipeline parallelism keeps (4; 1 for a build that sets it to 1).
  std::uint64_t sched_copies = 4;
  /// Whether the estimate reports each device and the host (the multi-GPU flags given).
  bool per_device = false;
};

/// Hugging Face transformers' names: from_pretrained's torch_dtype (auto, bfloat16, float16,
/// float32), the bitsandbytes modes of --quantization, attn_implementation and generate's
/// cache_implementation.
std::span<const std::string_view> hf_dtype_names();
std::span<const std::string_view> hf_quantization_names();
std::span<const std::string_view> hf_attn_implementations();
std::span<const std::string_view> hf_cache_implementations();

/// transformers' model.generate() on one GPU, named as generate() and from_pretrained() take
/// its arguments (docs/serving.md).
struct HfSettings {
  std::uint64_t total_memory = 0;  ///< the device's memory, bytes
  std::uint64_t batch_size = 1;    ///< sequences generated at once (input_ids' rows)
  std::uint64_t prompt_len = 0;    ///< input_ids' length, no padding
  std::uint64_t max_new_tokens = 0;
  std::optional<Dtype> dtype;                    ///< torch_dtype; absent: "auto", the config's
  std::string quantization;                      ///< empty, bnb-4bit, bnb-8bit
  std::string attn_implementation = "sdpa";      ///< sdpa, eager, flash_attention_2
  std::string cache_implementation = "dynamic";  ///< dynamic, static, offloaded, quantized
};

/// What one GPU of a llama.cpp launch holds (llama_model::load_tensors, llama_kv_cache).
struct ServeDevice {
  std::string name;                        ///< "CUDA0", ...
  std::uint64_t layers = 0;                ///< repeating layers assigned to it
  bool output = false;                     ///< it holds the output layer
  std::uint64_t weights_bytes = 0;         ///< its buffers, the split buffer's rows included
  std::uint64_t kv_bytes = 0;              ///< the KV cache of its layers
  std::uint64_t compute_buffer_bytes = 0;  ///< its share of the graph (0 without layers)
};

/// What one device holds. Bytes are per device; a figure the engine does not have is absent.
struct ServeEstimate {
  ServeEngine engine = ServeEngine::vllm;
  std::string model;
  std::uint64_t devices = 1;
  std::optional<std::uint64_t> weights_bytes;  ///< absent: llama.cpp without --quantization
  std::string weights_basis;
  std::uint64_t kv_bytes_per_token = 0;  ///< per device, every layer (padding layers included)
  std::uint64_t kv_bytes = 0;
  std::uint64_t kv_tokens = 0;
  std::optional<std::uint64_t> kv_blocks;
  std::string kv_basis;
  std::optional<std::uint64_t> activation_peak_bytes;  ///< vLLM's profile run, torch peak
  std::string activation_basis;
  std::optional<std::uint64_t> compute_buffer_bytes;  ///< llama.cpp: one micro-batch's graph
  std::string compute_basis;
  std::optional<std::uint64_t> non_torch_bytes;
  std::string non_torch_basis;
  std::optional<std::uint64_t> cuda_graphs_bytes;  ///< 0 with --enforce-eager; absent: not modelled
  std::string cuda_graphs_basis;                   ///< vLLM: the sizes captured, or why none
  std::optional<std::uint64_t> budget_bytes;       ///< gpu_memory_utilization x total
  std::string budget_basis = "gpu_memory_utilization x total";
  std::optional<double> max_concurrency;  ///< requests of max_model_len at once
  std::uint64_t context = 0;              ///< max_model_len or ctx_size
  /// vLLM: whether one request of max_model_len fits the KV memory (else vLLM refuses to start),
  /// and the longest max_model_len that would.
  bool fits = true;
  std::optional<std::uint64_t> largest_context;
  /// vLLM: the memory the KV cache is given (before it is cut into blocks), what one request of
  /// max_model_len needs summed over its layers (check_enough_kv_cache_memory), and the blocks
  /// one such request takes over the groups (what max_concurrency divides by).
  std::optional<std::uint64_t> kv_memory_bytes;
  std::optional<std::uint64_t> request_kv_bytes;
  std::optional<std::uint64_t> request_blocks;
  /// SGLang: the request pool (req_to_token: requests x (context_len + 4) int32 slots), its
  /// bytes, and max_running_requests, the requests served at once.
  std::optional<std::uint64_t> request_pool_size;
  std::optional<std::uint64_t> request_pool_bytes;
  std::optional<std::uint64_t> max_running_requests;
  /// SGLang's hybrid sliding-window pool: tokens of the sliding layers' pool (the full layers'
  /// are kv_tokens).
  std::optional<std::uint64_t> swa_tokens;
  std::vector<std::string> notes;
  /// llama.cpp: every device, and what stays in host memory; shown (table rows, JSON
  /// "per_device" and "host") when the multi-GPU flags are given.
  std::vector<ServeDevice> per_device;
  bool devices_shown = false;
  std::optional<std::uint64_t> host_weights_bytes;
  std::optional<std::uint64_t> host_kv_bytes;
  /// llama.cpp: the CPU backend's compute buffer (the graph's inputs and the token embeddings'
  /// rows), when every layer is on the GPUs.
  std::optional<std::uint64_t> host_compute_buffer_bytes;
  /// hf: the most the torch allocator holds at once (weights, KV cache and the forward's
  /// tensors), what `fits` compares with the device's memory; and where it falls.
  std::optional<std::uint64_t> peak_bytes;
  std::string peak_basis;
  /// hf: the cache on the device at that moment (the prompt's or the last decode step's).
  std::optional<std::uint64_t> peak_cache_bytes;
};

/// vLLM's budget on a device: gpu_memory_utilization x the total, rounded down to a byte (what
/// the KV cache is cut from: docs/serving.md).
std::uint64_t vllm_budget(const VllmSettings& settings);

/// vLLM's allocation on each tensor-parallel rank (docs/serving.md). Throws Error for settings
/// that leave no memory for the KV cache or that the model cannot take.
ServeEstimate estimate_vllm(const ServeModel& model, const VllmSettings& settings);

/// SGLang's pools on each tensor-parallel rank (docs/serving.md): the token-to-KV pool that
/// profile_max_num_token sizes, its SWA split, and the req_to_token pool. Throws Error for
/// settings the model cannot take.
ServeEstimate estimate_sglang(const ServeModel& model, const SglangSettings& settings);

/// llama.cpp's KV cache (llama_kv_cache: n_ctx cells, ggml block sizes). Throws Error for an
/// unknown cache type.
ServeEstimate estimate_llama_cpp(const ServeModel& model, const LlamaCppSettings& settings);

/// transformers' model.generate() (a version named in src/serve/serve_hf.cpp): the weights, the
/// KV cache as the cache class allocates it and the forward's peak, and whether their peak fits
/// the device. Throws Error for settings it does not model.
ServeEstimate estimate_hf(const ServeModel& model, const HfSettings& settings);

/// What `memest serve` prints and its exit code: 0, or 1 when vLLM would refuse to start.
struct ServeOutput {
  std::string text;
  int exit_code = 0;
  std::string plot_path;  ///< --plot FILE.svg; empty when not asked
  std::string plot;       ///< the SVG picture for it, which the caller writes
};

/// `memest serve ARGS...`: parses the serve flags, estimates and renders (table or JSON).
/// Throws Error naming the flag for bad input.
ServeOutput serve_command(std::span<const std::string> args);

}  // namespace memest
