// The official `openai` npm client, unmodified, against a live vlmd (VLMD_URL): model list, a
// chat completion with an image, the same request streamed (identical text), usage in the last
// streamed chunk, and 400 APIErrors for bad requests. Exits non-zero on the first failure.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

const baseURL = process.env.VLMD_URL;
const imagePath = process.env.VLMD_IMAGE;
if (!baseURL || !imagePath) {
  console.error('openai_client_test: set VLMD_URL (e.g. http://127.0.0.1:8080) and VLMD_IMAGE (a PNG path)');
  process.exit(2);
}

// maxRetries 0: a 5xx or 429 must fail the test now, not be hidden behind the client's retries.
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: process.env.VLMD_API_KEY ?? 'unused', maxRetries: 0 });
const imageUrl = `data:image/png;base64,${readFileSync(imagePath).toString('base64')}`;

function chatRequest(model, extra = {}) {
  return {
    model,
    messages: [{
      role: 'user',
      content: [
        { type: 'text', text: 'Describe the image.' },
        { type: 'image_url', image_url: { url: imageUrl } },
      ],
    }],
    temperature: 0,
    max_tokens: 8,
    ...extra,
  };
}

// Runs `fn` and asserts it throws the client's APIError with HTTP status `status`.
async function expectApiError(name, status, fn) {
  let thrown = null;
  try {
    await fn();
  } catch (e) {
    thrown = e;
  }
  assert.ok(thrown, `${name}: expected an APIError ${status}, the request succeeded`);
  assert.ok(thrown instanceof OpenAI.APIError,
    `${name}: expected OpenAI.APIError, got ${thrown?.constructor?.name}: ${thrown?.message}`);
  assert.equal(thrown.status, status, `${name}: status ${thrown.status} (${thrown.message})`);
  return thrown;
}

const tests = [];
const test = (name, fn) => tests.push({ name, fn });
let model = null;
let plainContent = null;

test('models.list returns the served id', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.equal(ids.length, 1, `expected one model, got ${JSON.stringify(ids)}`);
  assert.ok(typeof ids[0] === 'string' && ids[0].length > 0, 'empty model id');
  model = ids[0];
  if (process.env.VLMD_MODEL_ID) assert.equal(ids[0], process.env.VLMD_MODEL_ID);
});

test('chat completion with an image (non-streaming)', async () => {
  const r = await client.chat.completions.create(chatRequest(model));
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, model);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(c.message.content.length > 0, 'empty content');
  assert.ok(['stop', 'length'].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  assert.ok(r.usage, 'no usage');
  assert.ok(r.usage.prompt_tokens > 0, `prompt_tokens ${r.usage.prompt_tokens}`);
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 8,
    `completion_tokens ${r.usage.completion_tokens}`);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  plainContent = c.message.content;
});

test('streamed deltas concatenate to the non-streaming content', async () => {
  assert.ok(plainContent !== null, 'needs the non-streaming test');
  const stream = await client.chat.completions.create(chatRequest(model, { stream: true }));
  let text = '';
  let finish = null;
  let chunks = 0;
  for await (const chunk of stream) {
    ++chunks;
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.equal(finish, null, 'a chunk came after the one with finish_reason');
    const choice = chunk.choices[0];
    if (!choice) continue;
    text += choice.delta?.content ?? '';
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  assert.ok(chunks >= 2, `only ${chunks} chunk(s)`);
  assert.equal(text, plainContent, 'streamed text differs from the non-streaming text');
  assert.ok(['stop', 'length'].includes(finish), `stream ended without finish_reason (${finish})`);
});

test('stream_options.include_usage puts usage in the final chunk', async () => {
  const stream = await client.chat.completions.create(
    chatRequest(model, { stream: true, stream_options: { include_usage: true } }));
  let last = null;
  let usageChunks = 0;
  for await (const chunk of stream) {
    if (chunk.usage) ++usageChunks;
    last = chunk;
  }
  assert.ok(last, 'no chunks');
  assert.equal(usageChunks, 1, `${usageChunks} chunks carried usage`);
  assert.ok(last.usage, `final chunk has no usage: ${JSON.stringify(last)}`);
  assert.deepEqual(last.choices, [], 'the usage chunk has no choices (OpenAI form)');
  assert.ok(last.usage.prompt_tokens > 0 && last.usage.completion_tokens > 0);
  assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + last.usage.completion_tokens);
});

test('max_tokens 0 is a 400 APIError', async () => {
  await expectApiError('max_tokens 0', 400, () => client.chat.completions.create(chatRequest(model, { max_tokens: 0 })));
});

test('a data URI that is not base64 is a 400 APIError', async () => {
  const req = chatRequest(model);
  req.messages[0].content[1].image_url.url = 'data:image/png;base64,@@not*base64@@';
  await expectApiError('broken base64', 400, () => client.chat.completions.create(req));
});

test('a truncated PNG is a 400 APIError', async () => {
  const req = chatRequest(model);
  const png = readFileSync(imagePath);
  req.messages[0].content[1].image_url.url =
    `data:image/png;base64,${png.subarray(0, png.length >> 1).toString('base64')}`;
  await expectApiError('truncated PNG', 400, () => client.chat.completions.create(req));
});

test('a streamed bad request is a 400 APIError too', async () => {
  await expectApiError('stream max_tokens 0', 400,
    () => client.chat.completions.create(chatRequest(model, { max_tokens: 0, stream: true })));
});

let passed = 0;
let failed = 0;
for (const { name, fn } of tests) {
  try {
    await fn();
    ++passed;
    console.log(`ok   ${name}`);
  } catch (e) {
    ++failed;
    console.error(`FAIL ${name}\n     ${e?.stack ?? e}`);
  }
}
console.log(`openai_client: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
