// Byte-level BPE merges (see encoders.h). Same merge order as llama.cpp's
// llm_tokenizer_bpe_session (src/llama-vocab.cpp @3f545be): rank first, then leftmost.
#include <algorithm>
#include <queue>

#include "engine/tokenizer/encoders.h"
#include "engine/tokenizer/merge_queue.h"
#include "engine/tokenizer/unicode.h"

namespace vlmd::engine::tokenizer {
namespace {

using Symbol = internal::MergeSymbol;

struct Bigram {
  int32_t rank;
  int left;
  int right;
  uint32_t len;  // combined length when queued: a stale entry no longer matches it
};

struct WorseBigram {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

void BpeEncodeWord(const Vocab& vocab, std::string_view word, std::vector<TokenId>* out) {
  if (word.empty()) return;
  if (vocab.ignore_merges()) {
    const TokenId whole = vocab.Find(word);
    if (whole != kNoToken) {
      out->push_back(whole);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t offset = 0; offset < word.size();) {
    const size_t len = std::min(Utf8SeqLen(static_cast<uint8_t>(word[offset])),
                                word.size() - offset);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offset + len == word.size() ? -1 : index + 1,
                       static_cast<uint32_t>(offset), static_cast<uint32_t>(len)});
    offset += len;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, WorseBigram> queue;
  auto text_of = [&](const Symbol& s) { return word.substr(s.start, s.len); };
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const int32_t rank = vocab.MergeRank(text_of(symbols[left]), text_of(symbols[right]));
    if (rank < 0) return;
    queue.push({rank, left, right, symbols[left].len + symbols[right].len});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  internal::RunMerges(symbols, queue, try_add);

  for (int i = 0; i != -1; i = symbols[i].next) {
    const std::string_view piece = text_of(symbols[i]);
    const TokenId id = vocab.Find(piece);
    if (id != kNoToken) {
      out->push_back(id);
      continue;
    }
    for (char c : piece) {
      const TokenId byte_id = vocab.Find(std::string_view(&c, 1));
      if (byte_id != kNoToken) out->push_back(byte_id);
    }
  }
}

}  // namespace vlmd::engine::tokenizer
