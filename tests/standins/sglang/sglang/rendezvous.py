"""STAND-IN for SGLang's multi-node start (rehearsal tests only): ranks meet at rank 0's --dist-init-addr.

What it imitates, and the shapes of the real journal lines:
- rank 0 listens on the dist-init address (torch's TCPStore); a port in use fails like torch's
  DistNetworkError (EADDRINUSE); rank 0 waits for every other rank, and gives up like
  torch's DistStoreError ("Timed out after N seconds waiting for clients. K/N clients joined.");
- a rank > 0 connects to it, retrying, and gives up like torch's c10d client ("The client socket
  has timed out after N ms while trying to connect to (HOST, PORT).");
- once all have met, each loads its part; rank 0 is healthy only after every rank has loaded,
  and a rank > 0 then answers /health and /health_generate only (SGLang's dummy health server);
- a rank whose peer disappears exits with the NCCL watchdog's words (ncclRemoteError, "Connection
  closed by remote peer"), as torch's ProcessGroupNCCL does when a remote process exits.
The real texts: pytorch/pytorch#150916 (ncclRemoteError), vllm-project/vllm#19670 (client socket timeout).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

log = logging.getLogger("sglang.rendezvous")

NCCL_VERSION = "2.27.3"


class RendezvousError(RuntimeError):
    pass


class PeerLost(RuntimeError):
    pass


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


@dataclass
class Node:
    nnodes: int
    rank: int
    address: str
    gpus_per_node: int
    timeout_s: float
    links: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, str]] = field(default_factory=list)
    server: asyncio.AbstractServer | None = None

    @property
    def global_rank(self) -> int:
        """The first GPU rank on this node, as torch names it in its log lines."""
        return self.rank * self.gpus_per_node

    async def meet(self) -> None:
        """Every rank connected (rank 0) or connected to rank 0 (the others)."""
        log.info("Init torch distributed begin. node_rank=%d nnodes=%d dist_init_addr=%s", self.rank, self.nnodes, self.address)
        if self.rank == 0:
            await self._listen()
        else:
            await self._connect()
        log.info("Init torch distributed ends. all %d nodes joined", self.nnodes)

    async def _listen(self) -> None:
        host, port = split_address(self.address)
        joined: asyncio.Queue = asyncio.Queue()

        async def arrive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            line = (await reader.readline()).decode().strip()
            peer = writer.get_extra_info("peername")
            await joined.put((reader, writer, f"{peer[0]}<{peer[1]}>" if peer else line))

        try:
            self.server = await asyncio.start_server(arrive, host, port)
        except OSError as exc:
            raise RendezvousError(
                "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                f"address. port: {port}, useIpv6: false, code: -{exc.errno}, name: EADDRINUSE, message: address already in use"
            ) from exc
        deadline = time.monotonic() + self.timeout_s
        while len(self.links) < self.nnodes - 1:
            try:
                self.links.append(await asyncio.wait_for(joined.get(), max(0.0, deadline - time.monotonic())))
            except TimeoutError:
                raise RendezvousError(
                    f"torch.distributed.DistStoreError: Timed out after {self.timeout_s:.0f} seconds waiting for clients. "
                    f"{len(self.links) + 1}/{self.nnodes} clients joined."
                ) from None
        for _, writer, _ in self.links:
            writer.write(b"go\n")
            await writer.drain()

    async def _connect(self) -> None:
        host, port = split_address(self.address)
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                reader, writer = await asyncio.open_connection(host, port)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    log.error(
                        "[c10d] The client socket has timed out after %dms while trying to connect to (%s, %d).",
                        self.timeout_s * 1000,
                        host,
                        port,
                    )
                    raise RendezvousError(
                        "torch.distributed.DistNetworkError: The client socket has timed out after "
                        f"{self.timeout_s * 1000:.0f}ms while trying to connect to ({host}, {port})."
                    ) from None
                await asyncio.sleep(0.2)
        writer.write(f"rank {self.rank}\n".encode())
        await writer.drain()
        if (await reader.readline()).strip() != b"go":
            raise self._lost(f"{host}<{port}>")
        self.links.append((reader, writer, f"{host}<{port}>"))

    async def loaded(self) -> None:
        """Rank > 0: tell rank 0 this part is loaded. Rank 0: wait until every part is."""
        if self.rank > 0:
            writer = self.links[0][1]
            writer.write(b"loaded\n")
            await writer.drain()
            return
        for reader, _, peer in self.links:
            if (await reader.readline()).strip() != b"loaded":
                raise self._lost(peer)

    async def watch(self) -> None:
        """Return never; raise PeerLost when any peer's connection closes."""
        waits = [asyncio.ensure_future(self._closed(reader, peer)) for reader, _, peer in self.links]
        if not waits:
            await asyncio.Event().wait()
        done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        for task in done:
            task.result()

    async def _closed(self, reader: asyncio.StreamReader, peer: str) -> None:
        while await reader.read(4096):
            pass
        raise self._lost(peer)

    def _lost(self, peer: str) -> PeerLost:
        rank = self.global_rank
        return PeerLost(
            f"[rank{rank}]:[E ProcessGroupNCCL.cpp:1875] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process group watchdog "
            f"thread terminated with exception: NCCL error: remote process exited or there was a network error, "
            f"NCCL version {NCCL_VERSION}\n"
            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
            "Last error:\n"
            f"socketProgress: Connection closed by remote peer {peer}"
        )

    def close(self) -> None:
        for _, writer, _ in self.links:
            writer.close()
        if self.server is not None:
            self.server.close()
