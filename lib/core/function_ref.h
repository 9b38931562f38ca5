// A non-owning reference to a callable, for a callback that does not outlive the
// call it is passed to: unlike std::function it never allocates, which matters on the
// path of a small collective.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace tpurt {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same<std::decay_t<F>, FunctionRef>::value>>
  FunctionRef(F&& f)  // NOLINT: converts like std::function
      : callable_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        invoke_([](void* c, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(c))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return invoke_(callable_, std::forward<Args>(args)...); }

 private:
  void* callable_;
  R (*invoke_)(void*, Args...);
};

}  // namespace tpurt
