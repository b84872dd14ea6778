// The company's identity provider in the chat page's tests: oidc-provider (OpenID Certified),
// configured as a site would register the chat page with its own provider: a public client
// with PKCE, JWT access tokens for the MCP server's audience (resource indicators) carrying the
// claim the MCP server reads the employee from. Its login and consent pages are its own
// interactions (below), with a password check; nothing here is a stub of the protocol.
//
// Settings come as one JSON argument (tests/chat_page/provider.py writes it). Every event the
// tests look for is one JSON line on stdout.
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import Provider from 'oidc-provider';
import { exportJWK, generateKeyPair } from 'jose';

const settings = JSON.parse(process.argv[2]);
const accounts = new Map(settings.accounts.map((a) => [a.username, a]));
const bySub = new Map(settings.accounts.map((a) => [a.sub, a]));

function say(event, fields = {}) {
  process.stdout.write(`${JSON.stringify({ event, ...fields })}\n`);
}

// A new signing key each start: a restart is a key rotation, and every token and refresh
// token issued before it stops working, as at a real provider that lost its sessions.
const { privateKey } = await generateKeyPair('RS256', { extractable: true });
const jwk = { ...(await exportJWK(privateKey)), kid: randomUUID(), alg: 'RS256', use: 'sig' };

const provider = new Provider(settings.issuer, {
  clients: [{
    client_id: settings.client_id,
    client_name: 'leave-copilot chat page',
    token_endpoint_auth_method: 'none', // a public client: a page keeps no secret
    redirect_uris: settings.redirect_uris,
    post_logout_redirect_uris: settings.redirect_uris,
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
  }],
  jwks: { keys: [jwk] },
  cookies: { keys: [randomUUID()] },
  pkce: { required: () => true }, // S256 is the only method oidc-provider takes
  claims: { openid: ['sub'], profile: ['name'], employee: ['employee_id'] },
  scopes: ['openid', 'profile', 'offline_access', 'leave'],
  async findAccount(_ctx, sub) {
    const account = bySub.get(sub);
    if (!account) return undefined;
    return {
      accountId: sub,
      async claims() {
        return { sub, name: account.name, employee_id: account.employee_id };
      },
    };
  },
  // the claim the MCP server reads the employee from (MCP_OIDC_EMPLOYEE_CLAIM)
  async extraTokenClaims(_ctx, token) {
    const account = bySub.get(token.accountId);
    return account ? { [settings.employee_claim]: account.employee_id } : undefined;
  },
  // the page's client gets refresh tokens without `offline_access` and the consent prompt
  // OpenID Connect ties that scope to: the site's choice, as with most providers' SPA settings
  async issueRefreshToken(_ctx, client) {
    return client.grantTypeAllowed('refresh_token');
  },
  ttl: {
    AccessToken: settings.access_token_ttl,
    IdToken: 3600,
    RefreshToken: 3600,
    Session: 3600,
    Grant: 3600,
    Interaction: 600,
    AuthorizationCode: 60,
  },
  features: {
    devInteractions: { enabled: false }, // the login and consent pages below instead
    rpInitiatedLogout: {
      enabled: true,
      // the provider's own question, without the default page's web font from the internet
      async logoutSource(ctx, form) {
        ctx.body = page('登出公司帳號', `${form}<p>要登出公司帳號嗎？</p>
<button autofocus type="submit" form="op.logoutForm" value="yes" name="logout">登出</button>
<button type="submit" form="op.logoutForm">保持登入</button>`);
      },
    },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => settings.audience,
      useGrantedResource: () => true,
      async getResourceServerInfo(_ctx, resource) {
        if (resource !== settings.audience) throw new Provider.errors.InvalidTarget();
        return {
          scope: 'leave',
          audience: settings.audience,
          accessTokenFormat: 'jwt',
          accessTokenTTL: settings.access_token_ttl,
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
});
provider.on('grant.success', (ctx) => say('grant', { grant_type: ctx.oidc.params.grant_type }));
provider.on('grant.error', (ctx, error) => say('grant.error', {
  grant_type: ctx.oidc.params?.grant_type, error: error.error,
}));
provider.on('end_session.success', () => say('end_session'));
provider.on('grant.revoked', () => say('grant.revoked'));
provider.on('server_error', (_ctx, error) => say('server_error', { message: String(error) }));

function page(title, body) {
  return `<!DOCTYPE html><html lang="zh-Hant"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>${title}</title></head>
<body><main><h1>${title}</h1>${body}</main></body></html>`;
}

function escape(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

async function form(req) {
  let raw = '';
  for await (const chunk of req) raw += chunk;
  return Object.fromEntries(new URLSearchParams(raw));
}

function send(res, status, html) {
  res.writeHead(status, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
  res.end(html);
}

async function showInteraction(req, res, uid) {
  const details = await provider.interactionDetails(req, res);
  if (details.prompt.name === 'login') {
    send(res, 200, page('公司帳號登入', `
<form method="post" action="/interaction/${uid}/login" autocomplete="off">
<label>帳號 <input name="username" autofocus required></label>
<label>密碼 <input name="password" type="password" required></label>
<button type="submit">登入</button></form>`));
    return;
  }
  const client = await provider.Client.find(details.params.client_id);
  send(res, 200, page('授權確認', `
<p>「${escape(client.clientName)}」要求以你的身分使用：${escape(details.params.scope)}（${escape(details.params.resource ?? '')}）</p>
<form method="post" action="/interaction/${uid}/confirm"><button type="submit">允許</button></form>`));
}

async function login(req, res) {
  const { username, password } = await form(req);
  const account = accounts.get(username);
  if (!account || account.password !== password) {
    say('login.refused', { username });
    const { uid } = await provider.interactionDetails(req, res);
    send(res, 401, page('公司帳號登入', `<p role="alert">帳號或密碼錯誤</p>
<form method="post" action="/interaction/${uid}/login"><label>帳號 <input name="username" required></label>
<label>密碼 <input name="password" type="password" required></label><button type="submit">登入</button></form>`));
    return;
  }
  say('login', { username });
  await provider.interactionFinished(req, res, { login: { accountId: account.sub } },
    { mergeWithLastSubmission: false });
}

async function confirm(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { prompt: { details: missing }, params, session: { accountId } } = details;
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId, clientId: params.client_id });
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [resource, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
    grant.addResourceScope(resource, scopes.join(' '));
  }
  const grantId = await grant.save();
  say('consent', { scope: params.scope });
  await provider.interactionFinished(req, res, { consent: { grantId } },
    { mergeWithLastSubmission: true });
}

const handle = provider.callback();
const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, settings.issuer);
  const match = url.pathname.match(/^\/interaction\/([^/]+)(\/login|\/confirm)?$/);
  try {
    if (match && req.method === 'GET' && !match[2]) {
      await showInteraction(req, res, match[1]);
    } else if (match && req.method === 'POST' && match[2] === '/login') {
      await login(req, res);
    } else if (match && req.method === 'POST' && match[2] === '/confirm') {
      await confirm(req, res);
    } else {
      handle(req, res);
    }
  } catch (error) {
    say('error', { message: String(error) });
    send(res, 500, page('錯誤', `<p>${escape(error.message)}</p>`));
  }
});
server.listen(settings.port, '127.0.0.1', () => say('listening', { issuer: settings.issuer }));
