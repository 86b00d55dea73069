"""CosyVoice 2's text-speech language model (the original's cosyvoice.llm.llm.Qwen2LM) in PyTorch, our own code written
from the project's public description, for the tests: parameter names as its released llm.pt, so that file loads with
strict=True.

A transformers Qwen2ForCausalLM (under llm.model) reads rows of embeddings: [sos, the prompt text's and the text's
token embeddings (the Qwen2 table), task_id, the prompt speech tokens' embeddings (speech_embedding, 6561 FSQ codes +
3 specials)]; each step's last hidden state (after the final norm) goes through llm_decoder (Linear with bias) to
log-probabilities over speech_token_size + 3 ids: the codes, eos (= speech_token_size), an unused id and the bistream
fill token. `sampling(logp, decoded, top_k)` chooses the next id; while fewer than min_len tokens are out, ids >=
speech_token_size are redrawn (at most 100 draws, then an error, as the original; with greedy_sampling, ours for
the tests, the best code is taken instead); any of the three special ids stops. The chosen code's speech embedding
is the next step's row."""
from __future__ import annotations

from typing import Callable, Iterator

import torch
from torch import nn


class Qwen2Encoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        from transformers import Qwen2ForCausalLM
        self.model = Qwen2ForCausalLM(config)

    def forward_one_step(self, rows: torch.Tensor, cache=None):
        import inspect
        # transformers 5 renamed past_key_values to cache (the old name still works, deprecated)
        name = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        out = self.model(inputs_embeds=rows, output_hidden_states=True, use_cache=True, return_dict=True,
                         **{name: cache})
        return out.hidden_states[-1], (out.cache if hasattr(out, "cache") else out.past_key_values)


def nucleus_sampling(scores: torch.Tensor, top_p: float = 0.8, top_k: int = 25) -> int:
    """The most probable ids, in order, while their cumulative probability is below top_p and fewer than top_k are
    taken; one drawn in proportion to its probability."""
    probs, order = scores.softmax(dim=0).sort(descending=True, stable=True)
    taken, total = 0, 0.0
    while taken < len(order) and total < top_p and taken < top_k:
        total += float(probs[taken])
        taken += 1
    return int(order[torch.multinomial(probs[:taken], 1, replacement=True)])


def ras_sampling(scores: torch.Tensor, decoded: list[int], top_k: int, top_p: float = 0.8, nucleus_k: int = 25,
                 win_size: int = 10, tau_r: float = 0.1) -> int:
    """Repetition-aware sampling (VALL-E 2): nucleus sampling, unless the pick already occurs win_size x tau_r times
    in the last win_size tokens; then a draw from the whole distribution."""
    pick = nucleus_sampling(scores, top_p, nucleus_k)
    if sum(1 for t in decoded[-win_size:] if t == pick) >= win_size * tau_r:
        pick = int(torch.multinomial(scores.softmax(dim=0), 1, replacement=True))
    return pick


def greedy_sampling(scores: torch.Tensor, decoded: list[int], top_k: int) -> int:
    return int(scores.argmax())


