// Status and Result: the one error type of Sluice's core.
//
// Code::kAgain is not a failure: it is backpressure ("cannot post yet, call again"), which the
// plugin layer turns into `*request = NULL` / `*comm = NULL` with ncclSuccess. Every other
// non-OK code is a real failure carrying a message meant for a human (it ends up in a WARN).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace sluice {

enum class Code : unsigned char {
  kOk = 0,
  kAgain,            // not ready yet; retry later (never logged)
  kInvalidArgument,  // a caller passed something malformed (NULL, out of range, corrupt handle)
  kInvalidUsage,     // a valid call in a wrong situation (message larger than posted buffer, ...)
  kSystemError,      // the OS or verbs refused (errno-carrying failures, missing device)
  kInternalError,    // a Sluice invariant broke
  kRemoteError,      // the peer or the fabric failed (bad work completion, peer closed)
};

std::string_view code_name(Code c);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  static Status again() { return Status(Code::kAgain, std::string()); }

  bool is_ok() const { return code_ == Code::kOk; }
  bool is_again() const { return code_ == Code::kAgain; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes context to the message ("connect to 10.0.0.2:4711: " + message).
  Status with_context(std::string_view ctx) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

Status errno_status(Code code, std::string_view what, int err);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const T& value() const& { return std::get<T>(v_); }
  Status status() const { return is_ok() ? Status::ok() : std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace sluice

#define SLUICE_RETURN_IF_ERROR(expr)            \
  do {                                          \
    ::sluice::Status _sluice_st = (expr);       \
    if (!_sluice_st.is_ok()) return _sluice_st; \
  } while (0)
