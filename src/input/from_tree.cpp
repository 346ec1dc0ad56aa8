// memest --from: the flat form every reader gives, and the reader that needs no library (a
// Megatron-LM command line kept in a file).
#include "input/from_tree.hpp"

#include <memest/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace memest {

const FromValue* FromTree::find(std::string_view path) const {
  const auto it = std::find_if(values.begin(), values.end(),
                               [&](const FromValue& v) { return v.path == path; });
  return it == values.end() ? nullptr : &*it;
}

bool FromTree::has_under(std::string_view prefix) const {
  return std::any_of(values.begin(), values.end(), [&](const FromValue& v) {
    return v.path == prefix || (v.path.size() > prefix.size() && v.path.starts_with(prefix) &&
                                v.path[prefix.size()] == '.');
  });
}

void FromTree::set(const std::string& path, const std::string& text, const std::string& where) {
  remove(path);
  FromValue v{path, text, text == "None" || text == "null" || text == "~", false, {}, where};
  if (v.null) v.text.clear();
  // [a, b]: a list, as OmegaConf's dotlist reads it.
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    v.list = true;
    std::string item;
    for (const char c : text.substr(1, text.size() - 2) + ",") {
      if (c != ',') {
        if (c != ' ' && c != '\'' && c != '"') item += c;
        continue;
      }
      if (!item.empty()) v.items.push_back(item);
      item.clear();
    }
  }
  values.push_back(std::move(v));
}

bool FromTree::remove(std::string_view path) {
  const auto before = values.size();
  std::erase_if(values, [&](const FromValue& v) {
    return v.path == path ||
           (v.path.size() > path.size() && v.path.starts_with(path) && v.path[path.size()] == '.');
  });
  return values.size() != before;
}

std::string_view from_format_name(FromFormat f) {
  static constexpr std::array<std::string_view, 8> kNames = {
      "torchtune", "litgpt",        "torchtitan", "megatron",
      "deepspeed", "training_args", "axolotl",    "accelerate"};
  return kNames[static_cast<std::size_t>(f)];
}

std::string_view from_format_stack(FromFormat f) {
  if (f == FromFormat::deepspeed) return "";
  if (f == FromFormat::accelerate) return "";  // the launcher of any loop
  const bool trainer = f == FromFormat::training_args || f == FromFormat::axolotl;
  return trainer ? "hf" : from_format_name(f);
}

bool from_bool(const std::string& s, const std::string& where) {
  // YAML 1.1's spellings, which PyYAML (under OmegaConf) reads, and TOML's.
  static constexpr std::array<std::string_view, 8> kTrue = {"true", "True", "TRUE", "yes",
                                                            "Yes",  "on",   "On",   "1"};
  static constexpr std::array<std::string_view, 8> kFalse = {"false", "False", "FALSE", "no",
                                                             "No",    "off",   "Off",   "0"};
  if (std::find(kTrue.begin(), kTrue.end(), s) != kTrue.end()) return true;
  if (std::find(kFalse.begin(), kFalse.end(), s) != kFalse.end()) return false;
  throw Error(fmt::format("{}: expected true or false, got \"{}\"", where, s));
}

namespace {

// The words of a command line: whitespace-separated, '...' and "..." quoted, `\` at a line's end
// joining it to the next, `#` to the line's end a comment.
std::vector<std::string> shell_words(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote != 0) {
      if (c == quote)
        quote = 0;
      else
        word += c;
      continue;
    }
    if (c == '#' && !in_word) {
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '\n' || text[i + 1] == '\r')) continue;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\'' || c == '"')
      quote = c;
    else
      word += c;
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

}  // namespace

FromTree read_args_tree(std::string_view text, const std::string& source) {
  FromTree tree{source, {}};
  const auto words = shell_words(text);
  // The launcher and the program (`torchrun --nproc_per_node 8 pretrain_gpt.py`): the arguments
  // start after the script, or at the first --name when there is none.
  const auto script = std::find_if(words.begin(), words.end(),
                                   [](const std::string& w) { return w.ends_with(".py"); });
  std::size_t i = script == words.end() ? 0 : static_cast<std::size_t>(script - words.begin()) + 1;
  while (i < words.size() && !words[i].starts_with("--")) ++i;
  for (; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (!w.starts_with("--") || w.size() == 2) {
      throw Error(
          fmt::format("{}: \"{}\": expected an argument --name, or its value after it", source, w));
    }
    std::string name = w.substr(2);
    std::string value = "true";  // a bare flag
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else if (i + 1 < words.size() && !words[i + 1].starts_with("--")) {
      value = words[++i];
      while (i + 1 < words.size() && !words[i + 1].starts_with("--"))  // nargs='+'
        value += " " + words[++i];
    }
    tree.set(name, value, fmt::format("{}: --{}", source, name));
  }
  return tree;
}

}  // namespace memest
