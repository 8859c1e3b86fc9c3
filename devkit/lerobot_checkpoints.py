"""Tiny LeRobot checkpoints (ACT, diffusion, SmolVLA) built offline with LeRobot's own config classes, saved as
LeRobot saves them (config.json, model.safetensors, the policy_preprocessor/postprocessor pipelines with their
normalization stats).

Weights are random but seeded, so a checkpoint is the same every time, and nothing is downloaded. Action
statistics are chosen so that the un-normalized actions land well inside the env's action range, around a known
mean (which proves the postprocessor ran).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

Features = dict[str, tuple[str, tuple[int, ...]]]
# An action's (size, mean, std): one mean and std for every dimension, or a sequence of one each.
Action = tuple[int, Any, Any]

METAWORLD_STATE: Features = {
    "observation.state": ("STATE", (4,)),
    "observation.environment_state": ("ENV", (39,)),
}
PUSHT_PIXELS: Features = {
    "observation.image": ("VISUAL", (3, 96, 96)),
    "observation.state": ("STATE", (2,)),
}
# Mean and std of the (un-normalized) actions: MetaWorld acts in [-1, 1]^4, PushT in [0, 512]^2.
METAWORLD_ACTION = (4, 0.0, 0.05)
PUSHT_ACTION = (2, 256.0, 60.0)  # wide enough that the agent reaches and pushes the block

TINY_ACT = {
    "pretrained_backbone_weights": None,
    "dim_model": 16,
    "n_heads": 2,
    "dim_feedforward": 32,
    "n_encoder_layers": 1,
    "n_decoder_layers": 1,
    "use_vae": False,
    "latent_dim": 4,
    "chunk_size": 8,
    "n_action_steps": 8,
}
TINY_DIFFUSION = {
    "pretrained_backbone_weights": None,
    "down_dims": (8, 16),
    "kernel_size": 3,
    "n_groups": 4,
    "diffusion_step_embed_dim": 8,
    "horizon": 8,
    "n_action_steps": 4,
    "n_obs_steps": 2,
    "num_train_timesteps": 8,
    "spatial_softmax_num_keypoints": 4,
}


def _features(features: Features, action_dim: int) -> tuple[dict[str, Any], dict[str, Any]]:
    from lerobot.configs.types import FeatureType, PolicyFeature

    inputs = {key: PolicyFeature(FeatureType(kind), shape) for key, (kind, shape) in features.items()}
    outputs = {"action": PolicyFeature(FeatureType.ACTION, (action_dim,))}
    return inputs, outputs


def _stats(features: Features, action: Action) -> dict[str, dict[str, Any]]:
    import torch

    stats: dict[str, dict[str, Any]] = {}
    for key, (kind, shape) in features.items():
        size = shape[0] if kind == "VISUAL" else shape
        stat_shape = (size, 1, 1) if kind == "VISUAL" else size
        stats[key] = {
            "mean": torch.full(stat_shape, 0.5),
            "std": torch.full(stat_shape, 0.25),
            "min": torch.zeros(stat_shape),
            "max": torch.ones(stat_shape),
            "q01": torch.zeros(stat_shape),  # quantiles for the families that normalize by them
            "q99": torch.ones(stat_shape),
        }
    dim, mean, std = action
    mean_, std_ = (torch.zeros(dim) + torch.as_tensor(value, dtype=torch.float32) for value in (mean, std))
    low, high = mean_ - std_, mean_ + std_
    stats["action"] = {"mean": mean_, "std": std_, "min": low, "max": high, "q01": low, "q99": high}
    return stats


def build_policy(policy_type: str, features: Features, action: Action, **config: Any) -> tuple[Any, Any, Any]:
    """A `policy_type` (act, diffusion, smolvla) policy with `config`, seeded, and its pre/post processors, in
    memory (as a training loop holds them)."""
    import torch
    from lerobot.policies.factory import get_policy_class, make_policy_config, make_pre_post_processors

    inputs, outputs = _features(features, action[0])
    policy_config = make_policy_config(
        policy_type, input_features=inputs, output_features=outputs, device="cpu", **config
    )
    torch.manual_seed(0)
    policy = get_policy_class(policy_type)(policy_config)
    preprocessor, postprocessor = make_pre_post_processors(policy_config, dataset_stats=_stats(features, action))
    return policy, preprocessor, postprocessor


def save_policy(directory: Path, policy: Any, preprocessor: Any, postprocessor: Any) -> Path:
    """Saved as LeRobot saves a checkpoint."""
    directory.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(directory)
    preprocessor.save_pretrained(directory)
    postprocessor.save_pretrained(directory)
    return directory


def save_checkpoint(
    directory: Path,
    policy_type: str,
    features: Features,
    action: Action,
    first_steps: tuple[Any, ...] = (),
    without_steps: tuple[str, ...] = (),
    step_changes: dict[str, dict[str, Any]] | None = None,
    **config: Any,
) -> Path:
    """Build a `policy_type` (act, diffusion, smolvla) policy with `config` and save it with its processors;
    `first_steps`: preprocessor steps put first (a test's tap of what the preprocessor is handed); `without_steps`:
    class names of preprocessor steps left out; `step_changes`: class name -> fields set on that preprocessor step."""
    policy, preprocessor, postprocessor = build_policy(policy_type, features, action, **config)
    preprocessor.steps[:] = [step for step in preprocessor.steps if type(step).__name__ not in without_steps]
    for step in preprocessor.steps:
        for name, value in (step_changes or {}).get(type(step).__name__, {}).items():
            setattr(step, name, value)
    preprocessor.steps[:0] = first_steps
    return save_policy(directory, policy, preprocessor, postprocessor)


def tiny_act(directory: Path, features: Features = METAWORLD_STATE, action=METAWORLD_ACTION, **config: Any) -> Path:
    return save_checkpoint(directory, "act", features, action, **{**TINY_ACT, **config})


def tiny_diffusion(
    directory: Path, features: Features = METAWORLD_STATE, action=METAWORLD_ACTION, **config: Any
) -> Path:
    return save_checkpoint(directory, "diffusion", features, action, **{**TINY_DIFFUSION, **config})


def word_tokenizer(words: list[str], special: list[str], **kwargs: Any) -> Any:
    """A word-level fast tokenizer over `special + words` (unknown words map to the first special token, padding
    is the second); `kwargs` go to `PreTrainedTokenizerFast`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(special + words)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token=special[0]))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token=special[0], pad_token=special[1], **kwargs)


