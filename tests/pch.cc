// The translation unit that builds the tests' precompiled header
// (tests/CMakeLists.txt: dmidx_test_pch); it has no code of its own.
