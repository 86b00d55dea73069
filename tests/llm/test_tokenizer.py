"""A model directory's tokenizer and chat template as transformers reads them: the same prompt text and ids."""
from __future__ import annotations

import json

import pytest
from tiny_bpe import chat_tokenizer

from lite.llm.tokenizer import ChatTokenizer, TokenizerError

# Qwen2.5's template, tools part included: loops, tests, tojson, raise_exception.
TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}{{- '\\n\\n# Tools\\n<tools>' }}{%- for tool in tools %}"
    "{{- '\\n' }}{{- tool | tojson }}{%- endfor %}{{- '\\n</tools><|im_end|>\\n' }}"
    "{%- else %}{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}{%- endif %}"
    "{%- for message in messages %}{%- if message.role not in ['system', 'user', 'assistant'] %}"
    "{{- raise_exception('unknown role ' + message.role) }}{%- endif %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")

MESSAGES = [
    [{"role": "user", "content": "Hello, wörld! 🙂"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"}],
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    corpus = ["hello world, be brief", "you are a helpful assistant", "system user assistant tools 2+2 3+3 wörld 🙂"]
    hf = chat_tokenizer(corpus * 10, 400, TEMPLATE)
    tok = hf.backend_tokenizer
    d = tmp_path_factory.mktemp("model")
    hf.save_pretrained(str(d))
    with open(d / "generation_config.json", "w") as f:
        json.dump({"eos_token_id": [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]}, f)
    return str(d), hf


@pytest.mark.parametrize("messages", MESSAGES)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_matches_transformers(model_dir, messages, add_generation_prompt):
    path, hf = model_dir
    ours = ChatTokenizer(path)
    want = hf.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)
    assert ours.apply_chat_template(messages, add_generation_prompt=add_generation_prompt) == want
    ids = ours.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
    assert ids == hf.encode(want, add_special_tokens=False)
    assert ours.decode(ids, skip_special_tokens=False) == want


def test_tools_are_rendered_as_json(model_dir):
    path, hf = model_dir
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"a": "int"}}}]
    want = hf.apply_chat_template(MESSAGES[0], tools=tools, add_generation_prompt=True, tokenize=False)
    assert ChatTokenizer(path).apply_chat_template(MESSAGES[0], tools=tools) == want


def test_special_tokens_and_errors(model_dir, tmp_path):
    path, hf = model_dir
    ours = ChatTokenizer(path)
    assert ours.eos_token == "<|im_end|>" and ours.eos_token_ids == {hf.convert_tokens_to_ids("<|im_end|>"),
                                                                      hf.convert_tokens_to_ids("<|endoftext|>")}
    assert ours.encode("hello world") == hf.encode("hello world")
    with pytest.raises(Exception, match="unknown role tool"):
        ours.apply_chat_template([{"role": "tool", "content": "x"}])
    with pytest.raises(TokenizerError, match="has no tokenizer.json"):
        ChatTokenizer(str(tmp_path))