class Qwen2LM(nn.Module):
    def __init__(self, llm_input_size: int, llm_output_size: int, speech_token_size: int, qwen_config,
                 sampling: Callable = ras_sampling):
        super().__init__()
        self.speech_token_size = speech_token_size
        self.llm_embedding = nn.Embedding(2, llm_input_size)   # rows 0: sos, 1: task_id
        self.llm = Qwen2Encoder(qwen_config)
        self.llm_decoder = nn.Linear(llm_output_size, speech_token_size + 3)
        self.speech_embedding = nn.Embedding(speech_token_size + 3, llm_input_size)
        self.sampling = sampling
        self.stop_ids = {speech_token_size + i for i in range(3)}

    def prompt_rows(self, text: torch.Tensor, prompt_text: torch.Tensor, prompt_speech_token: torch.Tensor):
        table = self.llm.model.model.embed_tokens
        parts = [self.llm_embedding.weight[0:1], table(torch.cat([prompt_text, text]).long()),
                 self.llm_embedding.weight[1:2]]
        if len(prompt_speech_token):
            parts.append(self.speech_embedding(prompt_speech_token.long()))
        return torch.cat(parts)[None]

    def _choose(self, logp: torch.Tensor, decoded: list[int], top_k: int, ignore_eos: bool) -> int:
        if self.sampling is greedy_sampling:   # (ours, for tests) the best code while stopping is not allowed yet
            return int(logp[:self.speech_token_size].argmax()) if ignore_eos else int(logp.argmax())
        for _ in range(101):
            pick = self.sampling(logp, decoded, top_k)
            if not ignore_eos or pick < self.speech_token_size:
                return pick
        raise RuntimeError("sampling kept choosing a stop token while fewer than min_len tokens were out")

    @torch.inference_mode()
    def inference(self, text: torch.Tensor, prompt_text: torch.Tensor, prompt_speech_token: torch.Tensor,
                  sampling: int = 25, max_token_text_ratio: float = 20, min_token_text_ratio: float = 2
                  ) -> Iterator[int]:
        """The speech tokens of `text` (1-D id tensors), one at a time."""
        rows = self.prompt_rows(text, prompt_text, prompt_speech_token)
        min_len, max_len = int(len(text) * min_token_text_ratio), int(len(text) * max_token_text_ratio)
        decoded, cache = [], None
        for i in range(max_len):
            hidden, cache = self.llm.forward_one_step(rows, cache)
            logp = self.llm_decoder(hidden[0, -1]).log_softmax(dim=-1)
            pick = self._choose(logp, decoded, sampling, ignore_eos=i < min_len)
            if pick in self.stop_ids:
                return
            yield pick
            decoded.append(pick)
            rows = self.speech_embedding.weight[pick].reshape(1, 1, -1)

    def step_logits(self, text: torch.Tensor, prompt_text: torch.Tensor, prompt_speech_token: torch.Tensor,
                    tokens: list[int]) -> torch.Tensor:
        """Log-probabilities [len(tokens) + 1, vocab] after the prompt and after each of `tokens` (one forward)."""
        rows = self.prompt_rows(text, prompt_text, prompt_speech_token)
        if tokens:
            rows = torch.cat([rows, self.speech_embedding(torch.tensor(tokens))[None]], dim=1)
        with torch.inference_mode():
            hidden, _ = self.llm.forward_one_step(rows)
            start = rows.shape[1] - len(tokens) - 1
            return self.llm_decoder(hidden[0, start:]).log_softmax(dim=-1)


class CosyVoice3LM(Qwen2LM):
    """CosyVoice 3's LM (the original's cosyvoice.llm.llm.CosyVoice3LM): as Qwen2LM, but sos and task_id are rows of
    the speech table (ids speech_token_size + 0 and + 2), which has speech_token_size + 200 rows, the head has no
    bias, and any of the 200 ids from speech_token_size on stops."""

    def __init__(self, llm_input_size: int, llm_output_size: int, speech_token_size: int, qwen_config,
                 sampling: Callable = ras_sampling):
        nn.Module.__init__(self)
        self.speech_token_size = speech_token_size
        self.llm = Qwen2Encoder(qwen_config)
        self.llm_decoder = nn.Linear(llm_output_size, speech_token_size + 200, bias=False)
        self.speech_embedding = nn.Embedding(speech_token_size + 200, llm_input_size)
        self.sampling = sampling
        self.stop_ids = {speech_token_size + i for i in range(200)}

    def prompt_rows(self, text: torch.Tensor, prompt_text: torch.Tensor, prompt_speech_token: torch.Tensor):
        table, speech = self.llm.model.model.embed_tokens, self.speech_embedding.weight
        sos, task = self.speech_token_size, self.speech_token_size + 2
        parts = [speech[sos:sos + 1], table(torch.cat([prompt_text, text]).long()), speech[task:task + 1]]
        if len(prompt_speech_token):
            parts.append(self.speech_embedding(prompt_speech_token.long()))
        return torch.cat(parts)[None]
