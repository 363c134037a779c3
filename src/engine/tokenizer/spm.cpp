// SentencePiece score-based merges (see encoders.h). Same merge order as llama.cpp's
// llm_tokenizer_spm_session (src/llama-vocab.cpp @3f545be): highest score first, then leftmost.
#include <algorithm>
#include <queue>

#include "engine/tokenizer/encoders.h"
#include "engine/tokenizer/merge_queue.h"
#include "engine/tokenizer/unicode.h"

namespace vlmd::engine::tokenizer {
namespace {

using Symbol = internal::MergeSymbol;

struct Bigram {
  float score;
  int left;
  int right;
  uint32_t len;
};

struct WorseBigram {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void SpmEncode(const Vocab& vocab, std::string_view text, std::vector<TokenId>* out) {
  if (text.empty()) return;
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const size_t len = std::min(Utf8SeqLen(static_cast<uint8_t>(text[offset])),
                                text.size() - offset);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offset + len == text.size() ? -1 : index + 1,
                       static_cast<uint32_t>(offset), static_cast<uint32_t>(len)});
    offset += len;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, WorseBigram> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const uint32_t len = symbols[left].len + symbols[right].len;
    const TokenId id = vocab.Find(text.substr(symbols[left].start, len));
    if (id == kNoToken) return;
    queue.push({vocab.score(id), left, right, len});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  internal::RunMerges(symbols, queue, try_add);

  // Every merged symbol is a token by construction; what is left over is single characters that
  // the vocabulary lacks, emitted as their bytes. (llama.cpp's rev_merge resegmentation only ever
  // sees token texts, so it never splits anything and is not needed here.)
  for (int i = 0; i != -1; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].start, symbols[i].len);
    const TokenId id = vocab.Find(piece);
    if (id != kNoToken) {
      out->push_back(id);
      continue;
    }
    for (char c : piece) {
      TokenId byte_id = vocab.ByteToken(static_cast<uint8_t>(c));
      if (byte_id == kNoToken) byte_id = vocab.unk();
      if (byte_id != kNoToken) out->push_back(byte_id);
    }
  }
}

}  // namespace vlmd::engine::tokenizer
