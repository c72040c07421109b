// Signing in. Locally: a development token in the URL's fragment (`user-memory console USER`),
// moved to sessionStorage at once and removed from the address bar. Deployed: OpenID Connect
// authorization code with PKCE at the configured issuer, and only that: a link carrying a token
// would sign the victim in as whoever made it (their edits going to the attacker's memory), so a
// fragment token is taken only where no issuer is configured, and never over a session this tab
// holds. Tokens stay in this tab's sessionStorage, never in a cookie.

const TOKEN = "user-memory.token";
const PENDING = "user-memory.oidc";

function b64url(bytes) {
  let text = "";
  for (const b of new Uint8Array(bytes)) text += String.fromCharCode(b);
  return btoa(text).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

function random(n = 32) {
  return b64url(crypto.getRandomValues(new Uint8Array(n)));
}

export function claimsOf(token) {
  try {
    const part = token.split(".")[1].replaceAll("-", "+").replaceAll("_", "/");
    return JSON.parse(atob(part + "=".repeat((4 - (part.length % 4)) % 4)));
  } catch {
    return null;
  }
}

function words(value) {
  if (Array.isArray(value)) return value.map(String);
  return typeof value === "string" ? value.split(/\s+/) : [];
}

export function isOperator(claims, scope) {
  const granted = [...words(claims.scope), ...words(claims.scp), ...words(claims["cognito:groups"]), ...words(claims.groups)];
  return granted.includes(scope);
}

function redirectUri() {
  return location.origin + location.pathname;
}

async function discover(issuer) {
  const response = await fetch(issuer.replace(/\/$/, "") + "/.well-known/openid-configuration", { credentials: "omit" });
  if (!response.ok) throw new Error(`the issuer's discovery document answered ${response.status}`);
  return response.json();
}

function held() {
  const token = sessionStorage.getItem(TOKEN);
  const claims = token && claimsOf(token);
  if (!claims || (claims.exp && claims.exp * 1000 < Date.now())) return null;
  return token;
}

// A token in the address: always out of it (and its history entry); taken only in development
// (no issuer) and when this tab holds no session. Answers why it was not taken, or null.
function fromFragment(config) {
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (!fragment.has("token")) return null;
  history.replaceState(null, "", location.pathname + location.search + "#/memory");
  if (config.issuer) return "A link carrying a token was ignored: this console signs in only at its issuer.";
  if (held()) return "A link carrying a token was ignored: this tab is signed in already (sign out first).";
  if (fragment.get("token")) sessionStorage.setItem(TOKEN, fragment.get("token"));
  return null;
}

// The token this tab holds, after taking one from the fragment or finishing a sign-in (null if
// none), and why a token in the address was ignored (null if none was, or it was taken).
export async function currentToken(config) {
  const ignored = fromFragment(config);
  const query = new URLSearchParams(location.search);
  if (query.get("code") && query.get("state")) {
    await finishSignIn(config, query.get("code"), query.get("state"));
  } else if (query.get("error")) {
    history.replaceState(null, "", location.pathname + "#/memory");
    throw new Error(`the sign-in was refused (${query.get("error")})`);
  }
  const token = held();
  if (!token) sessionStorage.removeItem(TOKEN);
  return { token, ignored };
}

export async function startSignIn(config) {
  const discovery = await discover(config.issuer);
  const verifier = random(48);
  const state = random(16);
  const challenge = b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  sessionStorage.setItem(PENDING, JSON.stringify({ verifier, state, token_endpoint: discovery.token_endpoint }));
  const url = new URL(discovery.authorization_endpoint);
  url.search = new URLSearchParams({
    response_type: "code",
    client_id: config.client_id,
    redirect_uri: redirectUri(),
    scope: config.scopes || "openid",
    state,
    code_challenge: challenge,
    code_challenge_method: "S256",
  }).toString();
  location.assign(url.toString());
}

async function finishSignIn(config, code, state) {
  const pending = JSON.parse(sessionStorage.getItem(PENDING) || "null");
  sessionStorage.removeItem(PENDING);
  history.replaceState(null, "", location.pathname + "#/memory");
  if (!pending || pending.state !== state) throw new Error("the sign-in's state does not match (start again)");
  const response = await fetch(pending.token_endpoint, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      code,
      redirect_uri: redirectUri(),
      client_id: config.client_id,
      code_verifier: pending.verifier,
    }).toString(),
    credentials: "omit",
  });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok || !answer.access_token) {
    throw new Error(`the issuer refused the code (${answer.error || response.status})`);
  }
  sessionStorage.setItem(TOKEN, answer.access_token);
}

export function signOut() {
  sessionStorage.removeItem(TOKEN);
  sessionStorage.removeItem(PENDING);
}
