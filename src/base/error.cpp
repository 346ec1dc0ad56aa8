#include <memest/error.hpp>

namespace memest {

void rethrow_with_context(const Error& e, const std::string& context) {
  throw Error(context + ": " + e.what());
}

}  // namespace memest
