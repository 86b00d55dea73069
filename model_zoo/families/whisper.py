"""Whisper (transformers WhisperForConditionalGeneration): encoder-decoder speech recognition. No registry row names
it; it is here as the reference encoder-decoder ASR family (issue 38's Whisper-style decoding with a KV cache, and
the ASR benchmark's Whisper-small shape): head "encoder" (log-mel -> encoder states and every decoder layer's cross
keys / values) and head "decoder" (a lock-step decoder step on the paged KV cache) from
model_zoo/multimodal/whisper_graphs.py; lite.whisper.Whisper is the transcribe pipeline."""


def _build(config, weights, weight_format="float32", block_size=16, kv_cache_dtype="float32", group_size=32,
           head=None, **_):
    from converter.ir import ConverterError
    from model_zoo.multimodal.whisper_graphs import build_whisper_decoder_graph, build_whisper_encoder_graph
    if head == "encoder":
        return build_whisper_encoder_graph(config, weights, weight_format, group_size)
    if head == "decoder":
        return build_whisper_decoder_graph(config, weights, block_size, kv_cache_dtype, weight_format, group_size)
    raise ConverterError(f"a Whisper model is two graphs: convert it with head 'encoder' or 'decoder' (got {head!r})")


GRAPH_BUILDERS = {"whisper": _build}
