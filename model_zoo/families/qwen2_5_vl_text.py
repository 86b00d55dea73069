"""The language model of a Qwen2.5-VL checkpoint (model_type qwen2_5_vl) as a Qwen2 step graph: Qwen-Image's text
encoder (head "hidden": every position's final-norm state through LLMEngine.encode) and text-only use of the VLM
(head "logits"). For text tokens Qwen2.5-VL's multimodal RoPE (mrope_section over the temporal, height and width
position components) gives each component the same position, so it is the plain rotary embedding the Qwen2 graph
applies; a VLM checkpoint's step graph takes 3-D positions and the image rows (lite.llm.multimodal). Head "vision"
builds the vision tower instead (model_zoo/multimodal/qwen2_5_vl_vision_graph.py), for one patch grid or any."""
from model_zoo.language.decoder_graph import build_decoder_graph
from model_zoo.multimodal.qwen2_5_vl_vision_graph import build_qwen2_5_vl_vision_graph
from model_zoo.language.text_model_view import TextModelView, text_config


def _build(config, weights, weight_format="float32", block_size=16, kv_cache_dtype="float32", group_size=32,
           head="logits", latent_shape=None, **_):
    if head == "vision":   # the vision tower: for one patch grid (t, h, w) given as latent_shape, else any
        return build_qwen2_5_vl_vision_graph(config, weights, latent_shape, weight_format, group_size)
    cfg = dict(text_config(config), model_type="qwen2")
    return build_decoder_graph(cfg, TextModelView(weights), block_size, kv_cache_dtype, weight_format, group_size,
                               head)


GRAPH_BUILDERS = {"qwen2_5_vl": _build, "qwen2_vl": _build}   # (Qwen2-VL: its own ViT, the same language model)
