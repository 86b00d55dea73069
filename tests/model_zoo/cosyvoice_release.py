"""A tiny CosyVoice 2 / 3 release directory with seeded random weights, laid out as the released one: cosyvoice<v>.yaml
(HyperPyYAML, as the project writes it), llm.pt / flow.pt / hift.pt (the modules' state dicts), CosyVoice-BlankEN/
(the Qwen2 backbone's config.json and tokenizer) and the two ONNX front-end models (speech_tokenizer_v2.onnx: 128-bin
log mel at 100 Hz -> 25 Hz tokens; campplus.onnx: 80-bin fbank -> 192-dim embedding), here small stand-ins with the
released files' inputs and outputs. Also the PyTorch reference modules (model_zoo.reference.cosyvoice_*)."""
from __future__ import annotations

import os

import torch
from torch import nn

SPEECH_TOKENS = 40
WORDS = ["<unk>", "hello", "world", "the", "cat", "sat", "on", "a", "mat", "speak", "softly", "and", "slowly", "now",
         "please", "read", "this", "line", "happily", "."]
QWEN = dict(vocab_size=352, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, rope_theta=10000.0, tie_word_embeddings=True,
            rms_norm_eps=1e-6)
FLOW = dict(input_size=16, output_size=80, spk_embed_dim=192, output_type="mel", vocab_size=SPEECH_TOKENS,
            input_frame_rate=25, only_mask_loss=True, token_mel_ratio=2, pre_lookahead_len=3,
            encoder=dict(output_size=16, attention_heads=2, linear_units=24, num_blocks=1, dropout_rate=0.1,
                         positional_dropout_rate=0.1, attention_dropout_rate=0.1, normalize_before=True,
                         input_layer="linear", pos_enc_layer_type="rel_pos_espnet",
                         selfattention_layer_type="rel_selfattn", input_size=16, use_cnn_module=False,
                         macaron_style=False, use_dynamic_chunk=True, num_up_blocks=1),
            decoder=dict(in_channels=240, n_spks=1, spk_emb_dim=80,
                         cfm_params=dict(sigma_min=1e-06, solver="euler", t_scheduler="cosine", training_cfg_rate=0.2,
                                         inference_cfg_rate=0.7, reg_loss_type="l1"),
                         estimator=dict(in_channels=320, out_channels=80, channels=[16], dropout=0.0,
                                        attention_head_dim=8, n_blocks=1, num_mid_blocks=1, num_heads=2,
                                        act_fn="gelu", static_chunk_size=50, num_decoding_left_chunks=2)))
HIFT = dict(in_channels=80, base_channels=16, nb_harmonics=8, sampling_rate=24000, nsf_alpha=0.1, nsf_sigma=0.003,
            nsf_voiced_threshold=10, upsample_rates=[8, 5, 3], upsample_kernel_sizes=[16, 11, 7],
            istft_params=dict(n_fft=16, hop_len=4), resblock_kernel_sizes=[3, 7],
            resblock_dilation_sizes=[[1, 3], [1, 3]], source_resblock_kernel_sizes=[7, 7, 11],
            source_resblock_dilation_sizes=[[1, 3], [1, 3], [1, 3]], lrelu_slope=0.1, audio_limit=0.99,
            f0_predictor=dict(num_class=1, in_channels=80, cond_channels=16))


FLOW3 = dict(input_size=80, output_size=80, spk_embed_dim=192, output_type="mel", vocab_size=SPEECH_TOKENS,
             input_frame_rate=25, only_mask_loss=True, token_mel_ratio=2, pre_lookahead_len=3,
             pre_lookahead_layer=dict(in_channels=80, channels=16, pre_lookahead_len=3),
             decoder=dict(in_channels=240, n_spks=1, spk_emb_dim=80, cfm_params=FLOW["decoder"]["cfm_params"],
                          estimator=dict(dim=32, depth=2, heads=2, dim_head=16, ff_mult=2, mel_dim=80, mu_dim=80,
                                         spk_dim=80, out_channels=80, static_chunk_size=50,
                                         num_decoding_left_chunks=-1)))
HIFT3 = dict(HIFT, conv_pre_look_right=4)


class _New:
    """A `!new:target` mapping of the yaml; `refs`: arguments written as !ref expressions."""

    def __init__(self, target: str, values: dict, refs: dict | None = None, tag: str = "new"):
        self.target, self.values, self.refs, self.tag = target, values, refs or {}, tag

    def text(self, indent: int) -> str:
        pad = " " * indent
        out = f" !{self.tag}:{self.target}\n"
        for k, v in self.values.items():
            if k in self.refs:
                out += f"{pad}{k}: !ref {self.refs[k]}\n"
            elif isinstance(v, _New):
                out += f"{pad}{k}:" + v.text(indent + 4)
            elif isinstance(v, dict):
                out += f"{pad}{k}:\n" + "".join(f"{pad}    {a}: {b!r}\n" for a, b in v.items())
            else:
                out += f"{pad}{k}: {v!r}\n"   # Python's literals are YAML's too (True, 1e-06, 'mel', [[1, 3]])
        return out


