// One session: its conversation as it streams, the subagent tree, the plan,
// the change as a diff, and the controls (steer, follow-up, abort,
// suspend/resume). The object is polled every 2 s for what the stream does
// not carry (phase, children, spend); nothing secret is rendered.
import { useEffect, useRef, useState } from 'react';
import { act, getDiff, getSession, type Action } from './api';
import { Conversation } from './Conversation';
import { Diff } from './Diff';
import { errText, usePoll, useSessionStream } from './hooks';
import { formatNumber, get, isTerminal, num, obj, safeSpec, str, streamFacts, type PlanItem } from './model';
import { PhaseBadge } from './PhaseBadge';
import { listHref, sessionHref } from './router';

interface Child {
  name: string;
  phase?: string;
  tokens?: number;
  cost?: string;
}

export function SessionPage({ namespace, name }: { namespace: string; name: string }) {
  const session = usePoll((signal) => getSession(namespace, name, signal), 2000, [namespace, name]);
  const stream = useSessionStream(namespace, name);
  const facts = streamFacts(stream.message);
  const obj0 = session.data;
  const phase = str(get(obj0, 'status', 'phase'));

  // A finished stream starts again when the session leaves a terminal phase.
  const lastPhase = useRef(phase);
  useEffect(() => {
    if (lastPhase.current !== phase && stream.status === 'finished' && !isTerminal(phase)) stream.reconnect();
    lastPhase.current = phase;
  }, [phase, stream]);

  const children = mergeChildren(get(obj0, 'status', 'children'), facts.subagents);
  const plan = facts.plan ?? planOf(get(obj0, 'status', 'plan'));
  const changes = obj(get(obj0, 'status', 'changes')) ?? facts.changes;
  const parent = str(get(obj0, 'spec', 'parentRef', 'name'));
  const model = str(get(obj0, 'spec', 'model', 'name'));
  const provider = str(get(obj0, 'spec', 'model', 'provider'));
  const usage = obj(get(obj0, 'status', 'usage'));
  const tokens = num(get(obj0, 'status', 'treeTokens')) ?? num(usage?.total) ?? num(facts.usage?.totalTokens);
  const cost = str(get(obj0, 'status', 'treeCost')) ?? str(get(obj0, 'status', 'cost'));
  const currency = str(get(obj0, 'status', 'currency')) ?? '';
  const turns = num(get(obj0, 'status', 'turns')) ?? num(facts.usage?.turns);
  const error = str(get(obj0, 'status', 'error'));
  const result = str(get(obj0, 'status', 'result'));

  return (
    <section className="session">
      <nav className="crumbs">
        <a href={listHref()}>Sessions</a> / <a href={listHref(namespace)}>{namespace}</a> / <b>{name}</b>
        {parent && (
          <>
            {' '}
            (child of <a href={sessionHref(namespace, parent)} data-testid="parent-link">{parent}</a>)
          </>
        )}
      </nav>
      <div className="summary">
        <PhaseBadge phase={phase} testid="phase" />
        {model && (
          <span>
            model <b>{model}</b>
            {provider ? ` (${provider})` : ''}
          </span>
        )}
        {turns !== undefined && <span>turns {formatNumber(turns)}</span>}
        {tokens !== undefined && <span>tokens {formatNumber(tokens)}</span>}
        {cost && (
          <span>
            cost {cost} {currency}
          </span>
        )}
        {facts.state && (
          <span className={facts.stateError ? 'error-text' : 'muted'} data-testid="agent-state">
            agent {facts.state}
            {facts.stateError ? `: ${facts.stateError}` : ''}
          </span>
        )}
        <span className={`stream-status ${stream.status}`} data-testid="stream-status">
          stream {stream.status}
        </span>
      </div>
      {session.error && (
        <p className="error-text" role="alert">
          {session.error}
        </p>
      )}
      {stream.error && (
        <p className="error-text" role="alert" data-testid="stream-failure">
          stream: {stream.error} (retrying)
        </p>
      )}
      {error && (
        <p className="error-text" data-testid="session-error">
          {error}
        </p>
      )}
      <div className="columns">
        <div className="main-col">
          <Conversation message={stream.message} liveOutput={stream.liveOutput} />
          {stream.problems.length > 0 && (
            <details className="problems">
              <summary>{stream.problems.length} stream problem(s)</summary>
              <ul>
                {stream.problems.map((p, i) => (
                  <li key={i}>{p}</li>
                ))}
              </ul>
            </details>
          )}
          {result && (
            <div className="result">
              <h3>Result</h3>
              <pre data-testid="result">{result}</pre>
            </div>
          )}
          <Controls
            namespace={namespace}
            name={name}
            onDone={() => {
              session.refresh();
              // A live stream carries what the action causes; an ended one is opened again.
              if (stream.status === 'finished' || stream.status === 'closed') stream.reconnect();
            }}
          />
          <Changes namespace={namespace} name={name} changes={changes} version={changesVersion(changes, facts.changesSeq)} />
        </div>
        <aside className="side">
          <h3>Subagents</h3>
          {children.length === 0 ? (
            <p className="muted">None.</p>
          ) : (
            <ul className="tree" data-testid="child-tree">
              {children.map((c) => (
                <li key={c.name}>
                  <a href={sessionHref(namespace, c.name)} data-testid={`child-${c.name}`}>
                    {c.name}
                  </a>{' '}
                  <PhaseBadge phase={c.phase} />
                  {c.tokens !== undefined && <span className="muted"> {formatNumber(c.tokens)} tok</span>}
                  {c.cost && <span className="muted"> {c.cost}</span>}
                </li>
              ))}
            </ul>
          )}
          <h3>Plan</h3>
          {plan && plan.length > 0 ? (
            <ol className="plan" data-testid="plan">
              {plan.map((p, i) => (
                <li key={i} className={`plan-${p.status}`}>
                  <span className="plan-status">{planMark(p.status)}</span> {p.content}
                </li>
              ))}
            </ol>
          ) : (
            <p className="muted">No plan.</p>
          )}
          <details className="spec">
            <summary>Spec</summary>
            <pre data-testid="spec">{JSON.stringify(safeSpec(obj0), null, 2)}</pre>
          </details>
        </aside>
      </div>
    </section>
  );
}

