// React hooks: polling a JSON endpoint, and following a session's stream
// (replayed from the start on every connection, so a reconnection rebuilds
// the whole conversation and loses nothing).
import type { UIMessage } from 'ai';
import { useCallback, useEffect, useRef, useState } from 'react';
import { sessionURL } from './api';
import { openSessionStream } from './stream';

export interface Polled<T> {
  data?: T;
  error?: string;
  loading: boolean;
  refresh: () => void;
}

/** usePoll calls load now and every intervalMs while the page is mounted. */
export function usePoll<T>(load: (signal: AbortSignal) => Promise<T>, intervalMs: number, deps: unknown[]): Polled<T> {
  const [state, setState] = useState<{ data?: T; error?: string; loading: boolean }>({ loading: true });
  const [tick, setTick] = useState(0);
  const refresh = useCallback(() => setTick((t) => t + 1), []);
  useEffect(() => {
    const ctl = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async () => {
      try {
        const data = await load(ctl.signal);
        if (!ctl.signal.aborted) setState({ data, loading: false });
      } catch (err) {
        if (!ctl.signal.aborted) setState((s) => ({ data: s.data, error: errText(err), loading: false }));
      }
      if (!ctl.signal.aborted) timer = setTimeout(run, intervalMs);
    };
    void run();
    return () => {
      ctl.abort();
      if (timer) clearTimeout(timer);
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, tick, intervalMs]);
  return { ...state, refresh };
}

export type StreamStatus = 'connecting' | 'streaming' | 'finished' | 'closed' | 'error';

export interface SessionStream {
  message?: UIMessage;
  liveOutput: Record<string, string>;
  status: StreamStatus;
  problems: string[];
  error?: string;
  /** reconnect replays the stream again (after a follow-up or resume, say). */
  reconnect: () => void;
}

const LIVE_OUTPUT_MAX = 64 * 1024;
/** How long a reconnection's replay may lag behind what is shown before it is shown anyway. */
const CATCH_UP_MS = 3000;

/**
 * useSessionStream follows GET api/sessions/{ns}/{name}/stream. A stream that
 * ends without its finish chunk, or fails, is opened again after a pause
 * (the server replays from the start, so nothing is lost or doubled).
 */
export function useSessionStream(ns: string, name: string): SessionStream {
  const [message, setMessage] = useState<UIMessage>();
  const [liveOutput, setLiveOutput] = useState<Record<string, string>>({});
  const [status, setStatus] = useState<StreamStatus>('connecting');
  const [problems, setProblems] = useState<string[]>([]);
  const [error, setError] = useState<string>();
  const [generation, setGeneration] = useState(0);
  const reconnect = useCallback(() => setGeneration((g) => g + 1), []);
  const retries = useRef(0);
  // How many parts the page shows: a replay is held back until it has as many.
  const shownParts = useRef(0);

  useEffect(() => {
    const ctl = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    let first = true;
    let catchUpUntil = 0;
    let pending: UIMessage | undefined;
    let flush: ReturnType<typeof setTimeout> | undefined;
    const show = (m: UIMessage) => {
      pending = undefined;
      shownParts.current = m.parts.length;
      setMessage(m);
    };
    const connect = async () => {
      setStatus('connecting');
      first = true;
      try {
        const res = await openSessionStream(
          sessionURL(ns, name, 'stream'),
          {
            onMessage: (m) => {
              if (ctl.signal.aborted) return;
              if (first) {
                // A new replay: start from its state, not the previous connection's.
                first = false;
                retries.current = 0;
                setProblems([]);
                setLiveOutput({});
                setError(undefined);
                setStatus('streaming');
                catchUpUntil = Date.now() + CATCH_UP_MS;
              }
              // While a reconnection replays what is already shown, keep showing
              // it: the page neither flickers nor loses what the reader opened.
              if (catchUpUntil && m.parts.length < shownParts.current && Date.now() < catchUpUntil) {
                pending = m;
                if (!flush) {
                  flush = setTimeout(() => {
                    flush = undefined;
                    if (pending && !ctl.signal.aborted) show(pending);
                  }, Math.max(0, catchUpUntil - Date.now()));
                }
                return;
              }
              catchUpUntil = 0;
              show(m);
            },
            onTransient: (chunk) => {
              if (ctl.signal.aborted || chunk.type !== 'data-tool-output') return;
              const d = chunk.data as { toolCallId?: unknown; delta?: unknown } | undefined;
              if (typeof d?.toolCallId !== 'string' || typeof d.delta !== 'string') return;
              const id = d.toolCallId;
              const delta = d.delta;
              setLiveOutput((prev) => ({ ...prev, [id]: ((prev[id] ?? '') + delta).slice(-LIVE_OUTPUT_MAX) }));
            },
            onProblem: (p) => {
              if (!ctl.signal.aborted) setProblems((ps) => [...ps.slice(-19), p]);
            },
          },
          ctl.signal,
        );
        if (ctl.signal.aborted) return;
        if (pending) show(pending);
        if (res.finished) {
          setStatus('finished');
          return;
        }
        setStatus('closed');
      } catch (err) {
        if (ctl.signal.aborted) return;
        setError(errText(err));
        setStatus('error');
      }
      // Closed early or failed: replay again, backing off to 10 s.
      retries.current++;
      timer = setTimeout(connect, Math.min(10000, 1000 * retries.current));
    };
    void connect();
    return () => {
      ctl.abort();
      if (timer) clearTimeout(timer);
      if (flush) clearTimeout(flush);
    };
  }, [ns, name, generation]);

  return { message, liveOutput, status, problems, error, reconnect };
}

export function errText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
