// Signing a person in: OpenID Connect authorization code with PKCE (S256) against the
// company's identity provider, or (development) one of the demo employees.
//
// The access token, refresh token and ID token live in this module's memory only: never in
// storage, a cookie or the address bar, so that nothing but this page's own code can read
// them and they are gone with the tab. What has to survive the trip to the provider and back
// (the PKCE verifier, state, nonce) is single-use and kept in sessionStorage until the answer
// arrives; a reload signs in again through the provider, with no prompt while its session lasts.

const PENDING = 'leave-chat.sign-in-request';
const SIGNED_IN = 'leave-chat.signed-in'; // "oidc" or a demo employee id: sign in again on reload
const SIGNED_OUT = 'leave-chat.signed-out';
// A run keeps acting with the token it started with, through a confirmation that may wait
// LOOP_CONFIRMATION_TIMEOUT_SECONDS: a token is refreshed while it still has that long and
// this much more to live (or at half its life, when it lives less).
const REFRESH_SPARE_MS = 30_000;

export class SignInNeeded extends Error {}

export class SignInFailed extends Error {}

function base64url(bytes) {
  let text = '';
  for (const byte of bytes) text += String.fromCharCode(byte);
  return btoa(text).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function randomString(size) {
  const bytes = new Uint8Array(size);
  crypto.getRandomValues(bytes);
  return base64url(bytes);
}

async function s256(verifier) {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier));
  return base64url(new Uint8Array(digest));
}

// The ID token's claims, for the nonce and the person's name. Its signature is not checked
// here: it came straight from the token endpoint over TLS, which OpenID Connect allows for
// the code flow; nothing is granted on its strength (the MCP server checks the access token).
function claimsOf(jwt) {
  const part = jwt.split('.')[1] ?? '';
  const text = atob(part.replace(/-/g, '+').replace(/_/g, '/'));
  const bytes = Uint8Array.from(text, (c) => c.charCodeAt(0));
  return JSON.parse(new TextDecoder().decode(bytes));
}

export class SignIn {
  #access = null;
  #refreshToken = null;
  #idToken = null;
  #refreshAt = Infinity;
  #refreshing = null;
  #discovery = null;

  constructor(config) {
    this.config = config;
    this.user = null; // { name } once signed in
  }

  get mode() {
    return this.config.sign_in;
  }

  get signedIn() {
    return this.#access !== null;
  }

  // The page's own address, without the provider's answer: the redirect URI to register.
  redirectUri() {
    return `${location.origin}${location.pathname}`;
  }

  // At load: finish a sign-in the provider sent back, or sign in again as before the reload.
  // True when signed in; false when the person has to choose; never returns while the page
  // goes to the provider.
  async resume() {
    const params = new URLSearchParams(location.search);
    const remembered = sessionStorage.getItem(SIGNED_IN);
    if (this.mode === 'oidc' && (params.has('code') || params.has('error'))) {
      return this.#finish(params);
    }
    if (this.mode === 'oidc' && remembered === 'oidc') {
      await this.begin();
      return false;
    }
    if (this.mode === 'demo' && remembered) {
      const employee = this.config.demo_employees.find((e) => e.employee_id === remembered);
      if (employee) {
        this.useDemo(employee);
        return true;
      }
    }
    return false;
  }

  justSignedOut() {
    const out = sessionStorage.getItem(SIGNED_OUT) !== null;
    sessionStorage.removeItem(SIGNED_OUT);
    return out;
  }

  useDemo(employee) {
    this.#access = employee.token;
    this.#refreshAt = Infinity;
    this.user = { name: `${employee.name}（${employee.employee_id}）` };
    sessionStorage.setItem(SIGNED_IN, employee.employee_id);
  }

  // To the provider's sign-in page; the page is left (the promise never settles).
  async begin() {
    const discovery = await this.#discover();
    const verifier = randomString(48);
    const request = { verifier, state: randomString(16), nonce: randomString(16) };
    sessionStorage.setItem(PENDING, JSON.stringify(request));
    const url = new URL(discovery.authorization_endpoint);
    const params = {
      response_type: 'code',
      client_id: this.config.client_id,
      redirect_uri: this.redirectUri(),
      scope: this.config.scopes,
      state: request.state,
      nonce: request.nonce,
      code_challenge: await s256(verifier),
      code_challenge_method: 'S256',
    };
    if (this.config.resource) params.resource = this.config.resource;
    url.search = new URLSearchParams(params).toString();
    location.assign(url.toString());
    return new Promise(() => {});
  }

