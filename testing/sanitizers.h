// Which sanitizer this build runs under, for tests that size their work by
// it: a single-threaded model check gains nothing from ThreadSanitizer's
// ten-fold slowdown, so it runs a smaller share there (the release and
// AddressSanitizer builds run it whole).
#ifndef DMIDX_TESTING_SANITIZERS_H_
#define DMIDX_TESTING_SANITIZERS_H_

namespace dmidx::testing {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kAnySanitizer = true;
#else
inline constexpr bool kAnySanitizer = false;
#endif

}  // namespace dmidx::testing

#endif  // DMIDX_TESTING_SANITIZERS_H_
