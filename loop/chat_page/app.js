// The chat page: sign in, ask, watch the answer stream and what the agent does, answer its
// confirmations with buttons. The conversation (the runs API's session id) survives a reload
// in sessionStorage; the token never does (sign-in.js).
//
// Everything the model or the leave system says reaches the document through textContent
// (el() below): never as markup, whatever it holds.

import { SignIn, SignInFailed, SignInNeeded } from './sign-in.js';
import { ApiError, RunsApi } from './runs.js';
import * as words from './words.js';

const SESSION = 'leave-chat.session';
const DRAFT = 'leave-chat.draft';
const RESTORE_LIMIT = 50; // runs read back after a reload (the session's, newest first)
const FOLLOW_EVERY_MS = 1000;
const FOLLOW_FOR_MS = 10 * 60 * 1000; // as long as a confirmation can wait, and then some

const page = { config: null, signIn: null, api: null, busy: false };

const $ = (id) => document.getElementById(id);

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === 'text') node.textContent = value;
    else if (key === 'class') node.className = value;
    else node.setAttribute(key, value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function notice(text, bad = false) {
  const box = $('notice');
  box.textContent = text ?? '';
  box.className = bad ? 'notice bad' : 'notice';
  box.hidden = !text;
}

// Keep the newest of the conversation in view, unless the person scrolled up to read.
function following(update) {
  const view = $('main');
  const atEnd = view.scrollHeight - view.scrollTop - view.clientHeight < 160;
  update();
  if (atEnd) view.scrollTop = view.scrollHeight;
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function setBusy(busy) {
  page.busy = busy;
  $('send').disabled = busy;
  $('new-conversation').disabled = busy;
  $('log').setAttribute('aria-busy', String(busy));
}

// -- one request and what came of it --------------------------------------------------------

class Turn {
  constructor(input) {
    this.input = input;
    this.runId = null;
    this.finished = false;
    this.calls = new Map(); // tool_call_id → { line, name, args }
    this.leaves = new Map(); // leave_id → the leave as a search this turn showed it
    this.lastCall = null;
    this.cards = [];
    this.answer = null;
    this.node = el('li', { class: 'turn' });
    this.activity = el('ul', { class: 'activity', 'aria-label': '助手做了什麼' });
    this.cardBox = el('div');
    this.notes = el('div');
    this.working = el('p', { class: 'working', role: 'status', text: '處理中…' });
    const user = el('div', { class: 'bubble user' },
      el('span', { class: 'speaker', text: '你' }), el('p', { class: 'text', text: input }));
    this.answerSlot = el('div');
    this.node.append(user, this.activity, this.cardBox, this.answerSlot, this.notes, this.working);
    $('log').append(this.node);
    $('empty').hidden = true;
  }

  #answerText() {
    if (this.answer === null) {
      this.answer = el('p', { class: 'text' });
      this.answerSlot.append(el('div', { class: 'bubble assistant' },
        el('span', { class: 'speaker', text: '差勤助手' }), this.answer));
    }
    return this.answer;
  }

  appendAnswer(text) {
    this.#answerText().textContent += text;
  }

  setAnswer(text) {
    if (!text || this.answer?.textContent === text) return;
    this.#answerText().textContent = text;
  }

  line(text, tone = '') {
    const line = el('li', { class: tone, text });
    this.activity.append(line);
    return line;
  }

  toolStarted(id, name, args) {
    this.calls.set(id, { line: this.line(words.toolStarted(name, args)), name, args });
    this.lastCall = { name, args };
  }

  toolFinished(id, name, step) {
    const call = this.calls.get(id) ?? { line: this.line(''), name, args: step.arguments };
    this.calls.set(id, call);
    const { text, tone } = words.toolFinished(name, step);
    call.line.textContent = text;
    call.line.className = tone;
    for (const leave of step.result?.leaves ?? []) this.leaves.set(leave.leave_id, leave);
  }

  note(text, bad = false) {
    this.notes.append(el('p', { class: bad ? 'outcome bad' : 'outcome', text }));
  }

  // `live`: asked now (its deadline known), not read back after a reload
  ask(question, live = true) {
    if (this.cards.some((c) => c.id === question.confirmation_id)) return;
    const card = new Card(this, question, live);
    this.cards.push(card);
    this.cardBox.append(card.node);
    // the question is where the person is: read out, and the buttons next in Tab order
    card.node.focus({ preventScroll: true });
    card.node.scrollIntoView({ block: 'nearest' });
  }

  // confirmation.resolved names the question a person was asked; one a loop of an older
  // version sent without its id answers the oldest still open.
  resolved(outcome, confirmationId) {
    const open = this.cards.filter((c) => c.open);
    (open.find((c) => c.id === confirmationId) ?? open[0])?.resolve(outcome);
  }

  // The run ended; a question it never said the end of (read back, not streamed) is closed
  // with the answer this page sent to it, if any.
  done() {
    this.finished = true;
    this.working.remove();
    const outcomes = { accept: 'accepted', decline: 'declined' };
    for (const card of this.cards) if (card.open) card.resolve(outcomes[card.sent] ?? 'ended');
  }
}

// -- a confirmation, with buttons that say what each does -------------------------------------

class Card {
  constructor(turn, question, live) {
    this.turn = turn;
    this.id = question.confirmation_id;
    this.open = true;
    const call = turn.lastCall;
    const leaveId = call?.args?.leave_id;
    this.cancelling = call?.name === 'cancel_approved_leave' && Boolean(leaveId);
    this.sent = null; // the answer this page sent, if any
    const leave = leaveId ? turn.leaves.get(leaveId) : null;
    const titleId = `confirm-${this.id}`;
    this.node = el('section', { class: 'confirm', tabindex: '-1', 'aria-labelledby': titleId });
    const title = this.cancelling ? `請確認：取消已核准的假單 ${leaveId}` : '請確認這個動作';
    this.node.append(el('h3', { id: titleId, text: title }));
    if (this.cancelling) this.node.append(this.#details(leaveId, leave));
    this.node.append(el('p', { class: 'question', text: question.message }));
    const undone = `沒有回答就不會${this.cancelling ? '取消' : '執行'}`;
    let when = '請盡快回答';
    if (live) {
      const deadline = new Date(Date.now() + page.config.confirmation_timeout_seconds * 1000);
      when = `請在 ${deadline.toLocaleTimeString('zh-TW', { hour12: false })} 前回答`;
    }
    this.node.append(el('p', { class: 'deadline', text: `${when}；${undone}。` }));
    const restored = leave ? `，退回 ${leave.days} 天${leave.leave_type}` : '';
    const no = el('button', { type: 'button', text: this.cancelling ? `不要取消，保留 ${leaveId}` : '不要' });
    const yes = el('button', { type: 'button', class: 'danger',
      text: this.cancelling ? `確認取消 ${leaveId}${restored}` : '確認' });
    no.addEventListener('click', () => this.#answer('decline'));
    yes.addEventListener('click', () => this.#answer('accept'));
    this.buttons = [no, yes];
    this.result = el('p', { class: 'result', role: 'status' });
    this.node.append(el('div', { class: 'buttons' }, no, yes), this.result);
  }

  #details(leaveId, leave) {
    const rows = [['假單', leaveId]];
    if (leave) {
      rows.push(['假別', leave.leave_type], ['日期', `${leave.start_date}～${leave.end_date}（${leave.days} 天）`],
        ['事由', leave.reason], ['取消後', `狀態「已核准」改為「已取消」，退回 ${leave.days} 天${leave.leave_type}額度`]);
    }
    const list = el('dl');
    for (const [term, value] of rows) list.append(el('dt', { text: term }), el('dd', { text: String(value) }));
    return list;
  }

  async #answer(action) {
    this.sent = action;
    for (const button of this.buttons) button.disabled = true;
    this.result.textContent = '正在送出你的回答…';
    try {
      await page.api.answer(this.turn.runId, this.id, action);
      if (this.open) this.result.textContent = action === 'accept' ? '已確認，處理中…' : '已回覆不要，處理中…';
    } catch (error) {
      if (error instanceof ApiError && error.status === 409) {
        this.#close('這個確認已經回答過了（也許在另一個分頁）：以先送到的回答為準，這個回答沒有送出。');
      } else if (error instanceof ApiError && error.status === 404) {
        this.#close('這個確認已經不在等待中（逾時或已結束），你的回答沒有送出。');
      } else if (error instanceof SignInNeeded) {
        this.sent = null;
        for (const button of this.buttons) button.disabled = false;
        this.result.textContent = '你的登入已過期：請重新登入後再回答。';
        needSignIn(null);
      } else {
        this.sent = null;
        for (const button of this.buttons) button.disabled = false;
        this.result.textContent = `回答沒有送出：${error.message}。請再試一次。`;
      }
    }
  }

  #close(text) {
    this.open = false;
    this.result.textContent = text;
  }

  resolve(outcome) {
    if (!this.open) return;
    this.open = false;
    for (const button of this.buttons) button.disabled = true;
    this.node.classList.add(outcome);
    const what = this.cancelling ? '假單維持已核准，沒有任何變更' : '沒有執行';
    const texts = {
      accepted: '你已確認。',
      declined: `你選擇不要：${what}。`,
      // "cancelled" is also what a question nobody answered in time comes to
      cancelled: this.sent ? `確認已取消：${what}。` : `你沒有在時限內回答，確認已逾時：${what}。`,
      ended: '這個確認已結束。',
    };
    this.result.textContent = texts[outcome] ?? texts.ended;
  }
}

// -- a run: its events, or its record when the stream was lost --------------------------------

function onEvent(turn, name, data) {
  switch (name) {
    case 'run.started':
      turn.runId = data.id;
      sessionStorage.setItem(SESSION, data.session_id);
      sessionStorage.removeItem(DRAFT);
      break;
    case 'answer.delta':
      turn.appendAnswer(data.text);
      break;
    case 'tool.started':
      turn.toolStarted(data.tool_call_id, data.name, data.arguments);
      break;
    case 'tool.finished':
      turn.toolFinished(data.tool_call_id, data.name, data.step);
      break;
    case 'detection':
      turn.line('語言模型的輸出格式異常，這次不採用。', 'failed');
      break;
    case 'confirmation.requested':
      turn.ask(data);
      break;
    case 'confirmation.resolved':
      turn.resolved(data.outcome, data.confirmation_id);
      break;
    case 'run.finished':
      finish(turn, data);
      break;
    default: // model.started, model.finished, and events a newer loop added: nothing to show
  }
}

// A finished run as the loop recorded it: its steps (again: the record is the truth), its
// answer, and how it ended when it did not simply answer. `live`: it ended just now (not one
// read back after a reload), so a refused sign-in is the person's to act on now.
function finish(turn, run, live = true) {
  turn.runId = run.id;
  for (const step of run.steps ?? []) {
    if (step.type === 'tool') turn.toolFinished(step.tool_call_id, step.name, step);
  }
  turn.setAnswer(run.answer);
  const ended = words.runEnded(run);
  if (ended) turn.note(ended, run.status !== 'cancelled');
  turn.done();
  if (live && words.reasonCode(run.reason) === 'sign_in_refused') signInAgainFor(turn.input);
}

// After the stream ended without run.finished (the connection or the loop went away): read
// the run until it ends, showing any question it still waits on.
async function follow(turn) {
  const note = el('p', { class: 'outcome', text: '與服務的連線中斷了，正在追蹤這次的結果…' });
  turn.notes.append(note);
  const until = Date.now() + FOLLOW_FOR_MS;
  while (Date.now() < until) {
    try {
      const run = await page.api.run(turn.runId);
      if (run.status !== 'running') {
        note.remove();
        following(() => finish(turn, run));
        return;
      }
      following(() => {
        for (const question of run.confirmations ?? []) turn.ask(question, false);
      });
    } catch (error) {
      if (error instanceof SignInNeeded) {
        note.remove();
        needSignIn(null);
        return;
      }
      if (error instanceof ApiError && error.status === 404) break;
    }
    await sleep(FOLLOW_EVERY_MS);
  }
  note.remove();
  turn.note('查不到這次的結果：請查詢你的假單確認目前的狀態。', true);
  turn.done();
}

function apiProblem(error) {
  const texts = {
    413: '訊息太大，服務拒收了。',
    422: `服務不接受這則訊息：${error.message}`,
    429: '嘗試太多次了，請稍後再試。',
    503: '服務暫時無法使用，請稍後再試。',
  };
  return texts[error.status] ?? `服務回應錯誤（${error.status}）：${error.message}`;
}

function tooLong(text) {
  const limit = page.config.max_input_chars;
  // code points, as the server counts; a text twice the limit in UTF-16 is over it anyway
  return text.length > 2 * limit || [...text].length > limit;
}

async function send(text) {
  notice(null);
  if (tooLong(text)) {
    notice(`訊息太長了：最多 ${page.config.max_input_chars} 個字。沒有送出。`, true);
    return;
  }
  setBusy(true);
  sessionStorage.setItem(DRAFT, text);
  $('message').value = '';
  let turn;
  following(() => {
    turn = new Turn(text);
  });
  const body = { input: text };
  const session = sessionStorage.getItem(SESSION);
  if (session) body.session_id = session;
  try {
    await page.api.stream(body, (name, data) => following(() => onEvent(turn, name, data)));
  } catch (error) {
    if (error instanceof SignInNeeded || error instanceof ApiError) {
      if (turn.runId === null) turn.node.remove();
      $('message').value = text;
      if (error instanceof SignInNeeded) needSignIn(text);
      else notice(apiProblem(error), true);
      setBusy(false);
      return;
    }
    // anything else is the stream cut on the way: the run may still go on
  }
  if (!turn.finished && turn.runId !== null) await follow(turn);
  else if (!turn.finished) {
    turn.note('沒有收到服務的回應：請檢查網路連線後再試一次。', true);
    turn.done();
    $('message').value = text;
  }
  setBusy(false);
}

// -- the conversation after a reload --------------------------------------------------------

async function restore() {
  const session = sessionStorage.getItem(SESSION);
  if (!session) return;
  const runs = (await page.api.recent(RESTORE_LIMIT)).filter((r) => r.session_id === session);
  const waiting = [];
  for (const summary of runs.reverse()) {
    const run = await page.api.run(summary.id);
    const turn = new Turn(run.input);
    turn.runId = run.id;
    if (run.status === 'running') {
      for (const question of run.confirmations ?? []) turn.ask(question, false);
      waiting.push(turn);
    } else {
      finish(turn, run, false);
    }
  }
  // a run still waiting on a question: follow it (the page stays busy until it ends)
  await Promise.all(waiting.map(follow));
}

// -- signing in and out ---------------------------------------------------------------------

function who() {
  $('who').textContent = page.signIn.user?.name ?? '';
}

function showSignIn(note) {
  $('sign-in').hidden = false;
  $('composer').hidden = true;
  $('account').hidden = true;
  const choices = $('sign-in-choices');
  choices.replaceChildren();
  const { config } = page;
  let text = note ?? '';
  if (config.sign_in === 'oidc') {
    const button = el('button', { type: 'button', class: 'primary', text: '使用公司帳號登入' });
    button.addEventListener('click', () => page.signIn.begin().catch((e) => notice(e.message, true)));
    choices.append(button);
  } else if (config.sign_in === 'demo') {
    text = `${text} 開發環境：選一位示範員工登入（正式環境不接受示範帳號）。`.trim();
    for (const employee of config.demo_employees) {
      const role = employee.role === 'manager' ? '主管' : '員工';
      const button = el('button', { type: 'button', text: `${employee.name}（${employee.employee_id}，${role}）` });
      button.addEventListener('click', () => {
        page.signIn.useDemo(employee);
        enterChat();
      });
      choices.append(button);
    }
  } else {
    text = `${text} 這個服務還沒有設定登入方式：請管理者設定 LOOP_CHAT_OIDC_ISSUER。`.trim();
  }
  $('sign-in-note').textContent = text;
  choices.querySelector('button')?.focus();
}

// The token is no good any more and could not be refreshed: sign in again, the message kept.
function needSignIn(text) {
  if (text) sessionStorage.setItem(DRAFT, text);
  const why = page.config.sign_in === 'demo'
    ? '這個示範帳號沒有被接受（正式環境只接受公司帳號）。'
    : '你的登入已過期，請重新登入。';
  showSignIn(`${why}你輸入的訊息已保留。`);
}

async function signInAgainFor(text) {
  $('message').value = text;
  sessionStorage.setItem(DRAFT, text);
  if (await page.signIn.refresh()) {
    notice('登入已更新：剛才那則訊息已放回輸入框，確認後請再送出一次。');
  } else {
    needSignIn(text);
  }
}

async function enterChat() {
  $('sign-in').hidden = true;
  $('account').hidden = false;
  $('chat').hidden = false;
  $('composer').hidden = false;
  who();
  const draft = sessionStorage.getItem(DRAFT);
  if (draft && !$('message').value) $('message').value = draft;
  if (!$('log').childElementCount) {
    setBusy(true); // nothing is sent before the conversation so far is back in place
    try {
      await restore();
    } catch (error) {
      if (error instanceof SignInNeeded) {
        needSignIn(null);
        return;
      }
      notice(`先前的對話讀不回來：${error.message}`, true);
    } finally {
      setBusy(false);
    }
    $('main').scrollTop = $('main').scrollHeight;
  }
  $('message').focus();
}

function newConversation() {
  sessionStorage.removeItem(SESSION);
  $('log').replaceChildren();
  $('empty').hidden = false;
  notice('已開始新的對話。');
  $('message').focus();
}

async function signOut() {
  sessionStorage.removeItem(SESSION);
  sessionStorage.removeItem(DRAFT);
  $('log').replaceChildren();
  $('message').value = '';
  await page.signIn.signOut(); // may leave the page for the provider's end-session endpoint
  $('chat').hidden = true;
  showSignIn('你已登出。');
}

// -- wiring ---------------------------------------------------------------------------------

function wire() {
  $('composer').addEventListener('submit', (event) => {
    event.preventDefault();
    const text = $('message').value.trim();
    if (text && !page.busy) send(text);
  });
  $('message').addEventListener('keydown', (event) => {
    // Enter sends; Shift+Enter is a new line; Enter that ends an input method's composition
    // (how Chinese is typed) only ends the composition.
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing && event.keyCode !== 229) {
      event.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('message').addEventListener('input', () => {
    // what was typed survives a reload and a trip to the provider; not a text too long to send
    const text = $('message').value;
    if (text.length <= page.config.max_input_chars) sessionStorage.setItem(DRAFT, text);
  });
  $('new-conversation').addEventListener('click', newConversation);
  $('sign-out').addEventListener('click', () => signOut().catch((e) => notice(e.message, true)));
}

async function main() {
  try {
    const response = await fetch('chat/config');
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    page.config = await response.json();
  } catch (error) {
    $('loading').hidden = true;
    notice(`頁面設定讀不到（${error.message}）：請稍後重新整理。`, true);
    return;
  }
  page.signIn = new SignIn(page.config);
  page.api = new RunsApi(page.signIn);
  wire();
  let signedIn = false;
  try {
    signedIn = await page.signIn.resume();
  } catch (error) {
    notice(error instanceof SignInFailed ? error.message : `登入失敗：${error.message}`, true);
  }
  $('loading').hidden = true;
  if (signedIn) await enterChat();
  else showSignIn(page.signIn.justSignedOut() ? '你已登出。' : null);
}

main();
