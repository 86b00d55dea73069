"""Vision-language-action policies that pair a (small) VLM with an action decoder: TinyVLA (Llava-Pythia + diffusion
policy head), GR00T N1.7 (Cosmos-Reason2-2B VLM + flow-matching diffusion transformer), SpatialVLA (PaliGemma 2 with
Ego3D position encoding and spatial action tokens), SmolVLA (SmolVLM2 layers + a flow-matching action expert), MiniVLA
(Prismatic with Qwen2.5-0.5B and vector-quantised action chunks) and OpenVLA (Prismatic with Llama 2 7B and 256-bin
action tokens).

OpenVLA runs on the runtime: head "vision" is the fused DINOv2 + SigLIP backbone and the projector
(model_zoo/embodied/openvla_graphs.py), the step graph the Llama decoder over language_model.* with the patch rows
after the BOS; lite.embodied.OpenVLAPolicy decodes the action tokens greedily on the engine and maps them to bins and
the dataset's units. model_zoo/reference/openvla.py is the PyTorch reference the tests hold it to (the remote code
needs timm, which needs torchvision)."""
from model_zoo.registry import Entry

def _dinosiglip_224():
    # Prismatic's fused "dinosiglip-vit-so-224px" backbone (timm ids in OpenVLA's config.json).
    return dict(vision_backbone_id="dinosiglip-vit-so-224px",
                timm_model_ids=["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"],
                image_size=224, use_fused_vision_backbone=True)


def _openvla_7b():
    llm = dict(llm_backbone_id="llama2-7b-pure", model_type="llama", hidden_size=4096, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=32, intermediate_size=11008)
    return dict(_parameters="7B", model_type="openvla", vision=_dinosiglip_224(), text_config=llm,
                image_resize_strategy="resize-naive", n_action_bins=256, action_dim=7)


def _minivla():
    llm = dict(llm_backbone_id="qwen25-0_5b-extra", model_type="qwen2", hidden_size=896, num_hidden_layers=24,
               num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864)
    return dict(_parameters="1B", vision=_dinosiglip_224(), text_config=llm)


def _smolvla():
    vlm = dict(vlm_model_name="HuggingFaceTB/SmolVLM2-500M-Video-Instruct", hidden_size=960, num_attention_heads=15,
               num_key_value_heads=5, head_dim=64, intermediate_size=2560, num_vlm_layers=16, image_size=512,
               scale_factor=4)
    expert = dict(expert_width_multiplier=0.75, attention_mode="cross_attn", self_attn_every_n_layers=2)
    return dict(_parameters="0.45B", vlm=vlm, action_expert=expert, chunk_size=50, n_action_steps=50,
                max_state_dim=32, max_action_dim=32, num_steps=10, tokenizer_max_length=48)


def _spatialvla():
    vision = dict(model_type="siglip_vision_model", hidden_size=1152, num_hidden_layers=27, num_attention_heads=16,
                  intermediate_size=4304, patch_size=14, image_size=224)
    text = dict(model_type="gemma2", hidden_size=2304, num_hidden_layers=26, num_attention_heads=8,
                num_key_value_heads=4, head_dim=256, intermediate_size=9216)
    return dict(_parameters="4B", vision_config=vision, text_config=text, backbone="paligemma2-3b-pt-224")


def _tinyvla():
    return dict(_parameters="0.4B / 0.7B / 1.3B (TinyVLA-S / -B / -H)",
                vlm=dict(framework="LLaVA", llm="Pythia",
                         checkpoints=["lesjie/Llava-Pythia-400M", "lesjie/Llava-Pythia-700M",
                                      "lesjie/Llava-Pythia-1.3B"]),
                action_head="diffusion policy head (policy_heads)")


def _gr00t_n17():
    return dict(_parameters="3B", vlm="Cosmos-Reason2-2B (Qwen3-VL architecture)",
                action_head="flow-matching diffusion transformer (self-attention over state / action tokens "
                            "interleaved with cross-attention to the VLM embeddings)")


_ACT_VLA = ("graph builders from the checkpoint for {vision}, {lm}, and the {head}, and an act pipeline that {loop}")