  async #finish(params) {
    const request = JSON.parse(sessionStorage.getItem(PENDING) ?? 'null');
    sessionStorage.removeItem(PENDING);
    // the code is single-use, but it leaves the address bar and the history at once
    history.replaceState(null, '', location.pathname);
    if (params.has('error')) {
      sessionStorage.removeItem(SIGNED_IN);
      const why = params.get('error_description') || params.get('error');
      throw new SignInFailed(`公司帳號登入沒有完成：${why}`);
    }
    if (!request || params.get('state') !== request.state) {
      sessionStorage.removeItem(SIGNED_IN);
      throw new SignInFailed('這個登入回應不是本頁發出的請求（state 不符），請重新登入。');
    }
    const discovery = await this.#discover();
    if (params.has('iss') && params.get('iss') !== discovery.issuer) {
      throw new SignInFailed('登入回應來自另一個身分提供者（iss 不符），請重新登入。');
    }
    const body = {
      grant_type: 'authorization_code',
      code: params.get('code'),
      redirect_uri: this.redirectUri(),
      client_id: this.config.client_id,
      code_verifier: request.verifier,
    };
    if (this.config.resource) body.resource = this.config.resource;
    this.#take(await this.#tokenRequest(body), request.nonce);
    sessionStorage.setItem(SIGNED_IN, 'oidc');
    return true;
  }

  // A token for the next request: refreshed first when it is about to expire.
  async token() {
    if (this.#access === null) throw new SignInNeeded();
    if (Date.now() >= this.#refreshAt && !(await this.refresh())) throw new SignInNeeded();
    return this.#access;
  }

  // A new access token with the refresh token (one refresh at a time); false, and signed
  // out here, when there is none or the provider refuses it.
  async refresh() {
    if (this.mode !== 'oidc' || this.#refreshToken === null) {
      this.#forget();
      return false;
    }
    if (this.#refreshing === null) {
      this.#refreshing = this.#refreshOnce().finally(() => {
        this.#refreshing = null;
      });
    }
    return this.#refreshing;
  }

  async #refreshOnce() {
    const body = {
      grant_type: 'refresh_token',
      refresh_token: this.#refreshToken,
      client_id: this.config.client_id,
    };
    if (this.config.resource) body.resource = this.config.resource;
    try {
      this.#take(await this.#tokenRequest(body), null);
      return true;
    } catch {
      this.#forget();
      return false;
    }
  }

  // Sign out here (memory and this tab's storage), revoke the refresh token, and at the
  // provider too when it has an end-session endpoint (the page is then left for it).
  async signOut() {
    const idToken = this.#idToken;
    const refreshToken = this.#refreshToken;
    this.#forget();
    sessionStorage.removeItem(SIGNED_IN);
    sessionStorage.setItem(SIGNED_OUT, '1');
    if (this.mode !== 'oidc') return;
    const discovery = await this.#discover().catch(() => null);
    if (discovery?.revocation_endpoint && refreshToken) {
      const body = new URLSearchParams({
        token: refreshToken,
        token_type_hint: 'refresh_token',
        client_id: this.config.client_id,
      });
      await fetch(discovery.revocation_endpoint, { method: 'POST', body }).catch(() => {});
    }
    if (discovery?.end_session_endpoint) {
      const url = new URL(discovery.end_session_endpoint);
      const params = {
        client_id: this.config.client_id,
        post_logout_redirect_uri: this.redirectUri(),
      };
      if (idToken) params.id_token_hint = idToken;
      url.search = new URLSearchParams(params).toString();
      location.assign(url.toString());
      await new Promise(() => {});
    }
  }

  #forget() {
    this.#access = null;
    this.#refreshToken = null;
    this.#idToken = null;
    this.#refreshAt = Infinity;
    this.user = null;
  }

  #take(tokens, nonce) {
    if (typeof tokens.access_token !== 'string') {
      throw new SignInFailed('身分提供者沒有發給存取權杖。');
    }
    if (tokens.id_token) {
      const claims = claimsOf(tokens.id_token);
      if (nonce !== null && claims.nonce !== nonce) {
        throw new SignInFailed('登入回應的 nonce 不符，請重新登入。');
      }
      this.#idToken = tokens.id_token;
      this.user = { name: claims.name || claims.preferred_username || claims.email || claims.sub };
    }
    this.#access = tokens.access_token;
    if (tokens.refresh_token) this.#refreshToken = tokens.refresh_token;
    const lifetime = (Number(tokens.expires_in) || 300) * 1000;
    const needed = this.config.confirmation_timeout_seconds * 1000 + REFRESH_SPARE_MS;
    this.#refreshAt = Date.now() + lifetime - Math.min(needed, lifetime / 2);
    if (this.user === null) this.user = { name: '已登入' };
  }

  async #tokenRequest(fields) {
    const discovery = await this.#discover();
    const response = await fetch(discovery.token_endpoint, {
      method: 'POST',
      headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams(fields),
    });
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) {
      const why = answer.error_description || answer.error || `HTTP ${response.status}`;
      throw new SignInFailed(`身分提供者拒絕發給權杖：${why}`);
    }
    return answer;
  }

  async #discover() {
    if (this.#discovery === null) {
      const issuer = this.config.issuer.replace(/\/$/, '');
      let response;
      try {
        response = await fetch(`${issuer}/.well-known/openid-configuration`);
      } catch {
        throw new SignInFailed('無法連線到公司的身分提供者，請稍後再試。');
      }
      if (!response.ok) {
        throw new SignInFailed(`身分提供者的設定讀不到（HTTP ${response.status}）。`);
      }
      const discovery = await response.json();
      // OpenID Connect Discovery: the document must name exactly the issuer asked
      if (discovery.issuer !== this.config.issuer) {
        throw new SignInFailed('身分提供者的 issuer 與設定不符（LOOP_CHAT_OIDC_ISSUER）。');
      }
      this.#discovery = discovery;
    }
    return this.#discovery;
  }
}
