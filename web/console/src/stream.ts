// Reading a session's AI SDK v6 UI message stream with the SDK's own code:
// parseJsonEventStream (server-sent events → validated UIMessageChunks with
// uiMessageChunkSchema) and readUIMessageStream (chunks → UIMessage
// snapshots). Nothing here parses the wire format by hand.
//
// Why readUIMessageStream and not useChat: useChat's Chat rethrows an `error`
// chunk and stops reading, while a session reports recoverable errors (a
// retried model call, say) in the middle of its stream and goes on. Here an
// `error` chunk becomes a `data-error` part at its place in the message, so
// the conversation shows it highlighted and the rest of the stream still
// renders.
import {
  parseJsonEventStream,
  readUIMessageStream,
  uiMessageChunkSchema,
  type UIMessage,
  type UIMessageChunk,
} from 'ai';

/** The payload of the data-error parts this module makes of error chunks. */
export interface StreamErrorData {
  errorText: string;
}

export interface StreamCallbacks {
  /** Every new state of the session's message, as the SDK rebuilds it. */
  onMessage(message: UIMessage): void;
  /** Transient data chunks (data-tool-output): delivered once, never parts. */
  onTransient?(chunk: { type: string; id?: string; data: unknown }): void;
  /** A chunk the SDK's schema rejects, or an order the SDK's reader refuses. */
  onProblem?(message: string): void;
}

export interface StreamResult {
  /** Whether the stream carried its `finish` chunk (the session's stream ended). */
  finished: boolean;
  /** The last message state, undefined when the stream carried no part. */
  message?: UIMessage;
}

type ParsedChunk = Awaited<ReturnType<typeof parseChunks>> extends ReadableStream<infer T> ? T : never;

function parseChunks(body: ReadableStream<Uint8Array>) {
  return parseJsonEventStream({ stream: body, schema: uiMessageChunkSchema });
}

/**
 * consumeSessionStream reads one server-sent-events body of a session's
 * stream to its end and reports every message state.
 */
export async function consumeSessionStream(
  body: ReadableStream<Uint8Array>,
  cb: StreamCallbacks,
): Promise<StreamResult> {
  let finished = false;
  let errors = 0;
  const opened = Date.now();
  const chunks = parseChunks(body).pipeThrough(
    new TransformStream<ParsedChunk, UIMessageChunk>({
      transform(parsed, controller) {
        if (!parsed.success) {
          cb.onProblem?.(`invalid chunk skipped: ${describe(parsed.error)}`);
          return;
        }
        const chunk = parsed.value;
        switch (chunk.type) {
          case 'error':
            errors++;
            controller.enqueue({
              type: 'data-error',
              id: `stream-error-${errors}`,
              data: { errorText: chunk.errorText } satisfies StreamErrorData,
            });
            return;
          case 'finish':
            finished = true;
            break;
          default:
            if (chunk.type.startsWith('data-') && 'transient' in chunk && chunk.transient) {
              cb.onTransient?.({ type: chunk.type, id: chunk.id, data: chunk.data });
            }
            if (chunk.type.startsWith('data-') && 'data' in chunk) measureLatency(chunk.data, opened);
        }
        controller.enqueue(chunk);
      },
    }),
  );
  let last: UIMessage | undefined;
  for await (const message of readUIMessageStream({
    stream: chunks,
    onError: (err) => cb.onProblem?.(describe(err)),
  })) {
    last = message;
    cb.onMessage(message);
  }
  return { finished, message: last };
}

/**
 * openSessionStream GETs url (the session's stream endpoint) and consumes it.
 * The signal aborts the request and the reading.
 */
export async function openSessionStream(
  url: string,
  cb: StreamCallbacks,
  signal?: AbortSignal,
  fetchImpl: typeof fetch = globalThis.fetch,
): Promise<StreamResult> {
  const res = await fetchImpl(url, {
    method: 'GET',
    credentials: 'same-origin',
    headers: { Accept: 'text/event-stream' },
    signal,
  });
  if (!res.ok) {
    const text = (await res.text().catch(() => '')).trim();
    throw new Error(`${res.status} ${res.statusText}${text ? `: ${text.slice(0, 300)}` : ''}`);
  }
  if (!res.body) throw new Error('the stream response has no body');
  return consumeSessionStream(res.body, cb);
}

function describe(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}

/**
 * measureLatency records, when the browser e2e asks for it (it sets
 * window.__aoConsoleLatencies to an array before the page loads), how long
 * after its event was published a data part reached the page's next frame:
 * Date.now() at that frame minus the event's time, for events published
 * after this stream was opened (replayed ones measure the replay, not the
 * path). The clocks are the same machine's in the e2e.
 */
function measureLatency(data: unknown, opened: number): void {
  const sink = (globalThis as { __aoConsoleLatencies?: number[] }).__aoConsoleLatencies;
  if (!Array.isArray(sink) || typeof data !== 'object' || data === null) return;
  const time = (data as { time?: unknown }).time;
  if (typeof time !== 'string') return;
  const published = Date.parse(time);
  if (Number.isNaN(published) || published < opened) return;
  const record = () => sink.push(Date.now() - published);
  if (typeof requestAnimationFrame === 'function') requestAnimationFrame(record);
  else record();
}
