# Build time (issue #37): precompiled headers, ccache that still hits with them, and line-table-only debug info
# where nobody debugs (CI). Not lld: with GCC 12 its test programs aborted while unwinding some exceptions
# (jinja_test's Sandbox; the same objects linked by GNU ld pass).
#
# Precompiled headers: most translation units parse the same standard headers and fmt (core/status.h), many
# nlohmann/json (model/config.h), every test file gtest. Four targets own one precompiled header each, compiled
# once; every other target reuses one of them (REUSE_FROM, which needs the same compiler flags):
#   lib   the standard headers and fmt: the libraries of src/ and bench/ by default, the fuzz targets;
#   json  lib + nlohmann/json: the libraries in RILL_PCH_JSON_TARGETS, whose files nearly all include it (for
#         the others the larger header costs more to load, ~0.5 s a file, than it saves);
#   test  json + gtest: the gtest programs and their helper libraries;
#   cli   json + CLI11: the rill program (every command's file defines its options with CLI11).
# -DRILL_PCH=OFF builds without them (a file that forgets an include shows up there). CUDA sources never use
# them.
option(RILL_PCH "Precompile the headers most translation units share (standard library, fmt, json, gtest)" ON)
set(RILL_PCH_LIB_HEADERS
    <algorithm> <array> <atomic> <chrono> <cmath> <cstdint> <cstdio> <cstring> <functional> <map> <memory>
    <mutex> <optional> <set> <span> <string> <string_view> <unordered_map> <utility> <variant> <vector>
    <fmt/format.h>)
set(RILL_PCH_JSON_HEADERS ${RILL_PCH_LIB_HEADERS} <deque> <filesystem> <fstream> <nlohmann/json.hpp>)
set(RILL_PCH_TEST_HEADERS ${RILL_PCH_JSON_HEADERS} <random> <gtest/gtest.h>)
set(RILL_PCH_CLI_HEADERS ${RILL_PCH_JSON_HEADERS} <CLI/CLI.hpp>)
set(RILL_PCH_JSON_TARGETS rill_model rill_runner rill_server rill_server_openai rill_io rill_text_chat
    rill_text_json rill_text_k2 rill_text_k3 rill_bench_driver)

# ccache: a translation unit that includes a precompiled header is cached only with these sloppiness
# settings (ccache's manual, "Precompiled headers"); they are set here for the build, not in the user's
# ccache.conf. CCACHE_BASEDIR (the checkout) and CCACHE_NOHASHDIR let two checkouts at different paths share
# the cache: CMake passes absolute source and include paths, which base_dir rewrites relative to the
# working directory, and with -g ccache would otherwise hash that directory too. CI builds each clean clone
# at a new path, so without them every CI build compiled from scratch (`make build` alone: 15 min 40 s on the
# 2-core machine). No compile definition may hold the checkout's path for the same reason (the tests read
# theirs from tests/test_paths.h). The cost: an object taken from the cache names the first checkout's
# directory as its compilation directory in its debug info (backtraces print the relative file:line).
find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  set(RILL_CCACHE_LAUNCHER env CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
                           CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=1 ${CCACHE_PROGRAM})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${RILL_CCACHE_LAUNCHER})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${RILL_CCACHE_LAUNCHER})
endif()

# RILL_DEBUG_INFO=lines: -g1 (file:line tables, what backtraces and sanitizer reports print) in place of full
# debug info, about a third less compile time for the same code; .ci/run asks for it. Default: full.
set(RILL_DEBUG_INFO "full" CACHE STRING "Debug info of RelWithDebInfo/Debug C++ builds: full (-g) or lines (-g1)")
if(RILL_DEBUG_INFO STREQUAL "lines")
  foreach(config RELWITHDEBINFO DEBUG)
    string(REGEX REPLACE "(^| )-g( |$)" "\\1-g1\\2" CMAKE_CXX_FLAGS_${config} "${CMAKE_CXX_FLAGS_${config}}")
  endforeach()
elseif(NOT RILL_DEBUG_INFO STREQUAL "full")
  message(FATAL_ERROR "RILL_DEBUG_INFO must be 'full' or 'lines', got '${RILL_DEBUG_INFO}'")
endif()

# rill_pch(target lib|json|test|cli): `target`'s C++ sources use the precompiled header of that kind (lib: json
# instead for the targets in RILL_PCH_JSON_TARGETS).
function(rill_pch target kind)
  if(NOT RILL_PCH)
    return()
  endif()
  if(kind STREQUAL "lib" AND target IN_LIST RILL_PCH_JSON_TARGETS)
    set(kind json)
  endif()
  if(NOT TARGET rill_pch_${kind})
    add_library(rill_pch_${kind} STATIC ${PROJECT_SOURCE_DIR}/cmake/pch_anchor.cc)
    string(TOUPPER ${kind} upper)
    set(headers "")
    foreach(h IN LISTS RILL_PCH_${upper}_HEADERS)
      list(APPEND headers "$<$<COMPILE_LANGUAGE:CXX>:${h}>")
    endforeach()
    target_precompile_headers(rill_pch_${kind} PRIVATE ${headers})
    # The definitions the headers see must be the users' (fmt's FMT_SHARED, gtest's GTEST_HAS_PTHREAD).
    target_link_libraries(rill_pch_${kind} PRIVATE fmt::fmt nlohmann_json::nlohmann_json)
    if(kind STREQUAL "test")
      target_link_libraries(rill_pch_${kind} PRIVATE GTest::gtest)
    elseif(kind STREQUAL "cli")
      target_link_libraries(rill_pch_${kind} PRIVATE CLI11::CLI11)
    endif()
  endif()
  target_precompile_headers(${target} REUSE_FROM rill_pch_${kind})
  # A target that does not link fmt itself (rill_test_main) still compiles the header with fmt's definitions.
  target_compile_definitions(${target} PRIVATE $<TARGET_PROPERTY:fmt::fmt,INTERFACE_COMPILE_DEFINITIONS>)
endfunction()
