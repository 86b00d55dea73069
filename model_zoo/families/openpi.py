"""openpi pi0.5 (Physical Intelligence): a PaliGemma VLM (SigLIP So400m/14 at 224x224 + Gemma 2B) reads the camera
images and a prompt in which the robot state is given as discrete tokens; an action expert (a Gemma 300M-size
transformer sharing the attention of each layer with the VLM) denoises a chunk of continuous actions by flow matching,
with the flow-matching time injected through adaptive RMSNorm (adaRMS). Differences from pi0: the discrete state input
and the adaRMS time conditioning."""
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
    Entry(name="openpi π0.5", category="driving_embodied", family="openpi", hub_id="Physical-Intelligence/openpi",
          config=_pi05(),
          config_source=("the original project's code (Physical-Intelligence/openpi, read with read_file / "
                         "find_string): src/openpi/models/pi0_config.py (Pi0Config with pi05=True: action_dim 32, "
                         "action_horizon 50, max_token_len 200, discrete state input; paligemma_variant gemma_2b, "
                         "action_expert_variant gemma_300m) and gemma.py's get_config for those two variants. The "
                         "SigLIP So400m/14 224 tower and the PaliGemma vocabulary are transformers 5.24's PI0Config "
                         "vlm_config defaults (lerobot/pi0_base), which pi0.5 shares; the checkpoint itself "
                         "(gs://openpi-assets/checkpoints/pi05_base) was not read"),
          architecture=("openpi Pi0 with pi05=True (PaliGemma + Gemma-300M action expert with adaRMSNorm, flow "
                        "matching); transformers 5.24 has PI0ForConditionalGeneration for pi0 but not pi0.5"),
          graphs=("vision_language", "action_expert"), pipeline="act", status="planned",
          missing=("no issue yet: graph builders from the openpi checkpoint (JAX / orbax or its PyTorch conversion) "
                   "for the SigLIP tower and the Gemma prefix (model_zoo.language.decoder_graph builds Gemma 2, not "
                   "the Gemma 1 "
                   "layout PaliGemma uses, and has no bidirectional prefix attention) and for the action expert (a "
                   "second Gemma stack attending to the prefix KV cache, with adaRMSNorm time conditioning), and an "
                   "act pipeline that tokenizes the discretised state and runs the 10-step flow-matching loop")),
]
