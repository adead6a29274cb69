// A non-owning reference to a callable, for callbacks that run before the
// call that takes them returns: unlike std::function it never allocates
// (a lambda capturing more than two pointers makes std::function allocate
// on every call, on the operation path).
//
//   Status Run(FunctionRef<Status(int)> body) { return body(3); }
//   Run([&](int x) { return Use(x, a, b, c); });
#ifndef DMIDX_COMMON_FUNCTION_REF_H_
#define DMIDX_COMMON_FUNCTION_REF_H_

#include <memory>
#include <type_traits>
#include <utility>

namespace dmidx {

template <typename Signature>
class FunctionRef;

template <typename Result, typename... Args>
class FunctionRef<Result(Args...)> {
 public:
  // Refers to `callable`, which must outlive every call through this.
  template <typename Callable>
  requires(!std::is_same_v<std::remove_cvref_t<Callable>, FunctionRef> &&
           std::is_invocable_r_v<Result, Callable&, Args...>)
      FunctionRef(Callable&& callable)  // NOLINT: implicit, like std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(callable)))),
        call_([](void* object, Args... args) -> Result {
          return (*static_cast<std::remove_reference_t<Callable>*>(object))(
              std::forward<Args>(args)...);
        }) {}

  Result operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  Result (*call_)(void*, Args...);
};

}  // namespace dmidx

#endif  // DMIDX_COMMON_FUNCTION_REF_H_
