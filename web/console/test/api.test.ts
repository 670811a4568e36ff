import { afterEach, describe, expect, it, vi } from 'vitest';
import { act, cookieValue, csrfToken } from '../src/api';

// A document with an optional csrf-token meta tag, cookies and a port.
const doc = (meta: string | null, cookie = '', port = '8123') =>
  ({
    querySelector: () => (meta === null ? null : { getAttribute: () => meta }),
    cookie,
    location: { port },
  }) as unknown as Document;

describe('CSRF value', () => {
  it('comes from the meta tag first, then the cookie of the page port', () => {
    expect(csrfToken(doc('from-meta', 'agent_console_csrf_8123=from-cookie'))).toBe('from-meta');
    expect(csrfToken(doc(null, 'agent_console_8123=tok; agent_console_csrf_8123=from-cookie'))).toBe('from-cookie');
    expect(csrfToken(doc('', 'agent_console_csrf_8123=from-cookie'))).toBe('from-cookie');
    expect(csrfToken(doc(null, 'agent_console_csrf_9999=other-port'))).toBeUndefined();
    expect(csrfToken(doc(null, ''))).toBeUndefined();
  });

  it('reads one cookie by its exact name', () => {
    expect(cookieValue('a=1; ab=2;  b = x%3Dy ', 'b')).toBe('x=y');
    expect(cookieValue('ab=2', 'a')).toBeUndefined();
    expect(cookieValue(undefined, 'a')).toBeUndefined();
  });
});

describe('act', () => {
  afterEach(() => vi.unstubAllGlobals());

  it.each([
    ['steer', 'look at main.go', '{"text":"look at main.go"}', 'application/json'],
    ['followup', 'then the docs', '{"text":"then the docs"}', 'application/json'],
    ['abort', undefined, undefined, undefined],
  ] as const)('%s sends the CSRF header the server checks and its body', async (action, message, body, ctype) => {
    vi.stubGlobal('document', doc('csrf-1'));
    const fetchMock = vi.fn(async () => new Response('{"status":"ok"}', { status: 200 }));
    vi.stubGlobal('fetch', fetchMock);
    await expect(act('ns', 'n', action, message)).resolves.toBe('{"status":"ok"}');
    expect(fetchMock).toHaveBeenCalledTimes(1);
    const [url, init] = fetchMock.mock.calls[0] as unknown as [string, RequestInit];
    expect(url).toBe(`api/sessions/ns/n/${action}`);
    expect(init.method).toBe('POST');
    const headers = init.headers as Record<string, string>;
    // The wire name ui.go's guard checks (csrfHeader).
    expect(headers['X-Agent-Console-CSRF']).toBe('csrf-1');
    expect(headers['Content-Type']).toBe(ctype);
    expect(init.body).toBe(body);
  });
});
