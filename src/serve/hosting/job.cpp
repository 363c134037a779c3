// Job: the scheduler -> handler channel (see job.h).
#include "serve/hosting/job.h"

#include <iterator>

namespace vlmd::serve {

void Job::PushText(const std::string& text, std::vector<StreamedToken> tokens) {
  if (text.empty() && tokens.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    unread_ += text;
    unread_tokens_.insert(unread_tokens_.end(), std::make_move_iterator(tokens.begin()),
                          std::make_move_iterator(tokens.end()));
  }
  cv_.notify_all();
}

void Job::Complete(JobResult result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (over_) return;
    result_ = std::move(result);
    over_ = true;
  }
  cv_.notify_all();
}

void Job::Fail(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (over_) return;
    status_ = std::move(status);
    over_ = true;
  }
  cv_.notify_all();
}

bool Job::Wait(Clock::time_point until, std::string* text, std::vector<StreamedToken>* tokens) {
  std::unique_lock<std::mutex> lock(mu_);
  // Without a text sink only the end matters (text keeps accumulating until result()).
  cv_.wait_until(lock, until, [&] {
    return over_ || (text != nullptr && (!unread_.empty() || (tokens != nullptr && !unread_tokens_.empty())));
  });
  if (text != nullptr) {
    text->append(unread_);
    unread_.clear();
  }
  if (tokens != nullptr) {
    tokens->insert(tokens->end(), std::make_move_iterator(unread_tokens_.begin()),
                   std::make_move_iterator(unread_tokens_.end()));
    unread_tokens_.clear();
  }
  return over_;
}

}  // namespace vlmd::serve
