"""Tiny pi0-FAST checkpoints (LeRobot 0.6), built offline: a PaliGemma backbone at `tiny_gemma()`'s size, a
word-level text tokenizer and a FAST action tokenizer of our own, both saved beside the checkpoint.

LeRobot's pi0_fast loads its action tokenizer with `AutoProcessor.from_pretrained(action_tokenizer_name,
trust_remote_code=True)`; the Hub's (`lerobot/fast-action-tokenizer`) is remote code. Here `FastActionProcessor`
implements the same scheme (FAST: per action dimension, the DCT of the normalized chunk over time, scaled and rounded
to integers, flattened time-major, each integer a character, and a byte-pair encoding over those characters, trained
here with `tokenizers` on a few hundred smooth synthetic chunks). Its folder's `processor_config.json` names the class
without an `auto_map`, so transformers finds it among the processors registered in this process
(`register_fast_processor()`): nothing read from the checkpoint runs code. A process that loads such a checkpoint
must have registered it, and must be inside `tiny_gemma()` (as for pi0).

What LeRobot reads of the action tokenizer at inference: `bpe_tokenizer.decode(ids)`, `min_token` and `scale`
(`PI0FastPolicy.decode_actions_with_fast`: the characters' code points plus `min_token` are the coefficients, of
`n_action_steps` x action_dim, and `idct(coefficients / scale, norm="ortho")` along time is the chunk); in training,
`__call__(chunk)` gives the token ids (`ActionTokenizerProcessorStep`). The FAST ids sit at the top of the text
tokenizer's vocabulary (PaliGemma id = vocab_size - 1 - fast_skip_tokens - FAST id), so the text tokenizer here
holds a slot per FAST id, then `fast_skip_tokens` fillers, as PaliGemma's location and segmentation tokens.

A random model would rarely emit a decodable chunk (its output is near uniform over PaliGemma's 257152 ids), so the
build sets the output matrix (`emphasize_fast_slots`): greedy decoding and sampling at a temperature then emit FAST
tokens, as a trained pi0-FAST does after its prompt, and the chunks depend on the observation (and, sampling, on the
seed). The "Action:" prefix check (`validate_action_token_prefix`) is off, since the model does not emit that
prefix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from devkit.lerobot_checkpoints import Action, Features, _features, word_tokenizer
from tests.helpers.tiny_pi import paligemma_tokenizer, quantile_stats

PROCESSOR_CONFIG = "processor_config.json"
PALIGEMMA_VOCAB = 257152  # LeRobot's pi0_fast builds PaliGemma's embedding at this size, whatever the tokenizer
SKIP = 16  # fast_skip_tokens: filler ids above the FAST slots (PaliGemma's are its 128 segmentation tokens)
SLOT_SCALE = 1.0  # the scale of the FAST slots' and the end marker's output rows (the others' is about 0.02)
AWAY = 4.0  # how far the other rows are pushed against the typical output direction

# LeRobot's pi0_fast keeps SigLIP's 224x224 input (pi0 sizes the tower to image_resolution): 256 patches of the
# tiny tower.
TINY_PI_FAST = {
    "chunk_size": 4,
    "n_action_steps": 4,
    "max_state_dim": 8,
    "max_action_dim": 8,
    "tokenizer_max_length": 40,
    "max_decoding_steps": 12,
    "max_action_tokens": 32,
    "fast_skip_tokens": SKIP,
    "validate_action_token_prefix": False,
    "dtype": "float32",
}


class FastActionProcessor:
    """A FAST action tokenizer (see the module docstring) with the attributes LeRobot's pi0_fast reads."""

    def __init__(self, bpe_tokenizer: Any, scale: float, min_token: int, time_horizon: int, action_dim: int) -> None:
        self.bpe_tokenizer = bpe_tokenizer
        self.scale = scale
        self.min_token = min_token
        self.time_horizon = time_horizon
        self.action_dim = action_dim

    @property
    def vocab_size(self) -> int:
        return len(self.bpe_tokenizer)

    def _text(self, chunk: np.ndarray) -> str:
        from scipy.fft import dct

        coefficients = np.around(dct(chunk, axis=0, norm="ortho") * self.scale).astype(int)
        return "".join(chr(max(int(c) - self.min_token, 0)) for c in coefficients.reshape(-1))

    def __call__(self, actions: Any) -> list[list[int]]:
        """The token ids of each chunk of `actions`, (chunks, time, action_dim) or one (time, action_dim)."""
        chunks = np.asarray(actions, dtype=np.float64)
        chunks = chunks[None] if chunks.ndim == 2 else chunks
        return [self.bpe_tokenizer.encode(self._text(c), add_special_tokens=False) for c in chunks]

    def decode(self, tokens: list[list[int]], time_horizon: int | None = None, action_dim: int | None = None) -> Any:
        """The chunks of token ids, (chunks, time, action_dim); the inverse of `__call__` up to rounding."""
        from scipy.fft import idct

        horizon, dim = time_horizon or self.time_horizon, action_dim or self.action_dim
        chunks = []
        for ids in tokens:
            text = self.bpe_tokenizer.decode(ids)
            coefficients = np.array([ord(c) for c in text], dtype=np.float64) + self.min_token
            chunks.append(idct(coefficients.reshape(horizon, dim) / self.scale, axis=0, norm="ortho"))
        return np.stack(chunks)

    def save_pretrained(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.bpe_tokenizer.save_pretrained(directory)
        settings = {k: getattr(self, k) for k in ("scale", "min_token", "time_horizon", "action_dim")}
        (directory / PROCESSOR_CONFIG).write_text(json.dumps({"processor_class": type(self).__name__, **settings}))

    @classmethod
    def from_pretrained(cls, directory: str | Path, **_: Any) -> FastActionProcessor:
        from transformers import PreTrainedTokenizerFast

        settings = json.loads((Path(directory) / PROCESSOR_CONFIG).read_text())
        settings.pop("processor_class")
        return cls(PreTrainedTokenizerFast.from_pretrained(directory), **settings)

    @classmethod
    def fit(cls, chunks: np.ndarray, scale: float = 10.0, merges: int = 48) -> FastActionProcessor:
        """Trained on `chunks` (n, time, action_dim): the coefficients' range sets the characters, the BPE
        merges the most frequent runs."""
        from scipy.fft import dct
        from tokenizers import Tokenizer, decoders, models, trainers
        from transformers import PreTrainedTokenizerFast

        coefficients = np.around(dct(chunks, axis=1, norm="ortho") * scale).astype(int)
        low, high = int(coefficients.min()), int(coefficients.max())
        processor = cls(None, scale, low, chunks.shape[1], chunks.shape[2])
        alphabet = [chr(c) for c in range(high - low + 1)]
        backend = Tokenizer(models.BPE())
        backend.decoder = decoders.Fuse()  # the characters joined as they are, no spaces between tokens
        trainer = trainers.BpeTrainer(
            vocab_size=len(alphabet) + merges, initial_alphabet=alphabet, limit_alphabet=len(alphabet)
        )
        backend.train_from_iterator((processor._text(c) for c in chunks), trainer=trainer)
        processor.bpe_tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, clean_up_tokenization_spaces=False)
        return processor


