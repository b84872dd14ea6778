"""From settings, workload and prompts to every figure of the report (no text, no files)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

from common.cost import (
    PER_MILLION,
    api_usd_per_run,
    self_hosted_usd_per_million_tokens,
    self_hosted_usd_per_run,
)

from ..summary import PromptPrefix
from .inputs import PromptTokens, Workload
from .maths import (
    FLAT,
    BreakEven,
    SelfHost,
    Traffic,
    break_even,
    fixed_usd_per_day,
)
from .settings import CalculatorSettings


@dataclass(frozen=True)
class Inputs:
    settings: CalculatorSettings
    workload: Workload
    prompts: PromptTokens


@dataclass(frozen=True)
class Point:
    """Both options at one volume."""

    requests_per_day: float
    replicas: int  # at the peak hour
    gpus: int
    gpu_hours_per_day: float  # the GPU time paid for: every hour's replicas × GPUs
    utilisation: float
    self_host_usd_per_day: float
    self_host_usd_per_request: float
    self_host_usd_per_million_tokens: float
    api_usd_per_day: float


@dataclass(frozen=True)
class Swing:
    """The break-even (with the hidden costs) when one input moves down and up."""

    name: str
    unit: Unit
    low: float  # the input's value moved down
    high: float
    break_even_low: float | None
    break_even_high: float | None


@dataclass(frozen=True)
class Figures:
    api_input_tokens: float  # per request: the fine-tune's input + the longer prompt per call
    api_cached_input_tokens: float  # of those, read from the API's prompt cache
    api_cached_share: float  # api_cached_input_tokens ÷ api_input_tokens
    api_cached_share_how: str  # how the share was found, for the assumptions table
    api_cached_share_measured: bool  # from the load test's prompt records
    api_output_tokens: float
    api_usd_per_request: float
    api_usd_per_million_tokens: float
    self_host_usd_per_request_at_capacity: float  # a replica busy every paid hour, GPU only
    self_host_usd_per_million_tokens_at_capacity: float
    hidden_usd_per_day: dict[str, float]
    with_hidden: SelfHost  # the traffic profile and the fixed costs
    without_hidden: SelfHost  # traffic spread evenly over the paid hours, GPU time only
    break_even_with_hidden: BreakEven | None
    break_even_without_hidden: BreakEven | None
    operating_point: Point
    operating_point_is_setting: bool  # else one replica's daily capacity under the profile
    staircase: list[Point]  # each replica count at its fullest
    sensitivity: list[Swing]


def traffic(s: CalculatorSettings) -> Traffic:
    # the settings checked that the 24 percentages add up to 100 (within a rounding)
    total = sum(s.daily_profile)
    return Traffic(tuple(x / total for x in s.daily_profile), s.peak_factor)


def api_prices(s: CalculatorSettings) -> CalculatorSettings:
    """The settings with the blended price, when given, in place of the input, cached-input and
    output prices."""
    if s.api_blended_usd_per_million is None:
        return s
    blended = s.api_blended_usd_per_million
    return s.model_copy(
        update={
            "api_input_usd_per_million": blended,
            "api_cached_input_usd_per_million": blended,
            "api_output_usd_per_million": blended,
        }
    )


# OpenAI caches a prompt's prefix once it is this long (then in steps of 128 tokens); other
# providers set their own minimum (Anthropic caches only the prefixes a request marks), so the
# derived share is theirs only roughly: api_cached_share sets a provider's measured one.
MIN_CACHED_PREFIX_TOKENS = 1024


def derived_cached_tokens(inputs: Inputs) -> tuple[float, str]:
    """The API input tokens per request that repeat a prefix the API has seen, and how.

    k model calls per request, P the API system prompt, C the conversation the calls read
    (the fine-tune's input less its own system prompt on each call: k·p). Each call reads the
    system prompt and the conversation so far; the conversation is assumed to grow by the same
    amount each call (call j reads j·c₁, so C = c₁·k(k + 1)/2). What repeats:
    - on every call the system prompt (the same on every call of every request), when it is
      at least MIN_CACHED_PREFIX_TOKENS long;
    - from the 2nd call on, the whole of the previous call's prompt (previous turns are resent
      unchanged), when the shortest such prompt (P + c₁) is that long.
    Sum: P + (k − 1)·P + C·(k − 1)/(k + 1); what is new each request is the last call's
    conversation, 2·C/(k + 1). Tool schemas resent on each call count as conversation here, so
    the share is if anything understated."""
    w, p = inputs.workload, inputs.prompts
    k, big = w.model_calls, p.api
    conversation = max(0.0, w.input_tokens - k * p.finetune)
    first_call = conversation * 2 / (k * (k + 1))
    cached = 0.0
    parts = []
    if big >= MIN_CACHED_PREFIX_TOKENS:
        cached += big
        parts.append(f"the {count_text(big)}-token API prompt on the 1st call")
    if k > 1 and big + first_call >= MIN_CACHED_PREFIX_TOKENS:
        cached += (k - 1) * big + conversation * (k - 1) / (k + 1)
        parts.append("the previous call's whole prompt on each later call")
    if not parts:
        return 0.0, f"no prefix of {MIN_CACHED_PREFIX_TOKENS:,} tokens repeats: none cached"
    total = api_tokens(inputs)[0]
    how = (
        f"{count_text(cached)} of {count_text(total)} tokens: {' + '.join(parts)}, with "
        f"{w.model_calls:.3g} calls and {count_text(conversation)} conversation tokens a "
        f"request growing evenly; cached from {MIN_CACHED_PREFIX_TOKENS:,} tokens"
    )
    return min(cached, total), how


def count_text(value: float) -> str:
    return f"{value:,.0f}"


def prompt_records(inputs: Inputs) -> PromptPrefix | None:
    """The capacity step's prompt records, when it has any calls to measure."""
    facts = inputs.workload.summary
    records = facts.prompt_prefix if facts else None
    return records if records is not None and records.calls and records.runs else None


