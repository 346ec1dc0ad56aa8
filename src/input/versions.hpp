#pragma once
// --versions: the versions of the packages a run trains with (torch=1.10,transformers=4.16), which
// decide the stack defaults that changed over time (stack_presets.cpp). A package not given is
// taken at its newest behaviour.

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memest {

/// A release number as its package writes it ("2.1.0+cu121", "0.43.2"): the numbers between dots
/// are compared, missing ones read as 0 (1.10 == 1.10.0), and a suffix (+cu121, rc1, .dev0) is
/// ignored.
struct Version {
  std::vector<std::uint32_t> numbers;

  std::strong_ordering operator<=>(const Version& other) const;
  bool operator==(const Version& other) const { return (*this <=> other) == 0; }
};

/// The version `text` spells; nullopt when it does not start with a number or its numbers are
/// not separated by single dots.
std::optional<Version> parse_version(std::string_view text);

/// The packages --versions takes, in the order help and docs list them.
std::span<const std::string_view> versioned_packages();

/// The versions a run gives, by package, as the user wrote them.
using Versions = std::map<std::string, std::string, std::less<>>;

/// The packages and versions of --versions (`torch=1.10,transformers=4.16`; a run config's
/// object arrives as the same text, the web form's as JSON text). Throws Error, one line naming
/// `where`, the value given and what is accepted, on a malformed item, an unknown package, a
/// package given twice or a version that is not one.
Versions parse_versions(std::string_view value, std::string_view where);

}  // namespace memest
