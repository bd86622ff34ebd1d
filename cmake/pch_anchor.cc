// The one source of the targets that only own a precompiled header (cmake/build_speed.cmake: rill_pch_lib,
// rill_pch_test); the header itself is what CMake compiles for them.