def measured_cached_tokens(inputs: Inputs) -> tuple[float, str] | None:
    """The API input tokens per request that repeat a prefix, from the load test's prompt
    records (None without them): each call's repeated prefix as the fine-tune sent it, plus
    the API prompt's extra tokens, which every call repeats. Cached only when the calls'
    mean repeated prefix reaches MIN_CACHED_PREFIX_TOKENS."""
    records = prompt_records(inputs)
    if records is None:
        return None
    extra = inputs.prompts.extra_per_call
    repeated = records.repeated_tokens / records.runs + extra * records.calls / records.runs
    per_call = repeated * records.runs / records.calls
    total = api_tokens(inputs)[0]
    shown = (
        f"{count_text(repeated)} of {count_text(total)} tokens a request repeat a prefix: "
        f"{records.repeated_share:.0%} of the fine-tune's prompts in {records.calls:,} model "
        f"calls of {records.runs:,} runs, + the API prompt's {count_text(extra)} extra tokens "
        "on each call"
    )
    if per_call < MIN_CACHED_PREFIX_TOKENS:
        return 0.0, (
            f"{shown}; a call repeats {count_text(per_call)} tokens on average, under the "
            f"{MIN_CACHED_PREFIX_TOKENS:,} an API caches from: none cached"
        )
    return min(repeated, total), f"{shown}; cached from {MIN_CACHED_PREFIX_TOKENS:,} tokens"


def api_cached_share(inputs: Inputs) -> tuple[float, str]:
    """The share of the API's input billed at the cached price, and how it was found: set,
    measured from the prompt records, or derived from the prompts' lengths."""
    given = inputs.settings.api_cached_share
    if given is not None:
        return given, "set"
    total = api_tokens(inputs)[0]
    cached, how = measured_cached_tokens(inputs) or derived_cached_tokens(inputs)
    return (cached / total if total else 0.0), how


