// `--model NAME` beyond the preset names: a preset's Hub id, or the config.json of a Hub id in
// the local Hugging Face cache (the layout huggingface_hub writes: models--<org>--<name>/refs/main
// holds the commit, snapshots/<commit>/config.json the file). Reads the disk, never the network.
#include <memest/error.hpp>
#include <memest/hf_config.hpp>
#include <memest/suggest.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

namespace memest {
namespace {

namespace fs = std::filesystem;

bool same_id(std::string_view x, std::string_view y) {
  return std::equal(x.begin(), x.end(), y.begin(), y.end(), [](char c, char d) {
    return std::tolower(static_cast<unsigned char>(c)) ==
           std::tolower(static_cast<unsigned char>(d));
  });
}

// "Qwen/Qwen3-8B": one slash with text on both sides, as Hub repository ids are written.
bool looks_like_hub_id(std::string_view name) {
  const auto slash = name.find('/');
  return slash != std::string_view::npos && slash > 0 && slash + 1 < name.size() &&
         name.find('/', slash + 1) == std::string_view::npos && !name.ends_with(".json");
}

// The snapshot's config.json: the commit refs/main names, else the only snapshot that has one.
// Empty when the repository is not cached; throws when several snapshots leave it ambiguous.
std::string cached_config(const fs::path& repo, std::string_view id) {
  std::error_code ec;
  if (!fs::is_directory(repo / "snapshots", ec)) return "";
  // refs/main holds a 40-character hash: anything but a small regular file (a FIFO, a link to
  // /dev/zero) is not read, as no config file is (docs/hardening.md).
  const fs::path ref_path = repo / "refs" / "main";
  std::string commit;
  if (fs::is_regular_file(ref_path, ec) && fs::file_size(ref_path, ec) <= 4096 && !ec) {
    std::ifstream ref(ref_path);
    std::getline(ref, commit);
  }
  if (!commit.empty()) {
    const fs::path file = repo / "snapshots" / commit / "config.json";
    if (fs::is_regular_file(file, ec)) return file.string();
  }
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(repo / "snapshots", ec)) {
    if (fs::is_regular_file(e.path() / "config.json", ec)) {
      found.push_back((e.path() / "config.json").string());
    }
  }
  std::sort(found.begin(), found.end());
  if (found.size() > 1) {
    throw Error(fmt::format(
        "model \"{}\": the local Hugging Face cache has {} snapshots with a config.json and no "
        "refs/main to choose: pass --config with one of {}",
        id, found.size(), fmt::join(found, ", ")));
  }
  return found.empty() ? "" : found.front();
}

// The presets closest to a Hub id no preset has: the longest preset name that begins the id's
// name (an "-Instruct" or "-hf" of a preset), else did_you_mean over the names, case aside.
std::string closest_presets(std::string_view id) {
  std::string query(id.substr(id.find('/') + 1));
  std::transform(query.begin(), query.end(), query.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::vector<PresetInfo> presets = model_presets();  // `names` points into it
  std::vector<std::string_view> names;
  std::string_view longest;
  for (const PresetInfo& p : presets) {
    names.push_back(p.name);
    const bool begins =
        query.starts_with(p.name) && (query.size() == p.name.size() || query[p.name.size()] == '-');
    if (begins && p.name.size() > longest.size()) longest = p.name;
  }
  if (!longest.empty()) return fmt::format(" (did you mean \"{}\"?)", longest);
  return did_you_mean(query, names);
}

}  // namespace

std::string hf_hub_cache(const char* (*env)(const char*)) {
  const auto get = [&](const char* name) -> std::string {
    const char* v = env(name);
    return v != nullptr ? std::string(v) : std::string();
  };
  if (std::string v = get("HF_HUB_CACHE"); !v.empty()) return v;
  if (const std::string v = get("HF_HOME"); !v.empty()) return v + "/hub";
  if (const std::string v = get("XDG_CACHE_HOME"); !v.empty()) return v + "/huggingface/hub";
  if (const std::string v = get("HOME"); !v.empty()) return v + "/.cache/huggingface/hub";
  return "";
}

ModelSpec load_named_model(std::string_view name, const std::string& hub_cache) {
  // A local model folder (what save_pretrained or a Hub download writes): its config.json.
  std::error_code ec;
  if (const fs::path folder(name); fs::is_directory(folder, ec)) {
    const fs::path file = folder / "config.json";
    if (!fs::is_regular_file(file, ec)) {
      throw Error(
          fmt::format("model \"{}\": a folder without a config.json (expected a model "
                      "folder as save_pretrained writes it, a preset name or a Hub id)",
                      name));
    }
    ModelSpec m = load_hf_config(file.string());
    m.name = std::string(name);
    m.source = file.string();
    return m;
  }
  if (!looks_like_hub_id(name)) return load_model_preset(name);
  for (const PresetInfo& p : model_presets()) {
    if (same_id(p.hub_id, name)) {
      ModelSpec m = load_model_preset(p.name);
      m.source = fmt::format("preset \"{}\" (the config.json of {})", p.name, p.hub_id);
      return m;
    }
  }
  // huggingface_hub's folder name: "models--" + the id with "/" replaced by "--".
  std::string folder = "models--" + std::string(name);
  folder.replace(folder.find('/'), 1, "--");
  if (!hub_cache.empty()) {
    const std::string file = cached_config(fs::path(hub_cache) / folder, name);
    if (!file.empty()) {
      ModelSpec m = load_hf_config(file);
      m.name = std::string(name);
      m.source = file;
      return m;
    }
  }
#ifdef __EMSCRIPTEN__
  // The web page (web/): no Hugging Face cache and no network, only what the page offers.
  throw Error(fmt::format(
      "model \"{}\": no preset has this Hub id{}; this page knows only memest's presets (the "
      "list of the model field) and a model's config.json pasted into the config field",
      name, closest_presets(name)));
#else
  throw Error(fmt::format(
      "model \"{}\": no preset has this Hub id{} and the local Hugging Face cache ({}) has no "
      "{}/snapshots/*/config.json; fetch it with `huggingface-cli download {} config.json` and "
      "run again, or pass --config PATH (memest never uses the network)",
      name, closest_presets(name),
      hub_cache.empty() ? "not found: HF_HUB_CACHE, HF_HOME and HOME are unset" : hub_cache, folder,
      name));
#endif
}

}  // namespace memest
