import { describe, expect, it } from 'vitest';
import { age, redact, safeSpec } from '../src/model';
import { parseRoute, sessionHref } from '../src/router';
import { csrfToken, sessionURL, sessionsURL } from '../src/api';

describe('redact', () => {
  it('never returns secret values, keeps Secret names and safe fields', () => {
    const session = {
      spec: {
        prompt: 'do it',
        model: { provider: 'anthropic', name: 'claude', apiKeySecretRef: { name: 'llm-key', key: 'api-key' } },
        workspace: {
          env: [{ name: 'GITHUB_TOKEN', value: 'ghp_SECRET1' }, { name: 'FROM', valueFrom: { secretKeyRef: { name: 's', key: 'k' } } }],
          git: { repository: 'https://example.invalid/r.git', credentialsSecretRef: { name: 'git-creds' } },
        },
        tools: {
          mcpServers: [
            { name: 'm', url: 'https://mcp.invalid', headersSecretRef: { name: 'mcp-headers' }, headers: { Authorization: 'Bearer SECRET2' }, env: [{ name: 'K', value: 'SECRET3' }] },
          ],
        },
        limits: { tokenBudget: 1000 },
        credentials: { password: 'SECRET4' },
        token: 'SECRET5',
      },
    };
    const out = safeSpec(session);
    const text = JSON.stringify(out);
    for (const s of ['SECRET1', 'SECRET2', 'SECRET3', 'SECRET4', 'SECRET5', 'api-key']) expect(text).not.toContain(s);
    const o = out as any;
    expect(o.prompt).toBe('do it');
    expect(o.model.apiKeySecretRef).toEqual({ name: 'llm-key' });
    expect(o.workspace.git.credentialsSecretRef).toEqual({ name: 'git-creds' });
    expect(o.workspace.env.map((e: { name: string }) => e.name)).toEqual(['GITHUB_TOKEN', 'FROM']);
    expect(o.tools.mcpServers[0].headersSecretRef).toEqual({ name: 'mcp-headers' });
    expect(o.tools.mcpServers[0].headers).toBe('[redacted]');
    expect(o.limits.tokenBudget).toBe(1000);
  });

  it('leaves values that are not under sensitive keys alone', () => {
    expect(redact({ a: [1, { b: 'x' }], c: null })).toEqual({ a: [1, { b: 'x' }], c: null });
  });
});

describe('age', () => {
  const now = Date.parse('2026-11-27T12:00:00Z');
  it.each([
    ['2026-11-27T11:59:30Z', '30s'],
    ['2026-11-27T11:55:00Z', '5m'],
    ['2026-11-27T09:00:00Z', '3h'],
    ['2026-11-20T12:00:00Z', '7d'],
    ['not a time', undefined],
    [undefined, undefined],
  ])('%s → %s', (t, want) => {
    expect(age(t, now)).toBe(want);
  });
});

describe('routes and URLs', () => {
  it.each([
    ['', { page: 'list' }],
    ['#/', { page: 'list' }],
    ['#/?namespace=team-a', { page: 'list', namespace: 'team-a' }],
    ['#/sessions/team-a/fix-1', { page: 'session', namespace: 'team-a', name: 'fix-1' }],
    ['#/nowhere', { page: 'missing', hash: '#/nowhere' }],
  ])('%s', (hash, want) => {
    expect(parseRoute(hash)).toEqual(want.page === "list" ? { namespace: undefined, ...want } : want);
  });

  it('round-trips a session link and builds relative API URLs', () => {
    expect(parseRoute(sessionHref('ns a', 'x/y'))).toEqual({ page: 'session', namespace: 'ns a', name: 'x/y' });
    expect(sessionURL('ns', 'n', 'steer')).toBe('api/sessions/ns/n/steer');
    expect(sessionsURL()).toBe('api/sessions');
    expect(sessionsURL('a b')).toBe('api/sessions?namespace=a%20b');
  });

  it('reads the CSRF token from the meta tag, none without it', () => {
    const doc = (content: string | null) =>
      ({ querySelector: () => (content === null ? null : { getAttribute: () => content }) }) as unknown as Document;
    expect(csrfToken(doc('abc'))).toBe('abc');
    expect(csrfToken(doc(null))).toBeUndefined();
    expect(csrfToken(doc(''))).toBeUndefined();
  });
});
