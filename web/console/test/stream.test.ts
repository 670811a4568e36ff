// The recorded session stream (test/fixtures/session.sse, the shape
// internal/uistream serves) fed through the console's stream consumption:
// the AI SDK's event-stream parser and readUIMessageStream.
import { describe, expect, it } from 'vitest';
import type { UIMessage } from 'ai';
import { consumeSessionStream, openSessionStream, type StreamCallbacks } from '../src/stream';
import { streamFacts } from '../src/model';

import recorded from './fixtures/session.sse?raw';

/** body serves text as a byte stream cut into pieces of size bytes (0: one piece). */
function body(text: string, size = 0): ReadableStream<Uint8Array> {
  const bytes = new TextEncoder().encode(text);
  const step = size > 0 ? size : bytes.length;
  let off = 0;
  return new ReadableStream({
    pull(controller) {
      if (off >= bytes.length) {
        controller.close();
        return;
      }
      controller.enqueue(bytes.slice(off, off + step));
      off += step;
    },
  });
}

function sse(...chunks: object[]): string {
  return chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('');
}

interface Recorded {
  messages: UIMessage[];
  transient: { type: string; data: unknown }[];
  problems: string[];
  cb: StreamCallbacks;
}

function recorder(): Recorded {
  const r: Recorded = { messages: [], transient: [], problems: [], cb: undefined as never };
  r.cb = {
    onMessage: (m) => r.messages.push(m),
    onTransient: (c) => r.transient.push(c),
    onProblem: (p) => r.problems.push(p),
  };
  return r;
}

type AnyPart = Record<string, unknown> & { type: string };

function parts(m: UIMessage | undefined): AnyPart[] {
  return (m?.parts ?? []) as unknown as AnyPart[];
}

