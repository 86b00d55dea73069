"""Llama (GQA), Mistral (sliding window) and Gemma 2 (soft-capping, alternating windows, extra norms): decoder
families the step graph builds (model_zoo.language.decoder_graph; proved against transformers in
tests/llm/test_engine.py) that the supported-model list does not name, so they register graph builders only."""

ENTRIES: list = []


def _build(config, weights, **options):
    from model_zoo.language.decoder_graph import build_from_checkpoint
    return build_from_checkpoint(config, weights, **options)


GRAPH_BUILDERS = {"llama": _build, "mistral": _build, "gemma2": _build}
