// Status and Result<T>: the error channel for everything that data (files, pixels, requests)
// can cause. Exceptions never cross module boundaries; VLMD_CHECK (check.h) is for invariants.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace vlmd {

// Codes follow the gRPC/absl vocabulary so that serve/api can map them to HTTP in one place.
enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,    // bad request or option (HTTP 400)
  kNotFound,           // missing file, key or tensor
  kOutOfRange,         // value outside an allowed range (e.g. over a size limit)
  kDataLoss,           // corrupt or truncated file/image
  kUnimplemented,      // valid input we do not support (unknown arch, dtype, ...)
  kResourceExhausted,  // budget, queue or memory limit reached
  kFailedPrecondition, // state does not allow the call (model not loaded, ...)
  kDeadlineExceeded,
  kCancelled,
  kUnavailable,
  kInternal,           // numerical failure (NaN/Inf) or broken expectation reported as data
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message" (or "OK").
  std::string ToString() const;

  // Returns a copy whose message is "context: message" (keeps the code). No-op on OK.
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgumentError(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status OutOfRangeError(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status UnimplementedError(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status ResourceExhaustedError(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status FailedPreconditionError(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }

// Result<T>: a value or a non-OK Status. Access value() only after checking ok().
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}            // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) {}     // NOLINT(implicit); must be non-OK

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace vlmd

#define VLMD_STATUS_CONCAT_INNER(a, b) a##b
#define VLMD_STATUS_CONCAT(a, b) VLMD_STATUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) is not OK.
#define VLMD_RETURN_IF_ERROR(expr)                  \
  do {                                              \
    ::vlmd::Status vlmd_status_tmp_ = (expr);       \
    if (!vlmd_status_tmp_.ok()) return vlmd_status_tmp_; \
  } while (0)

// `VLMD_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from a Result<T> or returns its Status.
#define VLMD_ASSIGN_OR_RETURN(lhs, expr) \
  VLMD_ASSIGN_OR_RETURN_IMPL(VLMD_STATUS_CONCAT(vlmd_result_, __LINE__), lhs, expr)
#define VLMD_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
