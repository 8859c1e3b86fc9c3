"""Where a LeRobot checkpoint comes from: a local directory, or a Hub repo fetched without running its code.

From the Hub only JSON configs and safetensors tensors are downloaded (never `.bin`/`.pt`/`.pth` pickles), and
the processor steps a downloaded pipeline names must be LeRobot's own, since loading a pipeline instantiates
whatever class its JSON names.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lerobot_hydra.core.errors import UserError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
PREPROCESSOR_FILE = "policy_preprocessor.json"
POSTPROCESSOR_FILE = "policy_postprocessor.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
# A checkpoint repo: configs, weights and the processors' tensors.
CHECKPOINT_PATTERNS = ["*.json", "*.safetensors"]
# A tokenizer or VLM backbone repo named by a checkpoint: configs and tokenizer files, no weights.
AUXILIARY_PATTERNS = ["*.json", "*.txt", "*.model", "*.jinja"]
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
LOCAL_DIR_HINT = (
    "or set policy.path to a local directory holding config.json, model.safetensors and the "
    "policy_preprocessor/policy_postprocessor files"
)


@dataclass(frozen=True)
class Checkpoint:
    directory: Path
    # The Hub repo it was fetched from; None for a local directory.
    repo_id: str | None

    @property
    def name(self) -> str:
        return self.repo_id or str(self.directory)


def resolve_checkpoint(path: str, revision: str | None = None) -> Checkpoint:
    """A local directory as is, else a Hub repo id fetched into the Hugging Face cache."""
    local = Path(path).expanduser()
    if local.is_dir():
        if revision:
            raise UserError(f"policy.revision applies to Hub repos; '{path}' is a local directory (set it to null)")
        checkpoint = Checkpoint(local.resolve(), None)
    elif not REPO_ID.match(path) or path.startswith((".", "~")):
        raise UserError(
            f"policy.path '{path}' is neither a directory nor a Hub repo id such as lerobot/diffusion_pusht"
        )
    else:
        checkpoint = Checkpoint(Path(fetch_repo(path, CHECKPOINT_PATTERNS, revision, path)), path)
    check_files(checkpoint)
    return checkpoint


def checkpoint_identity(checkpoint: Checkpoint) -> dict[str, Any]:
    """What a checkpoint is: a Hub repo's commit (the name of the snapshot dir it resolved to at load), or for a
    local directory the SHA-256 of each file LeRobot loads from it (symlinks such as checkpoints/last resolved)."""
    if checkpoint.repo_id is not None:
        return {"repo_id": checkpoint.repo_id, "commit": checkpoint.directory.name}
    return {"files": {name: file_sha256(checkpoint.directory / name) for name in loaded_files(checkpoint)}}


def loaded_files(checkpoint: Checkpoint) -> list[str]:
    """config.json, the weights, the two processor pipelines and the state files (normalization stats) they name."""
    names = [CONFIG_FILE, WEIGHTS_FILE, PREPROCESSOR_FILE, POSTPROCESSOR_FILE]
    for filename in (PREPROCESSOR_FILE, POSTPROCESSOR_FILE):
        for step in read_json(checkpoint.directory / filename).get("steps", []):
            if isinstance(step, dict) and isinstance(step.get("state_file"), str):
                names.append(step["state_file"])
    return [name for name in dict.fromkeys(names) if (checkpoint.directory / name).is_file()]


def file_sha256(path: Path, chunk_bytes: int = 1 << 24) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_repo(repo_id: str, patterns: list[str], revision: str | None, needed_by: str) -> str:
    """Download the files of `repo_id` matching `patterns` (or find them in the cache); one line on failure."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    what = f"'{repo_id}'" if repo_id == needed_by else f"'{repo_id}' (named by checkpoint '{needed_by}')"
    try:
        return snapshot_download(repo_id, revision=revision, allow_patterns=patterns)
    except GatedRepoError as err:
        raise UserError(
            f"the Hub repo {what} is gated; accept its terms on huggingface.co and log in (huggingface-cli login), "
            f"{LOCAL_DIR_HINT}"
        ) from err
    except RevisionNotFoundError as err:
        raise UserError(f"the Hub repo {what} has no revision '{revision}'; check policy.revision") from err
    except RepositoryNotFoundError as err:
        raise UserError(
            f"{what} is not a model repo on the Hugging Face Hub (or it is private: log in with huggingface-cli "
            f"login); check policy.path, {LOCAL_DIR_HINT}"
        ) from err
    except (LocalEntryNotFoundError, OSError, HfHubHTTPError) as err:
        reason = "HF_HUB_OFFLINE=1 is set" if constants.HF_HUB_OFFLINE else "the Hub is unreachable"
        raise UserError(
            f"cannot fetch {what} from the Hugging Face Hub ({reason}) and it is not in the local cache; "
            f"download it where the Hub is reachable (huggingface-cli download {repo_id}) {LOCAL_DIR_HINT}"
        ) from err


