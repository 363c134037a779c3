// PCRE2-based pre-tokenizer cascades (see pretokenizer.h). The regexes are the ones each model's
// Hugging Face tokenizer.json declares, as adapted by llama.cpp (src/llama-vocab.cpp @3f545be,
// llm_tokenizer_bpe): case-insensitive groups spelled out, a cascade where HF chains splitters.
#include "engine/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <initializer_list>
#include <utility>

namespace vlmd::engine::tokenizer {
namespace {

// \s of the Unicode White_Space property, as llama.cpp's tables (and HF's regex engines) define
// it. PCRE2's own \s under UCP differs in two code points (U+180E in, nothing out), so every
// \s / \S is rewritten into this explicit class before compiling.
constexpr std::string_view kWhitespaceClass =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

// GPT-2 (also the word splitter of the starcoder, falcon and default cascades).
constexpr std::string_view kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
// Llama 3: (?i:'s|...) spelled out; digits in groups of at most 3.
constexpr std::string_view kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen2: as Llama 3 but single digits.
constexpr std::string_view kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kCjk = "[一-龥ࠀ-一가-퟿]+";
// Six code points are written as escapes: they have singleton canonical decompositions, so an
// editor that normalizes to NFC would silently change them.
constexpr std::string_view kDeepseekLlmLetters =
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕ"
    "ἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}ℨ\\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎ"
    "ꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";

struct Family {
  std::initializer_list<std::string_view> names;
  std::initializer_list<std::string_view> regexes;
  PreTokenizerTraits traits;
};

// name -> cascade. Names and traits follow llama.cpp's llama_vocab::impl::load; "gpt-neox" (not a
// llama.cpp name) is the GPT-NeoX/OLMo byte-level tokenizer, whose splitter is GPT-2's.
const Family kFamilies[] = {
    {{"default"},
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"},
     {}},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
     {kLlama3},
     {.ignore_merges = true, .clean_spaces = true, .add_bos = true}},
    {{"dbrx", "smaug-bpe"}, {kLlama3}, {}},
    {{"chatglm-bpe", "glm4"}, {kLlama3}, {}},
    {{"deepseek-llm"},
     {"[\\r\\n]", kDeepseekLlmLetters, "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", kCjk, "\\p{N}+"},
     {.clean_spaces = false}},
    {{"deepseek-coder"},
     {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjk, "\\p{N}"},
     {.clean_spaces = false}},
    {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"}, {}},
    {{"starcoder", "refact", "codeshell", "exaone", "minerva-7b"}, {"\\p{N}", kGpt2}, {}},
    {{"smollm", "command-r"}, {"\\p{N}", kGpt2}, {.clean_spaces = false}},
    {{"gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "gpt-neox", "jina-es", "jina-de",
      "jina-v2-es", "jina-v2-de", "gigachat", "exaone4", "mellum", "modern-bert", "a.x-4.0"},
     {kGpt2},
     {}},
    {{"trillion", "granite-docling"}, {kGpt2}, {.clean_spaces = false}},
    {{"qwen2", "deepseek-r1-qwen", "kormo", "hunyuan", "solar-open"},
     {kQwen2},
     {.clean_spaces = false}},
    {{"stablelm2", "megrez"}, {kQwen2}, {}},
    {{"poro-chat"}, {" ?[^(\\s|.,!?…。，、।۔،)]+"}, {.clean_spaces = false}},
    {{"bloom", "gpt3-finnish"}, {" ?[^(\\s|.,!?…。，、।۔،)]+"}, {}},
};

void AppendClassBody(std::string* out) { out->append(kWhitespaceClass); }

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

std::string PreTokenizer::TranslateWhitespace(std::string_view regex) {
  std::string out;
  out.reserve(regex.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < regex.size(); ++i) {
    const char c = regex[i];
    if (c == '\\' && i + 1 < regex.size()) {
      const char next = regex[i + 1];
      ++i;
      if (next == 's') {
        if (in_class) {
          AppendClassBody(&out);
        } else {
          out += '[';
          AppendClassBody(&out);
          out += ']';
        }
      } else if (next == 'S' && !in_class) {
        out += "[^";
        AppendClassBody(&out);
        out += ']';
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
    } else if (c == ']' && in_class) {
      in_class = false;
    }
    out += c;
  }
  return out;
}

Result<PreTokenizer> PreTokenizer::Create(std::string_view name) {
  const Family* family = nullptr;
  for (const Family& f : kFamilies) {
    for (std::string_view n : f.names) {
      if (n == name) family = &f;
    }
  }
  if (family == nullptr) {
    return UnimplementedError("unknown pre-tokenizer (tokenizer.ggml.pre) '" + std::string(name) +
                              "'");
  }
  PreTokenizer pre;
  pre.name_ = std::string(name);
  pre.traits_ = family->traits;
  for (std::string_view source : family->regexes) {
    const std::string pattern = TranslateWhitespace(source);
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    // DOLLAR_ENDONLY: "$" means end of subject, as in ECMAScript/Rust (not "before a final \n").
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error_code,
                                     &error_offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error_code, message, sizeof(message));
      return InternalError("pre-tokenizer '" + pre.name_ + "': regex does not compile at " +
                           std::to_string(error_offset) + ": " +
                           reinterpret_cast<const char*>(message));
    }
    // JIT is an optimisation only: if it is unavailable the interpreter runs the same pattern.
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    auto regex = std::make_unique<Regex>();
    regex->code = code;
    pre.regexes_.push_back(std::move(regex));
  }
  return pre;
}

Status PreTokenizer::Split(std::string_view text, std::vector<std::string_view>* words) const {
  if (text.empty()) return Status::Ok();
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (const auto& regex : regexes_) {
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(regex->code, nullptr);
    if (match == nullptr) return ResourceExhaustedError("pre-tokenizer: out of memory");
    next.clear();
    next.reserve(current.size() * 2);
    Status status;
    for (std::string_view piece : current) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t gap_start = 0;  // start of the text not yet emitted
      size_t pos = 0;        // where the next search starts
      while (pos < piece.size()) {
        int rc = pcre2_match(regex->code, subject, piece.size(), pos, PCRE2_NO_UTF_CHECK, match,
                             nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {  // deep backtracking: the interpreter copes
          rc = pcre2_match(regex->code, subject, piece.size(), pos,
                           PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, match, nullptr);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR message[256];
          pcre2_get_error_message(rc, message, sizeof(message));
          status = ResourceExhaustedError("pre-tokenizer '" + name_ + "': regex match failed: " +
                                          reinterpret_cast<const char*>(message));
          break;
        }
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
        const size_t begin = ovector[0];
        const size_t end = ovector[1];
        if (end == begin) {
          // Empty match: it splits nothing. Step over one whole character and search again.
          pos = begin + 1;
          while (pos < piece.size() && (static_cast<uint8_t>(piece[pos]) & 0xC0) == 0x80) ++pos;
          continue;
        }
        if (begin > gap_start) next.push_back(piece.substr(gap_start, begin - gap_start));
        next.push_back(piece.substr(begin, end - begin));
        gap_start = end;
        pos = end;
      }
      if (!status.ok()) break;
      if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
    }
    pcre2_match_data_free(match);
    VLMD_RETURN_IF_ERROR(status);
    current.swap(next);
  }
  words->insert(words->end(), current.begin(), current.end());
  return Status::Ok();
}

}  // namespace vlmd::engine::tokenizer
