// Model loading as one value: --model-loading, or the older flags it replaces.
#include "input/model_loading.hpp"

#include <memest/error.hpp>

namespace memest {
namespace {

template <typename Parse>
auto parse_named(const Setting<std::string>& s, Parse parse) {
  try {
    return parse(s.value);
  } catch (const Error& e) {
    rethrow_with_context(e, s.where);
  }
}

bool on(const FlagSetting& s) { return s && s->value; }

}  // namespace

ModelLoading model_loading_of(const RunOptions& o) {
  if (o.model_loading) return parse_named(*o.model_loading, parse_model_loading);
  const QloraInit init =
      o.qlora_init ? parse_named(*o.qlora_init, parse_qlora_init) : QloraInit::none;
  const bool clones = on(o.layer_clones);
  switch (init) {
    case QloraInit::whole:
      return clones ? ModelLoading::layer_clones_nf4_whole : ModelLoading::nf4_whole;
    case QloraInit::chunked:
      return clones ? ModelLoading::layer_clones_nf4_chunked : ModelLoading::nf4_chunked;
    case QloraInit::none:
      break;
  }
  if (clones) return ModelLoading::layer_clones;
  if (on(o.fsdp_sync_module_states)) return ModelLoading::fsdp_sync;
  if (on(o.load_full)) return ModelLoading::full;
  return ModelLoading::none;
}

}  // namespace memest
