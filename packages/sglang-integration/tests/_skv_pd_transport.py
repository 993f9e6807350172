"""The transport of SGLang's Mooncake PD path, emulated in one process: the one stand-in.

SGLang's ``MooncakeTransferEngine`` (``distributed/device_communicators/
mooncake_transfer_engine.py``) wraps ``mooncake.engine.TransferEngine``, a compiled library that
moves bytes over RDMA between registered memory regions of two engines. It cannot run here, so
:func:`installed` puts :class:`TransferEngine` in its place (``sys.modules["mooncake.engine"]``)
and SGLang's wrapper runs unchanged on top of it. Everything that decides *what* moves (pages,
item lengths, addresses) stays SGLang's; this class only copies ``length`` bytes from a source
address to a destination address, as the RDMA write would, and refuses (returns -1, as Mooncake
does) any transfer that leaves a region its engine registered.

The zmq sockets between the two sides are the other half of the transport: the frames SGLang
builds (``build_receiver_registration_message``, ``build_receiver_metadata_message``, the status
message) are handed to the parser SGLang runs on receipt (``KVArgsRegisterInfo.from_zmq``,
``TransferInfo.from_zmq``) instead of crossing a socket (:class:`ControlLog`).
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class Write:
    """One transfer a batch carried: ``length`` bytes from ``src`` (this engine) to ``dst``."""

    session: str
    src: int
    dst: int
    length: int


class TransferEngine:
    """Stands in for ``mooncake.engine.TransferEngine`` (the RDMA library).

    Engines find each other by session id (``host:rpc_port``) in a per-process registry, as
    Mooncake's P2P handshake finds a peer. A batch write copies every block with ``memmove``
    after checking that its source lies in one region registered here and its destination in
    one region registered by the peer; otherwise nothing of the batch moves and it returns -1.
    """

    _ports: ClassVar[Iterator[int]] = itertools.count(17000)
    registry: ClassVar[dict[str, TransferEngine]] = {}

    def __init__(self) -> None:
        self.regions: list[tuple[int, int]] = []
        self.writes: list[Write] = []
        self.refused: list[str] = []
        self.port = next(self._ports)
        self.hostname = ""

    # ---- what SGLang's MooncakeTransferEngine calls --------------------------------------------

    def initialize(self, hostname: str, metadata: str, protocol: str, device: str) -> int:
        self.hostname = hostname
        TransferEngine.registry[f"{hostname}:{self.port}"] = self
        return 0

    def get_rpc_port(self) -> int:
        return self.port

    def batch_register_memory(self, ptrs: list[int], lengths: list[int]) -> int:
        self.regions += [(int(p), int(n)) for p, n in zip(ptrs, lengths, strict=True)]
        return 0

    def register_memory(self, ptr: int, length: int) -> int:
        return self.batch_register_memory([ptr], [length])

    def batch_unregister_memory(self, ptrs: list[int]) -> int:
        gone = {int(p) for p in ptrs}
        self.regions = [r for r in self.regions if r[0] not in gone]
        return 0

    def unregister_memory(self, ptr: int) -> int:
        return self.batch_unregister_memory([ptr])

    def transfer_sync_write(self, session: str, src: int, dst: int, length: int) -> int:
        return self.batch_transfer_sync_write(session, [src], [dst], [length])

    def batch_transfer_sync_write(
        self, session: str, srcs: list[int], dsts: list[int], lengths: list[int]
    ) -> int:
        peer = TransferEngine.registry.get(session)
        if peer is None:
            self.refused.append(f"no engine at session {session}")
            return -1
        blocks = list(zip(srcs, dsts, lengths, strict=True))
        for src, dst, length in blocks:
            if not _inside(self.regions, src, length) or not _inside(peer.regions, dst, length):
                self.refused.append(f"{length} B from {src:#x} to {dst:#x} leaves a region")
                return -1
        for src, dst, length in blocks:
            ctypes.memmove(dst, src, length)
            self.writes.append(Write(session, src, dst, length))
        return 0


def _inside(regions: list[tuple[int, int]], addr: int, length: int) -> bool:
    return length > 0 and any(p <= addr and addr + length <= p + n for p, n in regions)


@dataclass
class ControlLog:
    """Frames the control plane carried (endpoint, frames), in order: the zmq stand-in."""

    frames: list[tuple[str, list[bytes]]] = field(default_factory=list)

    def send(self, endpoint: str, parts: list[bytes], is_ipv6: bool = False) -> None:
        """What ``CommonKVManager._send_multipart_locked`` does, minus the socket."""
        self.frames.append((endpoint, list(parts)))


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """``mooncake.engine`` resolves to this module's :class:`TransferEngine` inside the block."""
    package = types.ModuleType("mooncake")
    package.__path__ = []
    engine = types.ModuleType("mooncake.engine")
    engine.TransferEngine = TransferEngine
    package.engine = engine
    saved = {name: sys.modules.get(name) for name in ("mooncake", "mooncake.engine")}
    sys.modules.update({"mooncake": package, "mooncake.engine": engine})
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        TransferEngine.registry.clear()
