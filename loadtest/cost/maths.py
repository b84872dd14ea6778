"""The formulas: peak vs average demand, whole-GPU staircase, daily costs and the break-even.

Plain numbers in, plain numbers out (no settings, no files), so each formula can be checked by
hand. The per-run and per-token prices themselves come from common.cost, the module whose
formulas the Prometheus cost rules use.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from common.cost import SECONDS_PER_HOUR

HOURS_PER_DAY = 24
SECONDS_PER_DAY = HOURS_PER_DAY * SECONDS_PER_HOUR
DAYS_PER_MONTH = 365 / 12  # the calendar's average month
# Float noise: a volume that exactly fills N replicas needs N of them, not N + 1.
_EPSILON = 1e-9


@dataclass(frozen=True)
class Traffic:
    """How a day's requests spread over its 24 hours (00:00–01:00 first), and how bursty the
    busiest hour is within itself."""

    hourly_shares: tuple[float, ...]  # of the day's requests, per hour; 24 of them, sum 1
    peak_factor: float = 1.0  # the busiest minutes ÷ that hour's mean rate

    def __post_init__(self) -> None:
        if len(self.hourly_shares) != HOURS_PER_DAY:
            raise ValueError(f"a daily profile has 24 hours, not {len(self.hourly_shares)}")
        if min(self.hourly_shares) < 0 or not math.isclose(sum(self.hourly_shares), 1.0):
            raise ValueError("a daily profile's shares are ≥ 0 and add up to 1")

    @classmethod
    def busy_hours(
        cls, hours: int, share: float = 1.0, peak_factor: float = 1.0, first: int = 9
    ) -> Traffic:
        """`share` of the requests evenly over `hours` hours from `first`, the rest evenly over
        the others: the shape of a working day."""
        if hours >= HOURS_PER_DAY:  # no quiet hours left: every request in the busy ones
            share = 1.0
        quiet = (1 - share) / (HOURS_PER_DAY - hours) if hours < HOURS_PER_DAY else 0.0
        busy = {(first + i) % HOURS_PER_DAY for i in range(hours)}
        shares = tuple(share / hours if h in busy else quiet for h in range(HOURS_PER_DAY))
        return cls(shares, peak_factor)

    def per_daily_request(self, hour: int) -> float:
        """Requests/s at the busiest moment of `hour`, for each request a day."""
        return self.hourly_shares[hour] * self.peak_factor / SECONDS_PER_HOUR

    def peak_per_daily_request(self) -> float:
        """Requests/s at the day's peak (the busiest hour, at its busiest) per request a day."""
        return self.per_daily_request(self.peak_hour())

    def peak_hour(self) -> int:
        return max(range(HOURS_PER_DAY), key=lambda h: self.hourly_shares[h])

    def peak_to_mean(self) -> float:
        """The day's peak rate ÷ its mean rate: 1 for flat traffic, 24/8 = 3 for 8 busy hours."""
        return self.peak_per_daily_request() * SECONDS_PER_DAY

    def busy(self, hour: int) -> bool:
        """At or above the day's mean rate: a working hour, where redundancy is kept."""
        return self.hourly_shares[hour] >= 1 / HOURS_PER_DAY - _EPSILON


FLAT = Traffic((1 / HOURS_PER_DAY,) * HOURS_PER_DAY)


def whole_replicas(replicas: float) -> int:
    # a volume that exactly fills N replicas needs N of them, not N + 1
    return math.ceil(replicas - _EPSILON)


def replicas_needed(
    requests_per_day: float, capacity_per_s: float, traffic: Traffic, minimum: int = 1
) -> int:
    """Whole replicas for the peak: ceil(peak requests/s ÷ one replica's requests/s at the
    SLO); at least `minimum`, since a self-hosted model is kept up even when nobody asks (and
    a production site keeps a second so that one can fail or be upgraded)."""
    peak = requests_per_day * traffic.peak_per_daily_request()
    return max(minimum, whole_replicas(peak / capacity_per_s))


