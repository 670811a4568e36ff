// HTTP calls to the console server (kubectl agent ui). Every URL is relative
// to the page, so the console works under any path prefix; the per-run token
// travels in the HttpOnly cookie the server set on the first page load, and
// mutating requests carry the CSRF value the server injected into the page
// (double submit: the same value is in a cookie the page may read).

/** The header of the CSRF value; the same string as csrfHeader in cmd/kubectl-agent/ui.go. */
export const CSRF_HEADER = 'X-Agent-Console-CSRF';

/** The cookie holding the CSRF value, suffixed with the console's port (cmd/kubectl-agent/ui.go, csrfCookie). */
export const CSRF_COOKIE_PREFIX = 'agent_console_csrf_';

/** One row of GET api/sessions (sessionItem in cmd/kubectl-agent/ui.go). Every field may be missing. */
export interface SessionSummary {
  namespace?: string;
  name?: string;
  phase?: string;
  model?: string;
  parent?: string;
  turns?: number;
  toolCalls?: number;
  tokens?: number;
  treeTokens?: number;
  cost?: string | number;
  treeCost?: string;
  currency?: string;
  /** RFC 3339 creation time. */
  created?: string;
  ageSeconds?: number;
}

/** A Kubernetes object as loosely typed JSON. */
export type KubeObject = Record<string, unknown>;

/** The POST actions of a session. */
export type Action = 'steer' | 'followup' | 'abort' | 'suspend' | 'resume';

/** HTTPError is a non-2xx answer, with the server's text. */
export class HTTPError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'HTTPError';
  }
}

const seg = encodeURIComponent;

export function sessionsURL(namespace?: string): string {
  return namespace ? `api/sessions?namespace=${seg(namespace)}` : 'api/sessions';
}

export function sessionURL(ns: string, name: string, sub?: string): string {
  const base = `api/sessions/${seg(ns)}/${seg(name)}`;
  return sub ? `${base}/${sub}` : base;
}

/**
 * csrfToken reads the value the server injects as <meta name="csrf-token">,
 * or else the agent_console_csrf_<port> cookie the server set with the token.
 */
export function csrfToken(doc: Document | undefined = globalThis.document): string | undefined {
  const v = doc?.querySelector('meta[name="csrf-token"]')?.getAttribute('content');
  if (v) return v;
  return cookieValue(doc?.cookie, CSRF_COOKIE_PREFIX + (doc?.location?.port ?? ''));
}

/** cookieValue returns the value of cookie name in a document.cookie string. */
export function cookieValue(cookies: string | undefined, name: string): string | undefined {
  for (const part of (cookies ?? '').split(';')) {
    const i = part.indexOf('=');
    if (i < 0 || part.slice(0, i).trim() !== name) continue;
    const v = part.slice(i + 1).trim();
    try {
      return decodeURIComponent(v) || undefined;
    } catch {
      return v || undefined;
    }
  }
  return undefined;
}

async function failure(res: Response): Promise<HTTPError> {
  let text = '';
  try {
    text = (await res.text()).trim();
  } catch {
    // the body is optional
  }
  return new HTTPError(res.status, `${res.status} ${res.statusText}${text ? `: ${text.slice(0, 500)}` : ''}`);
}

async function getJSON<T>(url: string, signal?: AbortSignal): Promise<T> {
  const res = await fetch(url, { credentials: 'same-origin', headers: { Accept: 'application/json' }, signal });
  if (!res.ok) throw await failure(res);
  return (await res.json()) as T;
}

export async function listSessions(namespace?: string, signal?: AbortSignal): Promise<SessionSummary[]> {
  const body = await getJSON<{ items?: unknown }>(sessionsURL(namespace), signal);
  return Array.isArray(body?.items) ? (body.items.filter((x) => x && typeof x === 'object') as SessionSummary[]) : [];
}

export function getSession(ns: string, name: string, signal?: AbortSignal): Promise<KubeObject> {
  return getJSON<KubeObject>(sessionURL(ns, name), signal);
}

/** getDiff returns the session's unified diff, or null when it has none (404). */
export async function getDiff(ns: string, name: string, signal?: AbortSignal): Promise<string | null> {
  const res = await fetch(sessionURL(ns, name, 'diff'), {
    credentials: 'same-origin',
    headers: { Accept: 'text/plain' },
    signal,
  });
  if (res.status === 404) return null;
  if (!res.ok) throw await failure(res);
  return res.text();
}

/** act POSTs one control action; steer and followup carry the message. */
export async function act(ns: string, name: string, action: Action, message?: string): Promise<string> {
  const headers: Record<string, string> = {};
  const csrf = csrfToken();
  if (csrf) headers[CSRF_HEADER] = csrf;
  let body: string | undefined;
  if (action === 'steer' || action === 'followup') {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify({ text: message ?? '' });
  }
  const res = await fetch(sessionURL(ns, name, action), {
    method: 'POST',
    credentials: 'same-origin',
    headers,
    body,
  });
  if (!res.ok) throw await failure(res);
  const text = (await res.text()).trim();
  return text || `${res.status} ${res.statusText || 'OK'}`;
}