def check_files(checkpoint: Checkpoint) -> None:
    names = {p.name for p in checkpoint.directory.iterdir()}
    if CONFIG_FILE not in names:
        raise UserError(f"'{checkpoint.name}' has no {CONFIG_FILE}; it is not a LeRobot policy checkpoint")
    if WEIGHTS_FILE not in names:
        pickles = sorted(n for n in names if n.endswith(PICKLE_SUFFIXES))
        found = f" (it has {', '.join(pickles)})" if pickles else ""
        if checkpoint.repo_id is not None:
            # Our download skipped pickles; say whether the repo's weights exist only in that form.
            found = found or _remote_pickles(checkpoint.repo_id)
        raise UserError(
            f"'{checkpoint.name}' has no {WEIGHTS_FILE}{found}; weights are loaded from safetensors only and "
            "pickled .bin/.pt/.pth files are never unpickled; convert the weights to safetensors"
        )
    if PREPROCESSOR_FILE not in names or POSTPROCESSOR_FILE not in names:
        raise UserError(
            f"'{checkpoint.name}' has no {PREPROCESSOR_FILE}/{POSTPROCESSOR_FILE} (a checkpoint from before "
            "LeRobot 0.4); migrate a local copy with: python -m lerobot.processor.migrate_policy_normalization "
            "--pretrained-path <dir>"
        )
    check_readable(checkpoint.directory)


def check_readable(directory: Path) -> None:
    """Every JSON and safetensors file of the checkpoint parses (a safetensors file's header, which also tells a
    truncated file: its tensors' offsets reach past its end), before anything is built."""
    for path in sorted(directory.glob("*.json")):
        read_json(path)
    for path in sorted(directory.glob("*.safetensors")):
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="numpy") as tensors:
                tensors.keys()
        except Exception as err:  # noqa: BLE001 - SafetensorError, OSError: a damaged file from outside
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(
                f"cannot read {path} ({reason}): the file is damaged or was only partly written (an interrupted "
                "download or copy); copy or download the checkpoint again"
            ) from None


def _remote_pickles(repo_id: str) -> str:
    try:
        from huggingface_hub import HfApi

        files = [f for f in HfApi().list_repo_files(repo_id) if f.endswith(PICKLE_SUFFIXES)]
    except Exception:  # noqa: BLE001 - only refines the message
        return ""
    return f" (the repo has {', '.join(files)})" if files else ""


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read {path}: {err}") from err
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a JSON object")
    return data


def check_processor_steps(checkpoint: Checkpoint, filename: str) -> None:
    """Refuse a downloaded pipeline that names a step class outside LeRobot: loading it would run that class."""
    if checkpoint.repo_id is None:
        return  # the user's own directory may use their own registered steps
    from lerobot.processor import ProcessorStep, ProcessorStepRegistry

    for step in read_json(checkpoint.directory / filename).get("steps", []):
        if "registry_name" in step:
            if step["registry_name"] not in ProcessorStepRegistry._registry:
                raise UserError(
                    f"{filename} of '{checkpoint.name}' uses the processor step '{step['registry_name']}', which "
                    "this LeRobot version does not know; it may need a newer lerobot"
                )
            continue
        class_path = str(step.get("class", ""))
        module_name, _, class_name = class_path.rpartition(".")
        cls = None
        if module_name == "lerobot" or module_name.startswith("lerobot."):
            try:
                import importlib

                cls = getattr(importlib.import_module(module_name), class_name, None)
            except ImportError:
                cls = None
        if not (isinstance(cls, type) and issubclass(cls, ProcessorStep)):
            raise UserError(
                f"{filename} of '{checkpoint.name}' names the step class '{class_path}', which is not a LeRobot "
                "processor step; refusing to import code named by a downloaded file (review it and load it from a "
                "local directory instead)"
            )


def auxiliary_repos(checkpoint: Checkpoint, policy_config: Any) -> list[str]:
    """Hub repos the checkpoint needs besides itself: the VLM backbone config and the tokenizer."""
    # SmolVLA's vlm_model_name; pi0-FAST's text/action tokenizer names; X-VLA's tokenizer_name.
    names = [getattr(policy_config, "vlm_model_name", None)]
    names += [v for k, v in sorted(vars(policy_config).items()) if k.endswith("tokenizer_name")]
    for filename in (PREPROCESSOR_FILE, POSTPROCESSOR_FILE):
        for step in read_json(checkpoint.directory / filename).get("steps", []):
            names.append((step.get("config") or {}).get("tokenizer_name"))
    repos: list[str] = []
    for name in names:
        if isinstance(name, str) and name and not Path(name).expanduser().is_dir() and name not in repos:
            repos.append(name)
    return repos


def fetch_auxiliary(checkpoint: Checkpoint, policy_config: Any) -> None:
    """Put the tokenizer/backbone config files in the cache first, so that a missing one is named in one line
    instead of failing deep inside transformers."""
    for repo in auxiliary_repos(checkpoint, policy_config):
        if not REPO_ID.match(repo):
            raise UserError(
                f"checkpoint '{checkpoint.name}' names '{repo}' (tokenizer or backbone), which is neither a local "
                "directory nor a Hub repo id"
            )
        fetch_repo(repo, AUXILIARY_PATTERNS, None, checkpoint.name)
