"""The OpenAI-compatible server, started on 127.0.0.1 by the test, through the official `openai` client: 16
concurrent streaming chats each equal to the same chat run alone, completions from text and from token ids, and
4xx answers with a JSON error for malformed JSON, an unknown model and a prompt too long for the cache."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai")
uvicorn = pytest.importorskip("uvicorn")

from lite.llm.text_engine import TextEngine  # noqa: E402
from lite.serve import create_app, start_in_thread  # noqa: E402

from test_text_engine import model_dir  # noqa: E402,F401  (the checkpoint-directory fixture)


def start_server(app):
    """Serves `app` on a free 127.0.0.1 port in a thread: (url, the uvicorn server, its thread)."""
    return start_in_thread(app)


@pytest.fixture(scope="module")
def server(model_dir):  # noqa: F811
    d, model, hf_tok = model_dir
    engine = TextEngine.from_pretrained(d, block_size=8, num_blocks=96, max_num_seqs=16, max_num_batched_tokens=64)
    url, srv, thread = start_server(create_app(engine, "tiny-qwen2", max_model_len=256))
    yield url, d
    srv.should_exit = True
    thread.join(timeout=10)


def client(url):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


def chat_alone(model_dir_path, content):
    engine = TextEngine.from_pretrained(model_dir_path, block_size=8, num_blocks=64)
    from lite.llm import SamplingParams
    return engine.generate([[{"role": "user", "content": content}]], SamplingParams(max_new_tokens=12, temperature=0))[0]


def test_concurrent_streaming_chats_equal_each_run_alone(server):
    url, d = server
    prompts = [f"hello world {i} the quick fox" + " dog" * (i % 5) for i in range(16)]

    def stream(content):
        parts, finish = [], None
        for chunk in client(url).chat.completions.create(model="tiny-qwen2", stream=True, max_tokens=12, temperature=0,
                                                         messages=[{"role": "user", "content": content}]):
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        return "".join(parts), finish

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(stream, prompts))
    for content, (text, finish) in zip(prompts, results):
        alone = chat_alone(d, content)
        assert text == alone.text and finish == alone.finish_reason


def test_completions_from_text_and_token_ids(server):
    url, _ = server
    c = client(url)
    text = c.completions.create(model="tiny-qwen2", prompt="the lazy dog", max_tokens=8, temperature=0)
    ids = c.completions.create(model="tiny-qwen2", prompt=[5, 6, 7, 8], max_tokens=8, temperature=0)
    assert text.usage.completion_tokens == 8 or text.choices[0].finish_reason == "stop"
    assert ids.usage.prompt_tokens == 4
    assert [m.id for m in c.models.list().data] == ["tiny-qwen2"]


def post(url, path, body: bytes):
    req = urllib.request.Request(url + path, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_bad_requests_get_4xx_with_a_json_error(server):
    url, _ = server
    status, body = post(url, "/v1/chat/completions", b"{not json")
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    status, body = post(url, "/v1/chat/completions", json.dumps(
        {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]}).encode())
    assert status == 404 and "does not exist" in body["error"]["message"]
    status, body = post(url, "/v1/completions", json.dumps(
        {"model": "tiny-qwen2", "prompt": list(range(5, 50)) * 40, "max_tokens": 4}).encode())   # 1800 tokens
    assert status == 400 and "KV cache holds" in body["error"]["message"]
    status, body = post(url, "/v1/completions", json.dumps({"prompt": "x", "temperature": -1}).encode())
    assert status == 400 and "temperature" in body["error"]["message"]
    status, body = post(url, "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}).encode())
    assert status == 400 and "reads no images" in body["error"]["message"]
    with urllib.request.urlopen(url + "/health", timeout=10) as r:
        assert json.loads(r.read()) == {"status": "ok"}
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    assert "lite_requests_total" in text and "lite_kv_cache_free_blocks 96" in text   # every block back


def test_n_choices_sampled_in_one_batch(server):
    """n = 3: three choices (index 0-2), each sampled from seed + its index: the same request repeats them, choice i
    equals the engine's i-th choice run alone, greedy choices are identical, and streaming delivers the same text per
    index."""
    from lite.llm import SamplingParams

    url, d = server
    c = client(url)
    msgs = [{"role": "user", "content": "tell me about the fox"}]
    a = c.chat.completions.create(model="tiny-qwen2", messages=msgs, n=3, max_tokens=10, temperature=1.0, seed=11)
    b = c.chat.completions.create(model="tiny-qwen2", messages=msgs, n=3, max_tokens=10, temperature=1.0, seed=11)
    assert [ch.index for ch in a.choices] == [0, 1, 2]
    texts = [ch.message.content for ch in a.choices]
    assert texts == [ch.message.content for ch in b.choices] and len(set(texts)) > 1
    engine = TextEngine.from_pretrained(d, block_size=8, num_blocks=64)
    alone = engine.generate([msgs], SamplingParams(max_new_tokens=10, temperature=1.0, seed=11, n=3))[0]
    assert [ch.text for ch in alone.choices] == texts
    assert a.usage.completion_tokens == sum(len(ch.token_ids) for ch in alone.choices)
    streamed = {0: "", 1: "", 2: ""}
    for chunk in c.chat.completions.create(model="tiny-qwen2", messages=msgs, n=3, max_tokens=10, temperature=1.0,
                                           seed=11, stream=True):
        for ch in chunk.choices:
            streamed[ch.index] += ch.delta.content or ""
    assert [streamed[i] for i in range(3)] == texts
    greedy = c.completions.create(model="tiny-qwen2", prompt="the lazy dog", n=2, max_tokens=6, temperature=0)
    assert greedy.choices[0].text == greedy.choices[1].text
    status, body = post(url, "/v1/completions", json.dumps({"prompt": "x", "n": 0}).encode())
    assert status == 400 and "'n'" in body["error"]["message"]