describe('consumeSessionStream on the recorded session', () => {
  for (const size of [0, 7, 1]) {
    it(`rebuilds the message from ${size === 0 ? 'one read' : `${size}-byte reads`}`, async () => {
      const r = recorder();
      const res = await consumeSessionStream(body(recorded, size), r.cb);
      expect(r.problems).toEqual([]);
      expect(res.finished).toBe(true);
      const m = res.message!;
      expect(m.id).toBe('3f0c2a9e-uid');
      expect(m.role).toBe('assistant');
      // Every state reported is a snapshot of the same message, growing.
      expect(r.messages.length).toBeGreaterThan(10);
      expect(r.messages.at(-1)).toEqual(m);

      const p = parts(m);
      // Text assembled from its deltas, in order, with multi-byte characters intact.
      const texts = p.filter((x) => x.type === 'text');
      expect(texts.map((t) => t.text)).toEqual([
        'Let me look at the test — héllo ✓.',
        'Done: Div now returns an error for a zero divisor.',
      ]);
      expect(texts.every((t) => t.state === 'done')).toBe(true);

      const reasoning = p.filter((x) => x.type === 'reasoning');
      expect(reasoning.map((x) => x.text)).toEqual(['The test probably divides by zero.']);

      // Tool calls: input and output in one part per call.
      const tools = p.filter((x) => x.type === 'dynamic-tool');
      expect(tools.map((t) => [t.toolName, t.state])).toEqual([
        ['shell', 'output-available'],
        ['read_file', 'output-error'],
        ['spawn_agent', 'output-available'],
      ]);
      expect(tools[0].input).toEqual({ command: 'go test ./pkg/calc/' });
      expect(tools[0].output).toBe('--- FAIL: TestDiv\nFAIL\nexit status 1');
      expect(tools[1].errorText).toBe('file not found: pkg/calc/missing.go');

      // An error chunk becomes a data-error part at its place and the stream goes on.
      const types = p.map((x) => x.type);
      const errAt = types.indexOf('data-error');
      expect(errAt).toBeGreaterThan(p.findIndex((x) => x.toolName === 'read_file'));
      expect(p[errAt].data).toEqual({ errorText: '[rate_limit] model overloaded, retrying' });
      expect(types.indexOf('data-steering')).toBeGreaterThan(errAt);
      expect(texts.length).toBe(2);

      // Data parts with one id are replaced, not repeated.
      expect(types.filter((t) => t === 'data-plan')).toHaveLength(1);
      expect(types.filter((t) => t === 'data-usage')).toHaveLength(1);
      expect(types.filter((t) => t === 'data-subagent')).toHaveLength(1);
      expect(types.filter((t) => t === 'data-state')).toHaveLength(1);
      // Unknown data parts are kept as they came.
      expect(p.find((x) => x.type === 'data-future-thing')?.data).toEqual({ hello: 'world' });
      // Transient chunks reach the callback only.
      expect(types).not.toContain('data-tool-output');
      expect(r.transient.map((t) => (t.data as { delta: string }).delta).join('')).toBe('--- FAIL: TestDiv\nFAIL\n');
    });
  }

  it('yields the facts the side panels show', async () => {
    const res = await consumeSessionStream(body(recorded), recorder().cb);
    const facts = streamFacts(res.message);
    expect(facts.state).toBe('CLOSED');
    expect(facts.plan).toEqual([
      { content: 'Reproduce', status: 'completed' },
      { content: 'Fix Div', status: 'completed' },
    ]);
    expect(facts.usage?.totalTokens).toBe(3200);
    expect(facts.subagents).toEqual([{ name: 'fix-calc-sub-1', state: 'succeeded', turnsUsed: 3 }]);
    expect(facts.changes?.message).toBe('fix Div by zero');
    expect(facts.changesSeq).toBe(1);
  });

  it('reports a stream cut before finish as not finished', async () => {
    const cut = recorded.slice(0, recorded.indexOf('data: {"type":"data-steering"'));
    const r = recorder();
    const res = await consumeSessionStream(body(cut, 13), r.cb);
    expect(res.finished).toBe(false);
    expect(parts(res.message).filter((x) => x.type === 'dynamic-tool')).toHaveLength(2);
  });

  it('skips a chunk the SDK schema rejects and reads on', async () => {
    const r = recorder();
    const res = await consumeSessionStream(
      body(
        sse(
          { type: 'start' },
          { type: 'text-start', id: 't' },
          { type: 'no-such-chunk', id: 't' },
          { type: 'text-delta', id: 't', delta: 'still here' },
          { type: 'text-end', id: 't' },
          { type: 'finish' },
        ),
      ),
      r.cb,
    );
    expect(r.problems).toHaveLength(1);
    expect(r.problems[0]).toMatch(/invalid chunk skipped/);
    expect(res.finished).toBe(true);
    expect(parts(res.message).find((x) => x.type === 'text')?.text).toBe('still here');
  });

  it('reports a chunk order the SDK reader refuses', async () => {
    const r = recorder();
    await consumeSessionStream(
      body(sse({ type: 'start' }, { type: 'text-delta', id: 'nope', delta: 'x' }, { type: 'finish' })),
      r.cb,
    );
    expect(r.problems.join('\n')).toMatch(/nope/);
  });
});

describe('openSessionStream', () => {
  it('GETs the stream with the cookie and reads the body', async () => {
    const seen: { url: string; init?: RequestInit }[] = [];
    const fake: typeof fetch = async (url, init) => {
      seen.push({ url: String(url), init });
      return new Response(recorded, {
        headers: { 'content-type': 'text/event-stream', 'x-vercel-ai-ui-message-stream': 'v1' },
      });
    };
    const r = recorder();
    const res = await openSessionStream('api/sessions/ns/s1/stream', r.cb, undefined, fake);
    expect(seen).toHaveLength(1);
    expect(seen[0].url).toBe('api/sessions/ns/s1/stream');
    expect(seen[0].init?.method).toBe('GET');
    expect(seen[0].init?.credentials).toBe('same-origin');
    expect(res.finished).toBe(true);
    expect(parts(res.message).filter((x) => x.type === 'text')).toHaveLength(2);
  });

  it('fails with the status and the server text', async () => {
    const fake: typeof fetch = async () => new Response('forbidden: no token', { status: 403, statusText: 'Forbidden' });
    await expect(openSessionStream('x', recorder().cb, undefined, fake)).rejects.toThrow(/403 Forbidden: forbidden: no token/);
  });
});