def register_fast_processor() -> None:
    """`AutoProcessor` finds `FastActionProcessor` by the class name in `processor_config.json` (no remote code)."""
    from transformers import AutoProcessor, PretrainedConfig

    class TinyFastConfig(PretrainedConfig):
        model_type = "tiny_fast_action_tokenizer"

    AutoProcessor.register(TinyFastConfig, FastActionProcessor, exist_ok=True)


def synthetic_chunks(count: int, horizon: int, action_dim: int, seed: int = 0) -> np.ndarray:
    """Smooth normalized chunks (random walks, at most about 2 in size), as a training set's actions."""
    rng = np.random.default_rng(seed)
    start = rng.uniform(-1, 1, (count, 1, action_dim))
    return np.clip(start + np.cumsum(rng.normal(0, 0.2, (count, horizon, action_dim)), axis=1), -2, 2)


def fast_text_tokenizer(directory: Path, fast_vocab: int) -> Path:
    """pi0/pi0.5's word-level tokenizer grown to PaliGemma's vocabulary size (the model's output size, so that
    every id a sampling decoder draws is a token): "|", fillers, a slot per FAST id and `SKIP` fillers at the top,
    where PaliGemma ids = vocab_size - 1 - fast_skip_tokens - FAST id land."""
    words = json.loads((paligemma_tokenizer(directory) / "tokenizer.json").read_text())["model"]["vocab"]
    ordered = sorted(words, key=words.__getitem__)
    special, rest = ordered[:4], ordered[4:]
    unused = PALIGEMMA_VOCAB - len(ordered) - 1 - fast_vocab - SKIP
    tail = ["|", *(f"unused{k}" for k in range(unused)), *(f"fast{k}" for k in reversed(range(fast_vocab)))]
    tail += [f"skip{k}" for k in range(SKIP)]
    word_tokenizer(rest + tail, special, bos_token="<bos>", eos_token="<eos>").save_pretrained(directory)
    return directory


