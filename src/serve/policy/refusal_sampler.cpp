#include "serve/policy/refusal_sampler.h"

#include <algorithm>

namespace vlmd::serve::policy {

RefusalSampler::Entry& RefusalSampler::OpenEntryLocked(const std::string& addr, double now_s, bool* opened) {
  // A full table: new addresses share the entry "*".
  const std::string& key =
      entries_.size() >= max_addresses_ && entries_.count(addr) == 0 ? kShared : addr;
  auto [it, created] = entries_.try_emplace(key, Entry{now_s, now_s, 0});
  Entry& e = it->second;
  if (!created && now_s >= e.first_s + interval_s_) {  // over, not yet summarized: keep its count
    if (e.left_out > 0) pending_.push_back({key, e.left_out, e.first_s, e.last_s});
    e = Entry{now_s, now_s, 0};
    created = true;
  }
  if (created) {
    const double end = now_s + interval_s_;
    next_end_s_ = next_end_s_ == 0 ? end : std::min(next_end_s_, end);
  }
  *opened = created;
  return e;
}

bool RefusalSampler::Admit(const std::string& addr, double now_s) {
  if (interval_s_ <= 0) return true;
  std::lock_guard<std::mutex> lock(mu_);
  bool opened = false;
  Entry& e = OpenEntryLocked(addr, now_s, &opened);
  if (opened) return true;  // the interval's first refusal: written
  ++e.left_out;             // inside the open interval: counted only
  e.last_s = now_s;
  return false;
}

void RefusalSampler::CountLeftOut(const std::string& addr, double now_s) {
  if (interval_s_ <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  bool opened = false;
  Entry& e = OpenEntryLocked(addr, now_s, &opened);
  ++e.left_out;
  e.last_s = now_s;
}

std::vector<RefusalSampler::Summary> RefusalSampler::TakeEnded(double now_s) {
  std::vector<Summary> out;
  if (interval_s_ <= 0) return out;
  std::lock_guard<std::mutex> lock(mu_);
  out.swap(pending_);
  if (next_end_s_ == 0 || now_s < next_end_s_) return out;
  double next = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    const double end = it->second.first_s + interval_s_;
    if (now_s >= end) {
      if (it->second.left_out > 0) {
        out.push_back({it->first, it->second.left_out, it->second.first_s, it->second.last_s});
      }
      it = entries_.erase(it);
    } else {
      next = next == 0 ? end : std::min(next, end);
      ++it;
    }
  }
  next_end_s_ = next;
  return out;
}

}  // namespace vlmd::serve::policy
