"""vla-eval's interface specs (`DimSpec`: name, dims, format, range, accepts) and our check of a server's against
an env's, before the first episode.

A server declares in its HELLO what it reads (`observation_spec`) and what it produces (`action_spec`), as maps of
component -> spec. vla-eval only logs a warning on a mismatch; here a mismatch refuses the run. The check, for
each component a server declares:

- the same component on the env's side: compatible as vla-eval's `DimSpec.is_compatible` (the consumer's
  `accepts` holds the producer's format, else equal formats and equal dims where both are known), except that a
  `raw` format (vla-eval's "no convention enforced") fits any;
- an observation component the env does not name: an image (`rgb_hwc_uint8`) fits when the env sends an image,
  the language when it sends the task's text, a `raw` one when the env sends a component of that name; any
  other is one the env does not send;
- an action component the env does not consume: fits only as `raw` (a server that declares its whole action raw,
  as vla-eval's LeRobot and pi0 servers do, is checked by the action's size at every step instead).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lerobot_hydra.core.errors import UserError

RAW = "raw"
IMAGE = "rgb_hwc_uint8"
LANGUAGE = "language"


@dataclass(frozen=True)
class Spec:
    dims: int
    format: str
    accepts: frozenset[str] | None = None

    def text(self) -> str:
        return f"{self.format}({self.dims})" if self.dims else self.format


def parse_specs(value: Any, url: str, what: str) -> dict[str, Spec]:
    """A server's declared spec map (absent: nothing declared); a malformed one is one line."""
    if value is None:
        return {}
    try:
        return {
            str(key): Spec(
                int(spec["dims"]),
                str(spec["format"]),
                frozenset(map(str, spec["accepts"])) if spec.get("accepts") is not None else None,
            )
            for key, spec in dict(value).items()
        }
    except (TypeError, KeyError, ValueError, AttributeError) as err:
        raise UserError(f"the vla-eval model server at {url} sent a malformed {what} ({err!r})") from None


def fits(producer: Spec, consumer: Spec) -> bool:
    if consumer.accepts is not None:
        return producer.format in consumer.accepts or RAW in (producer.format, consumer.format)
    if RAW in (producer.format, consumer.format):
        return True
    return producer.format == consumer.format and (
        producer.dims == consumer.dims or 0 in (producer.dims, consumer.dims)
    )


def observation_misfits(server: dict[str, Spec], env: dict[str, Spec]) -> list[str]:
    problems = []
    formats = {spec.format for spec in env.values()}
    for key, wanted in server.items():
        if key in env:
            if not fits(env[key], wanted):
                problems.append(f"observation {key}: the env sends {env[key].text()}, the server reads {wanted.text()}")
        elif wanted.format in (IMAGE, LANGUAGE):
            if wanted.format not in formats:
                problems.append(f"observation {key}: the server reads {wanted.format}, which the env does not send")
        else:
            problems.append(f"observation {key}: the server reads {wanted.text()}, which the env does not send")
    return problems


def action_misfits(server: dict[str, Spec], env: dict[str, Spec]) -> list[str]:
    problems = []
    for key, made in server.items():
        if key in env:
            if not fits(made, env[key]):
                problems.append(f"action {key}: the server produces {made.text()}, the env applies {env[key].text()}")
        elif made.format != RAW:
            problems.append(f"action {key}: the server produces {made.text()}, which the env does not apply")
    return problems


def describe(specs: dict[str, Spec]) -> str:
    return "{" + ", ".join(f"{key}: {spec.text()}" for key, spec in specs.items()) + "}"


def check_specs(info: dict[str, Any], url: str, env_name: str, observation: dict[str, Spec], action: dict[str, Spec]):
    """Refuses, in one line naming both sides' specs, a server whose declared specs do not fit the env's."""
    server_observation = parse_specs(info.get("observation_spec"), url, "observation_spec")
    server_action = parse_specs(info.get("action_spec"), url, "action_spec")
    problems = observation_misfits(server_observation, observation) + action_misfits(server_action, action)
    if problems:
        name = info.get("model_server", "?")
        raise UserError(
            f"the vla-eval model server at {url} ({name}) does not fit {env_name}: {'; '.join(problems)} (server: "
            f"observation {describe(server_observation)}, action {describe(server_action)}; {env_name}: observation "
            f"{describe(observation)}, action {describe(action)}); serve a model trained for this env's convention "
            "(docs/vla-eval.md)"
        )