ENTRIES = [
    Entry(name="TinyVLA", category="driving_embodied", family="vla", hub_id="liyaxuanliyaxuan/TinyVLA",
          config=_tinyvla(),
          config_source=("the original project's README (liyaxuanliyaxuan/TinyVLA, a public copy read with "
                         "read_file): the VLM is Llava-Pythia in three sizes (~400M for TinyVLA-S, ~700M for -B, "
                         "~1.3B for -H) with a diffusion policy head. Which size is meant is not known, and the "
                         "Pythia / vision-tower / policy-head hyper-parameters were not read (the Hub is not "
                         "reachable from this machine), so none are given"),
          architecture=("TinyVLA project: LLaVA-style VLM with a Pythia (GPT-NeoX) language model + diffusion policy "
                        "head; no transformers implementation of the whole policy"),
          graphs=("vision_language", "action_expert"), pipeline="act", status="planned",
          missing="no issue yet: " + _ACT_VLA.format(
              vision="the LLaVA-Pythia vision tower and projector", lm="the Pythia (GPT-NeoX: parallel attention / "
              "MLP, partial rotary, LayerNorm) language model, a layout model_zoo.language.decoder_graph does "
              "not build",
              head="diffusion policy head", loop="runs the diffusion denoising loop over the action chunk")),
    Entry(name="GR00T N1.7", category="driving_embodied", family="vla", hub_id="nvidia/GR00T-N1.7-3B",
          config=_gr00t_n17(),
          config_source=("the GR00T N1.7 model cards (nvidia/GR00T-N1.7-3B, nvidia/GR00T-H-N1.7 as stored public "
                         "pages): 3B parameters, Cosmos-Reason2-2B encoding images and instruction, a flow-matching "
                         "transformer that interleaves self-attention over proprioception / actions with "
                         "cross-attention to the VLM embeddings; LeRobot's port describes the backbone as Qwen3-VL. "
                         "The checkpoint's config.json was not read (the Hub is not reachable from this machine): "
                         "layer counts, widths, action horizon and denoising steps are left out (a blog gives a "
                         "32-layer DiT and 4 steps; not confirmed)"),
          architecture=("NVIDIA Isaac-GR00T Gr00tN1d7 (Cosmos-Reason2-2B / Qwen3-VL backbone + flow-matching DiT "
                        "action head); no transformers implementation of the policy"),
          graphs=("vision_language", "action_expert"), pipeline="act", status="planned",
          missing="no issue yet: " + _ACT_VLA.format(
              vision="the Qwen3-VL-style vision tower", lm="the backbone's language model layers (Qwen3 decoder; "
              "model_zoo.language.decoder_graph builds its layers but not M-RoPE)",
              head="flow-matching DiT action head with its per-embodiment state / action encoders",
              loop="runs the flow-matching denoising loop")),
    Entry(name="SpatialVLA", category="driving_embodied", family="vla", hub_id="IPEC-COMMUNITY/spatialvla-4b-224-pt",
          config=_spatialvla(),
          config_source=("SpatialVLA's model card / paper, recalled (a PaliGemma 2 3B-224 backbone, ~4B with the "
                         "Ego3D and action-token additions) with PaliGemma 2 3B's dimensions: the SigLIP "
                         "So400m/14-224 tower as in transformers 5.24's PI0Config vlm_config defaults, the Gemma 2 2B "
                         "language model as transformers 5.24's Gemma2Config defaults (2304 wide, 26 layers, 8/4 "
                         "heads, head_dim 256, 9216). The checkpoint's config.json was not read (the Hub is not "
                         "reachable from this machine): vocab size, the spatial action-token grid and the Ego3D / "
                         "ZoeDepth settings are left out"),
          architecture=("SpatialVLA remote code (SpatialVLAForConditionalGeneration: PaliGemma 2 + Ego3D position "
                        "encoding from ZoeDepth + adaptive action grids); no transformers implementation"),
          graphs=("vision_encoder", "decoder_step"), pipeline="act", status="planned",
          missing="no issue yet: " + _ACT_VLA.format(
              vision="the SigLIP tower, the ZoeDepth-based Ego3D position encoding and the projector",
              lm="the Gemma 2 decoder (model_zoo.language.decoder_graph builds Gemma 2; the PaliGemma prefix's "
              "bidirectional attention is not in it)", head="spatial action-token de-tokenizer (adaptive action grids)",
              loop="decodes the spatial action tokens into continuous actions")),
    Entry(name="SmolVLA", category="driving_embodied", family="vla", hub_id="lerobot/smolvla_base", config=_smolvla(),
          config_source=("LeRobot's SmolVLAConfig defaults (configuration_smolvla.py, public copies read with "
                         "read_file): SmolVLM2-500M-Video-Instruct backbone cut to its first 16 layers, action expert "
                         "at 0.75x the VLM width with cross-attention and self-attention every 2nd layer, chunk 50, "
                         "state / action padded to 32, 512x512 images, 10 flow-matching steps; the VLM's text width "
                         "and heads (960, 15/5 heads, head_dim 64, MLP 2560, pixel-shuffle scale 4) from a public "
                         "copy of SmolVLM-500M's config.json (the same SmolLM2-360M text model). The 0.45B size is "
                         "the SmolVLA paper's (recalled). Vision-tower numbers and the vocab size were not read and "
                         "are left out"),
          architecture=("LeRobot SmolVLAPolicy (SmolVLM2 via transformers AutoModelForImageTextToText, truncated, + "
                        "a flow-matching action expert); transformers has SmolVLM but not the policy"),
          graphs=("vision_language", "action_expert"), pipeline="act", status="planned",
          missing="no issue yet: " + _ACT_VLA.format(
              vision="the SmolVLM2 SigLIP tower with its pixel-shuffle connector",
              lm="the first 16 SmolLM2 (Llama-layout) layers as a prefix graph that keeps its KV cache",
              head="action expert (interleaved cross- / self-attention layers)",
              loop="runs the 10-step flow-matching loop over the 50-step chunk")),
    Entry(name="MiniVLA", category="driving_embodied", family="vla", hub_id="Stanford-ILIAD/openvla-mini",
          config=_minivla(),
          config_source=("the MiniVLA project (Stanford-ILIAD/openvla-mini): Prismatic with llm_backbone_id "
                         "qwen25-0_5b-extra and the fused dinosiglip-vit-so-224px vision backbone (as in public "
                         "configs built on it), vector-quantised action chunks; the language model's dimensions are "
                         "Qwen2.5-0.5B's (as in model_zoo.families.qwen2). The ~1B size is the project's description "
                         "(recalled). The checkpoint's config.json was not read (the Hub is not reachable from this "
                         "machine): the VQ action codebook and the chunk length are left out"),
          architecture=("openvla-mini / Prismatic (DINOv2 ViT-L/14 + SigLIP So400m/14 fused, MLP projector, "
                        "Qwen2.5-0.5B, VQ action tokens); no transformers implementation"),
          graphs=("vision_encoder", "decoder_step"), pipeline="act", status="planned",
          missing="no issue yet: " + _ACT_VLA.format(
              vision="the fused DINOv2 + SigLIP vision backbone and projector",
              lm="the Qwen2.5-0.5B decoder (model_zoo.language.decoder_graph builds Qwen2; the Prismatic checkpoint "
              "layout needs mapping)", head="VQ action de-tokenizer",
              loop="decodes the action tokens into an action chunk")),
    Entry(name="OpenVLA", category="driving_embodied", family="vla", hub_id="openvla/openvla-7b", model_type="openvla",
          config=_openvla_7b(),
          config_source=("openvla/openvla-7b's config.json fields as quoted in public notes (vision_backbone_id "
                         "dinosiglip-vit-so-224px with timm ids vit_large_patch14_reg4_dinov2.lvd142m + "
                         "vit_so400m_patch14_siglip_224, image_resize_strategy resize-naive) and the OpenVLA paper, "
                         "recalled (Llama 2 7B, 7-DoF actions in 256 bins mapped onto the last vocabulary tokens); "
                         "the Llama 2 7B dimensions are transformers 5.24's LlamaConfig defaults (LLaMA-7B's, which "
                         "Llama 2 7B shares). vocab_size (padded) was not read (the Hub is not reachable from this "
                         "machine) and is left out"),
          architecture=("OpenVLA remote code (OpenVLAForActionPrediction: Prismatic fused DINOv2 + SigLIP backbone, "
                        "MLP projector, LlamaForCausalLM) -> model_zoo.embodied.openvla_graphs + the engine's Llama "
                        "step graph (lite.embodied.OpenVLAPolicy); reference model_zoo/reference/openvla.py"),
          graphs=("vision_encoder", "decoder_step"), pipeline="act", status="supported",
          converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]},
          test="tests/model_zoo/test_openvla.py::test_actions_equal_reference"),
]


def _build_openvla(config, weights, weight_format="float32", block_size=16, kv_cache_dtype="float32", group_size=32,
                   head=None, **_):
    """head "vision": the fused backbone and projector; otherwise the Llama step graph over language_model.*, with
    the image rows replacing the placeholder positions after the BOS."""
    from model_zoo.embodied.openvla_graphs import build_openvla_vision_graph
    from model_zoo.language.decoder_graph import build_decoder_graph
    from model_zoo.language.text_model_view import TextModelView, text_config
    if head == "vision":
        return build_openvla_vision_graph(config, weights, weight_format, group_size)
    view = TextModelView(weights, "language_model.model.", lm_head="language_model.lm_head.weight")
    cfg = text_config(config)
    cfg.setdefault("model_type", "llama")
    return build_decoder_graph(cfg, view, block_size, kv_cache_dtype, weight_format, group_size,
                               head or "logits", image_rows=(head or "logits") == "logits")


GRAPH_BUILDERS = {"openvla": _build_openvla}
