// Chat templates: detection from the fixtures' tokenizer.chat_template and byte-exact prompts
// against the llama.cpp goldens; the other families against hand-written expected strings.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "engine/gguf/gguf_reader.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "test_util.h"

namespace vlmd::engine::tokenizer {
namespace {

class GoldenPromptTest
    : public ::testing::TestWithParam<std::pair<const char*, ChatTemplateKind>> {};

TEST_P(GoldenPromptTest, ReproducesLlamaCppPrompts) {
  const std::string fixture = GetParam().first;
  auto file = gguf::GgufFile::Open(testing::FixturePath(fixture + "/text.gguf"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto source = (*file)->GetString("tokenizer.chat_template");
  ASSERT_TRUE(source.ok());
  const ChatTemplate tmpl = ChatTemplate::Detect(*source);
  EXPECT_EQ(tmpl.kind(), GetParam().second);
  EXPECT_FALSE(tmpl.is_fallback());

  const std::vector<uint8_t> bytes =
      testing::ReadFileBytes(testing::FixturePath(fixture + "/golden.json"));
  const auto golden = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  ASSERT_TRUE(golden.is_object());
  int n = 0;
  for (const auto& c : golden["cases"]) {
    std::string content;
    for (size_t i = 0; i < c["images"].size(); ++i) content += "<__media__>";
    content += c["user_message"].get<std::string>();
    const std::vector<ChatMessage> messages = {{"user", content}};
    EXPECT_EQ(tmpl.Apply(messages, /*add_assistant=*/true), c["prompt"].get<std::string>())
        << c["name"];
    ++n;
  }
  EXPECT_GE(n, 3);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenPromptTest,
                         ::testing::Values(std::make_pair("tiny-llava", ChatTemplateKind::kChatml),
                                           std::make_pair("tiny-llava16", ChatTemplateKind::kVicuna),
                                           std::make_pair("tiny-internvl", ChatTemplateKind::kChatml),
                                           std::make_pair("tiny-gemma3", ChatTemplateKind::kGemma),
                                           std::make_pair("tiny-smolvlm",
                                                          ChatTemplateKind::kSmolvlm)));

TEST(ChatTemplateTest, DetectsFamiliesBySubstring) {
  EXPECT_EQ(ChatTemplate::Detect("{{ '<|start_header_id|>' + role + '<|end_header_id|>' }}").kind(),
            ChatTemplateKind::kLlama3);
  EXPECT_EQ(ChatTemplate::Detect("{{ '<start_of_turn>' + role }}").kind(), ChatTemplateKind::kGemma);
  EXPECT_EQ(ChatTemplate::Detect("<|im_start|>{{ x }}<|im_sep|>").kind(), ChatTemplateKind::kPhi4);
  EXPECT_EQ(ChatTemplate::Detect("{{'<|user|>'}}{{'<|end|>'}}{{'<|assistant|>'}}").kind(),
            ChatTemplateKind::kPhi3);
  EXPECT_EQ(ChatTemplate::Detect("llama3").kind(), ChatTemplateKind::kLlama3);
  EXPECT_EQ(ChatTemplate::Detect("{{ 'USER: ' + m }}{{ 'ASSISTANT: ' }}").kind(), ChatTemplateKind::kVicuna);
  EXPECT_EQ(ChatTemplate::Detect("{{ 'SYSTEM: ' }}{{ 'USER: ' + m }}{{ 'ASSISTANT: ' }}").kind(),
            ChatTemplateKind::kVicunaOrca);
  EXPECT_EQ(ChatTemplate::Detect("vicuna-orca").kind(), ChatTemplateKind::kVicunaOrca);
  // The [INST] family by llama.cpp's substrings.
  const std::pair<std::string_view, ChatTemplateKind> inst[] = {
      {"[INST] {{ m }} [/INST]", ChatTemplateKind::kLlama2},
      {"[INST] <<SYS>>{{ s }}<</SYS>> [/INST]", ChatTemplateKind::kLlama2Sys},
      {"{{ bos_token + '[INST] ' }}<<SYS>>", ChatTemplateKind::kLlama2SysBos},
      {"[INST] {{ message.content.strip() }}", ChatTemplateKind::kLlama2SysStrip},
      {"{{ ' [INST] ' + system_message }}", ChatTemplateKind::kMistralV1},
      {"[AVAILABLE_TOOLS]{{ '[INST] ' }}", ChatTemplateKind::kMistralV3},
      {"[AVAILABLE_TOOLS]{{ \"[INST]\" }}", ChatTemplateKind::kMistralV3Tekken},
      {"[SYSTEM_PROMPT]{{ s }}[INST]", ChatTemplateKind::kMistralV7},
      {"mistral-v7-tekken", ChatTemplateKind::kMistralV7Tekken},
  };
  for (const auto& [source, kind] : inst) {
    EXPECT_EQ(ChatTemplate::Detect(source).kind(), kind) << source;
    EXPECT_FALSE(ChatTemplate::Detect(source).is_fallback()) << source;
  }
  for (std::string_view unknown : {"", "{{ messages }}", "<|user|>{{ m }}<|endoftext|>"}) {
    const ChatTemplate t = ChatTemplate::Detect(unknown);
    EXPECT_EQ(t.kind(), ChatTemplateKind::kChatml) << unknown;
    EXPECT_TRUE(t.is_fallback()) << unknown;
  }
  EXPECT_FALSE(ChatTemplate::Detect("chatml").is_fallback());
}

TEST(ChatTemplateTest, MultiTurnOutputs) {
  const std::vector<ChatMessage> chat = {
      {"system", " Be brief. "}, {"user", " Hi "}, {"assistant", "Hello"}, {"user", "Bye"}};
  // llama.cpp's vicuna / vicuna-orca: content as given (no trimming), </s> after each answer.
  EXPECT_EQ(ChatTemplate(ChatTemplateKind::kVicuna).Apply(chat, true),
            " Be brief. \n\nUSER:  Hi \nASSISTANT: Hello</s>\nUSER: Bye\nASSISTANT:");
  EXPECT_EQ(ChatTemplate(ChatTemplateKind::kVicunaOrca).Apply(chat, false),
            "SYSTEM:  Be brief. \nUSER:  Hi \nASSISTANT: Hello</s>\nUSER: Bye\n");
  // The [INST] family as llama.cpp writes it (no assistant opener: the last [/INST] is it).
  const std::pair<ChatTemplateKind, std::string> inst[] = {
      {ChatTemplateKind::kLlama2, "[INST]  Be brief. \n Hi  [/INST]Hello</s>[INST] Bye [/INST]"},
      {ChatTemplateKind::kLlama2Sys,
       "[INST] <<SYS>>\n Be brief. \n<</SYS>>\n\n Hi  [/INST]Hello</s>[INST] Bye [/INST]"},
      {ChatTemplateKind::kLlama2SysBos,
       "[INST] <<SYS>>\n Be brief. \n<</SYS>>\n\n Hi  [/INST]Hello</s><s>[INST] Bye [/INST]"},
      {ChatTemplateKind::kLlama2SysStrip,
       "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]Hello</s>[INST] Bye [/INST]"},
      {ChatTemplateKind::kMistralV1, " [INST]  Be brief. \n\n Hi  [/INST] Hello</s> [INST] Bye [/INST]"},
      {ChatTemplateKind::kMistralV3, "[INST]  Be brief. \n\n Hi [/INST] Hello</s>[INST] Bye[/INST]"},
      {ChatTemplateKind::kMistralV3Tekken, "[INST] Be brief. \n\n Hi [/INST]Hello</s>[INST]Bye[/INST]"},
      {ChatTemplateKind::kMistralV7,
       "[SYSTEM_PROMPT]  Be brief. [/SYSTEM_PROMPT][INST]  Hi [/INST] Hello</s>[INST] Bye[/INST]"},
      {ChatTemplateKind::kMistralV7Tekken,
       "[SYSTEM_PROMPT] Be brief. [/SYSTEM_PROMPT][INST] Hi [/INST]Hello</s>[INST]Bye[/INST]"},
  };
  for (const auto& [kind, want] : inst) {
    const ChatTemplate t(kind);
    EXPECT_EQ(t.Apply(chat, true), want) << t.name();
  }
  EXPECT_EQ(ChatTemplate(ChatTemplateKind::kLlama3).Apply(chat, true),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(ChatTemplate(ChatTemplateKind::kGemma).Apply(chat, true),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
            "<start_of_turn>model\nHello<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(ChatTemplate(ChatTemplateKind::kSmolvlm).Apply(chat, false),
            "<|im_start|> Be brief. \n\nUser:  Hi <end_of_utterance>\n"
            "Assistant: Hello<end_of_utterance>\nUser: Bye<end_of_utterance>\n");
  EXPECT_EQ(ChatTemplate(ChatTemplateKind::kChatml).Apply(chat, false),
            "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n"
            "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n");
}

}  // namespace
}  // namespace vlmd::engine::tokenizer
