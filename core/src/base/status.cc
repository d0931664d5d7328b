#include "sluice/core/base/status.h"

#include <cstring>

namespace sluice {

std::string_view code_name(Code c) {
  switch (c) {
    case Code::kOk:
      return "ok";
    case Code::kAgain:
      return "again";
    case Code::kInvalidArgument:
      return "invalid argument";
    case Code::kInvalidUsage:
      return "invalid usage";
    case Code::kSystemError:
      return "system error";
    case Code::kInternalError:
      return "internal error";
    case Code::kRemoteError:
      return "remote error";
  }
  return "unknown";
}

Status Status::with_context(std::string_view ctx) const {
  if (is_ok() || is_again()) return *this;
  std::string m(ctx);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

Status errno_status(Code code, std::string_view what, int err) {
  char buf[128];
  const char* s = strerror_r(err, buf, sizeof buf);  // GNU variant returns the string
  std::string m(what);
  m += " failed: ";
  m += s;
  m += " (errno ";
  m += std::to_string(err);
  m += ")";
  return Status(code, std::move(m));
}

}  // namespace sluice
