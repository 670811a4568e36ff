// The live session list: GET api/sessions every 2 s, filtered by namespace.
import { useEffect, useState } from 'react';
import { listSessions, type SessionSummary } from './api';
import { listHref, navigate, sessionHref } from './router';
import { usePoll } from './hooks';
import { age, formatNumber, str } from './model';
import { PhaseBadge } from './PhaseBadge';

export function SessionList({ namespace }: { namespace?: string }) {
  const sessions = usePoll((signal) => listSessions(namespace, signal), 2000, [namespace]);
  const [filter, setFilter] = useState(namespace ?? '');
  const [seen, setSeen] = useState<string[]>([]);
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => setFilter(namespace ?? ''), [namespace]);
  useEffect(() => {
    setNow(Date.now());
    const names = (sessions.data ?? []).map((s) => s.namespace).filter((n): n is string => !!n);
    setSeen((prev) => {
      const all = [...new Set([...prev, ...names])].sort();
      return all.length === prev.length ? prev : all;
    });
  }, [sessions.data]);

  const rows = sortRows(sessions.data ?? []);
  return (
    <section>
      <h1>Sessions</h1>
      <form
        className="filter"
        onSubmit={(e) => {
          e.preventDefault();
          navigate(listHref(filter.trim() || undefined));
        }}
      >
        <label>
          Namespace{' '}
          <input
            data-testid="namespace-filter"
            list="namespaces"
            value={filter}
            placeholder="the kubeconfig's namespace"
            onChange={(e) => setFilter(e.target.value)}
          />
        </label>
        <datalist id="namespaces">
          {seen.map((n) => (
            <option key={n} value={n} />
          ))}
        </datalist>
        <button type="submit">Filter</button>
        {namespace && (
          <button type="button" onClick={() => navigate(listHref())}>
            All
          </button>
        )}
      </form>
      {sessions.error && (
        <p className="error-text" role="alert">
          {sessions.error}
        </p>
      )}
      <table className="sessions" data-testid="session-list">
        <thead>
          <tr>
            <th>Namespace</th>
            <th>Name</th>
            <th>Phase</th>
            <th>Model</th>
            <th>Parent</th>
            <th className="num">Turns</th>
            <th className="num">Tokens</th>
            <th className="num">Cost</th>
            <th className="num">Age</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((s) => {
            const ns = s.namespace ?? '';
            const name = s.name ?? '';
            const href = sessionHref(ns, name);
            return (
              <tr
                key={`${ns}/${name}`}
                data-testid={`session-row-${name}`}
                className="row"
                tabIndex={0}
                onClick={() => navigate(href)}
                onKeyDown={(e) => {
                  if (e.key === 'Enter') navigate(href);
                }}
              >
                <td>{ns}</td>
                <td>
                  <a href={href}>{name}</a>
                </td>
                <td>
                  <PhaseBadge phase={s.phase} />
                </td>
                <td>{str(s.model) ?? ''}</td>
                <td>{s.parent ? <a href={sessionHref(ns, s.parent)} onClick={(e) => e.stopPropagation()}>{s.parent}</a> : ''}</td>
                <td className="num">{formatNumber(s.turns)}</td>
                <td className="num">{formatNumber(s.tokens)}</td>
                <td className="num">{str(s.cost) ?? ''}</td>
                <td className="num">{age(s.created, now) ?? ''}</td>
              </tr>
            );
          })}
          {!sessions.loading && rows.length === 0 && (
            <tr>
              <td colSpan={9} className="muted">
                No sessions{namespace ? ` in ${namespace}` : ''}.
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </section>
  );
}

/** sortRows orders the newest first, then by namespace and name. */
export function sortRows(rows: SessionSummary[]): SessionSummary[] {
  return [...rows].sort((a, b) => {
    const ta = Date.parse(a.created ?? '') || 0;
    const tb = Date.parse(b.created ?? '') || 0;
    if (ta !== tb) return tb - ta;
    return `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`);
  });
}
