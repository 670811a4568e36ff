// Pure helpers over the session's message and object: the facts the stream's
// data parts carry, the sanitised spec, numbers and ages. No React here.
import type { UIMessage } from 'ai';
import type { KubeObject } from './api';

export interface PlanItem {
  content: string;
  status: string;
}

export interface SubagentFact {
  name: string;
  state?: string;
  turnsUsed?: number;
}

/** The operator facts the stream's data-* parts carry (the last of each). */
export interface StreamFacts {
  state?: string;
  stateError?: string;
  plan?: PlanItem[];
  usage?: Record<string, unknown>;
  subagents: SubagentFact[];
  changes?: Record<string, unknown>;
  /** Bumped by every data-changes part: the diff is worth fetching again. */
  changesSeq?: number;
}

export function obj(v: unknown): Record<string, unknown> | undefined {
  return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}

export function str(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (typeof v === 'number' && Number.isFinite(v)) return String(v);
  return undefined;
}

export function num(v: unknown): number | undefined {
  if (typeof v === 'number' && Number.isFinite(v)) return v;
  if (typeof v === 'string' && v.trim() !== '' && Number.isFinite(Number(v))) return Number(v);
  return undefined;
}

/** get reads a nested field, undefined when any step is missing. */
export function get(o: unknown, ...path: string[]): unknown {
  let cur: unknown = o;
  for (const p of path) {
    const m = obj(cur);
    if (!m) return undefined;
    cur = m[p];
  }
  return cur;
}

function planItems(v: unknown): PlanItem[] | undefined {
  if (!Array.isArray(v)) return undefined;
  return v
    .map((x) => obj(x))
    .filter((x): x is Record<string, unknown> => !!x)
    .map((x) => ({ content: str(x.content) ?? '', status: str(x.status) ?? '' }));
}

/** streamFacts collects the data parts' facts; later parts win. */
export function streamFacts(message: UIMessage | undefined): StreamFacts {
  const facts: StreamFacts = { subagents: [] };
  if (!message) return facts;
  const subs = new Map<string, SubagentFact>();
  for (const part of message.parts) {
    if (!part.type.startsWith('data-')) continue;
    const data = (part as { data?: unknown }).data;
    const d = obj(data);
    switch (part.type) {
      case 'data-state':
      case 'data-phase':
        facts.state = str(d?.state) ?? str(d?.phase) ?? str(data) ?? facts.state;
        facts.stateError = str(d?.error);
        break;
      case 'data-plan':
        facts.plan = planItems(d?.items) ?? planItems(d?.plan) ?? planItems(data) ?? facts.plan;
        break;
      case 'data-usage':
        if (d) facts.usage = d;
        break;
      case 'data-subagent': {
        const name = str(d?.name) ?? str(d?.agentId);
        if (name) subs.set(name, { name, state: str(d?.state) ?? str(d?.phase), turnsUsed: num(d?.turnsUsed) });
        break;
      }
      case 'data-changes':
        facts.changes = d ?? { value: data };
        facts.changesSeq = (facts.changesSeq ?? 0) + 1;
        break;
    }
  }
  facts.subagents = [...subs.values()];
  return facts;
}

/** Keys whose values are never rendered. */
const SENSITIVE = /(secret|credential|password|passwd|^(access|bearer|auth|id)?[-_]?token$|api[-_]?key|authorization|headers?$|cookie|private[-_]?key)/i;
const REDACTED = '[redacted]';

/**
 * redact returns a copy of v that is safe to render: values under sensitive
 * keys are replaced (a *SecretRef keeps only the Secret's name), and env
 * entries keep their names only.
 */
export function redact(v: unknown, key = ''): unknown {
  if (key && SENSITIVE.test(key)) {
    const ref = obj(v);
    if (/secretref$/i.test(key) && ref && typeof ref.name === 'string') return { name: ref.name };
    return REDACTED;
  }
  if (Array.isArray(v)) {
    if (/^env$/i.test(key)) {
      return v.map((e) => {
        const m = obj(e);
        return m && typeof m.name === 'string' ? { name: m.name, value: REDACTED } : REDACTED;
      });
    }
    return v.map((x) => redact(x));
  }
  const m = obj(v);
  if (!m) return v;
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(m)) out[k] = redact(x, k);
  return out;
}

/** safeSpec is the spec as rendered: redacted. */
export function safeSpec(session: KubeObject | undefined): unknown {
  return redact(get(session, 'spec') ?? {});
}

const TERMINAL = new Set(['Succeeded', 'Failed', 'Aborted']);

export function isTerminal(phase: string | undefined): boolean {
  return !!phase && TERMINAL.has(phase);
}

/** age formats the time since t (RFC 3339) as kubectl does: 5s, 3m, 2h, 4d. */
export function age(t: string | undefined, now = Date.now()): string | undefined {
  if (!t) return undefined;
  const ms = Date.parse(t);
  if (Number.isNaN(ms)) return undefined;
  const s = Math.max(0, Math.floor((now - ms) / 1000));
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 120) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h`;
  return `${Math.floor(h / 24)}d`;
}

export function formatNumber(v: unknown): string {
  const n = num(v);
  return n === undefined ? '' : n.toLocaleString('en-US');
}

/** pretty renders a tool input or output: strings as they are, else JSON. */
export function pretty(v: unknown): string {
  if (v === undefined) return '';
  if (typeof v === 'string') return v;
  try {
    return JSON.stringify(v, null, 2) ?? String(v);
  } catch {
    return String(v);
  }
}

/** clip bounds what one pre shows; the rest is counted, not rendered. */
export function clip(s: string, max = 20000): string {
  return s.length <= max ? s : `${s.slice(0, max)}\n… (${s.length - max} more characters)`;
}
