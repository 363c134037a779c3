// The two merge algorithms behind Tokenizer::Tokenize (internal to the tokenizer module).
#pragma once

#include <string_view>
#include <vector>

#include "engine/tokenizer/vocab.h"

namespace vlmd::engine::tokenizer {

// Byte-level BPE on one pre-tokenized word that is already in the GPT-2 byte alphabet: starts
// from one symbol per character, repeatedly merges the adjacent pair of lowest merge rank
// (leftmost on ties) through a min-heap, O(n log n) in the word length. Appends the ids; a final
// symbol that is not a token falls back to its single bytes (dropped where those are not tokens
// either, as llama.cpp does).
void BpeEncodeWord(const Vocab& vocab, std::string_view word, std::vector<TokenId>* out);

// SentencePiece (BPE-by-score variant) on an already space-escaped fragment ("▁" for ' '):
// merges the adjacent pair whose concatenation is the highest-scoring token (leftmost on ties),
// O(n log n). Symbols that are not tokens become byte-fallback tokens (<0xHH>), or the unknown
// token where the vocabulary has no byte tokens. Appends the ids.
void SpmEncode(const Vocab& vocab, std::string_view text, std::vector<TokenId>* out);

}  // namespace vlmd::engine::tokenizer
