// The loop's runs API as the page uses it (docs/loop.md): a streamed run's Server-Sent
// Events, answering a confirmation, reading the person's runs. Every request carries the
// person's bearer token; a 401 is answered by one refresh and one retry, then SignInNeeded.

import { SignInNeeded } from './sign-in.js';

export class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

async function failure(response) {
  const body = await response.json().catch(() => null);
  let detail = body?.detail ?? body?.error?.message ?? response.statusText;
  if (Array.isArray(detail)) detail = detail.map((d) => d.msg).join('；');
  return new ApiError(response.status, String(detail));
}

export class RunsApi {
  constructor(signIn) {
    this.signIn = signIn;
  }

  async #fetch(path, init = {}) {
    for (let attempt = 0; ; attempt += 1) {
      const token = await this.signIn.token();
      const headers = { ...(init.headers ?? {}), Authorization: `Bearer ${token}` };
      const response = await fetch(path, { ...init, headers });
      if (response.status !== 401) return response;
      if (attempt > 0 || !(await this.signIn.refresh())) throw new SignInNeeded();
    }
  }

  async #json(path, init) {
    const response = await this.#fetch(path, init);
    if (!response.ok) throw await failure(response);
    return response.json();
  }

  // Start a run and hand each event to onEvent(name, data) as it arrives. Returns when the
  // stream ends, whether or not `run.finished` came (the caller follows the run then);
  // a stream cut by the network throws.
  async stream(body, onEvent) {
    const response = await this.#fetch('v1/runs', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' },
      body: JSON.stringify({ ...body, stream: true, confirm: 'ask' }),
    });
    if (!response.ok) throw await failure(response);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    const parser = new EventParser(onEvent);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      parser.feed(value);
    }
  }

  answer(runId, confirmationId, action) {
    const path = `v1/runs/${encodeURIComponent(runId)}/confirmations/${encodeURIComponent(confirmationId)}`;
    return this.#json(path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ action }),
    });
  }

  run(runId) {
    return this.#json(`v1/runs/${encodeURIComponent(runId)}`);
  }

  async recent(limit) {
    return (await this.#json(`v1/runs?limit=${limit}`)).runs;
  }
}

// The HTML standard's event-stream parsing, for what the loop sends: `event:` and `data:`
// fields, `:` comments skipped, LF or CRLF, an event complete at its blank line.
class EventParser {
  #buffer = '';
  #event = '';
  #data = [];

  constructor(onEvent) {
    this.onEvent = onEvent;
  }

  feed(text) {
    this.#buffer += text;
    for (;;) {
      const end = this.#buffer.indexOf('\n');
      if (end < 0) return;
      const line = this.#buffer.slice(0, end).replace(/\r$/, '');
      this.#buffer = this.#buffer.slice(end + 1);
      if (line === '') {
        if (this.#data.length) this.onEvent(this.#event || 'message', JSON.parse(this.#data.join('\n')));
        this.#event = '';
        this.#data = [];
      } else if (!line.startsWith(':')) {
        const colon = line.indexOf(':');
        const name = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (name === 'event') this.#event = value;
        else if (name === 'data') this.#data.push(value);
      }
    }
  }
}
