// The API, as the signed-in caller: /me routes for an end user, /admin/users/<id> for an operator
// looking up a user. Paths are relative to the page, so a stage prefix (/prod/console) just works.

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
  }

  get conflict() {
    return this.status === 412 || this.status === 409;
  }
}

export class Api {
  constructor(token, user) {
    this.token = token;
    this.user = user || null; // a user id: operator routes; null: the caller's own (/me)
  }

  get base() {
    return this.user ? `admin/users/${encodeURIComponent(this.user)}` : "me";
  }

  url(path, query) {
    const root = location.pathname.replace(/console\/?$/, "");
    const url = new URL(root + path, location.origin);
    for (const [k, v] of Object.entries(query || {})) {
      if (v !== null && v !== undefined && v !== "") url.searchParams.set(k, String(v));
    }
    return url;
  }

  async call(method, path, { query, body, contentType, ifMatch } = {}) {
    const headers = { Authorization: `Bearer ${this.token}`, Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = contentType || "application/json";
    if (ifMatch !== undefined && ifMatch !== null) headers["If-Match"] = `"${ifMatch}"`;
    const response = await fetch(this.url(path, query), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit",
      cache: "no-store",
    });
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!response.ok) throw new ApiError(response.status, data);
    const etag = response.headers.get("ETag");
    return { data, version: etag ? Number(etag.replaceAll('"', "").replace("W/", "")) : null };
  }

  get(path, query) {
    return this.call("GET", `${this.base}/${path}`, { query });
  }
}
