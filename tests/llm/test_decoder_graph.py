"""The step graph's shape (model_zoo.language.decoder_graph): what each layer computes on which rows."""
from __future__ import annotations

import numpy as np
from transformers import Qwen2Config

from model_zoo.language.decoder_graph import build_decoder_graph


def tiny_graph(layers: int = 2):
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    shapes = {"model.embed_tokens.weight": (64, 32), "model.norm.weight": (32,), "lm_head.weight": (64, 32)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (32,), p + "post_attention_layernorm.weight": (32,),
                       p + "self_attn.q_proj.weight": (32, 32), p + "self_attn.k_proj.weight": (16, 32),
                       p + "self_attn.v_proj.weight": (16, 32), p + "self_attn.o_proj.weight": (32, 32),
                       p + "mlp.gate_proj.weight": (48, 32), p + "mlp.up_proj.weight": (48, 32),
                       p + "mlp.down_proj.weight": (32, 48)})
    r = np.random.default_rng(0)
    return build_decoder_graph(cfg.to_dict(), {k: r.standard_normal(s).astype(np.float32) for k, s in shapes.items()},
                               8, "float32")


def rows_of(graph, value: str) -> str:
    """'all' when `value` depends on every token's row past the last attention, 'last' when only on gathered rows."""
    producer = {o: n for n in graph.nodes for o in n.outputs}
    seen, stack = set(), [value]
    while stack:
        v = stack.pop()
        n = producer.get(v)
        if n is None or v in seen:
            continue
        seen.add(v)
        if n.op_type == "Gather" and n.inputs[1] == "last_token_index":
            continue   # rows chosen here: what feeds it may be whole
        if n.op_type == "Attention":
            return "all"
        stack.extend(n.inputs)
    return "last"


def test_last_layer_runs_its_output_projection_and_mlp_on_the_last_rows_only():
    graph = tiny_graph(2)
    by_name = {n.name: n for n in graph.nodes}
    # layer 0 feeds every row onward (the next layer's keys and values need them) ...
    assert rows_of(graph, by_name["down0_node"].inputs[0]) == "all"
    # ... the last layer's products after its attention see only the rows whose logits are read
    for name in ("o1_node", "gate1_node", "up1_node", "down1_node", "logits_node"):
        assert rows_of(graph, by_name[name].inputs[0]) == "last", name
    assert rows_of(graph, by_name["o1_node"].inputs[3]) == "last"   # the residual too (the product's fourth input)
    gathers = [n for n in graph.nodes if n.op_type == "Gather" and n.inputs[1] == "last_token_index"]
    assert len(gathers) == 2   # the attention's output and the residual stream, once each


def test_step_graph_is_built_fused():
    """Bias, activation, residual and SwiGLU gate inside the MatMuls from the start (no pass rewrites the graph)."""
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64)
    r = np.random.default_rng(0)
    shapes = {"model.embed_tokens.weight": (64, 32), "model.norm.weight": (32,), "lm_head.weight": (64, 32)}
    for i in range(2):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (32,), p + "post_attention_layernorm.weight": (32,),
                       p + "self_attn.q_proj.weight": (32, 32), p + "self_attn.q_proj.bias": (32,),
                       p + "self_attn.k_proj.weight": (16, 32), p + "self_attn.k_proj.bias": (16,),
                       p + "self_attn.v_proj.weight": (16, 32), p + "self_attn.v_proj.bias": (16,),
                       p + "self_attn.o_proj.weight": (32, 32), p + "mlp.gate_proj.weight": (48, 32),
                       p + "mlp.up_proj.weight": (48, 32), p + "mlp.down_proj.weight": (32, 48)})
    weights = {k: r.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    graph = build_decoder_graph(cfg.to_dict(), weights, 8, "float32")   # emitted fused: no pass needed
    assert not [n for n in graph.nodes if n.op_type in ("Mul", "Sigmoid", "Add")]
    gated = [n for n in graph.nodes if n.op_type == "MatMul" and len(n.inputs) == 5]
    assert [n.name for n in gated] == ["up0_node", "up1_node"]