def yaml_text(version: int = 2, flow: dict | None = None, hift: dict | None = None, speech_tokens: int = SPEECH_TOKENS,
              llm_size: int = 32) -> str:
    """cosyvoice2.yaml / cosyvoice3.yaml as the released files write them: tags, references (with arithmetic), the
    seeds, an omegaconf DictConfig. The tiny sizes unless `flow` / `hift` / `speech_tokens` / `llm_size` say."""
    flow = dict(flow or (FLOW if version == 2 else FLOW3))
    hift = dict(hift or (HIFT if version == 2 else HIFT3))
    decoder = dict(flow["decoder"])
    decoder["cfm_params"] = _New("omegaconf.DictConfig", {"content": decoder["cfm_params"]})
    if version == 2:
        decoder["estimator"] = _New("cosyvoice.flow.decoder.CausalConditionalDecoder", decoder["estimator"],
                                    {"static_chunk_size": "<token_frame_rate> * <token_mel_ratio>"})
        flow["encoder"] = _New("cosyvoice.transformer.upsample_encoder.UpsampleConformerEncoder", flow["encoder"])
    else:
        decoder["estimator"] = _New("cosyvoice.flow.DiT.dit.DiT", decoder["estimator"],
                                    {"static_chunk_size": "<chunk_size> * <token_mel_ratio>"})
        flow["pre_lookahead_layer"] = _New("cosyvoice.transformer.upsample_encoder.PreLookaheadLayer",
                                           flow["pre_lookahead_layer"])
    flow["decoder"] = _New("cosyvoice.flow.flow_matching.CausalConditionalCFM", decoder)
    hift["f0_predictor"] = _New("cosyvoice.hifigan.f0_predictor." +
                                ("ConvRNNF0Predictor" if version == 2 else "CausalConvRNNF0Predictor"),
                                hift["f0_predictor"])
    llm = _New("cosyvoice.llm.llm." + ("Qwen2LM" if version == 2 else "CosyVoice3LM"),
               dict(llm_input_size=llm_size, llm_output_size=llm_size, speech_token_size=speech_tokens,
                    length_normalized_loss=True, lsm_weight=0, mix_ratio=[5, 15],
                    llm=_New("cosyvoice.llm.llm.Qwen2Encoder", {"pretrain_path": ""},
                             {"pretrain_path": "<qwen_pretrain_path>"}),
                    sampling=_New("cosyvoice.utils.common.ras_sampling",
                                  dict(top_p=0.8, top_k=25, win_size=10, tau_r=0.1), tag="name")),
               {"llm_input_size": "<llm_input_size>", "llm_output_size": "<llm_output_size>"})
    flow_target = "CausalMaskedDiffWithXvec" if version == 2 else "CausalMaskedDiffWithDiT"
    hift_target = "HiFTGenerator" if version == 2 else "CausalHiFTGenerator"
    return (f"# tiny CosyVoice {version}\n__set_seed1: !apply:random.seed [1986]\n"
            f"__set_seed3: !apply:torch.manual_seed [1986]\nsample_rate: 24000\nllm_input_size: {llm_size}\n"
            f"llm_output_size: {llm_size}\nspk_embed_dim: 192\nqwen_pretrain_path: ''\ntoken_frame_rate: 25\n"
            "token_mel_ratio: 2\nchunk_size: 25\n\n"
            "llm:" + llm.text(4) +
            "\nflow:" + _New("cosyvoice.flow.flow." + flow_target, flow,
                             {"spk_embed_dim": "<spk_embed_dim>", "input_frame_rate": "<token_frame_rate>",
                              "token_mel_ratio": "<token_mel_ratio>"}).text(4) +
            "\nhift:" + _New("cosyvoice.hifigan.generator." + hift_target, hift,
                             {"sampling_rate": "<sample_rate>"}).text(4) +
            "\nfeat_extractor: !name:matcha.utils.audio.mel_spectrogram\n    n_fft: 1920\n    num_mels: 80\n"
            "    sampling_rate: !ref <sample_rate>\n    hop_size: 480\n    win_size: 1920\n    fmin: 0\n"
            f"    fmax: {8000 if version == 2 else 'null'}\n    center: False\n")


