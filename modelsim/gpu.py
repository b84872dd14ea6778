"""GPU metrics under dcgm-exporter's names, derived from the simulator's own load model.

Every series carries `simulated="true"` and a model name that says so: these are what the
latency model implies, not measurements. They exist so that GPU panels, recording rules and
alerts can be exercised where there is no GPU. dcgm-exporter's names, types and labels are the
contract; the figures follow a modelled H200 serving one 8B model:

- GR engine active = share of wall time with at least one request running (what
  DCGM_FI_DEV_GPU_UTIL also reports, as a percentage, and why it reads high on a light load);
- SM active = that share × batch occupancy, min(1, 0.35 + 0.65 × running / 64): a single
  decode stream leaves most SMs idle, a full batch does not;
- tensor-pipe active ≈ 0.6 × SM active, DRAM active ≈ 0.8 × GR active (decode is memory-bound);
- framebuffer: vLLM takes `--gpu-memory-utilization` (0.9) of it at start, load or not;
- power, SM clock and temperature move between idle and busy figures with SM active.

Activity figures are averages over the time since the previous scrape, as DCGM's profiling
fields are averages over its sampling interval.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "simulated")


def label_values(gpu: str) -> tuple[str, ...]:
    """dcgm-exporter's labels for the GPU with this index (SIM_GPU_IDS)."""
    number = int(gpu)
    return (
        gpu,
        f"GPU-{number:08d}-0000-0000-0000-000000000000",
        f"{number:08X}:00:00.0",
        f"nvidia{gpu}",
        "NVIDIA H200 (simulated)",
        "modelsim",
        "true",
    )


FRAMEBUFFER_MIB = 143_771  # 141 GB
GPU_MEMORY_UTILIZATION = 0.90
IDLE_WATTS, BUSY_WATTS = 90.0, 700.0
IDLE_CLOCK_MHZ, BUSY_CLOCK_MHZ = 345.0, 1980.0
IDLE_CELSIUS, BUSY_CELSIUS = 32.0, 71.0
FULL_BATCH = 64
# (field, type, help) of the health fields monitoring/dcgm/counters.csv collects
HEALTH = (
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "The XID code of the most recent GPU fault (0: none)."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Time held down by the power limit (in us)."),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Time held down by temperature (in us)."),
)


class BusyClock:
    """Integrates, over wall time, whether anything runs and how full the batch is."""

    def __init__(self, now: float | None = None) -> None:
        self._running = 0
        self._since = time.monotonic() if now is None else now
        self._busy = 0.0
        self._occupied = 0.0
        self._read_at = self._since
        self._read_busy = 0.0
        self._read_occupied = 0.0

    def update(self, running: int, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._advance(now)
        self._running = running

    def _advance(self, now: float) -> None:
        elapsed = max(now - self._since, 0.0)
        if self._running:
            self._busy += elapsed
            self._occupied += elapsed * min(1.0, 0.35 + 0.65 * self._running / FULL_BATCH)
        self._since = now

    def averages(self, now: float | None = None) -> tuple[float, float]:
        """(busy share, SM-active share) since the previous call."""
        now = time.monotonic() if now is None else now
        self._advance(now)
        window = now - self._read_at
        if window <= 0:
            return 0.0, 0.0
        busy = (self._busy - self._read_busy) / window
        occupied = (self._occupied - self._read_occupied) / window
        self._read_at, self._read_busy, self._read_occupied = now, self._busy, self._occupied
        return min(busy, 1.0), min(occupied, 1.0)


class SimulatedGpuCollector(Collector):
    """The GPUs one replica stands for (a tensor-parallel replica spans several, all busy
    together), each as dcgm-exporter would export it."""

    def __init__(self, clock: BusyClock, gpus: Sequence[str] = ("0",)) -> None:
        self.clock = clock
        self.labels = [label_values(gpu) for gpu in gpus]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        busy, sm_active = self.clock.averages()
        used = round(FRAMEBUFFER_MIB * GPU_MEMORY_UTILIZATION)
        figures = [
            ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", round(100 * busy)),
            ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", busy),
            ("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp.", sm_active),
            (
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                "Ratio of cycles the tensor (HMMA) pipe is active.",
                0.6 * sm_active,
            ),
            (
                "DCGM_FI_PROF_DRAM_ACTIVE",
                "Ratio of cycles the memory interface is active.",
                0.8 * busy,
            ),
            ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", used),
            ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", FRAMEBUFFER_MIB - used),
            (
                "DCGM_FI_DEV_POWER_USAGE",
                "Power draw (in W).",
                IDLE_WATTS + (BUSY_WATTS - IDLE_WATTS) * sm_active,
            ),
            (
                "DCGM_FI_DEV_SM_CLOCK",
                "SM clock frequency (in MHz).",
                IDLE_CLOCK_MHZ + (BUSY_CLOCK_MHZ - IDLE_CLOCK_MHZ) * min(busy * 4, 1.0),
            ),
            (
                "DCGM_FI_DEV_GPU_TEMP",
                "GPU temperature (in C).",
                IDLE_CELSIUS + (BUSY_CELSIUS - IDLE_CELSIUS) * sm_active,
            ),
        ]
        for name, documentation, value in figures:
            family = GaugeMetricFamily(name, documentation, labels=LABELS)
            for values in self.labels:
                family.add_metric(values, value)
            yield family
        yield from self._health()

    def _health(self) -> Iterator[GaugeMetricFamily]:
        """A simulated GPU never faults: the health fields, at zero, so that the alerts and
        panels that read them have their series, under dcgm-exporter's names. Its counters
        have no `_total` suffix, which this client library cannot write for a counter: they
        are exported as gauges, which rate() and increase() read alike."""
        for name, _kind, documentation in HEALTH:
            family = GaugeMetricFamily(name, documentation, labels=LABELS)
            for values in self.labels:
                family.add_metric(values, 0.0)
            yield family