def api_tokens(inputs: Inputs) -> tuple[float, float]:
    """The API model's tokens per request: the same conversation, with the long system prompt
    sent on every model call instead of the short one."""
    w, p = inputs.workload, inputs.prompts
    return w.input_tokens + w.model_calls * p.extra_per_call, w.output_tokens


def api_usd_per_request(inputs: Inputs) -> float:
    """(uncached input × input price + cached input × cached price + output × output price)."""
    tokens_in, tokens_out = api_tokens(inputs)
    cached = tokens_in * api_cached_share(inputs)[0]
    prices = api_prices(inputs.settings)
    return api_usd_per_run(tokens_in, tokens_out, prices, cached)


def self_host(inputs: Inputs, hidden: bool) -> SelfHost:
    s, w = inputs.settings, inputs.workload
    minimum = s.min_replicas
    if hidden:
        fixed = fixed_usd_per_day(
            s.ops_usd_per_month,
            s.retraining_usd,
            s.retraining_every_days,
            s.storage_egress_usd_per_month,
        )
        shape = traffic(s)
        scale_down = s.scaling == "scale_down"
    else:
        # The seed article's view: one replica always on and busy every hour, GPU time only.
        fixed, minimum, shape, scale_down = 0.0, 1, FLAT, False
    return SelfHost(
        replica_usd_per_hour=s.gpu_hourly_usd * s.gpu_count,
        capacity_per_s=w.capacity_per_s,
        traffic=shape,
        fixed_usd_per_day=fixed,
        min_replicas=minimum,
        scale_down=scale_down,
        off_hours_min_replicas=s.off_hours_min_replicas,
    )


def point(inputs: Inputs, option: SelfHost, requests_per_day: float) -> Point:
    w = inputs.workload
    usd = option.usd_per_day(requests_per_day)
    replicas = option.replicas(requests_per_day)
    daily_tokens = requests_per_day * (w.input_tokens + w.output_tokens)
    return Point(
        requests_per_day=requests_per_day,
        replicas=replicas,
        gpus=replicas * inputs.settings.gpu_count,
        gpu_hours_per_day=option.replica_hours(requests_per_day) * inputs.settings.gpu_count,
        utilisation=option.utilisation(requests_per_day),
        self_host_usd_per_day=usd,
        self_host_usd_per_request=usd / requests_per_day,
        self_host_usd_per_million_tokens=usd / daily_tokens * PER_MILLION,
        api_usd_per_day=requests_per_day * api_usd_per_request(inputs),
    )


class Unit(StrEnum):
    """How a report shows a lever's value."""

    USD_PER_HOUR = "usd/h"
    USD_PER_REQUEST = "usd/request"
    USD_PER_DAY = "usd/day"
    PER_SECOND = "/s"
    HOURS = "h"
    FACTOR = "×"
    COUNT = "count"
    SHARE = "share"


@dataclass(frozen=True)
class Lever:
    """An input the sensitivity table moves: its name in the reports, how to read its value,
    the inputs with it scaled by a factor, the others held, and its unit."""

    name: str
    read: Callable[[Inputs], float]
    scaled: Callable[[Inputs, float], Inputs]
    unit: Unit


def _settings(inputs: Inputs, **update: float | None) -> Inputs:
    return replace(inputs, settings=inputs.settings.model_copy(update=update))


def _api_prices(inputs: Inputs, factor: float) -> Inputs:
    s = inputs.settings
    blended = s.api_blended_usd_per_million
    return _settings(
        inputs,
        api_input_usd_per_million=s.api_input_usd_per_million * factor,
        api_cached_input_usd_per_million=s.api_cached_input_usd_per_million * factor,
        api_output_usd_per_million=s.api_output_usd_per_million * factor,
        api_blended_usd_per_million=None if blended is None else blended * factor,
    )