def byte_tokenizer(special: list[str], eos: str = "<|endoftext|>") -> Any:
    """A Qwen2 tokenizer (byte-level BPE) without merges: every byte of a text is a token, and `special` (and
    `eos`, also the padding) are single tokens. For families that load `Qwen2Tokenizer` itself, which rebuilds a
    BPE from the vocabulary and so drops a word-level tokenizer's words."""
    from tokenizers import pre_tokenizers
    from transformers import Qwen2Tokenizer

    vocab = {char: i for i, char in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=[], unk_token=None, bos_token=None, eos_token=eos)
    tokenizer.pad_token = eos
    tokenizer.add_special_tokens({"additional_special_tokens": special})
    return tokenizer


def tiny_vlm(directory: Path) -> Path:
    """A SmolVLM2-shaped backbone config with its processor and a word-level tokenizer, written offline, for
    SmolVLA's `vlm_model_name` (which normally names HuggingFaceTB/SmolVLM2-500M-Video-Instruct on the Hub)."""
    from transformers import SmolVLMConfig, SmolVLMImageProcessor, SmolVLMProcessor
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor

    special = ["<unk>", "<pad>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<image>"]
    special += ["<global-img>", "<video>"]
    words = "push the t-shaped block onto target reach a goal position pick and place open drawer .".split()
    tokenizer = word_tokenizer(
        words,
        special,
        additional_special_tokens=special[2:],
        extra_special_tokens={
            "fake_image_token": "<fake_token_around_image>",
            "image_token": "<image>",
            "global_image_token": "<global-img>",
            "end_of_utterance_token": "<end_of_utterance>",
        },
    )
    vocab = {token: i for i, token in enumerate(special + words)}
    size = {"longest_edge": 64}
    images = SmolVLMImageProcessor(size=size, max_image_size=size, do_image_splitting=False)
    SmolVLMProcessor(
        images, tokenizer, SmolVLMVideoProcessor(size=size, max_image_size=size), image_seq_len=4
    ).save_pretrained(directory)
    SmolVLMConfig(
        text_config={
            "model_type": "llama",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "vocab_size": len(vocab),
            "max_position_embeddings": 256,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 64,
            "patch_size": 16,
        },
        scale_factor=2,
        image_token_id=vocab["<image>"],
        vocab_size=len(vocab),
    ).save_pretrained(directory)
    return directory


def tiny_smolvla(directory: Path, features: Features = PUSHT_PIXELS, action=PUSHT_ACTION, **changes: Any) -> Path:
    """A SmolVLA on a tiny local backbone (`directory/vlm`); its checkpoint in `directory/policy`; `changes`:
    config fields to set otherwise (chunk_size, ...)."""
    backbone = tiny_vlm(directory / "vlm")
    config = {
        "vlm_model_name": str(backbone),
        "load_vlm_weights": False,
        "num_vlm_layers": 2,
        "expert_width_multiplier": 0.5,
        "chunk_size": 4,
        "n_action_steps": 4,
        "num_steps": 2,
        "max_state_dim": 8,
        "max_action_dim": 8,
        "resize_imgs_with_padding": (64, 64),
        "tokenizer_max_length": 16,
        **changes,
    }
    return save_checkpoint(directory / "policy", "smolvla", features, action, **config)


def tiny_clip(directory: Path) -> Path:
    """A CLIP-shaped text and vision model (random weights) with a word-level tokenizer, written offline, for
    multi_task_dit's `vision_encoder_name`/`text_encoder_name` (normally openai/clip-vit-base-patch16 on the Hub).
    The folder's name must contain "clip": the family checks it."""
    from transformers import CLIPConfig, CLIPModel

    words = "push the t-shaped block onto target reach a goal position .".split()
    tokenizer = word_tokenizer(words, ["<unk>", "<pad>", "<|startoftext|>", "<|endoftext|>"])
    tokenizer.save_pretrained(directory)
    layers = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    text = {**layers, "vocab_size": len(tokenizer), "max_position_embeddings": 16, "pad_token_id": 1}
    config = CLIPConfig(text_config=text, vision_config={**layers, "image_size": 32, "patch_size": 16})
    CLIPModel(config).save_pretrained(directory)
    return directory


def tiny_multi_task_dit_config(root: Path) -> dict[str, Any]:
    """A tiny multi_task_dit (LeRobot 0.6): its CLIP encoders from `tiny_clip`, 96x96 images resized to 32x32."""
    clip = str(tiny_clip(root / "tiny_clip"))
    return {
        "vision_encoder_name": clip,
        "text_encoder_name": clip,
        "tokenizer_max_length": 16,
        "image_resize_shape": (32, 32),
        "image_crop_shape": (32, 32),
        "hidden_dim": 32,
        "num_layers": 1,
        "num_heads": 2,
        "timestep_embed_dim": 16,
        "horizon": 8,
        "n_action_steps": 4,
        "num_train_timesteps": 4,
    }