class SpeechTokenizerStandIn(nn.Module):
    """speech_tokenizer_v2.onnx's interface: feats [1, 128, T] and feats_length [1] (int32) -> [1, T / 4] tokens."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(128, SPEECH_TOKENS, 4, stride=4)

    def forward(self, feats, feats_length):
        tokens = self.conv(feats).argmax(dim=1)
        return tokens[:, :torch.div(feats_length[0].long(), 4, rounding_mode="floor")]


class CampPlusStandIn(nn.Module):
    """campplus.onnx's interface: fbank [1, T, 80] -> embedding [1, 192]."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(80, 192)

    def forward(self, x):
        return torch.tanh(self.proj(x)).mean(dim=1)


def tokenizer():
    """A byte-level BPE (Qwen2's kind) trained on the test words, saved as CosyVoice-BlankEN's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [" ".join(WORDS[1:])] * 20 + ["hello world", "the cat sat on a mat", "speak softly and slowly"] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


def randomize(module: nn.Module, seed: int, std: float = 0.3) -> None:
    """Every parameter drawn (norm scales around 1), so no weight is a constructor default."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith(("norm.weight", "norm1.weight", "norm2.weight", "norm3.weight")) or ".norm" in name \
                    and name.endswith("weight") and p.dim() == 1:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(std * torch.randn(p.shape, generator=g))


def reference_modules(version: int, qwen):
    """The PyTorch references of a release: (llm, flow, hift)."""
    from model_zoo.reference.cosyvoice_hift import HiFTGenerator
    from model_zoo.reference.cosyvoice_llm import CosyVoice3LM, Qwen2LM
    if version == 2:
        from model_zoo.reference.cosyvoice_flow import CausalMaskedDiffWithXvec
        return (Qwen2LM(32, 32, SPEECH_TOKENS, qwen), CausalMaskedDiffWithXvec(FLOW),
                HiFTGenerator.from_config(HIFT))
    from model_zoo.reference.cosyvoice3_flow import CausalMaskedDiffWithDiT
    return (CosyVoice3LM(32, 32, SPEECH_TOKENS, qwen), CausalMaskedDiffWithDiT(FLOW3),
            HiFTGenerator.from_config(dict(HIFT3, causal=True)))


def write_release(path: str, seed: int = 0, version: int = 2) -> dict:
    """The CosyVoice `version` release directory at `path`; returns the reference modules {"llm", "flow", "hift",
    "tokenizer", "speech_tokenizer", "campplus"}."""
    from transformers import Qwen2Config
    os.makedirs(os.path.join(path, "CosyVoice-BlankEN"), exist_ok=True)
    qwen = Qwen2Config(**QWEN)
    qwen.save_pretrained(os.path.join(path, "CosyVoice-BlankEN"))
    tok = tokenizer()
    tok.save_pretrained(os.path.join(path, "CosyVoice-BlankEN"))
    torch.manual_seed(seed)
    llm, flow, hift = (m.eval() for m in reference_modules(version, qwen))
    randomize(llm, seed)
    # CosyVoice 3's DiT at std 0.3 is chaotic enough that float32 rounding grows to 1e-3 over the 10 Euler steps
    randomize(flow, seed + 1, std=0.3 if version == 2 else 0.1)
    randomize(hift, seed + 2, std=0.1)
    for name, module in (("llm", llm), ("flow", flow), ("hift", hift)):
        torch.save(module.state_dict(), os.path.join(path, f"{name}.pt"))
    with open(os.path.join(path, f"cosyvoice{version}.yaml"), "w") as f:
        f.write(yaml_text(version))
    speech_tokenizer, campplus = SpeechTokenizerStandIn().eval(), CampPlusStandIn().eval()
    randomize(speech_tokenizer, seed + 3, std=0.5)
    randomize(campplus, seed + 4, std=0.5)
    with torch.no_grad():
        torch.onnx.export(speech_tokenizer, (torch.randn(1, 128, 40), torch.tensor([40], dtype=torch.int32)),
                          os.path.join(path, f"speech_tokenizer_v{version}.onnx"),
                          input_names=["feats", "feats_length"], output_names=["indices"],
                          dynamic_axes={"feats": {2: "T"}, "indices": {1: "N"}}, opset_version=17, dynamo=False)
        torch.onnx.export(campplus, (torch.randn(1, 50, 80),), os.path.join(path, "campplus.onnx"),
                          input_names=["input"], output_names=["output"], dynamic_axes={"input": {1: "T"}},
                          opset_version=17, dynamo=False)
    return {"llm": llm, "flow": flow, "hift": hift, "tokenizer": tok, "speech_tokenizer": speech_tokenizer,
            "campplus": campplus}