def _tokens(inputs: Inputs, factor: float) -> Inputs:
    """Every token the API bills: the conversation's and the long prompt's."""
    workload, prompts = inputs.workload, inputs.prompts
    return replace(
        inputs,
        workload=replace(workload, input_tokens=workload.input_tokens * factor,
                         output_tokens=workload.output_tokens * factor),
        prompts=replace(prompts, finetune=prompts.finetune * factor, api=prompts.api * factor),
    )  # fmt: skip


def _cached_share(inputs: Inputs, factor: float) -> Inputs:
    # a share past 1 would be more input cached than there is
    return _settings(inputs, api_cached_share=min(1.0, api_cached_share(inputs)[0] * factor))


def _peak(inputs: Inputs, factor: float) -> Inputs:
    # the peak hour's share moves with the peak factor; below 1 it stands for a flatter peak
    return _settings(inputs, peak_factor=inputs.settings.peak_factor * factor)


def _hidden_costs(inputs: Inputs, factor: float) -> Inputs:
    s = inputs.settings
    return _settings(
        inputs,
        ops_usd_per_month=s.ops_usd_per_month * factor,
        retraining_usd=s.retraining_usd * factor,
        storage_egress_usd_per_month=s.storage_egress_usd_per_month * factor,
    )


def _capacity(inputs: Inputs, factor: float) -> Inputs:
    capacity = inputs.workload.capacity_per_s * factor
    return replace(inputs, workload=replace(inputs.workload, capacity_per_s=capacity))


def _read_hidden_costs(inputs: Inputs) -> float:
    s = inputs.settings
    return fixed_usd_per_day(
        s.ops_usd_per_month, s.retraining_usd, s.retraining_every_days,
        s.storage_egress_usd_per_month,
    )  # fmt: skip


GPU_PRICE = Lever(
    "GPU $/h",
    lambda i: i.settings.gpu_hourly_usd,
    lambda i, k: _settings(i, gpu_hourly_usd=i.settings.gpu_hourly_usd * k),
    Unit.USD_PER_HOUR,
)
API_PRICES = Lever("API prices", lambda i: api_usd_per_request(i), _api_prices,
                   Unit.USD_PER_REQUEST)  # fmt: skip
CACHED_SHARE = Lever(
    "cached share of API input", lambda i: api_cached_share(i)[0], _cached_share, Unit.SHARE
)
TOKENS = Lever("tokens per request", lambda i: sum(api_tokens(i)), _tokens, Unit.COUNT)
CAPACITY = Lever(
    "capacity per replica",
    lambda i: i.workload.capacity_per_s,
    lambda i, k: replace(
        i, workload=replace(i.workload, capacity_per_s=i.workload.capacity_per_s * k)
    ),
    Unit.PER_SECOND,
)
PEAK = Lever("peak ÷ mean rate", lambda i: traffic(i.settings).peak_to_mean(), _peak,
             Unit.FACTOR)  # fmt: skip
HIDDEN_COSTS = Lever("hidden fixed costs", _read_hidden_costs, _hidden_costs, Unit.USD_PER_DAY)


def levers(inputs: Inputs) -> list[Lever]:
    """The inputs this site's sensitivity table moves: those that matter to its answer."""
    s = inputs.settings
    moved = [GPU_PRICE, API_PRICES, TOKENS, CAPACITY]
    prices = api_prices(s)
    if prices.api_cached_input_usd_per_million < prices.api_input_usd_per_million:
        moved.append(CACHED_SHARE)
    moved.append(PEAK)
    if s.ops_usd_per_month or s.retraining_usd or s.storage_egress_usd_per_month:
        moved.append(HIDDEN_COSTS)
    return moved


def _break_even_with_hidden(inputs: Inputs) -> float | None:
    found = break_even(self_host(inputs, hidden=True), api_usd_per_request(inputs))
    return None if found is None else found.requests_per_day


