// The conversation rendered from the recorded stream carries the data-testid
// hooks the browser test uses, and shows no transient or secret data.
import { renderToStaticMarkup } from 'react-dom/server';
import { describe, expect, it } from 'vitest';
import { Conversation } from '../src/Conversation';
import { consumeSessionStream } from '../src/stream';

import recorded from './fixtures/session.sse?raw';

async function message() {
  const res = await consumeSessionStream(new Response(recorded).body!, { onMessage: () => {} });
  return res.message!;
}

describe('Conversation', () => {
  it('renders text, reasoning, tool calls, errors and inputs with their test ids', async () => {
    const html = renderToStaticMarkup(<Conversation message={await message()} />);
    expect(html).toContain('data-testid="conversation"');
    expect(html.match(/data-testid="text-part"/g)).toHaveLength(2);
    expect(html).toContain('Done: Div now returns an error for a zero divisor.');
    expect(html).toMatch(/<details class="reasoning" data-testid="reasoning"><summary>Reasoning<\/summary>/);
    expect(html).toContain('data-testid="tool-shell"');
    expect(html).toContain('data-testid="tool-read_file"');
    expect(html).toContain('data-testid="tool-spawn_agent"');
    expect(html.match(/data-testid="tool-output"/g)).toHaveLength(2);
    expect(html).toContain('data-testid="tool-error"');
    expect(html).toContain('data-testid="stream-error"');
    expect(html).toContain('[rate_limit] model overloaded, retrying');
    expect(html).toContain('data-testid="user-message"');
    expect(html).toContain('Fix the failing test in pkg/calc.');
    expect(html).toContain('data-testid="steering-message"');
    expect(html).toContain('data-testid="data-future-thing"');
    // A failed tool call is open; a finished one is collapsed.
    expect(html).toMatch(/<details class="tool error" data-testid="tool-read_file" data-state="output-error" open="">/);
    expect(html).toMatch(/<details class="tool" data-testid="tool-shell" data-state="output-available">/);
  });

  it('shows the live output of a running tool', () => {
    const html = renderToStaticMarkup(
      <Conversation
        message={{
          id: 'm',
          role: 'assistant',
          parts: [{ type: 'dynamic-tool', toolName: 'shell', toolCallId: 'c1', state: 'input-available', input: { command: 'make' } }],
        }}
        liveOutput={{ c1: 'building…' }}
      />,
    );
    expect(html).toContain('data-testid="tool-live-output"');
    expect(html).toContain('building…');
    expect(html).not.toContain('data-testid="tool-output"');
  });
});
