"""The GEMM shapes and CP setups a DeepGEMM warmup is planned for."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class KernelType(StrEnum):
    """SGLang's DeepGemmKernelType names."""

    GEMM_NT_F8F8BF16 = "GEMM_NT_F8F8BF16"
    GEMM_NT_F8F8BF16_BLOCK32 = "GEMM_NT_F8F8BF16_BLOCK32"
    GEMM_NT_BF16BF16F32 = "GEMM_NT_BF16BF16F32"
    GROUPED_GEMM_NT_F8F8BF16_CONTIG = "GROUPED_GEMM_NT_F8F8BF16_CONTIG"
    GROUPED_GEMM_NT_F8F8BF16_MASKED = "GROUPED_GEMM_NT_F8F8BF16_MASKED"
    GROUPED_GEMM_NT_BF16_CONTIG = "GROUPED_GEMM_NT_BF16_CONTIG"
    GROUPED_GEMM_NT_BF16_MASKED = "GROUPED_GEMM_NT_BF16_MASKED"

    @property
    def grouped(self) -> bool:
        return self.name.startswith("GROUPED")

    @property
    def contiguous(self) -> bool:
        return self.name.endswith("_CONTIG")


class Rows(StrEnum):
    """Which rows a dense GEMM runs on under prefill CP, i.e. the Ms it can meet.

    ``cp_local``: one CP rank's shard of the forward (at most ``max_rank_rows``); its grid may
    stop there. ``gathered``: possibly every rank's shard, all-gathered (SGLang 0.5.23 gathers
    the FFN input over the attention-CP group under DSA/MLA CP), or rows CP does not split;
    its grid keeps SGLang's list. Unlabelled shapes are ``gathered``: never drop an M a shape
    might meet.
    """

    CP_LOCAL = "cp_local"
    GATHERED = "gathered"


class CPSplit(StrEnum):
    """How CP distributes a sequence: ``zigzag``/``interleave`` split it, ``none`` does not."""

    ZIGZAG = "zigzag"
    INTERLEAVE = "interleave"
    NONE = "none"


@dataclass(frozen=True)
class GemmShape:
    """One GEMM family DeepGEMM compiles for: ``(M, K) x (groups, N, K)``.

    ``rows`` says where its M comes from under prefill CP (:class:`Rows`); grouped kernels keep
    SGLang's list whatever it says.
    """

    kernel: KernelType
    n: int
    k: int
    groups: int = 1
    name: str = ""
    rows: Rows = Rows.GATHERED

    def __post_init__(self) -> None:
        kernel = KernelType(self.kernel)
        object.__setattr__(self, "kernel", kernel)
        object.__setattr__(self, "rows", Rows(self.rows))
        for label, value in (("n", self.n), ("k", self.k), ("groups", self.groups)):
            if not _is_int(value) or value < 1:
                raise ValueError(
                    f"GemmShape {self.name or kernel.value}: {label} must be a positive int, "
                    f"got {value!r}"
                )
        if not kernel.grouped and self.groups != 1:
            raise ValueError(
                f"GemmShape {self.name or kernel.value}: dense kernel {kernel.value} "
                f"takes groups=1, got {self.groups}"
            )

    @property
    def key(self) -> tuple[str, int, int, int]:
        return (self.kernel.value, self.n, self.k, self.groups)


@dataclass(frozen=True)
class CPSetup:
    """The context-parallel configuration of the prefill ranks."""

    size: int = 1
    split: CPSplit = CPSplit.NONE
    draft: bool = False
    draft_cp: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "split", CPSplit(self.split))
        if not _is_int(self.size) or self.size < 1:
            raise ValueError(f"CP size must be a positive int, got {self.size!r}")
        if self.draft_cp and not self.draft:
            raise ValueError(
                "draft_cp=True needs draft=True (there is no draft model to run under CP)"
            )

    @property
    def splits_sequence(self) -> bool:
        return self.size > 1 and self.split is not CPSplit.NONE
