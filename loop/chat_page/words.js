// What the agent did, in plain words (Traditional Chinese): a tool call as it starts and as it
// ended, a run's end when it did not simply answer. Built from the runs API's typed steps
// (common/runs_protocol.py: a step's `error` is a StepOutcome, a refused call's result carries
// a RefusalCode), never from the model's text. Each function returns plain text; the page
// puts it into the document as text.

export const STATUS = {
  draft: '草稿',
  submitted: '審核中',
  approved: '已核准',
  rejected: '已駁回',
  cancelled: '已取消',
};

function status(value) {
  return STATUS[value] ?? String(value ?? '');
}

function days(value) {
  const number = Number(value);
  return Number.isFinite(number) ? `${number} 天` : '';
}

// The server's refusal is written for the model ("…請先呼叫 search_leaves…"); its first
// sentence is the reason a person needs.
function firstSentence(message) {
  const text = String(message ?? '').trim();
  const end = text.indexOf('。');
  return end < 0 ? text : text.slice(0, end + 1);
}

export function toolStarted(name, args) {
  const a = args && typeof args === 'object' ? args : {};
  switch (name) {
    case 'search_leaves':
      return a.keyword ? `查詢假單「${a.keyword}」…` : '查詢你的假單…';
    case 'get_leave_balance':
      return '查詢假期餘額…';
    case 'create_leave':
      return `建立${a.leave_type ?? ''}假單（${a.start_date ?? '?'}～${a.end_date ?? '?'}）…`;
    case 'update_leave_status':
      return `把假單 ${a.leave_id ?? '?'} 改為「${status(a.status)}」…`;
    case 'cancel_approved_leave':
      return `準備取消假單 ${a.leave_id ?? '?'}，先請你確認…`;
    default:
      return `使用工具 ${name}…`;
  }
}

function succeeded(name, args, result) {
  const r = result && typeof result === 'object' ? result : {};
  switch (name) {
    case 'search_leaves': {
      const count = Array.isArray(r.leaves) ? r.leaves.length : Number(r.count ?? 0);
      const what = args?.keyword ? `「${args.keyword}」` : '';
      return count ? `查詢假單${what}：找到 ${count} 張` : `查詢假單${what}：沒有找到`;
    }
    case 'get_leave_balance': {
      const lines = Array.isArray(r.balances) ? r.balances : [];
      return `查詢假期餘額：${lines.map((b) => `${b.leave_type} ${days(b.remaining_days)}`).join('、')}`;
    }
    case 'create_leave':
      return `建立草稿假單 ${r.leave_id}（${r.leave_type}，${r.start_date}～${r.end_date}）`;
    case 'update_leave_status': {
      const change = `（${status(r.from_status)} → ${status(r.to_status)}）`;
      if (r.to_status === 'submitted') return `已送出審核 ${r.leave_id}${change}`;
      if (r.to_status === 'approved') return `已核准 ${r.leave_id}${change}`;
      if (r.to_status === 'rejected') return `已駁回 ${r.leave_id}${change}`;
      return `已變更 ${r.leave_id}${change}`;
    }
    case 'cancel_approved_leave': {
      const type = r.leave?.leave_type ?? '';
      return `已取消假單 ${r.leave_id}，退回 ${days(r.restored_days)}${type}額度`;
    }
    default:
      return `完成 ${name}`;
  }
}

function refused(args, result) {
  const error = result?.error ?? {};
  const leave = args?.leave_id ?? '';
  if (error.code === 'confirmation_declined') {
    return `你選擇不取消，假單 ${leave} 維持已核准，沒有任何變更`;
  }
  if (error.code === 'confirmation_cancelled') {
    return `確認沒有完成（逾時或已取消），假單 ${leave} 沒有任何變更`;
  }
  return `被差勤系統拒絕：${firstSentence(error.message) || error.code || '沒有說明原因'}`;
}

const OUTCOMES = {
  sign_in_refused: '你的登入已失效，這一步沒有執行',
  unavailable: '差勤系統暫時無法連線，這一步沒有執行',
  timeout: '查詢逾時，沒有結果',
  timeout_outcome_unknown: '變更逾時、結果不明：請先查詢這張假單，再決定是否重試',
  not_applied_yet: '查詢結果還看不到這項變更',
  invalid_arguments: '助手的工具呼叫格式有誤，這一步沒有執行',
  unknown_tool: '助手呼叫了不存在的工具，這一步沒有執行',
  cancelled: '已停止，這一步沒有執行',
  in_progress: '服務中斷時這一步正在進行，結果不明：請查詢確認',
  interrupted: '服務中斷時這一步正在進行，結果不明：請查詢確認',
  exception: '這一步發生錯誤，沒有完成',
};

// { text, tone: "ok" | "refused" | "failed" } for a finished tool step.
export function toolFinished(name, step) {
  const args = step?.arguments ?? {};
  if (step?.error == null || step.error === 'timeout_applied') {
    return { text: succeeded(name, args, step?.result), tone: 'ok' };
  }
  if (step.error === 'tool_error') {
    const code = step.result?.error?.code;
    const person = code === 'confirmation_declined' || code === 'confirmation_cancelled';
    return { text: refused(args, step.result), tone: person ? 'refused' : 'failed' };
  }
  return { text: OUTCOMES[step.error] ?? `沒有完成（${step.error}）`, tone: 'failed' };
}

const REASONS = {
  max_turns: '步驟太多，助手停下來了：請把要求說得更具體一點。',
  context_overflow: '這段對話太長了：請按「新對話」重新開始。',
  model_error: '語言模型暫時沒有回應，這次沒有完成：請稍後再試。',
  tools_unavailable: '差勤系統暫時無法使用，這次沒有完成：請稍後再試。',
  sign_in_refused: '你的登入已失效：請重新登入後再送出。',
  outcome_unknown: '有一項變更結果不明：請先查詢那張假單，再決定是否重試。',
  tool_call_in_content: '語言模型的輸出格式有誤，這次沒有完成。',
  length: '語言模型的回答太長被截斷，這次沒有完成。',
  interrupted: '服務在處理途中重新啟動，這次沒有完成：請查詢假單確認目前的狀態。',
  internal: '系統發生內部錯誤，這次沒有完成。',
};

// The reason's code (common/runs_protocol.py RunReasonCode): `code` or `code: detail`.
export function reasonCode(reason) {
  return reason ? String(reason).split(': ')[0] : null;
}

// What to tell the person about how a run ended; null when it simply answered.
export function runEnded(run) {
  const code = reasonCode(run.reason);
  if (run.status === 'completed' && !code) return null;
  if (run.status === 'cancelled' || code === 'cancelled') {
    return String(run.reason ?? '').includes('not answered')
      ? '確認逾時沒有回答，這次已停止，沒有任何變更。'
      : '這次已取消。';
  }
  return REASONS[code] ?? `這次沒有完成（${run.reason ?? run.status}）。`;
}
