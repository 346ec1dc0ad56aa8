add_library(memest_warnings INTERFACE)
target_compile_options(memest_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast
  -Wnon-virtual-dtor -Woverloaded-virtual -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
if(MEMEST_WARNINGS_AS_ERRORS)
  target_compile_options(memest_warnings INTERFACE -Werror)
endif()
