// The tests' precompiled header (tests/CMakeLists.txt: dmidx_test_pch):
// GoogleTest and the standard headers most tests include (sanitizer builds
// only).

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>
