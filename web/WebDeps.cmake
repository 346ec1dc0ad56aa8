# The header-only libraries for the emscripten build of the web page (web/). Emscripten has its
# own C library, so /usr/include cannot be on the include path (glibc's headers clash with it):
# a directory of links to Debian's fmt, nlohmann and CLI11 headers stands in for it, and fmt is
# used header-only (Debian's libfmt.so is a native library).
set(MEMEST_WEB_INCLUDE ${PROJECT_BINARY_DIR}/web-include)
file(MAKE_DIRECTORY ${MEMEST_WEB_INCLUDE})
foreach(dir fmt nlohmann CLI)
  if(NOT EXISTS /usr/include/${dir})
    message(FATAL_ERROR "web: /usr/include/${dir} not found (apt-get install libfmt-dev "
                        "nlohmann-json3-dev libcli11-dev)")
  endif()
  file(CREATE_LINK /usr/include/${dir} ${MEMEST_WEB_INCLUDE}/${dir} SYMBOLIC)
endforeach()
add_library(memest_web_headers INTERFACE)
target_include_directories(memest_web_headers SYSTEM INTERFACE ${MEMEST_WEB_INCLUDE})
target_compile_definitions(memest_web_headers INTERFACE FMT_HEADER_ONLY=1)
add_library(fmt::fmt-header-only ALIAS memest_web_headers)
add_library(nlohmann_json::nlohmann_json ALIAS memest_web_headers)
add_library(CLI11::CLI11 ALIAS memest_web_headers)
# Exceptions are how memest reports bad input; emscripten turns them off by default.
add_compile_options(-fexceptions)
add_link_options(-fexceptions)
