// Chat templates: messages -> prompt text for the template families vlmd supports, chosen from a
// GGUF's tokenizer.chat_template (Jinja source) by distinctive substrings, the way llama.cpp's
// llm_chat_detect_template does (no Jinja interpreter).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "engine/tokenizer/prompt_text.h"

namespace vlmd::engine::tokenizer {

enum class ChatTemplateKind {
  kChatml,   // <|im_start|>role\ncontent<|im_end|>\n
  kPhi4,     // <|im_start|>role<|im_sep|>content<|im_end|>
  kSmolvlm,  // SmolVLM / Idefics3: <|im_start|>User: ...<end_of_utterance>\nAssistant:
  kLlama3,   // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
  kGemma,    // <start_of_turn>user\n...<end_of_turn>\n (assistant -> model, system merged)
  kPhi3,     // <|role|>\ncontent<|end|>\n
  kVicuna,       // Vicuna / LLaVA-1.5 and 1.6: USER: ...\nASSISTANT: ...</s>\n (system: text\n\n)
  kVicunaOrca,   // the same with SYSTEM: ...\n for the system turn
  // The [INST] family (LLaVA-1.6-Mistral, Llama 2, Mistral), as llama.cpp writes each variant:
  kLlama2,          // [INST] user [/INST]assistant</s> (a system turn as plain text)
  kLlama2Sys,       // ... with <<SYS>>\nsystem\n<</SYS>>\n\n
  kLlama2SysBos,    // ... and <s> before each later [INST]
  kLlama2SysStrip,  // ... with every message trimmed
  kMistralV1,       //  [INST] user [/INST] assistant</s>
  kMistralV3,       // [INST] user[/INST] assistant</s> (assistant trimmed)
  kMistralV3Tekken, // [INST]user[/INST]assistant</s>
  kMistralV7,       // [SYSTEM_PROMPT] s[/SYSTEM_PROMPT][INST] user[/INST] assistant</s>
  kMistralV7Tekken, // the same without the spaces
};

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant" (others are passed through)
  std::string content;  // text; image markers (e.g. <__media__>) are left as they are
};

// Whether `text` is a marker the built-in chat templates or the engine's image wrappers write
// ("<|im_start|>", "<start_of_turn>", "[INST]", "<|vision_start|>", "<row_1_col_2>", ...). A
// vocabulary token with such a text is read as text in a client's words even when the GGUF types
// it user-defined rather than control (PromptText; the tokenizer asks this once per token).
bool IsPromptMarkerText(std::string_view text);

class ChatTemplate {
 public:
  // Picks the family from `source`: a built-in name ("chatml", "phi4", "smolvlm", "llama3",
  // "gemma", "phi3", "vicuna", "vicuna-orca", "llama2", "llama2-sys", "llama2-sys-bos",
  // "llama2-sys-strip", "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7",
  // "mistral-v7-tekken") or a template's Jinja source. A template that llama.cpp would give to a
  // family vlmd does not implement (Mistral, Zephyr, ...), an unrecognised one, or an empty
  // source, falls back to ChatML with is_fallback() set so the caller can warn.
  static ChatTemplate Detect(std::string_view source);
  explicit ChatTemplate(ChatTemplateKind kind) : kind_(kind) {}

  // The prompt for `messages`; with add_assistant, the opening of the assistant's turn is
  // appended (llama_chat_apply_template's add_ass). Thread-safe (stateless).
  std::string Apply(std::span<const ChatMessage> messages, bool add_assistant) const;
  // The same text, each message's content marked literal: control-token text a client writes is
  // read as text, while the template's own markers are parsed (PromptText).
  PromptText ApplyMarked(std::span<const ChatMessage> messages, bool add_assistant) const;

  ChatTemplateKind kind() const { return kind_; }
  bool is_fallback() const { return fallback_; }
  std::string_view name() const;

 private:
  ChatTemplateKind kind_;
  bool fallback_ = false;
};

}  // namespace vlmd::engine::tokenizer
