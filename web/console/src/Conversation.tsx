// The conversation of one session as the SDK's reader rebuilt it: user
// inputs and steering (data parts), assistant text, reasoning (collapsed),
// tool calls with their input and output, errors, and the operator notices.
import { getToolName, isToolOrDynamicToolUIPart, type UIMessage } from 'ai';
import { useState } from 'react';
import { clip, obj, pretty, str } from './model';

type Part = UIMessage['parts'][number];

export interface ConversationProps {
  message?: UIMessage;
  /** Output streamed so far by tools still running, by tool call id. */
  liveOutput?: Record<string, string>;
}

export function Conversation({ message, liveOutput = {} }: ConversationProps) {
  const parts = message?.parts ?? [];
  return (
    <section className="conversation" data-testid="conversation" aria-live="polite">
      {parts.length === 0 && <p className="muted">No events yet.</p>}
      {parts.map((part, i) => (
        <PartView key={partKey(part, i)} part={part} liveOutput={liveOutput} />
      ))}
    </section>
  );
}

function partKey(part: Part, i: number): string {
  if ('toolCallId' in part && typeof part.toolCallId === 'string') return `tool:${part.toolCallId}`;
  if ('id' in part && typeof part.id === 'string' && part.id) return `${part.type}:${part.id}`;
  return `${part.type}:${i}`;
}

function PartView({ part, liveOutput }: { part: Part; liveOutput: Record<string, string> }) {
  if (isToolOrDynamicToolUIPart(part)) return <ToolCall part={part} live={liveOutput[part.toolCallId]} />;
  switch (part.type) {
    case 'text':
      return (
        <div className="msg assistant" data-testid="text-part" data-state={part.state}>
          {part.text}
        </div>
      );
    case 'reasoning':
      return (
        <details className="reasoning" data-testid="reasoning">
          <summary>Reasoning{part.state === 'streaming' ? ' …' : ''}</summary>
          <pre>{part.text}</pre>
        </details>
      );
    case 'step-start':
      return <hr className="step" />;
    case 'source-url':
      return (
        <div className="source">
          Source:{' '}
          <a href={safeHref(part.url)} target="_blank" rel="noreferrer noopener">
            {part.title || part.url}
          </a>
        </div>
      );
    case 'file':
      return <div className="source">File: {part.filename ?? part.mediaType}</div>;
    default:
      if (part.type.startsWith('data-')) return <DataPart type={part.type} data={(part as { data?: unknown }).data} />;
      return null;
  }
}

type ToolPart = Extract<Part, { toolCallId: string }>;

function ToolCall({ part, live }: { part: ToolPart; live?: string }) {
  const name = getToolName(part);
  const failed = part.state === 'output-error';
  const running = part.state === 'input-streaming' || part.state === 'input-available';
  // Open while running or failed, unless the reader chose otherwise (a replay
  // passes through running again and must not undo their choice).
  const auto = failed || running;
  const [chosen, setChosen] = useState<boolean>();
  return (
    <details
      className={`tool${failed ? ' error' : ''}`}
      data-testid={`tool-${name}`}
      data-state={part.state}
      open={chosen ?? auto}
      onToggle={(e) => {
        const open = e.currentTarget.open;
        if (open !== (chosen ?? auto)) setChosen(open);
      }}
    >
      <summary>
        <span className="tool-name">{name}</span>{' '}
        <span className={`tool-state ${part.state}`}>{toolStateLabel(part.state)}</span>
      </summary>
      <div className="tool-body">
        <div className="label">Arguments</div>
        <pre data-testid="tool-input">{clip(pretty(part.input))}</pre>
        {part.state === 'output-available' && (
          <>
            <div className="label">Output</div>
            <pre data-testid="tool-output">{clip(pretty(part.output))}</pre>
          </>
        )}
        {failed && (
          <>
            <div className="label">Error</div>
            <pre className="error-text" data-testid="tool-error">
              {clip(part.errorText ?? 'the tool failed')}
            </pre>
          </>
        )}
        {running && live && (
          <>
            <div className="label">Output so far</div>
            <pre data-testid="tool-live-output">{clip(live)}</pre>
          </>
        )}
      </div>
    </details>
  );
}

function toolStateLabel(state: string): string {
  switch (state) {
    case 'input-streaming':
    case 'input-available':
      return 'running';
    case 'output-available':
      return 'done';
    case 'output-error':
      return 'failed';
    case 'output-denied':
      return 'denied';
    default:
      return state;
  }
}

function DataPart({ type, data }: { type: string; data: unknown }) {
  const d = obj(data);
  switch (type) {
    case 'data-user-input':
      return (
        <div className="msg user" data-testid="user-message">
          <div className="who">{d?.followUp ? 'Follow-up' : 'User'}</div>
          {str(d?.content) ?? pretty(data)}
        </div>
      );
    case 'data-steering':
      return (
        <div className="msg user steering" data-testid="steering-message">
          <div className="who">Steering</div>
          {str(d?.content) ?? pretty(data)}
        </div>
      );
    case 'data-error':
      return (
        <div className="stream-error" data-testid="stream-error" role="alert">
          {str(d?.errorText) ?? pretty(data)}
        </div>
      );
    case 'data-notice':
      return (
        <div className="notice warning" data-testid="notice">
          {str(d?.kind) ?? 'notice'}: {str(d?.message) ?? (d?.totalTurns !== undefined ? `turn ${String(d.totalTurns)}` : '')}
        </div>
      );
    case 'data-compaction':
      return <div className="notice">Context compacted</div>;
    case 'data-changes':
      return (
        <div className="notice" data-testid="changes-notice">
          Changes recorded{str(d?.message) ? `: ${str(d?.message)}` : ''}
        </div>
      );
    case 'data-subagent':
      return (
        <div className="notice" data-testid="subagent-notice">
          Subagent {str(d?.name) ?? '?'} {str(d?.state) ?? ''}
        </div>
      );
    case 'data-state':
    case 'data-phase':
    case 'data-plan':
    case 'data-usage':
    case 'data-text-discarded':
      // Shown in the header and side panels (state, plan, usage), or not at all:
      // a part with a fixed id keeps its first place, so in the flow it would mislead.
      return null;
    default:
      return (
        <details className="notice data" data-testid={type}>
          <summary>{type}</summary>
          <pre>{clip(pretty(data), 4000)}</pre>
        </details>
      );
  }
}

/** safeHref lets only http(s) links through. */
function safeHref(url: string): string {
  return /^https?:\/\//i.test(url) ? url : '#';
}
