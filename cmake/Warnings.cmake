add_library(memest_warnings INTERFACE)
target_compile_options(memest_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast
  -Wnon-virtual-dtor -Woverloaded-virtual -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough
  # GCC 12's -Wextra flags designated initializers that leave members to their default member
  # initializers ({.name = "w", .rows = 10}), the idiom the tests use for aggregates.
  -Wno-missing-field-initializers)
if(MEMEST_WARNINGS_AS_ERRORS)
  target_compile_options(memest_warnings INTERFACE -Werror)
endif()
# A unity file includes the sources of a target, so GCC takes a source's types that hold types of
# its own anonymous namespace (plan.cpp's Regime) for header types that would differ per file.
if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(memest_warnings INTERFACE -Wno-subobject-linkage)
endif()