function Controls({ namespace, name, onDone }: { namespace: string; name: string; onDone: () => void }) {
  const [text, setText] = useState('');
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState<{ ok: boolean; text: string }>();
  const run = async (action: Action) => {
    if ((action === 'steer' || action === 'followup') && !text.trim()) {
      setResult({ ok: false, text: 'Type a message first.' });
      return;
    }
    setBusy(true);
    try {
      const out = await act(namespace, name, action, text);
      setResult({ ok: true, text: `${action}: ${out}` });
      if (action === 'steer' || action === 'followup') setText('');
      onDone();
    } catch (err) {
      setResult({ ok: false, text: `${action}: ${errText(err)}` });
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="controls">
      <textarea
        data-testid="steer-input"
        value={text}
        rows={3}
        placeholder="Message to the agent"
        onChange={(e) => setText(e.target.value)}
      />
      <div className="buttons">
        <button data-testid="steer" disabled={busy} onClick={() => run('steer')}>
          Steer
        </button>
        <button data-testid="followup" disabled={busy} onClick={() => run('followup')}>
          Follow-up
        </button>
        <span className="gap" />
        <button data-testid="suspend" disabled={busy} onClick={() => run('suspend')}>
          Suspend
        </button>
        <button data-testid="resume" disabled={busy} onClick={() => run('resume')}>
          Resume
        </button>
        <button
          data-testid="abort"
          className="danger"
          disabled={busy}
          onClick={() => run('abort')}
        >
          Abort
        </button>
      </div>
      {result && (
        <p className={result.ok ? 'ok-text' : 'error-text'} data-testid="action-result" role="status">
          {result.text}
        </p>
      )}
    </div>
  );
}

function Changes({
  namespace,
  name,
  changes,
  version,
}: {
  namespace: string;
  name: string;
  changes?: Record<string, unknown>;
  version: string;
}) {
  const [diff, setDiff] = useState<string | null>();
  const [error, setError] = useState<string>();
  useEffect(() => {
    if (!changes) return;
    const ctl = new AbortController();
    getDiff(namespace, name, ctl.signal)
      .then((d) => {
        setDiff(d);
        setError(undefined);
      })
      .catch((err) => {
        if (!ctl.signal.aborted) setError(errText(err));
      });
    return () => ctl.abort();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [namespace, name, version]);
  if (!changes) return null;
  const files = Array.isArray(changes.files) ? changes.files.map((f) => obj(f)).filter((f) => !!f) : [];
  return (
    <div className="changes" data-testid="changes">
      <h3>Change</h3>
      <p>
        {str(changes.branch) && (
          <>
            branch <code>{str(changes.branch)}</code>{' '}
          </>
        )}
        {str(changes.head) && (
          <>
            head <code>{str(changes.head)?.slice(0, 12)}</code>{' '}
          </>
        )}
        {num(changes.filesChanged) !== undefined && <>{formatNumber(changes.filesChanged)} files </>}
        {num(changes.insertions) !== undefined && <span className="d-add">+{formatNumber(changes.insertions)} </span>}
        {num(changes.deletions) !== undefined && <span className="d-del">-{formatNumber(changes.deletions)} </span>}
        {changes.pushed === true && <span>pushed</span>}
      </p>
      {files.length > 0 && (
        <ul className="files">
          {files.map((f, i) => (
            <li key={i}>
              <code>{str(f.path)}</code> {str(f.status) ?? ''}{' '}
              {f.binary ? 'binary' : `+${formatNumber(f.insertions) || 0} -${formatNumber(f.deletions) || 0}`}
            </li>
          ))}
        </ul>
      )}
      {error && <p className="error-text">{error}</p>}
      {diff === null && <p className="muted">No diff.</p>}
      {diff && <Diff text={diff} />}
    </div>
  );
}

function changesVersion(changes: Record<string, unknown> | undefined, seq: number | undefined): string {
  if (!changes) return '';
  return [str(changes.head), str(changes.recordedTime), str(changes.patchBytes), seq ?? 0].join('|');
}

function mergeChildren(statusChildren: unknown, subagents: { name: string; state?: string }[]): Child[] {
  const out = new Map<string, Child>();
  if (Array.isArray(statusChildren)) {
    for (const c of statusChildren) {
      const m = obj(c);
      const n = str(m?.name);
      if (!n) continue;
      out.set(n, { name: n, phase: str(m?.phase), tokens: num(m?.treeTokens), cost: str(m?.treeCost) });
    }
  }
  for (const s of subagents) {
    if (!out.has(s.name)) out.set(s.name, { name: s.name, phase: s.state });
  }
  return [...out.values()];
}

function planOf(v: unknown): PlanItem[] | undefined {
  if (!Array.isArray(v)) return undefined;
  return v.map((x) => ({ content: str(obj(x)?.content) ?? '', status: str(obj(x)?.status) ?? '' }));
}

function planMark(status: string): string {
  switch (status) {
    case 'completed':
      return '✔';
    case 'in_progress':
      return '▶';
    default:
      return '○';
  }
}
