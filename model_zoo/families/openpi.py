"""openpi pi0.5 (Physical Intelligence): a PaliGemma VLM (SigLIP So400m/14 at 224x224 + Gemma 2B) reads the camera
images and a prompt in which the robot state is given as discrete tokens; an action expert (a Gemma 300M-size
transformer sharing the attention of each layer with the VLM) denoises a chunk of continuous actions by flow matching,
with the flow-matching time injected through adaptive RMSNorm (adaRMS). Differences from pi0: the discrete state input
and the adaRMS time conditioning.

On the runtime: head "prefix" (SigLIP, the projector and the Gemma prefix into each layer's keys / values, once per
observation) and head "action_expert" (one flow-matching step over that cache) from
model_zoo/embodied/pi05_graphs.py; lite.embodied.Pi05Policy builds the prompt (task and discretised state), runs the
prefix once and the expert num_inference_steps times (Euler from t = 1 to 0), as
PI05ForConditionalGeneration.sample_actions."""
from model_zoo.registry import Entry


def _pi05():
    vision = dict(model_type="siglip_vision_model", hidden_size=1152, num_hidden_layers=27, num_attention_heads=16,
                  intermediate_size=4304, patch_size=14, image_size=224)
    vlm = dict(variant="gemma_2b", width=2048, depth=18, mlp_dim=16384, num_heads=8, num_kv_heads=1, head_dim=256,
               vocab_size=257152)
    expert = dict(variant="gemma_300m", width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1,
                  head_dim=256, adarms=True)
    return dict(_parameters="3B VLM + 0.3B action expert", vision_config=vision, paligemma=vlm, action_expert=expert,
                action_dim=32, action_horizon=50, max_token_len=200, discrete_state_input=True,
                cameras=["base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb"])


ENTRIES = [
    Entry(name="openpi π0.5", category="driving_embodied", family="openpi", hub_id="lerobot/pi05_base",
          model_type="pi05", config=_pi05(),
          config_source=("the original project's code (Physical-Intelligence/openpi, read with read_file / "
                         "find_string): src/openpi/models/pi0_config.py (Pi0Config with pi05=True: action_dim 32, "
                         "action_horizon 50, max_token_len 200, discrete state input; paligemma_variant gemma_2b, "
                         "action_expert_variant gemma_300m) and gemma.py's get_config for those two variants; "
                         "transformers 5.25's PI05Config defaults (docstring: lerobot/pi05_base) agree on every "
                         "dimension. The checkpoint itself (gs://openpi-assets/checkpoints/pi05_base) was not read"),
          architecture=("transformers PI05ForConditionalGeneration (PaliGemma: SigLIP So400m/14 + Gemma 2B; Gemma "
                        "300M action expert with adaRMSNorm, flow matching) -> model_zoo.embodied.pi05_graphs "
                        "(lite.embodied.Pi05Policy)"),
          graphs=("vision_language", "action_expert"), pipeline="act", status="supported",
          converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]},
          test="tests/model_zoo/test_pi05.py::test_policy_actions_equal_transformers"),
]


def _build(config, weights, weight_format="float32", group_size=32, head=None, **_):
    from converter.ir import ConverterError
    from model_zoo.embodied.pi05_graphs import build_pi05_expert_graph, build_pi05_prefix_graph
    if head == "prefix":
        return build_pi05_prefix_graph(config, weights, weight_format, group_size)
    if head == "action_expert":
        return build_pi05_expert_graph(config, weights, weight_format, group_size)
    raise ConverterError(f"pi0.5 is two graphs: convert it with head 'prefix' (the images and prompt into each "
                         f"layer's keys / values) or 'action_expert' (one flow-matching step), not {head!r}")


GRAPH_BUILDERS = {"pi05": _build}
