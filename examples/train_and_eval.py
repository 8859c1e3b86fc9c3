"""Evaluate while training: a tiny LeRobot ACT policy, made here (no Hub, no dataset), trained for a few steps on
synthetic batches, and evaluated every N steps on MetaWorld through one `lerobot_hydra.Evaluator`, whose worker
processes and simulators stay up between evaluations.

    python examples/train_and_eval.py --steps 40 --eval-every 20
    python examples/train_and_eval.py --wandb logger=wandb  # into the offline W&B run the loop starts

Anything after the options is an eval.py override (env, eval, logger, seed); see docs/training.md.
"""

from __future__ import annotations

import argparse
import math

import torch

import lerobot_hydra

STATE, ENV_STATE, ACTION = 4, 39, 4  # MetaWorld's state observation (env.obs_type=state) and action sizes
CHUNK = 10


def make_policy() -> tuple[torch.nn.Module, object, object]:
    """A small ACT with its pre/post processors (normalization statistics made up for the example)."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import get_policy_class, make_policy_config, make_pre_post_processors

    inputs = {
        "observation.state": PolicyFeature(FeatureType.STATE, (STATE,)),
        "observation.environment_state": PolicyFeature(FeatureType.ENV, (ENV_STATE,)),
    }
    outputs = {"action": PolicyFeature(FeatureType.ACTION, (ACTION,))}
    size = {"dim_model": 32, "n_heads": 2, "dim_feedforward": 64, "n_encoder_layers": 1, "n_decoder_layers": 1}
    config = make_policy_config(
        "act",
        input_features=inputs,
        output_features=outputs,
        device="cpu",
        pretrained_backbone_weights=None,
        use_vae=False,
        chunk_size=CHUNK,
        n_action_steps=CHUNK,
        **size,
    )
    policy = get_policy_class("act")(config)

    def stats(n: int, mean: float, std: float) -> dict[str, torch.Tensor]:
        m, s = torch.full((n,), mean), torch.full((n,), std)
        return {"mean": m, "std": s, "min": m - s, "max": m + s}

    dataset_stats = {
        "observation.state": stats(STATE, 0.0, 0.5),
        "observation.environment_state": stats(ENV_STATE, 0.0, 0.5),
        "action": stats(ACTION, 0.0, 0.5),
    }
    preprocessor, postprocessor = make_pre_post_processors(config, dataset_stats=dataset_stats)
    return policy, preprocessor, postprocessor


def train_step(policy: torch.nn.Module, optimizer: torch.optim.Optimizer, batch_size: int = 16) -> float:
    """One step on a synthetic (already normalized) batch: the action chunk is a fixed function of the state."""
    state = torch.randn(batch_size, STATE)
    batch = {
        "observation.state": state,
        "observation.environment_state": torch.randn(batch_size, ENV_STATE),
        "action": torch.tanh(state).unsqueeze(1).expand(batch_size, CHUNK, ACTION).contiguous(),
        "action_is_pad": torch.zeros(batch_size, CHUNK, dtype=torch.bool),
    }
    loss, _ = policy.forward(batch)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--episodes", type=int, default=2, help="episodes per task at each evaluation")
    parser.add_argument("--episode-length", type=int, default=50)
    parser.add_argument("--wandb", action="store_true", help="start an offline W&B run for the loop to log into")
    parser.add_argument("overrides", nargs="*", help="eval.py overrides, e.g. env.task=[reach-v3,push-v3]")
    args = parser.parse_args()

    torch.manual_seed(0)
    policy, preprocessor, postprocessor = make_policy()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    overrides = [
        "env=metaworld",
        "env.task=reach-v3",
        "env.obs_type=state",
        f"env.episode_length={args.episode_length}",
        f"eval.n_episodes={args.episodes}",
        "eval.batch_size=2",
        *args.overrides,
    ]
    run = None
    if args.wandb:
        import wandb

        run = wandb.init(project="train_and_eval", mode="offline")
    policy.train()
    with lerobot_hydra.Evaluator(overrides) as evaluator:
        for step in range(1, args.steps + 1):
            loss = train_step(policy, optimizer)
            if run is not None:
                run.log({"train/loss": loss}, step=step)
            if step % args.eval_every == 0:
                results = evaluator.evaluate(policy, preprocessor=preprocessor, postprocessor=postprocessor, step=step)
                low, high = results.overall.ci95_pc_success
                rate = results.overall.pc_success
                print(
                    f"step {step}: loss {loss:.4f}, success {rate:.1f}% (95% CI {low:.1f}-{high:.1f}) over "
                    f"{results.overall.n_episodes} episodes, {results.eval_s:.1f} s",
                    flush=True,
                )
                assert policy.training and math.isfinite(loss)  # the loop's own mode is untouched
    if run is not None:
        run.finish()


if __name__ == "__main__":
    main()