def typical_output_direction(policy: Any, preprocessor: Any, features: Features) -> Any:
    """The direction of what the output matrix is first applied to (the prompt's last position) for a random
    observation; a random model's are much alike. Only the first: the random model's later tokens are near ties,
    which float rounding may break either way."""
    import torch

    batch: dict[str, Any] = {"task": ["push the t shaped block onto target"]}
    for key, (_, shape) in features.items():
        batch[key] = torch.rand((1, *shape), generator=torch.Generator().manual_seed(0))
    seen: list[Any] = []
    hook = policy.model.paligemma_with_expert.paligemma.lm_head.register_forward_pre_hook(
        lambda _module, inputs: seen.append(inputs[0].reshape(-1, inputs[0].shape[-1]))
    )
    try:
        policy.predict_action_chunk(preprocessor(batch))
    finally:
        hook.remove()
    first = seen[0].mean(dim=0)
    return first / first.norm()


def emphasize_fast_slots(policy: Any, tokenizer: Any, direction: Any) -> None:
    """Output rows that make decoding emit FAST tokens (see the module docstring): every other row is pushed
    against the typical output direction, far below, and the FAST slots and "|" get rows of `SLOT_SCALE`, so that
    sampling at a temperature draws among several of them. The input embedding is left as it is: LeRobot's loader
    (`_fix_pytorch_state_dict_keys`) copies the output matrix over it, but the checkpoint's own embedding, read
    after the output matrix, replaces that copy."""
    import torch

    paligemma = policy.model.paligemma_with_expert.paligemma
    slots = sorted(i for token, i in tokenizer.get_vocab().items() if token == "|" or token.startswith("fast"))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        weight = paligemma.lm_head.weight
        weight -= AWAY * direction
        weight[slots] = torch.randn((len(slots), weight.shape[1]), generator=generator) * SLOT_SCALE


def tiny_pi_fast(directory: Path, features: Features, action: Action, **changes: Any) -> Path:
    """A pi0_fast checkpoint in `directory`: its text tokenizer in `directory/tokenizer`, its action tokenizer in
    `directory/action_tokenizer`; `changes`: config fields to set otherwise. Call inside `tiny_gemma()`."""
    import torch
    from lerobot.policies.factory import get_policy_class, make_policy_config, make_pre_post_processors
    from transformers import AutoTokenizer

    register_fast_processor()
    config_fields = {**TINY_PI_FAST, **changes}
    fast = FastActionProcessor.fit(synthetic_chunks(300, config_fields["chunk_size"], action[0]))
    fast.save_pretrained(directory / "action_tokenizer")
    text = fast_text_tokenizer(directory / "tokenizer", fast.vocab_size).resolve()
    inputs, outputs = _features(features, action[0])
    names = {"text_tokenizer_name": str(text), "action_tokenizer_name": str((directory / "action_tokenizer").resolve())}
    config = make_policy_config(
        "pi0_fast", input_features=inputs, output_features=outputs, device="cpu", **config_fields, **names
    )
    torch.manual_seed(0)
    policy = get_policy_class("pi0_fast")(config)
    preprocessor, postprocessor = make_pre_post_processors(config, dataset_stats=quantile_stats(features, action))
    direction = typical_output_direction(policy, preprocessor, features)
    emphasize_fast_slots(policy, AutoTokenizer.from_pretrained(text), direction)
    policy.save_pretrained(directory)
    preprocessor.save_pretrained(directory)
    postprocessor.save_pretrained(directory)
    keep_action_tokenizer_step_settings(directory, str(text), config.fast_skip_tokens)
    return directory


def keep_action_tokenizer_step_settings(directory: Path, text_tokenizer: str, skip: int) -> None:
    """LeRobot 0.6.1's `ActionTokenizerProcessorStep.get_config` leaves out its text tokenizer and skip count, so a
    reloaded step would fetch google/paligemma-3b-pt-224 and skip 128: the saved step gets the build's own."""
    path = directory / "policy_preprocessor.json"
    pipeline = json.loads(path.read_text())
    for step in pipeline["steps"]:
        if step.get("registry_name") == "action_tokenizer_processor":
            step["config"].update(paligemma_tokenizer_name=text_tokenizer, fast_skip_tokens=skip)
    path.write_text(json.dumps(pipeline, indent=2))
