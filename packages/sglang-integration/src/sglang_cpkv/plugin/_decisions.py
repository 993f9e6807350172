"""A log of the plugin's decisions, each with its reason.

Every hook that changes (or deliberately keeps) a setting records one :class:`Decision`. They
go to the ``sglang_cpkv`` logger as they happen, and ``cpkv-serve --dry-run`` prints the ones
recorded while it resolved the arguments. The log is per process (each SGLang process loads the
plugin and decides for itself).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

logger = logging.getLogger("sglang_cpkv")

_LOG: list[Decision] = []


@dataclass(frozen=True)
class Decision:
    """One decision.

    Attributes:
        topic: ``"dsa-backends"``, ``"indexcache"``, ``"tbo"``, ``"config"``, ``"warmup"`` or
            ``"ragged-offsets"``.
        message: what was decided, e.g. ``"decode backend trtllm -> flashmla_kv"``.
        reason: why.
    """

    topic: str
    message: str
    reason: str

    def __str__(self) -> str:
        return f"{self.message} ({self.reason})"


def record(topic: str, message: str, reason: str, *, level: int = logging.INFO) -> Decision:
    """Append a decision and log it as ``cpkv[topic]: message (reason)``, once per process.

    The same decision made again (SGLang parses a model's config twice while it resolves the
    arguments, and the config hook decides the same each time) is neither appended nor logged:
    one decision, one line.
    """
    decision = Decision(topic, message, reason)
    if decision in _LOG:
        return decision
    _LOG.append(decision)
    logger.log(level, "cpkv[%s]: %s", topic, decision)
    return decision


def decisions(topic: str | None = None) -> list[Decision]:
    """Decisions recorded so far in this process, optionally of one topic, oldest first."""
    return [d for d in _LOG if topic is None or d.topic == topic]


def clear() -> None:
    """Forget recorded decisions (before a fresh dry-run resolution)."""
    _LOG.clear()
