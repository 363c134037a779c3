// Built-in chat templates (see chat_template.h). Output strings follow llama.cpp's
// llm_chat_apply_template (src/llama-chat.cpp @3f545be) byte for byte, since the parity goldens
// were made with it.
#include "engine/tokenizer/chat_template.h"

#include <algorithm>
#include <cctype>

namespace vlmd::engine::tokenizer {
namespace {

std::string Trim(std::string_view s) {
  size_t begin = 0;
  size_t end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return std::string(s.substr(begin, end - begin));
}

struct Named {
  std::string_view name;
  ChatTemplateKind kind;
};
constexpr Named kNames[] = {
    {"chatml", ChatTemplateKind::kChatml}, {"phi4", ChatTemplateKind::kPhi4},
    {"smolvlm", ChatTemplateKind::kSmolvlm}, {"llama3", ChatTemplateKind::kLlama3},
    {"gemma", ChatTemplateKind::kGemma}, {"phi3", ChatTemplateKind::kPhi3},
    {"vicuna", ChatTemplateKind::kVicuna}, {"vicuna-orca", ChatTemplateKind::kVicunaOrca},
    {"llama2", ChatTemplateKind::kLlama2}, {"llama2-sys", ChatTemplateKind::kLlama2Sys},
    {"llama2-sys-bos", ChatTemplateKind::kLlama2SysBos},
    {"llama2-sys-strip", ChatTemplateKind::kLlama2SysStrip},
    {"mistral-v1", ChatTemplateKind::kMistralV1}, {"mistral-v3", ChatTemplateKind::kMistralV3},
    {"mistral-v3-tekken", ChatTemplateKind::kMistralV3Tekken},
    {"mistral-v7", ChatTemplateKind::kMistralV7},
    {"mistral-v7-tekken", ChatTemplateKind::kMistralV7Tekken},
};

// Which [INST] variant a template is, by llama.cpp's substrings.
ChatTemplateKind DetectInst(std::string_view source) {
  auto has = [&](std::string_view needle) { return source.find(needle) != std::string_view::npos; };
  if (has("[SYSTEM_PROMPT]")) return ChatTemplateKind::kMistralV7;
  if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {  // Mistral's official v1/v3
    if (has(" [INST]")) return ChatTemplateKind::kMistralV1;
    if (has("\"[INST]\"")) return ChatTemplateKind::kMistralV3Tekken;
    return ChatTemplateKind::kMistralV3;
  }
  if (has("content.strip()")) return ChatTemplateKind::kLlama2SysStrip;
  if (has("bos_token + '[INST]")) return ChatTemplateKind::kLlama2SysBos;
  if (has("<<SYS>>")) return ChatTemplateKind::kLlama2Sys;
  return ChatTemplateKind::kLlama2;
}

// The [INST] family's prompts. None of them opens an assistant turn: the last [/INST] is it.
PromptText ApplyInst(ChatTemplateKind kind, std::span<const ChatMessage> messages) {
  using K = ChatTemplateKind;
  PromptText out;
  if (kind == K::kMistralV7 || kind == K::kMistralV7Tekken) {
    const std::string_view sp = kind == K::kMistralV7 ? " " : "";
    for (const ChatMessage& m : messages) {
      if (m.role == "system") {
        out.Append("[SYSTEM_PROMPT]");
        out.Append(sp);
        out.AppendLiteral(m.content);
        out.Append("[/SYSTEM_PROMPT]");
      } else if (m.role == "user") {
        out.Append("[INST]");
        out.Append(sp);
        out.AppendLiteral(m.content);
        out.Append("[/INST]");
      } else {
        out.Append(sp);
        out.AppendLiteral(m.content);
        out.Append("</s>");
      }
    }
    return out;
  }
  if (kind == K::kMistralV1 || kind == K::kMistralV3 || kind == K::kMistralV3Tekken) {
    const std::string_view lead = kind == K::kMistralV1 ? " " : "";
    const std::string_view trail = kind == K::kMistralV3Tekken ? "" : " ";
    bool in_turn = false;
    for (const ChatMessage& m : messages) {
      if (!in_turn) {
        out.Append(lead);
        out.Append("[INST]");
        out.Append(trail);
        in_turn = true;
      }
      if (m.role == "system") {
        out.AppendLiteral(m.content);
        out.Append("\n\n");
      } else if (m.role == "user") {
        out.AppendLiteral(m.content);
        out.Append(lead);
        out.Append("[/INST]");
      } else {
        out.Append(trail);
        out.AppendLiteral(kind == K::kMistralV3 ? Trim(m.content) : m.content);
        out.Append("</s>");
        in_turn = false;
      }
    }
    return out;
  }
  // Llama 2 and its variants.
  const bool system_tags = kind != K::kLlama2;
  const bool bos_inside = kind == K::kLlama2SysBos;
  const bool strip = kind == K::kLlama2SysStrip;
  bool in_turn = true;  // the first [INST] follows the tokenizer's BOS
  out.Append("[INST] ");
  for (const ChatMessage& m : messages) {
    const std::string content = strip ? Trim(m.content) : m.content;
    if (!in_turn) {
      in_turn = true;
      out.Append(bos_inside ? "<s>[INST] " : "[INST] ");
    }
    if (m.role == "system") {
      if (system_tags) out.Append("<<SYS>>\n");
      out.AppendLiteral(content);
      out.Append(system_tags ? "\n<</SYS>>\n\n" : "\n");
    } else if (m.role == "user") {
      out.AppendLiteral(content);
      out.Append(" [/INST]");
    } else {
      out.AppendLiteral(content);
      out.Append("</s>");
      in_turn = false;
    }
  }
  return out;
}

// Every marker ApplyMarked writes outside the messages' words, and the image wrappers of
// engine/runtime/multimodal_prompt.cpp (kept in step with both by hand).
constexpr std::string_view kMarkerTexts[] = {
    // ChatML, Phi-4, SmolVLM
    "<|im_start|>", "<|im_end|>", "<|im_sep|>", "<end_of_utterance>",
    // Llama 3
    "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
    // Gemma
    "<start_of_turn>", "<end_of_turn>",
    // Phi-3
    "<|system|>", "<|user|>", "<|assistant|>", "<|end|>",
    // Vicuna, Llama 2, Mistral
    "<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
    // image wrappers: Qwen VL, Gemma 3, InternVL, SmolVLM (and its <row_R_col_C> below)
    "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<start_of_image>", "<end_of_image>",
    "<img>", "</img>", "<IMG_CONTEXT>", "<fake_token_around_image>", "<global-img>", "<image>",
};

}  // namespace

bool IsPromptMarkerText(std::string_view text) {
  for (std::string_view m : kMarkerTexts) {
    if (text == m) return true;
  }
  // SmolVLM's tile markers: <row_R_col_C>, R and C decimal.
  constexpr std::string_view kRow = "<row_", kCol = "_col_";
  if (text.size() < kRow.size() + kCol.size() + 3 || text.substr(0, kRow.size()) != kRow ||
      text.back() != '>') {
    return false;
  }
  const std::string_view inner = text.substr(kRow.size(), text.size() - kRow.size() - 1);
  const size_t col = inner.find(kCol);
  if (col == std::string_view::npos || col == 0 || col + kCol.size() == inner.size()) return false;
  auto digits = [](std::string_view d) {
    return std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return digits(inner.substr(0, col)) && digits(inner.substr(col + kCol.size()));
}

ChatTemplate ChatTemplate::Detect(std::string_view source) {
  for (const Named& n : kNames) {
    if (n.name == source) return ChatTemplate(n.kind);
  }
  auto has = [&](std::string_view needle) { return source.find(needle) != std::string_view::npos; };
  auto unsupported = [] {
    ChatTemplate t(ChatTemplateKind::kChatml);
    t.fallback_ = true;
    return t;
  };
  // Same order as llama.cpp, so that a template claimed by an earlier family it knows (and we do
  // not implement) is not mistaken for a later one we do.
  if (has("<|im_start|>")) {
    if (has("<|im_sep|>")) return ChatTemplate(ChatTemplateKind::kPhi4);
    // SmolVLM opens with <|im_start|> but is not ChatML.
    if (has("<end_of_utterance>")) return ChatTemplate(ChatTemplateKind::kSmolvlm);
    return ChatTemplate(ChatTemplateKind::kChatml);
  }
  if (source.substr(0, 7) == "mistral" || has("[INST]")) return ChatTemplate(DetectInst(source));
  if (has("<|assistant|>") && has("<|end|>")) return ChatTemplate(ChatTemplateKind::kPhi3);
  if (has("[gMASK]<sop>")) return unsupported();                              // chatglm4
  if (has("<|assistant|>") && has("<|user|>")) return unsupported();          // falcon3/glmedge
  if (has("<|{{ item['role'] }}|>") && has("<|begin_of_image|>")) return unsupported();
  if (has("<|user|>") && has("<|endoftext|>")) return unsupported();          // zephyr
  if (has("bos_token + message['role']")) return unsupported();               // monarch
  if (has("<start_of_turn>")) return ChatTemplate(ChatTemplateKind::kGemma);
  if (has("'\\n\\nAssistant: ' + eos_token") || has("GPT4 Correct ")) return unsupported();  // orion, openchat
  if (has("USER: ") && has("ASSISTANT: ")) {
    return ChatTemplate(has("SYSTEM: ") ? ChatTemplateKind::kVicunaOrca : ChatTemplateKind::kVicuna);
  }
  if ((has("### Instruction:") && has("<|EOT|>")) ||
      (has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>"))) {
    return unsupported();  // deepseek-coder, command-r
  }
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) {
    return ChatTemplate(ChatTemplateKind::kLlama3);
  }
  return unsupported();
}

std::string_view ChatTemplate::name() const {
  for (const Named& n : kNames) {
    if (n.kind == kind_) return n.name;
  }
  return "chatml";
}

std::string ChatTemplate::Apply(std::span<const ChatMessage> messages, bool add_assistant) const {
  return ApplyMarked(messages, add_assistant).text();
}

PromptText ChatTemplate::ApplyMarked(std::span<const ChatMessage> messages,
                                     bool add_assistant) const {
  PromptText out;
  switch (kind_) {
    case ChatTemplateKind::kChatml:
      for (const ChatMessage& m : messages) {
        out.Append("<|im_start|>" + m.role + "\n");
        out.AppendLiteral(m.content);
        out.Append("<|im_end|>\n");
      }
      if (add_assistant) out.Append("<|im_start|>assistant\n");
      break;
    case ChatTemplateKind::kPhi4:
      for (const ChatMessage& m : messages) {
        out.Append("<|im_start|>" + m.role + "<|im_sep|>");
        out.AppendLiteral(m.content);
        out.Append("<|im_end|>");
      }
      if (add_assistant) out.Append("<|im_start|>assistant<|im_sep|>");
      break;
    case ChatTemplateKind::kSmolvlm:
      out.Append("<|im_start|>");  // SmolVLM's BOS, written by the template
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          out.AppendLiteral(m.content);
          out.Append("\n\n");
        } else {
          out.Append(m.role == "user" ? "User: " : "Assistant: ");
          out.AppendLiteral(m.content);
          out.Append("<end_of_utterance>\n");
        }
      }
      if (add_assistant) out.Append("Assistant:");
      break;
    case ChatTemplateKind::kLlama3:
      for (const ChatMessage& m : messages) {
        out.Append("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n");
        out.AppendLiteral(Trim(m.content));
        out.Append("<|eot_id|>");
      }
      if (add_assistant) out.Append("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    case ChatTemplateKind::kGemma: {
      PromptText system;  // Gemma has no system turn: it is prepended to the next user turn
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          system.AppendLiteral(Trim(m.content));
          continue;
        }
        const std::string role = m.role == "assistant" ? "model" : m.role;
        out.Append("<start_of_turn>" + role + "\n");
        if (!system.empty() && role != "model") {
          out.AppendPrompt(system);
          out.Append("\n\n");
          system.clear();
        }
        out.AppendLiteral(Trim(m.content));
        out.Append("<end_of_turn>\n");
      }
      if (add_assistant) out.Append("<start_of_turn>model\n");
      break;
    }
    case ChatTemplateKind::kPhi3:
      for (const ChatMessage& m : messages) {
        out.Append("<|" + m.role + "|>\n");
        out.AppendLiteral(m.content);
        out.Append("<|end|>\n");
      }
      if (add_assistant) out.Append("<|assistant|>\n");
      break;
    case ChatTemplateKind::kVicuna:
    case ChatTemplateKind::kVicunaOrca:
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          const bool orca = kind_ == ChatTemplateKind::kVicunaOrca;
          if (orca) out.Append("SYSTEM: ");
          out.AppendLiteral(m.content);
          out.Append(orca ? "\n" : "\n\n");
        } else if (m.role == "user") {
          out.Append("USER: ");
          out.AppendLiteral(m.content);
          out.Append("\n");
        } else if (m.role == "assistant") {
          out.Append("ASSISTANT: ");
          out.AppendLiteral(m.content);
          out.Append("</s>\n");
        }
      }
      if (add_assistant) out.Append("ASSISTANT:");
      break;
    case ChatTemplateKind::kLlama2:
    case ChatTemplateKind::kLlama2Sys:
    case ChatTemplateKind::kLlama2SysBos:
    case ChatTemplateKind::kLlama2SysStrip:
    case ChatTemplateKind::kMistralV1:
    case ChatTemplateKind::kMistralV3:
    case ChatTemplateKind::kMistralV3Tekken:
    case ChatTemplateKind::kMistralV7:
    case ChatTemplateKind::kMistralV7Tekken:
      out = ApplyInst(kind_, messages);
      break;
  }
  return out;
}

}  // namespace vlmd::engine::tokenizer