@dataclass(frozen=True)
class SelfHost:
    """The self-hosted option's daily cost as a function of requests/day.

    Always on: every hour runs the replicas the peak hour needs. Scaled down (KEDA): each hour
    runs what its own peak needs, never fewer than `min_replicas` in the working hours (at or
    above the day's mean rate) nor than `off_hours_min_replicas` in the others."""

    replica_usd_per_hour: float  # GPU $/h × GPUs per replica
    capacity_per_s: float  # requests/s one replica serves at the SLO
    traffic: Traffic
    fixed_usd_per_day: float = 0.0  # ops labour, retraining, storage/egress
    min_replicas: int = 1  # kept running at any volume (redundancy)
    scale_down: bool = False
    off_hours_min_replicas: int = 1  # with scale_down: KEDA's floor outside working hours

    @property
    def replica_usd_per_day(self) -> float:
        """One replica running all day."""
        return self.replica_usd_per_hour * HOURS_PER_DAY

    @property
    def requests_per_replica_day(self) -> float:
        """The most requests a day one replica serves without breaking the SLO at the peak."""
        return self.capacity_per_s / self.traffic.peak_per_daily_request()

    def replicas(self, requests_per_day: float) -> int:
        """Replicas at the peak hour: the GPUs to buy or reserve."""
        return replicas_needed(
            requests_per_day, self.capacity_per_s, self.traffic, self.min_replicas
        )

    def demand(self) -> list[tuple[float, int]]:
        """Per hour: (replicas per daily request, the floor kept there)."""
        t, c = self.traffic, self.capacity_per_s
        if not self.scale_down:
            return [(t.peak_per_daily_request() / c, self.min_replicas)] * HOURS_PER_DAY
        return [
            (
                t.per_daily_request(h) / c,
                self.min_replicas if t.busy(h) else self.off_hours_min_replicas,
            )
            for h in range(HOURS_PER_DAY)
        ]

    def hourly_replicas(self, requests_per_day: float) -> list[int]:
        return [
            max(floor, whole_replicas(per_request * requests_per_day))
            for per_request, floor in self.demand()
        ]

    def replica_hours(self, requests_per_day: float) -> int:
        return sum(self.hourly_replicas(requests_per_day))

    def usd_per_day(self, requests_per_day: float) -> float:
        return (
            self.replica_hours(requests_per_day) * self.replica_usd_per_hour
            + self.fixed_usd_per_day
        )

    def utilisation(self, requests_per_day: float) -> float:
        """Requests served ÷ what the running replicas could serve at the SLO."""
        servable = self.replica_hours(requests_per_day) * self.capacity_per_s * SECONDS_PER_HOUR
        return requests_per_day / servable


def fixed_usd_per_day(
    ops_usd_per_month: float,
    retraining_usd: float,
    retraining_every_days: float,
    storage_egress_usd_per_month: float,
) -> float:
    """The hidden costs that do not grow with traffic, per day."""
    return (
        ops_usd_per_month / DAYS_PER_MONTH
        + retraining_usd / retraining_every_days
        + storage_egress_usd_per_month / DAYS_PER_MONTH
    )


@dataclass(frozen=True)
class BreakEven:
    requests_per_day: float  # the first volume at which self-hosting costs what the API costs
    replicas: int  # replicas running there
    usd_per_day: float  # either option's daily cost there
    # Past each full replica the next one costs a whole GPU-day, so the API can be cheaper again
    # for a while; from this volume on self-hosting never costs more.
    cheaper_from_requests_per_day: float


