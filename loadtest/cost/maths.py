"""The formulas: peak vs average demand, whole-GPU staircase, daily costs and the break-even.

Plain numbers in, plain numbers out (no settings, no files), so each formula can be checked by
hand. The per-run and per-token prices themselves come from common.cost, the module whose
formulas the Prometheus cost rules use.
"""

from __future__ import annotations

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
    """How a day's requests spread over the day."""

    busy_hours_per_day: float
    busy_share: float  # of the day's requests, in the busy hours
    peak_factor: float = 1.0  # the busiest moment ÷ the busy hours' mean rate

    def peak_per_daily_request(self) -> float:
        """Requests/s at the day's peak for each request a day: the busy hours' rate at their
        busiest, or the quiet hours' rate if those are busier (a badly chosen profile)."""
        quiet_hours = HOURS_PER_DAY - self.busy_hours_per_day
        # with no quiet hours left, every request falls in the busy ones
        share = self.busy_share if quiet_hours else 1.0
        busy = share * self.peak_factor / (self.busy_hours_per_day * SECONDS_PER_HOUR)
        quiet = (1 - share) / (quiet_hours * SECONDS_PER_HOUR) if quiet_hours else 0.0
        return max(busy, quiet)

    def peak_to_mean(self) -> float:
        """The day's peak rate ÷ its mean rate: 1 for flat traffic, 24/8 = 3 for 8 busy hours."""
        return self.peak_per_daily_request() * SECONDS_PER_DAY


FLAT = Traffic(busy_hours_per_day=24.0, busy_share=1.0, peak_factor=1.0)


def replicas_needed(
    requests_per_day: float, capacity_per_s: float, traffic: Traffic, minimum: int = 1
) -> int:
    """Whole replicas for the peak: ceil(peak requests/s ÷ one replica's requests/s at the
    SLO); at least `minimum`, since a self-hosted model is kept up even when nobody asks (and
    a production site keeps a second so that one can fail or be upgraded)."""
    peak = requests_per_day * traffic.peak_per_daily_request()
    return max(minimum, math.ceil(peak / capacity_per_s - _EPSILON))


@dataclass(frozen=True)
class SelfHost:
    """The self-hosted option's daily cost as a function of requests/day."""

    replica_usd_per_hour: float  # GPU $/h × GPUs per replica
    billing_hours_per_day: float
    capacity_per_s: float  # requests/s one replica serves at the SLO
    traffic: Traffic
    fixed_usd_per_day: float = 0.0  # ops labour, retraining, storage/egress
    min_replicas: int = 1  # kept running at any volume (redundancy)

    @property
    def replica_usd_per_day(self) -> float:
        return self.replica_usd_per_hour * self.billing_hours_per_day

    @property
    def requests_per_replica_day(self) -> float:
        """The most requests a day one replica serves without breaking the SLO at the peak."""
        return self.capacity_per_s / self.traffic.peak_per_daily_request()

    def replicas(self, requests_per_day: float) -> int:
        return replicas_needed(
            requests_per_day, self.capacity_per_s, self.traffic, self.min_replicas
        )

    def usd_per_day(self, requests_per_day: float) -> float:
        return self.replicas(requests_per_day) * self.replica_usd_per_day + self.fixed_usd_per_day

    def utilisation(self, requests_per_day: float) -> float:
        """Requests served ÷ what the paid GPU time could serve at the SLO."""
        paid_seconds = self.billing_hours_per_day * SECONDS_PER_HOUR
        return requests_per_day / (
            self.replicas(requests_per_day) * self.capacity_per_s * paid_seconds
        )


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
    """Where API $/day (= requests × API $/request) reaches self-host $/day (a staircase).

    On the stretch served by n replicas self-hosting costs n·g + h a day (g: one replica's
    GPU-day, h: the fixed costs); the API costs a·D. They meet at D = (n·g + h)/a, which lies on
    that stretch when D ≤ n·c (c: one replica's requests/day), i.e. when n·(a·c − g) ≥ h. The
    first such n is ceil(h / (a·c − g)), and never fewer than the replicas always kept running.
    None when a·c ≤ g: a fully used replica costs more than the API would for the same
    requests, at any volume."""
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
