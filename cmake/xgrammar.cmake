# xgrammar's C++ core, the grammar engine behind constrained decoding (docs/serving.md explains the choice),
# compiled from its PyPI source distribution. scripts/install_deps.sh downloads the sdist with pip into
# FLASHSEEK_DEPS_DIR; nothing is fetched at configure or build time. The sdist is self-contained: its C++ sources,
# headers and the two header-only libraries it uses (picojson, dlpack) are inside it.
set(FLASHSEEK_XGRAMMAR_VERSION 0.2.9)
set(FLASHSEEK_XGRAMMAR_SHA256 87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90)
set(FLASHSEEK_DEPS_DIR "$ENV{HOME}/.cache/flashseek/deps" CACHE PATH
    "Where scripts/install_deps.sh puts source distributions (xgrammar)")

set(_xg_sdist "${FLASHSEEK_DEPS_DIR}/xgrammar-${FLASHSEEK_XGRAMMAR_VERSION}.tar.gz")
if(NOT EXISTS "${_xg_sdist}")
  message(FATAL_ERROR "xgrammar ${FLASHSEEK_XGRAMMAR_VERSION} source distribution not found at ${_xg_sdist}: "
                      "run scripts/install_deps.sh (or set FLASHSEEK_DEPS_DIR to where it is)")
endif()
file(SHA256 "${_xg_sdist}" _xg_hash)
if(NOT _xg_hash STREQUAL FLASHSEEK_XGRAMMAR_SHA256)
  message(FATAL_ERROR "${_xg_sdist} has SHA-256 ${_xg_hash}, expected ${FLASHSEEK_XGRAMMAR_SHA256}: "
                      "delete it and run scripts/install_deps.sh again")
endif()
set(_xg_root "${CMAKE_BINARY_DIR}/_deps/xgrammar-${FLASHSEEK_XGRAMMAR_VERSION}")
if(NOT EXISTS "${_xg_root}/cpp/grammar_matcher.cc")
  file(ARCHIVE_EXTRACT INPUT "${_xg_sdist}" DESTINATION "${CMAKE_BINARY_DIR}/_deps")
endif()

# One upstream fix, applied to the unpacked source (idempotent; a different upstream text stops the configure so the
# fix is looked at again when the version changes). 0.2.9's JSON strings with minLength/maxLength admit raw control
# characters U+0000-U+001F, which JSON forbids inside strings (the unbounded string rule excludes them): a random
# token walk produced `"Ger<U+001E>"`. The bounded rule gets the same exclusion.
set(_xg_converter "${_xg_root}/cpp/json_schema_converter.cc")
set(_xg_bug [=[builder_.AddCharacterClass({{'"', '"'}, {'\\', '\\'}, {'\r', '\r'}, {'\n', '\n'}}, true);]=])
set(_xg_fix [=[builder_.AddCharacterClass({{0, 0x1f}, {'"', '"'}, {'\\', '\\'}}, true);  // flashseek fix]=])
file(READ "${_xg_converter}" _xg_text)
string(FIND "${_xg_text}" "${_xg_bug}" _xg_bug_at)
if(NOT _xg_bug_at EQUAL -1)
  string(REPLACE "${_xg_bug}" "${_xg_fix}" _xg_text "${_xg_text}")
  file(WRITE "${_xg_converter}" "${_xg_text}")
else()
  string(FIND "${_xg_text}" "${_xg_fix}" _xg_fix_at)
  if(_xg_fix_at EQUAL -1)
    message(FATAL_ERROR "${_xg_converter}: the bounded-string character class is not where cmake/xgrammar.cmake "
                        "expects it; check whether the control-character fix is still needed")
  endif()
endif()

file(GLOB_RECURSE _xg_sources "${_xg_root}/cpp/*.cc")
list(FILTER _xg_sources EXCLUDE REGEX "/cpp/tvm_ffi/")  # Python bindings
add_library(xgrammar STATIC ${_xg_sources})
# Upstream code, upstream standard; its own warnings are not ours to fix.
set_target_properties(xgrammar PROPERTIES CXX_STANDARD 17 POSITION_INDEPENDENT_CODE ON)
target_compile_options(xgrammar PRIVATE -w -O2)
target_include_directories(xgrammar SYSTEM PUBLIC "${_xg_root}/include" "${_xg_root}/3rdparty/picojson"
                           "${_xg_root}/3rdparty/dlpack/include")
target_compile_definitions(xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0 XGRAMMAR_ENABLE_INTERNAL_CHECK=0)
target_link_libraries(xgrammar PUBLIC Threads::Threads)
