"""The links between the tiers as contended FIFO servers: fetch, write-back and transfer time.

Three links carry KV blocks: ``h2d`` (PCIe, DRAM -> HBM), ``d2h`` (PCIe, HBM -> DRAM) and
``nvme`` (SSD <-> DRAM, one server shared by reads and writes). Each is a FIFO server
(:class:`Link`): a transfer queued at ``t`` starts when the link is free, so earlier transfers
(a prefetch, a write-back) delay later ones. Block counts come per link of the hierarchy as
:class:`~kvlab.placement.hierarchy.TieredCache` counts them (index 0 = PCIe, 1 = NVMe).

- :meth:`LinkModel.fetch`: bring blocks up to the GPU (NVMe read, then PCIe up), queued from ``t``;
  returns when they land.
- :meth:`LinkModel.fetch_ms`: the same moves' transfer time alone, without any queueing.
- :meth:`LinkModel.write_back`: queue moves away from the GPU (PCIe down, NVMe write) at ``t``.
- :meth:`LinkModel.transfer_ms`: one uncontended transfer of some blocks over one link.

>>> from kvlab.placement.calibration import LatencyModel
>>> links = LinkModel(LatencyModel(), block_bytes=1_000_000)
>>> first = links.fetch(0.0, [10, 0])      # 10 blocks over PCIe from t = 0 s
>>> second = links.fetch(0.0, [10, 0])     # queued behind the first on the same link
>>> round(first * 1e3, 4), round(second * 1e3, 4), round(links.fetch_ms([10, 0]), 4)
(0.2285, 0.457, 0.2285)
"""

from __future__ import annotations

from collections.abc import Sequence

from .calibration import LatencyModel

__all__ = ["Link", "LinkModel"]


class Link:
    """A FIFO server: :meth:`send` returns the finish time (s) of a transfer queued at ``t``.

    >>> link = Link()
    >>> link.send(1.0, 0.5), link.send(1.2, 0.5), link.send(3.0, 0.5)
    (1.5, 2.0, 3.5)
    """

    __slots__ = ("free_at",)

    def __init__(self) -> None:
        self.free_at = 0.0

    def send(self, t: float, duration_s: float) -> float:
        """Queue a transfer of ``duration_s`` seconds at time ``t`` (s); return when it ends."""
        start = max(self.free_at, t)
        self.free_at = start + duration_s
        return self.free_at


class LinkModel:
    """The PCIe and NVMe links of one simulation, timed by a :class:`LatencyModel`.

    ``block_bytes`` is the KV size of one block. ``up`` and ``down`` are block counts per link
    (``[pcie, nvme]``, or shorter for fewer tiers); a zero count queues nothing.
    """

    __slots__ = ("block_bytes", "d2h", "h2d", "latency", "nvme")

    def __init__(self, latency: LatencyModel, block_bytes: int) -> None:
        self.latency = latency
        self.block_bytes = block_bytes
        self.h2d, self.d2h, self.nvme = Link(), Link(), Link()

    def transfer_ms(self, link: str, blocks: int) -> float:
        """Time (ms) of one transfer of ``blocks`` blocks over ``link`` (``h2d``, ``d2h``,
        ``nvme_read`` or ``nvme_write``), uncontended."""
        return self.latency.transfer_ms(link, blocks * self.block_bytes)

    def fetch(self, t: float, up: Sequence[int]) -> float:
        """Queue the fetches of ``up`` from time ``t`` (s): SSD blocks cross NVMe then PCIe, DRAM
        blocks cross PCIe; return the time (s) the last one lands (``t`` if nothing moves)."""
        if len(up) > 1 and up[1]:
            t = self.nvme.send(t, self.transfer_ms("nvme_read", up[1]) / 1e3)
        if up and up[0]:
            t = self.h2d.send(t, self.transfer_ms("h2d", up[0]) / 1e3)
        return t

    def fetch_ms(self, up: Sequence[int]) -> float:
        """The transfer time (ms) of :meth:`fetch`'s moves alone, without waiting for the links."""
        total = 0.0
        if len(up) > 1 and up[1]:
            total += self.transfer_ms("nvme_read", up[1])
        if up and up[0]:
            total += self.transfer_ms("h2d", up[0])
        return total

    def write_back(self, t: float, down: Sequence[int]) -> None:
        """Queue the moves of ``down`` at time ``t`` (s): PCIe down to DRAM, NVMe writes to the SSD."""
        if down and down[0]:
            self.d2h.send(t, self.transfer_ms("d2h", down[0]) / 1e3)
        if len(down) > 1 and down[1]:
            self.nvme.send(t, self.transfer_ms("nvme_write", down[1]) / 1e3)
