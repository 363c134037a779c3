// Refusals before authentication (401, 429 at the door) in the audit log without letting a flood
// rotate the real trail away: per client address and interval, the first refusal is written in
// full and the rest only counted; when the interval is over, one summary line says how many were
// left out. Pure (the caller passes the time), thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace vlmd::serve::policy {

class RefusalSampler {
 public:
  // interval_s <= 0: every refusal is written (Admit always true, nothing summarized).
  // max_addresses: addresses tracked one by one; the rest share one entry "*" (so that a flood
  // from many addresses still writes at most max_addresses + 1 lines per interval).
  explicit RefusalSampler(double interval_s, size_t max_addresses = 4096)
      : interval_s_(interval_s), max_addresses_(max_addresses) {}

  // A refusal of `addr` at now_s (seconds, any monotonic origin): true when its line should be
  // written (the first of its address's interval), false when it is only counted.
  bool Admit(const std::string& addr, double now_s);
  // A refusal of `addr` that cannot be written (no thread free to write it): counted in its
  // address's interval as Admit's left-out ones are, so the summary line still tells of it.
  void CountLeftOut(const std::string& addr, double now_s);

  struct Summary {
    std::string addr;     // the address, or "*" for the shared entry
    uint64_t left_out = 0;  // refusals counted but not written
    double first_s = 0;   // the interval's first refusal (written)
    double last_s = 0;    // its last one
  };
  // The intervals over by now_s that left refusals out, each once; their entries are dropped.
  // Cheap when nothing is due (one comparison). now_s = +infinity takes everything (shutdown).
  std::vector<Summary> TakeEnded(double now_s);

 private:
  struct Entry {
    double first_s = 0, last_s = 0;
    uint64_t left_out = 0;
  };
  // Under mu_: addr's entry (or the shared one), opened anew when absent or its interval is over
  // (the old interval's count goes to pending_); *opened says whether it was.
  Entry& OpenEntryLocked(const std::string& addr, double now_s, bool* opened);

  const double interval_s_;
  const size_t max_addresses_;
  std::mutex mu_;
  inline static const std::string kShared = "*";
  std::map<std::string, Entry> entries_;  // open intervals by address
  std::vector<Summary> pending_;          // intervals replaced by Admit before TakeEnded saw them
  double next_end_s_ = 0;                 // the earliest end of an open interval (0: none open)
};

}  // namespace vlmd::serve::policy