def sensitivity(inputs: Inputs) -> list[Swing]:
    """Each top input × (1 ∓ step), the others held; the widest swing first."""
    step = inputs.settings.sensitivity_step
    swings = []
    for lever in levers(inputs):
        low, high = lever.scaled(inputs, 1 - step), lever.scaled(inputs, 1 + step)
        swings.append(
            Swing(
                lever.name,
                lever.unit,
                lever.read(low),
                lever.read(high),
                _break_even_with_hidden(low),
                _break_even_with_hidden(high),
            )
        )
    base = _break_even_with_hidden(inputs)

    def width(swing: Swing) -> float:
        low, high = swing.break_even_low, swing.break_even_high
        if low is None or high is None:
            # the answer turns into "never" at one end (or from it): the widest swing there is
            return math.inf if any(x is not None for x in (low, high, base)) else 0.0
        return abs(high - low)

    return sorted(swings, key=width, reverse=True)


def staircase_rows(option: SelfHost, volume: float, found: BreakEven | None) -> list[int]:
    """The replica counts worth a row: the first few, and those around the break-even, where
    self-hosting stops ever being dearer and the volume asked for. A handful whatever the
    volume: a billion requests a day need thousands of replicas, not thousands of rows."""
    first = option.min_replicas  # fewer never run: their rows would repeat this one
    wanted = {first, first + 1, first + 2}
    around = [option.replicas(volume)]
    if found is not None:
        around += [found.replicas, option.replicas(found.cheaper_from_requests_per_day)]
    for n in around:
        wanted |= {n - 1, n, n + 1}
    return sorted(n for n in wanted if n >= first)


def calculate(inputs: Inputs) -> Figures:
    s, w = inputs.settings, inputs.workload
    api_in, api_out = api_tokens(inputs)
    api_request = api_usd_per_request(inputs)
    cached_share, cached_how = api_cached_share(inputs)
    with_hidden, without_hidden = self_host(inputs, hidden=True), self_host(inputs, hidden=False)
    replica_hourly = with_hidden.replica_usd_per_hour
    found = break_even(with_hidden, api_request)
    volume = s.requests_per_day or with_hidden.requests_per_replica_day
    per_replica = with_hidden.requests_per_replica_day
    return Figures(
        api_input_tokens=api_in,
        api_cached_input_tokens=api_in * cached_share,
        api_cached_share=cached_share,
        api_cached_share_how=cached_how,
        api_cached_share_measured=s.api_cached_share is None and prompt_records(inputs) is not None,
        api_output_tokens=api_out,
        api_usd_per_request=api_request,
        api_usd_per_million_tokens=api_request / (api_in + api_out) * PER_MILLION,
        self_host_usd_per_request_at_capacity=self_hosted_usd_per_run(
            replica_hourly, w.capacity_per_s
        ),
        self_host_usd_per_million_tokens_at_capacity=self_hosted_usd_per_million_tokens(
            replica_hourly, w.capacity_per_s * (w.input_tokens + w.output_tokens)
        ),
        hidden_usd_per_day={
            "ops labour": fixed_usd_per_day(s.ops_usd_per_month, 0, 1, 0),
            "retraining": fixed_usd_per_day(0, s.retraining_usd, s.retraining_every_days, 0),
            "storage and egress": fixed_usd_per_day(0, 0, 1, s.storage_egress_usd_per_month),
        },
        with_hidden=with_hidden,
        without_hidden=without_hidden,
        break_even_with_hidden=found,
        break_even_without_hidden=break_even(without_hidden, api_request),
        operating_point=point(inputs, with_hidden, volume),
        operating_point_is_setting=s.requests_per_day is not None,
        staircase=[
            point(inputs, with_hidden, n * per_replica)
            for n in staircase_rows(with_hidden, volume, found)
        ],
        sensitivity=sensitivity(inputs),
    )