def break_even(self_host: SelfHost, api_usd_per_request: float) -> BreakEven | None:
    """Where API $/day (= requests × API $/request) reaches self-host $/day.

    Always on, the cost is one staircase, solved in closed form below; scaled down, each hour
    has its own, walked by `_walk_break_even`.

    Always on:

    On the stretch served by n replicas self-hosting costs n·g + h a day (g: one replica's
    GPU-day, h: the fixed costs); the API costs a·D. They meet at D = (n·g + h)/a, which lies on
    that stretch when D ≤ n·c (c: one replica's requests/day), i.e. when n·(a·c − g) ≥ h. The
    first such n is ceil(h / (a·c − g)), and never fewer than the replicas always kept running.
    None when a·c ≤ g: a fully used replica costs more than the API would for the same
    requests, at any volume."""
    if self_host.scale_down:
        return _walk_break_even(self_host, api_usd_per_request)
    a, g, h = api_usd_per_request, self_host.replica_usd_per_day, self_host.fixed_usd_per_day
    c = self_host.requests_per_replica_day
    margin = a * c - g  # what a full replica saves per day, before the fixed costs
    if a <= 0 or margin <= 0:
        return None
    n = max(self_host.min_replicas, math.ceil(h / margin - _EPSILON))
    # From replica m on, even the start of each stretch (where the new replica is idle) is
    # cheaper: a·(m − 1)·c ≥ m·g + h, i.e. m ≥ (h + a·c)/(a·c − g).
    m = max(n + 1, math.ceil((h + a * c) / margin - _EPSILON))
    return BreakEven(
        requests_per_day=(n * g + h) / a,
        replicas=n,
        usd_per_day=n * g + h,
        cheaper_from_requests_per_day=((m - 1) * g + h) / a,
    )


# Segments the walk visits at most (a second or so); past them its bound is the answer.
MAX_SEGMENTS = 1_000_000


def _walk_break_even(option: SelfHost, api_usd_per_request: float) -> BreakEven | None:
    """The break-even of any hourly schedule, by walking the volumes where some hour needs
    one more replica.

    Hour i runs max(fᵢ, ceil(kᵢ·D)) replicas (kᵢ replicas per daily request, fᵢ its floor),
    so the cost is constant between consecutive breakpoints n/kᵢ and only rises at them. On
    the segment (b, b′] of cost C the API (a·D) reaches it at C/a when C/a ≤ b′. The cost
    never exceeds g·Σ(fᵢ + kᵢ·D + 1) + h, so from K/(a − g·Σkᵢ) on (K = g·Σ(fᵢ + 1) + h) the
    API is dearer at every volume: the walk stops there. None when a ≤ g·Σkᵢ: the marginal
    request costs more to self-host than the API charges."""
    a, g, h = api_usd_per_request, option.replica_usd_per_hour, option.fixed_usd_per_day
    demand = option.demand()
    slope = g * sum(k for k, _ in demand)
    if a <= 0 or a <= slope:
        return None
    bound = (g * sum(floor + 1 for _, floor in demand) + h) / (a - slope)
    # the next breakpoint of each hour with traffic: (volume, hour, n)
    heap = [(max(floor, 1) / k, i, max(floor, 1)) for i, (k, floor) in enumerate(demand) if k]
    heapq.heapify(heap)
    start, first, dearer_cost = 0.0, None, None
    for _ in range(MAX_SEGMENTS):
        end = heap[0][0] if heap else math.inf
        cost = option.usd_per_day(end if end < math.inf else max(start, bound) + 1)
        if first is None and cost <= a * end:
            first = cost / a
        if a * start < cost:  # dearer just past the start of this segment
            dearer_cost = cost
        if start >= bound or not heap:
            break
        while heap and heap[0][0] == end:
            _, i, n = heapq.heappop(heap)
            heapq.heappush(heap, ((n + 1) / demand[i][0], i, n + 1))
        start = end
    else:  # too many segments: the bound holds for both answers
        first = bound if first is None else first
        dearer_cost = a * bound
    if first is None:  # the walk ended on the bound's segment: the crossing is inside it
        first = bound
    return BreakEven(
        requests_per_day=first,
        replicas=option.replicas(first),
        usd_per_day=option.usd_per_day(first),
        cheaper_from_requests_per_day=max(first, (dearer_cost or 0.0) / a),
    )
